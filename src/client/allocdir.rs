//! Nomad's allocation directory, the same for every driver:
//!
//! ```text
//!  <data_dir>/alloc/<alloc id>/           0755
//!    alloc/                               0777, shared by the group's tasks (NOMAD_ALLOC_DIR)
//!      data/  logs/  tmp/                 0777 each; logs holds <task>.stdout.<n>, .stderr.<n>
//!    <task>/                              0777, the task's working directory (raw_exec)
//!      local/                             0777 (NOMAD_TASK_DIR)
//!      secrets/                           0700 (NOMAD_SECRETS_DIR), never served by fs reads
//!      tmp/                               1777
//! ```
//!
//! A sticky `ephemeral_disk` hands `alloc/data/` and each task's `local/` from an
//! allocation to its replacement on the same node ([`AllocDir::move_from`]).
//!
//! A container sees `alloc/` at `/alloc` (with `alloc/logs` read-only), `local/` at `/local`
//! and `secrets/` at `/secrets`. The file API lists and stats everything but reads nothing
//! under a task's `secrets/` (or `private/`), as Nomad's ([`is_secret`]).

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The allocation's shared directory, under its own.
pub const SHARED_DIR: &str = "alloc";
/// The shared directory's parts, in Nomad's order.
pub const SHARED_PARTS: [&str; 3] = ["logs", "tmp", "data"];
/// The logs directory, under the shared one.
pub const LOGS_DIR: &str = "logs";
/// The data directory (kept by `ephemeral_disk { sticky }`), under the shared one.
pub const DATA_DIR: &str = "data";
/// A task's own files, under its directory (`NOMAD_TASK_DIR`).
pub const LOCAL_DIR: &str = "local";
/// A task's secrets, under its directory (`NOMAD_SECRETS_DIR`).
pub const SECRETS_DIR: &str = "secrets";
/// A task's private files (hidden like secrets).
pub const PRIVATE_DIR: &str = "private";
/// A task's scratch space, under its directory.
pub const TMP_DIR: &str = "tmp";

/// Why a directory could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot create {path}: {source}")]
pub struct AllocDirError {
    /// The directory.
    pub path: PathBuf,
    /// Why.
    pub source: io::Error,
}

/// Why a previous allocation's directory could not be moved into its replacement's.
#[derive(Debug, thiserror::Error)]
#[error("cannot move {from} to {to}: {source}")]
pub struct MoveError {
    /// What was moved.
    pub from: PathBuf,
    /// Where to.
    pub to: PathBuf,
    /// Why.
    pub source: io::Error,
}

/// Why a migrating disk's snapshot could not be unpacked.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Reading the archive or writing a file failed.
    #[error("unpacking the previous allocation's data: {0}")]
    Io(#[from] io::Error),
    /// The archive holds more than the allocation's disk.
    #[error("the previous allocation's data is over {limit} bytes, the allocation's disk")]
    TooLarge {
        /// The disk's size.
        limit: u64,
    },
}

/// An allocation's directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocDir {
    root: PathBuf,
}

impl AllocDir {
    /// The directory of `alloc_id` under the client's allocation root.
    pub fn new(alloc_root: &Path, alloc_id: &str) -> AllocDir {
        AllocDir {
            root: alloc_root.join(alloc_id),
        }
    }

    /// `<alloc id>/`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `alloc/`, shared by the group's tasks.
    pub fn shared(&self) -> PathBuf {
        self.root.join(SHARED_DIR)
    }

    /// `alloc/logs/`.
    pub fn logs(&self) -> PathBuf {
        self.shared().join(LOGS_DIR)
    }

    /// `alloc/data/`.
    pub fn data(&self) -> PathBuf {
        self.shared().join(DATA_DIR)
    }

    /// The directories of `task`.
    pub fn task(&self, task: &str) -> TaskDir {
        TaskDir {
            dir: self.root.join(task),
            owner: None,
        }
    }

