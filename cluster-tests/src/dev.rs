//! A lone `teamster agent --dev` (server and client in one process) for end-to-end tests
//! with real tasks: started on a loopback address of the test process's own, ready once its
//! node is, killed when dropped.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use teamster::api::ApiClient;

use crate::process::teamster_bin;
use crate::wait_for;

/// `127.X.Y.<host>`: a loopback block derived from the test process's id (as the process
/// cluster does), so test binaries running side by side do not collide; tests of one
/// binary that run at the same time pick different `host`s.
pub fn dev_ip_at(host: u8) -> String {
    let pid = std::process::id();
    format!("127.{}.{}.{host}", 10 + (pid % 200), 251 - (pid / 200 % 5))
}

/// A child process killed (and reaped) when dropped.
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `teamster agent --dev` on `ip` (its output in `log`), once its node is ready: the
/// process and its API. A timeout includes the agent's log.
pub async fn dev_agent(
    ip: &str,
    log: &tempfile::NamedTempFile,
) -> anyhow::Result<(Killed, ApiClient)> {
    let agent = Killed(
        Command::new(teamster_bin())
            .args(["agent", "--dev", "--bind", ip])
            .stdin(Stdio::null())
            .stdout(log.reopen()?)
            .stderr(log.reopen()?)
            .spawn()?,
    );
    let api = ApiClient::new(&format!("http://{ip}:4646"));
    wait_for(Duration::from_secs(30), "the dev node ready", || async {
        let nodes: Vec<Value> = api.get("/v1/nodes").await.ok()?;
        nodes.iter().any(|n| n["Status"] == "ready").then_some(())
    })
    .await
    .map_err(|e| {
        anyhow::anyhow!(
            "{e}\n{}",
            std::fs::read_to_string(log.path()).unwrap_or_default()
        )
    })?;
    Ok((agent, api))
}
