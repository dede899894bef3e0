//! Log collection: a task's stdout and stderr go through two FIFOs in `alloc/logs`
//! (`.<task>.stdout.fifo`, `.<task>.stderr.fifo`) to a collector process that writes them
//! into rotated files ([`rotator`]), as Nomad's logmon.
//!
//! ```text
//!  task ──stdout──▶ alloc/logs/.web.stdout.fifo ──▶ collector ──▶ alloc/logs/web.stdout.<n>
//!       ──stderr──▶ alloc/logs/.web.stderr.fifo ──▶ (teamster logmon, its own session)
//! ```
//!
//! - The collector is `teamster logmon`, started by the client in its own session, so it
//!   outlives a client that is killed or restarted: the task keeps writing, the collector
//!   keeps reading, and nothing is lost or written twice. The client records the collector's
//!   pid and kernel start time and finds it again after a restart ([`Collector::alive`]); a
//!   collector that died is started again and continues the newest file.
//! - The collector holds each FIFO open for reading and writing, so a task that exits and is
//!   restarted writes into the same stream and the collector never sees an end of file. It
//!   stops when asked (SIGTERM: it drains what the FIFOs hold, then exits) or when the
//!   allocation's directory is removed.
//! - Every read is written to the file before the next read, so what a task wrote is in
//!   `alloc/logs` within a poll interval.
//! - An in-place update of the task's `logs` limits reaches a running collector without a
//!   gap: the client writes them to its limits file (in the allocation directory's root,
//!   which tasks cannot write, unlike `alloc/logs`) and sends SIGHUP ([`Collector::reload`]);
//!   the collector reads the file and applies them to both streams.

pub mod rotator;

use std::ffi::CString;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use teamster_storage::model::LogConfig;
use tokio::io::AsyncBufReadExt;

/// The streams a task writes.
pub const STREAMS: [&str; 2] = ["stdout", "stderr"];
/// The line a collector writes to its standard output once it reads both FIFOs.
const READY: &str = "ready";
/// How long a collector may take to be ready.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a stopped collector may take to drain and exit.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the collector looks for data when there was none, and for its directory.
const POLL: Duration = Duration::from_millis(100);
/// The most one read takes from a FIFO.
const READ_BYTES: usize = 64 << 10;

/// Why output could not be collected.
#[derive(Debug, thiserror::Error)]
pub enum LogmonError {
    /// A FIFO or a file could not be made or opened.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The collector process could not be started or did not get ready.
    #[error("log collector: {0}")]
    Collector(String),
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> LogmonError + '_ {
    move |source| LogmonError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The most a limits file holds.
const LIMITS_BYTES: u64 = 64;

/// The FIFO a task's `stream` is written to.
pub fn fifo_path(logs_dir: &Path, task: &str, stream: &str) -> PathBuf {
    logs_dir.join(format!(".{task}.{stream}.fifo"))
}

/// What the collector of one task is asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectorSpec {
    /// `alloc/logs`.
    pub logs_dir: PathBuf,
    /// The task.
    pub task: String,
    /// Files kept per stream.
    pub max_files: u64,
    /// Bytes per file.
    pub max_file_bytes: u64,
    /// Where new limits are read from on SIGHUP (`None`: they are not).
    pub limits_file: Option<PathBuf>,
}

impl CollectorSpec {
    /// The collector of `task`'s output in `logs_dir` as `logs` asks, reading new limits
    /// from `limits_file` when told to.
    pub fn new(
        logs_dir: &Path,
        task: &str,
        logs: &LogConfig,
        limits_file: Option<PathBuf>,
    ) -> CollectorSpec {
        CollectorSpec {
            logs_dir: logs_dir.to_path_buf(),
            task: task.to_string(),
            max_files: u64::from(logs.max_files.max(1)),
            max_file_bytes: u64::from(logs.max_file_size_mb.max(1)) << 20,
            limits_file,
        }
    }

    /// Its limits: files kept per stream, bytes per file.
    pub fn limits(&self) -> (u64, u64) {
        (self.max_files, self.max_file_bytes)
    }

    /// The arguments of `teamster logmon` that run this collector.
    pub fn args(&self) -> Vec<String> {
        let mut args = vec![
            "logmon".into(),
            format!("--logs-dir={}", self.logs_dir.display()),
            format!("--task={}", self.task),
            format!("--max-files={}", self.max_files),
            format!("--max-file-bytes={}", self.max_file_bytes),
        ];
        if let Some(file) = &self.limits_file {
            args.push(format!("--limits-file={}", file.display()));
        }
        args
    }
}

