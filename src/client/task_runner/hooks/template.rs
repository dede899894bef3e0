//! Templates (Nomad's `template` hook): before the task starts, every template is rendered
//! and written into the task's directory; the task starts only once all of them rendered
//! with everything they read. While it waits, a `Template` event names what is missing
//! (`Missing: nomad.var.block(…)`, at most every 3 s, when the set changes). Nomad data is
//! read with the task's default workload identity, so a task reads only the variables its
//! identity may.
//!
//! While the task runs, a watcher waits for changes through the allocation's
//! [`TemplateFeed`] (one blocking `Template.Read` for all of its tasks): when what a template read changes, it
//! waits for the changes to settle (`wait`, the client's 5 s / 4 m by default), renders
//! again, writes what changed and, after a random `splay`, restarts the task once (any
//! `restart` template), or sends each distinct signal, and runs each change script.
//! A restart renders again only with `restart.render_templates`; the environment of
//! `env = true` templates is kept across restarts. A client restart renders again and acts
//! only on files whose contents changed.
//!
//! Refusals follow Nomad: a template that fails to render fails the task (`Template
//! failed: …`); a dependency the identity may not read is retried 12 times with a backoff
//! (250 ms to 1 min) while it is reported missing, then fails the task.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use rand::Rng as _;
use teamster_storage::model::task_runtime::parse_perms;
use teamster_storage::model::Template as TemplateSpec;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::identity::default_token;
use super::template_feed::{FeedSubscription, TemplateFeed};
use super::{HookCtx, HookError, HookState, Prepared, TaskHook};
use crate::client::allocdir::write_file_under;
use crate::client::servers::Servers;
use crate::client::templates::{
    interpolate, missing_message, parse, parse_env_file, read_in, render, resolve, Brain, Outcome,
    RenderEnv,
};
use crate::client::types::{event, TaskControl};
use crate::gotemplate::Template;
use crate::rpc::service::variables::{
    TemplateData, TemplateDep, TemplateReadRequest, TemplateReadSet,
};

const HOOK: &str = "template";
/// At most one `Missing` event this often (Nomad's 3 s).
const MISSING_EVENT_EVERY: Duration = Duration::from_secs(3);
/// The wait before asking unreachable servers again.
const RETRY: Duration = Duration::from_secs(2);
/// Nomad's `nomad_retry`: attempts and backoff for a refused read.
const DENIED_ATTEMPTS: u32 = 12;
const DENIED_BACKOFF: Duration = Duration::from_millis(250);
const DENIED_MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How often files a template reads (`file`) are looked at again.
const FILE_POLL: Duration = Duration::from_secs(2);
/// The client's `wait` (Nomad's 5 s / 4 m), for templates without their own.
const WAIT_MIN: Duration = Duration::from_secs(5);
const WAIT_MAX: Duration = Duration::from_secs(240);

/// A template of the task, parsed.
#[derive(Clone)]
struct Loaded {
    spec: TemplateSpec,
    parsed: Arc<Template>,
}

/// What the hook keeps between phases and restarts.
#[derive(Default)]
struct Runtime {
    /// The task's default identity token.
    token: Option<String>,
    /// What the servers answered.
    brain: Brain,
    /// The index of the last answer.
    index: u64,
    /// The last text written, per template.
    written: Vec<Option<String>>,
    /// What every template read at its last render.
    deps: BTreeSet<TemplateDep>,
    files: BTreeSet<PathBuf>,
    /// The environment of `env = true` templates.
    env: BTreeMap<String, String>,
    /// Rendered once for this task runner.
    rendered: bool,
    /// Templates whose contents changed while the client was away (acted on at poststart).
    changed_on_restore: Vec<usize>,
    /// Rendered for a start: scripts with `run_on_first_render` run at poststart.
    first_render: bool,
    /// The task's templates, parsed at the last render (poststart and the watcher use
    /// them, never reading a `source` again).
    loaded: Vec<Loaded>,
}

/// The `template` hook of one task.
#[derive(Default)]
pub struct TemplateHook {
    rt: Arc<Mutex<Runtime>>,
    watching: Mutex<Option<CancellationToken>>,
}

impl std::fmt::Debug for TemplateHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TemplateHook").finish_non_exhaustive()
    }
}

