//! Files opened beneath a directory, confined by the kernel: a path that leaves the
//! directory by `..`, an absolute symlink or a symlink to a parent is refused by the open
//! itself, not by a check on the text of the path (which a task defeats with `ln -s / x`).
//!
//! On Linux 5.6 and later the open is one `openat2(2)` with `RESOLVE_BENEATH` and
//! `RESOLVE_NO_MAGICLINKS`: symlinks that stay inside the directory are followed, the rest
//! fail with `EXDEV`. Where `openat2` is missing (`ENOSYS`), each component is opened in turn
//! with `O_NOFOLLOW`, so no symlink is followed at all.
//!
//! Only regular files are opened for reading (a FIFO, a socket or a device node that a task
//! made in its directory is refused without blocking), and a directory is listed without
//! following the symlinks in it.

use std::ffi::CString;
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

/// Why a confined open failed.
#[derive(Debug, thiserror::Error)]
pub enum BeneathError {
    /// The path, or a symlink on it, leads outside the directory.
    #[error("{0:?} leads outside the directory")]
    Escapes(String),
    /// Nothing is there.
    #[error("{0:?}: no such file or directory")]
    NotFound(String),
    /// It is there but is not what was asked for (a directory to read, a FIFO, a device…).
    #[error("{path:?} {what}")]
    WrongKind {
        /// The path as asked.
        path: String,
        /// What it is instead.
        what: &'static str,
    },
    /// Anything else the kernel said.
    #[error("{path:?}: {source}")]
    Io {
        /// The path as asked.
        path: String,
        /// The error.
        source: io::Error,
    },
}

/// An open directory under which paths are resolved.
#[derive(Debug)]
pub struct Beneath {
    root: OwnedFd,
}

impl Beneath {
    /// Opens `root` (a path the caller trusts) as the directory to resolve beneath.
    pub fn open(root: &Path) -> Result<Beneath, BeneathError> {
        let name = root.display().to_string();
        let c = cstring(root.as_os_str().as_bytes(), &name)?;
        // SAFETY: `c` is a valid NUL-terminated path; the result is checked.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(classify(io::Error::last_os_error(), &name));
        }
        // SAFETY: `fd` was just opened and is owned by nobody else.
        Ok(Beneath {
            root: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Opens the regular file at `rel` for reading.
    pub fn open_file(&self, rel: &str) -> Result<File, BeneathError> {
        let fd = self.resolve(
            rel,
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC,
        )?;
        let file = File::from(fd);
        let meta = file.metadata().map_err(|e| classify(e, rel))?;
        if meta.is_dir() {
            return Err(BeneathError::WrongKind {
                path: rel.to_owned(),
                what: "is a directory",
            });
        }
        if !meta.is_file() {
            return Err(BeneathError::WrongKind {
                path: rel.to_owned(),
                what: "is not a regular file",
            });
        }
        // Reads of a regular file never block on O_NONBLOCK; clear it for tidiness.
        // SAFETY: fcntl on an fd we own.
        unsafe {
            let flags = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
            if flags >= 0 {
                libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK);
            }
        }
        Ok(file)
    }

    /// Where `file` (opened beneath this directory) is, relative to the directory, as the
    /// kernel names it: the path a symlink led to, not the one asked for.
    pub fn relative_of(&self, file: &File) -> Option<String> {
        let link = |fd: i32| std::fs::read_link(format!("/proc/self/fd/{fd}")).ok();
        let root = link(self.root.as_raw_fd())?;
        let at = link(file.as_raw_fd())?;
        at.strip_prefix(&root)
            .ok()
            .map(|p| p.to_string_lossy().into_owned())
    }

    /// The metadata of whatever is at `rel` (a symlink inside the directory is followed).
    pub fn stat(&self, rel: &str) -> Result<Metadata, BeneathError> {
        let fd = self.resolve(rel, libc::O_PATH | libc::O_CLOEXEC)?;
        File::from(fd).metadata().map_err(|e| classify(e, rel))
    }

    /// The entries of the directory at `rel` with their own metadata (a symlink is listed
    /// as a symlink, never followed), sorted by name.
    pub fn read_dir(&self, rel: &str) -> Result<Vec<(String, Metadata)>, BeneathError> {
        let fd = self.resolve(rel, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC)?;
        // The descriptor's own /proc entry names the directory already opened: nothing on
        // the way is resolved again.
        let proc_path = format!("/proc/self/fd/{}", fd.as_raw_fd());
        let entries = std::fs::read_dir(&proc_path).map_err(|e| classify(e, rel))?;
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| classify(e, rel))?;
            // `DirEntry::metadata` does not follow a symlink.
            if let Ok(meta) = entry.metadata() {
                out.push((entry.file_name().to_string_lossy().into_owned(), meta));
            }
        }
        drop(fd);
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// Opens `rel` beneath the root with `flags`.
    fn resolve(&self, rel: &str, flags: libc::c_int) -> Result<OwnedFd, BeneathError> {
        let trimmed = rel.trim_start_matches('/');
        let path = if trimmed.is_empty() { "." } else { trimmed };
        match openat2_beneath(self.root.as_raw_fd(), path, flags) {
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                walk_nofollow(self.root.as_raw_fd(), path, flags).map_err(|e| classify(e, rel))
            }
            r => r.map_err(|e| classify(e, rel)),
        }
    }
}

