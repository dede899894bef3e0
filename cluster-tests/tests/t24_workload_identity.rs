//! The root keyring and workload identities (issue 49, part 2) on three real servers with
//! ACLs on and a real client running `raw_exec` tasks:
//!
//! - the leader creates the first root key; its public key is published at
//!   `/.well-known/jwks.json` (no token needed; a client-only agent publishes the same set,
//!   from the servers), the keys are listed for operators only;
//! - a task with `identity { env = true, file = true }` and a named identity gets signed
//!   tokens in `NOMAD_TOKEN` and `secrets/nomad_token` (`secrets/nomad_<name>.jwt`), which a
//!   standard JWT library verifies against the JWKS, with Nomad's claims;
//! - the API takes the task's token for service lookups and for nothing else, keeps taking
//!   it after a rotation (the old key still verifies), and refuses it once the allocation
//!   is terminal or its key is removed; the active key cannot be removed;
//! - the key-encryption key is never in the raft log or snapshots on disk, and a new leader
//!   gets it from its peers and signs.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use teamster_cluster_tests::client_process::{wait_node_status, ClientProcess};
use teamster_cluster_tests::process::{ClusterOptions, ProcessCluster};
use teamster_cluster_tests::wait_for;

const ISSUER: &str = "https://teamster.example";

async fn call(
    method: Method,
    url: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let client = reqwest::Client::new();
    let mut req = client.request(method, url);
    if let Some(t) = token {
        req = req.header("X-Nomad-Token", t);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    match req.send().await {
        Ok(resp) => {
            let status = resp.status();
            let text = resp.text().await.unwrap_or_default();
            let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
            (status, value)
        }
        Err(e) => (StatusCode::BAD_GATEWAY, Value::String(e.to_string())),
    }
}

fn job(id: &str, script: &str) -> Value {
    json!({ "Job": {
        "ID": id, "Type": "service", "Datacenters": ["*"],
        "TaskGroups": [{
            "Name": "g", "Count": 1,
            "Networks": [{ "DynamicPorts": [{ "Label": "http" }] }],
            "Services": [{ "Name": format!("{id}-svc"), "PortLabel": "http", "Provider": "nomad" }],
            "Tasks": [{
                "Name": "t", "Driver": "raw_exec",
                "Config": { "command": "/bin/sh", "args": ["-c", script] },
                "Resources": { "CPU": 20, "MemoryMB": 16 },
                "KillTimeout": 1_000_000_000u64,
                "Identity": { "Env": true, "File": true },
                "Identities": [{ "Name": "vault_x", "Audience": ["x.example"], "File": true,
                                  "TTL": 3_600_000_000_000u64 }]
            }]
        }]
    }})
}

/// The task copies what it was given where the file API may read it (`secrets/` is never
/// served).
const COPY_TOKENS: &str = "echo \"$NOMAD_TOKEN\" > local/env_token; \
     cp secrets/nomad_token local/file_token; cp secrets/nomad_vault_x.jwt local/named_token; \
     exec sleep 600";

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default()
}

/// The claims of `token`, verified by `jsonwebtoken` against the key of `jwks` its header
/// names, with `aud` and Nomad's issuer.
fn verify_with_jwks(token: &str, jwks: &Value, aud: &str) -> Result<Value, String> {
    let header = jsonwebtoken::decode_header(token).map_err(|e| e.to_string())?;
    let kid = header.kid.ok_or("no kid")?;
    let set: jsonwebtoken::jwk::JwkSet =
        serde_json::from_value(jwks.clone()).map_err(|e| e.to_string())?;
    let jwk = set
        .find(&kid)
        .ok_or(format!("kid {kid} not in the JWKS {jwks}"))?;
    let key = jsonwebtoken::DecodingKey::from_jwk(jwk).map_err(|e| e.to_string())?;
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::EdDSA);
    validation.set_audience(&[aud]);
    validation.set_issuer(&[ISSUER]);
    validation.required_spec_claims.clear();
    let data =
        jsonwebtoken::decode::<Value>(token, &key, &validation).map_err(|e| e.to_string())?;
    Ok(data.claims)
}