fn lock(rt: &Mutex<Runtime>) -> std::sync::MutexGuard<'_, Runtime> {
    rt.lock().unwrap_or_else(|p| p.into_inner())
}

fn failed(message: impl std::fmt::Display) -> HookError {
    HookError::fatal(HOOK, format!("Template failed: {message}"))
}

fn now_unix() -> i64 {
    crate::util::system_clock().now_unix_nanos() / 1_000_000_000
}

/// The sandbox: the allocation directory, unless the client disabled it.
fn sandbox(ctx: &HookCtx) -> Option<&Path> {
    (!ctx.template_config.disable_file_sandbox).then(|| ctx.alloc_dir.root())
}

/// The largest template source a task may give.
const MAX_SOURCE: u64 = crate::gotemplate::MAX_OUTPUT as u64;

/// Where a template's `source` or `destination` is (interpolated, inside the sandbox).
fn place(ctx: &HookCtx, path: &str) -> Result<PathBuf, String> {
    resolve(
        ctx.task_dir.dir(),
        sandbox(ctx),
        &interpolate(path, &ctx.task.env),
    )
}

/// Parse every template of the task (`source` read from the task directory).
fn load(ctx: &HookCtx) -> Result<Vec<Loaded>, HookError> {
    ctx.task
        .templates
        .iter()
        .map(|spec| {
            let text = if spec.source_path.is_empty() {
                spec.embedded_tmpl.clone()
            } else {
                let path = place(ctx, &spec.source_path).map_err(failed)?;
                read_in(sandbox(ctx), &path, MAX_SOURCE)
                    .map_err(failed)?
                    .ok_or_else(|| {
                        failed(format!("source {:?} does not exist", spec.source_path))
                    })?
            };
            let parsed = parse(&text, &spec.left_delim, &spec.right_delim).map_err(failed)?;
            Ok(Loaded {
                spec: spec.clone(),
                parsed: Arc::new(parsed),
            })
        })
        .collect()
}

fn render_all(ctx: &HookCtx, loaded: &[Loaded], brain: &Brain) -> Result<Vec<Outcome>, HookError> {
    let env = RenderEnv {
        env: &ctx.task.env,
        namespace: ctx.namespace(),
        task_dir: ctx.task_dir.dir(),
        sandboxed: sandbox(ctx).is_some(),
        denylist: &ctx.template_config.function_denylist,
        now_unix: now_unix(),
    };
    loaded
        .iter()
        .map(|l| render(&l.parsed, brain, &env, l.spec.err_missing_key).map_err(failed))
        .collect()
}

/// Writes `text` to the template's destination unless it holds it already (as the task's
/// file: through no symlink, owned by `uid`/`gid` before it takes its name): whether it
/// changed.
fn write(ctx: &HookCtx, spec: &TemplateSpec, text: &str) -> Result<bool, String> {
    let path = place(ctx, &spec.dest_path)?;
    if let Ok(Some(old)) = read_in(sandbox(ctx), &path, MAX_SOURCE) {
        if old == text {
            return Ok(false);
        }
    }
    let mode = parse_perms(&spec.perms).unwrap_or(0o644);
    let id = |v: Option<i64>| v.and_then(|v| u32::try_from(v).ok());
    let owner = (id(spec.uid), id(spec.gid));
    let (root, rel) = match sandbox(ctx) {
        Some(root) => (
            root.to_path_buf(),
            path.strip_prefix(root)
                .map_err(|_| format!("{:?} escapes the allocation directory", spec.dest_path))?
                .to_string_lossy()
                .into_owned(),
        ),
        None => {
            let parent = path.parent().unwrap_or(Path::new("/"));
            std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
            let name = path
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            (parent.to_path_buf(), name)
        }
    };
    write_file_under(&root, &rel, text.as_bytes(), mode, owner)
        .map_err(|e| format!("writing {:?}: {e}", spec.dest_path))?;
    Ok(true)
}

/// The environment of the `env = true` templates, later ones winning.
fn env_of(
    loaded: &[Loaded],
    texts: &[Option<String>],
) -> Result<BTreeMap<String, String>, HookError> {
    let mut env = BTreeMap::new();
    for (l, text) in loaded.iter().zip(texts) {
        if let (true, Some(text)) = (l.spec.envvars, text) {
            let parsed = parse_env_file(text).map_err(|e| {
                HookError::fatal(
                    HOOK,
                    format!("Template failed to read environment variables: {e}"),
                )
            })?;
            env.extend(parsed);
        }
    }
    Ok(env)
}