fn cstring(bytes: &[u8], name: &str) -> Result<CString, BeneathError> {
    CString::new(bytes).map_err(|_| BeneathError::NotFound(name.to_owned()))
}

fn classify(e: io::Error, path: &str) -> BeneathError {
    match e.raw_os_error() {
        Some(libc::EXDEV) | Some(libc::ELOOP) => BeneathError::Escapes(path.to_owned()),
        Some(libc::ENOENT) => BeneathError::NotFound(path.to_owned()),
        Some(libc::ENOTDIR) => BeneathError::WrongKind {
            path: path.to_owned(),
            what: "is not a directory",
        },
        _ => BeneathError::Io {
            path: path.to_owned(),
            source: e,
        },
    }
}

fn openat2_beneath(dir: RawFd, path: &str, flags: libc::c_int) -> io::Result<OwnedFd> {
    let c = CString::new(path).map_err(|_| io::Error::from_raw_os_error(libc::ENOENT))?;
    // SAFETY: `open_how` is plain data; every field is set below.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = flags as u64;
    how.mode = 0;
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: valid fd, NUL-terminated path, `how` lives through the call with its size.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir,
            c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Without `openat2`: every component opened with `O_NOFOLLOW` from the one before, `..`
/// refused, so neither a symlink nor a parent reference is ever taken.
fn walk_nofollow(dir: RawFd, path: &str, flags: libc::c_int) -> io::Result<OwnedFd> {
    let parts: Vec<&std::ffi::OsStr> = Path::new(path)
        .components()
        .filter_map(|c| match c {
            Component::Normal(p) => Some(Ok(p)),
            Component::CurDir => None,
            _ => Some(Err(())),
        })
        .collect::<Result<_, _>>()
        .map_err(|_| io::Error::from_raw_os_error(libc::EXDEV))?;
    let open = |at: RawFd, name: &[u8], flags: libc::c_int| -> io::Result<OwnedFd> {
        let c = CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::ENOENT))?;
        // SAFETY: valid fd and NUL-terminated name.
        let fd = unsafe { libc::openat(at, c.as_ptr(), flags | libc::O_NOFOLLOW) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor we own.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    };
    let Some((last, dirs)) = parts.split_last() else {
        return open(dir, b".", flags);
    };
    let mut current: Option<OwnedFd> = None;
    for part in dirs {
        let at = current.as_ref().map_or(dir, |f| f.as_raw_fd());
        current = Some(open(
            at,
            part.as_bytes(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )?);
    }
    let at = current.as_ref().map_or(dir, |f| f.as_raw_fd());
    open(at, last.as_bytes(), flags)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::symlink;

    fn tree() -> (tempfile::TempDir, std::path::PathBuf) {
        let top = tempfile::tempdir().unwrap();
        let root = top.path().join("alloc");
        std::fs::create_dir_all(root.join("web/local")).unwrap();
        std::fs::write(root.join("web/local/out.txt"), b"inside").unwrap();
        std::fs::write(top.path().join("secret.txt"), b"outside").unwrap();
        symlink("/", root.join("web/root_link")).unwrap();
        symlink("/etc/passwd", root.join("web/passwd")).unwrap();
        symlink("../../secret.txt", root.join("web/up")).unwrap();
        symlink("local/out.txt", root.join("web/inside")).unwrap();
        (top, root)
    }

    fn read(b: &Beneath, rel: &str) -> Result<String, BeneathError> {
        let mut s = String::new();
        b.open_file(rel)?.read_to_string(&mut s).unwrap();
        Ok(s)
    }

    #[test]
    fn symlinks_out_of_the_directory_read_nothing() {
        let (_top, root) = tree();
        let b = Beneath::open(&root).unwrap();
        assert_eq!(read(&b, "web/local/out.txt").unwrap(), "inside");
        assert_eq!(read(&b, "/web/local/out.txt").unwrap(), "inside");
        for escape in [
            "web/root_link/etc/passwd",
            "web/root_link/proc/self/environ",
            "web/passwd",
            "web/up",
            "../secret.txt",
            "web/../../secret.txt",
        ] {
            assert!(
                matches!(read(&b, escape), Err(BeneathError::Escapes(_))),
                "{escape}: {:?}",
                read(&b, escape)
            );
            assert!(b.stat(escape).is_err(), "{escape}");
        }
        assert!(matches!(
            b.read_dir("web/root_link"),
            Err(BeneathError::Escapes(_))
        ));
        assert!(matches!(
            b.read_dir("web/root_link/etc"),
            Err(BeneathError::Escapes(_))
        ));
    }

    #[test]
    fn symlinks_inside_are_followed_and_listed_as_links() {
        let (_top, root) = tree();
        let b = Beneath::open(&root).unwrap();
        assert_eq!(read(&b, "web/inside").unwrap(), "inside");
        assert_eq!(b.stat("web/inside").unwrap().len(), 6);
        let entries = b.read_dir("web").unwrap();
        let names: Vec<&str> = entries.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["inside", "local", "passwd", "root_link", "up"]);
        let root_link = &entries[3].1;
        assert!(root_link.file_type().is_symlink());
        assert!(b.read_dir("").unwrap().iter().any(|(n, _)| n == "web"));
    }

    #[test]
    fn a_fifo_or_a_directory_is_refused_without_blocking() {
        let (_top, root) = tree();
        let fifo = CString::new(root.join("web/pipe").as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let b = Beneath::open(&root).unwrap();
        assert!(matches!(
            b.open_file("web/pipe"),
            Err(BeneathError::WrongKind {
                what: "is not a regular file",
                ..
            })
        ));
        assert!(matches!(
            b.open_file("web/local"),
            Err(BeneathError::WrongKind {
                what: "is a directory",
                ..
            })
        ));
        assert!(matches!(
            b.open_file("web/nothing"),
            Err(BeneathError::NotFound(_))
        ));
    }

    #[test]
    fn the_fallback_walk_follows_no_symlink_at_all() {
        let (_top, root) = tree();
        let dir = File::open(&root).unwrap();
        let fd = dir.as_raw_fd();
        let flags = libc::O_RDONLY | libc::O_CLOEXEC;
        assert!(walk_nofollow(fd, "web/local/out.txt", flags).is_ok());
        for refused in ["web/root_link/etc/passwd", "web/up", "web/inside", "../x"] {
            assert!(walk_nofollow(fd, refused, flags).is_err(), "{refused}");
        }
    }
}
