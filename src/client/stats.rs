//! Resource usage read from `/proc`, in the shapes of Nomad's client stats API: a task's
//! (`ResourceUsage`: its process group's CPU and memory, per process in `Pids`) and the
//! host's (`HostStats`: per-core CPU, memory, disks, uptime).
//!
//! CPU percentages are rates between two readings: each answer is measured from the previous
//! reading of the same process or core ([`Readings`]), and the first one from the process's
//! start or the machine's boot. A task's processes are those of its process group (a
//! `raw_exec` task leads its own); a `mock` task has none and reads as zero. A docker
//! task's usage is its container's cgroup, as the engine's stats call reports it
//! ([`ContainerSample`]); each answer lists in `Measured` what its driver measured.
//!
//! The parsers are pure functions of the files' text; the readers around them do the I/O.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde_json::{json, Value};

/// The memory figures a driver may measure, in the order Nomad lists them.
const MEMORY_FIGURES: [&str; 5] = ["RSS", "Cache", "Swap", "Usage", "Max Usage"];
/// The CPU figures a driver may measure, in the order Nomad lists them.
const CPU_FIGURES: [&str; 5] = [
    "System Mode",
    "User Mode",
    "Throttled Periods",
    "Throttled Time",
    "Percent",
];

/// Which of [`MEMORY_FIGURES`] and [`CPU_FIGURES`] a reading holds (bit `i`: figure `i`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Measured {
    memory: u8,
    cpu: u8,
}

impl Measured {
    /// What `raw_exec` measures of its processes (as Nomad's): RSS and swap, system, user
    /// and total percent.
    pub const PROCESSES: Measured = Measured {
        memory: 0b00101,
        cpu: 0b10011,
    };
    /// What the docker driver measures of a container under cgroup v1 (as Nomad's): RSS,
    /// cache, swap, usage and its peak; throttling and total percent.
    pub const CONTAINER_V1: Measured = Measured {
        memory: 0b11111,
        cpu: 0b11100,
    };
    /// Under cgroup v2, which keeps no peak (and no separate swap in the engine's figures):
    /// anonymous memory as RSS, file cache, usage; throttling and total percent.
    pub const CONTAINER_V2: Measured = Measured {
        memory: 0b01011,
        cpu: 0b11100,
    };

    /// What a task's own cgroup gives under v1 (as Nomad's executor): every memory and
    /// CPU figure.
    pub const TASK_CGROUP_V1: Measured = Measured {
        memory: 0b11111,
        cpu: 0b11111,
    };
    /// Under v2, which keeps no peak.
    pub const TASK_CGROUP_V2: Measured = Measured {
        memory: 0b01111,
        cpu: 0b11111,
    };

    fn union(self, other: Measured) -> Measured {
        Measured {
            memory: self.memory | other.memory,
            cpu: self.cpu | other.cpu,
        }
    }

    fn names(mask: u8, figures: &[&'static str; 5]) -> Vec<&'static str> {
        (0..figures.len())
            .filter(|i| mask & (1 << i) != 0)
            .map(|i| figures[i])
            .collect()
    }
}

/// One process as `/proc/<pid>/stat` (and `status`) tell it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcStat {
    /// Its process group.
    pub pgrp: i32,
    /// User-mode CPU time, clock ticks.
    pub utime: u64,
    /// Kernel-mode CPU time, clock ticks.
    pub stime: u64,
    /// When it started, clock ticks after boot.
    pub start_ticks: u64,
    /// Resident pages.
    pub rss_pages: u64,
}

/// Parses `/proc/<pid>/stat` (the command name may hold spaces and parentheses).
pub fn parse_proc_stat(text: &str) -> Option<ProcStat> {
    let rest = text.get(text.rfind(')')? + 1..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] is field 3 (state): field n is f[n - 3].
    let num = |n: usize| f.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    Some(ProcStat {
        pgrp: f.get(2)?.parse().ok()?,
        utime: num(14)?,
        stime: num(15)?,
        start_ticks: num(22)?,
        rss_pages: num(24)?,
    })
}

/// `VmSwap` of `/proc/<pid>/status`, in bytes (0 when absent).
pub fn parse_status_swap(text: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix("VmSwap:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// The `MemTotal`, `MemAvailable` and `MemFree` of `/proc/meminfo`, in bytes.
pub fn parse_meminfo(text: &str) -> (u64, u64, u64) {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    let free = field("MemFree:");
    let available = match field("MemAvailable:") {
        0 => free,
        a => a,
    };
    (field("MemTotal:"), available, free)
}

/// One core's times from a `cpuN` line of `/proc/stat`, in clock ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoreTimes {
    /// User (with nice).
    pub user: u64,
    /// System (with irq and softirq).
    pub system: u64,
    /// Idle (with iowait).
    pub idle: u64,
    /// Everything, steal included.
    pub total: u64,
}

/// The per-core lines (`cpu0`, `cpu1`, …) of `/proc/stat`.
pub fn parse_cpu_lines(text: &str) -> Vec<(String, CoreTimes)> {
    text.lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            let name = parts.next()?.to_string();
            let v: Vec<u64> = parts.filter_map(|p| p.parse().ok()).collect();
            let at = |i: usize| v.get(i).copied().unwrap_or(0);
            // user nice system idle iowait irq softirq steal (guest time is in user).
            let times = CoreTimes {
                user: at(0) + at(1),
                system: at(2) + at(5) + at(6),
                idle: at(3) + at(4),
                total: (0..8).map(at).sum(),
            };
            Some((name, times))
        })
        .collect()
}

