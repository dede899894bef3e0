//! Hostile requests, frames and tasks against a real `teamster agent --dev` (issue 52): each
//! finding reproduced as it was found, and the agent still answering afterwards.
//!
//! - a job asking for 2³¹ allocations is refused (`job_max_count`), as are IDs that read as
//!   paths and resources no node has;
//! - HCL that would evaluate for minutes or allocate gigabytes is refused within its budget
//!   while `/v1/status/leader` keeps answering;
//! - a task's symlink to `/` lets the fs API read nothing outside its allocation directory;
//! - a half-sent HTTP request and a connection over `http_max_conns_per_client` hold
//!   nothing; on the RPC port, a frame sent in part and a crowd of idle connections are
//!   closed by their deadlines while another address is still served.
//!
//! Search under ACLs and forwarding with the caller's token are in `t18_acl`; a docker
//! task failing to start is in `t16_docker`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};
use teamster::api::ApiClient;
use teamster_cluster_tests::dev::{dev_ip_at, Killed};
use teamster_cluster_tests::process::teamster_bin;
use teamster_cluster_tests::wait_for;

/// The agent's `[limits]`, short enough to watch pass.
const LIMITS: &str =
    "[limits]\nhttp_max_conns_per_client = 40\nhttp_header_read_timeout = \"1s\"\n\
                      rpc_max_conns_per_client = 30\nrpc_handshake_timeout = \"1s\"\n\
                      rpc_frame_timeout = \"1s\"\n";

struct Agent {
    _process: Killed,
    _dir: tempfile::TempDir,
    ip: String,
    api: ApiClient,
    http: reqwest::Client,
    log: std::path::PathBuf,
}

impl Agent {
    async fn start(host: u8) -> anyhow::Result<Agent> {
        let dir = tempfile::tempdir()?;
        let ip = dev_ip_at(host);
        let config = dir.path().join("agent.toml");
        std::fs::write(
            &config,
            format!(
                "data_dir = {:?}\n{LIMITS}",
                dir.path().join("data").display().to_string()
            ),
        )?;
        let log = dir.path().join("agent.log");
        let out = std::fs::File::create(&log)?;
        let process = Killed(
            Command::new(teamster_bin())
                .args(["agent", "--dev", "--config"])
                .arg(&config)
                .args(["--bind", &ip])
                .stdin(Stdio::null())
                .stdout(out.try_clone()?)
                .stderr(out)
                .spawn()?,
        );
        let api = ApiClient::new(&format!("http://{ip}:4646"));
        let agent = Agent {
            _process: process,
            _dir: dir,
            ip,
            api,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()?,
            log,
        };
        wait_for(Duration::from_secs(60), "the dev node ready", || async {
            let nodes: Vec<Value> = agent.api.get("/v1/nodes").await.ok()?;
            nodes.iter().any(|n| n["Status"] == "ready").then_some(())
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", agent.log_text()))?;
        Ok(agent)
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}:4646{path}", self.ip)
    }

    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, String) {
        let mut req = self.http.request(method, self.url(path));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("the agent answers");
        let status = resp.status();
        (status, resp.text().await.unwrap_or_default())
    }

    /// `/v1/status/leader` answers, and how long it took.
    async fn leader_answers(&self) -> Duration {
        let started = Instant::now();
        let (s, body) = self
            .send(reqwest::Method::GET, "/v1/status/leader", None)
            .await;
        assert_eq!(s, StatusCode::OK, "{body}");
        started.elapsed()
    }
}

fn job(id: &str, count: u64, script: &str) -> Value {
    json!({"Job": {
        "ID": id, "Name": id, "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": count, "Tasks": [{
            "Name": "t", "Driver": "raw_exec",
            "Config": {"command": "/bin/sh", "args": ["-c", script]},
            "Resources": {"CPU": 20, "MemoryMB": 16}
        }]}]
    }})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_jobs_hcl_and_task_files_are_refused_and_the_agent_lives() -> anyhow::Result<()> {
    let agent = Agent::start(22).await?;
    use reqwest::Method;

    // Finding 1: `Count` 2³¹ killed the agent at every restart. Refused; scaling to it too.
    let (s, body) = agent
        .send(
            Method::PUT,
            "/v1/jobs",
            Some(job("huge", 1 << 31, "sleep 1")),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body.contains("total count was greater than configured job_max_count: 2147483648 > 50000"),
        "{body}"
    );
    let (s, body) = agent
        .send(Method::PUT, "/v1/jobs", Some(job("small", 1, "sleep 600")))
        .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let (s, body) = agent
        .send(
            Method::POST,
            "/v1/job/small/scale",
            Some(json!({"Count": 1u64 << 31, "Target": {"Group": "g"}})),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("job_max_count"), "{body}");

    // Finding 8: IDs that read as paths, and resources no node has.
    for id in ["../../etc", "*", "a//b"] {
        let (s, body) = agent
            .send(Method::PUT, "/v1/jobs", Some(job(id, 1, "sleep 1")))
            .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{id}: {body}");
        assert!(body.contains("job ID"), "{id}: {body}");
    }
    let mut greedy = job("greedy", 1, "sleep 1");
    greedy["Job"]["TaskGroups"][0]["Tasks"][0]["Resources"] =
        json!({"CPU": 1u64 << 40, "MemoryMB": 1u64 << 63});
    let (s, body) = agent.send(Method::PUT, "/v1/jobs", Some(greedy)).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body.contains("CPU 1099511627776 is more than any node offers"),
        "{body}"
    );

    // Finding 2: HCL bombs, sent together, answer 400 naming the budget while the leader
    // route keeps answering.
    let nested = r#"
