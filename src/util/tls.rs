//! TLS material for both ports and every caller: the rustls configurations the RPC listener
//! and pool, the HTTPS listener, the API client and the agents' own HTTP calls use, built
//! from PEM files with the ring provider, and the roles Nomad names in its certificates.
//!
//! ```text
//!  ca_file, cert_file, key_file ──AgentTls::load / reload (SIGHUP)──▶ TlsConfigs
//!      rpc_server  (client certificate required, from the CA)      ──▶ rpc listener
//!      rpc_client  (our certificate; the remote must be server.<region>.nomad) ──▶ rpc pool
//!      http_server (client certificate required iff verify_https_client) ──▶ https listener
//!      http_client (our certificate; the remote must be from the CA) ──▶ forwards to agents
//! ```
//!
//! A peer's role is the first of `server.<region>.nomad`, `client.<region>.nomad`,
//! `cli.<region>.nomad` its certificate is valid for (its DNS subject alternative names).
//! A reload builds every configuration from the files again and swaps them in only when all
//! of them built; connections already open keep the configuration they started with. Key
//! material is never logged, and no `Debug` here prints it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig,
    SignatureScheme,
};
use serde::{Deserialize, Serialize};

/// The domain of Nomad's certificate names (`server.global.nomad`).
pub const DOMAIN: &str = "nomad";

/// The longest a TLS handshake may take on either port before that connection is closed.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What is wrong with TLS files or settings.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds no usable PEM item.
    #[error("{what} {path}: {reason}")]
    File {
        /// Which file (`ca_file`, `cert_file`, `key_file`).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong (never the file's content).
        reason: String,
    },
    /// rustls refused the material (a key that does not match the certificate, a bad CA).
    #[error("{what}: {reason}")]
    Config {
        /// Which configuration.
        what: &'static str,
        /// rustls's reason.
        reason: String,
    },
}

/// The role a certificate names, Nomad's way: `<role>.<region>.nomad`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PeerRole {
    /// `server.<region>.nomad`: a server; may send raft traffic and forwarded calls.
    Server,
    /// `client.<region>.nomad`: a client agent; may register, heartbeat and report.
    Client,
    /// `cli.<region>.nomad`: an operator's command line; for the HTTP API.
    Cli,
}

impl PeerRole {
    /// Every role, most privileged first (the order a certificate is matched in).
    pub const ALL: [PeerRole; 3] = [PeerRole::Server, PeerRole::Client, PeerRole::Cli];

    /// `server`, `client` or `cli`.
    pub fn name(self) -> &'static str {
        match self {
            PeerRole::Server => "server",
            PeerRole::Client => "client",
            PeerRole::Cli => "cli",
        }
    }

    /// The certificate name of the role in `region`: `server.global.nomad`.
    pub fn subject(self, region: &str) -> String {
        format!("{}.{region}.{DOMAIN}", self.name())
    }

    /// The role `cert` (DER) names for `region`: the first role whose name the certificate
    /// is valid for; `None` when it names none (or does not parse).
    pub fn of_certificate(cert: &CertificateDer<'_>, region: &str) -> Option<PeerRole> {
        let ee = webpki::EndEntityCert::try_from(cert).ok()?;
        PeerRole::ALL.into_iter().find(|role| {
            ServerName::try_from(role.subject(region))
                .is_ok_and(|name| ee.verify_is_valid_for_subject_name(&name).is_ok())
        })
    }
}