impl HookCtx {
    /// The namespace of the task's job (its templates' default).
    fn namespace(&self) -> &str {
        self.task
            .env
            .get("NOMAD_NAMESPACE")
            .map_or("default", String::as_str)
    }
}

/// Asks the servers once, at once, for `deps` as `token` may read them (the first render,
/// and the retries of refused reads; waiting for changes goes through the allocation's
/// [`TemplateFeed`]).
async fn fetch(
    servers: &Servers,
    token: &str,
    deps: &BTreeSet<TemplateDep>,
) -> Result<(u64, Vec<(TemplateDep, TemplateData)>), String> {
    let answer = servers
        .template_read(TemplateReadRequest {
            reads: vec![TemplateReadSet {
                token: token.to_string(),
                deps: deps.iter().cloned().collect(),
            }],
            min_index: 0,
            wait_ms: 0,
        })
        .await
        .map_err(|e| e.to_string())?;
    let data = answer.data.into_iter().next().unwrap_or_default();
    Ok((answer.index, deps.iter().cloned().zip(data).collect()))
}

/// Put an answer into the brain: whether anything changed.
fn learn(rt: &mut Runtime, (index, data): (u64, Vec<(TemplateDep, TemplateData)>)) -> bool {
    rt.index = index;
    let mut changed = false;
    for (dep, data) in data {
        if rt.brain.get(&dep) != Some(&data) {
            rt.brain.insert(dep, data);
            changed = true;
        }
    }
    changed
}

/// The allocation's feed, or (a task runner built without one) a feed of the task's own.
fn feed_of(ctx: &HookCtx, servers: &Arc<Servers>) -> Arc<TemplateFeed> {
    ctx.template_feed
        .clone()
        .unwrap_or_else(|| TemplateFeed::new(servers.clone()))
}

impl TemplateHook {
    /// The task's token for Nomad reads, signed once per task runner.
    async fn token(&self, ctx: &HookCtx, servers: &Servers) -> Result<String, HookError> {
        if let Some(t) = lock(&self.rt).token.clone() {
            return Ok(t);
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            match default_token(servers, &ctx.alloc_id, &ctx.task.name).await {
                Ok(t) => {
                    lock(&self.rt).token = Some(t.clone());
                    return Ok(t);
                }
                Err(e) if tokio::time::Instant::now() + RETRY < deadline => {
                    debug!(error = %e, "template identity not signed yet; retrying");
                    tokio::time::sleep(RETRY).await;
                }
                Err(e) => {
                    return Err(HookError::recoverable(
                        HOOK,
                        format!("failed to sign the task's identity for its templates: {e}"),
                    ))
                }
            }
        }
    }

