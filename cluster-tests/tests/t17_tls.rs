//! Mutual TLS on every port, with real processes on loopback and certificates made by
//! `teamster tls ca create` / `tls cert create`: a 3-server + 2-client cluster forms and runs
//! a job; a client certificate cannot send raft traffic or join raft; a certificate from
//! another CA cannot connect; plain TCP, garbage and an oversized handshake on the RPC and
//! HTTPS ports close that connection while the cluster keeps serving; the CLI works with
//! `-ca-cert/-client-cert/-client-key` and with Nomad's environment variables; SIGHUP
//! reloads a replaced certificate and keeps the old one when the new file is bad.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, ensure, Context};
use serde_json::{json, Value};
use teamster::rpc::service::operator::RaftJoinRequest;
use teamster::rpc::{Pool, RpcConfig, RpcError, RpcRequest, ServiceRequest};
use teamster_cluster_tests::api::register;
use teamster_cluster_tests::client_process::{wait_node_status, ClientProcess};
use teamster_cluster_tests::process::{teamster_bin, ClusterOptions, ProcessCluster};
use teamster_cluster_tests::tls::TestCerts;
use teamster_cluster_tests::wait_for;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const FORMATION: Duration = Duration::from_secs(40);

/// Run `teamster tls …` in `dir`.
fn tls_cmd(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new(teamster_bin())
        .arg("tls")
        .args(args)
        .current_dir(dir)
        .output()?;
    ensure!(
        out.status.success(),
        "teamster tls {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// An RPC pool presenting `role`'s certificate of `certs`, trusting their CA.
fn pool_as(certs: &TestCerts, role: &str) -> anyhow::Result<Pool> {
    Ok(Pool::new(
        0,
        RpcConfig {
            tls: Some(certs.agent_tls(role)?),
            ..RpcConfig::for_tests()
        },
    )?)
}

fn client_ip(c: &ProcessCluster, n: u8) -> String {
    let ip = &c.servers[0].ip;
    let (block, _) = ip.rsplit_once('.').expect("an IPv4 address");
    format!("{block}.{}", 100 + n)
}

fn job(id: &str) -> Value {
    json!({
        "ID": id, "Type": "batch", "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "g", "Count": 2,
            "Tasks": [{
                "Name": "t", "Driver": "raw_exec",
                "Config": {"command": "/bin/sh", "args": ["-c", "echo hello"]},
                "Resources": {"CPU": 10, "MemoryMB": 10}
            }]
        }]
    })
}

