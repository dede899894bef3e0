//! The parts of a job that shape how a client runs a task rather than where it is placed:
//! a task's `logs` block ([`LogConfig`]) and `lifecycle` ([`TaskLifecycle`]), and a group's
//! `ephemeral_disk` ([`EphemeralDisk`]), with Nomad's defaults and checks; and a task's
//! `action` blocks ([`Action`]): commands run on demand in a running task's place.

use serde::{Deserialize, Serialize};

use crate::model::de;

/// Nomad's default number of rotated files per stream.
pub const DEFAULT_LOG_MAX_FILES: u32 = 10;
/// Nomad's default size of one log file, in MB.
pub const DEFAULT_LOG_MAX_FILE_SIZE_MB: u32 = 10;
/// Nomad's default ephemeral disk, in MB.
pub const DEFAULT_EPHEMERAL_DISK_MB: u64 = 300;
/// The smallest ephemeral disk Nomad accepts, in MB.
pub const MIN_EPHEMERAL_DISK_MB: u64 = 10;

/// The signals a task may name as its `kill_signal` (any case, with or without `SIG`), as
/// the client sends them.
pub const SIGNAL_NAMES: &[&str] = &[
    "SIGABRT",
    "SIGALRM",
    "SIGBUS",
    "SIGCHLD",
    "SIGCONT",
    "SIGFPE",
    "SIGHUP",
    "SIGILL",
    "SIGINT",
    "SIGIO",
    "SIGIOT",
    "SIGKILL",
    "SIGPIPE",
    "SIGPROF",
    "SIGQUIT",
    "SIGSEGV",
    "SIGSTOP",
    "SIGSYS",
    "SIGTERM",
    "SIGTRAP",
    "SIGTSTP",
    "SIGTTIN",
    "SIGTTOU",
    "SIGURG",
    "SIGUSR1",
    "SIGUSR2",
    "SIGVTALRM",
    "SIGWINCH",
    "SIGXCPU",
    "SIGXFSZ",
];

/// `name` as the canonical name of a signal in [`SIGNAL_NAMES`] (`usr1` → `SIGUSR1`).
pub fn signal_name(name: &str) -> Option<&'static str> {
    let upper = name.trim().to_ascii_uppercase();
    let full = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    SIGNAL_NAMES.iter().copied().find(|n| *n == full)
}

/// Whether `name` cannot be a task's directory name in its allocation's directory (Nomad
/// refuses `alloc`, `/` and NUL; `.`, `..` and `\\` would lead elsewhere too).
pub fn task_name_is_not_a_directory(name: &str) -> bool {
    matches!(name, "alloc" | "." | "..") || name.contains(['/', '\\', '\0'])
}

/// `lifecycle { hook = "prestart" }`: runs (and, unless a sidecar, completes) before the
/// group's main tasks start.
pub const HOOK_PRESTART: &str = "prestart";
/// `lifecycle { hook = "poststart" }`: starts once the main tasks run.
pub const HOOK_POSTSTART: &str = "poststart";
/// `lifecycle { hook = "poststop" }`: runs once every other task is dead.
pub const HOOK_POSTSTOP: &str = "poststop";

/// A task's `lifecycle` block: when it runs relative to the group's main tasks (those
/// without one).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct TaskLifecycle {
    /// `prestart`, `poststart` or `poststop`.
    #[serde(deserialize_with = "de::nullable")]
    pub hook: String,
    /// Runs for the allocation's whole life (prestart and poststart only) instead of
    /// completing.
    #[serde(deserialize_with = "de::nullable")]
    pub sidecar: bool,
}

impl TaskLifecycle {
    /// Nomad's checks: a known hook.
    pub fn validate(&self, at: &str, errors: &mut Vec<String>) {
        match self.hook.as_str() {
            HOOK_PRESTART | HOOK_POSTSTART | HOOK_POSTSTOP => {}
            "" => errors.push(format!(
                "{at}: Lifecycle validation failed: no lifecycle hook provided"
            )),
            other => errors.push(format!(
                "{at}: Lifecycle validation failed: invalid hook: {other}"
            )),
        }
    }
}

