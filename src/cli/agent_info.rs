//! `teamster agent-info`: what the agent at `-address` says of itself (`/v1/agent/self`), as
//! `nomad agent-info`: its stats by section, or the whole answer with `-json`. It needs
//! nothing but that agent, so it also checks a client-only agent's health (the TLS compose
//! variant's health check).

use anyhow::Context;
use clap::Args;
use serde_json::Value;

use super::args::ApiArgs;

/// `agent-info`.
#[derive(Debug, Args)]
pub struct AgentInfoArgs {
    #[command(flatten)]
    api: ApiArgs,
}

/// The stats of `/v1/agent/self`, one `section` line then `  key = value` lines, sorted.
fn render(answer: &Value) -> String {
    let mut out = String::new();
    let Some(stats) = answer["stats"].as_object() else {
        return out;
    };
    let mut sections: Vec<(&String, &Value)> = stats.iter().collect();
    sections.sort_by_key(|(name, _)| name.as_str());
    for (name, values) in sections {
        out.push_str(name);
        out.push('\n');
        let mut keys: Vec<(&String, &Value)> = values
            .as_object()
            .map(|m| m.iter().collect())
            .unwrap_or_default();
        keys.sort_by_key(|(k, _)| k.as_str());
        for (k, v) in keys {
            let v = v.as_str().map_or_else(|| v.to_string(), str::to_string);
            out.push_str(&format!("  {k} = {v}\n"));
        }
    }
    out
}

/// Run `agent-info`.
pub async fn run(args: AgentInfoArgs) -> anyhow::Result<()> {
    let answer: Value = args
        .api
        .client()?
        .get("/v1/agent/self")
        .await
        .context("reading the agent's information")?;
    if args.api.structured() {
        return args.api.print(&answer);
    }
    print!("{}", render(&answer));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_print_by_section_and_key() {
        let answer = serde_json::json!({
            "stats": {
                "raft": { "term": "3", "applied_index": "17" },
                "client": { "node_id": "abc" },
            }
        });
        assert_eq!(
            render(&answer),
            "client\n  node_id = abc\nraft\n  applied_index = 17\n  term = 3\n"
        );
        assert_eq!(render(&serde_json::json!({})), "");
    }
}
