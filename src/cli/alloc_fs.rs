//! `teamster alloc fs [-stat] [-f] [-tail [-n N | -c BYTES]] [-H] ALLOC [PATH]`: an
//! allocation's files, as Nomad's `alloc fs`: a directory is listed (mode, size, modified
//! time, name), a file printed, `-stat` describes the path, `-tail` prints the end of a
//! file, `-f` keeps printing what is appended. Read through any agent's `/v1/client/fs/`
//! routes (a server forwards to the client that holds the allocation).

use std::io::Write;

use anyhow::{bail, Context};
use clap::Args;
use serde_json::Value;

use super::args::ApiArgs;
use super::output::{table, text};

/// `alloc fs`.
#[derive(Debug, Args)]
pub struct FsArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// Describe the path instead of printing or listing it.
    #[arg(long)]
    stat: bool,
    /// Keep printing what is appended to the file.
    #[arg(short = 'f', long)]
    follow: bool,
    #[command(flatten)]
    end: super::alloc_logs::TailArgs,
    /// Sizes in bytes rather than human units.
    #[arg(short = 'H')]
    machine: bool,
    /// The allocation ID (or a unique prefix).
    id: String,
    /// The path inside the allocation's directory (its root when left out).
    path: Option<String>,
}

/// `bytes` as Nomad's CLI shows sizes (`4.0 KiB`), or plainly with `-H`.
fn size(bytes: u64, machine: bool) -> String {
    if machine {
        bytes.to_string()
    } else {
        super::output::human_bytes(bytes)
    }
}

/// The rows of a directory listing.
fn listing(entries: &[Value], machine: bool) -> String {
    let mut rows = vec![vec![
        "Mode".to_string(),
        "Size".to_string(),
        "Modified Time".to_string(),
        "Name".to_string(),
    ]];
    for e in entries {
        let name = text(&e["Name"]);
        let shown = if e["IsDir"] == true {
            format!("{name}/")
        } else {
            name
        };
        rows.push(vec![
            text(&e["FileMode"]),
            size(e["Size"].as_u64().unwrap_or(0), machine),
            text(&e["ModTime"]),
            shown,
        ]);
    }
    table(&rows)
}

/// `alloc fs`.
pub async fn fs(a: FsArgs) -> anyhow::Result<()> {
    let api = a.api.client()?;
    let alloc_id = super::args::resolve(&api, "/v1/allocations", "allocation", &a.id).await?;
    let path = a.path.clone().unwrap_or_else(|| "/".to_string());
    let query = |extra: &str| {
        let mut q = url_path(&path);
        q.push_str(extra);
        q
    };
    let info: Value = api
        .get(&format!("/v1/client/fs/stat/{alloc_id}?path={}", query("")))
        .await
        .with_context(|| format!("{path} in allocation {alloc_id}"))?;
    let mut out = std::io::stdout();
    if a.stat {
        let rows = vec![
            vec![
                "Mode".into(),
                "Size".into(),
                "Modified Time".into(),
                "Content Type".into(),
                "Name".into(),
            ],
            vec![
                text(&info["FileMode"]),
                size(info["Size"].as_u64().unwrap_or(0), a.machine),
                text(&info["ModTime"]),
                text(&info["ContentType"]),
                text(&info["Name"]),
            ],
        ];
        out.write_all(table(&rows).as_bytes())?;
        return Ok(());
    }
    if info["IsDir"] == true {
        if a.follow || a.end.tail {
            bail!("{path} is a directory: -f and -tail read files");
        }
        let entries: Vec<Value> = api
            .get(&format!("/v1/client/fs/ls/{alloc_id}?path={}", query("")))
            .await?;
        out.write_all(listing(&entries, a.machine).as_bytes())?;
        return Ok(());
    }
    let len = info["Size"].as_u64().unwrap_or(0);
    let text = if a.end.tail {
        let from_end = a.end.bytes.unwrap_or(len);
        let body: String = api
            .request_text::<()>(
                reqwest::Method::GET,
                &format!(
                    "/v1/client/fs/stream/{alloc_id}?path={}",
                    query(&format!("&origin=end&offset={from_end}&plain=true"))
                ),
                None,
            )
            .await?;
        match a.end.bytes {
            Some(_) => body,
            None => super::alloc_logs::last_lines(&body, a.end.lines).to_string(),
        }
    } else {
        api.request_text::<()>(
            reqwest::Method::GET,
            &format!(
                "/v1/client/fs/stream/{alloc_id}?path={}",
                query("&plain=true")
            ),
            None,
        )
        .await?
    };
    out.write_all(text.as_bytes())?;
    out.flush()?;
    if !a.follow {
        return Ok(());
    }
    let mut resp = api
        .get_stream(&format!(
            "/v1/client/fs/stream/{alloc_id}?path={}",
            query(&format!("&plain=true&follow=true&offset={len}"))
        ))
        .await
        .with_context(|| format!("following {path}"))?;
    while let Some(chunk) = resp
        .chunk()
        .await
        .with_context(|| format!("following {path}"))?
    {
        out.write_all(&chunk)?;
        out.flush()?;
    }
    Ok(())
}

/// `path` as a query value (percent-encoded where it must be).
fn url_path(path: &str) -> String {
    path.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sizes_and_listings_read_as_nomad_s() {
        assert_eq!(size(512, false), "512 B");
        assert_eq!(size(4096, false), "4.0 KiB");
        assert_eq!(size(10 << 20, false), "10.0 MiB");
        assert_eq!(size(4096, true), "4096");
        let out = listing(
            &[
                json!({"Name": "alloc", "IsDir": true, "Size": 4096, "FileMode": "drwxrwxrwx", "ModTime": "t"}),
                json!({"Name": "web.stdout.0", "IsDir": false, "Size": 12, "FileMode": "-rw-r--r--", "ModTime": "t"}),
            ],
            false,
        );
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].starts_with("Mode"), "{out}");
        assert!(lines[1].ends_with("alloc/"), "{out}");
        assert!(
            lines[2].contains("12 B") && lines[2].ends_with("web.stdout.0"),
            "{out}"
        );
    }

    #[test]
    fn paths_are_escaped_for_the_query() {
        assert_eq!(
            url_path("alloc/logs/web.stdout.0"),
            "alloc/logs/web.stdout.0"
        );
        assert_eq!(url_path("a b&c"), "a%20b%26c");
    }
}