impl std::fmt::Display for PeerRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The crypto provider of every configuration: ring (no aws-lc, no OpenSSL).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The CA certificates of `path`, as a root store.
pub fn load_roots(what: &'static str, path: &Path) -> Result<RootCertStore, TlsError> {
    let certs = load_certs(what, path)?;
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|e| TlsError::File {
            what,
            path: path.to_path_buf(),
            reason: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(roots)
}

/// The certificates of a PEM file (at least one).
pub fn load_certs(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bad = |reason: String| TlsError::File {
        what,
        path: path.to_path_buf(),
        reason,
    };
    let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<_, _>>()
        .map_err(|e| bad(format!("not PEM: {e}")))?;
    if certs.is_empty() {
        return Err(bad("holds no CERTIFICATE".into()));
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, SEC1 or PKCS#1).
pub fn load_key(what: &'static str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bad = |reason: String| TlsError::File {
        what,
        path: path.to_path_buf(),
        reason,
    };
    let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| bad(format!("holds no private key: {e}")))
}

/// Which names a remote's certificate must be valid for, besides coming from the CA.
#[derive(Debug, Clone)]
pub enum NamePolicy {
    /// Any name: only the chain is checked (Nomad without `verify_server_hostname`).
    Any,
    /// One of these names, whatever address was dialled.
    OneOf(Vec<ServerName<'static>>),
    /// The host of the URL dialled, or one of these names (the API client: an agent's
    /// certificate names its role, and rarely every address it is reached at).
    HostOr(Vec<ServerName<'static>>),
}

impl NamePolicy {
    /// The names of `roles` in `region`.
    pub fn roles(region: &str, roles: &[PeerRole]) -> Vec<ServerName<'static>> {
        roles
            .iter()
            .filter_map(|r| ServerName::try_from(r.subject(region)).ok())
            .collect()
    }
}

/// Checks a remote's certificate chain against the CA with webpki, then its name by a
/// [`NamePolicy`].
#[derive(Debug)]
struct CaVerifier {
    inner: Arc<WebPkiServerVerifier>,
    names: NamePolicy,
}

fn wrong_name(e: &rustls::Error) -> bool {
    matches!(
        e,
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }
        )
    )
}