/// A task's `logs` block: how its stdout and stderr are kept in `alloc/logs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct LogConfig {
    /// Files kept per stream (Nomad's default 10).
    #[serde(deserialize_with = "de::nullable")]
    pub max_files: u32,
    /// The size at which a file is rotated, in MB (Nomad's default 10).
    #[serde(rename = "MaxFileSizeMB", deserialize_with = "de::nullable")]
    pub max_file_size_mb: u32,
    /// The output is thrown away and nothing collects it.
    #[serde(deserialize_with = "de::nullable")]
    pub disabled: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            max_files: DEFAULT_LOG_MAX_FILES,
            max_file_size_mb: DEFAULT_LOG_MAX_FILE_SIZE_MB,
            disabled: false,
        }
    }
}

impl LogConfig {
    /// The most disk the logs of one task can take, in MB.
    pub fn max_mb(&self) -> u64 {
        u64::from(self.max_files) * u64::from(self.max_file_size_mb)
    }

    pub(crate) fn validate(&self, at: &str, errors: &mut Vec<String>) {
        if self.max_files < 1 {
            errors.push(format!(
                "{at}: logs: minimum number of files is 1; got {}",
                self.max_files
            ));
        }
        if self.max_file_size_mb < 1 {
            errors.push(format!(
                "{at}: logs: minimum file size is 1MB; got {}",
                self.max_file_size_mb
            ));
        }
    }
}

/// A group's `ephemeral_disk`: the disk its allocations reserve on their node (the
/// allocation directory lives there).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct EphemeralDisk {
    /// The disk reserved, in MB (Nomad's default 300).
    #[serde(rename = "SizeMB", deserialize_with = "de::nullable")]
    pub size_mb: u64,
    /// Place a replacement on the same node and keep `alloc/data`.
    #[serde(deserialize_with = "de::nullable")]
    pub sticky: bool,
    /// Copy `alloc/data` to a replacement on another node.
    #[serde(deserialize_with = "de::nullable")]
    pub migrate: bool,
}

impl Default for EphemeralDisk {
    fn default() -> Self {
        EphemeralDisk {
            size_mb: DEFAULT_EPHEMERAL_DISK_MB,
            sticky: false,
            migrate: false,
        }
    }
}

impl EphemeralDisk {
    pub(crate) fn validate(&self, at: &str, errors: &mut Vec<String>) {
        if self.size_mb < MIN_EPHEMERAL_DISK_MB {
            errors.push(format!(
                "{at}: ephemeral_disk: minimum DiskMB value is {MIN_EPHEMERAL_DISK_MB}; got {}",
                self.size_mb
            ));
        }
        if self.size_mb > crate::model::job::MAX_DISK_MB {
            errors.push(format!(
                "{at}: ephemeral_disk: SizeMB {} is more than any node offers (at most {})",
                self.size_mb,
                crate::model::job::MAX_DISK_MB
            ));
        }
    }
}

