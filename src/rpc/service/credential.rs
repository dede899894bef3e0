//! The credential a service call is made with, carried along when a server forwards it.
//!
//! The server that takes a request from outside (its HTTP API, or its RPC port for a client
//! agent or a tool) knows the caller's token or node secret. When it forwards the call to the
//! leader, the leader must be able to check the same credential: a forwarded call is only
//! trusted as far as its credential goes, because without mutual TLS anyone can claim a raft
//! member's id in a frame header. The taker runs the call inside [`with_caller_token`]; the
//! forwarder reads [`caller_token`] and sends the call as an
//! [`AuthedService`](crate::rpc::AuthedService) when there is one.
//!
//! A task-local rather than a parameter: the HTTP handlers reach the service layer through
//! the typed [`Services`](super::Services) helpers, which carry no credential, and only the
//! forwarding step needs it. Tasks spawned inside the scope do not inherit it (a scheduler
//! worker's calls carry none and are checked as a server's).

use std::future::Future;

tokio::task_local! {
    static CALLER_TOKEN: Option<String>;
}

/// Run `fut` as a call made with `token` (a token's or a node's secret; `None`: anonymous).
pub async fn with_caller_token<F: Future>(token: Option<String>, fut: F) -> F::Output {
    CALLER_TOKEN.scope(token, fut).await
}

/// The credential of the call running now, if it was made with one.
pub fn caller_token() -> Option<String> {
    CALLER_TOKEN
        .try_with(|t| t.clone())
        .ok()
        .flatten()
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_token_is_seen_inside_the_scope_only_and_not_by_spawned_tasks() {
        assert_eq!(caller_token(), None);
        let inside = with_caller_token(Some("s3cret".into()), async {
            let spawned = tokio::spawn(async { caller_token() }).await.unwrap();
            (caller_token(), spawned)
        })
        .await;
        assert_eq!(inside, (Some("s3cret".to_string()), None));
        assert_eq!(caller_token(), None);
        let empty = with_caller_token(Some(String::new()), async { caller_token() }).await;
        assert_eq!(empty, None, "an empty header is no credential");
    }
}