    /// Renders until every template has everything it reads: the texts. Not `patient`
    /// (a client restart finding the task running), it asks the servers once and answers
    /// `None` when something is still missing: the task runs on with its files.
    async fn first_render(
        &self,
        ctx: &HookCtx,
        loaded: &[Loaded],
        patient: bool,
    ) -> Result<Option<Vec<Option<String>>>, HookError> {
        let mut last_event: Option<(BTreeSet<String>, tokio::time::Instant)> = None;
        let mut denied_attempts = 0u32;
        let mut rounds = 0u32;
        let mut subscription: Option<(BTreeSet<TemplateDep>, FeedSubscription)> = None;
        loop {
            rounds += 1;
            let brain = lock(&self.rt).brain.clone();
            let outcomes = render_all(ctx, loaded, &brain)?;
            let missing: BTreeSet<String> = outcomes
                .iter()
                .flat_map(|o| o.missing.iter().cloned())
                .collect();
            let deps: BTreeSet<TemplateDep> = outcomes
                .iter()
                .flat_map(|o| o.deps.iter().cloned())
                .collect();
            {
                let mut rt = lock(&self.rt);
                rt.deps = deps.clone();
                rt.files = outcomes
                    .iter()
                    .flat_map(|o| o.files.iter().cloned())
                    .collect();
            }
            if missing.is_empty() {
                return Ok(Some(outcomes.into_iter().map(|o| o.text).collect()));
            }
            if !patient && rounds > 1 {
                return Ok(None);
            }
            let now = tokio::time::Instant::now();
            let due = last_event.as_ref().is_none_or(|(set, at)| {
                *set != missing && now.duration_since(*at) >= MISSING_EVENT_EVERY
            });
            if due {
                ctx.events.emit(event(
                    crate::util::system_clock().now_unix_nanos(),
                    "Template",
                    missing_message(&missing),
                ));
                last_event = Some((missing.clone(), now));
            }
            let denied: BTreeSet<String> = outcomes
                .iter()
                .flat_map(|o| o.denied.iter().cloned())
                .collect();
            let unfetched = deps.iter().any(|d| !brain.contains_key(d));
            let unavailable = deps
                .iter()
                .any(|d| brain.get(d) == Some(&TemplateData::Unavailable));
            let wait = if !denied.is_empty() {
                if denied_attempts == 0 {
                    warn!(denied = ?denied, "the task's identity may not read what its templates read");
                }
                denied_attempts += 1;
                if denied_attempts > DENIED_ATTEMPTS {
                    let names: Vec<String> = denied.into_iter().collect();
                    return Err(failed(format!(
                        "{}: Unexpected response code: 403 (Permission denied)",
                        names.join(", ")
                    )));
                }
                let backoff = DENIED_BACKOFF * 2u32.saturating_pow(denied_attempts - 1);
                tokio::time::sleep(backoff.min(DENIED_MAX_BACKOFF)).await;
                Duration::ZERO
            } else if !lock(&self.rt).files.is_empty() {
                FILE_POLL
            } else {
                MISSING_EVENT_EVERY
            };
            if deps.is_empty() {
                if !patient {
                    return Ok(None);
                }
                // Only files or Consul/Vault are missing: look again later.
                tokio::time::sleep(wait.max(FILE_POLL)).await;
                continue;
            }
            let Some(servers) = ctx.servers.as_ref() else {
                return Err(HookError::recoverable(
                    HOOK,
                    "no servers to read templates' data from",
                ));
            };
            let token = self.token(ctx, servers).await?;
            if unavailable && patient {
                // The servers could not read it now: ask again after a pause.
                tokio::time::sleep(RETRY).await;
            }
            if unfetched || unavailable || !denied.is_empty() || !patient {
                match fetch(servers, &token, &deps).await {
                    Ok(answer) => {
                        learn(&mut lock(&self.rt), answer);
                    }
                    Err(e) => {
                        warn!(error = %e, "templates' data not read; retrying");
                        tokio::time::sleep(RETRY).await;
                    }
                }
                continue;
            }
            // Wait for what is missing with the allocation's other tasks' reads.
            let resubscribe = subscription.as_ref().is_none_or(|(d, _)| *d != deps);
            if resubscribe {
                let sub = feed_of(ctx, servers).subscribe(&token, deps.iter().cloned().collect());
                subscription = Some((deps.clone(), sub));
            }
            let Some((_, sub)) = subscription.as_mut() else {
                continue;
            };
            if let Ok(Ok(())) = tokio::time::timeout(wait, sub.answers.changed()).await {
                if let Some(mine) = sub.mine() {
                    learn(&mut lock(&self.rt), mine);
                }
            }
        }
    }

    fn stop_watching(&self) {
        if let Some(stop) = self
            .watching
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            stop.cancel();
        }
    }
}