/// The ID of `job`'s running allocation, asked of the API at `base`, once there is one.
async fn running_alloc(
    base: &str,
    token: &str,
    job: &str,
    timeout: Duration,
) -> anyhow::Result<String> {
    let url = format!("{base}/v1/job/{job}/allocations");
    wait_for(timeout, &format!("{job} running"), || async {
        let (_, allocs) = call(Method::GET, &url, Some(token), None).await;
        allocs
            .as_array()?
            .iter()
            .find(|a| a["ClientStatus"] == "running")
            .and_then(|a| a["ID"].as_str().map(String::from))
    })
    .await
}

/// The servers' log lines about keys and leadership (for failures).
fn keyring_logs(c: &ProcessCluster) -> String {
    c.servers
        .iter()
        .filter_map(|s| std::fs::read_to_string(s.log_path()).ok())
        .flat_map(|l| {
            l.lines()
                .filter(|l| l.contains("key") || l.contains("leader"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Every file under `dir`, recursively.
fn files_under(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            files_under(&p, out);
        } else {
            out.push(p);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_get_verifiable_identities_that_the_api_takes_for_what_workloads_may_do(
) -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let mut c = ProcessCluster::start(
        3,
        ClusterOptions {
            server_toml: format!("oidc_issuer = {ISSUER:?}\n"),
            extra_toml: "\n[acl]\nenabled = true\n".into(),
            ..ClusterOptions::default()
        },
    )?;
    let leader = c.wait_leader(Duration::from_secs(30)).await?;
    let base = |c: &ProcessCluster, i: usize| c.servers[i].http_addr();
    let (status, boot) = call(
        Method::PUT,
        &format!("{}/v1/acl/bootstrap", base(&c, leader)),
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{boot}");
    let root = boot["SecretID"].as_str().unwrap_or_default().to_string();

    // The first root key, published for anyone; listed for operators only.
    let jwks = wait_for(Duration::from_secs(20), "the first root key", || async {
        let (s, v) = call(
            Method::GET,
            &format!("{}/.well-known/jwks.json", base(&c, leader)),
            None,
            None,
        )
        .await;
        (s == StatusCode::OK && v["keys"].as_array().is_some_and(|k| k.len() == 1)).then_some(v)
    })
    .await?;
    assert_eq!(jwks["keys"][0]["alg"], "EdDSA");
    let (s, _) = call(
        Method::GET,
        &format!("{}/v1/operator/keyring/keys", base(&c, leader)),
        None,
        None,
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, keys) = call(
        Method::GET,
        &format!("{}/v1/operator/keyring/keys", base(&c, leader)),
        Some(&root),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{keys}");
    assert_eq!(keys[0]["State"], "active", "{keys}");
    let first_key = keys[0]["KeyID"].as_str().unwrap_or_default().to_string();
    assert_eq!(jwks["keys"][0]["kid"], first_key.as_str());
    let (s, oidc) = call(
        Method::GET,
        &format!("{}/.well-known/openid-configuration", base(&c, leader)),
        None,
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(oidc["jwks_uri"], format!("{ISSUER}/.well-known/jwks.json"));

    // A client with ACLs, and a task with a default and a named identity.
    let client_ip = {
        let (block, _) = c.servers[0].ip.rsplit_once('.').expect("IPv4");
        format!("{block}.77")
    };
    let rpcs: Vec<String> = c.servers.iter().map(|s| s.rpc_addr()).collect();
    let client = ClientProcess::start(
        c.dir(),
        "wid-client",
        &client_ip,
        &rpcs,
        "\n[acl]\nenabled = true\n",
    )?;
    let root_api = c.servers[leader]
        .api()
        .with_scope(teamster::api::RequestScope {
            token: Some(root.clone()),
            ..Default::default()
        });
    let node_id = wait_for(Duration::from_secs(20), "the node registered", || {
        client.node_id_via(&root_api)
    })
    .await?;
    wait_node_status(&root_api, &node_id, "ready", Duration::from_secs(20)).await?;
    let (s, body) = call(
        Method::PUT,
        &format!("{}/v1/jobs", base(&c, leader)),
        Some(&root),
        Some(job("wid", COPY_TOKENS)),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let read = |c: &ProcessCluster, server: usize, alloc: &str, file: &str| {
        let url = format!(
            "{}/v1/client/fs/cat/{alloc}?path=t/local/{file}",
            base(c, server)
        );
        let root = root.clone();
        async move {
            let (s, v) = call(Method::GET, &url, Some(&root), None).await;
            (s == StatusCode::OK)
                .then(|| v.as_str().map(|t| t.trim().to_string()))
                .flatten()
                .filter(|t| !t.is_empty())
        }
    };
    let alloc_id = running_alloc(&base(&c, leader), &root, "wid", Duration::from_secs(60))
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", client.log_tail(60)))?;
    wait_for(Duration::from_secs(20), "the copied tokens", || {
        read(&c, leader, &alloc_id, "named_token")
    })
    .await?;
    let env_token = read(&c, leader, &alloc_id, "env_token")
        .await
        .expect("env token");
    let file_token = read(&c, leader, &alloc_id, "file_token")
        .await
        .expect("file token");
    let named_token = read(&c, leader, &alloc_id, "named_token")
        .await
        .expect("named token");
    assert_eq!(env_token, file_token, "NOMAD_TOKEN is secrets/nomad_token");

    // The client-only agent publishes the same keys and discovery document (from the
    // servers; it has no state of its own).
    let client_base = format!("http://{client_ip}:4646");
    let (s, client_jwks) = call(
        Method::GET,
        &format!("{client_base}/.well-known/jwks.json"),
        None,
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{client_jwks}");
    assert_eq!(client_jwks, jwks);
    let (s, client_oidc) = call(
        Method::GET,
        &format!("{client_base}/.well-known/openid-configuration"),
        None,
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{client_oidc}");
    assert_eq!(client_oidc, oidc);

    // A standard JWT library verifies both against the published keys, with Nomad's claims.
    let claims = verify_with_jwks(&env_token, &jwks, "nomadproject.io")
        .map_err(|e| anyhow::anyhow!("{e}\n{}", keyring_logs(&c)))?;
    assert_eq!(claims["nomad_namespace"], "default");
    assert_eq!(claims["nomad_job_id"], "wid");
    assert_eq!(claims["nomad_allocation_id"], alloc_id.as_str());
    assert_eq!(claims["nomad_task"], "t");
    assert_eq!(claims["sub"], "global:default:wid:g:t:default");
    assert!(
        claims.get("exp").is_none(),
        "the default identity does not expire"
    );
    let named = verify_with_jwks(&named_token, &jwks, "x.example")
        .map_err(|e| anyhow::anyhow!("{e}: named {named_token} default {env_token} jwks {jwks}"))?;
    let exp = named["exp"].as_i64().unwrap_or_default();
    assert!((exp - now_secs() - 3600).abs() < 120, "exp {exp}");
    assert!(verify_with_jwks(&named_token, &jwks, "nomadproject.io").is_err());
    let mut forged = env_token.clone();
    forged.pop();
    forged.push(if env_token.ends_with('A') { 'B' } else { 'A' });

    // The API takes the task's token for service lookups and nothing else.
    let follower = (leader + 1) % 3;
    for server in [leader, follower] {
        let (s, v) = call(
            Method::GET,
            &format!("{}/v1/service/wid-svc", base(&c, server)),
            Some(&env_token),
            None,
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        let (s, _) = call(
            Method::GET,
            &format!("{}/v1/jobs", base(&c, server)),
            Some(&env_token),
            None,
        )
        .await;
        assert_eq!(s, StatusCode::FORBIDDEN);
    }
    let (s, _) = call(
        Method::GET,
        &format!("{}/v1/service/wid-svc", base(&c, leader)),
        Some(&forged),
        None,
    )
    .await;
    assert_eq!(
        s,
        StatusCode::FORBIDDEN,
        "a token whose signature does not verify"
    );

    // Its job's variables are its to read, without a policy; others' are not.
    for (path, own) in [
        ("nomad/jobs/wid", true),
        ("nomad/jobs/other", false),
        ("app/x", false),
    ] {
        let (s, body) = call(
            Method::PUT,
            &format!("{}/v1/var/{path}", base(&c, leader)),
            Some(&root),
            Some(json!({ "Items": { "k": "v" } })),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{body}");
        let (s, body) = call(
            Method::GET,
            &format!("{}/v1/var/{path}", base(&c, leader)),
            Some(&env_token),
            None,
        )
        .await;
        let want = if own {
            StatusCode::OK
        } else {
            StatusCode::FORBIDDEN
        };
        assert_eq!(s, want, "{path}: {body}");
    }
    let (s, _) = call(
        Method::PUT,
        &format!("{}/v1/var/nomad/jobs/wid", base(&c, leader)),
        Some(&env_token),
        Some(json!({ "Items": { "k": "w" } })),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "reading is not writing");
    for path in ["nomad/jobs/wid", "nomad/jobs/other", "app/x"] {
        let (s, _) = call(
            Method::DELETE,
            &format!("{}/v1/var/{path}", base(&c, leader)),
            Some(&root),
            None,
        )
        .await;
        assert_eq!(s, StatusCode::NO_CONTENT);
    }

    // The KEK never reaches the raft log or its snapshots on disk.
    let keystore = c.servers[leader].data_dir.join("server/keystore");
    let kek_files: Vec<_> = std::fs::read_dir(&keystore)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "kek"))
        .collect();
    assert_eq!(kek_files.len(), 1, "{kek_files:?}");
    let kek = std::fs::read(&kek_files[0])?;
    assert_eq!(kek.len(), 32);
    let mut stored = Vec::new();
    for server in &c.servers {
        files_under(&server.data_dir.join("server"), &mut stored);
    }
    for file in stored
        .iter()
        .filter(|p| !p.components().any(|c| c.as_os_str() == "keystore"))
    {
        let bytes = std::fs::read(file).unwrap_or_default();
        assert!(!contains(&bytes, &kek), "the KEK is in {}", file.display());
    }

    // Rotation: a new active key; tokens of the old one still verify and are still taken.
    let (s, rotated) = call(
        Method::PUT,
        &format!("{}/v1/operator/keyring/rotate", base(&c, leader)),
        Some(&root),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{rotated}");
    assert_eq!(rotated["Key"]["State"], "active");
    let (_, jwks2) = call(
        Method::GET,
        &format!("{}/.well-known/jwks.json", base(&c, leader)),
        None,
        None,
    )
    .await;
    assert_eq!(jwks2["keys"].as_array().map(Vec::len), Some(2), "{jwks2}");
    verify_with_jwks(&env_token, &jwks2, "nomadproject.io")
        .map_err(|e| anyhow::anyhow!("{e}\n{}", keyring_logs(&c)))?;
    let (s, _) = call(
        Method::GET,
        &format!("{}/v1/service/wid-svc", base(&c, leader)),
        Some(&env_token),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let new_key = rotated["Key"]["KeyID"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let (s, refused) = call(
        Method::DELETE,
        &format!("{}/v1/operator/keyring/key/{new_key}", base(&c, leader)),
        Some(&root),
        None,
    )
    .await;
    assert_eq!(
        s,
        StatusCode::BAD_REQUEST,
        "the active key stays: {refused}"
    );

    // Every server fetches the KEK from its peers; a new leader then signs with the key
    // that was active.
    let kek_name = kek_files[0].file_name().expect("a file").to_owned();
    wait_for(
        Duration::from_secs(20),
        "the KEK on every server",
        || async {
            c.servers
                .iter()
                .all(|s| {
                    std::fs::read(s.data_dir.join("server/keystore").join(&kek_name))
                        .is_ok_and(|k| k == kek)
                })
                .then_some(())
        },
    )
    .await?;
    c.kill(leader);
    let leader = c.wait_leader(Duration::from_secs(30)).await?;
    let (s, body) = call(
        Method::PUT,
        &format!("{}/v1/jobs", base(&c, leader)),
        Some(&root),
        Some(job("wid2", COPY_TOKENS)),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let alloc2 = running_alloc(&base(&c, leader), &root, "wid2", Duration::from_secs(90))
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", client.log_tail(60)))?;
    let token2 = wait_for(Duration::from_secs(30), "the second job's token", || {
        read(&c, leader, &alloc2, "env_token")
    })
    .await?;
    let claims2 = verify_with_jwks(&token2, &jwks2, "nomadproject.io")
        .map_err(|e| anyhow::anyhow!("{e}\n{}", keyring_logs(&c)))?;
    assert_eq!(claims2["nomad_job_id"], "wid2");
    assert_eq!(
        jsonwebtoken::decode_header(&token2)?.kid.as_deref(),
        Some(new_key.as_str()),
        "signed by the active key"
    );

    // Stopped: the allocation is terminal, its token is refused.
    let (s, _) = call(
        Method::DELETE,
        &format!("{}/v1/job/wid", base(&c, leader)),
        Some(&root),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    wait_for(Duration::from_secs(60), "the old token refused", || async {
        let (s, _) = call(
            Method::GET,
            &format!("{}/v1/service/wid2-svc", base(&c, leader)),
            Some(&env_token),
            None,
        )
        .await;
        (s == StatusCode::FORBIDDEN).then_some(())
    })
    .await?;
    // The old key removed: nothing it signed verifies any more.
    let (s, body) = call(
        Method::DELETE,
        &format!("{}/v1/operator/keyring/key/{first_key}", base(&c, leader)),
        Some(&root),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let (_, jwks3) = call(
        Method::GET,
        &format!("{}/.well-known/jwks.json", base(&c, leader)),
        None,
        None,
    )
    .await;
    assert!(verify_with_jwks(&env_token, &jwks3, "nomadproject.io").is_err());
    let (s, _) = call(
        Method::GET,
        &format!("{}/v1/service/wid2-svc", base(&c, leader)),
        Some(&token2),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "the new key's tokens still work");
    drop(client);
    Ok(())
}

/// Every file under `dirs` whose bytes contain `needle`.
fn files_containing(dirs: &[std::path::PathBuf], needle: &[u8]) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for dir in dirs {
        files_under(dir, &mut files);
    }
    files
        .into_iter()
        .filter(|f| contains(&std::fs::read(f).unwrap_or_default(), needle))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn variables_are_encrypted_at_rest_checked_and_set_and_scoped_by_policy() -> anyhow::Result<()>
{
    teamster_cluster_tests::init_test_tracing();
    let mut c = ProcessCluster::start(
        3,
        ClusterOptions {
            extra_toml: "\n[acl]\nenabled = true\n".into(),
            raft_toml: "snapshot_threshold = 20\ntrailing_logs = 5\n".into(),
            ..ClusterOptions::default()
        },
    )?;
    let leader = c.wait_leader(Duration::from_secs(30)).await?;
    let url = |c: &ProcessCluster, i: usize, p: &str| format!("{}{p}", c.servers[i].http_addr());
    let (s, boot) = call(
        Method::PUT,
        &url(&c, leader, "/v1/acl/bootstrap"),
        None,
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{boot}");
    let root = boot["SecretID"].as_str().unwrap_or_default().to_string();
    wait_for(Duration::from_secs(20), "the first root key", || async {
        let (_, v) = call(
            Method::GET,
            &url(&c, leader, "/.well-known/jwks.json"),
            None,
            None,
        )
        .await;
        v["keys"]
            .as_array()
            .is_some_and(|k| !k.is_empty())
            .then_some(())
    })
    .await?;

    // Written, read back (from a follower too), listed.
    let secret = "hunter2-7f3a9c";
    let (s, written) = call(
        Method::PUT,
        &url(&c, leader, "/v1/var/app/db"),
        Some(&root),
        Some(json!({ "Items": { "user": "app", "password": secret } })),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{written}");
    assert_eq!(written["Items"]["password"], secret);
    assert_eq!(written["Path"], "app/db");
    let first_index = written["ModifyIndex"].as_u64().unwrap_or_default();
    assert!(first_index > 0);
    let follower = (leader + 1) % 3;
    let read = wait_for(
        Duration::from_secs(10),
        "the variable on a follower",
        || async {
            let (s, v) = call(
                Method::GET,
                &url(&c, follower, "/v1/var/app/db"),
                Some(&root),
                None,
            )
            .await;
            (s == StatusCode::OK).then_some(v)
        },
    )
    .await?;
    assert_eq!(read["Items"]["user"], "app");
    let (s, missing) = call(
        Method::GET,
        &url(&c, leader, "/v1/var/app/none"),
        Some(&root),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{missing}");
    let (s, bad) = call(
        Method::PUT,
        &url(&c, leader, "/v1/var/app/empty"),
        Some(&root),
        Some(json!({ "Items": {} })),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(
        bad.as_str()
            .is_some_and(|t| t.contains("missing required Items")),
        "{bad}"
    );
    let (s, _) = call(
        Method::PUT,
        &url(&c, leader, "/v1/var/nomad/other"),
        Some(&root),
        Some(json!({ "Items": { "a": "b" } })),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "a reserved path");

    // Check-and-set: a stale index is a 409 with the current variable; the right one writes.
    let (s, conflict) = call(
        Method::PUT,
        &url(&c, leader, "/v1/var/app/db?cas=0"),
        Some(&root),
        Some(json!({ "Items": { "user": "other" } })),
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT, "{conflict}");
    assert_eq!(conflict["Items"]["user"], "app");
    assert_eq!(conflict["ModifyIndex"].as_u64(), Some(first_index));
    let (s, v2) = call(
        Method::PUT,
        &url(&c, leader, &format!("/v1/var/app/db?cas={first_index}")),
        Some(&root),
        Some(json!({ "Items": { "user": "app2", "password": secret } })),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v2}");
    assert_eq!(
        v2["CreateIndex"].as_u64(),
        Some(first_index),
        "created once"
    );
    let (s, _) = call(
        Method::PUT,
        &url(&c, leader, "/v1/var/app/cache?cas=0"),
        Some(&root),
        Some(json!({ "Items": { "ttl": "60" } })),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "cas=0 creates a new one");

    // Nothing in the clear on disk: not in any server's raft log, snapshots or state.
    let dirs: Vec<_> = c
        .servers
        .iter()
        .map(|s| s.data_dir.join("server"))
        .collect();
    for i in 0..30 {
        // Enough writes for a raft snapshot (threshold 20) to hold the variables.
        let (s, _) = call(
            Method::PUT,
            &url(&c, leader, &format!("/v1/var/fill/{i}")),
            Some(&root),
            Some(json!({ "Items": { "n": i.to_string() } })),
        )
        .await;
        assert_eq!(s, StatusCode::OK);
    }
    let leaked = files_containing(&dirs, secret.as_bytes());
    assert!(leaked.is_empty(), "the secret is on disk in {leaked:?}");

    // A policy: read under app/, nothing else.
    let (s, _) = call(
        Method::PUT,
        &url(&c, leader, "/v1/acl/policy/app-read"),
        Some(&root),
        Some(json!({
            "Name": "app-read",
            "Rules": "namespace \"default\" {\n variables {\n path \"app/*\" { capabilities = [\"read\"] }\n }\n}"
        })),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let (_, token) = call(
        Method::PUT,
        &url(&c, leader, "/v1/acl/token"),
        Some(&root),
        Some(json!({ "Name": "reader", "Type": "client", "Policies": ["app-read"] })),
    )
    .await;
    let reader = token["SecretID"].as_str().unwrap_or_default().to_string();
    let (s, v) = call(
        Method::GET,
        &url(&c, leader, "/v1/var/app/db"),
        Some(&reader),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, _) = call(
        Method::PUT,
        &url(&c, leader, "/v1/var/app/db"),
        Some(&reader),
        Some(json!({ "Items": { "user": "x" } })),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "read is not write");
    let (s, _) = call(
        Method::GET,
        &url(&c, leader, "/v1/var/fill/1"),
        Some(&reader),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, listed) = call(
        Method::GET,
        &url(&c, leader, "/v1/vars"),
        Some(&reader),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{listed}");
    let paths: Vec<&str> = listed
        .as_array()
        .map(|l| l.iter().filter_map(|v| v["Path"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        paths,
        ["app/cache", "app/db"],
        "only what the token may list"
    );
    assert!(listed[0].get("Items").is_none(), "lists carry no items");
    let (s, anonymous) = call(Method::GET, &url(&c, leader, "/v1/vars"), None, None).await;
    assert_eq!(s, StatusCode::OK, "{anonymous}");
    assert_eq!(
        anonymous,
        json!([]),
        "no variables rule: nothing listed (Nomad's answer)"
    );

    // A one-time token for the reader's token, exchanged once for it (Nomad's
    // `ui -authenticate` flow); the anonymous caller gets none.
    let (s, ott) = call(
        Method::POST,
        &url(&c, leader, "/v1/acl/token/onetime"),
        Some(&reader),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{ott}");
    let one_time = ott["OneTimeToken"]["OneTimeSecretID"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(ott["OneTimeToken"]["AccessorID"], token["AccessorID"]);
    let (s, _) = call(
        Method::POST,
        &url(&c, leader, "/v1/acl/token/onetime"),
        None,
        None,
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let exchange = json!({ "OneTimeSecretID": one_time });
    let (s, got) = call(
        Method::POST,
        &url(&c, follower, "/v1/acl/token/onetime/exchange"),
        None,
        Some(exchange.clone()),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{got}");
    assert_eq!(got["Token"]["SecretID"].as_str(), Some(reader.as_str()));
    let (s, _) = call(
        Method::POST,
        &url(&c, leader, "/v1/acl/token/onetime/exchange"),
        None,
        Some(exchange),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "a one-time token works once");

    // Rotation: the variables still decrypt; their key cannot be removed.
    let (_, keys) = call(
        Method::GET,
        &url(&c, leader, "/v1/operator/keyring/keys"),
        Some(&root),
        None,
    )
    .await;
    let old_key = keys[0]["KeyID"].as_str().unwrap_or_default().to_string();
    let (s, _) = call(
        Method::PUT,
        &url(&c, leader, "/v1/operator/keyring/rotate"),
        Some(&root),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let (s, v) = call(
        Method::GET,
        &url(&c, follower, "/v1/var/app/db?stale=true"),
        Some(&root),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["Items"]["user"], "app2");
    let (s, refused) = call(
        Method::DELETE,
        &url(&c, leader, &format!("/v1/operator/keyring/key/{old_key}")),
        Some(&root),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{refused}");

    // A full rotation re-encrypts every variable under a newer key in the background: the
    // old key is then used by none and may go; the variables still read.
    let (s, v) = call(
        Method::PUT,
        &url(&c, leader, "/v1/operator/keyring/rotate?full=true"),
        Some(&root),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    // The old key was marked `rekeying`; once nothing is encrypted with it, it is inactive.
    wait_for(
        Duration::from_secs(30),
        "the old key rekeyed and inactive",
        || async {
            let (_, keys) = call(
                Method::GET,
                &url(&c, leader, "/v1/operator/keyring/keys"),
                Some(&root),
                None,
            )
            .await;
            keys.as_array()?
                .iter()
                .any(|k| k["KeyID"] == old_key.as_str() && k["State"] == "inactive")
                .then_some(())
        },
    )
    .await?;
    wait_for(
        Duration::from_secs(30),
        "the old key unused and removed",
        || async {
            let (s, _) = call(
                Method::DELETE,
                &url(&c, leader, &format!("/v1/operator/keyring/key/{old_key}")),
                Some(&root),
                None,
            )
            .await;
            (s == StatusCode::OK).then_some(())
        },
    )
    .await?;
    let (s, v) = call(
        Method::GET,
        &url(&c, leader, "/v1/var/app/db"),
        Some(&root),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["Items"]["user"], "app2");

    // Deleted with check-and-set; gone.
    let (s, _) = call(
        Method::DELETE,
        &url(&c, leader, "/v1/var/app/cache?cas=1"),
        Some(&root),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT);
    let (s, _) = call(
        Method::DELETE,
        &url(&c, leader, "/v1/var/app/cache"),
        Some(&root),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, _) = call(
        Method::GET,
        &url(&c, leader, "/v1/var/app/cache"),
        Some(&root),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    // A new leader reads and writes them (every server has the KEK).
    wait_for(
        Duration::from_secs(20),
        "the KEK on every server",
        || async {
            c.servers
                .iter()
                .all(|s| {
                    std::fs::read_dir(s.data_dir.join("server/keystore"))
                        .map(|d| {
                            d.flatten()
                                .filter(|e| e.path().extension().is_some_and(|x| x == "kek"))
                                .count()
                        })
                        .unwrap_or(0)
                        >= 1
                })
                .then_some(())
        },
    )
    .await?;
    c.kill(leader);
    let leader = c.wait_leader(Duration::from_secs(30)).await?;
    let v = wait_for(
        Duration::from_secs(20),
        "the variable on the new leader",
        || async {
            let (s, v) = call(
                Method::GET,
                &url(&c, leader, "/v1/var/app/db"),
                Some(&root),
                None,
            )
            .await;
            (s == StatusCode::OK).then_some(v)
        },
    )
    .await?;
    assert_eq!(v["Items"]["password"], secret);
    let (s, _) = call(
        Method::PUT,
        &url(&c, leader, "/v1/var/app/after"),
        Some(&root),
        Some(json!({ "Items": { "k": "v" } })),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    Ok(())
}