locals {
  r = range(1024)
  x = [for a in local.r : [for b in local.r : [for c in local.r : "${a}${b}${c}"]]]
}
job "bomb" {
  group "g" {
    task "t" { driver = "mock" }
  }
}
"#;
    let mut doubling = format!("locals {{\n  s0 = \"{}\"\n", "x".repeat(1024));
    for i in 1..=20 {
        doubling.push_str(&format!(
            "  s{i} = \"${{local.s{}}}${{local.s{}}}\"\n",
            i - 1,
            i - 1
        ));
    }
    doubling.push_str("}\njob \"bomb\" {\n  meta { s = local.s20 }\n  group \"g\" {\n    task \"t\" { driver = \"mock\" }\n  }\n}\n");
    assert!(nested.len() < 400 && doubling.len() < 2048);
    let started = Instant::now();
    let bombs: Vec<_> = [nested.to_string(), doubling.clone(), nested.to_string()]
        .into_iter()
        .map(|hcl| {
            let http = agent.http.clone();
            let url = agent.url("/v1/jobs/parse");
            tokio::spawn(async move {
                let resp = http
                    .post(url)
                    .json(&json!({"JobHCL": hcl}))
                    .send()
                    .await
                    .expect("an answer");
                (resp.status(), resp.text().await.unwrap_or_default())
            })
        })
        .collect();
    let mut slowest_leader = Duration::ZERO;
    while bombs.iter().any(|b| !b.is_finished()) && started.elapsed() < Duration::from_secs(30) {
        slowest_leader = slowest_leader.max(agent.leader_answers().await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for bomb in bombs {
        let (s, body) = bomb.await?;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{body}");
        assert!(body.contains("budget"), "{body}");
    }
    assert!(
        slowest_leader < Duration::from_secs(5),
        "the API stalled for {slowest_leader:?} while job files were evaluated"
    );

    // Finding 3: a task's symlinks to `/` and to host files read nothing outside its
    // allocation directory, through any fs route.
    let (s, body) = agent
        .send(
            Method::PUT,
            "/v1/jobs",
            Some(job(
                "links",
                1,
                "ln -s / root_link; ln -s /etc/passwd pw; ln -s ../../ up; echo inside > mine; \
                 ln -s mine mine_link; echo ready; sleep 600",
            )),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let alloc: String = wait_for(Duration::from_secs(60), "the links task ready", || async {
        let allocs: Vec<Value> = agent.api.get("/v1/job/links/allocations").await.ok()?;
        let id = allocs.iter().find(|a| a["ClientStatus"] == "running")?["ID"]
            .as_str()?
            .to_string();
        let (s, body) = agent
            .send(
                Method::GET,
                &format!("/v1/client/fs/cat/{id}?path=t/mine_link"),
                None,
            )
            .await;
        (s == StatusCode::OK && body == "inside\n").then_some(id)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", agent.log_text()))?;
    let host_passwd = std::fs::read_to_string("/etc/passwd")?;
    let mut attempts = 0;
    for target in [
        "t/root_link/etc/passwd",
        "t/root_link/proc/self/environ",
        "t/pw",
        "t/up/../../../etc/passwd",
        "t/up",
        "t/root_link",
    ] {
        for route in [
            format!("/v1/client/fs/cat/{alloc}?path={target}"),
            format!("/v1/client/fs/readat/{alloc}?path={target}&offset=0&limit=4096"),
            format!("/v1/client/fs/stream/{alloc}?path={target}&plain=true"),
            format!("/v1/client/fs/stat/{alloc}?path={target}"),
            format!("/v1/client/fs/ls/{alloc}?path={target}"),
        ] {
            attempts += 1;
            let (s, body) = agent.send(Method::GET, &route, None).await;
            assert!(
                s.is_client_error(),
                "{route}: {s} reached outside the allocation directory: {}",
                &body[..body.len().min(200)]
            );
            assert!(!body.contains("root:x:0:0"), "{route}");
            assert!(
                !host_passwd.is_empty() && !body.contains(host_passwd.trim()),
                "{route}"
            );
        }
    }
    assert_eq!(attempts, 30);
    // `ls` shows the links as links, unfollowed.
    let listing: Vec<Value> = agent
        .api
        .get(&format!("/v1/client/fs/ls/{alloc}?path=t"))
        .await?;
    let root_link = listing
        .iter()
        .find(|e| e["Name"] == "root_link")
        .expect("the link listed");
    assert_eq!(root_link["IsDir"], false);
    assert!(
        root_link["FileMode"]
            .as_str()
            .unwrap_or("")
            .starts_with('L'),
        "{root_link}"
    );
    agent.leader_answers().await;
    Ok(())
}

/// Opens a TCP connection to `addr` from `source` (an address of its own, so that the
/// per-client limits this test fills are not the ones its other calls use).
fn connect_from(source: &str, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = socket2_free_connect(source, addr)?;
    socket.set_read_timeout(Some(Duration::from_secs(20)))?;
    Ok(socket)
}

fn socket2_free_connect(source: &str, addr: SocketAddr) -> std::io::Result<TcpStream> {
    // std has no bind-before-connect; tokio's TcpSocket does, on a small runtime.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    let source: std::net::IpAddr = source.parse().expect("an IP");
    rt.block_on(async {
        let s = tokio::net::TcpSocket::new_v4()?;
        s.bind(SocketAddr::new(source, 0))?;
        let stream = s.connect(addr).await?;
        stream.into_std()
    })
    .and_then(|s| {
        s.set_nonblocking(false)?;
        Ok(s)
    })
}

/// Whether the peer has closed `stream` (EOF or reset) before the read timeout; anything
/// it sent before is read and dropped.
fn closed_by_peer(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_requests_frames_and_idle_crowds_are_closed_by_their_deadlines(
) -> anyhow::Result<()> {
    let agent = Agent::start(23).await?;
    let http_addr: SocketAddr = format!("{}:4646", agent.ip).parse()?;
    let rpc_addr: SocketAddr = format!("{}:4647", agent.ip).parse()?;
    // The crowd comes from an address of its own.
    let crowd_ip = {
        let (block, _) = agent.ip.rsplit_once('.').expect("IPv4");
        format!("{block}.200")
    };

    let result = tokio::task::spawn_blocking({
        let crowd_ip = crowd_ip.clone();
        move || -> anyhow::Result<()> {
            // HTTP: a request whose headers never end is closed at the header read timeout.
            let mut half = connect_from(&crowd_ip, http_addr)?;
            half.write_all(b"GET /v1/status/leader HTTP/1.1\r\nHost: x\r\n")?;
            let opened = Instant::now();
            anyhow::ensure!(closed_by_peer(&mut half), "a half-sent request was held");
            anyhow::ensure!(opened.elapsed() < Duration::from_secs(10));
            // Over `http_max_conns_per_client` (40): 429 and closed.
            let held: Vec<TcpStream> = (0..40)
                .map(|_| connect_from(&crowd_ip, http_addr))
                .collect::<Result<_, _>>()?;
            let mut over = connect_from(&crowd_ip, http_addr)?;
            let mut answer = String::new();
            over.read_to_string(&mut answer)?;
            anyhow::ensure!(
                answer.starts_with("HTTP/1.1 429 Too Many Requests"),
                "over the limit: {answer:?}"
            );
            drop(held);

            // RPC: a frame declaring 64 MiB, sent in part, is closed at the frame deadline.
            let mut partial = connect_from(&crowd_ip, rpc_addr)?;
            let mut prefix = ((64u32 << 20) - 8).to_be_bytes().to_vec();
            prefix.extend_from_slice(&[teamster::rpc::frame::PROTOCOL_VERSION, 0]);
            prefix.extend_from_slice(&[0u8; 8192]);
            partial.write_all(&prefix)?;
            anyhow::ensure!(closed_by_peer(&mut partial), "a half-sent frame was held");

            // 1 100 idle connections: those over the per-client limit closed at once, the
            // rest at the handshake deadline.
            let opened = Instant::now();
            let mut crowd = Vec::new();
            for _ in 0..1100 {
                match connect_from(&crowd_ip, rpc_addr) {
                    Ok(c) => crowd.push(c),
                    // The kernel's backlog may refuse some outright: closed, too.
                    Err(_) => continue,
                }
            }
            let mut closed = 0;
            for c in &mut crowd {
                if closed_by_peer(c) {
                    closed += 1;
                }
            }
            anyhow::ensure!(
                closed == crowd.len(),
                "{} of {} idle connections still open",
                crowd.len() - closed,
                crowd.len()
            );
            anyhow::ensure!(opened.elapsed() < Duration::from_secs(30));
            Ok(())
        }
    });
    // Meanwhile, from another address, the agent answers over HTTP and RPC.
    let pool = teamster::rpc::Pool::new(0, teamster::rpc::RpcConfig::for_tests())?;
    while !result.is_finished() {
        agent.leader_answers().await;
        let ping = pool
            .call(
                0,
                &rpc_addr.to_string(),
                teamster::rpc::RpcRequest::Ping,
                Duration::from_secs(5),
            )
            .await;
        assert!(ping.is_ok(), "RPC from another address: {ping:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    result.await??;
    agent.leader_answers().await;
    Ok(())
}
