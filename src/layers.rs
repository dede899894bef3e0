//! The layer check: imports run one way. Every `crate::…` path in the code under `src/`
//! (tests included, comments excluded) must name a module below the one it is written in:
//!
//! ```text
//!  cli ─▶ agent ─▶ http ─▶ server │ client ─▶ scheduler, rpc, api ─▶ util
//! ```
//!
//! Peers of one layer (server and client; scheduler, rpc and api) never import each other.
//! Inside `server/` the same rule holds between its parts ([`SERVER_PARTS`]): the bottom
//! (configuration, raft, evaluation builders) knows nothing of the leader's subsystems, the
//! subsystems know nothing of the service layer (`endpoints`), the service layer nothing of
//! the workers that call it, and only `server/mod.rs` wires them all. A new top-level module
//! or server part must be given its place here, or this test fails.

use std::path::{Path, PathBuf};

/// The crate's top-level modules, bottom layer first: a module may import modules of a
/// lower layer only.
const LAYERS: &[(&str, u32)] = &[
    ("util", 0),
    ("scheduler", 1),
    ("rpc", 1),
    ("api", 1),
    ("server", 2),
    ("client", 2),
    ("http", 3),
    ("agent", 4),
    ("cli", 5),
];

/// The parts of `server/`, bottom first (a part is a file or folder directly under it; the
/// wiring in `server/mod.rs` is the part named `server` itself).
const SERVER_PARTS: &[(&str, u32)] = &[
    ("config", 0),
    ("write_batcher", 0),
    ("leader_service", 0),
    ("evals", 0),
    ("raft", 1),
    ("formation", 2),
    ("leader", 2),
    ("broker", 3),
    ("plan", 3),
    ("heartbeat", 3),
    ("blocked", 4),
    ("pipeline", 5),
    ("reapers", 6),
    ("endpoints", 7),
    ("worker", 8),
    ("tests", 11),
    ("server", 10),
];

/// Where a file or a path sits: the top-level module and, inside `server`, the part.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Place {
    module: String,
    part: Option<String>,
}

fn rank(table: &[(&str, u32)], name: &str) -> Option<u32> {
    table.iter().find(|(n, _)| *n == name).map(|(_, r)| *r)
}

/// The place of a module path given as its segments below `crate`.
fn place(segments: &[&str]) -> Option<Place> {
    let module = (*segments.first()?).to_string();
    let part = (module == "server").then(|| {
        segments
            .get(1)
            .map_or_else(|| "server".to_string(), |s| s.to_string())
    });
    Some(Place { module, part })
}

/// The place of a source file from its path below `src/`.
fn file_place(rel: &Path) -> Option<Place> {
    let mut segments: Vec<String> = rel
        .iter()
        .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if segments.last().is_some_and(|s| s == "mod") {
        segments.pop();
    }
    let refs: Vec<&str> = segments.iter().map(String::as_str).collect();
    place(&refs)
}

/// Why `from` may not use `to`, or `None` when it may.
fn violation(from: &Place, to: &Place) -> Option<String> {
    if from.module != to.module {
        let (Some(f), Some(t)) = (rank(LAYERS, &from.module), rank(LAYERS, &to.module)) else {
            return Some(format!(
                "`{}` or `{}` has no layer in src/layers.rs",
                from.module, to.module
            ));
        };
        return (t >= f).then(|| {
            format!(
                "{} (layer {f}) must not import {} (layer {t})",
                from.module, to.module
            )
        });
    }
    let (Some(fp), Some(tp)) = (&from.part, &to.part) else {
        return None;
    };
    if fp == tp {
        return None;
    }
    let (Some(f), Some(t)) = (rank(SERVER_PARTS, fp), rank(SERVER_PARTS, tp)) else {
        return Some(format!(
            "server part `{fp}` or `{tp}` has no place in src/layers.rs"
        ));
    };
    (t >= f).then(|| format!("server::{fp} (part {f}) must not import server::{tp} (part {t})"))
}