/// Nomad's check of a task's logs against its group's ephemeral disk (each default when
/// absent): the logs must fit in less than the disk.
pub(crate) fn validate_log_storage(
    at: &str,
    disk: Option<&EphemeralDisk>,
    logs: Option<&LogConfig>,
    errors: &mut Vec<String>,
) {
    let size = disk.map_or(DEFAULT_EPHEMERAL_DISK_MB, |d| d.size_mb);
    let total = logs.cloned().unwrap_or_default().max_mb();
    if total >= size {
        errors.push(format!(
            "{at}: log storage ({total} MB) must be less than requested disk capacity ({size} MB)"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Job, Resources, Task, TaskGroup};

    fn task(name: &str, hook: &str, sidecar: bool, cpu: u64, memory_mb: u64) -> Task {
        Task {
            name: name.into(),
            driver: "mock".into(),
            lifecycle: (!hook.is_empty()).then(|| TaskLifecycle {
                hook: hook.into(),
                sidecar,
            }),
            resources: Resources {
                cpu,
                memory_mb,
                disk_mb: 0,
                memory_max_mb: 0,
                cores: 0,
            },
            ..Task::default()
        }
    }

    #[test]
    fn lifecycle_tasks_are_summed_only_with_what_runs_beside_them() {
        let group = TaskGroup {
            name: "g".into(),
            tasks: vec![
                task("init", HOOK_PRESTART, false, 1000, 50),
                task("proxy", HOOK_PRESTART, true, 100, 10),
                task("web", "", false, 200, 100),
                task("warm", HOOK_POSTSTART, false, 50, 20),
                task("cleanup", HOOK_POSTSTOP, false, 300, 400),
            ],
            ephemeral_disk: Some(EphemeralDisk::default()),
            ..TaskGroup::default()
        };
        // CPU: prestart 1100 beats main 350; memory: poststop 400 beats main 130.
        let got = group.combined_resources();
        assert_eq!((got.cpu, got.memory_mb, got.disk_mb), (1100, 400, 300));
    }

    #[test]
    fn a_lifecycle_needs_a_known_hook_and_a_group_a_main_task() {
        let mut errors = Vec::new();
        for hook in ["prestart", "poststart", "poststop"] {
            TaskLifecycle {
                hook: hook.into(),
                sidecar: false,
            }
            .validate("t", &mut errors);
        }
        assert!(errors.is_empty(), "{errors:?}");
        for hook in ["", "prestop"] {
            TaskLifecycle {
                hook: hook.into(),
                sidecar: false,
            }
            .validate("t", &mut errors);
        }
        assert_eq!(
            errors,
            [
                "t: Lifecycle validation failed: no lifecycle hook provided",
                "t: Lifecycle validation failed: invalid hook: prestop"
            ]
        );
        let mut job = Job {
            id: "j".into(),
            datacenters: vec!["dc1".into()],
            task_groups: vec![TaskGroup {
                name: "g".into(),
                count: 1,
                tasks: vec![task("init", HOOK_PRESTART, false, 100, 10)],
                ..TaskGroup::default()
            }]
            .into(),
            ..Job::default()
        };
        job.canonicalize();
        let why = job.validate().unwrap_err().to_string();
        assert!(
            why.contains("Task group g must have at least one main task"),
            "{why}"
        );
    }

    #[test]
    fn task_names_that_are_not_directory_names_are_refused() {
        for bad in ["alloc", ".", "..", "a/b", "a\\b", "a\0b"] {
            assert!(task_name_is_not_a_directory(bad), "{bad:?}");
        }
        for good in ["web", "alloc2", "my.task", "..x"] {
            assert!(!task_name_is_not_a_directory(good), "{good:?}");
        }
    }

    #[test]
    fn defaults_are_nomad_s_and_bad_values_are_named() {
        let logs: LogConfig = serde_json::from_str(r#"{"MaxFileSizeMB": 20}"#).unwrap();
        assert_eq!(logs.max_files, 10);
        assert_eq!(logs.max_mb(), 200);
        let mut errors = Vec::new();
        LogConfig {
            max_files: 0,
            max_file_size_mb: 0,
            disabled: false,
        }
        .validate("task", &mut errors);
        assert_eq!(errors.len(), 2, "{errors:?}");
        let disk: EphemeralDisk = serde_json::from_str(r#"{"Sticky": true}"#).unwrap();
        assert_eq!(disk.size_mb, 300);
        let mut errors = Vec::new();
        EphemeralDisk { size_mb: 5, ..disk }.validate("group", &mut errors);
        assert!(
            errors[0].contains("minimum DiskMB value is 10"),
            "{errors:?}"
        );
        let mut errors = Vec::new();
        let big = LogConfig {
            max_files: 30,
            ..LogConfig::default()
        };
        validate_log_storage("task", None, Some(&big), &mut errors);
        assert!(errors[0].contains("log storage (300 MB)"), "{errors:?}");
        let mut errors = Vec::new();
        validate_log_storage("task", None, None, &mut errors);
        assert!(errors.is_empty(), "{errors:?}");
    }
}

/// The name of a task's default workload identity.
pub const DEFAULT_IDENTITY_NAME: &str = "default";
/// The only audience of the default identity.
pub const DEFAULT_IDENTITY_AUDIENCE: &str = "nomadproject.io";

/// A task's `identity` block (Nomad's `WorkloadIdentity`): a JWT the servers sign for the
/// task, given to it in its environment and/or a file in its secrets directory, and renewed
/// before it expires when it has a `ttl`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct WorkloadIdentity {
    /// `default` for the default identity, else the name of an alternate one.
    #[serde(deserialize_with = "de::nullable")]
    pub name: String,
    /// The `aud` claim.
    #[serde(deserialize_with = "de::nullable")]
    pub audience: Vec<String>,
    /// What the task gets when the token is renewed: `noop`, `restart` or `signal`.
    #[serde(deserialize_with = "de::nullable")]
    pub change_mode: String,
    /// The signal of `change_mode = "signal"`.
    #[serde(deserialize_with = "de::nullable")]
    pub change_signal: String,
    /// Put the token in the task's environment (`NOMAD_TOKEN`, `NOMAD_TOKEN_<name>`).
    #[serde(deserialize_with = "de::nullable")]
    pub env: bool,
    /// Write the token to `secrets/nomad_token` (`secrets/nomad_<name>.jwt`).
    #[serde(deserialize_with = "de::nullable")]
    pub file: bool,
    /// Where to write it instead, relative to the task directory.
    #[serde(deserialize_with = "de::nullable")]
    pub filepath: String,
    /// How long a token lives, in nanoseconds (0: it does not expire).
    #[serde(rename = "TTL", deserialize_with = "de::nullable")]
    pub ttl: u64,
}

impl WorkloadIdentity {
    /// Whether it is the default identity.
    pub fn is_default(&self) -> bool {
        self.name.is_empty() || self.name == DEFAULT_IDENTITY_NAME
    }

    /// Nomad's canonical form: the default identity named `default` with only Nomad's
    /// audience, the change signal in upper case.
    pub fn canonicalize(&mut self) {
        if self.name.is_empty() {
            self.name = DEFAULT_IDENTITY_NAME.to_string();
        }
        if self.is_default() {
            self.audience = vec![DEFAULT_IDENTITY_AUDIENCE.to_string()];
        }
        self.change_signal = self.change_signal.to_uppercase();
    }

    /// Nomad's checks, as `Identity "<name>" is invalid: …` lines.
    pub fn validate(&self, at: &str, errors: &mut Vec<String>) {
        let mut bad = |reason: String| {
            errors.push(format!(
                "{at}: Identity {:?} is invalid: {reason}",
                self.name
            ));
        };
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 128
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !name_ok {
            bad(format!(
                "invalid name {:?}. Must match regex ^[a-zA-Z0-9-_]{{1,128}}$",
                self.name
            ));
        }
        for (i, aud) in self.audience.iter().enumerate() {
            if aud.is_empty() {
                bad(format!(
                    "an empty string is an invalid audience ({})",
                    i + 1
                ));
            }
        }
        match self.change_mode.as_str() {
            "" | "noop" | "restart" => {
                if !self.change_signal.is_empty() {
                    bad(format!(
                        "can only use change_signal={:?} with change_mode=\"signal\"",
                        self.change_signal
                    ));
                }
            }
            "signal" => {
                if self.change_signal.is_empty() {
                    bad("change_signal must be specified when using change_mode=\"signal\"".into());
                } else if signal_name(&self.change_signal).is_none() {
                    bad(format!("unknown change_signal {:?}", self.change_signal));
                }
            }
            other => bad(format!("invalid change_mode: {other}")),
        }
        if self.ttl > 0 && self.is_default() {
            bad("ttl for default identity not yet supported".into());
        }
        if !self.filepath.is_empty() && !self.file {
            bad("file parameter must be true in order to specify filepath".into());
        }
    }

    /// Nomad's warnings (`Identity[<name>]: …`).
    pub fn warnings(&self, at: &str) -> Vec<String> {
        let mut out = Vec::new();
        let prefix = format!("{at}: Identity[{}]", self.name);
        if self.audience.is_empty() {
            out.push(format!(
                "{prefix}: identities without an audience are insecure"
            ));
        } else if self.audience.len() > 1 {
            out.push(format!(
                "{prefix}: while multiple audiences is allowed, it is more secure to use 1 audience per identity"
            ));
        }
        if !self.is_default() && self.ttl == 0 {
            out.push(format!(
                "{prefix}: identities without an expiration are insecure"
            ));
        }
        if self.env && self.change_mode != "restart" {
            out.push(format!(
                "{prefix}: using env=true without change_mode=\"restart\" may result in task not getting updated identity"
            ));
        }
        out
    }

    /// The task's environment variable for it.
    pub fn env_var(&self) -> String {
        if self.is_default() {
            "NOMAD_TOKEN".to_string()
        } else {
            format!("NOMAD_TOKEN_{}", self.name)
        }
    }

    /// Where its file goes, relative to the task directory.
    pub fn file_path(&self) -> String {
        if !self.filepath.is_empty() {
            self.filepath.clone()
        } else if self.is_default() {
            "secrets/nomad_token".to_string()
        } else {
            format!("secrets/nomad_{}.jwt", self.name)
        }
    }
}

/// A `template`'s `change_script` (Nomad's `ChangeScript`): a command run inside the task
/// when the template is rendered again.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ChangeScript {
    /// The command.
    #[serde(deserialize_with = "de::nullable")]
    pub command: String,
    /// Its arguments.
    #[serde(deserialize_with = "de::nullable")]
    pub args: Vec<String>,
    /// How long it may run, in nanoseconds (Nomad's 5 s by default).
    #[serde(deserialize_with = "de::nullable")]
    pub timeout: u64,
    /// A failure kills the task.
    #[serde(deserialize_with = "de::nullable")]
    pub fail_on_error: bool,
    /// Also run it after the first render, once the task runs.
    #[serde(deserialize_with = "de::nullable")]
    pub run_on_first_render: bool,
}

/// A `template`'s `wait` (Nomad's `WaitConfig`): how long changes settle before a render,
/// in nanoseconds; unset takes the client's.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct TemplateWait {
    /// The quiet period: render once nothing changed for this long.
    pub min: Option<u64>,
    /// Render at the latest this long after the first change.
    pub max: Option<u64>,
}

/// The change modes of a template.
pub const TEMPLATE_CHANGE_MODES: &[&str] = &["noop", "signal", "script", "restart"];

/// A task's `template` block (Nomad's `Template`): a Go template rendered into the task
/// directory before the task starts, rendered again when what it read changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Template {
    /// A template file to render, relative to the task directory.
    #[serde(deserialize_with = "de::nullable")]
    pub source_path: String,
    /// Where the result goes, relative to the task directory.
    #[serde(deserialize_with = "de::nullable")]
    pub dest_path: String,
    /// The template itself (`data`).
    #[serde(deserialize_with = "de::nullable")]
    pub embedded_tmpl: String,
    /// What a new render does to the running task: `noop`, `restart`, `signal`, `script`.
    #[serde(deserialize_with = "de::nullable")]
    pub change_mode: String,
    /// The signal of `change_mode = "signal"`.
    #[serde(deserialize_with = "de::nullable")]
    pub change_signal: String,
    /// The script of `change_mode = "script"`.
    pub change_script: Option<ChangeScript>,
    /// A random wait of up to this long before acting on a new render, in nanoseconds.
    #[serde(deserialize_with = "de::nullable")]
    pub splay: i64,
    /// The rendered file's mode, in octal.
    #[serde(deserialize_with = "de::nullable")]
    pub perms: String,
    /// The rendered file's owner (`None`: the agent's).
    #[serde(deserialize_with = "de::nullable")]
    pub uid: Option<i64>,
    /// The rendered file's group (`None`: the agent's).
    #[serde(deserialize_with = "de::nullable")]
    pub gid: Option<i64>,
    /// The left delimiter.
    #[serde(deserialize_with = "de::nullable")]
    pub left_delim: String,
    /// The right delimiter.
    #[serde(deserialize_with = "de::nullable")]
    pub right_delim: String,
    /// The rendered file is `KEY=value` lines added to the task's environment.
    #[serde(deserialize_with = "de::nullable")]
    pub envvars: bool,
    /// Deprecated and ignored by Nomad since 0.11 (a warning).
    #[serde(deserialize_with = "de::nullable")]
    pub vault_grace: i64,
    /// How long changes settle before a render.
    pub wait: Option<TemplateWait>,
    /// A missing map key is an error instead of `<no value>`.
    #[serde(deserialize_with = "de::nullable")]
    pub err_missing_key: bool,
    /// Render once, never again.
    #[serde(deserialize_with = "de::nullable")]
    pub once: bool,
}

