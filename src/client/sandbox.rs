//! The `exec` driver's isolation: a task in its own mount, PID, IPC and UTS namespaces,
//! in a root of read-only bind mounts of the host's `chroot_env`, with the allocation
//! directory at `/alloc` and the task's `local`, `secrets` and `tmp` at `/local`,
//! `/secrets` and `/tmp`, with a bounded set of capabilities, as Nomad's executor builds it.
//!
//! ```text
//!  client ──spawn──▶ supervisor (host pid ns, the task's cgroup)
//!                        │ unshare(mnt pid ipc uts); fork
//!                        ▼
//!                    task, pid 1 of its namespace: tmpfs root ← bind mounts, /proc, /dev,
//!                    pivot_root, user, capabilities, parent-death signal ──exec──▶ command
//! ```
//!
//! Everything between `fork` and `exec` is a plain system call on data prepared before the
//! fork ([`Plan`], built by [`plan`] from [`SandboxSpec`]): no allocation, no lock. The
//! supervisor (the process the client spawned, so its pid is the task's handle) closes
//! every descriptor but the standard three, blocks signals, waits for the task and exits as
//! it did (re-raising its signal). The task gets SIGKILL if the supervisor dies. When the
//! task, pid 1, ends, the kernel kills everything else in its PID namespace. Signals reach
//! the task through the process group, which both share.
//!
//! `alloc exec` enters a running task the same way ([`enter_plan`]): it joins the task's
//! cgroup, its namespaces (so its root) and runs as its user with its capabilities.
//!
//! The task config keys it reads are Nomad's: `command`, `args`, `pid_mode`, `ipc_mode`,
//! `cap_add`, `cap_drop`, `work_dir` ([`ExecTaskConfig`]); any other is refused by name.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use teamster_storage::model::ConfigValue;

use crate::client::config::{capability, ExecConfig, CAPABILITIES, DEFAULT_CAPS};
use crate::client::users::Account;
use crate::client::volumes::HostMount;

/// The task config keys the `exec` driver knows.
pub const EXEC_KEYS: &[&str] = &[
    "command", "args", "pid_mode", "ipc_mode", "cap_add", "cap_drop", "work_dir",
];

/// Why a task cannot be sandboxed as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxError {
    /// A config key the driver does not act on.
    #[error(
        "exec config key {key:?} is not supported by teamster; remove it (supported: {known})",
        key = .0,
        known = EXEC_KEYS.join(", ")
    )]
    UnknownKey(String),
    /// A value of the wrong shape or out of range.
    #[error("exec config {key}: {reason}")]
    BadValue {
        /// The key.
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The task's user is on the client's deny list.
    #[error("running as user {0:?} is disallowed")]
    UserDenied(String),
    /// The task's user is not an account of this host (Nomad's words).
    #[error("{0}")]
    UnknownUser(String),
    /// `cap_add` names capabilities outside the client's `allow_caps`.
    #[error("driver does not allow the following capabilities: {0}")]
    CapsNotAllowed(String),
    /// A path the sandbox needs is unusable.
    #[error("{0}")]
    Path(String),
}

/// `private` or `host`, for `pid_mode` and `ipc_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NsMode {
    /// A namespace of the task's own.
    Private,
    /// The host's.
    Host,
}

impl NsMode {
    /// `private`, `host`; empty is `default`.
    pub fn parse(key: &'static str, text: &str, default: NsMode) -> Result<NsMode, SandboxError> {
        match text {
            "" => Ok(default),
            "private" => Ok(NsMode::Private),
            "host" => Ok(NsMode::Host),
            other => Err(SandboxError::BadValue {
                key,
                reason: format!("must be \"private\" or \"host\", got {other:?}"),
            }),
        }
    }
}

/// The PID and IPC modes of a task: what its config asks, else the client's defaults. A
/// task may ask for the host's namespaces only where the client allows it
/// (`client.exec.allow_host_namespaces`, or a default of `host`): a task in the host's PID
/// namespace reaches other processes' roots through `/proc`.
pub fn ns_modes(
    cfg: &ExecTaskConfig,
    config: &ExecConfig,
) -> Result<(NsMode, NsMode), SandboxError> {
    let mode = |key: &'static str, asked: &str, default: &str| {
        let default = if default == "host" {
            NsMode::Host
        } else {
            NsMode::Private
        };
        let mode = NsMode::parse(key, asked, default)?;
        if mode == NsMode::Host && default != NsMode::Host && !config.allow_host_namespaces {
            return Err(SandboxError::BadValue {
                key,
                reason: "\"host\" is not allowed by this client \
                         (client.exec.allow_host_namespaces)"
                    .into(),
            });
        }
        Ok(mode)
    };
    Ok((
        mode("pid_mode", &cfg.pid_mode, &config.default_pid_mode)?,
        mode("ipc_mode", &cfg.ipc_mode, &config.default_ipc_mode)?,
    ))
}

/// An `exec` task's `config` block.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecTaskConfig {
    /// The program (required).
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// `pid_mode` as written (empty: the client's default).
    pub pid_mode: String,
    /// `ipc_mode` as written.
    pub ipc_mode: String,
    /// Capabilities to add.
    pub cap_add: Vec<String>,
    /// Capabilities to drop.
    pub cap_drop: Vec<String>,
    /// The working directory in the task's root (default `/`).
    pub work_dir: String,
}

fn strings(key: &'static str, v: &ConfigValue) -> Result<Vec<String>, SandboxError> {
    match v {
        ConfigValue::Null => Ok(Vec::new()),
        ConfigValue::List(items) => items
            .iter()
            .map(|i| match i {
                ConfigValue::String(s) => Ok(s.clone()),
                ConfigValue::Int(n) => Ok(n.to_string()),
                other => Err(SandboxError::BadValue {
                    key,
                    reason: format!("must be a list of strings, got {other:?}"),
                }),
            })
            .collect(),
        other => Err(SandboxError::BadValue {
            key,
            reason: format!("must be a list of strings, got {other:?}"),
        }),
    }
}

fn string(key: &'static str, v: &ConfigValue) -> Result<String, SandboxError> {
    match v {
        ConfigValue::Null => Ok(String::new()),
        ConfigValue::String(s) => Ok(s.clone()),
        other => Err(SandboxError::BadValue {
            key,
            reason: format!("must be a string, got {other:?}"),
        }),
    }
}

impl ExecTaskConfig {
    /// Read a task's `config`: unknown keys refused by name, `command` required.
    pub fn parse(config: &BTreeMap<String, ConfigValue>) -> Result<ExecTaskConfig, SandboxError> {
        let mut c = ExecTaskConfig::default();
        for (key, value) in config {
            match key.as_str() {
                "command" => c.command = string("command", value)?,
                "args" => c.args = strings("args", value)?,
                "pid_mode" => c.pid_mode = string("pid_mode", value)?,
                "ipc_mode" => c.ipc_mode = string("ipc_mode", value)?,
                "cap_add" => c.cap_add = strings("cap_add", value)?,
                "cap_drop" => c.cap_drop = strings("cap_drop", value)?,
                "work_dir" => c.work_dir = string("work_dir", value)?,
                other => return Err(SandboxError::UnknownKey(other.to_string())),
            }
        }
        if c.command.is_empty() {
            return Err(SandboxError::BadValue {
                key: "command",
                reason: "is required".into(),
            });
        }
        if !c.work_dir.is_empty() && !c.work_dir.starts_with('/') {
            return Err(SandboxError::BadValue {
                key: "work_dir",
                reason: format!("must be an absolute path, got {:?}", c.work_dir),
            });
        }
        Ok(c)
    }
}