impl ServerCertVerifier for CaVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verify = |name: &ServerName<'_>| {
            self.inner
                .verify_server_cert(end_entity, intermediates, name, ocsp, now)
        };
        let (first, others): (Option<&ServerName<'_>>, &[ServerName<'static>]) = match &self.names {
            NamePolicy::Any => {
                return match verify(server_name) {
                    Err(e) if wrong_name(&e) => Ok(ServerCertVerified::assertion()),
                    other => other,
                }
            }
            NamePolicy::OneOf(names) => (None, names),
            NamePolicy::HostOr(names) => (Some(server_name), names),
        };
        let mut last = rustls::Error::InvalidCertificate(CertificateError::NotValidForName);
        for name in first.into_iter().chain(others.iter()) {
            match verify(name) {
                Ok(ok) => return Ok(ok),
                Err(e) if wrong_name(&e) => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Accepts any certificate (`-tls-skip-verify`): the handshake's signatures are still
/// checked, the chain and the name are not.
#[derive(Debug)]
struct SkipVerify(Arc<CryptoProvider>);

impl ServerCertVerifier for SkipVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn config_error(what: &'static str) -> impl Fn(rustls::Error) -> TlsError {
    move |e| TlsError::Config {
        what,
        reason: e.to_string(),
    }
}

/// A client configuration trusting `roots` by `names`, presenting `identity` when given.
pub fn client_config(
    roots: Arc<RootCertStore>,
    names: NamePolicy,
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
) -> Result<ClientConfig, TlsError> {
    let provider = provider();
    let inner = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
        .build()
        .map_err(|e| TlsError::Config {
            what: "ca_file",
            reason: e.to_string(),
        })?;
    let verifier = Arc::new(CaVerifier { inner, names });
    finish_client(provider, verifier, identity)
}

/// A client configuration that checks nothing of the remote (`-tls-skip-verify`).
pub fn insecure_client_config(
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
) -> Result<ClientConfig, TlsError> {
    let provider = provider();
    let verifier = Arc::new(SkipVerify(provider.clone()));
    finish_client(provider, verifier, identity)
}

fn finish_client(
    provider: Arc<CryptoProvider>,
    verifier: Arc<dyn ServerCertVerifier>,
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
) -> Result<ClientConfig, TlsError> {
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(config_error("tls"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    match identity {
        Some((chain, key)) => builder
            .with_client_auth_cert(chain, key)
            .map_err(config_error("key_file")),
        None => Ok(builder.with_no_client_auth()),
    }
}

fn server_config(
    roots: Arc<RootCertStore>,
    require_client_cert: bool,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<ServerConfig, TlsError> {
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(config_error("tls"))?;
    let builder = if require_client_cert {
        let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider)
            .build()
            .map_err(|e| TlsError::Config {
                what: "ca_file",
                reason: e.to_string(),
            })?;
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    builder
        .with_single_cert(chain, key)
        .map_err(config_error("key_file"))
}

/// What an agent's TLS is made of: its `[tls]` files and checks, and its region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// The CA every certificate of the cluster is signed by.
    pub ca_file: PathBuf,
    /// This agent's certificate (chain), PEM.
    pub cert_file: PathBuf,
    /// This agent's private key, PEM.
    pub key_file: PathBuf,
    /// The cluster's region (`global`): the middle of the certificate names.
    pub region: String,
    /// Check the roles certificates name: servers must be `server.<region>.nomad`, and only
    /// servers may send raft traffic and server-only calls.
    pub verify_server_hostname: bool,
    /// HTTPS clients must present a certificate from the CA.
    pub verify_https_client: bool,
}

/// The configurations of one load of the files.
#[derive(Debug)]
pub struct TlsConfigs {
    /// The RPC listener's: a client certificate from the CA is required.
    pub rpc_server: Arc<ServerConfig>,
    /// The RPC pool's: presents our certificate; the remote must be
    /// `server.<region>.nomad` when `verify_server_hostname`.
    pub rpc_client: Arc<ClientConfig>,
    /// The HTTPS listener's.
    pub http_server: Arc<ServerConfig>,
    /// For this agent's own calls to other agents' HTTPS API: presents our certificate; the
    /// remote's must come from the CA (and name a server or client role when
    /// `verify_server_hostname`).
    pub http_client: Arc<ClientConfig>,
}

impl TlsConfigs {
    fn build(s: &TlsSettings) -> Result<TlsConfigs, TlsError> {
        let roots = Arc::new(load_roots("ca_file", &s.ca_file)?);
        let chain = load_certs("cert_file", &s.cert_file)?;
        let key = load_key("key_file", &s.key_file)?;
        let rpc_names = if s.verify_server_hostname {
            NamePolicy::OneOf(NamePolicy::roles(&s.region, &[PeerRole::Server]))
        } else {
            NamePolicy::Any
        };
        let http_names = if s.verify_server_hostname {
            NamePolicy::HostOr(NamePolicy::roles(
                &s.region,
                &[PeerRole::Server, PeerRole::Client],
            ))
        } else {
            NamePolicy::Any
        };
        let identity = || Some((chain.clone(), key.clone_key()));
        Ok(TlsConfigs {
            rpc_server: Arc::new(server_config(
                roots.clone(),
                true,
                chain.clone(),
                key.clone_key(),
            )?),
            rpc_client: Arc::new(client_config(roots.clone(), rpc_names, identity())?),
            http_server: Arc::new(server_config(
                roots.clone(),
                s.verify_https_client,
                chain.clone(),
                key.clone_key(),
            )?),
            http_client: Arc::new(client_config(roots, http_names, identity())?),
        })
    }
}

/// An agent's TLS: its settings and the configurations of the latest good load of its
/// files. Cloning shares them; a reload is seen by every clone.
#[derive(Clone)]
pub struct AgentTls {
    settings: Arc<TlsSettings>,
    current: Arc<RwLock<Arc<TlsConfigs>>>,
}

impl std::fmt::Debug for AgentTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentTls")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl PartialEq for AgentTls {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.current, &other.current)
    }
}

impl Eq for AgentTls {}

impl AgentTls {
    /// Load the files of `settings`; every configuration must build.
    pub fn load(settings: TlsSettings) -> Result<AgentTls, TlsError> {
        let configs = TlsConfigs::build(&settings)?;
        Ok(AgentTls {
            settings: Arc::new(settings),
            current: Arc::new(RwLock::new(Arc::new(configs))),
        })
    }

    /// Load the files again. On success new connections use the new material; on error
    /// nothing changes and the error says which file is wrong.
    pub fn reload(&self) -> Result<(), TlsError> {
        let configs = TlsConfigs::build(&self.settings)?;
        *self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(configs);
        Ok(())
    }

    /// The configurations in force.
    pub fn configs(&self) -> Arc<TlsConfigs> {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The settings.
    pub fn settings(&self) -> &TlsSettings {
        &self.settings
    }

    /// The name servers present and are dialled as: `server.<region>.nomad`.
    pub fn server_name(&self) -> ServerName<'static> {
        ServerName::try_from(PeerRole::Server.subject(&self.settings.region))
            .unwrap_or_else(|_| ServerName::try_from("server.global.nomad").expect("valid"))
    }

    /// The role `cert` names in this agent's region.
    pub fn role_of(&self, cert: &CertificateDer<'_>) -> Option<PeerRole> {
        PeerRole::of_certificate(cert, &self.settings.region)
    }

    /// Whether roles are enforced (`verify_server_hostname`).
    pub fn enforce_roles(&self) -> bool {
        self.settings.verify_server_hostname
    }
}

/// The TLS of an HTTP API client (the CLI, the test harness): what to trust and what to
/// present.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiTlsFiles {
    /// The CA to trust (`-ca-cert`, `NOMAD_CACERT`).
    pub ca_cert: Option<PathBuf>,
    /// The certificate to present (`-client-cert`, `NOMAD_CLIENT_CERT`).
    pub client_cert: Option<PathBuf>,
    /// Its key (`-client-key`, `NOMAD_CLIENT_KEY`).
    pub client_key: Option<PathBuf>,
    /// Check nothing of the server's certificate (`-tls-skip-verify`, `NOMAD_SKIP_VERIFY`).
    pub skip_verify: bool,
}

impl ApiTlsFiles {
    /// Whether any TLS option is set.
    pub fn is_set(&self) -> bool {
        self.ca_cert.is_some()
            || self.client_cert.is_some()
            || self.client_key.is_some()
            || self.skip_verify
    }

    /// The client configuration: the server's certificate must come from `ca_cert` and be
    /// valid for the dialled host or name a server or client of `region`.
    pub fn client_config(&self, region: &str) -> Result<ClientConfig, TlsError> {
        let identity = match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => Some((
                load_certs("client certificate", cert)?,
                load_key("client key", key)?,
            )),
            (None, None) => None,
            (Some(_), None) => {
                return Err(TlsError::Config {
                    what: "client certificate",
                    reason: "a client certificate needs its key (-client-key)".into(),
                })
            }
            (None, Some(_)) => {
                return Err(TlsError::Config {
                    what: "client key",
                    reason: "a client key needs its certificate (-client-cert)".into(),
                })
            }
        };
        if self.skip_verify {
            return insecure_client_config(identity);
        }
        let Some(ca) = &self.ca_cert else {
            return Err(TlsError::Config {
                what: "CA certificate",
                reason: "an https address needs the CA to trust (-ca-cert or NOMAD_CACERT), \
                         or -tls-skip-verify"
                    .into(),
            });
        };
        let roots = Arc::new(load_roots("CA certificate", ca)?);
        client_config(
            roots,
            NamePolicy::HostOr(NamePolicy::roles(
                region,
                &[PeerRole::Server, PeerRole::Client],
            )),
            identity,
        )
    }
}

