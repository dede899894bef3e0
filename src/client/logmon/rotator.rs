//! A task's output stream written to `alloc/logs/<task>.<stdout|stderr>.<n>`, a new file
//! once the current one holds `max_file_size` bytes, the oldest removed so `max_files`
//! remain (Nomad's file rotator).
//!
//! - Opening continues the file with the highest index, so a collector started again after
//!   a crash or a client restart appends where the last one stopped.
//! - Lines are not split across files where that can be helped: when the next line does not
//!   fit in the current file, the file ends at the last whole line and the line starts the
//!   next file. A line longer than a whole file fills files.
//! - Every write goes straight to the file (no buffer in this process), so what was read from
//!   the task is on the file system before the next read.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The stream of one task: `<task>.stdout` or `<task>.stderr`.
pub fn base_name(task: &str, stream: &str) -> String {
    format!("{task}.{stream}")
}

/// The index of `file_name` if it is a file of the stream `base` (`<base>.<n>`).
pub fn index_of(base: &str, file_name: &str) -> Option<u64> {
    let rest = file_name.strip_prefix(base)?.strip_prefix('.')?;
    if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    rest.parse().ok()
}

/// The files of the stream `base` in `dir`, oldest first, with their indexes.
pub fn files(dir: &Path, base: &str) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(index) = index_of(base, &name.to_string_lossy()) else {
            continue;
        };
        if entry.file_type()?.is_file() {
            found.push((index, entry.path()));
        }
    }
    found.sort();
    Ok(found)
}

/// Writes one stream into rotated files.
#[derive(Debug)]
pub struct Rotator {
    dir: PathBuf,
    base: String,
    max_files: u64,
    max_bytes: u64,
    index: u64,
    size: u64,
    file: File,
}

impl Rotator {
    /// Continue the stream `base` in `dir` (from its newest file, or `<base>.0`).
    pub fn open(dir: &Path, base: &str, max_files: u64, max_bytes: u64) -> io::Result<Rotator> {
        let index = files(dir, base)?.last().map_or(0, |(i, _)| *i);
        let (file, size) = open_at(dir, base, index)?;
        let r = Rotator {
            dir: dir.to_path_buf(),
            base: base.to_string(),
            max_files: max_files.max(1),
            max_bytes: max_bytes.max(1),
            index,
            size,
            file,
        };
        r.purge()?;
        Ok(r)
    }

    /// Keep `max_files` of `max_bytes` from now on (an in-place update of the task's
    /// `logs`): files beyond the newest `max_files` are removed at once, and the current file
    /// rotates once it reaches `max_bytes`.
    pub fn set_limits(&mut self, max_files: u64, max_bytes: u64) -> io::Result<()> {
        self.max_files = max_files.max(1);
        self.max_bytes = max_bytes.max(1);
        self.purge()
    }