/// The share of `part` in `whole` as a percentage (0 when nothing elapsed).
fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// A core's usage between two readings, as Nomad's `HostCPUStats`.
pub fn core_usage(name: &str, before: CoreTimes, now: CoreTimes) -> Value {
    let total = now.total.saturating_sub(before.total);
    let user = percent(now.user.saturating_sub(before.user), total);
    let system = percent(now.system.saturating_sub(before.system), total);
    let idle = percent(now.idle.saturating_sub(before.idle), total);
    json!({
        "CPU": name,
        "User": user,
        "System": system,
        "Idle": idle,
        "Total": if total == 0 { 0.0 } else { 100.0 - idle },
    })
}

/// The mount holding `path` among `/proc/self/mounts` lines: (device, mount point).
pub fn mount_of(mounts: &str, path: &Path) -> Option<(String, String)> {
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?.to_string(), unescape_mount(f.next()?)))
        })
        .filter(|(_, point)| path.starts_with(point))
        .max_by_key(|(_, point)| point.len())
}

/// The disk partitions among `/proc/self/mounts` lines (devices under `/dev/`), each
/// device once: (device, mount point).
pub fn partitions(mounts: &str) -> Vec<(String, String)> {
    let mut seen = std::collections::BTreeSet::new();
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?.to_string(), unescape_mount(f.next()?)))
        })
        .filter(|(dev, _)| dev.starts_with("/dev/") && seen.insert(dev.clone()))
        .collect()
}

/// Mount points escape spaces, tabs, newlines and backslashes as octal (`\040`).
fn unescape_mount(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let code = rest
            .get(i + 1..i + 4)
            .and_then(|o| u8::from_str_radix(o, 8).ok());
        match code {
            Some(c) => {
                out.push(c as char);
                rest = &rest[i + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[i + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// A filesystem's size and use, from `statvfs`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FsUsage {
    /// Bytes in all.
    pub size: u64,
    /// Bytes in use.
    pub used: u64,
    /// Bytes an unprivileged user may still write.
    pub available: u64,
    /// Share of inodes in use, percent.
    pub inodes_used_percent: f64,
}

/// The share of a filesystem's space in use, percent (of what is usable: used plus
/// available to unprivileged users, as `df` counts it).
pub fn used_percent(u: &FsUsage) -> f64 {
    percent(u.used, u.used + u.available)
}

/// `statvfs` of the filesystem holding `dir`.
pub fn fs_usage(dir: &Path) -> Option<FsUsage> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs writes into the zeroed struct we own; `c` is a valid C string.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut s) };
    if rc != 0 {
        return None;
    }
    let frsize = s.f_frsize as u64;
    let blocks = s.f_blocks as u64;
    let files = s.f_files as u64;
    Some(FsUsage {
        size: blocks.saturating_mul(frsize),
        used: blocks
            .saturating_sub(s.f_bfree as u64)
            .saturating_mul(frsize),
        available: (s.f_bavail as u64).saturating_mul(frsize),
        inodes_used_percent: percent(files.saturating_sub(s.f_ffree as u64), files),
    })
}

/// Nomad's `DiskStats` of one filesystem.
pub fn disk_stats(device: &str, mountpoint: &str, u: &FsUsage) -> Value {
    json!({
        "Device": device,
        "Mountpoint": mountpoint,
        "Size": u.size,
        "Used": u.used,
        "Available": u.available,
        "UsedPercent": used_percent(u),
        "InodesUsedPercent": u.inodes_used_percent,
    })
}

/// Nomad's `ResourceUsage` with the given CPU and memory figures.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    /// Resident (anonymous) bytes.
    pub rss: u64,
    /// Page cache bytes.
    pub cache: u64,
    /// Swapped-out bytes.
    pub swap: u64,
    /// The memory cgroup's usage, bytes.
    pub usage: u64,
    /// The memory cgroup's peak usage, bytes.
    pub max_usage: u64,
    /// User-mode CPU, percent of one core.
    pub user_percent: f64,
    /// Kernel-mode CPU, percent of one core.
    pub system_percent: f64,
    /// All CPU, percent of one core.
    pub percent: f64,
    /// MHz consumed (Nomad's `TotalTicks`).
    pub ticks: f64,
    /// CFS periods in which the CPU quota throttled it.
    pub throttled_periods: u64,
    /// Nanoseconds it was throttled for.
    pub throttled_time: u64,
    /// Which figures were measured (none: a task without processes).
    pub measured: Measured,
}