    /// Builds the allocation's own and shared directories (idempotent), through
    /// descriptors as [`TaskDir::build`] does: a task that replaced `alloc/data` with a
    /// link to a host directory finds a directory there, and the host's is untouched.
    pub fn build(&self) -> Result<(), AllocDirError> {
        let err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| AllocDirError { path, source }
        };
        let root = open_parent_then(&self.root, 0o755, None).map_err(err(&self.root))?;
        let shared =
            secure_dir(&root, SHARED_DIR.as_bytes(), 0o777, None).map_err(err(&self.shared()))?;
        for part in SHARED_PARTS {
            secure_dir(&shared, part.as_bytes(), 0o777, None)
                .map_err(err(&self.shared().join(part)))?;
        }
        Ok(())
    }

    /// What a migrating disk carries to another node, as a tar archive written to `out`:
    /// `alloc/data/` and each of `tasks`' `local/`, paths relative to the allocation's
    /// directory; symlinks archived as links, never followed.
    pub fn write_snapshot(&self, tasks: &[String], out: impl io::Write) -> io::Result<()> {
        let mut tar = tar::Builder::new(out);
        tar.follow_symlinks(false);
        let mut parts = vec![PathBuf::from(SHARED_DIR).join(DATA_DIR)];
        parts.extend(tasks.iter().map(|t| PathBuf::from(t).join(LOCAL_DIR)));
        for part in parts {
            // A task may have swapped a directory for a link (to the host's files): only a
            // real directory, reached through real directories, is archived.
            if real_dir(&self.root, &part) {
                tar.append_dir_all(&part, self.root.join(&part))?;
            }
        }
        tar.into_inner()?.flush()
    }

    /// Unpacks a snapshot of the previous allocation (see [`AllocDir::write_snapshot`])
    /// into this one: only directories and regular files under `alloc/data/` and `tasks`'
    /// `local/` (anything else is skipped), owned as they were and without set-id bits, at
    /// most `limit` bytes of files. All or nothing: the archive is unpacked aside and moved
    /// in once whole. Returns the files written.
    pub fn unpack_snapshot(
        &self,
        tasks: &[String],
        archive: impl io::Read,
        limit: u64,
    ) -> Result<u64, SnapshotError> {
        let staging = AllocDir {
            root: self.root.join(".migrating"),
        };
        let _ = std::fs::remove_dir_all(staging.root());
        std::fs::create_dir_all(staging.root())?;
        let unpacked = staging.unpack_here(tasks, archive, limit);
        let moved = unpacked.and_then(|files| {
            self.move_from(&staging, tasks)
                .map(|_| files)
                .map_err(|e| SnapshotError::Io(e.source))
        });
        let _ = std::fs::remove_dir_all(staging.root());
        moved
    }

    fn unpack_here(
        &self,
        tasks: &[String],
        archive: impl io::Read,
        limit: u64,
    ) -> Result<u64, SnapshotError> {
        let allowed: Vec<PathBuf> = std::iter::once(PathBuf::from(SHARED_DIR).join(DATA_DIR))
            .chain(tasks.iter().map(|t| PathBuf::from(t).join(LOCAL_DIR)))
            .collect();
        let mut tar = tar::Archive::new(archive);
        tar.set_preserve_permissions(false);
        tar.set_preserve_ownerships(true);
        tar.set_mask(0o7000);
        let (mut bytes, mut files) = (0u64, 0u64);
        for entry in tar.entries()? {
            let mut entry = entry?;
            let path = entry.path()?.into_owned();
            let plain = path
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
            let kind = entry.header().entry_type();
            if !plain
                || !allowed.iter().any(|a| path.starts_with(a))
                || !(kind.is_file() || kind.is_dir())
            {
                tracing::debug!(path = %path.display(), "skipped in the previous allocation's data");
                continue;
            }
            bytes = bytes.saturating_add(entry.size());
            if bytes > limit {
                return Err(SnapshotError::TooLarge { limit });
            }
            entry.unpack_in(&self.root)?;
            files += u64::from(kind.is_file());
        }
        Ok(files)
    }

    /// Takes over what a sticky disk keeps from `previous` (an allocation it replaces on
    /// this node): `alloc/data/` and each of `tasks`' `local/`, moved (renamed) in place of
    /// this allocation's own while those are still empty. What `previous` lacks, or what
    /// this allocation already holds, is left. Returns the directories moved.
    pub fn move_from(
        &self,
        previous: &AllocDir,
        tasks: &[String],
    ) -> Result<Vec<PathBuf>, MoveError> {
        let mut pairs = vec![(previous.data(), self.data())];
        for task in tasks {
            pairs.push((previous.task(task).local(), self.task(task).local()));
        }
        let mut moved = Vec::new();
        for (from, to) in pairs {
            let err = |source| MoveError {
                from: from.clone(),
                to: to.clone(),
                source,
            };
            // Only a real directory moves: a link a task put in its place would hand the
            // replacement whatever it points at.
            let rel = from.strip_prefix(&previous.root).unwrap_or(&from);
            if !real_dir(&previous.root, rel) {
                continue;
            }
            match std::fs::read_dir(&to).map(|mut entries| entries.next().is_some()) {
                // Already holding something: kept (a move done before a restart).
                Ok(true) => continue,
                Ok(false) => std::fs::remove_dir(&to).map_err(err)?,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    if let Some(parent) = to.parent() {
                        std::fs::create_dir_all(parent).map_err(err)?;
                    }
                }
                Err(e) => return Err(err(e)),
            }
            std::fs::rename(&from, &to).map_err(err)?;
            moved.push(to);
        }
        Ok(moved)
    }
}