/// A set of capability names as a bit set; `all` is every capability.
fn cap_set(key: &'static str, names: &[String]) -> Result<u64, SandboxError> {
    let mut set = 0u64;
    for name in names {
        if name.eq_ignore_ascii_case("all") {
            set |= (1u64 << CAPABILITIES.len()) - 1;
            continue;
        }
        let bit = capability(name).ok_or_else(|| SandboxError::BadValue {
            key,
            reason: format!("unknown capability {name:?}"),
        })?;
        set |= 1 << bit;
    }
    Ok(set)
}

fn cap_names(set: u64) -> Vec<&'static str> {
    CAPABILITIES
        .iter()
        .enumerate()
        .filter(|(i, _)| set & (1 << i) != 0)
        .map(|(_, c)| *c)
        .collect()
}

/// The capabilities a task runs with (Nomad's rule): the defaults the client allows, less
/// `cap_drop`, plus `cap_add`, which must lie within `allow_caps`.
pub fn task_caps(
    allow_caps: &[String],
    cap_add: &[String],
    cap_drop: &[String],
) -> Result<u64, SandboxError> {
    let allowed = cap_set("allow_caps", allow_caps)?;
    let defaults = cap_set(
        "allow_caps",
        &DEFAULT_CAPS
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>(),
    )?;
    let add = cap_set("cap_add", cap_add)?;
    let drop = cap_set("cap_drop", cap_drop)?;
    let refused = add & !allowed;
    if refused != 0 {
        return Err(SandboxError::CapsNotAllowed(cap_names(refused).join(", ")));
    }
    Ok(((defaults & allowed) & !drop) | add)
}

/// What a task's sandbox is made of.
#[derive(Debug, Clone)]
pub struct SandboxSpec<'a> {
    /// An empty, root-owned directory of the host: the task's root is a tmpfs mounted on it
    /// inside the task's mount namespace (so one directory serves every task).
    pub stage: &'a Path,
    /// Host paths and where the task sees them, read-only (`client.chroot_env`).
    pub chroot_env: &'a BTreeMap<String, String>,
    /// The allocation's shared directory (`/alloc`).
    pub alloc_dir: &'a Path,
    /// The task's directory (`local`, `secrets`, `tmp` under it).
    pub task_dir: &'a Path,
    /// Host volumes.
    pub mounts: &'a [HostMount],
    /// The task's own PID namespace.
    pub pid: NsMode,
    /// The task's own IPC namespace.
    pub ipc: NsMode,
    /// The task's working directory in its root.
    pub work_dir: &'a str,
    /// `pivot_root` (else a move mount and `chroot`, Nomad's `no_pivot_root`).
    pub pivot_root: bool,
    /// The task's cgroup's `cgroup.procs` files.
    pub cgroup_procs: Vec<PathBuf>,
    /// Its capabilities.
    pub caps: u64,
    /// Its account.
    pub account: Account,
    /// Files bound over the root's own (its network's `/etc/resolv.conf` and `/etc/hosts`).
    pub files: &'a [BoundFile],
    /// The hostname of its UTS namespace (else the host's).
    pub hostname: Option<&'a str>,
}

/// A host file bound over one of the root's: `name` in the host directory `parent` (opened
/// without following a link when the task starts), seen at `inside`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundFile {
    /// The host directory holding it.
    pub parent: PathBuf,
    /// Its name there.
    pub name: String,
    /// Where the task sees it (a link there is followed inside the root).
    pub inside: &'static str,
    /// Bound read-only.
    pub read_only: bool,
}

/// One step of building a root, prepared before the fork.
#[derive(Debug)]
enum Step {
    Mkdir(CString, libc::mode_t),
    Touch(CString),
    Symlink {
        target: CString,
        link: CString,
    },
    Mount {
        source: Option<CString>,
        target: CString,
        fstype: Option<CString>,
        flags: libc::c_ulong,
        data: Option<CString>,
        /// A target the kernel may not have (`/proc/sysrq-trigger`): skipped if missing.
        optional: bool,
    },
    /// Bind the directory (or, unless `dir`, the regular file) `name` of `parent` at
    /// `target`, opened in the child without following a link at `name` and mounted
    /// through its descriptor (`/proc/self/fd/N`).
    BindChild {
        parent: CString,
        name: CString,
        target: CString,
        dir: bool,
    },
    /// Set and clear mount attributes (`MOUNT_ATTR_*`) and set the propagation
    /// (`MS_PRIVATE` or `MS_SLAVE`) of a mount and every mount under it; where the kernel
    /// lacks or refuses `mount_setattr`, a remount of the top one with `fallback` flags.
    Setattr {
        target: CString,
        set: u64,
        clear: u64,
        propagation: u64,
        fallback: libc::c_ulong,
        optional: bool,
    },
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const AT_RECURSIVE: libc::c_int = 0x8000;
const PRIVATE: u64 = libc::MS_PRIVATE;
const SLAVE: u64 = libc::MS_SLAVE;

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// A sandbox ready to be entered between `fork` and `exec`.
#[derive(Debug)]
pub struct Plan {
    /// Start a session of its own (a launch: no terminal of the client's reaches the task).
    new_session: bool,
    cgroup_procs: Vec<CString>,
    unshare: libc::c_int,
    /// Namespaces to join (`alloc exec`): open descriptors and their types.
    join: Vec<(std::os::fd::OwnedFd, libc::c_int)>,
    stage: Option<CString>,
    steps: Vec<Step>,
    pivot_root: bool,
    work_dir: CString,
    caps: u64,
    uid: libc::uid_t,
    gid: libc::gid_t,
    groups: Vec<libc::gid_t>,
    /// The hostname set in its new UTS namespace.
    hostname: Option<CString>,
}

fn cstr(path: &Path) -> Result<CString, SandboxError> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| SandboxError::Path(format!("{} holds a NUL byte", path.display())))
}

/// `path` made absolute, `.` and `..` resolved by name (`..` of `/` is `/`).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// `path` (absolute, normalized) below `root`.
fn under(root: &Path, path: &str) -> Result<PathBuf, SandboxError> {
    let mut out = root.to_path_buf();
    for c in Path::new(path).components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => out.push(n),
            Component::ParentDir | Component::Prefix(_) => {
                return Err(SandboxError::Path(format!(
                    "{path:?} must not climb with \"..\""
                )))
            }
        }
    }
    Ok(out)
}

/// The builder of a root: the mount points it made in the tmpfs, and what is a bind of
/// the host (under which nothing is made).
struct RootBuilder {
    stage: PathBuf,
    made: Vec<PathBuf>,
    binds: Vec<(PathBuf, PathBuf)>,
    steps: Vec<Step>,
    /// Attributes set once every mount is made, parents first: (target, attributes to
    /// set, to clear, propagation, optional).
    finish: Vec<(CString, u64, u64, u64, bool)>,
    /// The next bind is a volume mounted `host-to-task` (slave propagation).
    host_to_task: bool,
}

impl RootBuilder {
    /// The innermost host bind `target` (a path under the stage) lies in: where it is
    /// seen, and the host path it shows.
    fn bind_of(&self, target: &Path) -> Option<(PathBuf, PathBuf)> {
        self.binds
            .iter()
            .filter(|(inside, _)| target.starts_with(inside))
            .max_by_key(|(inside, _)| inside.as_os_str().len())
            .cloned()
    }