/// The code of a file without its comments (line comments, doc comments, block comments),
/// keeping string literals intact enough that `crate::` inside them is still seen (none of
/// the code builds paths in strings).
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut in_str = false;
    while i < bytes.len() {
        let c = bytes[i];
        if in_str {
            out.push(c as char);
            if c == b'\\' && i + 1 < bytes.len() {
                out.push(bytes[i + 1] as char);
                i += 2;
                continue;
            }
            if c == b'"' {
                in_str = false;
            }
            i += 1;
            continue;
        }
        if c == b'"' {
            in_str = true;
            out.push('"');
            i += 1;
        } else if text[i..].starts_with("//") {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
        } else if text[i..].starts_with("/*") {
            let end = text[i + 2..]
                .find("*/")
                .map_or(bytes.len(), |e| i + 2 + e + 2);
            i = end;
        } else {
            // Multi-byte characters are copied whole.
            let ch = text[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// Every module path a piece of code names after `crate::`, as segments (brace groups
/// expanded one level: `crate::{a::b, c}` names `a::b` and `c`).
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        // `teamster_storage::…` or `some_crate::` are other crates: skip identifiers that
        // merely end in "crate".
        let before = rest[..at].chars().last();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let segs = segments(item.trim());
                if !segs.is_empty() {
                    found.push(segs);
                }
            }
        } else {
            let segs = segments(rest);
            if !segs.is_empty() {
                found.push(segs);
            }
        }
    }
    found
}

fn segments(path: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = path;
    loop {
        let ident: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if ident.is_empty() {
            break;
        }
        rest = &rest[ident.len()..];
        out.push(ident);
        match rest.strip_prefix("::") {
            Some(r) if r.starts_with(|c: char| c.is_alphanumeric() || c == '_') => rest = r,
            _ => break,
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every upward or sideways import under `src/`, as "file: what".
fn violations(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut found = Vec::new();
    for file in files {
        let rel = file.strip_prefix(src).expect("below src");
        let Some(from) = file_place(rel) else {
            continue;
        };
        // The crate root and the binary only declare modules.
        if matches!(from.module.as_str(), "lib" | "main" | "layers") {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("a readable source file");
        for path in crate_paths(&strip_comments(&text)) {
            let refs: Vec<&str> = path.iter().map(String::as_str).collect();
            let Some(to) = place(&refs) else { continue };
            if let Some(why) = violation(&from, &to) {
                found.push(format!(
                    "{}: crate::{}: {why}",
                    rel.display(),
                    path.join("::")
                ));
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

#[test]
fn imports_run_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = violations(&src);
    assert!(
        found.is_empty(),
        "{} upward or sideways imports:\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn the_check_sees_what_it_must_refuse() {
    let p = |s: &str| file_place(Path::new(s)).unwrap();
    let to = |s: &str| place(&s.split("::").collect::<Vec<_>>()).unwrap();
    // Upward, sideways and inside-server violations are found…
    assert!(violation(&p("server/raft.rs"), &to("agent::config")).is_some());
    assert!(violation(&p("client/mod.rs"), &to("server::endpoints")).is_some());
    assert!(violation(&p("rpc/message.rs"), &to("scheduler::verify")).is_some());
    assert!(violation(&p("server/heartbeat/shell.rs"), &to("server::endpoints")).is_some());
    assert!(violation(&p("server/endpoints/eval.rs"), &to("server::worker")).is_some());
    assert!(violation(&p("server/broker/core.rs"), &to("server::unheard_of")).is_some());
    // … downward and same-module paths are not.
    assert!(violation(&p("server/mod.rs"), &to("server::worker::pool")).is_none());
    assert!(violation(&p("server/worker/runner.rs"), &to("server::endpoints")).is_none());
    assert!(violation(&p("http/jobs.rs"), &to("server::endpoints")).is_none());
    assert!(violation(&p("cli/job.rs"), &to("api")).is_none());
    assert!(violation(&p("scheduler/generic.rs"), &to("scheduler::util")).is_none());

    let code = strip_comments(
        "use crate::{agent::config::X, util};\n// crate::cli in a comment\n/// [`crate::http`]\nlet _ = teamster_storage::fsm::Command; crate::rpc::Pool::new();",
    );
    let paths: Vec<String> = crate_paths(&code).iter().map(|p| p.join("::")).collect();
    assert_eq!(paths, ["agent::config::X", "util", "rpc::Pool::new"]);
}