/// Whether `rel` below `root` is a directory reached through directories only (no
/// component a symlink).
fn real_dir(root: &Path, rel: &Path) -> bool {
    let mut at = root.to_path_buf();
    rel.components().all(|c| {
        at.push(c);
        std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_dir())
    })
}

/// A task's directories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskDir {
    dir: PathBuf,
    /// Who owns the directories and the files the client writes for the task (uid, gid):
    /// the account a task with a `user` runs as; `None` keeps the agent's.
    owner: Option<(u32, u32)>,
}

impl TaskDir {
    /// Who owns the directories (uid, gid), when not the agent.
    pub fn owner(&self) -> Option<(u32, u32)> {
        self.owner
    }

    /// The same directories, owned by `owner` (see [`crate::client::users::dir_owner`]).
    pub fn owned_by(self, owner: Option<(u32, u32)>) -> TaskDir {
        TaskDir { owner, ..self }
    }

    /// `<task>/`: a `raw_exec` task's working directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `<task>/local/` (`NOMAD_TASK_DIR`).
    pub fn local(&self) -> PathBuf {
        self.dir.join(LOCAL_DIR)
    }

    /// `<task>/secrets/` (`NOMAD_SECRETS_DIR`).
    pub fn secrets(&self) -> PathBuf {
        self.dir.join(SECRETS_DIR)
    }

    /// `<task>/tmp/`.
    pub fn tmp(&self) -> PathBuf {
        self.dir.join(TMP_DIR)
    }

    /// Builds the task's directories (idempotent): `secrets/` readable by its owner only,
    /// `tmp/` sticky and open to all; all four given to the task's owner when it has one.
    /// Each is opened without following a symlink and changed through its descriptor: a
    /// task that replaced `local/` with a link to a host directory between two starts
    /// finds the link removed and a directory in its place, never the host's directory
    /// changed.
    pub fn build(&self) -> Result<(), AllocDirError> {
        let err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| AllocDirError { path, source }
        };
        let task = open_parent_then(&self.dir, 0o777, self.owner).map_err(err(&self.dir))?;
        for (sub, mode) in [(LOCAL_DIR, 0o777), (SECRETS_DIR, 0o700), (TMP_DIR, 0o1777)] {
            secure_dir(&task, sub.as_bytes(), mode, self.owner)
                .map_err(err(&self.dir.join(sub)))?;
        }
        Ok(())
    }
}

