//! The layer check: imports run one way. Every path in the code under `src/` that names a
//! module of this crate — `crate::…`, or `super::…`/`self::…` resolved from the file and
//! inline `mod` it is written in, nested `{…}` groups expanded; tests included, comments and
//! literals excluded — must name a module below the one it is written in:
//!
//! ```text
//!  cli ─▶ agent ─▶ http ─▶ server │ client ─▶ scheduler, rpc, api, jobspec, acl, keyring ─▶ util, gotemplate
//! ```
//!
//! Peers of one layer (server and client; scheduler, rpc, api, jobspec, acl and keyring) never import each
//! other.
//! Inside `server/` the same rule holds between its parts ([`SERVER_PARTS`]): the bottom
//! (configuration, raft, evaluation builders) knows nothing of the leader's subsystems, the
//! subsystems know nothing of the service layer (`endpoints`), the service layer nothing of
//! the workers that call it, and only `server/mod.rs` wires them all. Inside `client/` too
//! ([`CLIENT_PARTS`]): shared types and helpers, drivers, the shared state, the task runner,
//! the allocation runner, the operator's handle, then `client/mod.rs`. Inside `cli/`
//! ([`CLI_PARTS`]): output, the shared API flags, the commands, the command groups, then
//! the parser in `cli/mod.rs`; inside `jobspec/` ([`JOBSPEC_PARTS`]): budget, schema,
//! functions, the HCL parser. A new top-level module or part must be given its place here,
//! or this test fails.
//!
//! What it does not see: paths through `use` of a re-export (`pub use`) are checked where
//! they are re-exported, not where they point; macros' expansions are not checked.

use std::path::{Path, PathBuf};

/// The crate's top-level modules, bottom layer first: a module may import modules of a
/// lower layer only.
const LAYERS: &[(&str, u32)] = &[
    ("util", 0),
    ("gotemplate", 0),
    ("scheduler", 1),
    ("rpc", 1),
    ("api", 1),
    ("jobspec", 1),
    ("acl", 1),
    ("keyring", 1),
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
    ("lease", 0),
    ("raft", 1),
    ("acl", 2),
    ("formation", 2),
    ("handover", 2),
    ("leader", 2),
    ("keyring", 3),
    ("variable_locks", 3),
    ("autopilot", 3),
    ("broker", 3),
    ("plan", 3),
    ("heartbeat", 3),
    ("periodic", 3),
    ("deployments", 4),
    ("drainer", 3),
    ("blocked", 4),
    ("pipeline", 5),
    ("reapers", 6),
    ("endpoints", 7),
    ("worker", 8),
    ("autoscaler", 8),
    ("tests", 11),
    ("server", 10),
];

/// The parts of `client/`, bottom first: the shared types and leaf helpers, the drivers, the
/// state every runner shares, the task runner, the allocation runner, the operator's handle,
/// and `client/mod.rs`, which wires them.
const CLIENT_PARTS: &[(&str, u32)] = &[
    ("types", 0),
    ("config", 0),
    ("allocdir", 0),
    ("signal", 0),
    ("pty", 0),
    ("servers", 0),
    ("taskenv", 0),
    ("lifecycle", 0),
    ("logmon", 0),
    ("stats", 0),
    ("users", 0),
    ("volumes", 0),
    ("restart", 1),
    ("templates", 1),
    ("artifacts", 1),
    ("cgroups", 1),
    ("sandbox", 1),
    ("network", 1),
    ("health", 1),
    ("state", 1),
    ("docker", 1),
    ("fingerprint", 2),
    ("driver", 2),
    ("shared", 3),
    ("task_runner", 4),
    ("services", 4),
    ("gc", 4),
    ("checks", 5),
    ("alloc_runner", 6),
    ("ops", 7),
    ("client", 8),
];

/// The parts of `cli/`, bottom first: output, the API flags every command
/// shares, the commands (those that follow an evaluation or read a job file on the helpers
/// that do), the command groups that dispatch to them, and `cli/mod.rs`, which parses the
/// command line (its tests parse whole command lines).
const CLI_PARTS: &[(&str, u32)] = &[
    ("output", 0),
    ("args", 1),
    ("job_file", 1),
    ("agent", 2),
    ("tls", 2),
    ("acl", 2),
    ("agent_info", 2),
    ("alloc_exec", 2),
    ("alloc_logs", 2),
    ("alloc_status", 2),
    ("eval", 2),
    ("event", 2),
    ("job_dispatch", 2),
    ("job_init", 2),
    ("monitor", 2),
    ("namespace", 2),
    ("node", 2),
    ("scheduler_config", 2),
    ("autopilot", 2),
    ("scheduler_workers", 2),
    ("server", 2),
    ("service", 2),
    ("volume", 2),
    ("snapshot", 2),
    ("status", 2),
    ("system", 2),
    ("var", 2),
    ("alloc_fs", 3),
    ("job_action", 3),
    ("alloc_ops", 3),
    ("deployment", 3),
    ("job_plan", 3),
    ("scheduler", 3),
    ("alloc", 4),
    ("job", 4),
    ("operator", 4),
    ("cli", 5),
];

