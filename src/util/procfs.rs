//! What `/proc` says of a process: enough to tell a live process from a reused pid.

/// The kernel start time of `pid` in clock ticks since boot (`/proc/<pid>/stat` field 22),
/// if it is alive and not a zombie. A pid and its start time name one process for good.
pub fn start_ticks(pid: i32) -> Option<u64> {
    if pid <= 0 {
        return None;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; fields after it follow the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); field 22 is rest[19].
    if fields.first() == Some(&"Z") || fields.first() == Some(&"X") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_has_a_start_time_and_no_pid_zero() {
        let me = std::process::id() as i32;
        assert!(super::start_ticks(me).is_some());
        assert_eq!(super::start_ticks(me), super::start_ticks(me));
        assert_eq!(super::start_ticks(0), None);
    }
}