    /// Make `rel` (a path in the root) as a directory or an empty file, its parents as
    /// directories: in the tmpfs only. A point inside a host bind must exist there already,
    /// as what it must be, with no symbolic link on the way (checked now, against the host
    /// path the bind shows).
    fn point(&mut self, rel: &str, dir: bool) -> Result<CString, SandboxError> {
        let target = under(&self.stage, rel)?;
        if let Some((inside, host)) = self.bind_of(&target) {
            let mut at = host;
            for c in target
                .strip_prefix(&inside)
                .unwrap_or(Path::new(""))
                .components()
            {
                at.push(c);
                let meta = std::fs::symlink_metadata(&at).map_err(|e| {
                    SandboxError::Path(format!(
                        "mount point {rel:?} is not in the task's root: {}: {e}",
                        at.display()
                    ))
                })?;
                if meta.file_type().is_symlink() {
                    return Err(SandboxError::Path(format!(
                        "mount point {rel:?} passes through the symbolic link {}",
                        at.display()
                    )));
                }
            }
            let is_dir = std::fs::symlink_metadata(&at).is_ok_and(|m| m.is_dir());
            if is_dir != dir {
                return Err(SandboxError::Path(format!(
                    "mount point {rel:?} must be a {}",
                    if dir { "directory" } else { "file" }
                )));
            }
            return cstr(&target);
        }
        let mut at = self.stage.clone();
        let rest: Vec<_> = target
            .strip_prefix(&self.stage)
            .unwrap_or(Path::new(""))
            .components()
            .collect();
        for (i, c) in rest.iter().enumerate() {
            at.push(c);
            if self.made.contains(&at) {
                continue;
            }
            self.made.push(at.clone());
            if i + 1 < rest.len() || dir {
                self.steps.push(Step::Mkdir(cstr(&at)?, 0o755));
            } else {
                self.steps.push(Step::Touch(cstr(&at)?));
            }
        }
        cstr(&target)
    }

    fn mount(
        &mut self,
        source: Option<&str>,
        target: CString,
        fstype: Option<&str>,
        flags: libc::c_ulong,
        data: Option<&str>,
    ) {
        let c = |s: &str| CString::new(s).expect("no NUL in a constant");
        self.steps.push(Step::Mount {
            source: source.map(c),
            target,
            fstype: fstype.map(c),
            flags,
            data: data.map(c),
            optional: false,
        });
    }

    /// Bind `host` at `rel`: read-only (and without devices) when `read_only`; else
    /// without set-id programs and devices, so a node a task makes with `CAP_MKNOD` opens
    /// nothing.
    fn bind(&mut self, host: &Path, rel: &str, read_only: bool) -> Result<(), SandboxError> {
        let meta = std::fs::metadata(host)
            .map_err(|e| SandboxError::Path(format!("{}: {e}", host.display())))?;
        self.bind_source(cstr(host)?, host, meta.is_dir(), rel, read_only)
    }

    /// Bind the directory `name` of `parent` (a directory the task can write in, so its
    /// entries may be swapped for symbolic links): checked now, and opened again in the
    /// child (a descriptor of the client's mount namespace cannot be bound in the task's)
    /// without following a link, then mounted through its descriptor.
    fn bind_child(
        &mut self,
        parent: &Path,
        name: &str,
        rel: &str,
        read_only: bool,
    ) -> Result<(), SandboxError> {
        let path = parent.join(name);
        let meta = std::fs::symlink_metadata(&path)
            .map_err(|e| SandboxError::Path(format!("{}: {e}", path.display())))?;
        if !meta.is_dir() {
            return Err(SandboxError::Path(format!(
                "{} is not a directory (a symbolic link?)",
                path.display()
            )));
        }
        let target = self.point(rel, true)?;
        self.steps.push(Step::BindChild {
            parent: cstr(parent)?,
            name: CString::new(name).expect("a constant name"),
            target: target.clone(),
            dir: true,
        });
        self.finish_bind(target, &path, rel, read_only)
    }

    /// Bind `file`'s host file over the root's file at `file.inside`, following a link
    /// there as the task would see it (`/etc/resolv.conf` is often one).
    fn bind_file(&mut self, file: &BoundFile) -> Result<(), SandboxError> {
        let path = file.parent.join(&file.name);
        let meta = std::fs::symlink_metadata(&path)
            .map_err(|e| SandboxError::Path(format!("{}: {e}", path.display())))?;
        if !meta.is_file() {
            return Err(SandboxError::Path(format!(
                "{} is not a regular file",
                path.display()
            )));
        }
        let rel = self.resolve_in_root(file.inside)?;
        let target = self.point(&rel, false)?;
        self.steps.push(Step::BindChild {
            parent: cstr(&file.parent)?,
            name: CString::new(file.name.as_str())
                .map_err(|_| SandboxError::Path(format!("{:?} holds a NUL byte", file.name)))?,
            target: target.clone(),
            dir: false,
        });
        self.finish_bind(target, &path, &rel, file.read_only)
    }

    /// `rel` with a symbolic link at its end followed as the root would follow it (what a
    /// bind shows is the host's, looked at now), up to eight links.
    fn resolve_in_root(&self, rel: &str) -> Result<String, SandboxError> {
        let mut path = normalize(Path::new(rel));
        for _ in 0..8 {
            let target = under(&self.stage, &path.to_string_lossy())?;
            let Some(host) = self.bind_of(&target).map(|(inside, host)| {
                host.join(target.strip_prefix(inside).unwrap_or(Path::new("")))
            }) else {
                // Made in the root's own tmpfs: no link there.
                return Ok(path.to_string_lossy().into_owned());
            };
            match std::fs::read_link(&host) {
                Ok(link) => {
                    let base = path.parent().unwrap_or(Path::new("/")).to_path_buf();
                    path = normalize(&base.join(link));
                }
                Err(_) => return Ok(path.to_string_lossy().into_owned()),
            }
        }
        Err(SandboxError::Path(format!(
            "{rel:?} passes through too many symbolic links"
        )))
    }

    fn bind_source(
        &mut self,
        source: CString,
        host: &Path,
        is_dir: bool,
        rel: &str,
        read_only: bool,
    ) -> Result<(), SandboxError> {
        let target = self.point(rel, is_dir)?;
        self.steps.push(Step::Mount {
            source: Some(source),
            target: target.clone(),
            fstype: None,
            flags: libc::MS_BIND | libc::MS_REC,
            data: None,
            optional: false,
        });
        self.finish_bind(target, host, rel, read_only)
    }

    fn finish_bind(
        &mut self,
        target: CString,
        host: &Path,
        rel: &str,
        read_only: bool,
    ) -> Result<(), SandboxError> {
        // A writable mount nested in a read-only one is made writable again after it.
        let (set, clear) = if read_only {
            (MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV, 0)
        } else {
            (MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, MOUNT_ATTR_RDONLY)
        };
        // Private, but for a volume that asks to see the host's later mounts under it.
        let propagation = if std::mem::take(&mut self.host_to_task) {
            SLAVE
        } else {
            PRIVATE
        };
        self.finish.push((target, set, clear, propagation, false));
        self.binds
            .push((under(&self.stage, rel)?, host.to_path_buf()));
        Ok(())
    }
}

