//! What an operator asks of the allocations this client runs, through the HTTP API of its
//! agent (a server forwards such requests to the node's agent): restart tasks in place
//! (`alloc restart`) and send them a signal (`alloc signal`).
//!
//! ```text
//!  HTTP handler ──▶ ClientHandle::restart / signal ──▶ the task runners' TaskControl queues
//!                   (which tasks: the one named, else every running one)
//!               ◀── each runner's answer, or a timeout
//! ```

use std::sync::Arc;
use std::time::Duration;

use teamster_storage::model::TaskStateValue;
use tokio::sync::{mpsc, oneshot};

use crate::client::alloc_runner::{TaskControl, TaskOpError};
use crate::client::{lock, Shared};

/// How long a task may take to carry out a request, on top of its kill timeout.
const ANSWER_MARGIN: Duration = Duration::from_secs(10);

/// Why an operator's request was refused or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocOpError {
    /// This client does not run (or no longer knows) the allocation.
    #[error("Unknown allocation {0:?} on this client")]
    UnknownAlloc(String),
    /// The allocation's group has no such task.
    #[error("Unknown task {task:?} in allocation {alloc_id}")]
    UnknownTask {
        /// The task named.
        task: String,
        /// The allocation.
        alloc_id: String,
    },
    /// Not a signal name.
    #[error("Unknown signal {0:?}")]
    UnknownSignal(String),
    /// The request contradicts itself (a task name and "all tasks").
    #[error("{0}")]
    Invalid(String),
    /// No task of the allocation is running.
    #[error("allocation {0} has no running task")]
    NothingRunning(String),
    /// A task refused or failed the request.
    #[error(transparent)]
    Task(#[from] TaskOpError),
    /// A task did not answer in time.
    #[error("task {task:?} did not answer within {waited:?}")]
    Timeout {
        /// The task.
        task: String,
        /// How long it was waited for.
        waited: Duration,
    },
}

/// The HTTP API's way into this client's allocations: cheap to clone.
#[derive(Clone)]
pub struct ClientHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ClientHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientHandle")
            .field("node_id", &self.node_id())
            .finish()
    }
}

impl ClientHandle {
    pub(crate) fn new(shared: Arc<Shared>) -> ClientHandle {
        ClientHandle { shared }
    }

    /// This node's ID.
    pub fn node_id(&self) -> String {
        self.shared.state().node_id.clone()
    }

    /// Whether this client runs or ran the allocation (and still keeps it).
    pub fn has_alloc(&self, alloc_id: &str) -> bool {
        self.shared.state().allocs.contains_key(alloc_id)
    }

    /// The tasks a request is for: `task`, else (`None`) every running task of the
    /// allocation; each with where to send it.
    fn targets(
        &self,
        alloc_id: &str,
        task: Option<&str>,
    ) -> Result<Vec<(String, mpsc::Sender<TaskControl>)>, AllocOpError> {
        let (group_tasks, running): (Vec<String>, Vec<String>) = {
            let st = self.shared.state();
            let local = st
                .allocs
                .get(alloc_id)
                .ok_or_else(|| AllocOpError::UnknownAlloc(alloc_id.to_string()))?;
            let group_tasks = local
                .job
                .task_groups
                .iter()
                .find(|g| g.name == local.alloc.task_group)
                .map(|g| g.tasks.iter().map(|t| t.name.clone()).collect())
                .unwrap_or_default();
            let running = local
                .task_states
                .iter()
                .filter(|(_, s)| s.state == TaskStateValue::Running)
                .map(|(name, _)| name.clone())
                .collect();
            (group_tasks, running)
        };
        let runners = lock(&self.shared.runners);
        let runner = runners.get(alloc_id);
        let sender = |name: &str| runner.and_then(|r| r.task(name)).cloned();
        match task {
            Some(name) => {
                if !group_tasks.iter().any(|t| t == name) {
                    return Err(AllocOpError::UnknownTask {
                        task: name.to_string(),
                        alloc_id: alloc_id.to_string(),
                    });
                }
                let tx = sender(name)
                    .filter(|_| running.iter().any(|t| t == name))
                    .ok_or_else(|| TaskOpError::NotRunning(name.to_string()))?;
                Ok(vec![(name.to_string(), tx)])
            }
            None => {
                let all: Vec<_> = running
                    .iter()
                    .filter_map(|name| sender(name).map(|tx| (name.clone(), tx)))
                    .collect();
                if all.is_empty() {
                    return Err(AllocOpError::NothingRunning(alloc_id.to_string()));
                }
                Ok(all)
            }
        }
    }

    /// How long a task may take to answer: its longest possible kill and a margin.
    fn answer_within(&self) -> Duration {
        self.shared.config.max_kill_timeout + ANSWER_MARGIN
    }

    /// Send one request to each target and wait for every answer (the first failure is
    /// returned).
    async fn ask(
        &self,
        targets: Vec<(String, mpsc::Sender<TaskControl>)>,
        make: impl Fn(oneshot::Sender<Result<(), TaskOpError>>) -> TaskControl,
    ) -> Result<(), AllocOpError> {
        let waited = self.answer_within();
        let mut answers = Vec::new();
        for (task, tx) in targets {
            let (reply, answer) = oneshot::channel();
            // A runner that ended meanwhile dropped its queue: the task is not running.
            if tx.send(make(reply)).await.is_err() {
                return Err(TaskOpError::NotRunning(task).into());
            }
            answers.push((task, answer));
        }
        for (task, answer) in answers {
            match tokio::time::timeout(waited, answer).await {
                Err(_) => return Err(AllocOpError::Timeout { task, waited }),
                // Dropped unanswered: the runner ended with the request queued.
                Ok(Err(_)) => return Err(TaskOpError::NotRunning(task).into()),
                Ok(Ok(result)) => result?,
            }
        }
        Ok(())
    }

    /// Restart tasks in place (Nomad's `Allocations.Restart`): `task`, or with `None` every
    /// running task. `all_tasks` asks for every task too (a dead task is not started again:
    /// teamster runs no lifecycle tasks, which is what Nomad's `AllTasks` adds); it may not
    /// be combined with a task name.
    pub async fn restart(
        &self,
        alloc_id: &str,
        task: Option<&str>,
        all_tasks: bool,
    ) -> Result<(), AllocOpError> {
        if all_tasks && task.is_some() {
            return Err(AllocOpError::Invalid(
                "task name cannot be set when restarting all tasks".into(),
            ));
        }
        let targets = self.targets(alloc_id, task)?;
        self.ask(targets, |reply| TaskControl::Restart { reply })
            .await
    }

    /// Send `signal` (a name such as `SIGUSR1`) to `task`, or with `None` to every running
    /// task (Nomad's `Allocations.Signal`).
    pub async fn signal(
        &self,
        alloc_id: &str,
        task: Option<&str>,
        signal: &str,
    ) -> Result<(), AllocOpError> {
        let (name, number) = crate::client::signal::parse(signal)
            .ok_or_else(|| AllocOpError::UnknownSignal(signal.to_string()))?;
        let targets = self.targets(alloc_id, task)?;
        self.ask(targets, |reply| TaskControl::Signal {
            name,
            signal: number,
            reply,
        })
        .await
    }
}
