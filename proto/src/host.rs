//! The host's users and groups, as the daemon and the CLI read them: `/etc/group`,
//! `/etc/passwd` and `/proc`. Who may use the host socket is decided by the daemon
//! (`auth::HostPolicy`); this only reads what the system says.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A group of `/etc/group`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub name: String,
    pub gid: u32,
    /// The users listed in it (not those whose primary group it is).
    pub members: Vec<String>,
}

fn groups() -> Vec<Group> {
    // silent-ok: without /etc/group there are no groups, which callers report as missing.
    let text = std::fs::read_to_string("/etc/group").unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(':');
            let name = fields.next()?.to_string();
            let gid = fields.nth(1)?.parse().ok()?;
            let members = fields.next().unwrap_or_default().split(',').filter(|m| !m.is_empty()).map(String::from);
            Some(Group { name, gid, members: members.collect() })
        })
        .collect()
}

/// The group named `name`.
pub fn group_named(name: &str) -> Option<Group> {
    groups().into_iter().find(|group| group.name == name)
}

/// The group with id `gid`.
pub fn group_with_id(gid: u32) -> Option<Group> {
    groups().into_iter().find(|group| group.gid == gid)
}

/// The login name of `uid`, from `/etc/passwd`.
pub fn user_name(uid: u32) -> Option<String> {
    // silent-ok: without /etc/passwd the user has no name we can give.
    let text = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    text.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        (fields.nth(1)?.parse() == Ok(uid)).then(|| name.to_string())
    })
}

/// The groups process `pid` (`self` for this one) holds: its primary group and its
/// supplementary ones, from `/proc/{pid}/status` (a socket's peer credentials carry only
/// the first).
pub fn process_groups(pid: &str) -> Vec<u32> {
    // silent-ok: a process that exited or hid its status has no groups we can vouch for.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str, index: usize| {
        status.lines().find_map(|line| line.strip_prefix(name)).and_then(|ids| ids.split_whitespace().nth(index))
    };
    let mut held: Vec<u32> = status
        .lines()
        .find_map(|line| line.strip_prefix("Groups:"))
        .map(|ids| ids.split_whitespace().filter_map(|id| id.parse().ok()).collect())
        .unwrap_or_default();
    // The effective gid (the second of `Gid:`).
    if let Some(gid) = field("Gid:", 1).and_then(|gid| gid.parse().ok()) {
        held.insert(0, gid);
    }
    held
}

/// This process's user id.
pub fn my_uid() -> Option<u32> {
    std::fs::metadata("/proc/self").ok().map(|meta| meta.uid())
}

/// The first folder on the way to `path` that a member of group `gid` (not its owner, not
/// root) cannot pass through, if any: what keeps the group from a socket its mode opens to it.
pub fn folder_closed_to_group(path: &Path, gid: u32) -> Option<PathBuf> {
    let mut folders: Vec<&Path> = path.ancestors().skip(1).collect();
    folders.reverse();
    folders.into_iter().find_map(|folder| {
        let meta = std::fs::metadata(folder).ok()?;
        let mode = meta.mode();
        let passes = mode & 0o001 != 0 || (meta.gid() == gid && mode & 0o010 != 0);
        (!passes).then(|| folder.to_path_buf())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_folder_closed_to_others_is_found_on_the_way() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (open, closed) = (dir.path().join("open"), dir.path().join("open/closed"));
        std::fs::create_dir_all(&closed).expect("folders");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o711)).expect("chmod");
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o750)).expect("chmod");
        let unrelated = 4_000_000;
        assert_eq!(folder_closed_to_group(&closed.join("s.sock"), unrelated), Some(closed.clone()));
        let own = std::fs::metadata(&closed).expect("meta").gid();
        // The folder's group passes through it (the test's /tmp and its parents are open).
        assert_eq!(folder_closed_to_group(&closed.join("s.sock"), own), None);
        assert_eq!(folder_closed_to_group(&open.join("s.sock"), unrelated), None);
    }

    #[test]
    fn this_process_holds_its_own_group() {
        let gid = std::fs::metadata("/proc/self").expect("proc").gid();
        assert!(process_groups("self").contains(&gid));
        assert_eq!(user_name(0).as_deref(), Some("root"));
        assert_eq!(group_with_id(0).map(|group| group.name).as_deref(), Some("root"));
    }
}