/// The plan that builds `spec`'s root and enters it. Host paths are checked now: a missing
/// `chroot_env` source is skipped, as Nomad skips it.
pub fn plan(spec: &SandboxSpec<'_>) -> Result<Plan, SandboxError> {
    let mut b = RootBuilder {
        stage: spec.stage.to_path_buf(),
        made: vec![spec.stage.to_path_buf()],
        binds: Vec::new(),
        steps: Vec::new(),
        finish: Vec::new(),
        host_to_task: false,
    };
    let nosuid_nodev = libc::MS_NOSUID | libc::MS_NODEV;
    // The root itself: a small tmpfs holding the mount points.
    let stage = cstr(spec.stage)?;
    b.mount(
        Some("tmpfs"),
        stage.clone(),
        Some("tmpfs"),
        nosuid_nodev,
        Some("mode=755,size=1m"),
    );
    // Parents before children, so a nested entry lands inside its parent's bind.
    let mut env: Vec<(&String, &String)> = spec.chroot_env.iter().collect();
    env.sort_by(|a, b| a.1.cmp(b.1));
    for (host, inside) in env {
        if std::fs::metadata(host).is_err() {
            continue;
        }
        b.bind(Path::new(host), inside, true)?;
    }
    // The allocation's and the task's directories are the client's (in a 0755 directory);
    // what is in them, the task may have replaced.
    use crate::client::allocdir::{LOCAL_DIR, LOGS_DIR, SECRETS_DIR, TMP_DIR};
    b.bind(spec.alloc_dir, "/alloc", false)?;
    b.bind_child(spec.alloc_dir, LOGS_DIR, "/alloc/logs", true)?;
    b.bind_child(spec.task_dir, LOCAL_DIR, "/local", false)?;
    b.bind_child(spec.task_dir, SECRETS_DIR, "/secrets", false)?;
    b.bind_child(spec.task_dir, TMP_DIR, "/tmp", false)?;
    for m in spec.mounts {
        // Nothing relabels a bind here: a label asked for is refused, not dropped.
        if !m.selinux_label.is_empty() {
            return Err(SandboxError::BadValue {
                key: "volume_mount selinux_label",
                reason: format!(
                    "{:?} is not supported by the exec driver (only docker binds are labelled)",
                    m.selinux_label
                ),
            });
        }
        // `bidirectional` cannot reach the host from the task's private root: it sees the
        // host's mounts as `host-to-task` does.
        b.host_to_task = m.propagation_mode != "private";
        b.bind(Path::new(&m.host_path), &m.destination, m.read_only)?;
    }
    for file in spec.files {
        b.bind_file(file)?;
    }
    // /proc of the task's PID namespace, its sensitive parts hidden or read-only.
    let proc_dir = b.point("/proc", true)?;
    b.mount(
        Some("proc"),
        proc_dir,
        Some("proc"),
        nosuid_nodev | libc::MS_NOEXEC,
        None,
    );
    for ro in ["/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"] {
        let t = cstr(&under(spec.stage, ro)?)?;
        b.steps.push(Step::Mount {
            source: Some(t.clone()),
            target: t.clone(),
            fstype: None,
            flags: libc::MS_BIND | libc::MS_REC,
            data: None,
            optional: true,
        });
        b.finish.push((t, MOUNT_ATTR_RDONLY, 0, PRIVATE, true));
    }
    // /dev: a tmpfs with the harmless devices bound from the host, a private devpts,
    // shared memory.
    let dev = b.point("/dev", true)?;
    b.mount(
        Some("tmpfs"),
        dev,
        Some("tmpfs"),
        // No device works from the tmpfs itself: the harmless ones are binds of their own.
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_STRICTATIME,
        Some("mode=755,size=65536k"),
    );
    // The devices are made in the new tmpfs, so the builder's record of what it made must
    // not think them made already.
    for d in ["null", "zero", "full", "random", "urandom", "tty"] {
        let host = PathBuf::from("/dev").join(d);
        if host.exists() {
            let t = cstr(&under(spec.stage, &format!("/dev/{d}"))?)?;
            b.steps.push(Step::Touch(t.clone()));
            b.steps.push(Step::Mount {
                source: Some(cstr(&host)?),
                target: t,
                fstype: None,
                flags: libc::MS_BIND,
                data: None,
                optional: false,
            });
        }
    }
    // A private devpts, shared memory, and POSIX message queues of its own IPC namespace.
    let mut dev_mounts = vec![
        (
            "/dev/pts",
            0o755,
            "devpts",
            "devpts",
            libc::MS_NOSUID | libc::MS_NOEXEC,
            Some("newinstance,ptmxmode=0666,mode=0620,gid=5"),
        ),
        (
            "/dev/shm",
            0o1777,
            "shm",
            "tmpfs",
            nosuid_nodev | libc::MS_NOEXEC,
            Some("mode=1777,size=65536k"),
        ),
    ];
    if spec.ipc == NsMode::Private {
        dev_mounts.push((
            "/dev/mqueue",
            0o755,
            "mqueue",
            "mqueue",
            nosuid_nodev | libc::MS_NOEXEC,
            None,
        ));
    }
    for (path, mode, source, fstype, flags, data) in dev_mounts {
        let target = cstr(&under(spec.stage, path)?)?;
        b.steps.push(Step::Mkdir(target.clone(), mode));
        b.mount(Some(source), target, Some(fstype), flags, data);
    }
    for (link, target) in [
        ("/dev/ptmx", "pts/ptmx"),
        ("/dev/fd", "/proc/self/fd"),
        ("/dev/stdin", "/proc/self/fd/0"),
        ("/dev/stdout", "/proc/self/fd/1"),
        ("/dev/stderr", "/proc/self/fd/2"),
    ] {
        b.steps.push(Step::Symlink {
            target: CString::new(target).expect("constant"),
            link: cstr(&under(spec.stage, link)?)?,
        });
    }
    // /sys, read-only.
    let sys = b.point("/sys", true)?;
    b.mount(
        Some("sysfs"),
        sys,
        Some("sysfs"),
        libc::MS_RDONLY | nosuid_nodev | libc::MS_NOEXEC,
        None,
    );
    // Attributes last, so no later step writes under a read-only mount; parents first, so
    // a nested mount's own attributes win.
    let finish = std::mem::take(&mut b.finish);
    for (target, set, clear, propagation, optional) in finish {
        let mut fallback = libc::MS_BIND | libc::MS_REMOUNT;
        for (attr, flag) in [
            (MOUNT_ATTR_RDONLY, libc::MS_RDONLY),
            (MOUNT_ATTR_NOSUID, libc::MS_NOSUID),
            (MOUNT_ATTR_NODEV, libc::MS_NODEV),
        ] {
            if set & attr != 0 {
                fallback |= flag;
            }
        }
        b.steps.push(Step::Setattr {
            target,
            set,
            clear,
            propagation,
            fallback,
            optional,
        });
    }
    let mut unshare = libc::CLONE_NEWNS | libc::CLONE_NEWUTS;
    if spec.pid == NsMode::Private {
        unshare |= libc::CLONE_NEWPID;
    }
    if spec.ipc == NsMode::Private {
        unshare |= libc::CLONE_NEWIPC;
    }
    Ok(Plan {
        new_session: true,
        cgroup_procs: spec
            .cgroup_procs
            .iter()
            .map(|p| cstr(p))
            .collect::<Result<_, _>>()?,
        unshare,
        join: Vec::new(),
        stage: Some(stage),
        steps: b.steps,
        pivot_root: spec.pivot_root,
        work_dir: cstr(Path::new(if spec.work_dir.is_empty() {
            "/"
        } else {
            spec.work_dir
        }))?,
        caps: spec.caps & kernel_caps(),
        uid: spec.account.uid,
        gid: spec.account.gid,
        groups: spec.account.groups.clone(),
        hostname: spec
            .hostname
            .map(|h| {
                CString::new(h)
                    .map_err(|_| SandboxError::Path(format!("hostname {h:?} holds a NUL byte")))
            })
            .transpose()?,
    })
}

