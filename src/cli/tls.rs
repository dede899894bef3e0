//! `teamster tls ca create` and `teamster tls cert create -server|-client|-cli`: a working
//! set of certificates for a test or a small cluster, with Nomad's file and certificate
//! names, written to the current directory. Existing files are never overwritten.
//!
//! ```text
//! tls ca create          → nomad-agent-ca.pem, nomad-agent-ca-key.pem
//! tls cert create -server → global-server-nomad.pem, global-server-nomad-key.pem
//!                          CN server.global.nomad; SANs server.global.nomad, localhost, 127.0.0.1
//! ```

use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType, SerialNumber,
};

use crate::util::tls::PeerRole;

/// `teamster tls …`.
#[derive(Debug, Subcommand)]
pub enum TlsCommand {
    /// The certificate authority.
    #[command(subcommand)]
    Ca(CaCommand),
    /// Agent and CLI certificates signed by the CA.
    #[command(subcommand)]
    Cert(CertCommand),
}

/// `teamster tls ca …`.
#[derive(Debug, Subcommand)]
pub enum CaCommand {
    /// Create a CA: `<domain>-agent-ca.pem` and `<domain>-agent-ca-key.pem`.
    Create(CaCreateArgs),
}

/// `teamster tls cert …`.
#[derive(Debug, Subcommand)]
pub enum CertCommand {
    /// Create a certificate for a server, a client or the CLI:
    /// `<region>-<role>-<domain>.pem` and `<region>-<role>-<domain>-key.pem`.
    Create(CertCreateArgs),
}

/// Flags of `tls ca create`.
#[derive(Debug, Args)]
pub struct CaCreateArgs {
    /// Days the CA is valid.
    #[arg(long, default_value_t = 1825)]
    pub days: u32,
    /// The domain of the certificate names (`server.global.<domain>`) and file names.
    #[arg(long, default_value = "nomad")]
    pub domain: String,
}

/// Flags of `tls cert create`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("role").required(true).args(["server", "client", "cli"])))]
pub struct CertCreateArgs {
    /// A server certificate (`server.<region>.<domain>`).
    #[arg(long)]
    pub server: bool,
    /// A client agent certificate (`client.<region>.<domain>`).
    #[arg(long)]
    pub client: bool,
    /// A command-line certificate (`cli.<region>.<domain>`).
    #[arg(long)]
    pub cli: bool,
    /// Days the certificate is valid.
    #[arg(long, default_value_t = 365)]
    pub days: u32,
    /// The region in the certificate name.
    #[arg(long, default_value = "global")]
    pub cluster_region: String,
    /// The domain of the certificate name.
    #[arg(long, default_value = "nomad")]
    pub domain: String,
    /// The CA certificate; default `<domain>-agent-ca.pem`.
    #[arg(long)]
    pub ca: Option<PathBuf>,
    /// The CA's key; default `<domain>-agent-ca-key.pem`.
    #[arg(long)]
    pub key: Option<PathBuf>,
    /// Another DNS name the certificate is valid for (repeatable).
    #[arg(long = "additional-dnsname", value_name = "NAME")]
    pub additional_dnsname: Vec<String>,
    /// Another IP address the certificate is valid for (repeatable).
    #[arg(long = "additional-ipaddress", value_name = "IP")]
    pub additional_ipaddress: Vec<IpAddr>,
}

/// Run a `tls` command in the current directory.
pub fn run(cmd: TlsCommand) -> anyhow::Result<()> {
    let dir = std::env::current_dir().context("the current directory")?;
    match cmd {
        TlsCommand::Ca(CaCommand::Create(args)) => create_ca(&dir, &args),
        TlsCommand::Cert(CertCommand::Create(args)) => create_cert(&dir, &args),
    }
}

/// A validity period of `days` from today (UTC midnight).
fn validity(params: &mut CertificateParams, days: u32) -> anyhow::Result<()> {
    if days == 0 {
        bail!("-days must be at least 1");
    }
    let now_secs = crate::util::system_clock().now_unix_nanos() / 1_000_000_000;
    let (y, m, d) = crate::util::clock::civil_from_days(now_secs.div_euclid(86_400));
    params.not_before = rcgen::date_time_ymd(y, m, d);
    params.not_after =
        params.not_before + std::time::Duration::from_secs(u64::from(days) * 86_400 + 86_400);
    Ok(())
}

fn serial() -> SerialNumber {
    // Positive and never zero.
    let n = crate::util::RngSource::from_entropy().next_u64() >> 1 | 1;
    SerialNumber::from(n)
}