/// A running collector, as the client records it to find it again after a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Collector {
    /// Its pid.
    pub pid: i32,
    /// Its start time in clock ticks since boot, so a reused pid is not taken for it.
    pub start_ticks: u64,
}

impl Collector {
    /// Whether it still runs.
    pub fn alive(&self) -> bool {
        crate::util::procfs::start_ticks(self.pid) == Some(self.start_ticks)
    }

    /// Hands it `spec`'s limits: written to its limits file (whole, through a rename), then
    /// SIGHUP. Its next write follows them.
    pub fn reload(&self, spec: &CollectorSpec) -> Result<(), LogmonError> {
        use std::os::unix::fs::OpenOptionsExt;
        if !self.alive() {
            return Err(LogmonError::Collector("not running".into()));
        }
        let Some(path) = &spec.limits_file else {
            return Err(LogmonError::Collector("it reads no limits file".into()));
        };
        let staged = path.with_extension("new");
        let (files, bytes) = spec.limits();
        let _ = std::fs::remove_file(&staged);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&staged)
            .map_err(io_err(&staged))?;
        writeln!(file, "{files} {bytes}").map_err(io_err(&staged))?;
        drop(file);
        std::fs::rename(&staged, path).map_err(io_err(path))?;
        // SAFETY: kill(2) on a pid checked just above to be the collector.
        if unsafe { libc::kill(self.pid, libc::SIGHUP) } != 0 {
            return Err(io_err(path)(io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Asks it to drain its FIFOs and exit, and waits (a few seconds at most) until it has.
    pub async fn stop(&self) {
        if !self.alive() {
            return;
        }
        // SAFETY: kill(2) on a pid checked just above to be the collector.
        unsafe { libc::kill(self.pid, libc::SIGTERM) };
        let deadline = tokio::time::Instant::now() + STOP_TIMEOUT;
        while self.alive() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(POLL).await;
        }
        if self.alive() {
            tracing::warn!(pid = self.pid, "log collector did not stop; killing it");
            // SAFETY: as above.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
        }
    }
}

/// Makes `path` a FIFO (replacing anything else there).
fn make_fifo(path: &Path) -> Result<(), LogmonError> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_fifo() => return Ok(()),
        Ok(_) => std::fs::remove_file(path).map_err(io_err(path))?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(path)(e)),
    }
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|e| io_err(path)(io::Error::new(io::ErrorKind::InvalidInput, e)))?;
    // SAFETY: mkfifo(3) with a NUL-terminated path.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
        return Err(io_err(path)(io::Error::last_os_error()));
    }
    Ok(())
}

/// Starts the collector `spec` describes with `program` (the `teamster` binary) and waits
/// until it reads its FIFOs. The collector runs in its own session and is reaped by a task
/// of this process while it lives.
pub async fn start(program: &Path, spec: &CollectorSpec) -> Result<Collector, LogmonError> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::create_dir_all(&spec.logs_dir).map_err(io_err(&spec.logs_dir))?;
    for stream in STREAMS {
        make_fifo(&fifo_path(&spec.logs_dir, &spec.task, stream))?;
    }
    let err_path = spec.logs_dir.join(format!(".{}.logmon.err", spec.task));
    let err_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&err_path)
        .map_err(io_err(&err_path))?;
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(spec.args())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(err_file)
        .kill_on_drop(false);
    // SAFETY: setsid(2) is async-signal-safe; the child does nothing else before exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| LogmonError::Collector(format!("cannot run {}: {e}", program.display())))?;
    let pid = child.id().map(|p| p as i32).unwrap_or_default();
    let stdout = child.stdout.take();
    let ready = async {
        let mut lines = tokio::io::BufReader::new(stdout?).lines();
        lines.next_line().await.ok().flatten()
    };
    let line = tokio::time::timeout(READY_TIMEOUT, ready).await;
    if line.as_ref().ok().and_then(|l| l.as_deref()) != Some(READY) {
        let _ = child.start_kill();
        let _ = child.wait().await;
        let why = std::fs::read_to_string(&err_path).unwrap_or_default();
        return Err(LogmonError::Collector(format!(
            "did not get ready: {}",
            why.lines().last().unwrap_or("no error written")
        )));
    }
    let start_ticks = crate::util::procfs::start_ticks(pid)
        .ok_or_else(|| LogmonError::Collector("exited once ready".into()))?;
    tokio::spawn(async move {
        let _ = child.wait().await;
    });
    Ok(Collector { pid, start_ticks })
}

