//! Signal names as Nomad takes them (`SIGUSR1`, any case; teamster also takes `USR1`) and
//! their numbers on this platform, for `alloc signal` and the `Signaling` task event.

/// Every signal a task may be sent, by its name.
const SIGNALS: &[(&str, libc::c_int)] = &[
    ("SIGABRT", libc::SIGABRT),
    ("SIGALRM", libc::SIGALRM),
    ("SIGBUS", libc::SIGBUS),
    ("SIGCHLD", libc::SIGCHLD),
    ("SIGCONT", libc::SIGCONT),
    ("SIGFPE", libc::SIGFPE),
    ("SIGHUP", libc::SIGHUP),
    ("SIGILL", libc::SIGILL),
    ("SIGINT", libc::SIGINT),
    ("SIGIO", libc::SIGIO),
    ("SIGIOT", libc::SIGIOT),
    ("SIGKILL", libc::SIGKILL),
    ("SIGPIPE", libc::SIGPIPE),
    ("SIGPROF", libc::SIGPROF),
    ("SIGQUIT", libc::SIGQUIT),
    ("SIGSEGV", libc::SIGSEGV),
    ("SIGSTOP", libc::SIGSTOP),
    ("SIGSYS", libc::SIGSYS),
    ("SIGTERM", libc::SIGTERM),
    ("SIGTRAP", libc::SIGTRAP),
    ("SIGTSTP", libc::SIGTSTP),
    ("SIGTTIN", libc::SIGTTIN),
    ("SIGTTOU", libc::SIGTTOU),
    ("SIGURG", libc::SIGURG),
    ("SIGUSR1", libc::SIGUSR1),
    ("SIGUSR2", libc::SIGUSR2),
    ("SIGVTALRM", libc::SIGVTALRM),
    ("SIGWINCH", libc::SIGWINCH),
    ("SIGXCPU", libc::SIGXCPU),
    ("SIGXFSZ", libc::SIGXFSZ),
];

/// The signal `name` names (`SIGUSR1`, `sigusr1` or `USR1`), as its canonical name and
/// number; `None` for anything else.
pub fn parse(name: &str) -> Option<(&'static str, i32)> {
    let upper = name.trim().to_ascii_uppercase();
    let full = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    SIGNALS
        .iter()
        .find(|(n, _)| *n == full)
        .map(|(n, sig)| (*n, *sig))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_read_as_nomad_reads_them() {
        assert_eq!(parse("SIGUSR1"), Some(("SIGUSR1", libc::SIGUSR1)));
        assert_eq!(parse("sigterm"), Some(("SIGTERM", libc::SIGTERM)));
        assert_eq!(parse("HUP"), Some(("SIGHUP", libc::SIGHUP)));
        assert_eq!(parse(" SIGKILL "), Some(("SIGKILL", 9)));
        for bad in ["", "SIG", "SIGFOO", "USR3", "9", "SIGUSR1x"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
