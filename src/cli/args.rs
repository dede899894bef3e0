//! What every API command shares: where and as whom it reaches the HTTP API
//! ([`ConnArgs`]), how it prints the answer ([`ApiArgs`]), and how an ID prefix given on
//! the command line is resolved to one object's ID ([`resolve`]).

use anyhow::{bail, Context};
use clap::Args;
use serde_json::Value;

use super::output::{self, text};
use crate::api::{ApiClient, RequestScope};
use crate::gotemplate as template;

/// Where and as whom a command reaches the HTTP API: the address, the request's namespace,
/// region and token, and the TLS files. Every API command has these (`alloc exec` only
/// these: its output is the command's).
#[derive(Debug, Clone, Args)]
pub struct ConnArgs {
    /// The HTTP API of any server.
    #[arg(
        long,
        env = "TEAMSTER_ADDR",
        default_value_t = default_address(),
        global = true
    )]
    pub address: String,
    /// The namespace of the request (`*` lists every namespace's objects); else
    /// `TEAMSTER_NAMESPACE`, else `NOMAD_NAMESPACE`, else the server's `default`.
    #[arg(long, env = "TEAMSTER_NAMESPACE", global = true)]
    pub namespace: Option<String>,
    /// The region to send the request to; else `TEAMSTER_REGION`, else `NOMAD_REGION`, else
    /// the agent's own.
    #[arg(long, env = "TEAMSTER_REGION", global = true)]
    pub region: Option<String>,
    /// The secret ID of an ACL token, sent as `X-Nomad-Token`; else `TEAMSTER_TOKEN`, else
    /// `NOMAD_TOKEN` (agents with ACLs on refuse what the token does not allow).
    #[arg(long, env = "TEAMSTER_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<String>,
    /// The CA certificate (PEM) to trust for an `https://` address; else `TEAMSTER_CACERT`,
    /// else `NOMAD_CACERT`.
    #[arg(long, env = "TEAMSTER_CACERT", global = true, value_name = "FILE")]
    pub ca_cert: Option<std::path::PathBuf>,
    /// The client certificate (PEM) to present (agents with `verify_https_client`); else
    /// `TEAMSTER_CLIENT_CERT`, else `NOMAD_CLIENT_CERT`.
    #[arg(long, env = "TEAMSTER_CLIENT_CERT", global = true, value_name = "FILE")]
    pub client_cert: Option<std::path::PathBuf>,
    /// The client certificate's key (PEM); else `TEAMSTER_CLIENT_KEY`, else
    /// `NOMAD_CLIENT_KEY`.
    #[arg(long, env = "TEAMSTER_CLIENT_KEY", global = true, value_name = "FILE")]
    pub client_key: Option<std::path::PathBuf>,
    /// Do not check the agent's certificate (testing only); else `TEAMSTER_SKIP_VERIFY`,
    /// else `NOMAD_SKIP_VERIFY`.
    #[arg(long, global = true)]
    pub tls_skip_verify: bool,
}

impl ConnArgs {
    /// A client for `--address` with the request scope and TLS files.
    pub fn client(&self) -> anyhow::Result<ApiClient> {
        let tls = self.tls_files();
        let client = if tls.is_set() || self.address.starts_with("https://") {
            let region = self.scope().region.unwrap_or_else(|| "global".to_string());
            ApiClient::with_tls(&self.address, tls.client_config(&region)?)
        } else {
            ApiClient::new(&self.address)
        };
        Ok(client.with_scope(self.scope()))
    }

    /// The TLS files of the API client: the flags, else the environment (`TEAMSTER_*`
    /// through clap, then Nomad's `NOMAD_*`).
    pub fn tls_files(&self) -> crate::util::tls::ApiTlsFiles {
        let pick = |flag: &Option<std::path::PathBuf>, nomad: &str| {
            flag.clone().or_else(|| {
                std::env::var(nomad)
                    .ok()
                    .filter(|v| !v.trim().is_empty())
                    .map(std::path::PathBuf::from)
            })
        };
        let env_true = |name: &str| {
            std::env::var(name)
                .ok()
                .is_some_and(|v| matches!(v.trim(), "1" | "true" | "True" | "TRUE"))
        };
        crate::util::tls::ApiTlsFiles {
            ca_cert: pick(&self.ca_cert, "NOMAD_CACERT"),
            client_cert: pick(&self.client_cert, "NOMAD_CLIENT_CERT"),
            client_key: pick(&self.client_key, "NOMAD_CLIENT_KEY"),
            skip_verify: self.tls_skip_verify
                || env_true("TEAMSTER_SKIP_VERIFY")
                || env_true("NOMAD_SKIP_VERIFY"),
        }
    }

