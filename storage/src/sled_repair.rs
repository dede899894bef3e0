//! Repair of what sled 0.34 leaves behind when it cannot finish a page-table snapshot.
//!
//! sled writes its snapshot as `snap.<lsn>.generating` and renames it once complete. Opened
//! on a full disk, it fails writing that file and leaves it empty; every later open then
//! fails with "Read corrupted data", even after space returns, so a server restarted while
//! its disk was full could never start again. The file was never published, so removing it
//! loses nothing: every sled database here is opened through [`open_repairing`], which
//! removes such files and opens again when sled reports corruption.

use std::io;
use std::path::Path;

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
/// refused: a file being written by a live instance is never touched.
pub fn open_repairing(
    path: &Path,
    mut open: impl FnMut() -> sled::Result<sled::Db>,
) -> sled::Result<sled::Db> {
    match open() {
        Err(sled::Error::Corruption { .. })
            if remove_unfinished_snapshots(path).map_err(sled::Error::Io)? > 0 =>
        {
            open()
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Opens `path`, waiting (up to 10 s) while an earlier handle's background threads still
    /// hold sled's file lock: a dropped `Db` releases it asynchronously, so an open right
    /// after a drop can meet the lock instead of the state under test.
    fn open(path: &Path) -> sled::Result<sled::Db> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match sled::Config::new().path(path).flush_every_ms(None).open() {
                Err(sled::Error::Io(e))
                    if e.to_string().contains("could not acquire lock")
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                other => return other,
            }
        }
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
        assert!(
            open(&path).is_err(),
            "sled 0.34 refuses the database while the file is there"
        );
        let db = open_repairing(&path, || open(&path)).unwrap();
        assert_eq!(db.len(), 200);
        assert_eq!(db.get(199u64.to_be_bytes()).unwrap().unwrap().len(), 512);
        drop(db);
        assert_eq!(remove_unfinished_snapshots(&path).unwrap(), 0);
        assert_eq!(
            remove_unfinished_snapshots(&dir.path().join("missing")).unwrap(),
            0
        );
    }
}