impl TaskHook for TemplateHook {
    fn name(&self) -> &'static str {
        HOOK
    }

    fn prestart<'a>(
        &'a self,
        ctx: &'a HookCtx,
        _state: &'a mut HookState,
        prepared: &'a mut Prepared,
    ) -> BoxFuture<'a, Result<(), HookError>> {
        Box::pin(async move {
            if ctx.task.templates.is_empty() {
                return Ok(());
            }
            let render_again = ctx
                .task
                .restart_policy
                .as_ref()
                .and_then(|p| p.render_templates)
                .unwrap_or(false);
            {
                let rt = lock(&self.rt);
                if rt.rendered && !render_again && !ctx.restoring {
                    prepared.env.extend(rt.env.clone());
                    return Ok(());
                }
            }
            let loaded = load(ctx)?;
            lock(&self.rt).loaded = loaded.clone();
            let Some(texts) = self.first_render(ctx, &loaded, !ctx.restoring).await? else {
                // Restored with something missing: the running task keeps its files, and
                // its environment's values, read back from them; the watcher takes over.
                let texts: Vec<Option<String>> = loaded
                    .iter()
                    .map(|l| {
                        place(ctx, &l.spec.dest_path)
                            .ok()
                            .and_then(|p| read_in(sandbox(ctx), &p, MAX_SOURCE).ok().flatten())
                    })
                    .collect();
                let env = env_of(&loaded, &texts).unwrap_or_default();
                let mut rt = lock(&self.rt);
                rt.written = texts;
                rt.env = env;
                rt.rendered = true;
                return Ok(());
            };
            let mut changed = Vec::new();
            for (i, (l, text)) in loaded.iter().zip(&texts).enumerate() {
                let text = text.as_deref().unwrap_or_default();
                if write(ctx, &l.spec, text).map_err(failed)? {
                    changed.push(i);
                }
            }
            let env = env_of(&loaded, &texts)?;
            prepared.env.extend(env.clone());
            let mut rt = lock(&self.rt);
            rt.written = texts;
            rt.env = env;
            rt.rendered = true;
            rt.first_render = !ctx.restoring;
            if ctx.restoring && !changed.is_empty() {
                rt.changed_on_restore = changed;
            }
            Ok(())
        })
    }

    fn poststart<'a>(
        &'a self,
        ctx: &'a HookCtx,
        _state: &'a mut HookState,
    ) -> BoxFuture<'a, Result<(), HookError>> {
        Box::pin(async move {
            if ctx.task.templates.is_empty() {
                return Ok(());
            }
            let loaded = lock(&self.rt).loaded.clone();
            if loaded.is_empty() {
                return Ok(());
            }
            let (pending, first) = {
                let mut rt = lock(&self.rt);
                (
                    std::mem::take(&mut rt.changed_on_restore),
                    std::mem::take(&mut rt.first_render),
                )
            };
            // Actions go through the runner's control queue, which it reads only once
            // poststart is over: never waited for here.
            if !pending.is_empty() {
                tokio::spawn({
                    let (ctx, loaded) = (ctx.clone(), loaded.clone());
                    async move { act(&ctx, &loaded, &pending).await }
                });
            }
            if first {
                let scripts: Vec<usize> = (0..loaded.len())
                    .filter(|i| {
                        let spec = &loaded[*i].spec;
                        spec.change_mode == "script"
                            && spec
                                .change_script
                                .as_ref()
                                .is_some_and(|s| s.run_on_first_render)
                    })
                    .collect();
                if !scripts.is_empty() {
                    tokio::spawn({
                        let (ctx, loaded) = (ctx.clone(), loaded.clone());
                        async move { act(&ctx, &loaded, &scripts).await }
                    });
                }
            }
            if loaded.iter().all(|l| l.spec.once) {
                return Ok(());
            }
            let stop = CancellationToken::new();
            if let Some(old) = self
                .watching
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .replace(stop.clone())
            {
                old.cancel();
            }
            tokio::spawn(watch(ctx.clone(), loaded, self.rt.clone(), stop));
            Ok(())
        })
    }

    /// The task exited: its watcher stops (the next start's poststart starts another, from
    /// the index this one reached, so no change is lost), so nothing acts on a task that
    /// is not running.
    fn exited<'a>(
        &'a self,
        _ctx: &'a HookCtx,
        _state: &'a mut HookState,
    ) -> BoxFuture<'a, Result<(), HookError>> {
        self.stop_watching();
        Box::pin(async { Ok(()) })
    }

    fn stop<'a>(
        &'a self,
        _ctx: &'a HookCtx,
        _state: &'a mut HookState,
    ) -> BoxFuture<'a, Result<(), HookError>> {
        self.stop_watching();
        Box::pin(async { Ok(()) })
    }
}

/// The settle window of the task's templates: the shortest `wait.min` and longest
/// `wait.max` they set, else the client's.
fn settle_window(loaded: &[Loaded]) -> (Duration, Duration) {
    let nanos = |f: fn(&teamster_storage::model::TemplateWait) -> Option<u64>| {
        loaded
            .iter()
            .filter_map(|l| l.spec.wait.as_ref().and_then(f))
            .map(Duration::from_nanos)
            .collect::<Vec<_>>()
    };
    let min = nanos(|w| w.min).into_iter().min().unwrap_or(WAIT_MIN);
    let max = nanos(|w| w.max)
        .into_iter()
        .max()
        .unwrap_or(WAIT_MAX)
        .max(min);
    (min, max)
}

