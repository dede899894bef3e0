//! Repair of what sled 0.34 leaves behind when it cannot finish a page-table snapshot.
//!
//! sled writes its snapshot as `snap.<lsn>.generating` and renames it once complete. Opened
//! on a full disk, it fails writing that file and leaves it empty; every later open then
//! fails with "Read corrupted data", even after space returns, so a server restarted while
//! its disk was full could never start again. The file was never published, so removing it
//! loses nothing: every sled database here is opened through [`open_repairing`], which
//! removes such files and opens again when sled reports corruption.
//!
//! The same call waits, for a bounded time, for the database's file lock: a `Db` dropped in
//! this process releases the lock only once sled's background threads for it are done, so an
//! open right after a drop (a store reopened in place, a restart inside one process) can meet
//! a lock that is about to go. A lock still held after [`LOCK_WAIT`] (another live process on
//! the same directory) is returned as sled's error.

use std::io;
use std::path::Path;
use std::time::Duration;

/// How long an open waits for a file lock held by a handle that is going away.
pub const LOCK_WAIT: Duration = Duration::from_secs(10);

/// How often a waiting open tries again.
const LOCK_POLL: Duration = Duration::from_millis(10);

/// Removes every unfinished sled snapshot (`snap.*.generating`) in the database directory
/// `path`; how many. A directory that does not exist yet has none.
pub fn remove_unfinished_snapshots(path: &Path) -> io::Result<usize> {
    let entries = match std::fs::read_dir(path) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut removed = 0;
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("snap.") && name.ends_with(".generating") {
            let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
            std::fs::remove_file(entry.path())?;
            tracing::warn!(
                file = %entry.path().display(),
                size,
                "removed an unfinished sled snapshot (a write failed, e.g. a full disk)"
            );
            removed += 1;
        }
    }
    Ok(removed)
}

/// Opens a sled database at `path` with `open`; when sled answers that it is corrupted and
/// an unfinished snapshot was there, removes it and opens once more. Only after sled has
/// refused: a file being written by a live instance is never touched. While the file lock is
/// held, tries again for up to [`LOCK_WAIT`].
pub fn open_repairing(
    path: &Path,
    open: impl FnMut() -> sled::Result<sled::Db>,
) -> sled::Result<sled::Db> {
    let attempts = (LOCK_WAIT.as_millis() / LOCK_POLL.as_millis()) as u32;
    let mut open = waiting_for_lock(open, attempts);
    match open() {
        Err(sled::Error::Corruption { .. })
            if remove_unfinished_snapshots(path).map_err(sled::Error::Io)? > 0 =>
        {
            open()
        }
        other => other,
    }
}

/// Whether sled refused because another handle holds the database's file lock. sled wraps
/// the `WouldBlock` of `flock` in an error of kind `Other`, so both are recognised.
fn is_lock_held(error: &sled::Error) -> bool {
    match error {
        sled::Error::Io(e) => {
            e.kind() == io::ErrorKind::WouldBlock
                || e.to_string().contains("could not acquire lock")
        }
        _ => false,
    }
}

/// `open`, tried up to `attempts` times [`LOCK_POLL`] apart while the lock is held.
fn waiting_for_lock(
    mut open: impl FnMut() -> sled::Result<sled::Db>,
    attempts: u32,
) -> impl FnMut() -> sled::Result<sled::Db> {
    move || {
        let mut tried = 1;
        loop {
            match open() {
                Err(e) if is_lock_held(&e) && tried < attempts => {
                    if tried == 1 {
                        tracing::debug!("sled database locked by a closing handle; waiting");
                    }
                    tried += 1;
                    std::thread::sleep(LOCK_POLL);
                }
                other => return other,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(path: &Path) -> sled::Result<sled::Db> {
        open_repairing(path, || {
            sled::Config::new().path(path).flush_every_ms(None).open()
        })
    }

    fn open_unrepaired(path: &Path) -> sled::Result<sled::Db> {
        sled::Config::new().path(path).flush_every_ms(None).open()
    }

    #[test]
    fn an_unfinished_snapshot_is_removed_and_the_database_opens_with_its_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        {
            let db = open(&path).unwrap();
            for i in 0..200u64 {
                db.insert(i.to_be_bytes(), vec![7u8; 512]).unwrap();
            }
            db.flush().unwrap();
        }
        // What a failed snapshot write at open on a full disk leaves.
        std::fs::write(path.join("snap.0000000000FFFFFF.generating"), b"").unwrap();
        // The dropped handle may still hold the file lock for a moment: wait it out, so the
        // answer is about the file and not the lock.
        let unrepaired = waiting_for_lock(|| open_unrepaired(&path), 1000)();
        assert!(
            matches!(unrepaired, Err(sled::Error::Corruption { .. })),
            "sled 0.34 refuses the database while the file is there: {:?}",
            unrepaired.map(|_| "opened")
        );
        let db = open(&path).unwrap();
        assert_eq!(db.len(), 200);
        assert_eq!(db.get(199u64.to_be_bytes()).unwrap().unwrap().len(), 512);
        drop(db);
        assert_eq!(remove_unfinished_snapshots(&path).unwrap(), 0);
        assert_eq!(
            remove_unfinished_snapshots(&dir.path().join("missing")).unwrap(),
            0
        );
    }

    #[test]
    fn an_open_waits_for_a_lock_that_is_being_released_and_reports_one_that_stays() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let held = open(&path).unwrap();
        // Held for good: the error is sled's lock error, after the bounded attempts.
        let refused = waiting_for_lock(|| open_unrepaired(&path), 3)().unwrap_err();
        assert!(is_lock_held(&refused), "{refused}");
        // Released while waiting: the open succeeds.
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(held);
        });
        let db = open(&path).unwrap();
        release.join().unwrap();
        drop(db);
        assert!(!is_lock_held(&sled::Error::Unsupported("x".into())));
    }
}