impl Default for Template {
    fn default() -> Self {
        Template {
            source_path: String::new(),
            dest_path: String::new(),
            embedded_tmpl: String::new(),
            change_mode: "restart".into(),
            change_signal: String::new(),
            change_script: None,
            splay: 5_000_000_000,
            perms: "0644".into(),
            uid: None,
            gid: None,
            left_delim: "{{".into(),
            right_delim: "}}".into(),
            envvars: false,
            vault_grace: 0,
            wait: None,
            err_missing_key: false,
            once: false,
        }
    }
}

impl Template {
    /// Nomad's API canonicalization: empty fields take their defaults, a `signal` mode
    /// without a signal takes `SIGHUP`, the signal is upper-cased.
    pub fn canonicalize(&mut self) {
        let d = Template::default();
        if self.change_mode.is_empty() {
            self.change_mode = d.change_mode;
        }
        if self.change_signal.is_empty() && self.change_mode == "signal" {
            self.change_signal = "SIGHUP".into();
        }
        self.change_signal = self.change_signal.to_uppercase();
        if self.perms.is_empty() {
            self.perms = d.perms;
        }
        if self.left_delim.is_empty() {
            self.left_delim = d.left_delim;
        }
        if self.right_delim.is_empty() {
            self.right_delim = d.right_delim;
        }
        if let Some(script) = &mut self.change_script {
            if script.timeout == 0 {
                script.timeout = 5_000_000_000;
            }
        }
    }

