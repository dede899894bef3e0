//! Named network namespaces, as `ip netns` keeps them: an empty file under
//! `/var/run/netns` with the namespace bind-mounted on it, so it outlives the thread that
//! made it and any process can join it by path. The directory is made a shared mount (as
//! `ip netns add` does), so a namespace mounted later is seen in mount namespaces made
//! earlier.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Where named namespaces live (`ip netns list` reads it).
pub const NETNS_DIR: &str = "/var/run/netns";

/// The filesystem magic of a namespace file (`NSFS_MAGIC`).
const NSFS_MAGIC: i64 = 0x6e73_6673;

fn cpath(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path holds a NUL byte"))
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Makes `dir` a shared mount point (binding it on itself first when it is none).
fn share_dir(dir: &Path) -> io::Result<()> {
    // Two allocations at once would bind the directory on itself twice.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    std::fs::create_dir_all(dir)?;
    let c = cpath(dir)?;
    let shared = |c: &CString| unsafe {
        libc::mount(
            std::ptr::null(),
            c.as_ptr(),
            std::ptr::null(),
            libc::MS_SHARED | libc::MS_REC,
            std::ptr::null(),
        )
    };
    if check(shared(&c)).is_ok() && is_mount_point(dir) {
        return Ok(());
    }
    check(unsafe {
        libc::mount(
            c.as_ptr(),
            c.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND | libc::MS_REC,
            std::ptr::null(),
        )
    })?;
    check(shared(&c))
}

/// Whether `path` is the root of a mount (its device differs from its parent's, or it is
/// listed in this process's mount table).
fn is_mount_point(path: &Path) -> bool {
    let Ok(canonical) = path.canonicalize() else {
        return false;
    };
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let wanted = canonical.display().to_string();
    table
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|mount_point| mount_point == wanted)
}

/// Whether `path` holds a network namespace (a bind-mounted namespace file).
pub fn is_netns(path: &Path) -> bool {
    let Ok(c) = cpath(path) else {
        return false;
    };
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    unsafe { libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type as i64 == NSFS_MAGIC }
}

/// Creates the network namespace `name` in `dir` and returns its path. A namespace already
/// there is kept (a client restarted finds its own again).
pub fn create(dir: &Path, name: &str) -> io::Result<PathBuf> {
    let path = named(dir, name)?;
    if is_netns(&path) {
        return Ok(path);
    }
    let target = cpath(&path)?;
    // unshare(CLONE_NEWNET) moves only the calling thread: a thread of its own makes the
    // namespace and pins it by the bind mount, then ends.
    let made = std::thread::spawn(move || -> io::Result<()> {
        check(unsafe { libc::unshare(libc::CLONE_NEWNET) })?;
        let own = CString::new("/proc/thread-self/ns/net").expect("no NUL");
        check(unsafe {
            libc::mount(
                own.as_ptr(),
                target.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            )
        })
    })
    .join()
    .unwrap_or_else(|_| Err(io::Error::other("the namespace thread panicked")));
    if let Err(e) = made {
        let _ = std::fs::remove_file(&path);
        return Err(e);
    }
    Ok(path)
}

/// Names the network namespace at `source` (another process's, `/proc/<pid>/ns/net`)
/// `name` in `dir` and returns its path; one already there is kept.
pub fn pin(dir: &Path, name: &str, source: &Path) -> io::Result<PathBuf> {
    let path = named(dir, name)?;
    if is_netns(&path) {
        return Ok(path);
    }
    let (from, to) = (cpath(source)?, cpath(&path)?);
    let bound = check(unsafe {
        libc::mount(
            from.as_ptr(),
            to.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    });
    if let Err(e) = bound {
        let _ = std::fs::remove_file(&path);
        return Err(e);
    }
    Ok(path)
}

/// The path of namespace `name` in `dir`, the directory shared and the (empty) file made.
fn named(dir: &Path, name: &str) -> io::Result<PathBuf> {
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} cannot name a network namespace"),
        ));
    }
    share_dir(dir)?;
    let path = dir.join(name);
    if !is_netns(&path) {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
    }
    Ok(path)
}

/// Removes a namespace made by [`create`] or [`pin`]: unmounted (lazily: a process still in it keeps
/// it alive until it leaves) and its file removed. Absent is removed.
pub fn remove(path: &Path) -> io::Result<()> {
    let c = cpath(path)?;
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
        let e = io::Error::last_os_error();
        // EINVAL: not a mount point (never mounted, or already unmounted).
        if !matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOENT)) {
            return Err(e);
        }
    }
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Opens a namespace to join it (`setns` in a task's child).
pub fn open(path: &Path) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    if !is_netns(path) {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{} is not a network namespace", path.display()),
        ));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)?;
    Ok(file.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> bool {
        unsafe { libc::geteuid() == 0 }
    }

    #[test]
    fn a_namespace_is_made_found_again_joined_and_removed() {
        if !root() {
            eprintln!("SKIP: making network namespaces needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let ns_dir = dir.path().join("netns");
        let path = create(&ns_dir, "alloc-1").unwrap();
        assert!(is_netns(&path));
        // Found again, not made twice.
        assert_eq!(create(&ns_dir, "alloc-1").unwrap(), path);
        // It is another namespace than this process's.
        let ours = std::fs::metadata("/proc/self/ns/net").unwrap();
        let fd = open(&path).unwrap();
        let theirs = std::fs::metadata(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&fd)
        ))
        .unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_ne!(ours.ino(), theirs.ino());
        drop(fd);
        remove(&path).unwrap();
        assert!(!path.exists());
        assert!(!is_netns(&path));
        remove(&path).unwrap();
        assert!(open(&path).is_err());
        let _ = remove_dir_mount(&ns_dir);
    }

    #[test]
    fn names_that_escape_the_directory_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["", "a/b", "..", ".hidden"] {
            assert!(create(dir.path(), bad).is_err(), "{bad:?}");
        }
    }

    /// Undoes [`share_dir`]'s self-bind so the temporary directory can go.
    fn remove_dir_mount(dir: &Path) -> io::Result<()> {
        let c = cpath(dir)?;
        check(unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) })
    }
}