fn create_ca(dir: &Path, args: &CaCreateArgs) -> anyhow::Result<()> {
    let cert_path = dir.join(format!("{}-agent-ca.pem", args.domain));
    let key_path = dir.join(format!("{}-agent-ca-key.pem", args.domain));
    refuse_existing(&[&cert_path, &key_path])?;
    let key = KeyPair::generate().context("generating the CA key")?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let serial = serial();
    params.distinguished_name.push(
        DnType::CommonName,
        format!("{} Agent CA {serial}", title(&args.domain)),
    );
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.serial_number = Some(serial);
    validity(&mut params, args.days)?;
    let cert = params.self_signed(&key).context("signing the CA")?;
    write_new(&cert_path, cert.pem().as_bytes(), 0o644)?;
    println!("==> CA certificate saved to: {}", cert_path.display());
    write_new(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
    println!("==> CA certificate key saved to: {}", key_path.display());
    Ok(())
}

fn create_cert(dir: &Path, args: &CertCreateArgs) -> anyhow::Result<()> {
    let role = if args.server {
        PeerRole::Server
    } else if args.client {
        PeerRole::Client
    } else {
        PeerRole::Cli
    };
    let ca_path = args
        .ca
        .clone()
        .unwrap_or_else(|| dir.join(format!("{}-agent-ca.pem", args.domain)));
    let ca_key_path = args
        .key
        .clone()
        .unwrap_or_else(|| dir.join(format!("{}-agent-ca-key.pem", args.domain)));
    let base = format!("{}-{}-{}", args.cluster_region, role.name(), args.domain);
    let cert_path = dir.join(format!("{base}.pem"));
    let key_path = dir.join(format!("{base}-key.pem"));
    refuse_existing(&[&cert_path, &key_path])?;
    let ca_pem = std::fs::read_to_string(&ca_path)
        .with_context(|| format!("the CA certificate {} (-ca)", ca_path.display()))?;
    let ca_key_pem = std::fs::read_to_string(&ca_key_path)
        .with_context(|| format!("the CA key {} (-key)", ca_key_path.display()))?;
    let ca_key = KeyPair::from_pem(&ca_key_pem)
        .with_context(|| format!("{} holds no usable private key", ca_key_path.display()))?;
    let ca_params = CertificateParams::from_ca_cert_pem(&ca_pem)
        .with_context(|| format!("{} is not a CA certificate", ca_path.display()))?;
    let ca = ca_params.self_signed(&ca_key).with_context(|| {
        format!(
            "{} does not belong to {}",
            ca_key_path.display(),
            ca_path.display()
        )
    })?;

    let name = format!("{}.{}.{}", role.name(), args.cluster_region, args.domain);
    let mut dns = vec![name.clone(), "localhost".to_string()];
    dns.extend(args.additional_dnsname.iter().cloned());
    let mut params = CertificateParams::new(dns).context("a certificate name is invalid")?;
    if role != PeerRole::Cli {
        params
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::from([127, 0, 0, 1])));
    }
    for ip in &args.additional_ipaddress {
        params.subject_alt_names.push(SanType::IpAddress(*ip));
    }
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    params.serial_number = Some(serial());
    validity(&mut params, args.days)?;
    let key = KeyPair::generate().context("generating the key")?;
    let cert = params
        .signed_by(&key, &ca, &ca_key)
        .context("signing the certificate")?;
    write_new(&cert_path, cert.pem().as_bytes(), 0o644)?;
    println!(
        "==> Using CA file {} and CA key {}",
        ca_path.display(),
        ca_key_path.display()
    );
    println!(
        "==> {} certificate saved to: {}",
        role.name(),
        cert_path.display()
    );
    write_new(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
    println!(
        "==> {} certificate key saved to: {}",
        role.name(),
        key_path.display()
    );
    Ok(())
}

fn title(domain: &str) -> String {
    let mut c = domain.chars();
    match c.next() {
        Some(first) => first.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

fn refuse_existing(paths: &[&Path]) -> anyhow::Result<()> {
    for p in paths {
        if p.exists() {
            bail!("{} already exists; not overwriting it", p.display());
        }
    }
    Ok(())
}

/// Write a file that must not exist yet, with `mode`.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(bytes)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_created_set_verifies_and_names_its_role() {
        let dir = tempfile::tempdir().unwrap();
        create_ca(
            dir.path(),
            &CaCreateArgs {
                days: 10,
                domain: "nomad".into(),
            },
        )
        .unwrap();
        let args = |server, client, cli| CertCreateArgs {
            server,
            client,
            cli,
            days: 5,
            cluster_region: "global".into(),
            domain: "nomad".into(),
            ca: None,
            key: None,
            additional_dnsname: vec![],
            additional_ipaddress: vec!["127.9.9.9".parse().unwrap()],
        };
        create_cert(dir.path(), &args(true, false, false)).unwrap();
        create_cert(dir.path(), &args(false, true, false)).unwrap();
        // Never overwritten.
        let e = create_cert(dir.path(), &args(true, false, false)).unwrap_err();
        assert!(e.to_string().contains("already exists"), "{e}");
        let ca =
            crate::util::tls::load_roots("ca", &dir.path().join("nomad-agent-ca.pem")).unwrap();
        for (file, role) in [
            ("global-server-nomad.pem", PeerRole::Server),
            ("global-client-nomad.pem", PeerRole::Client),
        ] {
            let certs = crate::util::tls::load_certs("cert", &dir.path().join(file)).unwrap();
            assert_eq!(PeerRole::of_certificate(&certs[0], "global"), Some(role));
            // Chains to the CA and is valid for its IP addresses.
            let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
                std::sync::Arc::new(ca.clone()),
                crate::util::tls::provider(),
            )
            .build()
            .unwrap();
            use rustls::client::danger::ServerCertVerifier;
            for name in ["127.0.0.1", "127.9.9.9", "localhost"] {
                verifier
                    .verify_server_cert(
                        &certs[0],
                        &[],
                        &rustls::pki_types::ServerName::try_from(name).unwrap(),
                        &[],
                        rustls::pki_types::UnixTime::now(),
                    )
                    .unwrap_or_else(|e| panic!("{file} for {name}: {e}"));
            }
        }
        let key = std::fs::metadata(dir.path().join("global-server-nomad-key.pem")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(key.permissions().mode() & 0o777, 0o600);
    }
}