    /// Nomad's checks (`Template.Validate`), one message each.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.source_path.is_empty() && self.embedded_tmpl.is_empty() {
            out.push("Must specify a source path or have an embedded template".into());
        }
        if self.dest_path.is_empty() {
            out.push("Must specify a destination for the template".into());
        }
        if escapes_alloc_dir("task", &self.dest_path) {
            out.push("destination escapes allocation directory".into());
        }
        match self.change_mode.as_str() {
            "noop" | "restart" => {}
            "signal" => {
                if self.change_signal.is_empty() {
                    out.push("Must specify signal value when change mode is signal".into());
                } else if signal_name(&self.change_signal).is_none() {
                    out.push(format!("unknown change_signal {:?}", self.change_signal));
                }
                if self.envvars {
                    out.push("cannot use signals with env var templates".into());
                }
            }
            "script" => match &self.change_script {
                None => out.push(
                    "must specify change script configuration value when change mode is script"
                        .into(),
                ),
                Some(s) if s.command.is_empty() => {
                    out.push("must specify script path value when change mode is script".into())
                }
                Some(_) => {}
            },
            _ => out.push(
                "Invalid change mode. Must be one of the following: noop, signal, script, restart"
                    .into(),
            ),
        }
        if self.splay < 0 {
            out.push("Must specify positive splay value".into());
        }
        if !self.perms.is_empty() && parse_perms(&self.perms).is_none() {
            out.push(format!(
                "Failed to parse {:?} as octal: strconv.ParseUint: parsing {:?}: invalid syntax",
                self.perms, self.perms
            ));
        }
        if let Some(TemplateWait {
            min: Some(min),
            max: Some(max),
        }) = &self.wait
        {
            if min > max {
                out.push(format!(
                    "wait min {}s is greater than max {}s",
                    *min as f64 / 1e9,
                    *max as f64 / 1e9
                ));
            }
        }
        out
    }
}