    /// The namespace, region and token of every request: the flags, else the environment
    /// (`TEAMSTER_*` through clap, then Nomad's `NOMAD_*`).
    pub fn scope(&self) -> RequestScope {
        let pick = |flag: &Option<String>, nomad: &str| {
            flag.clone()
                .or_else(|| std::env::var(nomad).ok())
                .filter(|v| !v.trim().is_empty())
        };
        RequestScope {
            namespace: pick(&self.namespace, "NOMAD_NAMESPACE"),
            region: pick(&self.region, "NOMAD_REGION"),
            token: pick(&self.token, "NOMAD_TOKEN"),
        }
    }
}

/// Flags shared by every command that talks to the HTTP API: the connection, and how the
/// answer is printed.
#[derive(Debug, Clone, Args)]
pub struct ApiArgs {
    /// Address, namespace, region, token and TLS.
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Print machine-readable JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// Render the value `--json` would print through this Go template (Nomad's `-t`), e.g.
    /// `-t '{{range .}}{{.ID}} {{.Status}}{{"\n"}}{{end}}'`.
    #[arg(short = 't', long = "template", global = true, value_name = "TEMPLATE")]
    pub template: Option<String>,
}

impl std::ops::Deref for ApiArgs {
    type Target = ConnArgs;

    fn deref(&self) -> &ConnArgs {
        &self.conn
    }
}

impl ApiArgs {
    /// A client for `--address`, once the output flags are known to be usable: `--json` and
    /// `-t` together, or a template that does not parse, are errors before any request.
    pub fn client(&self) -> anyhow::Result<ApiClient> {
        self.parsed_template()?;
        self.conn.client()
    }

    /// Whether the command prints its JSON value (as JSON or through `-t`) instead of tables.
    pub fn structured(&self) -> bool {
        self.json || self.template.is_some()
    }

    /// GET the list at `path` and print it as `--json`/`-t` ask, else as a table of
    /// `columns` (header, field of each item), or `empty` when there is nothing.
    pub async fn print_list(
        &self,
        path: &str,
        what: &str,
        columns: &[(&str, &str)],
        empty: Option<&str>,
    ) -> anyhow::Result<()> {
        let all: Vec<serde_json::Value> = self
            .client()?
            .get(path)
            .await
            .with_context(|| format!("listing the {what}"))?;
        if self.structured() {
            return self.print(&all);
        }
        if let (true, Some(message)) = (all.is_empty(), empty) {
            println!("{message}");
            return Ok(());
        }
        let mut rows = vec![columns.iter().map(|(h, _)| h.to_string()).collect()];
        for item in &all {
            rows.push(
                columns
                    .iter()
                    .map(|(_, f)| output::text(&item[*f]))
                    .collect(),
            );
        }
        print!("{}", output::table(&rows));
        Ok(())
    }

    /// Print `value` as `--json` or `-t` asks.
    pub fn print(&self, value: &impl serde::Serialize) -> anyhow::Result<()> {
        match self.parsed_template()? {
            Some(t) => {
                let v = serde_json::to_value(value)?;
                println!("{}", t.render_with_sprig(&v)?);
            }
            None => println!("{}", serde_json::to_string_pretty(value)?),
        }
        Ok(())
    }

    fn parsed_template(&self) -> anyhow::Result<Option<template::Template>> {
        let Some(src) = &self.template else {
            return Ok(None);
        };
        if self.json {
            anyhow::bail!("Both json and template formatting are not allowed");
        }
        Ok(Some(template::Template::parse_with_sprig(src)?))
    }
}

/// The API address when neither `--address` nor `TEAMSTER_ADDR` gives one: Nomad's
/// `NOMAD_ADDR`, else the local agent.
fn default_address() -> String {
    std::env::var("NOMAD_ADDR")
        .ok()
        .filter(|a| !a.trim().is_empty())
        .unwrap_or_else(|| "http://127.0.0.1:4646".into())
}

/// Resolve an ID prefix through a `?prefix=` listing of every namespace (IDs are unique
/// across them).
pub async fn resolve(api: &ApiClient, list: &str, what: &str, id: &str) -> anyhow::Result<String> {
    let found: Vec<Value> = api
        .get(&format!("{list}?prefix={id}&namespace=*"))
        .await
        .with_context(|| format!("looking up {what} {id}"))?;
    match found.as_slice() {
        [] => bail!("No {what} with prefix or id {id:?} found"),
        [one] => Ok(text(&one["ID"])),
        many => bail!(
            "Prefix matched multiple {what}s: {}",
            many.iter()
                .map(|v| text(&v["ID"]))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