/// The directory `path` through [`secure_dir`] in its parent, which is made if missing and
/// opened by name (the allocation's root and the directories above it are the agent's
/// and the operator's, never a task's).
fn open_parent_then(
    path: &Path,
    mode: u32,
    owner: Option<(u32, u32)>,
) -> io::Result<std::os::fd::OwnedFd> {
    let parent = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent)?;
    let parent_fd = std::os::fd::OwnedFd::from(std::fs::File::open(parent)?);
    let name = path.file_name().unwrap_or_default();
    secure_dir(&parent_fd, name.as_encoded_bytes(), mode, owner)
}

/// Makes the directory `name` in `parent` (if missing), opens it without following a
/// symlink (one in its place is removed and the directory made), and sets its mode and
/// owner through the descriptor.
fn secure_dir(
    parent: &std::os::fd::OwnedFd,
    name: &[u8],
    mode: u32,
    owner: Option<(u32, u32)>,
) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::AsRawFd;
    let c = std::ffi::CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path contains NUL"))?;
    let mut replaced = false;
    loop {
        // SAFETY: `c` is NUL-terminated and `parent` an open directory.
        let made = unsafe { libc::mkdirat(parent.as_raw_fd(), c.as_ptr(), 0o700) };
        if made != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EEXIST) {
                return Err(e);
            }
        }
        match open_nofollow(Some(parent), name, libc::O_RDONLY | libc::O_DIRECTORY) {
            Ok(dir) => {
                // SAFETY: `dir` is an open descriptor this function owns.
                if unsafe { libc::fchmod(dir.as_raw_fd(), mode as libc::mode_t) } != 0 {
                    return Err(io::Error::last_os_error());
                }
                if let Some((uid, gid)) = owner {
                    std::os::unix::fs::fchown(&dir, Some(uid), Some(gid))?;
                }
                return Ok(dir);
            }
            // A symlink or a file where the directory belongs: removed, once.
            Err(e)
                if !replaced
                    && matches!(e.raw_os_error(), Some(libc::ELOOP) | Some(libc::ENOTDIR)) =>
            {
                replaced = true;
                // SAFETY: as above; unlinkat removes the link itself, never its target.
                if unsafe { libc::unlinkat(parent.as_raw_fd(), c.as_ptr(), 0) } != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// `openat(at, path, flags)` without following a symlink (`O_NOFOLLOW`, `O_CLOEXEC`).
fn open_nofollow(
    at: Option<&std::os::fd::OwnedFd>,
    path: &[u8],
    flags: i32,
) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let c = std::ffi::CString::new(path)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path contains NUL"))?;
    // SAFETY: `c` is NUL-terminated; the returned descriptor is checked and owned.
    let fd = unsafe {
        libc::openat(
            at.map_or(libc::AT_FDCWD, |d| d.as_raw_fd()),
            c.as_ptr(),
            flags | libc::O_CLOEXEC | libc::O_NOFOLLOW,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The directory that holds `rel` under `root`, opened one level at a time through no
/// symlink (each missing one made, mode 0755, when `create`), and the file's name in it.
/// `rel` must be a relative path with no `..`.
fn walk_to_parent(
    root: &Path,
    rel: &str,
    create: bool,
) -> io::Result<(std::os::fd::OwnedFd, std::ffi::OsString)> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let invalid =
        |why: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("{rel:?}: {why}"));
    let mut parts = Vec::new();
    for c in Path::new(rel).components() {
        match c {
            std::path::Component::Normal(p) => parts.push(p.to_os_string()),
            std::path::Component::CurDir => {}
            _ => return Err(invalid("must be a relative path inside its directory")),
        }
    }
    let Some(name) = parts.pop() else {
        return Err(invalid("names no file"));
    };
    let dir_flags = libc::O_RDONLY | libc::O_DIRECTORY;
    let mut dir = open_nofollow(None, root.as_os_str().as_bytes(), dir_flags)?;
    for part in &parts {
        if create {
            let c = std::ffi::CString::new(part.as_bytes()).map_err(|_| invalid("contains NUL"))?;
            // SAFETY: `c` is NUL-terminated; an existing directory is fine.
            let made = unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), 0o755) };
            if made != 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::AlreadyExists {
                    return Err(e);
                }
            }
        }
        dir = open_nofollow(Some(&dir), part.as_bytes(), dir_flags)?;
    }
    Ok((dir, name))
}

