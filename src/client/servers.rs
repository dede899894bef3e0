//! The servers a client talks to, with failover: a call goes to the server that answered
//! last; when it is unreachable or has no leader to forward to, the next one is tried. The
//! list grows with the servers a registration or heartbeat names.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::rpc::{Pool, RpcError, RpcRequest, RpcResponse};

/// The client's view of the servers.
pub struct Servers {
    pool: Pool,
    addrs: Mutex<Vec<String>>,
    current: AtomicUsize,
}

/// Whether another server may answer where this one could not.
fn try_next(e: &RpcError) -> bool {
    e.is_transport()
        || matches!(
            e,
            RpcError::NotLeader { .. } | RpcError::Unsupported { .. } | RpcError::Disabled(_)
        )
}

impl Servers {
    /// Servers at `addrs` (`host:port`), called through `pool`.
    pub fn new(pool: Pool, addrs: Vec<String>) -> Servers {
        Servers {
            pool,
            addrs: Mutex::new(addrs),
            current: AtomicUsize::new(0),
        }
    }

    /// The known server addresses.
    pub fn addrs(&self) -> Vec<String> {
        self.addrs.lock().unwrap_or_else(|p| p.into_inner()).clone()
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

    /// Call one server after another until one answers; `extract` takes the request's own
    /// answer out of the response (whose inner error also triggers failover when another
    /// server might do better).
    pub async fn call<T>(
        &self,
        req: RpcRequest,
        timeout: Duration,
        extract: impl Fn(RpcResponse) -> Option<Result<T, RpcError>>,
    ) -> Result<T, RpcError> {
        let addrs = self.addrs();
        if addrs.is_empty() {
            return Err(RpcError::Unreachable {
                peer: "no servers known".into(),
                reason: "client.servers is empty".into(),
            });
        }
        let start = self.current.load(Ordering::Relaxed);
        let mut last = None;
        for i in 0..addrs.len() {
            let at = (start + i) % addrs.len();
            let outcome = match self.pool.call_addr(&addrs[at], req.clone(), timeout).await {
                Ok(resp) => {
                    let kind = resp.kind();
                    extract(resp).unwrap_or_else(|| {
                        Err(RpcError::UnexpectedResponse {
                            request: req.kind().to_string(),
                            response: kind.to_string(),
                        })
                    })
                }
                Err(e) => Err(e),
            };
            match outcome {
                Err(e) if try_next(&e) => {
                    tracing::debug!(server = %addrs[at], error = %e, kind = req.kind(), "trying the next server");
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
        Err(last.unwrap_or(RpcError::NotLeader { leader: None }))
    }
}
