//! Pseudo-terminals for `alloc exec -t`: the command gets the terminal's far end as its
//! stdin, stdout and stderr, in a session of its own whose controlling terminal it is; the
//! agent reads and writes the near end ([`Master`]).

use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::process::Stdio;

/// The agent's end of a command's terminal.
#[derive(Debug)]
pub struct Master {
    fd: OwnedFd,
}

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

impl Master {
    /// What the command writes to its terminal.
    pub fn reader(&self) -> io::Result<tokio::fs::File> {
        Ok(tokio::fs::File::from_std(File::from(self.fd.try_clone()?)))
    }

    /// What the command reads from its terminal (a handle of its own, so a pending read
    /// never holds up a write).
    pub fn writer(&self) -> io::Result<tokio::fs::File> {
        Ok(tokio::fs::File::from_std(File::from(self.fd.try_clone()?)))
    }

    /// Tell the command its terminal is `rows` × `cols`.
    pub fn resize(&self, rows: u16, cols: u16) -> io::Result<()> {
        let size = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCSWINSZ reads the winsize we own; the fd is ours and open.
        check(unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::TIOCSWINSZ, &size) })?;
        Ok(())
    }
}

/// Gives `cmd` a new terminal (its stdin, stdout and stderr) and a session of its own; the
/// agent's end comes back.
pub fn attach(cmd: &mut tokio::process::Command) -> io::Result<Master> {
    // SAFETY: posix_openpt returns a new fd or -1; the fd is owned right after.
    let fd = check(unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) })?;
    // SAFETY: `fd` is a fresh descriptor nothing else owns.
    let master = Master {
        fd: unsafe { OwnedFd::from_raw_fd(fd) },
    };
    let raw = master.fd.as_raw_fd();
    // SAFETY: grantpt/unlockpt act on the open master; ptsname_r writes at most `len` bytes
    // into our buffer and NUL-terminates it.
    let path = unsafe {
        check(libc::grantpt(raw))?;
        check(libc::unlockpt(raw))?;
        let mut buf = [0 as libc::c_char; 128];
        let rc = libc::ptsname_r(raw, buf.as_mut_ptr(), buf.len());
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned()
    };
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY)
        .open(&path)?;
    cmd.stdin(Stdio::from(slave.try_clone()?))
        .stdout(Stdio::from(slave.try_clone()?))
        .stderr(Stdio::from(slave));
    // SAFETY: between fork and exec only async-signal-safe calls: setsid makes the child a
    // session (and process group) leader, TIOCSCTTY makes its stdin, the terminal, the
    // session's controlling terminal.
    unsafe {
        cmd.pre_exec(|| {
            check(libc::setsid())?;
            check(libc::ioctl(0, libc::TIOCSCTTY, 0))?;
            Ok(())
        });
    }
    Ok(master)
}