/// Writes `data` to `rel` under the task's directory (parents created) as the task's own
/// file would be, without following any symlink the task may have put on the way: each
/// directory is opened with `O_NOFOLLOW` from the one before, the data goes to a new file
/// beside the target and is renamed over it (a rename replaces a symlink, never writes
/// through it). `rel` must stay inside the task's directory.
pub fn write_task_file(task: &TaskDir, rel: &str, data: &[u8], mode: u32) -> io::Result<()> {
    let owner = task.owner.unzip();
    write_file_under(&task.dir, rel, data, mode, owner)
}

/// Writes `data` to `rel` under `root` as [`write_task_file`] does: through no symlink,
/// replacing the file in one rename, owned by `owner` (uid, gid; `None` keeps the agent's),
/// set on the new file before it takes the name. `rel` must stay inside `root`.
pub fn write_file_under(
    root: &Path,
    rel: &str,
    data: &[u8],
    mode: u32,
    owner: (Option<u32>, Option<u32>),
) -> io::Result<()> {
    use std::ffi::CString;
    use std::io::Write as _;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    let invalid =
        |why: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("{rel:?}: {why}"));
    let (dir, name) = walk_to_parent(root, rel, true)?;
    let cstr = |b: &[u8]| CString::new(b).map_err(|_| invalid("contains NUL"));
    let tmp_name = format!(".{}.{}.tmp", name.to_string_lossy(), std::process::id());
    let tmp = cstr(tmp_name.as_bytes())?;
    let target = cstr(name.as_bytes())?;
    // SAFETY: `tmp` is NUL-terminated; a stale temporary file is removed first (never
    // followed: unlinkat removes a symlink itself).
    unsafe { libc::unlinkat(dir.as_raw_fd(), tmp.as_ptr(), 0) };
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: as above; the descriptor is checked and owned.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), tmp.as_ptr(), flags, mode as libc::c_uint) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nothing else owns.
    let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let written = file
        .write_all(data)
        .and_then(|()| file.set_permissions(std::fs::Permissions::from_mode(mode)))
        .and_then(|()| match owner {
            (None, None) => Ok(()),
            (uid, gid) => std::os::unix::fs::fchown(&file, uid, gid),
        })
        .and_then(|()| file.sync_all());
    // SAFETY: both names are NUL-terminated and relative to the same open directory.
    let renamed = written.and_then(|()| {
        let r = unsafe {
            libc::renameat(
                dir.as_raw_fd(),
                tmp.as_ptr(),
                dir.as_raw_fd(),
                target.as_ptr(),
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    });
    if renamed.is_err() {
        // SAFETY: as above.
        unsafe { libc::unlinkat(dir.as_raw_fd(), tmp.as_ptr(), 0) };
    }
    renamed
}

/// Reads the regular file `rel` under `root` (at most `max` bytes) without following any
/// symlink on the way or blocking on a FIFO a task put there: `Ok(None)` when it does not
/// exist.
pub fn read_file_under(root: &Path, rel: &str, max: u64) -> io::Result<Option<Vec<u8>>> {
    use std::io::Read as _;
    use std::os::unix::ffi::OsStrExt;
    let invalid =
        |why: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("{rel:?}: {why}"));
    let found = walk_to_parent(root, rel, false).and_then(|(dir, name)| {
        open_nofollow(
            Some(&dir),
            name.as_bytes(),
            libc::O_RDONLY | libc::O_NONBLOCK,
        )
    });
    let fd = match found {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let file = std::fs::File::from(fd);
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(invalid("is not a regular file"));
    }
    if meta.len() > max {
        return Err(invalid(&format!("is larger than {max} bytes")));
    }
    let mut out = Vec::new();
    file.take(max + 1).read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(invalid(&format!("is larger than {max} bytes")));
    }
    Ok(Some(out))
}