/// The plan that runs a command inside the running sandboxed task whose pid 1 is
/// `task_pid` (as the host numbers it): its cgroup, namespaces, root, user and
/// capabilities.
pub fn enter_plan(
    task_pid: i32,
    cgroup_procs: &[PathBuf],
    work_dir: &str,
    caps: u64,
    account: &Account,
) -> Result<Plan, SandboxError> {
    let mut join = Vec::new();
    // The mount namespace last: after it, /proc is the task's.
    for (name, kind) in [
        ("net", libc::CLONE_NEWNET),
        ("ipc", libc::CLONE_NEWIPC),
        ("uts", libc::CLONE_NEWUTS),
        ("pid", libc::CLONE_NEWPID),
        ("mnt", libc::CLONE_NEWNS),
    ] {
        let path = format!("/proc/{task_pid}/ns/{name}");
        let file = std::fs::File::open(&path)
            .map_err(|e| SandboxError::Path(format!("the task's namespace {path}: {e}")))?;
        join.push((std::os::fd::OwnedFd::from(file), kind));
    }
    Ok(Plan {
        new_session: false,
        cgroup_procs: cgroup_procs
            .iter()
            .map(|p| cstr(p))
            .collect::<Result<_, _>>()?,
        unshare: 0,
        join,
        stage: None,
        steps: Vec::new(),
        pivot_root: false,
        work_dir: cstr(Path::new(if work_dir.is_empty() { "/" } else { work_dir }))?,
        caps: caps & kernel_caps(),
        uid: account.uid,
        gid: account.gid,
        groups: account.groups.clone(),
        hostname: None,
    })
}

/// The account a task runs as: its `user`, `nobody` when none is set; refused when it is
/// on the client's deny list by name, or is the same uid as an account there (`"0"` is
/// `root`).
pub fn task_account(user: &str, config: &ExecConfig) -> Result<Account, SandboxError> {
    let user = if user.is_empty() { "nobody" } else { user };
    let account =
        crate::client::users::lookup(user).map_err(|e| SandboxError::UnknownUser(e.to_string()))?;
    let denied = config.user_denylist.iter().any(|d| {
        d == user
            || *d == account.name
            || crate::client::users::lookup(d).is_ok_and(|a| a.uid == account.uid)
    });
    if denied {
        return Err(SandboxError::UserDenied(user.to_string()));
    }
    Ok(account)
}

/// The capabilities this kernel has, as a bit set (`/proc/sys/kernel/cap_last_cap`): a
/// newer one (`bpf`, `perfmon`) asked of an older kernel is left out, as Nomad leaves it.
pub fn kernel_caps() -> u64 {
    let last: u32 = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(CAPABILITIES.len() as u32 - 1)
        .min(63);
    if last == 63 {
        u64::MAX
    } else {
        (1u64 << (last + 1)) - 1
    }
}

/// Why the host cannot run sandboxed tasks, if it cannot: this client must be root, and
/// the kernel must have the namespaces.
pub fn host_problem() -> Option<String> {
    // SAFETY: geteuid has no effects.
    if unsafe { libc::geteuid() } != 0 {
        return Some("the exec driver must run as root".into());
    }
    for ns in ["mnt", "pid", "ipc", "uts"] {
        if !Path::new("/proc/self/ns").join(ns).exists() {
            return Some(format!("the kernel has no {ns} namespaces"));
        }
    }
    None
}

// ---- between fork and exec: system calls only ----

/// Write the step that failed and its errno to the task's standard error, then give the
/// error back.
fn failed(step: &[u8]) -> std::io::Error {
    let err = std::io::Error::last_os_error();
    let code = err.raw_os_error().unwrap_or(0);
    let mut digits = [0u8; 12];
    let len = decimal(code.unsigned_abs(), &mut digits);
    // SAFETY: write(2) of buffers this function owns.
    unsafe {
        let prefix = b"teamster exec: ";
        libc::write(2, prefix.as_ptr().cast(), prefix.len());
        libc::write(2, step.as_ptr().cast(), step.len());
        let errno = b" failed: errno ";
        libc::write(2, errno.as_ptr().cast(), errno.len());
        libc::write(2, digits.as_ptr().cast(), len);
        libc::write(2, b"\n".as_ptr().cast(), 1);
    }
    err
}

/// `/proc/self/fd/<fd>` with its NUL, in a buffer on the stack.
fn fd_path(fd: libc::c_int) -> [u8; 32] {
    let mut buf = [0u8; 32];
    let prefix = b"/proc/self/fd/";
    buf[..prefix.len()].copy_from_slice(prefix);
    decimal(fd.unsigned_abs(), &mut buf[prefix.len()..]);
    buf
}

/// `n` in decimal at the start of `out` (which must hold 10 bytes): how many bytes it
/// took. For code between `fork` and `exec`, where nothing may allocate.
pub fn decimal(mut n: u32, out: &mut [u8]) -> usize {
    let mut digits = [0u8; 10];
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        out[i] = digits[len - 1 - i];
    }
    len
}

/// Write `0` to each file: moves this process into the cgroup. For a `pre_exec` hook: only
/// `open`, `write` and `close`.
pub fn join_cgroup(files: &[CString]) -> std::io::Result<()> {
    for f in files {
        // SAFETY: open/write/close on a path built before the fork.
        unsafe {
            let fd = libc::open(f.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(failed(b"joining the task's cgroup"));
            }
            let ok = libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
            libc::close(fd);
            if !ok {
                return Err(failed(b"joining the task's cgroup"));
            }
        }
    }
    Ok(())
}

impl Plan {
    /// The task joins the network namespace open at `fd` too (its allocation's, in bridge
    /// mode), before it makes its own namespaces.
    pub fn join_network(&mut self, fd: std::os::fd::OwnedFd) {
        self.join.insert(0, (fd, libc::CLONE_NEWNET));
    }