impl Usage {
    /// A reading of a task's own cgroup (taken as a container's), with what such a group
    /// measures.
    pub fn of_task_cgroup(self, v2: bool) -> Usage {
        Usage {
            measured: if v2 {
                Measured::TASK_CGROUP_V2
            } else {
                Measured::TASK_CGROUP_V1
            },
            ..self
        }
    }

    /// The sum of two usages; measured is what either measured.
    pub fn add(&self, other: &Usage) -> Usage {
        Usage {
            rss: self.rss + other.rss,
            cache: self.cache + other.cache,
            swap: self.swap + other.swap,
            usage: self.usage + other.usage,
            max_usage: self.max_usage + other.max_usage,
            user_percent: self.user_percent + other.user_percent,
            system_percent: self.system_percent + other.system_percent,
            percent: self.percent + other.percent,
            ticks: self.ticks + other.ticks,
            throttled_periods: self.throttled_periods + other.throttled_periods,
            throttled_time: self.throttled_time + other.throttled_time,
            measured: self.measured.union(other.measured),
        }
    }

    /// As Nomad's `ResourceUsage` JSON.
    pub fn to_json(&self) -> Value {
        json!({
            "MemoryStats": {
                "RSS": self.rss,
                "Cache": self.cache,
                "Swap": self.swap,
                "MappedFile": 0,
                "Usage": self.usage,
                "MaxUsage": self.max_usage,
                "KernelUsage": 0,
                "KernelMaxUsage": 0,
                "Measured": Measured::names(self.measured.memory, &MEMORY_FIGURES),
            },
            "CpuStats": {
                "SystemMode": self.system_percent,
                "UserMode": self.user_percent,
                "TotalTicks": self.ticks,
                "ThrottledPeriods": self.throttled_periods,
                "ThrottledTime": self.throttled_time,
                "Percent": self.percent,
                "Measured": Measured::names(self.measured.cpu, &CPU_FIGURES),
            },
            "DeviceStats": [],
        })
    }
}

/// One reading of a container's cgroup, as the engine's stats call reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ContainerSample {
    /// CPU time used, all modes, nanoseconds.
    pub cpu_total_ns: u64,
    /// In user mode, nanoseconds.
    pub cpu_user_ns: u64,
    /// In kernel mode, nanoseconds.
    pub cpu_system_ns: u64,
    /// CFS periods throttled.
    pub throttled_periods: u64,
    /// Nanoseconds throttled.
    pub throttled_time_ns: u64,
    /// The memory cgroup's usage.
    pub memory_usage: u64,
    /// Its peak (cgroup v1).
    pub memory_max_usage: u64,
    /// Resident bytes (`rss` under v1, `anon` under v2).
    pub rss: u64,
    /// Page cache (`cache` under v1, `file` under v2).
    pub cache: u64,
    /// Swapped-out bytes (v1's `swap`, when accounted).
    pub swap: u64,
    /// Whether the figures are cgroup v2's.
    pub cgroup_v2: bool,
    /// The engine's own earlier reading, when it took one: total, user and system CPU
    /// nanoseconds, and how many seconds before this one.
    pub earlier: Option<(u64, u64, u64, f64)>,
}

