//! The servers a client talks to, with failover: a call goes to the server that answered
//! last; when it is unreachable or has no leader to forward to, the next one is tried. The
//! list grows with the servers a registration or heartbeat names.

use futures::future::BoxFuture;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::rpc::{Pool, ServiceCaller, ServiceError, ServiceRequest, ServiceResponse};

/// The client's view of the servers.
pub struct Servers {
    pool: Pool,
    /// The credential every call carries: the node's secret.
    token: Mutex<Option<String>>,
    addrs: Mutex<Vec<String>>,
    current: AtomicUsize,
}

impl std::fmt::Debug for Servers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Servers")
            .field(
                "addrs",
                &*self.addrs.lock().unwrap_or_else(|p| p.into_inner()),
            )
            .finish_non_exhaustive()
    }
}

impl Servers {
    /// Servers at `addrs` (`host:port`), called through `pool`.
    pub fn new(pool: Pool, addrs: Vec<String>) -> Servers {
        Servers {
            pool,
            token: Mutex::new(None),
            addrs: Mutex::new(addrs),
            current: AtomicUsize::new(0),
        }
    }

    /// Send `token` (the node's secret) with every call from now on; servers with ACLs on
    /// check it against the node a call is about.
    pub fn set_token(&self, token: String) {
        *self.token.lock().unwrap_or_else(|p| p.into_inner()) = Some(token);
    }

    /// The known server addresses.
    pub fn addrs(&self) -> Vec<String> {
        self.addrs.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replace every known address with `addrs` (an operator's `PUT /v1/agent/servers`); the
    /// next call starts with the first.
    pub fn replace(&self, addrs: Vec<String>) {
        let mut known = self.addrs.lock().unwrap_or_else(|p| p.into_inner());
        *known = addrs;
        self.current.store(0, Ordering::Relaxed);
    }

    /// Learn servers named by a server's answer.
    pub fn learn(&self, more: &[String]) {
        let mut addrs = self.addrs.lock().unwrap_or_else(|p| p.into_inner());
        for a in more {
            if !addrs.contains(a) {
                addrs.push(a.clone());
            }
        }
    }

    /// Call one server after another until one answers: a server that cannot be reached,
    /// has no leader to forward to, or is still starting makes way for the next.
    async fn call_any(&self, req: ServiceRequest) -> Result<ServiceResponse, ServiceError> {
        let token = self.token.lock().unwrap_or_else(|p| p.into_inner()).clone();
        self.call_with(req, token).await
    }

    /// What an allocation's tasks' templates read: each set carries its task's workload
    /// identity, and the servers answer what that identity may read.
    pub async fn template_read(
        &self,
        req: crate::rpc::service::variables::TemplateReadRequest,
    ) -> Result<crate::rpc::service::variables::TemplateReadResponse, ServiceError> {
        match self.call_any(ServiceRequest::TemplateRead(req)).await? {
            ServiceResponse::TemplateRead(answer) => Ok(answer),
            other => Err(ServiceError::unexpected("Template.Read", other.name())),
        }
    }

    async fn call_with(
        &self,
        req: ServiceRequest,
        token: Option<String>,
    ) -> Result<ServiceResponse, ServiceError> {
        let addrs = self.addrs();
        if addrs.is_empty() {
            return Err(ServiceError::Unavailable {
                reason: "no servers known: client.servers is empty".into(),
            });
        }
        let method = req.method();
        let start = self.current.load(Ordering::Relaxed);
        let mut last = None;
        for i in 0..addrs.len() {
            let at = (start + i) % addrs.len();
            match self
                .pool
                .service_as(0, &addrs[at], token.as_deref(), req.clone(), method.timeout)
                .await
            {
                Err(e) if e.is_retryable() => {
                    tracing::debug!(server = %addrs[at], error = %e, method = method.name, "trying the next server");
                    last = Some(e);
                }
                other => {
                    self.current.store(at, Ordering::Relaxed);
                    return other;
                }
            }
        }
        self.current
            .store((start + 1) % addrs.len(), Ordering::Relaxed);
        Err(last.unwrap_or(ServiceError::NoLeader))
    }
}

/// The client's calls go to whichever server answers.
impl ServiceCaller for Servers {
    fn call(&self, req: ServiceRequest) -> BoxFuture<'_, Result<ServiceResponse, ServiceError>> {
        Box::pin(self.call_any(req))
    }
}