    /// Enter the sandbox: called in the child the client spawned, between `fork` and
    /// `exec`. This process stays behind as the supervisor and never returns; the task,
    /// forked from it, returns `Ok` to `exec` its command.
    ///
    /// # Safety
    /// Only in a child between `fork` and `exec` (a `pre_exec` hook): it forks, and the
    /// supervisor leaves with `_exit`.
    pub unsafe fn enter(&self) -> std::io::Result<()> {
        // Leader of its own session and process group (whose id, its pid, signals address).
        if self.new_session && libc::setsid() < 0 {
            return Err(failed(b"setsid"));
        }
        join_cgroup(&self.cgroup_procs)?;
        for (fd, kind) in &self.join {
            use std::os::fd::AsRawFd;
            if libc::setns(fd.as_raw_fd(), *kind) != 0 {
                return Err(failed(b"joining the task's namespaces"));
            }
        }
        if self.unshare != 0 && libc::unshare(self.unshare) != 0 {
            return Err(failed(b"unshare"));
        }
        if let Some(name) = &self.hostname {
            if libc::sethostname(name.as_ptr(), name.as_bytes().len()) != 0 {
                return Err(failed(b"sethostname"));
            }
        }
        // Signals blocked across the fork: the supervisor keeps them blocked (the client's
        // handlers, inherited, must never run in it), the task unblocks them.
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut before: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_BLOCK, &all, &mut before);
        // A raw clone: glibc's fork handlers take locks a forked child may not hold.
        let pid = libc::syscall(
            libc::SYS_clone,
            libc::SIGCHLD as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        ) as libc::pid_t;
        if pid < 0 {
            return Err(failed(b"fork"));
        }
        if pid > 0 {
            supervise(pid);
        }
        libc::sigprocmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
        // The task starts from the kernel's OOM score, not the supervisor's or the agent's.
        let fd = libc::open(
            c"/proc/self/oom_score_adj".as_ptr(),
            libc::O_WRONLY | libc::O_CLOEXEC,
        );
        if fd >= 0 {
            libc::write(fd, b"0".as_ptr().cast(), 1);
            libc::close(fd);
        }
        self.build_root()?;
        if libc::chdir(self.work_dir.as_ptr()) != 0 {
            return Err(failed(b"changing to work_dir"));
        }
        self.become_user()?;
        // Last: a change of credentials clears it.
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
            return Err(failed(b"parent-death signal"));
        }
        Ok(())
    }

    unsafe fn build_root(&self) -> std::io::Result<()> {
        let Some(stage) = &self.stage else {
            return Ok(());
        };
        // Nothing mounted here reaches the host; the host's unmounts still reach here.
        if libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_SLAVE,
            std::ptr::null(),
        ) != 0
        {
            return Err(failed(b"making / a slave mount"));
        }
        let opt = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        for step in &self.steps {
            match step {
                Step::Mkdir(path, mode) => {
                    if libc::mkdir(path.as_ptr(), *mode) != 0
                        && *libc::__errno_location() != libc::EEXIST
                    {
                        return Err(failed(path.as_bytes()));
                    }
                    // The umask must not narrow /dev/shm's sticky 1777.
                    libc::chmod(path.as_ptr(), *mode);
                }
                Step::Touch(path) => {
                    let fd = libc::open(
                        path.as_ptr(),
                        libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
                        0o644,
                    );
                    if fd < 0 {
                        return Err(failed(path.as_bytes()));
                    }
                    libc::close(fd);
                }
                Step::Symlink { target, link } => {
                    if libc::symlink(target.as_ptr(), link.as_ptr()) != 0 {
                        return Err(failed(link.as_bytes()));
                    }
                }
                Step::Mount {
                    source,
                    target,
                    fstype,
                    flags,
                    data,
                    optional,
                } => {
                    if libc::mount(
                        opt(source),
                        target.as_ptr(),
                        opt(fstype),
                        *flags,
                        opt(data).cast(),
                    ) != 0
                        && !(*optional && *libc::__errno_location() == libc::ENOENT)
                    {
                        return Err(failed(target.as_bytes()));
                    }
                }
                Step::BindChild {
                    parent,
                    name,
                    target,
                    dir: is_dir,
                } => {
                    let dir = libc::open(
                        parent.as_ptr(),
                        libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
                    );
                    if dir < 0 {
                        return Err(failed(parent.as_bytes()));
                    }
                    let kind = if *is_dir { libc::O_DIRECTORY } else { 0 };
                    let fd = libc::openat(
                        dir,
                        name.as_ptr(),
                        libc::O_PATH | libc::O_NOFOLLOW | kind | libc::O_CLOEXEC,
                    );
                    libc::close(dir);
                    if fd < 0 {
                        return Err(failed(name.as_bytes()));
                    }
                    if !*is_dir {
                        // A link in its place opens as the link: refused.
                        let mut st: libc::stat = std::mem::zeroed();
                        if libc::fstat(fd, &mut st) != 0
                            || st.st_mode & libc::S_IFMT != libc::S_IFREG
                        {
                            libc::close(fd);
                            return Err(failed(name.as_bytes()));
                        }
                    }
                    let source = fd_path(fd);
                    let r = libc::mount(
                        source.as_ptr().cast(),
                        target.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND | libc::MS_REC,
                        std::ptr::null(),
                    );
                    libc::close(fd);
                    if r != 0 {
                        return Err(failed(target.as_bytes()));
                    }
                }
                Step::Setattr {
                    target,
                    set,
                    clear,
                    propagation,
                    fallback,
                    optional,
                } => {
                    let attr = MountAttr {
                        attr_set: *set,
                        attr_clr: *clear,
                        propagation: *propagation,
                        userns_fd: 0,
                    };
                    let mut r = libc::syscall(
                        libc::SYS_mount_setattr,
                        libc::AT_FDCWD,
                        target.as_ptr(),
                        AT_RECURSIVE | libc::AT_SYMLINK_NOFOLLOW,
                        &attr as *const MountAttr,
                        std::mem::size_of::<MountAttr>(),
                    );
                    let errno = *libc::__errno_location();
                    if r != 0 && (errno == libc::ENOSYS || errno == libc::EPERM) {
                        r = libc::mount(
                            std::ptr::null(),
                            target.as_ptr(),
                            std::ptr::null(),
                            *fallback,
                            std::ptr::null(),
                        ) as libc::c_long;
                        if r == 0 {
                            r = libc::mount(
                                std::ptr::null(),
                                target.as_ptr(),
                                std::ptr::null(),
                                libc::MS_REC | *propagation as libc::c_ulong,
                                std::ptr::null(),
                            ) as libc::c_long;
                        }
                    }
                    if r != 0 && !(*optional && *libc::__errno_location() == libc::ENOENT) {
                        return Err(failed(target.as_bytes()));
                    }
                }
            }
        }
        if libc::chdir(stage.as_ptr()) != 0 {
            return Err(failed(b"entering the root"));
        }
        if self.pivot_root {
            // The old root is stacked under the new one, then detached.
            if libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) != 0 {
                return Err(failed(b"pivot_root"));
            }
            if libc::umount2(c".".as_ptr(), libc::MNT_DETACH) != 0 {
                return Err(failed(b"detaching the old root"));
            }
        } else {
            if libc::mount(
                c".".as_ptr(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_MOVE,
                std::ptr::null(),
            ) != 0
            {
                return Err(failed(b"moving the root"));
            }
            if libc::chroot(c".".as_ptr()) != 0 {
                return Err(failed(b"chroot"));
            }
        }
        if libc::chdir(c"/".as_ptr()) != 0 {
            return Err(failed(b"chdir /"));
        }
        Ok(())
    }

    /// Bound the capabilities, switch to the account, and hold the task's capabilities
    /// across the switch and the `exec` (ambient, for an account other than root).
    unsafe fn become_user(&self) -> std::io::Result<()> {
        let last = CAPABILITIES.len() as u32;
        for cap in 0..64u32 {
            if self.caps & (1 << cap) == 0 {
                let r = libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0);
                // Numbers past the kernel's last capability are refused: done.
                if r != 0 && (cap >= last || *libc::__errno_location() == libc::EINVAL) {
                    break;
                }
                if r != 0 {
                    return Err(failed(b"bounding the capabilities"));
                }
            }
        }
        if self.uid != 0 && libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0 {
            return Err(failed(b"keeping capabilities"));
        }
        if libc::setgroups(self.groups.len(), self.groups.as_ptr()) != 0
            || libc::setgid(self.gid) != 0
            || libc::setuid(self.uid) != 0
        {
            return Err(failed(b"switching to the task's user"));
        }
        let header = CapHeader {
            version: 0x2008_0522,
            pid: 0,
        };
        let low = self.caps as u32;
        let high = (self.caps >> 32) as u32;
        let data = [
            CapData {
                effective: low,
                permitted: low,
                inheritable: low,
            },
            CapData {
                effective: high,
                permitted: high,
                inheritable: high,
            },
        ];
        if libc::syscall(libc::SYS_capset, &header, data.as_ptr()) != 0 {
            return Err(failed(b"setting the capabilities"));
        }
        if self.uid != 0 {
            for cap in 0..last {
                if self.caps & (1 << cap) != 0
                    && libc::prctl(
                        libc::PR_CAP_AMBIENT,
                        libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
                        cap as libc::c_ulong,
                        0,
                        0,
                    ) != 0
                {
                    return Err(failed(b"raising the ambient capabilities"));
                }
            }
        }
        Ok(())
    }
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// The supervisor: every descriptor but the standard three closed (the spawner's pipe
/// among them, so the client's `spawn` returns once the task has `exec`ed), signals
/// blocked (they reach the task through the process group), out of the OOM killer's reach
/// and never dumped, the task waited for, and its end repeated: its exit code, or its
/// signal raised on itself.
///
/// # Safety
/// Only in the child between `fork` and `exec`.
unsafe fn supervise(task: libc::pid_t) -> ! {
    if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) != 0 {
        for fd in 3..4096 {
            libc::close(fd);
        }
    }
    // A fork of the client, holding its memory: never the OOM killer's pick in the task's
    // group (its copy-on-write pages count as its size), never dumped to a core file.
    let fd = libc::open(c"/proc/self/oom_score_adj".as_ptr(), libc::O_WRONLY);
    if fd >= 0 {
        libc::write(fd, b"-1000".as_ptr().cast(), 5);
        libc::close(fd);
    }
    libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    let no_core = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    libc::setrlimit(libc::RLIMIT_CORE, &no_core);
    let mut status = 0;
    loop {
        let r = libc::waitpid(task, &mut status, 0);
        if r == task {
            break;
        }
        if r < 0 && *libc::__errno_location() != libc::EINTR {
            libc::_exit(127);
        }
    }
    if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        libc::signal(sig, libc::SIG_DFL);
        let mut one: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut one);
        libc::sigaddset(&mut one, sig);
        libc::sigprocmask(libc::SIG_UNBLOCK, &one, std::ptr::null_mut());
        libc::kill(libc::getpid(), sig);
        libc::_exit(128 + sig);
    }
    libc::_exit(libc::WEXITSTATUS(status))
}