/// The previous CPU reading of each process and core, so the next answer is a rate since
/// it. Kept by the client for as long as it runs; entries of processes gone are dropped.
#[derive(Debug, Default)]
pub struct Readings {
    /// By pid and start time: (seconds since boot, user ticks, system ticks).
    procs: HashMap<(i32, u64), (f64, u64, u64)>,
    /// By core name.
    cores: BTreeMap<String, CoreTimes>,
    /// By container id: (seconds since boot, total, user and system CPU nanoseconds).
    containers: HashMap<String, (f64, u64, u64, u64)>,
}

/// The machine's clock tick rate and page size, and its MHz per core.
#[derive(Debug, Clone, Copy)]
pub struct Machine {
    /// Clock ticks per second (`_SC_CLK_TCK`).
    pub ticks_per_second: f64,
    /// Bytes per page.
    pub page_size: u64,
    /// MHz per core, for `TotalTicks`.
    pub mhz_per_core: f64,
}

impl Machine {
    /// This machine's.
    pub fn detect() -> Machine {
        // SAFETY: sysconf reads a configuration value and has no other effect.
        let (tck, page) = unsafe {
            (
                libc::sysconf(libc::_SC_CLK_TCK),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        let mhz = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|t| cpuinfo_mhz(&t))
            .unwrap_or(1000);
        Machine {
            ticks_per_second: if tck > 0 { tck as f64 } else { 100.0 },
            page_size: if page > 0 { page as u64 } else { 4096 },
            mhz_per_core: mhz as f64,
        }
    }
}

/// Seconds since boot (`/proc/uptime`).
pub fn uptime_seconds() -> Option<f64> {
    std::fs::read_to_string("/proc/uptime")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

impl Readings {
    /// The usage of one process between its previous reading (else its start) and `now`
    /// (seconds since boot), recording this reading.
    pub fn process(&mut self, m: &Machine, pid: i32, s: &ProcStat, swap: u64, now: f64) -> Usage {
        let start = s.start_ticks as f64 / m.ticks_per_second;
        let (since, user0, system0) = self
            .procs
            .insert((pid, s.start_ticks), (now, s.utime, s.stime))
            .unwrap_or((start, 0, 0));
        let elapsed = (now - since) * m.ticks_per_second;
        let rate = |ticks: u64| {
            if elapsed <= 0.0 {
                0.0
            } else {
                ticks as f64 * 100.0 / elapsed
            }
        };
        let user_percent = rate(s.utime.saturating_sub(user0));
        let system_percent = rate(s.stime.saturating_sub(system0));
        Usage {
            rss: s.rss_pages * m.page_size,
            swap,
            user_percent,
            system_percent,
            percent: user_percent + system_percent,
            ticks: (user_percent + system_percent) / 100.0 * m.mhz_per_core,
            measured: Measured::PROCESSES,
            ..Usage::default()
        }
    }

    /// The usage of a container between its previous reading and `now` (seconds since
    /// boot), recording this reading. The first is a rate since the engine's own earlier
    /// reading, when the sample carries one; without either it has no rate yet (0 %).
    pub fn container(&mut self, m: &Machine, id: &str, s: &ContainerSample, now: f64) -> Usage {
        let this = (now, s.cpu_total_ns, s.cpu_user_ns, s.cpu_system_ns);
        let engines = s
            .earlier
            .map(|(total, user, system, ago)| (now - ago, total, user, system));
        let before = self.containers.insert(id.to_string(), this);
        let (since, total0, user0, system0) = before.or(engines).unwrap_or(this);
        let elapsed_ns = (now - since) * 1e9;
        let rate = |ns: u64| {
            if elapsed_ns <= 0.0 {
                0.0
            } else {
                ns as f64 * 100.0 / elapsed_ns
            }
        };
        let percent = rate(s.cpu_total_ns.saturating_sub(total0));
        Usage {
            rss: s.rss,
            cache: s.cache,
            swap: s.swap,
            usage: s.memory_usage,
            max_usage: s.memory_max_usage,
            user_percent: rate(s.cpu_user_ns.saturating_sub(user0)),
            system_percent: rate(s.cpu_system_ns.saturating_sub(system0)),
            percent,
            ticks: percent / 100.0 * m.mhz_per_core,
            throttled_periods: s.throttled_periods,
            throttled_time: s.throttled_time_ns,
            measured: if s.cgroup_v2 {
                Measured::CONTAINER_V2
            } else {
                Measured::CONTAINER_V1
            },
        }
    }

    /// The containers read before.
    pub fn containers_read(&self) -> std::collections::BTreeSet<String> {
        self.containers.keys().cloned().collect()
    }

    /// Forget the containers not in `running`.
    pub fn retain_containers(&mut self, running: &std::collections::BTreeSet<String>) {
        self.containers.retain(|id, _| running.contains(id));
    }

    /// Forget the processes `alive(pid, start ticks)` says are gone.
    pub fn retain_procs(&mut self, alive: impl Fn(i32, u64) -> bool) {
        self.procs.retain(|(pid, start), _| alive(*pid, *start));
    }

    /// The cores' usage since their previous reading (else since boot), recording these.
    pub fn cores(&mut self, now: Vec<(String, CoreTimes)>) -> Vec<Value> {
        now.into_iter()
            .map(|(name, times)| {
                let before = self.cores.insert(name.clone(), times).unwrap_or_default();
                core_usage(&name, before, times)
            })
            .collect()
    }
}

/// Whether process `pid` still runs and is the one that started at `start_ticks`.
pub fn process_alive(pid: i32, start_ticks: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|t| parse_proc_stat(&t))
        .is_some_and(|s| s.start_ticks == start_ticks)
}

/// Every process of process group `pgrp`, with its stat and swap.
pub fn group_processes(pgrp: i32) -> Vec<(i32, ProcStat, u64)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let stat =
                parse_proc_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)?;
            if stat.pgrp != pgrp {
                return None;
            }
            let swap = std::fs::read_to_string(format!("/proc/{pid}/status"))
                .map(|t| parse_status_swap(&t))
                .unwrap_or(0);
            Some((pid, stat, swap))
        })
        .collect()
}

