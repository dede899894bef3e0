//! `teamster volume status`, after `nomad volume status`: the volumes jobs can ask for. Host
//! volumes are the clients' `host_volume`s (Nomad lists only its dynamic host volumes here,
//! which teamster does not have; its static ones show on each node), by node; teamster has
//! no CSI volumes, and says so as Nomad does when it has none.

use anyhow::{bail, Context};
use clap::Args;
use serde_json::{json, Value};

use super::args::ApiArgs;
use super::output::{short_id, table, text};

/// `volume status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Only volumes of this type: `host` or `csi`.
    #[arg(long = "type")]
    kind: Option<String>,
    #[command(flatten)]
    api: ApiArgs,
}

/// Run `volume status`.
pub async fn status(a: StatusArgs) -> anyhow::Result<()> {
    let (host, csi) = match a.kind.as_deref() {
        None => (true, true),
        Some("host") => (true, false),
        Some("csi") => (false, true),
        Some(other) => bail!("-type {other:?}: expected \"host\" or \"csi\""),
    };
    let api = a.api.client()?;
    let mut volumes = Vec::new();
    if host {
        let nodes: Vec<Value> = api.get("/v1/nodes").await.context("listing the nodes")?;
        for stub in &nodes {
            let id = text(&stub["ID"]);
            let node: Value = api
                .get(&format!("/v1/node/{id}"))
                .await
                .with_context(|| format!("reading node {id}"))?;
            for (name, v) in node["HostVolumes"].as_object().into_iter().flatten() {
                volumes.push(json!({
                    "Name": name,
                    "Type": "host",
                    "NodeID": id,
                    "NodeName": node["Name"],
                    "Path": v["Path"],
                    "ReadOnly": v["ReadOnly"],
                }));
            }
        }
    }
    if a.api.structured() {
        return a.api.print(&Value::Array(volumes));
    }
    let mut out = String::new();
    if host {
        out.push_str("Host Volumes\n");
        if volumes.is_empty() {
            out.push_str("No host volumes\n");
        } else {
            let mut rows = vec![vec![
                "Name".to_string(),
                "Node ID".into(),
                "Node Name".into(),
                "Path".into(),
                "Read Only".into(),
            ]];
            for v in &volumes {
                rows.push(vec![
                    text(&v["Name"]),
                    short_id(&v["NodeID"]),
                    text(&v["NodeName"]),
                    text(&v["Path"]),
                    text(&v["ReadOnly"]),
                ]);
            }
            out.push_str(&table(&rows));
        }
    }
    if csi {
        if host {
            out.push('\n');
        }
        out.push_str("Container Storage Interface\nNo CSI volumes\n");
    }
    print!("{out}");
    Ok(())
}