/// The task of the supervisor `pid`: its child, as `/proc` tells.
pub fn task_of(supervisor: i32) -> Option<i32> {
    crate::util::procfs::tree_of(supervisor)
        .into_iter()
        .find(|p| crate::util::procfs::parent_of(*p) == Some(supervisor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_keys_are_nomad_s_and_others_are_refused() {
        let mut c = BTreeMap::new();
        c.insert("command".to_string(), ConfigValue::from("/bin/sh"));
        c.insert(
            "args".to_string(),
            ConfigValue::List(vec!["-c".into(), "true".into()]),
        );
        c.insert("pid_mode".to_string(), "host".into());
        let parsed = ExecTaskConfig::parse(&c).unwrap();
        assert_eq!(parsed.args, vec!["-c", "true"]);
        assert_eq!(
            NsMode::parse("pid_mode", &parsed.pid_mode, NsMode::Private),
            Ok(NsMode::Host)
        );
        assert!(NsMode::parse("pid_mode", "shared", NsMode::Private).is_err());
        c.insert("image".to_string(), "x".into());
        assert_eq!(
            ExecTaskConfig::parse(&c).unwrap_err(),
            SandboxError::UnknownKey("image".into())
        );
        assert!(ExecTaskConfig::parse(&BTreeMap::new())
            .unwrap_err()
            .to_string()
            .contains("command: is required"));
    }

    #[test]
    fn host_namespaces_need_the_client_s_leave() {
        let mut cfg = ExecTaskConfig {
            command: "x".into(),
            ..ExecTaskConfig::default()
        };
        let mut config = ExecConfig::default();
        assert_eq!(
            ns_modes(&cfg, &config),
            Ok((NsMode::Private, NsMode::Private))
        );
        cfg.pid_mode = "host".into();
        let e = ns_modes(&cfg, &config).unwrap_err().to_string();
        assert!(
            e.contains("pid_mode") && e.contains("allow_host_namespaces"),
            "{e}"
        );
        config.allow_host_namespaces = true;
        assert_eq!(ns_modes(&cfg, &config), Ok((NsMode::Host, NsMode::Private)));
        config.allow_host_namespaces = false;
        config.default_ipc_mode = "host".into();
        cfg.pid_mode.clear();
        assert_eq!(ns_modes(&cfg, &config), Ok((NsMode::Private, NsMode::Host)));
    }

    #[test]
    fn capabilities_follow_nomad_s_rule() {
        let allow: Vec<String> = DEFAULT_CAPS.iter().map(|c| c.to_string()).collect();
        let defaults = task_caps(&allow, &[], &[]).unwrap();
        assert_eq!(cap_names(defaults).len(), DEFAULT_CAPS.len());
        let no_kill = task_caps(&allow, &[], &["KILL".into()]).unwrap();
        assert_eq!(no_kill, defaults & !(1 << capability("kill").unwrap()));
        assert_eq!(
            task_caps(&allow, &["net_raw".into(), "sys_admin".into()], &[]).unwrap_err(),
            SandboxError::CapsNotAllowed("net_raw, sys_admin".into())
        );
        let with_raw = [allow.clone(), vec!["net_raw".into()]].concat();
        let raw = task_caps(&with_raw, &["CAP_NET_RAW".into()], &["all".into()]).unwrap();
        assert_eq!(cap_names(raw), vec!["net_raw"]);
        assert_eq!(capability("bpf"), Some(39));
        assert!(task_caps(&allow, &["nope".into()], &[]).is_err());
    }

    #[test]
    fn the_user_defaults_to_nobody_and_the_denylist_holds_by_uid_too() {
        let config = ExecConfig::default();
        assert_eq!(task_account("", &config).unwrap().name, "nobody");
        for root in ["root", "0"] {
            assert_eq!(
                task_account(root, &config).unwrap_err().to_string(),
                format!("running as user {root:?} is disallowed")
            );
        }
        assert!(kernel_caps() & 1 != 0);
    }

    fn nobody() -> Account {
        Account {
            name: "nobody".into(),
            uid: 65534,
            gid: 65534,
            groups: vec![65534],
            home: PathBuf::new(),
        }
    }

    /// A stage, an allocation directory (with `logs`) and a task directory (with `local`,
    /// `secrets` and `tmp`) under `host`.
    fn dirs(host: &Path) -> (PathBuf, PathBuf, PathBuf) {
        let stage = host.join("stage");
        let alloc = host.join("alloc");
        let task = host.join("task");
        for d in [&stage, &alloc, &alloc.join("logs")] {
            std::fs::create_dir_all(d).unwrap();
        }
        for d in ["local", "secrets", "tmp"] {
            std::fs::create_dir_all(task.join(d)).unwrap();
        }
        (stage, alloc, task)
    }

    /// A spec of those directories for `nobody`, in private PID and IPC namespaces, with no
    /// volume, network file or hostname.
    fn spec<'a>(
        (stage, alloc, task): &'a (PathBuf, PathBuf, PathBuf),
        env: &'a BTreeMap<String, String>,
    ) -> SandboxSpec<'a> {
        SandboxSpec {
            stage,
            chroot_env: env,
            alloc_dir: alloc,
            task_dir: task,
            mounts: &[],
            pid: NsMode::Private,
            ipc: NsMode::Private,
            work_dir: "",
            pivot_root: true,
            cgroup_procs: Vec::new(),
            caps: 0,
            account: nobody(),
            files: &[],
            hostname: None,
        }
    }

    #[test]
    fn the_plan_binds_the_chroot_and_the_task_s_directories() {
        let host = tempfile::tempdir().unwrap();
        let tree = dirs(host.path());
        let (stage, _, task) = &tree;
        let env = BTreeMap::from([
            ("/bin".to_string(), "/bin".to_string()),
            ("/no/such/dir".to_string(), "/nope".to_string()),
        ]);
        let spec = SandboxSpec {
            ipc: NsMode::Host,
            ..spec(&tree, &env)
        };
        let p = plan(&spec).unwrap();
        let targets: Vec<String> = p
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Mount { target, .. } | Step::BindChild { target, .. } => Some(
                    target
                        .to_str()
                        .unwrap()
                        .trim_start_matches(stage.to_str().unwrap())
                        .to_string(),
                ),
                _ => None,
            })
            .collect();
        for wanted in [
            "",
            "/bin",
            "/alloc",
            "/alloc/logs",
            "/local",
            "/secrets",
            "/tmp",
            "/proc",
            "/dev",
            "/sys",
        ] {
            assert!(
                targets.contains(&wanted.to_string()),
                "{wanted} in {targets:?}"
            );
        }
        assert!(!targets.contains(&"/nope".to_string()));
        // IPC shared with the host: no mqueue of its own.
        assert!(!targets.contains(&"/dev/mqueue".to_string()));
        assert_eq!(p.unshare & libc::CLONE_NEWIPC, 0);
        assert_ne!(p.unshare & libc::CLONE_NEWPID, 0);
        assert_eq!(p.work_dir.to_str().unwrap(), "/");

        // What the task may have swapped for a link is opened again in the child without
        // following one; a link there now is refused before the fork.
        assert!(p.steps.iter().any(|s| matches!(s,
            Step::BindChild { name, .. } if name.to_str() == Ok("secrets"))));
        assert_eq!(&fd_path(123)[..18], b"/proc/self/fd/123\0");
        std::fs::remove_dir(task.join("tmp")).unwrap();
        std::os::unix::fs::symlink("/", task.join("tmp")).unwrap();
        let e = plan(&spec).unwrap_err().to_string();
        assert!(e.contains("not a directory"), "{e}");
        std::fs::remove_file(task.join("tmp")).unwrap();
        std::fs::create_dir(task.join("tmp")).unwrap();

        // A volume mounted inside a host bind must already be there, with no link on the way.
        std::os::unix::fs::symlink("/etc", task.join("local/evil")).unwrap();
        let mounts = [HostMount {
            host_path: host.path().to_str().unwrap().to_string(),
            destination: "/local/evil/x".into(),
            read_only: false,
            propagation_mode: "private".into(),
            selinux_label: String::new(),
        }];
        let spec = SandboxSpec {
            mounts: &mounts,
            ..spec
        };
        let e = plan(&spec).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        let labelled = [HostMount {
            destination: "/data".into(),
            selinux_label: "z".into(),
            ..mounts[0].clone()
        }];
        let e = plan(&SandboxSpec {
            mounts: &labelled,
            ..spec
        })
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "exec config volume_mount selinux_label: \"z\" is not supported by the exec \
             driver (only docker binds are labelled)"
        );
    }

    #[test]
    fn network_files_are_bound_where_the_root_s_links_lead_and_the_hostname_is_set() {
        let host = tempfile::tempdir().unwrap();
        let tree = dirs(host.path());
        let (stage, _, task) = &tree;
        let etc = host.path().join("etc");
        let run = host.path().join("run");
        for d in [&etc, &run.join("resolve")] {
            std::fs::create_dir_all(d).unwrap();
        }
        // The host's /etc/resolv.conf is a relative link into /run, /etc/hosts a file.
        std::fs::write(run.join("resolve/stub.conf"), "nameserver 127.0.0.53\n").unwrap();
        std::os::unix::fs::symlink("../run/resolve/stub.conf", etc.join("resolv.conf")).unwrap();
        std::fs::write(etc.join("hosts"), "127.0.0.1 localhost\n").unwrap();
        std::fs::write(task.join("resolv.conf"), "nameserver 192.0.2.1\n").unwrap();
        std::fs::write(host.path().join("hosts"), "10.0.0.9 web-0\n").unwrap();
        let env = BTreeMap::from([
            (etc.to_str().unwrap().to_string(), "/etc".to_string()),
            (run.to_str().unwrap().to_string(), "/run".to_string()),
        ]);
        let files = [
            BoundFile {
                parent: task.clone(),
                name: "resolv.conf".into(),
                inside: "/etc/resolv.conf",
                read_only: true,
            },
            BoundFile {
                parent: host.path().to_path_buf(),
                name: "hosts".into(),
                inside: "/etc/hosts",
                read_only: false,
            },
        ];
        let spec = SandboxSpec {
            files: &files,
            hostname: Some("web-0"),
            ..spec(&tree, &env)
        };
        let p = plan(&spec).unwrap();
        let bound: Vec<(String, String, bool)> = p
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::BindChild {
                    name, target, dir, ..
                } => Some((
                    name.to_str().unwrap().to_string(),
                    target
                        .to_str()
                        .unwrap()
                        .trim_start_matches(stage.to_str().unwrap())
                        .to_string(),
                    *dir,
                )),
                _ => None,
            })
            .filter(|(_, _, dir)| !dir)
            .collect();
        assert_eq!(
            bound,
            [
                ("resolv.conf".into(), "/run/resolve/stub.conf".into(), false),
                ("hosts".into(), "/etc/hosts".into(), false),
            ]
        );
        assert_eq!(
            p.hostname.as_deref().and_then(|h| h.to_str().ok()),
            Some("web-0")
        );
        // A link there now (a task swapped the file) is refused before the fork.
        std::fs::remove_file(task.join("resolv.conf")).unwrap();
        std::os::unix::fs::symlink("/etc/shadow", task.join("resolv.conf")).unwrap();
        let e = plan(&spec).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        // A link loop is refused.
        std::fs::remove_file(task.join("resolv.conf")).unwrap();
        std::fs::write(task.join("resolv.conf"), "").unwrap();
        std::fs::remove_file(etc.join("resolv.conf")).unwrap();
        std::os::unix::fs::symlink("resolv.conf", etc.join("resolv.conf")).unwrap();
        let e = plan(&spec).unwrap_err().to_string();
        assert!(e.contains("too many symbolic links"), "{e}");
    }
}