/// The TLS of this process's agent for its calls to other agents' HTTPS API (a server
/// forwarding to a client, a client fetching a migrating disk); set once at agent start
/// when `tls.http` is on (one agent per process outside in-process tests, which run
/// without TLS).
static OUTGOING_HTTP: std::sync::OnceLock<AgentTls> = std::sync::OnceLock::new();

/// Make every later call to another agent's HTTP API speak HTTPS with `tls` (once per
/// process; later calls change nothing).
pub fn set_outgoing_http(tls: AgentTls) {
    let _ = OUTGOING_HTTP.set(tls);
}

/// This agent's TLS for calls to other agents' HTTP API, when `tls.http` is on.
pub fn outgoing_http() -> Option<&'static AgentTls> {
    OUTGOING_HTTP.get()
}

/// How long connecting to another agent's HTTP API may take.
pub const OUTGOING_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The scheme of the other agents' HTTP API and a client for it (HTTPS with this agent's
/// certificate when `tls.http` is on), connecting within [`OUTGOING_CONNECT_TIMEOUT`].
pub fn outgoing_http_client() -> Result<(&'static str, reqwest::Client), String> {
    let builder = reqwest::Client::builder().connect_timeout(OUTGOING_CONNECT_TIMEOUT);
    let (scheme, builder) = match outgoing_http() {
        None => ("http", builder),
        Some(tls) => (
            "https",
            builder.use_preconfigured_tls((*tls.configs().http_client).clone()),
        ),
    };
    builder
        .build()
        .map(|c| (scheme, c))
        .map_err(|e| format!("{scheme} client: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert_for(names: &[&str]) -> CertificateDer<'static> {
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.self_signed(&key).unwrap().der().clone()
    }

    #[test]
    fn roles_come_from_the_certificate_names() {
        let server = cert_for(&["server.global.nomad", "localhost"]);
        assert_eq!(
            PeerRole::of_certificate(&server, "global"),
            Some(PeerRole::Server)
        );
        let client = cert_for(&["client.global.nomad", "localhost"]);
        assert_eq!(
            PeerRole::of_certificate(&client, "global"),
            Some(PeerRole::Client)
        );
        let cli = cert_for(&["cli.global.nomad"]);
        assert_eq!(
            PeerRole::of_certificate(&cli, "global"),
            Some(PeerRole::Cli)
        );
        // Another region's client, a foreign name, garbage: no role.
        let other = cert_for(&["client.europe.nomad"]);
        assert_eq!(PeerRole::of_certificate(&other, "global"), None);
        let foreign = cert_for(&["example.com"]);
        assert_eq!(PeerRole::of_certificate(&foreign, "global"), None);
        assert_eq!(
            PeerRole::of_certificate(&CertificateDer::from(vec![1, 2, 3]), "global"),
            None
        );
        // A certificate naming both a server and a client is a server.
        let both = cert_for(&["client.global.nomad", "server.global.nomad"]);
        assert_eq!(
            PeerRole::of_certificate(&both, "global"),
            Some(PeerRole::Server)
        );
        assert_eq!(PeerRole::Server.subject("global"), "server.global.nomad");
    }

    #[test]
    fn missing_or_bad_files_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.pem");
        let e = load_certs("ca_file", &missing).unwrap_err().to_string();
        assert!(e.contains("ca_file") && e.contains("nope.pem"), "{e}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not pem at all").unwrap();
        let e = load_certs("cert_file", &empty).unwrap_err().to_string();
        assert!(
            e.contains("cert_file") && e.contains("no CERTIFICATE"),
            "{e}"
        );
        let e = load_key("key_file", &empty).unwrap_err().to_string();
        assert!(e.contains("key_file") && e.contains("empty.pem"), "{e}");
    }

    #[test]
    fn api_files_refuse_half_an_identity_and_https_without_a_ca() {
        let files = ApiTlsFiles {
            client_cert: Some("c.pem".into()),
            ..ApiTlsFiles::default()
        };
        let e = files.client_config("global").unwrap_err().to_string();
        assert!(e.contains("-client-key"), "{e}");
        let e = ApiTlsFiles::default()
            .client_config("global")
            .unwrap_err()
            .to_string();
        assert!(e.contains("-ca-cert"), "{e}");
        assert!(ApiTlsFiles {
            skip_verify: true,
            ..ApiTlsFiles::default()
        }
        .client_config("global")
        .is_ok());
    }
}