    /// The index of the file being written.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// Append `data`, moving to the next file as the current one fills.
    pub fn write(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let room = self.max_bytes.saturating_sub(self.size) as usize;
            if data.len() <= room {
                self.put(data)?;
                break;
            }
            match data[..room].iter().rposition(|&b| b == b'\n') {
                // The whole lines that fit end this file.
                Some(end) => {
                    self.put(&data[..=end])?;
                    data = &data[end + 1..];
                }
                // A line longer than a file (or a full file): fill what is left.
                None if self.size == 0 || room == 0 => {
                    self.put(&data[..room])?;
                    data = &data[room..];
                }
                // The line fits in a file of its own: start one.
                None => {}
            }
            self.rotate()?;
        }
        Ok(())
    }

    fn put(&mut self, data: &[u8]) -> io::Result<()> {
        self.file.write_all(data)?;
        self.size += data.len() as u64;
        Ok(())
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.index += 1;
        let (file, size) = open_at(&self.dir, &self.base, self.index)?;
        self.file = file;
        self.size = size;
        self.purge()
    }

    /// Remove all but the newest `max_files` files.
    fn purge(&self) -> io::Result<()> {
        let files = files(&self.dir, &self.base)?;
        let keep_from = self.index.saturating_sub(self.max_files - 1);
        for (index, path) in files {
            if index < keep_from {
                match std::fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }
}

fn open_at(dir: &Path, base: &str, index: u64) -> io::Result<(File, u64)> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o644)
        // Not through a link someone put in the file's place.
        .custom_flags(libc::O_NOFOLLOW)
        .open(dir.join(format!("{base}.{index}")))?;
    let size = file.metadata()?.len();
    Ok((file, size))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents(dir: &Path, base: &str) -> Vec<(u64, String)> {
        files(dir, base)
            .unwrap()
            .into_iter()
            .map(|(i, p)| (i, std::fs::read_to_string(p).unwrap()))
            .collect()
    }

    #[test]
    fn files_rotate_at_the_size_and_keep_max_files() {
        let tmp = tempfile::tempdir().unwrap();
        let mut r = Rotator::open(tmp.path(), "web.stdout", 3, 10).unwrap();
        for i in 0..10 {
            r.write(format!("line {i}\n").as_bytes()).unwrap();
        }
        // Seven bytes a line, one line a file: ten files written, three kept.
        let kept = contents(tmp.path(), "web.stdout");
        assert_eq!(
            kept,
            vec![
                (7, "line 7\n".to_string()),
                (8, "line 8\n".to_string()),
                (9, "line 9\n".to_string())
            ]
        );
    }

    #[test]
    fn new_limits_remove_the_files_beyond_them_at_once_and_rotate_at_the_new_size() {
        let tmp = tempfile::tempdir().unwrap();
        let mut r = Rotator::open(tmp.path(), "web.stdout", 5, 7).unwrap();
        for i in 0..5 {
            r.write(format!("line {i}\n").as_bytes()).unwrap();
        }
        assert_eq!(contents(tmp.path(), "web.stdout").len(), 5);
        r.set_limits(2, 14).unwrap();
        let kept: Vec<u64> = contents(tmp.path(), "web.stdout")
            .iter()
            .map(|f| f.0)
            .collect();
        assert_eq!(kept, [3, 4]);
        // Two lines a file now, the current one included.
        r.write(b"line 5\nline 6\nline 7\n").unwrap();
        assert_eq!(
            contents(tmp.path(), "web.stdout"),
            vec![
                (4, "line 4\nline 5\n".to_string()),
                (5, "line 6\nline 7\n".to_string())
            ]
        );
    }

    #[test]
    fn lines_are_not_split_when_they_fit_in_a_file() {
        let tmp = tempfile::tempdir().unwrap();
        let mut r = Rotator::open(tmp.path(), "t.stdout", 10, 8).unwrap();
        r.write(b"aaaa\nbbbb\ncccc\n").unwrap();
        // A line arriving in two pieces: the second does not fit and starts a file.
        r.write(b"dd").unwrap();
        r.write(b"dd\n").unwrap();
        assert_eq!(
            contents(tmp.path(), "t.stdout"),
            vec![
                (0, "aaaa\n".to_string()),
                (1, "bbbb\n".to_string()),
                (2, "cccc\ndd".to_string()),
                (3, "dd\n".to_string())
            ]
        );
    }

    #[test]
    fn a_line_longer_than_a_file_fills_files() {
        let tmp = tempfile::tempdir().unwrap();
        let mut r = Rotator::open(tmp.path(), "t.stderr", 10, 4).unwrap();
        r.write(b"0123456789\n").unwrap();
        assert_eq!(
            contents(tmp.path(), "t.stderr"),
            vec![
                (0, "0123".to_string()),
                (1, "4567".to_string()),
                (2, "89\n".to_string())
            ]
        );
    }

    #[test]
    fn opening_again_continues_the_newest_file() {
        let tmp = tempfile::tempdir().unwrap();
        {
            let mut r = Rotator::open(tmp.path(), "t.stdout", 5, 8).unwrap();
            r.write(b"123456\nab\n").unwrap();
            assert_eq!(r.index(), 1);
        }
        // Another stream's and unrelated files are left alone.
        std::fs::write(tmp.path().join("t.stdout.x"), "no").unwrap();
        std::fs::write(tmp.path().join("u.stdout.9"), "no").unwrap();
        let mut r = Rotator::open(tmp.path(), "t.stdout", 5, 8).unwrap();
        assert_eq!(r.index(), 1);
        r.write(b"cd\n").unwrap();
        assert_eq!(
            contents(tmp.path(), "t.stdout"),
            vec![(0, "123456\n".to_string()), (1, "ab\ncd\n".to_string())]
        );
        assert!(tmp.path().join("u.stdout.9").exists());
    }

    #[test]
    fn only_numbered_files_of_the_stream_count() {
        assert_eq!(index_of("web.stdout", "web.stdout.12"), Some(12));
        assert_eq!(index_of("web.stdout", "web.stdout."), None);
        assert_eq!(index_of("web.stdout", "web.stdout.1a"), None);
        assert_eq!(index_of("web.stdout", "web.stdout.fifo"), None);
        assert_eq!(index_of("web", "web.stdout.1"), None);
    }
}
