//! The host account a task runs as (`user = "..."`): found in the host's `/etc/passwd` and
//! `/etc/group`, as Nomad's executor finds it, without the C library's name service (the
//! static binary has none). [`parse`] is pure; [`lookup`] reads the two files.
//!
//! A `raw_exec` task runs with the account's uid, primary gid and supplementary groups, and
//! owns its task directories; a `docker` task hands the name to the engine, which looks it
//! up inside the image, and owns its directories only when the name is numeric
//! (`"1000"` or `"1000:1000"`), the one form that means the same on the host.

use std::path::PathBuf;

/// Where the host keeps its accounts.
const PASSWD: &str = "/etc/passwd";
/// Where the host keeps its groups.
const GROUP: &str = "/etc/group";

/// A task's user could not be found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("failed to identify user {user:?}: {reason}")]
pub struct UserError {
    /// The name asked for.
    pub user: String,
    /// Why.
    pub reason: String,
}

/// A host account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    /// Its name (the number asked for when the host has no entry for it).
    pub name: String,
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Supplementary group ids (the groups listing the account), primary first.
    pub groups: Vec<u32>,
    /// Home directory (empty when the host has no entry).
    pub home: PathBuf,
}

/// Finds `user` (a name, or a uid) in the host's account files.
pub fn lookup(user: &str) -> Result<Account, UserError> {
    let read = |path: &str| {
        std::fs::read_to_string(path).map_err(|e| UserError {
            user: user.to_string(),
            reason: format!("{path}: {e}"),
        })
    };
    let passwd = read(PASSWD)?;
    // A host without a group file still has its users' primary groups.
    let group = read(GROUP).unwrap_or_default();
    parse(user, &passwd, &group)
}

/// Finds `user` in `passwd` and its groups in `group` (both in their `/etc` formats). A
/// name must have an entry; a number without one is that uid with the same gid and no
/// supplementary groups.
pub fn parse(user: &str, passwd: &str, group: &str) -> Result<Account, UserError> {
    let unknown = || UserError {
        user: user.to_string(),
        reason: format!("user: unknown user {user}"),
    };
    if user.is_empty() {
        return Err(unknown());
    }
    let numeric: Option<u32> = user.parse().ok();
    let entry = passwd
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(':').collect::<Vec<_>>())
        .filter(|f| f.len() >= 7)
        .find(|f| f[0] == user || numeric.is_some_and(|n| f[2].parse() == Ok(n)));
    let account = match (entry, numeric) {
        (Some(f), _) => {
            let bad = |what: &str| UserError {
                user: user.to_string(),
                reason: format!("{PASSWD}: {what} of {:?} is not a number", f[0]),
            };
            Account {
                name: f[0].to_string(),
                uid: f[2].parse().map_err(|_| bad("uid"))?,
                gid: f[3].parse().map_err(|_| bad("gid"))?,
                groups: Vec::new(),
                home: PathBuf::from(f[5]),
            }
        }
        (None, Some(n)) => Account {
            name: user.to_string(),
            uid: n,
            gid: n,
            groups: Vec::new(),
            home: PathBuf::new(),
        },
        (None, None) => return Err(unknown()),
    };
    let mut groups = vec![account.gid];
    for f in group
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(':').collect::<Vec<_>>())
        .filter(|f| f.len() >= 4)
    {
        let member = f[3].split(',').any(|m| m.trim() == account.name);
        if let (true, Ok(gid)) = (member, f[2].parse::<u32>()) {
            if !groups.contains(&gid) {
                groups.push(gid);
            }
        }
    }
    Ok(Account { groups, ..account })
}

/// Who owns a task's directories when it runs as `user` under `driver`: the host account
/// for `raw_exec` and `exec` (whose default is `nobody`), a numeric `uid[:gid]` for `docker`, nobody else (`None` keeps the
/// agent's). A name the host lacks is `None` here; starting the task reports it.
pub fn dir_owner(driver: &str, user: &str) -> Option<(u32, u32)> {
    // An exec task runs as nobody when it names no one: its directories are nobody's.
    if driver == "exec" {
        let user = if user.is_empty() { "nobody" } else { user };
        return lookup(user).ok().map(|a| (a.uid, a.gid));
    }
    if user.is_empty() {
        return None;
    }
    match driver {
        "raw_exec" => lookup(user).ok().map(|a| (a.uid, a.gid)),
        "docker" => {
            let (uid, gid) = match user.split_once(':') {
                Some((u, g)) => (u.parse().ok()?, g.parse().ok()?),
                None => {
                    let uid = user.parse().ok()?;
                    (uid, uid)
                }
            };
            Some((uid, gid))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD_FILE: &str = "\
root:x:0:0:root:/root:/bin/bash
# a comment
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
app:x:1001:1002:App:/srv/app:/bin/sh
broken:x:abc:1:b:/:/bin/sh
";
    const GROUP_FILE: &str = "\
root:x:0:
nogroup:x:65534:
app:x:1002:
docker:x:998:app,other
audio:x:29:other
video:x:44: app
";

    #[test]
    fn a_name_finds_its_ids_home_and_groups() {
        let a = parse("app", PASSWD_FILE, GROUP_FILE).unwrap();
        assert_eq!((a.uid, a.gid), (1001, 1002));
        assert_eq!(a.home, PathBuf::from("/srv/app"));
        assert_eq!(a.groups, vec![1002, 998, 44]);
        let n = parse("nobody", PASSWD_FILE, GROUP_FILE).unwrap();
        assert_eq!((n.uid, n.gid, n.groups), (65534, 65534, vec![65534]));
    }

    #[test]
    fn a_number_finds_its_entry_or_stands_for_itself() {
        let a = parse("1001", PASSWD_FILE, GROUP_FILE).unwrap();
        assert_eq!(a.name, "app");
        let n = parse("4242", PASSWD_FILE, GROUP_FILE).unwrap();
        assert_eq!((n.uid, n.gid, n.groups), (4242, 4242, vec![4242]));
    }

    #[test]
    fn an_unknown_or_broken_entry_is_an_error_naming_the_user() {
        let e = parse("ghost", PASSWD_FILE, GROUP_FILE).unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed to identify user \"ghost\": user: unknown user ghost"
        );
        let e = parse("broken", PASSWD_FILE, GROUP_FILE).unwrap_err();
        assert!(e.to_string().contains("uid of \"broken\""), "{e}");
        assert!(parse("", PASSWD_FILE, GROUP_FILE).is_err());
    }

    #[test]
    fn docker_directories_are_owned_only_by_a_numeric_user() {
        assert_eq!(dir_owner("docker", "1000"), Some((1000, 1000)));
        assert_eq!(dir_owner("docker", "1000:50"), Some((1000, 50)));
        assert_eq!(dir_owner("docker", "www-data"), None);
        assert_eq!(dir_owner("raw_exec", ""), None);
        assert_eq!(dir_owner("mock", "root"), None);
        // Every Linux host has root.
        assert_eq!(dir_owner("raw_exec", "root"), Some((0, 0)));
    }
}
