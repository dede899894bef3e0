//! Task cgroups: one per task, under a `teamster` parent, in cgroup v1 (a group in each
//! controller's hierarchy) or v2 (one group in the unified hierarchy), as Nomad's
//! `cgroupslib` makes them:
//!
//! ```text
//!  v1  /sys/fs/cgroup/<controller>/teamster/<alloc id>.<task>     cpu cpuacct cpuset memory pids freezer
//!  v2  /sys/fs/cgroup/teamster.slice/<alloc id>.<task>.scope       +cpu +cpuset +memory +pids
//! ```
//!
//! A task's group carries its limits ([`Limits`]: CPU shares or weight from `cpu`, the
//! reserved cores as its cpuset, the memory limit from `memory_max` or `memory` and the
//! soft limit from `memory` when oversubscribed). The driver's child joins it between
//! `fork` and `exec` ([`TaskCgroup::procs_files`]), so every process the task ever starts is
//! in it: stopping a task kills the whole group ([`TaskCgroup::kill_all`]: no escapee from a
//! double fork), the kernel's OOM kills are counted in it ([`TaskCgroup::oom_kills`]), and
//! its usage is read from its files ([`TaskCgroup::sample`]).
//!
//! The figures' arithmetic (limits, the shares-to-weight map, the parsers of the kernel's
//! files) is pure and tested without a kernel; the rest reads and writes the hierarchy.
//! The files are written directly rather than through a crate: the child must join the
//! group with nothing but `open`/`write` between `fork` and `exec`, and the v1 layout
//! (only these six controllers, each group made before the child runs) is a few writes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::client::stats::ContainerSample;

/// Where cgroup hierarchies are mounted.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// The parent group of every task group (v1: under each controller).
pub const PARENT_V1: &str = "teamster";
/// The parent group of every task group under v2.
pub const PARENT_V2: &str = "teamster.slice";
/// The v1 controllers a task group is made in.
pub const V1_CONTROLLERS: [&str; 6] = ["cpu", "cpuacct", "cpuset", "memory", "pids", "freezer"];
/// The v2 controllers a task group needs.
const V2_CONTROLLERS: [&str; 3] = ["cpu", "memory", "pids"];
/// The lowest CPU shares the kernel takes (Docker's and Nomad's minimum).
pub const MIN_CPU_SHARES: u64 = 2;

/// Why a cgroup could not be made, used or found.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// No hierarchy this client can use: why.
    #[error("no usable cgroup hierarchy: {0}")]
    Unusable(String),
    /// A file of the hierarchy could not be read or written.
    #[error("cgroup {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The group's processes could not all be killed.
    #[error("cgroup {0}: processes remain after being killed")]
    Survivors(PathBuf),
}

fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> CgroupError + '_ {
    move |source| CgroupError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Which cgroup version this host runs, and where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Hierarchy {
    /// cgroup v1: one mount per controller under `root`.
    V1 {
        /// Usually `/sys/fs/cgroup`.
        root: PathBuf,
    },
    /// cgroup v2: the unified hierarchy at `root`.
    V2 {
        /// Usually `/sys/fs/cgroup`.
        root: PathBuf,
    },
}

impl Hierarchy {
    /// The hierarchy at [`CGROUP_ROOT`], if this process can make groups in it: v2 when
    /// the root is the unified hierarchy with the controllers a task needs, else v1 when
    /// every controller of [`V1_CONTROLLERS`] is mounted (a hybrid host's v2 hierarchy
    /// without controllers does not count). Making the `teamster` parent proves it
    /// writable.
    pub fn detect() -> Result<Hierarchy, CgroupError> {
        Hierarchy::detect_at(Path::new(CGROUP_ROOT))
    }