/// Whether `rel` (relative to the allocation directory) lies in a task's `secrets/` or
/// `private/` directory, which the file API never reads (Nomad compares case-insensitively).
pub fn is_secret(rel: &str) -> bool {
    let mut parts = Path::new(rel.trim_start_matches('/'))
        .components()
        .filter(|c| !matches!(c, std::path::Component::CurDir));
    let (Some(first), Some(second)) = (parts.next(), parts.next()) else {
        return false;
    };
    let first = first.as_os_str().to_string_lossy();
    let second = second.as_os_str().to_string_lossy().to_ascii_lowercase();
    first != SHARED_DIR && (second == SECRETS_DIR || second == PRIVATE_DIR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_file_is_written_in_place_of_a_symlink_never_through_it() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::write(&outside, "keep").unwrap();
        let alloc = AllocDir::new(tmp.path(), "a1");
        let task = alloc.task("web");
        task.build().unwrap();
        // The task points its token file, and a directory on the way, outside.
        std::os::unix::fs::symlink(&outside, task.secrets().join("nomad_token")).unwrap();
        std::os::unix::fs::symlink(tmp.path(), task.dir().join("escape")).unwrap();
        write_task_file(&task, "secrets/nomad_token", b"jwt", 0o644).unwrap();
        assert_eq!(std::fs::read(&outside).unwrap(), b"keep");
        assert_eq!(
            std::fs::read(task.secrets().join("nomad_token")).unwrap(),
            b"jwt"
        );
        let meta = std::fs::symlink_metadata(task.secrets().join("nomad_token")).unwrap();
        assert!(meta.file_type().is_file());
        assert!(write_task_file(&task, "escape/outside", b"x", 0o644).is_err());
        assert!(write_task_file(&task, "../x", b"x", 0o644).is_err());
        assert!(write_task_file(&task, "/etc/x", b"x", 0o644).is_err());
        assert_eq!(std::fs::read(&outside).unwrap(), b"keep");
        // Parents are made.
        write_task_file(&task, "local/deep/er/t.jwt", b"y", 0o600).unwrap();
        assert_eq!(
            std::fs::read(task.local().join("deep/er/t.jwt")).unwrap(),
            b"y"
        );
    }

    /// A task running as a user owns its directories and the files the client writes for
    /// it (its private `secrets/` included), so it can read them.
    #[test]
    fn a_task_with_a_user_owns_its_directories_and_files() {
        use std::os::unix::fs::MetadataExt;
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED a_task_with_a_user_owns_its_directories_and_files: needs root");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let dir = AllocDir::new(tmp.path(), "a1");
        dir.build().unwrap();
        let task = dir.task("web").owned_by(Some((4242, 4343)));
        task.build().unwrap();
        for p in [
            task.dir().to_path_buf(),
            task.local(),
            task.secrets(),
            task.tmp(),
        ] {
            let m = std::fs::metadata(&p).unwrap();
            assert_eq!((m.uid(), m.gid()), (4242, 4343), "{}", p.display());
        }
        write_task_file(&task, "secrets/nomad_token", b"jwt", 0o600).unwrap();
        let m = std::fs::metadata(task.secrets().join("nomad_token")).unwrap();
        assert_eq!((m.uid(), m.gid()), (4242, 4343));
        // A task that put a link to a host directory in place of `local/` (it owns the
        // task directory) finds a directory there at its next start; the host's is
        // untouched.
        let host = tempfile::tempdir().unwrap();
        std::fs::set_permissions(host.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::remove_dir(task.local()).unwrap();
        std::os::unix::fs::symlink(host.path(), task.local()).unwrap();
        task.build().unwrap();
        let local = std::fs::symlink_metadata(task.local()).unwrap();
        assert!(local.is_dir() && local.uid() == 4242);
        let h = std::fs::metadata(host.path()).unwrap();
        assert_eq!((h.uid(), h.permissions().mode() & 0o7777), (0, 0o700));
        // Without a user, the agent keeps them.
        let plain = dir.task("db");
        plain.build().unwrap();
        assert_eq!(std::fs::metadata(plain.secrets()).unwrap().uid(), 0);
    }

    /// A task that replaced `alloc/data` (open to all) with a link to a host directory
    /// finds a directory there when the allocation's directories are built again; the
    /// host's keeps its mode.
    #[test]
    fn a_planted_link_in_the_shared_directory_is_replaced_not_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = AllocDir::new(tmp.path(), "a1");
        dir.build().unwrap();
        let host = tempfile::tempdir().unwrap();
        std::fs::set_permissions(host.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::remove_dir(dir.data()).unwrap();
        std::os::unix::fs::symlink(host.path(), dir.data()).unwrap();
        dir.build().unwrap();
        assert!(std::fs::symlink_metadata(dir.data()).unwrap().is_dir());
        let mode = std::fs::metadata(host.path()).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn the_layout_is_nomad_s_with_private_secrets() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = AllocDir::new(tmp.path(), "a1");
        dir.build().unwrap();
        let task = dir.task("web");
        task.build().unwrap();
        let mode = |p: PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        for part in ["alloc/data", "alloc/logs", "alloc/tmp", "web/local"] {
            assert_eq!(mode(tmp.path().join("a1").join(part)), 0o777, "{part}");
        }
        assert_eq!(mode(task.secrets()), 0o700);
        assert_eq!(mode(task.tmp()), 0o1777);
        assert_eq!(dir.logs(), tmp.path().join("a1/alloc/logs"));
        // Building again changes nothing.
        dir.build().unwrap();
        task.build().unwrap();
    }

    #[test]
    fn a_replacement_takes_the_data_and_local_dirs_of_its_previous_allocation() {
        let tmp = tempfile::tempdir().unwrap();
        let old = AllocDir::new(tmp.path(), "old");
        old.build().unwrap();
        old.task("web").build().unwrap();
        std::fs::write(old.data().join("db"), "rows").unwrap();
        std::fs::write(old.task("web").local().join("cache"), "warm").unwrap();
        std::fs::write(old.logs().join("web.stdout.0"), "old output").unwrap();
        let new = AllocDir::new(tmp.path(), "new");
        new.build().unwrap();
        let tasks = vec!["web".to_string(), "gone".to_string()];
        let moved = new.move_from(&old, &tasks).unwrap();
        assert_eq!(moved, vec![new.data(), new.task("web").local()]);
        assert_eq!(
            std::fs::read_to_string(new.data().join("db")).unwrap(),
            "rows"
        );
        assert_eq!(
            std::fs::read_to_string(new.task("web").local().join("cache")).unwrap(),
            "warm"
        );
        // Logs stay with their allocation; what moved is gone from the old one.
        assert!(!new.logs().join("web.stdout.0").exists());
        assert!(!old.data().exists());
        // Again (a client restarted mid-way): nothing left to move, nothing lost.
        assert!(new.move_from(&old, &tasks).unwrap().is_empty());
        assert!(new.data().join("db").exists());
        // A replacement that already holds data keeps its own.
        let third = AllocDir::new(tmp.path(), "third");
        third.build().unwrap();
        std::fs::write(third.data().join("mine"), "x").unwrap();
        assert!(
            third.move_from(&new, &tasks).unwrap().len() == 1,
            "only web/local"
        );
        assert!(third.data().join("mine").exists() && !third.data().join("db").exists());
    }

    #[test]
    fn a_snapshot_carries_data_and_local_files_and_nothing_else() {
        let tmp = tempfile::tempdir().unwrap();
        let old = AllocDir::new(tmp.path(), "old");
        old.build().unwrap();
        old.task("web").build().unwrap();
        std::fs::create_dir_all(old.data().join("db")).unwrap();
        std::fs::write(old.data().join("db/rows"), "1\n2\n").unwrap();
        std::fs::write(old.task("web").local().join("cache"), "warm").unwrap();
        std::fs::write(old.task("web").secrets().join("token"), "s3cr3t").unwrap();
        std::fs::write(old.logs().join("web.stdout.0"), "old output").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", old.data().join("link")).unwrap();
        let tasks = vec!["web".to_string()];
        let mut archive = Vec::new();
        old.write_snapshot(&tasks, &mut archive).unwrap();

        let new = AllocDir::new(tmp.path(), "new");
        new.build().unwrap();
        let files = new
            .unpack_snapshot(&tasks, archive.as_slice(), 1 << 20)
            .unwrap();
        assert_eq!(files, 2);
        assert_eq!(
            std::fs::read_to_string(new.data().join("db/rows")).unwrap(),
            "1\n2\n"
        );
        assert_eq!(
            std::fs::read_to_string(new.task("web").local().join("cache")).unwrap(),
            "warm"
        );
        // Secrets, logs and links stay behind.
        assert!(!new.task("web").secrets().join("token").exists());
        assert!(!new.logs().join("web.stdout.0").exists());
        assert!(std::fs::symlink_metadata(new.data().join("link")).is_err());
        // Over the disk's size: refused.
        let other = AllocDir::new(tmp.path(), "other");
        other.build().unwrap();
        assert!(matches!(
            other.unpack_snapshot(&tasks, archive.as_slice(), 4),
            Err(SnapshotError::TooLarge { limit: 4 })
        ));
        // An archive naming a path outside is skipped, not written.
        let mut evil = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(1);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        evil.append_data(&mut header, "alloc/data/../../escape", &b"x"[..])
            .unwrap_or_else(|_| {
                // The builder refuses `..` itself; write the name raw.
                let mut h = tar::Header::new_old();
                h.as_old_mut().name[..24].copy_from_slice(b"alloc/data/../../escape\0");
                h.set_size(1);
                h.set_cksum();
                evil.append(&h, &b"x"[..]).unwrap();
            });
        let evil = evil.into_inner().unwrap();
        let third = AllocDir::new(tmp.path(), "third");
        third.build().unwrap();
        assert_eq!(
            third
                .unpack_snapshot(&tasks, evil.as_slice(), 1 << 20)
                .unwrap(),
            0
        );
        for place in [tmp.path().join("escape"), third.root().join("escape")] {
            assert!(!place.exists(), "{}", place.display());
        }
        // A task that swapped its data directory for a link to the host's files hands on
        // nothing through it, by snapshot or by move.
        let host = tempfile::tempdir().unwrap();
        std::fs::write(host.path().join("node-secret"), "x").unwrap();
        let linked = AllocDir::new(tmp.path(), "linked");
        linked.build().unwrap();
        std::fs::remove_dir(linked.data()).unwrap();
        std::os::unix::fs::symlink(host.path(), linked.data()).unwrap();
        let mut archive = Vec::new();
        linked.write_snapshot(&tasks, &mut archive).unwrap();
        let fourth = AllocDir::new(tmp.path(), "fourth");
        fourth.build().unwrap();
        assert_eq!(
            fourth
                .unpack_snapshot(&tasks, archive.as_slice(), 1 << 20)
                .unwrap(),
            0
        );
        assert!(fourth.move_from(&linked, &tasks).unwrap().is_empty());
        assert!(!fourth.data().join("node-secret").exists());
        // Unpacking is all or nothing: an archive over the limit leaves nothing behind.
        let mut big = Vec::new();
        old_like(&tmp).write_snapshot(&tasks, &mut big).unwrap();
        assert!(fourth.unpack_snapshot(&tasks, big.as_slice(), 4).is_err());
        assert!(std::fs::read_dir(fourth.data()).unwrap().next().is_none());
        assert!(!fourth.root().join(".migrating").exists());
    }

    /// An allocation with a file in its data directory.
    fn old_like(tmp: &tempfile::TempDir) -> AllocDir {
        let dir = AllocDir::new(tmp.path(), "old-like");
        dir.build().unwrap();
        std::fs::write(dir.data().join("rows"), "12345678").unwrap();
        dir
    }

    #[test]
    fn secrets_and_private_files_are_recognised_in_any_case() {
        assert!(is_secret("web/secrets/token"));
        assert!(is_secret("/web/Secrets/token"));
        assert!(is_secret("./web/private/x"));
        assert!(is_secret("web/secrets"));
        assert!(!is_secret("alloc/secrets/x"));
        assert!(!is_secret("web/local/secrets"));
        assert!(!is_secret("web"));
        assert!(!is_secret("alloc/logs/web.stdout.0"));
    }
}