/// Opens `stream`'s FIFO for a task to write to, without blocking: fails when no collector
/// reads it.
pub fn open_for_task(logs_dir: &Path, task: &str, stream: &str) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = fifo_path(logs_dir, task, stream);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    // The task writes blocking: a full pipe waits for the collector.
    // SAFETY: fcntl(2) on a descriptor this function owns.
    unsafe {
        let flags = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
        if flags < 0 || libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) < 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(file)
}

/// Where a task's stdout and stderr go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogSinks {
    /// Into the FIFOs of the task's collector in `logs_dir`.
    Collector {
        /// `alloc/logs`.
        logs_dir: PathBuf,
        /// The task.
        task: String,
    },
    /// Thrown away (`logs { disabled = true }`, or a driver without output).
    Discard,
    /// Appended to these two files (a task run outside an allocation, as in tests).
    Files {
        /// stdout.
        stdout: PathBuf,
        /// stderr.
        stderr: PathBuf,
    },
}

impl LogSinks {
    /// `stream` (`stdout` or `stderr`) opened for the task to write to.
    pub fn open(&self, stream: &str) -> Result<std::fs::File, LogmonError> {
        match self {
            LogSinks::Collector { logs_dir, task } => open_for_task(logs_dir, task, stream)
                .map_err(io_err(&fifo_path(logs_dir, task, stream))),
            LogSinks::Discard => {
                let null = Path::new("/dev/null");
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(null)
                    .map_err(io_err(null))
            }
            LogSinks::Files { stdout, stderr } => {
                let path = if stream == "stderr" { stderr } else { stdout };
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(io_err(path))
            }
        }
    }
}

/// Set by SIGTERM in the collector process.
static STOP: AtomicBool = AtomicBool::new(false);
/// Set by SIGHUP in the collector process: read the limits file.
static RELOAD: AtomicBool = AtomicBool::new(false);
/// The limits the pumps follow, and how many times they were changed.
static LIMITS: Mutex<(u64, u64, u64)> = Mutex::new((0, 0, 0));

extern "C" fn on_term(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

extern "C" fn on_hup(_: libc::c_int) {
    RELOAD.store(true, Ordering::SeqCst);
}

/// The limits in `path`: a regular file (not followed through a link) of a few bytes.
fn read_limits(path: &Path) -> Option<(u64, u64)> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    file.take(LIMITS_BYTES).read_to_string(&mut text).ok()?;
    parse_limits(&text)
}

/// `files bytes`, as [`Collector::reload`] writes them.
fn parse_limits(text: &str) -> Option<(u64, u64)> {
    let mut it = text.split_whitespace().map(str::parse::<u64>);
    match (it.next(), it.next(), it.next()) {
        (Some(Ok(files)), Some(Ok(bytes)), None) if files > 0 && bytes > 0 => Some((files, bytes)),
        _ => None,
    }
}

fn limits() -> std::sync::MutexGuard<'static, (u64, u64, u64)> {
    LIMITS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The collector process (`teamster logmon`): opens both FIFOs, says it is ready on its
/// standard output, and copies each into its rotated files until stopped.
pub fn run_collector(spec: &CollectorSpec) -> Result<(), LogmonError> {
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe {
        libc::signal(
            libc::SIGTERM,
            on_term as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(
            libc::SIGHUP,
            on_hup as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
    }
    *limits() = (spec.max_files, spec.max_file_bytes, 0);
    let mut pumps = Vec::new();
    for stream in STREAMS {
        let path = fifo_path(&spec.logs_dir, &spec.task, stream);
        let fifo = open_fifo(&path)?;
        let rotator = rotator::Rotator::open(
            &spec.logs_dir,
            &rotator::base_name(&spec.task, stream),
            spec.max_files,
            spec.max_file_bytes,
        )
        .map_err(io_err(&spec.logs_dir))?;
        pumps.push((fifo, rotator, path));
    }
    {
        let mut out = io::stdout().lock();
        let _ = writeln!(out, "{READY}");
        let _ = out.flush();
    }
    // Nobody reads our output from here on.
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        // SAFETY: dup2(2) onto this process's standard output.
        unsafe { libc::dup2(null.as_raw_fd(), 1) };
    }
    let logs_dir = spec.logs_dir.clone();
    let threads: Vec<_> = pumps
        .into_iter()
        .map(|(fifo, rotator, path)| std::thread::spawn(move || pump(fifo, rotator, &path)))
        .collect();
    while !STOP.load(Ordering::SeqCst) {
        if !logs_dir.is_dir() {
            STOP.store(true, Ordering::SeqCst);
            break;
        }
        if RELOAD.swap(false, Ordering::SeqCst) {
            match spec.limits_file.as_deref().map(|f| (f, read_limits(f))) {
                Some((_, Some((files, bytes)))) => {
                    let mut l = limits();
                    *l = (files, bytes, l.2 + 1);
                }
                Some((file, None)) => eprintln!("{}: no limits to reload", file.display()),
                None => eprintln!("SIGHUP without a limits file: ignored"),
            }
        }
        std::thread::sleep(POLL);
    }
    let mut result = Ok(());
    for t in threads {
        match t.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => result = Err(e),
            Err(_) => result = Err(LogmonError::Collector("a pump panicked".into())),
        }
    }
    result
}