    /// [`Hierarchy::detect`] under another root.
    pub fn detect_at(root: &Path) -> Result<Hierarchy, CgroupError> {
        let unified = root.join("cgroup.controllers");
        let hierarchy = if let Ok(text) = std::fs::read_to_string(&unified) {
            let have: Vec<&str> = text.split_whitespace().collect();
            let missing: Vec<&str> = V2_CONTROLLERS
                .iter()
                .copied()
                .filter(|c| !have.contains(c))
                .collect();
            if !missing.is_empty() {
                return Err(CgroupError::Unusable(format!(
                    "cgroup v2 at {} lacks the controllers {}",
                    root.display(),
                    missing.join(", ")
                )));
            }
            Hierarchy::V2 {
                root: root.to_path_buf(),
            }
        } else {
            let missing: Vec<&str> = V1_CONTROLLERS
                .iter()
                .copied()
                .filter(|c| !root.join(c).join("cgroup.procs").exists())
                .collect();
            if !missing.is_empty() {
                return Err(CgroupError::Unusable(format!(
                    "cgroup v1 controllers not mounted under {}: {}",
                    root.display(),
                    missing.join(", ")
                )));
            }
            Hierarchy::V1 {
                root: root.to_path_buf(),
            }
        };
        hierarchy.make_parent()?;
        Ok(hierarchy)
    }

    /// `1` or `2`.
    pub fn version(&self) -> u8 {
        match self {
            Hierarchy::V1 { .. } => 1,
            Hierarchy::V2 { .. } => 2,
        }
    }

    /// Make the `teamster` parent (v1: in each controller, its cpuset copied from the
    /// root's; v2: with the controllers delegated to its children).
    fn make_parent(&self) -> Result<(), CgroupError> {
        match self {
            Hierarchy::V1 { root } => {
                for c in V1_CONTROLLERS {
                    let dir = root.join(c).join(PARENT_V1);
                    std::fs::create_dir_all(&dir).map_err(io_at(&dir))?;
                }
                inherit_cpuset(&root.join("cpuset").join(PARENT_V1))
            }
            Hierarchy::V2 { root } => {
                let parent = root.join(PARENT_V2);
                std::fs::create_dir_all(&parent).map_err(io_at(&parent))?;
                let wanted = delegated(root);
                for dir in [root.as_path(), parent.as_path()] {
                    let file = dir.join("cgroup.subtree_control");
                    write(&file, &wanted)?;
                }
                Ok(())
            }
        }
    }

    /// The group of task `task` of allocation `alloc_id` (not made yet).
    pub fn task_group(&self, alloc_id: &str, task: &str) -> TaskCgroup {
        let name = format!("{alloc_id}.{}", sanitize(task));
        match self {
            Hierarchy::V1 { root } => TaskCgroup {
                dirs: V1_CONTROLLERS
                    .iter()
                    .map(|c| root.join(c).join(PARENT_V1).join(&name))
                    .collect(),
                v2: false,
            },
            Hierarchy::V2 { root } => TaskCgroup {
                dirs: vec![root.join(PARENT_V2).join(format!("{name}.scope"))],
                v2: true,
            },
        }
    }
}

