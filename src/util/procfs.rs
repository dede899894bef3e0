//! What `/proc` says of a process: enough to tell a live process from a reused pid, and to
//! find the processes descended from one.

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

/// The parent pid of `pid` (`/proc/<pid>/stat` field 4), if it is alive.
pub fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// `root` and every process descended from it, as `/proc` lists them now (parents before
/// their children).
pub fn tree_of(root: i32) -> Vec<i32> {
    let parents: Vec<(i32, i32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| Some((pid, parent_of(pid)?)))
        .collect();
    tree_from(root, &parents)
}

/// `root` and its descendants in a list of (pid, parent pid) pairs.
fn tree_from(root: i32, parents: &[(i32, i32)]) -> Vec<i32> {
    let mut tree = vec![root];
    let mut next = 0;
    while let Some(&pid) = tree.get(next) {
        tree.extend(
            parents
                .iter()
                .filter(|(child, parent)| *parent == pid && !tree.contains(child))
                .map(|(child, _)| *child)
                .collect::<Vec<_>>(),
        );
        next += 1;
    }
    tree
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_tree_holds_the_root_and_every_descendant_once() {
        let parents = [(10, 1), (11, 10), (12, 11), (13, 1), (14, 10)];
        assert_eq!(super::tree_from(10, &parents), vec![10, 11, 14, 12]);
        assert_eq!(super::tree_from(13, &parents), vec![13]);
        let me = std::process::id() as i32;
        assert_eq!(super::tree_of(me).first(), Some(&me));
        assert!(super::parent_of(me).is_some());
    }

    #[test]
    fn this_process_has_a_start_time_and_no_pid_zero() {
        let me = std::process::id() as i32;
        assert!(super::start_ticks(me).is_some());
        assert_eq!(super::start_ticks(me), super::start_ticks(me));
        assert_eq!(super::start_ticks(0), None);
    }
}