fn open_fifo(path: &Path) -> Result<std::fs::File, LogmonError> {
    use std::os::unix::fs::OpenOptionsExt;
    // Read and write: the stream never ends while the task restarts.
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(io_err(path))
}

/// Copies `fifo` into `rotator` until [`STOP`], then what is left in the FIFO.
fn pump(
    fifo: std::fs::File,
    mut rotator: rotator::Rotator,
    path: &Path,
) -> Result<(), LogmonError> {
    let fd = fifo.as_raw_fd();
    let mut buf = vec![0u8; READ_BYTES];
    let mut generation = 0;
    loop {
        let (files, bytes, now) = *limits();
        if now != generation {
            generation = now;
            if let Err(e) = rotator.set_limits(files, bytes) {
                eprintln!("{}: new limits: {e}", path.display());
            }
        }
        let stopping = STOP.load(Ordering::SeqCst);
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let timeout = if stopping { 0 } else { POLL.as_millis() as i32 };
        // SAFETY: poll(2) on one valid descriptor.
        let ready = unsafe { libc::poll(&mut pfd, 1, timeout) };
        if ready < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(io_err(path)(e));
        }
        if ready == 0 {
            if stopping {
                return Ok(());
            }
            continue;
        }
        // SAFETY: read(2) into a buffer of the given length.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if matches!(
                e.kind(),
                io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
            ) {
                continue;
            }
            return Err(io_err(path)(e));
        }
        // A failed write (a full disk) loses this piece, not the stream: the task must never
        // find its output without a reader.
        if let Err(e) = rotator.write(&buf[..n as usize]) {
            eprintln!("{}: dropped {n} bytes: {e}", path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_replaces_a_file_and_is_kept_when_there() {
        let tmp = tempfile::tempdir().unwrap();
        let p = fifo_path(tmp.path(), "web", "stdout");
        std::fs::write(&p, "x").unwrap();
        make_fifo(&p).unwrap();
        make_fifo(&p).unwrap();
        use std::os::unix::fs::FileTypeExt;
        assert!(std::fs::metadata(&p).unwrap().file_type().is_fifo());
        // Without a reader, a task's end cannot be opened: the launch fails, it does not hang.
        assert!(open_for_task(tmp.path(), "web", "stdout").is_err());
    }

    #[test]
    fn a_limits_file_is_read_only_as_a_small_regular_file_never_through_a_link() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("limits");
        std::fs::write(&file, "2 4096\n").unwrap();
        assert_eq!(read_limits(&file), Some((2, 4096)));
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_limits(&link), None);
        let long = tmp.path().join("long");
        std::fs::write(&long, format!("2 {}", "9".repeat(100))).unwrap();
        assert_eq!(read_limits(&long), None);
        let fifo = tmp.path().join("fifo");
        make_fifo(&fifo).unwrap();
        assert_eq!(read_limits(&fifo), None, "a FIFO is not waited on");
    }

    #[test]
    fn limits_are_two_positive_numbers() {
        assert_eq!(parse_limits("3 1048576\n"), Some((3, 1 << 20)));
        for bad in ["", "3", "0 10", "3 0", "3 10 1", "x 10"] {
            assert_eq!(parse_limits(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_spec_becomes_the_collector_s_arguments() {
        let spec = CollectorSpec::new(
            Path::new("/a/alloc/logs"),
            "web",
            &LogConfig::default(),
            Some("/a/.web.logmon.limits".into()),
        );
        assert_eq!(spec.max_file_bytes, 10 << 20);
        assert_eq!(
            spec.args(),
            [
                "logmon",
                "--logs-dir=/a/alloc/logs",
                "--task=web",
                "--max-files=10",
                "--max-file-bytes=10485760",
                "--limits-file=/a/.web.logmon.limits"
            ]
        );
    }
}