/// The `+controller` list a v2 parent delegates: the task's controllers and `cpuset` when
/// the root offers it.
fn delegated(root: &Path) -> String {
    let have = std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
    let mut wanted: Vec<&str> = V2_CONTROLLERS.to_vec();
    if have.split_whitespace().any(|c| c == "cpuset") {
        wanted.push("cpuset");
    }
    wanted
        .iter()
        .map(|c| format!("+{c}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A task name as a path component: no `/`, no leading dot.
fn sanitize(task: &str) -> String {
    task.chars()
        .map(|c| if c == '/' || c == '\0' { '_' } else { c })
        .collect::<String>()
        .trim_start_matches('.')
        .to_string()
}

/// A v1 cpuset group starts with no CPUs and no memory nodes: give it its parent's.
fn inherit_cpuset(dir: &Path) -> Result<(), CgroupError> {
    let Some(parent) = dir.parent() else {
        return Ok(());
    };
    for file in ["cpuset.cpus", "cpuset.mems"] {
        let mine = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
        if mine.trim().is_empty() {
            let theirs = std::fs::read_to_string(parent.join(file)).map_err(io_at(parent))?;
            write(&dir.join(file), theirs.trim())?;
        }
    }
    Ok(())
}

fn write(path: &Path, value: &str) -> Result<(), CgroupError> {
    std::fs::write(path, value).map_err(io_at(path))
}

/// A task's limits, as its group carries them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Limits {
    /// CPU shares (v1 `cpu.shares`; v2's `cpu.weight` is mapped from them).
    pub cpu_shares: u64,
    /// The hard memory limit in bytes (`None`: unlimited).
    pub memory_hard: Option<u64>,
    /// The soft limit (the guaranteed amount) in bytes, when oversubscribed.
    pub memory_soft: Option<u64>,
    /// The cores it runs on alone (`"0-1,4"`), when it reserves cores.
    pub cpuset: Option<String>,
}

impl Limits {
    /// The limits of a task given `cpu` MHz, `memory_mb`, `memory_max_mb` where it applies
    /// (0: `memory_mb` is the limit; [`teamster_storage::model::MEMORY_NO_LIMIT`]: none) and
    /// its reserved cores.
    pub fn of(cpu: u64, memory_mb: u64, memory_max_mb: u64, cpuset: Option<&str>) -> Limits {
        let (memory_hard, memory_soft) =
            teamster_storage::model::memory_limits(memory_mb, memory_max_mb);
        Limits {
            cpu_shares: cpu.max(MIN_CPU_SHARES),
            memory_hard,
            memory_soft,
            cpuset: cpuset.filter(|c| !c.is_empty()).map(str::to_string),
        }
    }
}

/// cgroup v2's `cpu.weight` for v1 `shares` (the map runc and Nomad use: 2 → 1,
/// 1024 → 100, 262144 → 10000, on a curve in log2 between).
pub fn cpu_weight(shares: u64) -> u64 {
    if shares <= MIN_CPU_SHARES {
        return 1;
    }
    if shares >= 262_144 {
        return 10_000;
    }
    let l = (shares as f64).log2();
    let exponent = (l * l + 125.0 * l) / 612.0 - 7.0 / 34.0;
    10f64.powf(exponent).ceil() as u64
}

/// One task's group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskCgroup {
    /// Its directory in each hierarchy (v1: one per controller, in [`V1_CONTROLLERS`]
    /// order; v2: one).
    pub dirs: Vec<PathBuf>,
    /// Whether it is a v2 group.
    #[serde(default)]
    pub v2: bool,
}

impl TaskCgroup {
    /// The group whose directories a task handle kept (`None`: it had none).
    pub fn from_dirs(dirs: Vec<PathBuf>) -> Option<TaskCgroup> {
        let v2 = dirs.len() == 1;
        (!dirs.is_empty()).then_some(TaskCgroup { dirs, v2 })
    }

    fn dir_of(&self, controller: &str) -> &Path {
        if self.v2 {
            return &self.dirs[0];
        }
        let i = V1_CONTROLLERS
            .iter()
            .position(|c| *c == controller)
            .unwrap_or(0);
        self.dirs.get(i).unwrap_or(&self.dirs[0])
    }

    /// Make the group with `limits`. A group of an earlier run of the task is emptied
    /// (its processes killed) and made again, so its counters start at zero.
    pub fn create(&self, limits: &Limits) -> Result<(), CgroupError> {
        if self.dirs.iter().any(|d| d.exists()) {
            self.destroy()?;
        }
        let made = self.make(limits);
        if made.is_err() {
            let _ = self.destroy();
        }
        made
    }

    fn make(&self, limits: &Limits) -> Result<(), CgroupError> {
        for dir in &self.dirs {
            std::fs::create_dir_all(dir).map_err(io_at(dir))?;
        }
        if self.v2 {
            let dir = &self.dirs[0];
            write(
                &dir.join("cpu.weight"),
                &cpu_weight(limits.cpu_shares).to_string(),
            )?;
            let max = limits
                .memory_hard
                .map_or_else(|| "max".to_string(), |b| b.to_string());
            write(&dir.join("memory.max"), &max)?;
            if let Some(soft) = limits.memory_soft {
                write(&dir.join("memory.low"), &soft.to_string())?;
            }
            if dir.join("memory.swap.max").exists() {
                // Best effort: swap accounting may be off.
                let _ = std::fs::write(dir.join("memory.swap.max"), "0");
            }
            if let Some(cpus) = &limits.cpuset {
                write(&dir.join("cpuset.cpus"), cpus)?;
            }
        } else {
            write(
                &self.dir_of("cpu").join("cpu.shares"),
                &limits.cpu_shares.to_string(),
            )?;
            let memory = self.dir_of("memory");
            if let Some(hard) = limits.memory_hard {
                write(&memory.join("memory.limit_in_bytes"), &hard.to_string())?;
            }
            if let Some(soft) = limits.memory_soft {
                write(
                    &memory.join("memory.soft_limit_in_bytes"),
                    &soft.to_string(),
                )?;
            }
            // Best effort, as Nomad: not every kernel lets it be set.
            let _ = std::fs::write(memory.join("memory.swappiness"), "0");
            let cpuset = self.dir_of("cpuset");
            match &limits.cpuset {
                Some(cpus) => {
                    write(&cpuset.join("cpuset.cpus"), cpus)?;
                    inherit_cpuset(cpuset)?;
                }
                None => inherit_cpuset(cpuset)?,
            }
        }
        Ok(())
    }

    /// The `cgroup.procs` file of each of the group's directories: writing `0` to them
    /// moves the writing process (and its future children) into the group.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// The processes in the group now.
    pub fn pids(&self) -> Vec<i32> {
        let file = self.dir_of("pids").join("cgroup.procs");
        parse_pids(&std::fs::read_to_string(file).unwrap_or_default())
    }

    /// Kill every process in the group, waiting until none is left (at most 3 seconds):
    /// frozen first, so none can fork while the others are killed (v2 with `cgroup.kill`:
    /// the kernel does it at once).
    pub fn kill_all(&self) -> Result<(), CgroupError> {
        if self.pids().is_empty() {
            return Ok(());
        }
        let kill_file = self.dirs[0].join("cgroup.kill");
        let kernel_kills = self.v2 && kill_file.exists();
        // A few seconds in all, however the freezer answers: the caller may be waiting.
        let deadline = std::time::Instant::now() + Duration::from_secs(3);
        while std::time::Instant::now() < deadline {
            if kernel_kills {
                write(&kill_file, "1")?;
            } else {
                // Frozen, none can fork while the others are killed; killed again on each
                // round, in case one was forking as the group froze.
                self.freeze(true, deadline)?;
                for pid in self.pids() {
                    // SAFETY: kill(2) has no memory effects.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
                self.freeze(false, deadline)?;
            }
            std::thread::sleep(Duration::from_millis(10));
            if self.pids().is_empty() {
                return Ok(());
            }
        }
        Err(CgroupError::Survivors(self.dirs[0].clone()))
    }

    fn freeze(&self, frozen: bool, deadline: std::time::Instant) -> Result<(), CgroupError> {
        // The file to write, and the file and line that say the group is frozen.
        let (file, value, state_file, done) = if self.v2 {
            let f = self.dirs[0].join("cgroup.freeze");
            let events = self.dirs[0].join("cgroup.events");
            (f, if frozen { "1" } else { "0" }, events, "frozen 1")
        } else {
            let f = self.dir_of("freezer").join("freezer.state");
            let v = if frozen { "FROZEN" } else { "THAWED" };
            (f.clone(), v, f, "FROZEN")
        };
        write(&file, value)?;
        if frozen {
            while std::time::Instant::now() < deadline {
                let state = std::fs::read_to_string(&state_file).unwrap_or_default();
                if state.lines().any(|l| l.trim() == done) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        Ok(())
    }

    /// How many processes of the group the kernel's OOM killer has killed.
    pub fn oom_kills(&self) -> u64 {
        let memory = self.dir_of("memory");
        let file = if self.v2 {
            memory.join("memory.events")
        } else {
            memory.join("memory.oom_control")
        };
        parse_key_values(&std::fs::read_to_string(file).unwrap_or_default())
            .find(|(k, _)| *k == "oom_kill")
            .map_or(0, |(_, v)| v)
    }

    /// The group's usage now, in the shape the engine reports a container's.
    pub fn sample(&self, clock_ticks_per_second: u64) -> ContainerSample {
        let read = |controller: &str, file: &str| {
            std::fs::read_to_string(self.dir_of(controller).join(file)).unwrap_or_default()
        };
        if self.v2 {
            let cpu = read("cpu", "cpu.stat");
            let memory = read("memory", "memory.stat");
            let value = |text: &str, key: &str| {
                parse_key_values(text)
                    .find(|(k, _)| *k == key)
                    .map_or(0, |(_, v)| v)
            };
            ContainerSample {
                cpu_total_ns: value(&cpu, "usage_usec") * 1000,
                cpu_user_ns: value(&cpu, "user_usec") * 1000,
                cpu_system_ns: value(&cpu, "system_usec") * 1000,
                throttled_periods: value(&cpu, "nr_throttled"),
                throttled_time_ns: value(&cpu, "throttled_usec") * 1000,
                memory_usage: read("memory", "memory.current").trim().parse().unwrap_or(0),
                memory_max_usage: 0,
                rss: value(&memory, "anon"),
                cache: value(&memory, "file"),
                swap: read("memory", "memory.swap.current")
                    .trim()
                    .parse()
                    .unwrap_or(0),
                cgroup_v2: true,
                earlier: None,
            }
        } else {
            let stat = read("cpuacct", "cpuacct.stat");
            let throttling = read("cpu", "cpu.stat");
            let memory = read("memory", "memory.stat");
            let value = |text: &str, key: &str| {
                parse_key_values(text)
                    .find(|(k, _)| *k == key)
                    .map_or(0, |(_, v)| v)
            };
            let tick_ns = 1_000_000_000 / clock_ticks_per_second.max(1);
            let number = |controller: &str, file: &str| -> u64 {
                read(controller, file).trim().parse().unwrap_or(0)
            };
            ContainerSample {
                cpu_total_ns: number("cpuacct", "cpuacct.usage"),
                cpu_user_ns: value(&stat, "user") * tick_ns,
                cpu_system_ns: value(&stat, "system") * tick_ns,
                throttled_periods: value(&throttling, "nr_throttled"),
                throttled_time_ns: value(&throttling, "throttled_time"),
                memory_usage: number("memory", "memory.usage_in_bytes"),
                memory_max_usage: number("memory", "memory.max_usage_in_bytes"),
                rss: value(&memory, "rss"),
                cache: value(&memory, "cache"),
                swap: value(&memory, "swap"),
                cgroup_v2: false,
                earlier: None,
            }
        }
    }

    /// Kill what is left in the group and remove it.
    pub fn destroy(&self) -> Result<(), CgroupError> {
        let killed = self.kill_all();
        for dir in &self.dirs {
            // A killed process may take a moment to leave the group: busy until it has.
            let mut tries = 0;
            loop {
                match std::fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) && tries < 50 => {
                        tries += 1;
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Err(source) => {
                        killed?;
                        return Err(CgroupError::Io {
                            path: dir.clone(),
                            source,
                        });
                    }
                }
            }
        }
        killed
    }
}

/// The pids of a `cgroup.procs` file.
pub fn parse_pids(text: &str) -> Vec<i32> {
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// The `key value` lines of a cgroup file whose value is a number.
fn parse_key_values(text: &str) -> impl Iterator<Item = (&str, u64)> {
    text.lines().filter_map(|l| {
        let (k, v) = l.split_once(' ')?;
        Some((k, v.trim().parse().ok()?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_limits_follow_nomad() {
        use teamster_storage::model::memory_limits;
        const MB: u64 = 1024 * 1024;
        assert_eq!(memory_limits(256, 0), (Some(256 * MB), None));
        assert_eq!(memory_limits(256, 512), (Some(512 * MB), Some(256 * MB)));
        // A memory_max below memory never lowers the limit.
        assert_eq!(memory_limits(256, 100), (Some(256 * MB), None));
        assert_eq!(
            memory_limits(256, teamster_storage::model::MEMORY_NO_LIMIT),
            (None, Some(256 * MB))
        );
    }

    #[test]
    fn shares_map_to_weights_as_runc_maps_them() {
        assert_eq!(cpu_weight(0), 1);
        assert_eq!(cpu_weight(2), 1);
        assert_eq!(cpu_weight(1024), 100);
        assert_eq!(cpu_weight(262_144), 10_000);
        assert_eq!(cpu_weight(1_000_000), 10_000);
        let w = cpu_weight(500);
        assert!(w > 1 && w < 100, "{w}");
        assert_eq!(Limits::of(0, 10, 0, None).cpu_shares, MIN_CPU_SHARES);
        assert_eq!(Limits::of(500, 10, 0, Some("")).cpuset, None);
    }

    #[test]
    fn kernel_files_are_parsed() {
        assert_eq!(parse_pids("12\n 7\n\nx\n"), vec![12, 7]);
        let oom = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n";
        assert_eq!(
            parse_key_values(oom).find(|(k, _)| *k == "oom_kill"),
            Some(("oom_kill", 2))
        );
    }

    #[test]
    fn groups_are_named_per_allocation_and_task() {
        let v1 = Hierarchy::V1 { root: "/cg".into() };
        let g = v1.task_group("a1", "web/x");
        assert_eq!(g.dirs.len(), 6);
        assert_eq!(g.dirs[3], Path::new("/cg/memory/teamster/a1.web_x"));
        assert_eq!(
            g.dir_of("freezer"),
            Path::new("/cg/freezer/teamster/a1.web_x")
        );
        let v2 = Hierarchy::V2 { root: "/cg".into() };
        let g = v2.task_group("a1", "web");
        assert_eq!(
            g.dirs,
            vec![PathBuf::from("/cg/teamster.slice/a1.web.scope")]
        );
        assert_eq!(
            g.procs_files()[0],
            Path::new("/cg/teamster.slice/a1.web.scope/cgroup.procs")
        );
    }

    /// The v2 layout on a stand-in hierarchy (this project's hosts run v1, whose kernel
    /// files the next test uses): the parent delegates the controllers, a task group gets
    /// its weight, limits and cpuset, and its figures are read from v2's files.
    #[test]
    fn v2_groups_get_their_limits_and_are_read_from_v2_files() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        std::fs::write(r.join("cgroup.controllers"), "cpuset cpu io memory pids\n").unwrap();
        let h = Hierarchy::detect_at(r).unwrap();
        assert_eq!(h.version(), 2);
        for dir in [r.to_path_buf(), r.join(PARENT_V2)] {
            let delegated = std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap();
            assert_eq!(delegated, "+cpu +memory +pids +cpuset");
        }
        let g = h.task_group("a1", "web");
        g.create(&Limits::of(1024, 256, 512, Some("2-3"))).unwrap();
        let read = |f: &str| std::fs::read_to_string(g.dirs[0].join(f)).unwrap();
        assert_eq!(read("cpu.weight"), "100");
        assert_eq!(read("memory.max"), (512u64 << 20).to_string());
        assert_eq!(read("memory.low"), (256u64 << 20).to_string());
        assert_eq!(read("cpuset.cpus"), "2-3");
        let unlimited = h.task_group("a1", "db");
        unlimited
            .create(&Limits::of(
                100,
                64,
                teamster_storage::model::MEMORY_NO_LIMIT,
                None,
            ))
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(unlimited.dirs[0].join("memory.max")).unwrap(),
            "max"
        );
        std::fs::write(
            g.dirs[0].join("cpu.stat"),
            "usage_usec 3000\nuser_usec 2000\nsystem_usec 1000\nnr_throttled 4\nthrottled_usec 50\n",
        )
        .unwrap();
        std::fs::write(g.dirs[0].join("memory.stat"), "anon 4096\nfile 8192\n").unwrap();
        std::fs::write(g.dirs[0].join("memory.current"), "20480\n").unwrap();
        std::fs::write(
            g.dirs[0].join("memory.events"),
            "low 0\noom 1\noom_kill 1\n",
        )
        .unwrap();
        let s = g.sample(100);
        assert!(s.cgroup_v2);
        assert_eq!(
            (s.cpu_total_ns, s.cpu_user_ns, s.cpu_system_ns),
            (3_000_000, 2_000_000, 1_000_000)
        );
        assert_eq!((s.throttled_periods, s.throttled_time_ns), (4, 50_000));
        assert_eq!((s.rss, s.cache, s.memory_usage), (4096, 8192, 20480));
        assert_eq!(g.oom_kills(), 1);
        // A host whose unified hierarchy lacks the controllers is not v2 (nor v1 here).
        let bare = tempfile::tempdir().unwrap();
        std::fs::write(bare.path().join("cgroup.controllers"), "").unwrap();
        let e = Hierarchy::detect_at(bare.path()).unwrap_err().to_string();
        assert!(e.contains("lacks the controllers cpu, memory, pids"), "{e}");
    }

    /// On a host whose cgroups this test may use (root, v1 or v2): a group gets its limits,
    /// takes a process and its double-forked grandchild, and kills both.
    #[test]
    fn a_group_holds_limits_and_kills_every_process() {
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED a_group_holds_limits_and_kills_every_process: needs root");
            return;
        }
        let hierarchy = match Hierarchy::detect() {
            Ok(h) => h,
            Err(e) => {
                assert!(
                    std::env::var("CI").is_err(),
                    "cgroups must be usable under CI: {e}"
                );
                eprintln!("SKIPPED a_group_holds_limits_and_kills_every_process: {e}");
                return;
            }
        };
        let id = format!("unit-{}", std::process::id());
        let group = hierarchy.task_group(&id, "t");
        group
            .create(&Limits::of(250, 64, 0, None))
            .expect("make the group");
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::process::CommandExt;
        let files: Vec<std::ffi::CString> = group
            .procs_files()
            .iter()
            .map(|f| std::ffi::CString::new(f.as_os_str().as_bytes()).unwrap())
            .collect();
        let mut cmd = std::process::Command::new("/bin/sh");
        cmd.args(["-c", "(setsid sleep 300 &) ; sleep 300"]);
        // SAFETY: open/write/close on paths built before the fork.
        unsafe {
            cmd.pre_exec(move || {
                for f in &files {
                    let fd = libc::open(f.as_ptr(), libc::O_WRONLY);
                    if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                        return Err(std::io::Error::last_os_error());
                    }
                    libc::close(fd);
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().unwrap();
        // The shell, the sleep it left behind in a session of its own, and its own sleep.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while group.pids().len() < 3 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(group.pids().len(), 3, "{:?}", group.pids());
        group.kill_all().unwrap();
        let _ = child.wait();
        assert!(group.pids().is_empty());
        let sample = group.sample(100);
        assert_eq!(sample.cgroup_v2, hierarchy.version() == 2);
        if hierarchy.version() == 1 {
            let limit =
                std::fs::read_to_string(group.dir_of("memory").join("memory.limit_in_bytes"))
                    .unwrap();
            assert_eq!(limit.trim(), (64u64 << 20).to_string());
            let shares = std::fs::read_to_string(group.dir_of("cpu").join("cpu.shares")).unwrap();
            assert_eq!(shares.trim(), "250");
        }
        group.destroy().unwrap();
        assert!(group.dirs.iter().all(|d| !d.exists()));
    }
}