/// The parts of `jobspec/`, bottom first: the evaluation budget (and the size limits), the
/// schema and what teamster refuses, the functions (charged to the budget), the HCL parser,
/// and `jobspec/mod.rs`.
const JOBSPEC_PARTS: &[(&str, u32)] = &[
    ("budget", 0),
    ("schema", 0),
    ("unsupported", 0),
    ("templates", 0),
    ("funcs", 1),
    ("hcl", 2),
    ("jobspec", 3),
];

/// The top-level modules whose parts are layered too, with their tables.
const PARTED: &[(&str, &[(&str, u32)])] = &[
    ("server", SERVER_PARTS),
    ("client", CLIENT_PARTS),
    ("cli", CLI_PARTS),
    ("jobspec", JOBSPEC_PARTS),
];

fn parts_of(module: &str) -> Option<&'static [(&'static str, u32)]> {
    PARTED.iter().find(|(m, _)| *m == module).map(|(_, t)| *t)
}

/// Where a file or a path sits: the top-level module and, inside a parted module (`server`,
/// `client`), the part.
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
    let part = parts_of(&module).map(|_| {
        segments
            .get(1)
            .map_or_else(|| module.clone(), |s| s.to_string())
    });
    Some(Place { module, part })
}

/// The module path of a source file below `crate`, from its path below `src/`.
fn file_module(rel: &Path) -> Vec<String> {
    let mut segments: Vec<String> = rel
        .iter()
        .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if segments.last().is_some_and(|s| s == "mod") {
        segments.pop();
    }
    segments
}

/// The place of a source file from its path below `src/`.
fn file_place(rel: &Path) -> Option<Place> {
    let segments = file_module(rel);
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
    let module = &from.module;
    let table = parts_of(module)?;
    let (Some(f), Some(t)) = (rank(table, fp), rank(table, tp)) else {
        return Some(format!(
            "{module} part `{fp}` or `{tp}` has no place in src/layers.rs"
        ));
    };
    (t >= f).then(|| format!("{module}::{fp} (part {f}) must not import {module}::{tp} (part {t})"))
}

/// The code of a file with its comments removed and the contents of its string, byte-string,
/// raw-string and character literals blanked, so that neither a comment nor a literal is
/// mistaken for a path or a brace. Lifetimes (`'a`) are kept.
fn strip_comments_and_literals(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            // Block comments nest in Rust.
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == 'r'
            && !i
                .checked_sub(1)
                .is_some_and(|p| ident(chars[p]) && chars[p] != 'b')
            && matches!(next, Some('"' | '#'))
            && chars[i + 1..]
                .iter()
                .find(|c| **c != '#')
                .is_some_and(|c| *c == '"')
        {
            let hashes = chars[i + 1..].iter().take_while(|c| **c == '#').count();
            i += 1 + hashes + 1;
            loop {
                if i >= chars.len() {
                    break;
                }
                if chars[i] == '"'
                    && chars[i + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|c| **c == '#')
                        .count()
                        == hashes
                {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
            out.push_str("\"\"");
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// A token of the stripped code: what the path scanner needs, nothing more.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Star,
    Semi,
    Other,
}

fn tokens(code: &str) -> Vec<Tok> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Tok::Ident(chars[start..i].iter().collect()));
            continue;
        }
        i += 1;
        match c {
            ':' if chars.get(i) == Some(&':') => {
                i += 1;
                out.push(Tok::PathSep);
            }
            '{' => out.push(Tok::Open),
            '}' => out.push(Tok::Close),
            ',' => out.push(Tok::Comma),
            '*' => out.push(Tok::Star),
            ';' => out.push(Tok::Semi),
            c if c.is_whitespace() => {}
            _ => out.push(Tok::Other),
        }
    }
    out
}