/// A template's `perms` as a mode (octal, at most 12 bits).
pub fn parse_perms(perms: &str) -> Option<u32> {
    u32::from_str_radix(perms, 8).ok().filter(|m| *m <= 0o7777)
}

/// Whether `path`, taken relative to the directory `base` inside an allocation directory,
/// leads outside it (Nomad's `PathEscapesAllocViaRelative`: `..` past the root; an absolute
/// path counts as relative to `base`).
pub fn escapes_alloc_dir(base: &str, path: &str) -> bool {
    let mut depth: i64 = 0;
    for part in base.split('/').chain(path.split('/')) {
        match part {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return true;
                }
            }
            _ => depth += 1,
        }
    }
    false
}

#[cfg(test)]
mod template_tests {
    use super::*;

    #[test]
    fn canonical_form_and_nomads_checks() {
        let mut t = Template {
            dest_path: "local/x".into(),
            embedded_tmpl: "x".into(),
            change_mode: "signal".into(),
            change_signal: String::new(),
            ..Template::default()
        };
        t.canonicalize();
        assert_eq!(t.change_signal, "SIGHUP");
        assert!(t.problems().is_empty(), "{:?}", t.problems());
        t.envvars = true;
        assert_eq!(
            t.problems(),
            vec!["cannot use signals with env var templates"]
        );

        let bad = Template {
            dest_path: "../../etc/passwd".into(),
            change_mode: "explode".into(),
            splay: -1,
            perms: "999".into(),
            wait: Some(TemplateWait {
                min: Some(10_000_000_000),
                max: Some(1_000_000_000),
            }),
            ..Template::default()
        };
        let p = bad.problems();
        assert!(p[0].starts_with("Must specify a source path"), "{p:?}");
        assert!(p
            .iter()
            .any(|m| m == "destination escapes allocation directory"));
        assert!(p.iter().any(|m| m.starts_with("Invalid change mode")));
        assert!(p.iter().any(|m| m == "Must specify positive splay value"));
        assert!(p
            .iter()
            .any(|m| m.starts_with("Failed to parse \"999\" as octal")));
        assert!(p.iter().any(|m| m == "wait min 10s is greater than max 1s"));

        let script = Template {
            dest_path: "x".into(),
            embedded_tmpl: "x".into(),
            change_mode: "script".into(),
            ..Template::default()
        };
        assert_eq!(
            script.problems(),
            vec!["must specify change script configuration value when change mode is script"]
        );
    }