/// Watches what the templates read while the task runs (through the allocation's feed),
/// and acts on new renders.
async fn watch(
    ctx: HookCtx,
    loaded: Vec<Loaded>,
    rt: Arc<Mutex<Runtime>>,
    stop: CancellationToken,
) {
    let Some(servers) = ctx.servers.clone() else {
        return;
    };
    let feed = feed_of(&ctx, &servers);
    let (settle_min, settle_max) = settle_window(&loaded);
    let mut subscription: Option<(BTreeSet<TemplateDep>, FeedSubscription)> = None;
    // First, what an earlier watcher learned but could not act on (it was stopped).
    let mut check_now = true;
    loop {
        if std::mem::take(&mut check_now) {
            rerender(&ctx, &loaded, &rt, &stop).await;
            continue;
        }
        let (deps, has_files, token) = {
            let r = lock(&rt);
            (r.deps.clone(), !r.files.is_empty(), r.token.clone())
        };
        if deps.is_empty() && !has_files {
            return;
        }
        let token = token.filter(|_| !deps.is_empty());
        if stop.is_cancelled() {
            return;
        }
        if token.is_none() {
            subscription = None;
        } else if subscription.as_ref().is_none_or(|(d, _)| *d != deps) {
            let token = token.as_deref().unwrap_or_default();
            let sub = feed.subscribe(token, deps.iter().cloned().collect());
            subscription = Some((deps.clone(), sub));
        }
        // Wait for a change: an answer that differs, or (for `file`) the poll interval.
        let changed = match subscription.as_mut() {
            Some((_, sub)) => {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    got = sub.answers.changed() => {
                        if got.is_err() {
                            return;
                        }
                        sub.mine().is_some_and(|m| learn(&mut lock(&rt), m))
                    }
                    _ = tokio::time::sleep(FILE_POLL), if has_files => true,
                }
            }
            // Only files to look at again (without a token nothing else can be watched).
            None => {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(FILE_POLL), if has_files => true,
                }
            }
        };
        if !changed {
            continue;
        }
        // Let a burst of changes settle: quiet for the window's minimum, at most its
        // maximum; then one render, one action.
        if let Some((_, sub)) = subscription.as_mut() {
            let until = tokio::time::Instant::now() + settle_max;
            let mut quiet = (tokio::time::Instant::now() + settle_min).min(until);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep_until(quiet) => break,
                    got = sub.answers.changed() => {
                        if got.is_err() {
                            return;
                        }
                        if sub.mine().is_some_and(|m| learn(&mut lock(&rt), m)) {
                            quiet = (tokio::time::Instant::now() + settle_min).min(until);
                        }
                    }
                }
            }
        }
        rerender(&ctx, &loaded, &rt, &stop).await;
    }
}

/// Renders every template again from what the watcher learned, writes those whose text
/// changed and, after the splay, acts on them.
async fn rerender(
    ctx: &HookCtx,
    loaded: &[Loaded],
    rt: &Arc<Mutex<Runtime>>,
    stop: &CancellationToken,
) {
    let brain = lock(rt).brain.clone();
    let outcomes = match render_all(ctx, loaded, &brain) {
        Ok(o) => o,
        Err(e) => {
            warn!(error = %e, "template render failed");
            return;
        }
    };
    let mut written_now = Vec::new();
    {
        let mut r = lock(rt);
        r.deps = outcomes
            .iter()
            .flat_map(|o| o.deps.iter().cloned())
            .collect();
        r.files = outcomes
            .iter()
            .flat_map(|o| o.files.iter().cloned())
            .collect();
    }
    for (i, (l, o)) in loaded.iter().zip(&outcomes).enumerate() {
        // A template missing something again keeps its last file, as consul-template.
        let Some(text) = &o.text else { continue };
        if l.spec.once || lock(rt).written.get(i).cloned().flatten().as_ref() == Some(text) {
            continue;
        }
        match write(ctx, &l.spec, text) {
            Ok(_) => {
                let mut r = lock(rt);
                if r.written.len() <= i {
                    r.written.resize(i + 1, None);
                }
                r.written[i] = Some(text.clone());
                written_now.push(i);
            }
            Err(e) => warn!(error = %e, "template not written"),
        }
    }
    if written_now.is_empty() {
        return;
    }
    let texts = lock(rt).written.clone();
    if let Ok(env) = env_of(loaded, &texts) {
        lock(rt).env = env;
    }
    info!(templates = ?written_now, "templates re-rendered");
    let splay = written_now
        .iter()
        .map(|i| Duration::from_nanos(u64::try_from(loaded[*i].spec.splay).unwrap_or(0)))
        .max()
        .unwrap_or_default();
    if !splay.is_zero() {
        let pause = rand::thread_rng().gen_range(Duration::ZERO..splay);
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(pause) => {}
        }
    }
    act(ctx, loaded, &written_now).await;
}