/// One path tree at `toks[i..]` (`a::b`, `a::{b, c::{d, e}}`, `a::*`), each leaf as the
/// segments from `prefix` on. Returns the paths and the index after the tree.
fn path_tree(toks: &[Tok], mut i: usize, prefix: Vec<String>) -> (Vec<Vec<String>>, usize) {
    let mut segs = prefix;
    loop {
        match toks.get(i) {
            Some(Tok::Ident(s)) => {
                segs.push(s.clone());
                i += 1;
                if toks.get(i) == Some(&Tok::PathSep) {
                    i += 1;
                    continue;
                }
                return (vec![segs], i);
            }
            Some(Tok::Open) => {
                i += 1;
                let mut all = Vec::new();
                while i < toks.len() {
                    match toks.get(i) {
                        Some(Tok::Close) => {
                            i += 1;
                            break;
                        }
                        Some(Tok::Comma) => i += 1,
                        _ => {
                            let (paths, next) = path_tree(toks, i, segs.clone());
                            all.extend(paths);
                            // Skip what the tree did not take (`as name`) up to `,` or `}`.
                            i = next;
                            while i < toks.len() && !matches!(toks[i], Tok::Comma | Tok::Close) {
                                i += 1;
                            }
                        }
                    }
                }
                return (all, i);
            }
            Some(Tok::Star) => return (vec![segs], i + 1),
            _ => return (vec![segs], i),
        }
    }
}