/// The average of the `cpu MHz` lines, rounded.
pub fn cpuinfo_mhz(text: &str) -> Option<u64> {
    let mhz: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with("cpu MHz"))
        .filter_map(|l| l.split(':').nth(1)?.trim().parse().ok())
        .collect();
    if mhz.is_empty() {
        return None;
    }
    let avg = mhz.iter().sum::<f64>() / mhz.len() as f64;
    (avg >= 1.0).then_some(avg.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_are_parsed() {
        let stat = "4242 (my (odd) task) S 1 4240 4240 0 -1 4194560 600 0 0 0 \
                    150 30 0 0 20 0 1 0 98765 10000000 512 18446744073709551615";
        assert_eq!(
            parse_proc_stat(stat),
            Some(ProcStat {
                pgrp: 4240,
                utime: 150,
                stime: 30,
                start_ticks: 98765,
                rss_pages: 512
            })
        );
        assert_eq!(parse_proc_stat("garbage"), None);
        assert_eq!(
            parse_status_swap("Name:\tsh\nVmRSS:\t  1000 kB\nVmSwap:\t     12 kB\n"),
            12 * 1024
        );
        assert_eq!(parse_status_swap("Name:\tkthreadd\n"), 0);
        let meminfo = "MemTotal:       2000 kB\nMemFree:         300 kB\nMemAvailable:    900 kB\n";
        assert_eq!(
            parse_meminfo(meminfo),
            (2000 * 1024, 900 * 1024, 300 * 1024)
        );
        let cpus = parse_cpu_lines(
            "cpu  10 0 10 80 0 0 0 0 0 0\ncpu0 4 1 3 40 2 1 1 0 0 0\ncpu1 5 0 5 40\nintr 1 2\n",
        );
        assert_eq!(cpus.len(), 2);
        assert_eq!(
            cpus[0],
            (
                "cpu0".to_string(),
                CoreTimes {
                    user: 5,
                    system: 5,
                    idle: 42,
                    total: 52
                }
            )
        );
    }

    #[test]
    fn rates_are_measured_between_readings() {
        let m = Machine {
            ticks_per_second: 100.0,
            page_size: 4096,
            mhz_per_core: 2000.0,
        };
        let mut r = Readings::default();
        // Started 10 s after boot, read at 20 s: 200 user + 100 system ticks in 10 s.
        let s = ProcStat {
            pgrp: 7,
            utime: 200,
            stime: 100,
            start_ticks: 1000,
            rss_pages: 10,
        };
        let first = r.process(&m, 7, &s, 0, 20.0);
        assert_eq!((first.user_percent, first.system_percent), (20.0, 10.0));
        assert_eq!(first.rss, 40960);
        assert_eq!(first.ticks, 600.0);
        // One second later, a full core of user time.
        let later = ProcStat { utime: 300, ..s };
        let second = r.process(&m, 7, &later, 0, 21.0);
        assert_eq!((second.user_percent, second.system_percent), (100.0, 0.0));
        let json = second.to_json();
        assert_eq!(json["CpuStats"]["Percent"], 100.0);
        assert_eq!(json["MemoryStats"]["Measured"], json!(["RSS", "Swap"]));
        assert_eq!(
            json["CpuStats"]["Measured"],
            json!(["System Mode", "User Mode", "Percent"])
        );
        assert_eq!(
            Usage::default().to_json()["CpuStats"]["Measured"],
            json!([])
        );

        // A container: its first reading has no rate; the next is one over the time between.
        let c = ContainerSample {
            cpu_total_ns: 5_000_000_000,
            cpu_user_ns: 4_000_000_000,
            cpu_system_ns: 1_000_000_000,
            throttled_periods: 2,
            throttled_time_ns: 300,
            memory_usage: 8 << 20,
            memory_max_usage: 9 << 20,
            rss: 6 << 20,
            cache: 1 << 20,
            swap: 0,
            cgroup_v2: false,
            earlier: None,
        };
        let first = r.container(&m, "c1", &c, 30.0);
        assert_eq!(
            (first.percent, first.rss, first.usage),
            (0.0, 6 << 20, 8 << 20)
        );
        // The engine's earlier reading gives the first one a rate: half a core over 1 s.
        let with_earlier = ContainerSample {
            earlier: Some((4_500_000_000, 3_600_000_000, 900_000_000, 1.0)),
            ..c
        };
        assert_eq!(r.container(&m, "c0", &with_earlier, 30.0).percent, 50.0);
        let later = ContainerSample {
            cpu_total_ns: 5_500_000_000,
            cpu_user_ns: 4_400_000_000,
            cpu_system_ns: 1_100_000_000,
            earlier: Some((0, 0, 0, 1.0)),
            ..c
        };
        let second = r.container(&m, "c1", &later, 32.0);
        assert_eq!(second.percent, 25.0);
        assert_eq!((second.user_percent, second.system_percent), (20.0, 5.0));
        assert_eq!(second.ticks, 500.0);
        let json = second.to_json();
        assert_eq!(
            json["MemoryStats"]["Measured"],
            json!(["RSS", "Cache", "Swap", "Usage", "Max Usage"])
        );
        assert_eq!(
            json["CpuStats"]["Measured"],
            json!(["Throttled Periods", "Throttled Time", "Percent"])
        );
        assert_eq!(json["CpuStats"]["ThrottledPeriods"], 2);
        // A group's sum lists what either of its tasks measured.
        let sum = second
            .add(&r.process(&m, 7, &later_proc(), 0, 22.0))
            .to_json();
        assert_eq!(
            sum["CpuStats"]["Measured"],
            json!([
                "System Mode",
                "User Mode",
                "Throttled Periods",
                "Throttled Time",
                "Percent"
            ])
        );
        r.retain_containers(&Default::default());
        let no_earlier = ContainerSample {
            earlier: None,
            ..later
        };
        assert_eq!(
            r.container(&m, "c1", &no_earlier, 40.0).percent,
            0.0,
            "forgotten"
        );

        let before = CoreTimes {
            user: 0,
            system: 0,
            idle: 0,
            total: 0,
        };
        let now = CoreTimes {
            user: 30,
            system: 10,
            idle: 60,
            total: 100,
        };
        let core = core_usage("cpu0", before, now);
        assert_eq!(
            core,
            json!({"CPU": "cpu0", "User": 30.0, "System": 10.0, "Idle": 60.0, "Total": 40.0})
        );
    }

    fn later_proc() -> ProcStat {
        ProcStat {
            pgrp: 7,
            utime: 400,
            stime: 100,
            start_ticks: 1000,
            rss_pages: 10,
        }
    }

    #[test]
    fn mounts_are_matched_by_their_longest_prefix() {
        let mounts = "/dev/sda1 / ext4 rw 0 0\nproc /proc proc rw 0 0\n\
                      /dev/sdb1 /var/lib/my\\040data xfs rw 0 0\n/dev/sda1 /snap ext4 rw 0 0\n";
        assert_eq!(
            mount_of(mounts, Path::new("/var/lib/my data/alloc")),
            Some(("/dev/sdb1".into(), "/var/lib/my data".into()))
        );
        assert_eq!(
            mount_of(mounts, Path::new("/home/x")),
            Some(("/dev/sda1".into(), "/".into()))
        );
        assert_eq!(
            partitions(mounts),
            vec![
                ("/dev/sda1".to_string(), "/".to_string()),
                ("/dev/sdb1".to_string(), "/var/lib/my data".to_string())
            ]
        );
    }
}
