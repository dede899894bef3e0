//! Test certificates: a CA with server, client and CLI certificates made by `teamster tls`,
//! and the agent configuration, API client files and RPC TLS that use them.

use std::path::{Path, PathBuf};

use anyhow::bail;
use teamster::util::tls::{AgentTls, ApiTlsFiles, TlsSettings};

/// The region the certificates name (`server.global.nomad`, …).
pub const REGION: &str = "global";

/// A directory holding a CA and a certificate of each role, made by `teamster tls`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TestCerts {
    dir: PathBuf,
}

impl TestCerts {
    /// Make the CA and the server, client and CLI certificates in `dir` (created if missing).
    pub fn make(dir: &Path) -> anyhow::Result<TestCerts> {
        std::fs::create_dir_all(dir)?;
        let mut steps: Vec<Vec<&str>> = vec![vec!["ca", "create"]];
        for role in ["-server", "-client", "-cli"] {
            steps.push(vec!["cert", "create", role]);
        }
        for args in steps {
            let out = std::process::Command::new(crate::process::teamster_bin())
                .arg("tls")
                .args(&args)
                .current_dir(dir)
                .output()?;
            if !out.status.success() {
                bail!(
                    "teamster tls {args:?}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        Ok(TestCerts {
            dir: dir.to_path_buf(),
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA certificate.
    pub fn ca(&self) -> PathBuf {
        self.dir.join("nomad-agent-ca.pem")
    }

    /// The certificate of `role` (`server`, `client` or `cli`).
    pub fn cert(&self, role: &str) -> PathBuf {
        self.dir.join(format!("{REGION}-{role}-nomad.pem"))
    }

    /// The key of `role`'s certificate.
    pub fn key(&self, role: &str) -> PathBuf {
        self.dir.join(format!("{REGION}-{role}-nomad-key.pem"))
    }

    /// An agent's `[tls]` table presenting `role`'s certificate: HTTPS and mutual TLS on RPC,
    /// server hostnames and HTTPS clients verified.
    pub fn agent_toml(&self, role: &str) -> String {
        format!(
            "[tls]\nhttp = true\nrpc = true\nca_file = {ca:?}\ncert_file = {cert:?}\n\
             key_file = {key:?}\nverify_server_hostname = true\nverify_https_client = true\n",
            ca = self.ca().display().to_string(),
            cert = self.cert(role).display().to_string(),
            key = self.key(role).display().to_string(),
        )
    }

    /// What the CLI (and a test's API client) presents: the CA and the CLI certificate.
    pub fn cli_files(&self) -> ApiTlsFiles {
        ApiTlsFiles {
            ca_cert: Some(self.ca()),
            client_cert: Some(self.cert("cli")),
            client_key: Some(self.key("cli")),
            skip_verify: false,
        }
    }

    /// RPC TLS presenting `role`'s certificate and trusting the CA.
    pub fn agent_tls(&self, role: &str) -> anyhow::Result<AgentTls> {
        Ok(AgentTls::load(TlsSettings {
            ca_file: self.ca(),
            cert_file: self.cert(role),
            key_file: self.key(role),
            region: REGION.into(),
            verify_server_hostname: true,
            verify_https_client: true,
        })?)
    }
}