/// Every module path a piece of stripped code names through `crate::`, `super::` or
/// `self::`, resolved against `here` (the file's module path below `crate`), inline `mod x {}`
/// blocks included. Paths that climb above the crate are dropped.
fn crate_paths(code: &str, here: &[String]) -> Vec<Vec<String>> {
    let toks = tokens(code);
    let mut found = Vec::new();
    let mut depth = 0usize;
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut pending_mod: Option<String> = None;
    let mut i = 0;
    while i < toks.len() {
        match &toks[i] {
            Tok::Ident(kw) if kw == "mod" => {
                if let Some(Tok::Ident(name)) = toks.get(i + 1) {
                    pending_mod = Some(name.clone());
                    i += 2;
                    continue;
                }
            }
            Tok::Open => {
                depth += 1;
                if let Some(name) = pending_mod.take() {
                    inline.push((name, depth));
                }
            }
            Tok::Close => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            Tok::Semi => pending_mod = None,
            Tok::Ident(first)
                if matches!(first.as_str(), "crate" | "super" | "self")
                    && toks.get(i + 1) == Some(&Tok::PathSep)
                    && (i == 0 || toks[i - 1] != Tok::PathSep) =>
            {
                let (paths, next) = path_tree(&toks, i, Vec::new());
                let mut module: Vec<String> = here.to_vec();
                module.extend(inline.iter().map(|(n, _)| n.clone()));
                found.extend(paths.iter().filter_map(|p| resolve(p, &module)));
                i = next;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    found
}

/// A path as written (`crate::a`, `super::super::b`, `self::c::{self}`) made absolute below
/// `crate`, from inside `module`.
fn resolve(raw: &[String], module: &[String]) -> Option<Vec<String>> {
    let (first, rest) = raw.split_first()?;
    let mut base: Vec<String> = match first.as_str() {
        "crate" => Vec::new(),
        "self" => module.to_vec(),
        "super" => {
            let mut m = module.to_vec();
            m.pop()?;
            m
        }
        _ => return None,
    };
    let mut rest = rest.iter().peekable();
    while rest.peek().is_some_and(|s| *s == "super") {
        base.pop()?;
        rest.next();
    }
    base.extend(rest.filter(|s| *s != "self").cloned());
    Some(base)
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
    // The modules directly under each parted module: any other name after `server::` (or
    // `client::`) is an item of its `mod.rs` itself (its wiring).
    let submodules = |module: &str| -> Vec<String> {
        files
            .iter()
            .filter_map(|f| f.strip_prefix(src.join(module)).ok())
            .filter_map(|rel| rel.iter().next())
            .map(|first| first.to_string_lossy().trim_end_matches(".rs").to_string())
            .collect()
    };
    let parted: Vec<(&str, Vec<String>)> =
        PARTED.iter().map(|(m, _)| (*m, submodules(m))).collect();
    let mut found = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(src).expect("below src");
        let Some(from) = file_place(rel) else {
            continue;
        };
        // The crate root and the binary only declare modules.
        if matches!(from.module.as_str(), "lib" | "main" | "layers") {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("a readable source file");
        let here = file_module(rel);
        for path in crate_paths(&strip_comments_and_literals(&text), &here) {
            let mut refs: Vec<&str> = path.iter().map(String::as_str).collect();
            let items_of_mod_rs = parted.iter().any(|(m, subs)| {
                refs.first() == Some(m) && refs.get(1).is_some_and(|x| !subs.iter().any(|s| s == x))
            });
            if items_of_mod_rs {
                refs.truncate(1);
            }
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
    // Inside `client/`: a task runner reaching up to its allocation runner, the shared
    // state reaching a runner, a driver reaching the shared state, peers importing each
    // other, and the crate root's items (`client::Client`) from a part.
    assert!(violation(&p("client/task_runner/mod.rs"), &to("client::alloc_runner")).is_some());
    assert!(violation(
        &p("client/shared.rs"),
        &to("client::task_runner::TaskRunner")
    )
    .is_some());
    assert!(violation(&p("client/driver.rs"), &to("client::shared::Shared")).is_some());
    assert!(violation(&p("client/services.rs"), &to("client::task_runner")).is_some());
    assert!(violation(&p("client/types.rs"), &to("client")).is_some());
    assert!(violation(
        &p("client/alloc_runner/mod.rs"),
        &to("client::task_runner::hooks")
    )
    .is_none());
    assert!(violation(&p("client/mod.rs"), &to("client::ops::ClientHandle")).is_none());
    // Inside `cli/`: the circles there were (eval and the alloc commands, job and
    // deployment, job and job_plan, status and the parser) and the command line's root
    // from a command; inside `jobspec/`: a function reaching the parser.
    assert!(violation(&p("cli/eval.rs"), &to("cli::alloc::AllocCommand")).is_some());
    assert!(violation(&p("cli/alloc_logs.rs"), &to("cli::eval::resolve")).is_some());
    assert!(violation(&p("cli/deployment.rs"), &to("cli::job::monitor")).is_some());
    assert!(violation(&p("cli/job_plan.rs"), &to("cli::job")).is_some());
    assert!(violation(&p("cli/status.rs"), &to("cli")).is_some());
    assert!(violation(&p("cli/args.rs"), &to("cli::output::table")).is_none());
    assert!(violation(&p("cli/job.rs"), &to("cli::deployment::follow")).is_none());
    assert!(violation(&p("jobspec/funcs/file.rs"), &to("jobspec::hcl")).is_some());
    assert!(violation(&p("jobspec/hcl/blocks.rs"), &to("jobspec::funcs")).is_none());
    // … downward and same-module paths are not.
    assert!(violation(&p("server/mod.rs"), &to("server::worker::pool")).is_none());
    assert!(violation(&p("server/worker/runner.rs"), &to("server::endpoints")).is_none());
    assert!(violation(&p("http/jobs.rs"), &to("server::endpoints")).is_none());
    assert!(violation(&p("cli/job.rs"), &to("api")).is_none());
    assert!(violation(&p("scheduler/generic.rs"), &to("scheduler::util")).is_none());

    // Paths are found through `crate::`, `super::` and `self::`, nested groups included, and
    // resolved from the file (and inline module) they are written in; comments and literals
    // are not paths.
    let code = strip_comments_and_literals(concat!(
        "use crate::{agent::config::X, util::{clock::{Clock, self}, ids}};\n",
        "// crate::cli in a comment\n/// [`crate::http`]\n/* crate::a /* crate::b */ */\n",
        "let _ = teamster_storage::fsm::Command; crate::rpc::Pool::new();\n",
        "let s = \"crate::cli\"; let r = r#\"crate::\"cli\"#; let q = '\"'; let e = '\\'';\n",
        "use super::super::endpoints::Endpoints as E;\n",
        "fn f<'a>(x: &'a str) -> super::Shared<'a> {}\n",
        "mod inner { use super::super::plan; mod deeper { use super::x; } use self::y; }\n",
        "use super::*;\n",
    ));
    let here: Vec<String> = ["server", "broker", "shell"].map(String::from).to_vec();
    let paths: Vec<String> = crate_paths(&code, &here)
        .iter()
        .map(|p| p.join("::"))
        .collect();
    assert_eq!(
        paths,
        [
            "agent::config::X",
            "util::clock::Clock",
            "util::clock",
            "util::ids",
            "rpc::Pool::new",
            "server::endpoints::Endpoints",
            "server::broker::Shared",
            "server::broker::plan",
            "server::broker::shell::inner::x",
            "server::broker::shell::inner::y",
            "server::broker",
        ]
    );
    // A `super::` that climbs above the crate names nothing.
    assert!(crate_paths("use super::super::x;", &["util".to_string()]).is_empty());
    // And the climb out of `server::broker` is caught.
    let from = p("server/broker/shell.rs");
    assert!(violation(&from, &to("server::endpoints::Endpoints")).is_some());
}