    #[test]
    fn escaping_the_allocation_directory() {
        assert!(!escapes_alloc_dir("task", "local/a.conf"));
        assert!(!escapes_alloc_dir("task", "/local/a.conf"));
        assert!(!escapes_alloc_dir("task", "../alloc/shared.conf"));
        assert!(escapes_alloc_dir("task", "../../x"));
        assert!(escapes_alloc_dir("task", "local/../../../x"));
    }
}

/// A task's `action "<name>"` block (Nomad 1.7's job actions): a command `teamster action`
/// runs on demand in the place of a running task, as `alloc exec` runs one.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Action {
    /// Its name, unique in the task: 1 to 128 characters, no whitespace or NUL.
    #[serde(deserialize_with = "de::nullable")]
    pub name: String,
    /// The program.
    #[serde(deserialize_with = "de::nullable")]
    pub command: String,
    /// Its arguments.
    #[serde(deserialize_with = "de::nullable")]
    pub args: Vec<String>,
}

impl Action {
    /// The program and its arguments.
    pub fn argv(&self) -> Vec<String> {
        std::iter::once(self.command.clone())
            .chain(self.args.iter().cloned())
            .collect()
    }
}

/// Nomad's checks of a task's actions, in its words.
pub fn validate_actions(at: &str, actions: &[Action], errors: &mut Vec<String>) {
    let mut seen = std::collections::BTreeSet::new();
    for action in actions {
        let name = &action.name;
        let mut problems = Vec::new();
        if action.command.is_empty() {
            problems.push("command cannot be empty".to_owned());
        }
        let valid_name = (1..=128).contains(&name.chars().count())
            && !name.chars().any(|c| c == '\0' || c.is_whitespace());
        if !valid_name {
            problems.push(format!("invalid name '{name}'"));
        }
        if !problems.is_empty() {
            errors.push(format!(
                "{at}: Action {name} validation failed: {}",
                problems.join("; ")
            ));
        }
        if !seen.insert(name.as_str()) {
            errors.push(format!("{at}: Action {name} defined multiple times"));
        }
    }
}

#[cfg(test)]
mod action_tests {
    use super::*;

    fn action(name: &str, command: &str) -> Action {
        Action {
            name: name.into(),
            command: command.into(),
            args: vec!["-c".into(), "date".into()],
        }
    }

    #[test]
    fn actions_are_checked_in_nomad_s_words() {
        let mut errors = Vec::new();
        validate_actions(
            "t",
            &[action("now", "/bin/sh"), action("later", "/bin/sh")],
            &mut errors,
        );
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(action("now", "/bin/sh").argv(), ["/bin/sh", "-c", "date"]);
        validate_actions(
            "t",
            &[
                action("two words", ""),
                action("x", "/bin/true"),
                action("x", "/bin/true"),
            ],
            &mut errors,
        );
        assert_eq!(
            errors,
            [
                "t: Action two words validation failed: command cannot be empty; invalid \
                 name 'two words'",
                "t: Action x defined multiple times"
            ]
        );
    }
}