/// Apply the change modes of the templates `changed`: one restart if any asks for it,
/// else each distinct signal and each script.
async fn act(ctx: &HookCtx, loaded: &[Loaded], changed: &[usize]) {
    let Some(control) = ctx.control.as_ref().and_then(mpsc::WeakSender::upgrade) else {
        return;
    };
    let specs: Vec<&TemplateSpec> = changed.iter().map(|i| &loaded[*i].spec).collect();
    if specs.iter().any(|s| s.change_mode == "restart") {
        let (reply, _answer) = tokio::sync::oneshot::channel();
        let _ = control
            .send(TaskControl::Restart {
                reason: Some("Template with change_mode restart re-rendered".into()),
                reply,
            })
            .await;
        return;
    }
    let signals: BTreeSet<&str> = specs
        .iter()
        .filter(|s| s.change_mode == "signal")
        .map(|s| s.change_signal.as_str())
        .collect();
    for sig in signals {
        let Some((name, signal)) = crate::client::signal::parse(sig) else {
            continue;
        };
        let (reply, answer) = tokio::sync::oneshot::channel();
        let _ = control
            .send(TaskControl::Signal {
                name,
                signal,
                reply,
            })
            .await;
        if let Ok(Err(e)) = answer.await {
            ctx.events.emit(event(
                crate::util::system_clock().now_unix_nanos(),
                "Task hook message",
                format!("Template skipped signal {sig}: {e}"),
            ));
        }
    }
    for spec in specs.iter().filter(|s| s.change_mode == "script") {
        let Some(script) = &spec.change_script else {
            continue;
        };
        if let Err(e) = run_script(ctx, script).await {
            ctx.events.emit(event(
                crate::util::system_clock().now_unix_nanos(),
                "Task hook failed",
                format!(
                    "Template failed to run script {} with arguments {:?} on change: {e}",
                    script.command, script.args
                ),
            ));
            if script.fail_on_error {
                let (reply, _answer) = tokio::sync::oneshot::channel();
                let _ = control
                    .send(TaskControl::Fail {
                        reason: "Template script failed, task is being killed".into(),
                        reply,
                    })
                    .await;
                return;
            }
        }
    }
}

/// Runs a change script in the task's place (its directory and environment), within its
/// timeout.
async fn run_script(
    ctx: &HookCtx,
    script: &teamster_storage::model::ChangeScript,
) -> Result<(), String> {
    // In the allocation's network namespace when it has one (bridge mode), as the task.
    let netns = std::path::Path::new(crate::client::network::netns::NETNS_DIR).join(&ctx.alloc_id);
    let netns = crate::client::network::netns::is_netns(&netns).then_some(netns);
    let mut cmd = crate::client::driver::task_command(
        &ctx.task,
        ctx.task_dir.dir(),
        &script.command,
        &script.args,
        None,
        netns.as_deref(),
    )
    .map_err(|e| e.to_string())?;
    cmd.kill_on_drop(true)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let timeout = Duration::from_nanos(script.timeout.max(1));
    let status = tokio::time::timeout(timeout, async {
        cmd.spawn()
            .map_err(|e| e.to_string())?
            .wait()
            .await
            .map_err(|e| e.to_string())
    })
    .await
    .map_err(|_| format!("script timed out after {timeout:?}"))??;
    if status.success() {
        Ok(())
    } else {
        Err(format!("exited with code: {}", status.code().unwrap_or(-1)))
    }
}