/// Whether the server at `addr` closes a connection that sends `bytes`: EOF or reset
/// within the deadline, and no byte of an HTTP answer.
async fn closes_on(addr: &str, bytes: &[u8]) -> anyhow::Result<()> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    // The peer may close before everything is written: that is a refusal too.
    let _ = s.write_all(bytes).await;
    let mut buf = vec![0u8; 4096];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut got = Vec::new();
    loop {
        let read = tokio::time::timeout_at(deadline, s.read(&mut buf))
            .await
            .with_context(|| format!("{addr} kept the connection open"))?;
        match read {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    ensure!(
        !got.starts_with(b"HTTP/"),
        "{addr} answered over plain TCP: {}",
        String::from_utf8_lossy(&got)
    );
    Ok(())
}

/// The certificate the HTTPS API at `addr` presents now (a fresh handshake).
async fn presented_cert(addr: &str, certs: &TestCerts) -> anyhow::Result<Vec<u8>> {
    let config = certs.cli_files().client_config("global")?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = rustls::pki_types::ServerName::try_from("server.global.nomad")?;
    let tls = connector.connect(name, tcp).await?;
    let certs = tls
        .get_ref()
        .1
        .peer_certificates()
        .context("no certificate")?;
    Ok(certs[0].to_vec())
}

fn pem_der(path: &Path) -> anyhow::Result<Vec<u8>> {
    Ok(teamster::util::tls::load_certs("cert", path)?[0].to_vec())
}

fn cli(args: &[&str], envs: &[(&str, PathBuf)]) -> anyhow::Result<std::process::Output> {
    let mut cmd = Command::new(teamster_bin());
    cmd.args(args);
    for v in [
        "NOMAD_ADDR",
        "TEAMSTER_ADDR",
        "NOMAD_CACERT",
        "NOMAD_CLIENT_CERT",
        "NOMAD_CLIENT_KEY",
        "TEAMSTER_CACERT",
        "TEAMSTER_CLIENT_CERT",
        "TEAMSTER_CLIENT_KEY",
    ] {
        cmd.env_remove(v);
    }
    for (k, v) in envs {
        cmd.env(k, v);
    }
    Ok(cmd.output()?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mtls_cluster_refuses_what_its_certificates_do_not_allow() -> anyhow::Result<()> {
    let scratch = tempfile::tempdir()?;
    let certs = TestCerts::make(&scratch.path().join("certs"))?;
    let foreign = TestCerts::make(&scratch.path().join("foreign"))?;

    let mut c = ProcessCluster::start(
        3,
        ClusterOptions {
            extra_toml: certs.agent_toml("server"),
            api_tls: Some(certs.cli_files()),
            ..ClusterOptions::default()
        },
    )?;
    let leader = c.wait_leader(FORMATION).await?;
    let api = c.servers[leader].api();
    let rpc_addrs: Vec<String> = c.servers.iter().map(|s| s.rpc_addr()).collect();

    // Two client agents over mutual TLS register and run a job.
    let client_tls = certs.agent_toml("client");
    let clients = [
        ClientProcess::start(
            c.dir(),
            "client-a",
            &client_ip(&c, 1),
            &rpc_addrs,
            &client_tls,
        )?,
        ClientProcess::start(
            c.dir(),
            "client-b",
            &client_ip(&c, 2),
            &rpc_addrs,
            &client_tls,
        )?,
    ];
    for cl in &clients {
        let id = wait_for(Duration::from_secs(15), "node id", || async {
            cl.node_id_via(&api).await
        })
        .await?;
        wait_node_status(&api, &id, "ready", Duration::from_secs(20)).await?;
    }
    register(&api, job("hello")).await?;
    wait_for(
        Duration::from_secs(30),
        "both allocations complete",
        || async {
            let allocs: Vec<Value> = api.get("/v1/job/hello/allocations?stale=true").await.ok()?;
            (allocs.len() == 2 && allocs.iter().all(|a| a["ClientStatus"] == "complete"))
                .then_some(())
        },
    )
    .await?;

    // A client certificate may ping but not send raft traffic or join raft.
    let as_client = pool_as(&certs, "client")?;
    let target = rpc_addrs[leader].as_str();
    let id = as_client
        .ping_addr(target, Duration::from_secs(5))
        .await
        .context("a client certificate may ping")?;
    let vote = RpcRequest::Vote(openraft::raft::VoteRequest::new(
        openraft::Vote::new(1_000, id),
        None,
    ));
    let e = as_client
        .call(id, target, vote, Duration::from_secs(5))
        .await
        .expect_err("a vote from a client certificate");
    ensure!(
        matches!(e, RpcError::PermissionDenied { .. }),
        "vote: {e:?}"
    );
    let append = RpcRequest::AppendEntries(openraft::raft::AppendEntriesRequest {
        vote: openraft::Vote::new_committed(1_000, id),
        prev_log_id: None,
        entries: vec![],
        leader_commit: None,
    });
    let e = as_client
        .call(id, target, append, Duration::from_secs(5))
        .await
        .expect_err("an AppendEntries from a client certificate");
    ensure!(
        matches!(e, RpcError::PermissionDenied { .. }),
        "append: {e:?}"
    );
    let join = RpcRequest::Service(ServiceRequest::OperatorRaftJoin(RaftJoinRequest {
        id: 4242,
        addr: teamster_storage::raft_types::ServerAddr {
            name: "intruder".into(),
            rpc_addr: "127.0.0.1:1".into(),
            http_addr: "127.0.0.1:2".into(),
        },
    }));
    let e = as_client
        .call_addr(target, join, Duration::from_secs(5))
        .await
        .expect_err("a raft join from a client certificate");
    ensure!(
        matches!(e, RpcError::PermissionDenied { .. }),
        "join: {e:?}"
    );
    let peers: Value = api.get("/v1/operator/raft/configuration").await?;
    ensure!(
        peers["Servers"].as_array().map(Vec::len) == Some(3),
        "the raft configuration changed: {peers}"
    );

    // A server certificate from another CA cannot connect at all.
    let intruder = pool_as(&foreign, "server")?;
    let e = intruder
        .ping_addr(target, Duration::from_secs(5))
        .await
        .expect_err("a foreign CA's server certificate");
    ensure!(e.is_transport(), "foreign CA: {e:?}");

    // Plain TCP, garbage and an oversized handshake close that connection only.
    let http_addr = format!("{}:4646", c.servers[leader].ip);
    closes_on(target, b"\x00\x00\x00\x10plain frame here").await?;
    closes_on(target, &[0xAB; 512]).await?;
    let mut huge = vec![0x16, 0x03, 0x01, 0xFF, 0xFF];
    huge.extend(std::iter::repeat_n(0x42u8, 70_000));
    closes_on(target, &huge).await?;
    closes_on(
        &http_addr,
        b"GET /v1/status/leader HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .await?;
    closes_on(&http_addr, &[0xCD; 512]).await?;
    closes_on(&http_addr, &huge).await?;
    // The cluster still serves, over TLS.
    let leader_addr: String = api.get("/v1/status/leader").await?;
    ensure!(!leader_addr.is_empty(), "no leader after the refusals");
    register(&api, job("after")).await?;
    wait_for(
        Duration::from_secs(30),
        "the later job completes",
        || async {
            let allocs: Vec<Value> = api.get("/v1/job/after/allocations?stale=true").await.ok()?;
            (allocs.len() == 2 && allocs.iter().all(|a| a["ClientStatus"] == "complete"))
                .then_some(())
        },
    )
    .await?;

    // The CLI: flags, Nomad's environment variables, and a refusal without a client cert.
    let address = c.servers[leader].http_addr();
    let ca = certs.ca();
    let cert = certs.cert("cli");
    let key = certs.key("cli");
    let out = cli(
        &[
            "node",
            "status",
            "-address",
            &address,
            "-ca-cert",
            ca.to_str().unwrap_or_default(),
            "-client-cert",
            cert.to_str().unwrap_or_default(),
            "-client-key",
            key.to_str().unwrap_or_default(),
        ],
        &[],
    )?;
    ensure!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("client-a"),
        "node status with flags: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cli(
        &["job", "status", "hello"],
        &[
            ("NOMAD_ADDR", PathBuf::from(&address)),
            ("NOMAD_CACERT", ca.clone()),
            ("NOMAD_CLIENT_CERT", cert.clone()),
            ("NOMAD_CLIENT_KEY", key.clone()),
        ],
    )?;
    ensure!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("hello"),
        "job status with NOMAD_* variables: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cli(
        &["node", "status"],
        &[
            ("NOMAD_ADDR", PathBuf::from(&address)),
            ("NOMAD_CACERT", ca.clone()),
        ],
    )?;
    ensure!(
        !out.status.success(),
        "verify_https_client let a CLI without a certificate in: {}",
        String::from_utf8_lossy(&out.stdout)
    );

    // The CLI's own connections speak TLS too: `alloc exec`'s websocket (relayed by the
    // server to the client over HTTPS), a followed log, and a snapshot download.
    let mut sleeper = job("sleeper");
    sleeper["Type"] = json!("service");
    sleeper["TaskGroups"][0]["Count"] = json!(1);
    sleeper["TaskGroups"][0]["Tasks"][0]["Config"]["args"] =
        json!(["-c", "echo started; exec sleep 300"]);
    register(&api, sleeper).await?;
    let alloc_id = wait_for(Duration::from_secs(30), "the sleeper running", || async {
        let allocs: Vec<Value> = api.get("/v1/job/sleeper/allocations").await.ok()?;
        let a = allocs.iter().find(|a| a["ClientStatus"] == "running")?;
        a["ID"].as_str().map(str::to_string)
    })
    .await?;
    let tls_env = [
        ("NOMAD_ADDR", PathBuf::from(&address)),
        ("NOMAD_CACERT", ca.clone()),
        ("NOMAD_CLIENT_CERT", cert.clone()),
        ("NOMAD_CLIENT_KEY", key.clone()),
    ];
    let out = cli(
        &["alloc", "exec", "-i=false", &alloc_id, "echo", "over-tls"],
        &tls_env,
    )?;
    ensure!(
        out.status.success() && String::from_utf8_lossy(&out.stdout) == "over-tls\n",
        "alloc exec over TLS: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cli(&["alloc", "logs", &alloc_id, "t"], &tls_env)?;
    ensure!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("started"),
        "alloc logs over TLS: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let snapshot = scratch.path().join("state.snap");
    let out = cli(
        &[
            "operator",
            "snapshot",
            "save",
            snapshot.to_str().unwrap_or_default(),
        ],
        &tls_env,
    )?;
    ensure!(
        out.status.success() && std::fs::metadata(&snapshot)?.len() > 0,
        "operator snapshot save over TLS: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // SIGHUP: a bad file keeps the old certificate; a good new one is used by new
    // connections.
    let s0 = 0;
    let s0_http = format!("{}:4646", c.servers[s0].ip);
    let cert_file = certs.cert("server");
    let key_file = certs.key("server");
    let old = pem_der(&cert_file)?;
    ensure!(
        presented_cert(&s0_http, &certs).await? == old,
        "the first certificate"
    );
    let good_cert = std::fs::read(&cert_file)?;
    let good_key = std::fs::read(&key_file)?;
    std::fs::write(&cert_file, b"not a certificate")?;
    c.reload(s0)?;
    let log = c.servers[s0].log_path().to_path_buf();
    wait_for(
        Duration::from_secs(15),
        "the failed reload is logged",
        || async {
            std::fs::read_to_string(&log)
                .ok()?
                .contains("tls reload failed")
                .then_some(())
        },
    )
    .await?;
    ensure!(
        presented_cert(&s0_http, &certs).await? == old,
        "a bad file replaced the certificate"
    );
    // A new server certificate from the same CA.
    let fresh = scratch.path().join("fresh");
    std::fs::create_dir_all(&fresh)?;
    tls_cmd(
        &fresh,
        &[
            "cert",
            "create",
            "-server",
            "-ca",
            certs.ca().to_str().unwrap_or_default(),
            "-key",
            certs
                .dir()
                .join("nomad-agent-ca-key.pem")
                .to_str()
                .unwrap_or_default(),
        ],
    )?;
    std::fs::copy(fresh.join("global-server-nomad.pem"), &cert_file)?;
    std::fs::copy(fresh.join("global-server-nomad-key.pem"), &key_file)?;
    let new = pem_der(&cert_file)?;
    ensure!(new != old, "the fresh certificate differs");
    c.reload(s0)?;
    wait_for(
        Duration::from_secs(15),
        "the new certificate is served",
        || async { (presented_cert(&s0_http, &certs).await.ok()? == new).then_some(()) },
    )
    .await?;
    // The reloaded server still talks raft with the others and serves the API.
    let _ = (good_cert, good_key);
    let l = c.wait_leader(FORMATION).await?;
    let status: Vec<Value> = c.servers[l].api().get("/v1/nodes").await?;
    if status.len() != 2 {
        bail!("nodes after the reload: {status:?}");
    }
    Ok(())
}
