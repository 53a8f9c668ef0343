//! Folders the daemon shares with containers (`sessions/{id}/data`, `data/ipc/{context}/{slot}/…`,
//! the LLM gateway's socket folder): created, opened and handed to the containers' uid without
//! ever following a link.
//!
//! A container writes in these folders, so it can put a symlink where the daemon expects a
//! folder or a file, pointing anywhere on the host. Every operation here starts from a
//! descriptor of a folder only the daemon writes, opens each step with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, checks with `fstat` that it got a folder
//! (or a regular file) owned as expected, and then works on descriptors only (`fchown`,
//! `fchmod`, `renameat`, `unlinkat`). A folder that is not what it should be is removed (the
//! link itself, never what it points to) and made again. This module never widens a mode to
//! "everyone": without root, containers reach a shared folder through the daemon's group.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::base::auth::CONTAINER_UID;

/// How containers get write access to a shared folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// The daemon runs as root: the folder is owned by the containers' uid, mode 0700.
    Owner,
    /// The daemon cannot chown: the folder stays the daemon's, mode 2770 with the daemon's
    /// group, and every container runs with that group as a supplementary group.
    Group(u32),
}

/// How this daemon shares folders (by its effective uid).
pub fn access() -> Access {
    if rustix::process::geteuid().is_root() {
        Access::Owner
    } else {
        Access::Group(rustix::process::getegid().as_raw())
    }
}

/// Who may own a shared folder: the containers' uid or the daemon itself.
fn owned_as_expected(stat: &rustix::fs::Stat) -> bool {
    stat.st_uid == CONTAINER_UID || stat.st_uid == rustix::process::geteuid().as_raw()
}

fn beneath() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS
}

/// Opens a folder the daemon itself created and only it writes (e.g. `data/ipc`); its last
/// component must not be a link.
pub fn open_trusted(path: &Path) -> std::io::Result<OwnedFd> {
    let fd =
        rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
    Ok(fd)
}

/// Opens the folder `relative` beneath `parent` for reading, never through a link; `None` when
/// it does not exist or is not a real folder there.
pub fn open_dir(parent: impl AsFd, relative: impl AsRef<Path>) -> std::io::Result<Option<OwnedFd>> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat2(parent, relative.as_ref(), flags, Mode::empty(), beneath()) {
        Ok(fd) => Ok(Some(fd)),
        Err(Errno::NOENT | Errno::LOOP | Errno::NOTDIR | Errno::XDEV) => Ok(None),
        Err(errno) => Err(errno.into()),
    }
}

/// Who a folder made by [`ensure_dir`] is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// The daemon's own, mode 0700: containers never see it (e.g. `data/ipc/{context}`).
    Daemon,
    /// The daemon's, mode 0755: a container's mount root it may read but not change, so it
    /// cannot swap the folders inside for links (e.g. `data/ipc/{context}/{slot}`).
    DaemonReadable,
    /// Writable by containers, as [`access`] says (e.g. `results/`, `sessions/{id}/data`).
    Containers,
}

/// Makes sure `name` beneath `parent` is a real folder for `owner` and returns it open. A link,
/// file or anything else found at `name` is removed (itself, never what a link points to) and
/// the folder made again; a folder owned by someone unexpected is refused.
pub fn ensure_dir(parent: impl AsFd, name: &OsStr, owner: Owner) -> std::io::Result<OwnedFd> {
    let parent = parent.as_fd();
    let mode = match owner {
        Owner::Daemon => 0o700,
        Owner::DaemonReadable => 0o755,
        Owner::Containers => 0o700,
    };
    let fd = match open_dir(parent, name)? {
        Some(fd) => fd,
        None => {
            match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(mode)) {
                Ok(()) => {}
                Err(Errno::EXIST) => {
                    // Something that is not a folder: a link (maybe to a host folder) or a
                    // file. Remove the entry itself; unlinkat never follows a link.
                    tracing::warn!(
                        name = %name.to_string_lossy(),
                        "a shared folder was replaced by something else (a link?); removing it and making the folder again"
                    );
                    rustix::fs::unlinkat(parent, name, AtFlags::empty())?;
                    rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(mode))?;
                }
                Err(errno) => return Err(errno.into()),
            }
            open_dir(parent, name)?
                .ok_or_else(|| std::io::Error::other("the folder vanished right after it was made"))?
        }
    };
    let stat = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::Directory || !owned_as_expected(&stat) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "{} is owned by uid {}, neither the daemon's nor the containers'",
                name.to_string_lossy(),
                stat.st_uid
            ),
        ));
    }
    match owner {
        Owner::Daemon | Owner::DaemonReadable => {
            if stat.st_uid != rustix::process::geteuid().as_raw() {
                // A container's folder where the daemon's own belongs: never trusted.
                return Err(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!("{} belongs to the containers' uid, not the daemon", name.to_string_lossy()),
                ));
            }
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))?;
        }
        Owner::Containers => hand_over(&fd)?,
    }
    Ok(fd)
}

/// Replaces `name` in `dir` (a folder of the daemon's own) with `bytes`, readable by all
/// (0644): written beside it, then renamed over it, so a reader sees the old file or the new.
pub fn write_readable(dir: impl AsFd, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let dir = dir.as_fd();
    let draft = format!(".{name}.new");
    match rustix::fs::unlinkat(dir, draft.as_str(), AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => {}
        Err(errno) => return Err(errno.into()),
    }
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir, draft.as_str(), flags, Mode::from_raw_mode(0o644))?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o644))?;
    let mut file = std::fs::File::from(fd);
    file.write_all(bytes)?;
    rustix::fs::renameat(dir, draft.as_str(), dir, name)?;
    Ok(())
}

/// Hands an open folder to the containers' uid (see [`Access`]), by descriptor.
pub fn hand_over(fd: impl AsFd) -> std::io::Result<()> {
    hand_over_as(fd, 0o700, 0o2770)
}

/// Hands an open file the daemon made to the containers' uid, as [`hand_over`] does folders.
pub fn hand_over_file(fd: impl AsFd) -> std::io::Result<()> {
    hand_over_as(fd, 0o600, 0o660)
}

/// The bytes the files below the folder `path` take, counted without following a link (a
/// container's folder, which it may fill with links and deep trees: at most 64 levels).
pub fn size_below(path: &Path) -> std::io::Result<u64> {
    fn below(dir: &OwnedFd, depth: usize) -> std::io::Result<u64> {
        let mut total = 0;
        for entry in rustix::fs::Dir::read_from(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            let stat = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(stat) => stat,
                // Gone meanwhile.
                Err(Errno::NOENT) => continue,
                Err(error) => return Err(error.into()),
            };
            total += (stat.st_blocks as u64) * 512;
            if FileType::from_raw_mode(stat.st_mode) == FileType::Directory && depth < 64 {
                let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                match rustix::fs::openat(dir, name, flags, Mode::empty()) {
                    Ok(child) => total += below(&child, depth + 1)?,
                    Err(Errno::NOENT) => {}
                    Err(error) => return Err(error.into()),
                }
            }
        }
        Ok(total)
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    below(&rustix::fs::open(path, flags, Mode::empty())?, 0)
}

/// Lets the containers' uid connect to the socket the daemon bound at `path`, in a folder only
/// the daemon writes in (its own, or one handed over): the socket is the containers' uid's and
/// 0600, or (without root) the daemon's group's and 0660. Never through a link.
pub fn share_socket(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = match access() {
        Access::Owner => {
            std::os::unix::fs::lchown(path, Some(CONTAINER_UID), Some(CONTAINER_UID))?;
            0o600
        }
        Access::Group(gid) => {
            std::os::unix::fs::lchown(path, None, Some(gid))?;
            0o660
        }
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// Owned by the containers' uid with `owner_mode`, or (without root) the daemon's group with
/// `group_mode`.
fn hand_over_as(fd: impl AsFd, owner_mode: u32, group_mode: u32) -> std::io::Result<()> {
    match access() {
        Access::Owner => {
            let uid = rustix::process::Uid::from_raw(CONTAINER_UID);
            let gid = rustix::process::Gid::from_raw(CONTAINER_UID);
            rustix::fs::fchown(&fd, Some(uid), Some(gid))?;
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(owner_mode))?;
        }
        Access::Group(gid) => {
            rustix::fs::fchown(&fd, None, Some(rustix::process::Gid::from_raw(gid)))?;
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(group_mode))?;
        }
    }
    Ok(())
}

/// Opens the regular file `name` in `dir` for reading, never through a link and never
/// blocking (a FIFO is refused, not waited on); `Ok(None)` when it is not there.
pub fn open_regular(dir: impl AsFd, name: &OsStr) -> std::io::Result<Option<(OwnedFd, rustix::fs::Stat)>> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let fd = match rustix::fs::openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(Errno::LOOP) => {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "it is a symlink, not a file"));
        }
        Err(errno) => return Err(errno.into()),
    };
    let stat = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "it is not a regular file"));
    }
    Ok(Some((fd, stat)))
}

/// Reads the regular file `name` in `dir` (see [`open_regular`]) if it is at most `cap` bytes.
pub fn read_regular(dir: impl AsFd, name: &OsStr, cap: u64) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read as _;
    let Some((fd, stat)) = open_regular(dir, name)? else { return Ok(None) };
    if stat.st_size as u64 > cap {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("it is {} bytes, more than the {cap} allowed", stat.st_size),
        ));
    }
    let mut bytes = Vec::with_capacity(stat.st_size as usize);
    std::fs::File::from(fd).take(cap + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(std::io::Error::new(std::io::ErrorKind::FileTooLarge, format!("it grew past {cap} bytes")));
    }
    Ok(Some(bytes))
}

/// The names in an open folder, without `.` and `..`.
pub fn names(dir: impl AsFd) -> std::io::Result<Vec<std::ffi::OsString>> {
    use std::os::unix::ffi::OsStrExt as _;
    let mut found = vec![];
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            found.push(OsStr::from_bytes(name).to_os_string());
        }
    }
    Ok(found)
}

/// Opens the socket `name` in `dir` as a path only (`O_PATH`), never through a link; `None`
/// when it is not there. Connecting to `/proc/self/fd/{fd}` then reaches that very socket,
/// whatever a container puts at `name` meanwhile.
pub fn open_socket(dir: impl AsFd, name: &OsStr) -> std::io::Result<Option<OwnedFd>> {
    let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(errno) => return Err(errno.into()),
    };
    // With O_PATH | O_NOFOLLOW a link opens as itself: its type gives it away.
    let stat = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::Socket {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "it is not a socket"));
    }
    Ok(Some(fd))
}

/// Removes the file `name` from `dir` (the entry itself, whatever it is but a folder).
pub fn remove(dir: impl AsFd, name: &OsStr) -> std::io::Result<()> {
    match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(errno) => Err(errno.into()),
    }
}

/// What [`copy_out`] copied, or why it stopped.
#[derive(Debug, thiserror::Error)]
pub enum CopyOut {
    /// Something in the tree may not be copied (a link, a device, too much): in a sentence
    /// naming it by its path in the tree.
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Copies the tree `relative` beneath `parent` (a folder a container wrote) into `to` (made
/// here, in a folder of the daemon's own), by descriptor and never through a link: a link, a
/// FIFO, a device or a socket anywhere in it is refused, and so is more than `max_files` files
/// or `max_bytes` bytes in all. Answers the files and bytes copied; `Ok(None)` when `relative`
/// is not a folder there.
pub fn copy_out(
    parent: impl AsFd,
    relative: &Path,
    to: &Path,
    max_files: usize,
    max_bytes: u64,
) -> Result<Option<(usize, u64)>, CopyOut> {
    let Some(from) = open_dir(parent, relative)? else { return Ok(None) };
    let mut counted = (0usize, 0u64);
    copy_dir(from.as_fd(), to, Path::new(""), (max_files, max_bytes), &mut counted, 0)?;
    Ok(Some(counted))
}

fn copy_dir(
    from: std::os::fd::BorrowedFd<'_>,
    to: &Path,
    shown: &Path,
    most: (usize, u64),
    counted: &mut (usize, u64),
    depth: usize,
) -> Result<(), CopyOut> {
    use std::io::Read as _;
    if depth >= MAX_DEPTH {
        return Err(CopyOut::Refused(format!("`{}` is nested too deep", shown.display())));
    }
    std::fs::create_dir(to)?;
    for name in names(from)? {
        let path = shown.join(&name);
        let stat =
            rustix::fs::statat(from, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW).map_err(std::io::Error::from)?;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Directory => {
                let Some(dir) = open_dir(from, &name)? else {
                    return Err(CopyOut::Refused(format!("`{}` changed while it was copied", path.display())));
                };
                copy_dir(dir.as_fd(), &to.join(&name), &path, most, counted, depth + 1)?;
            }
            FileType::RegularFile => {
                let Some((fd, _)) = open_regular(from, &name)? else {
                    return Err(CopyOut::Refused(format!("`{}` changed while it was copied", path.display())));
                };
                let room = most.1.saturating_sub(counted.1);
                let mut bytes = vec![];
                std::fs::File::from(fd).take(room.saturating_add(1)).read_to_end(&mut bytes)?;
                counted.0 += 1;
                counted.1 += bytes.len() as u64;
                if counted.0 > most.0 || counted.1 > most.1 {
                    return Err(CopyOut::Refused(format!("it holds more than {} files or {} bytes", most.0, most.1)));
                }
                std::fs::write(to.join(&name), bytes)?;
            }
            FileType::Symlink => {
                return Err(CopyOut::Refused(format!("`{}` is a symbolic link", path.display())));
            }
            _ => return Err(CopyOut::Refused(format!("`{}` is not a regular file", path.display()))),
        }
    }
    Ok(())
}

/// Folders deeper than this are left (with what holds them) by [`remove_tree`].
const MAX_DEPTH: usize = 64;

/// Removes `name` beneath `parent` and everything in it, by descriptor, never following a
/// link (a link is removed itself); gone already is fine. A folder nested deeper than
/// [`MAX_DEPTH`] stays, and so does everything holding it.
pub fn remove_tree(parent: impl AsFd, name: &OsStr) -> std::io::Result<()> {
    remove_at(parent.as_fd(), name, 0)
}

fn remove_at(parent: std::os::fd::BorrowedFd<'_>, name: &OsStr, depth: usize) -> std::io::Result<()> {
    let stat = match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => stat,
        Err(Errno::NOENT) => return Ok(()),
        Err(errno) => return Err(errno.into()),
    };
    if FileType::from_raw_mode(stat.st_mode) != FileType::Directory {
        return remove(parent, name);
    }
    if depth >= MAX_DEPTH {
        return Err(std::io::Error::other("folders nested too deep to remove"));
    }
    if let Some(dir) = open_dir(parent, name)? {
        for child in names(&dir)? {
            remove_at(dir.as_fd(), &child, depth + 1)?;
        }
    }
    match rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(errno) => Err(errno.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_socket_is_reached_through_its_descriptor_and_a_link_in_its_place_is_refused() {
        use std::os::fd::AsRawFd;
        let temp = tempfile::tempdir().expect("tempdir");
        let (shared, host) = (temp.path().join("run"), temp.path().join("host.sock"));
        std::fs::create_dir_all(&shared).expect("mkdir");
        let _host = std::os::unix::net::UnixListener::bind(&host).expect("host socket");
        let listener = std::os::unix::net::UnixListener::bind(shared.join("health.sock")).expect("bind");
        let dir = open_trusted(&shared).expect("open");
        let fd = open_socket(&dir, OsStr::new("health.sock")).expect("open").expect("there");
        // Swapped for a link after it was opened: the descriptor still reaches the real one.
        std::fs::rename(shared.join("health.sock"), shared.join("moved.sock")).expect("rename");
        std::os::unix::fs::symlink(&host, shared.join("health.sock")).expect("symlink");
        let _client = std::os::unix::net::UnixStream::connect(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .expect("connect through the descriptor");
        listener.set_nonblocking(true).expect("nonblocking");
        assert!(listener.accept().is_ok(), "the connection reached the socket that was opened");
        let refused = open_socket(&dir, OsStr::new("health.sock")).expect_err("a link");
        assert_eq!(refused.to_string(), "it is not a socket");
        assert!(open_socket(&dir, OsStr::new("absent.sock")).expect("absent").is_none());
    }

    #[test]
    fn a_link_in_place_of_a_folder_is_replaced_and_its_target_left_alone() {
        let temp = tempfile::tempdir().expect("tempdir");
        let (trusted, elsewhere) = (temp.path().join("trusted"), temp.path().join("host"));
        std::fs::create_dir_all(&trusted).expect("mkdir");
        std::fs::create_dir_all(&elsewhere).expect("mkdir");
        std::fs::write(elsewhere.join("keep.json"), "{}").expect("write");
        std::os::unix::fs::symlink(&elsewhere, trusted.join("results")).expect("symlink");
        let before = std::fs::metadata(&elsewhere).expect("stat");

        let parent = open_trusted(&trusted).expect("open");
        let fd = ensure_dir(&parent, OsStr::new("results"), Owner::Containers).expect("made again");
        assert!(std::fs::symlink_metadata(trusted.join("results")).expect("stat").is_dir(), "a real folder now");
        let after = std::fs::metadata(&elsewhere).expect("stat");
        assert_eq!((before.uid(), before.mode()), (after.uid(), after.mode()), "the link's target is untouched");
        assert!(elsewhere.join("keep.json").exists());
        assert!(names(&fd).expect("names").is_empty());

        // A file in place of a folder goes the same way; a dangling link too.
        std::fs::remove_dir(trusted.join("results")).expect("rmdir");
        std::os::unix::fs::symlink("/nonexistent/x", trusted.join("results")).expect("symlink");
        ensure_dir(&parent, OsStr::new("results"), Owner::Containers).expect("made again");
        assert!(open_dir(&parent, "results").expect("open").is_some());
        // Opening through a link never works.
        std::os::unix::fs::symlink(&elsewhere, trusted.join("link")).expect("symlink");
        assert!(open_dir(&parent, "link").expect("open").is_none());
        assert!(open_dir(&parent, "link/../results").expect("open").is_none());
    }

    #[test]
    fn only_regular_files_are_read_and_never_through_a_link() {
        let temp = tempfile::tempdir().expect("tempdir");
        let dir = open_trusted(temp.path()).expect("open");
        std::fs::write(temp.path().join("a.json"), "{}").expect("write");
        std::os::unix::fs::symlink("/etc/passwd", temp.path().join("b.json")).expect("symlink");
        let status = std::process::Command::new("mkfifo").arg(temp.path().join("c.json")).status().expect("mkfifo");
        assert!(status.success());
        assert_eq!(read_regular(&dir, OsStr::new("a.json"), 10).expect("read"), Some(b"{}".to_vec()));
        assert!(read_regular(&dir, OsStr::new("a.json"), 1).is_err(), "over the cap");
        assert!(read_regular(&dir, OsStr::new("b.json"), 10_000).is_err(), "a link");
        assert!(read_regular(&dir, OsStr::new("c.json"), 10).is_err(), "a FIFO, at once");
        assert_eq!(read_regular(&dir, OsStr::new("d.json"), 10).expect("missing"), None);
        let mut listed = names(&dir).expect("names");
        listed.sort();
        assert_eq!(listed, ["a.json", "b.json", "c.json"]);
    }

    #[test]
    fn a_tree_is_copied_out_by_descriptor_and_a_link_or_fifo_or_too_much_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let from = dir.path().join("out");
        std::fs::create_dir_all(from.join("repo/skill/scripts")).expect("folders");
        std::fs::write(from.join("repo/skill/SKILL.md"), "hello").expect("write");
        std::fs::write(from.join("repo/skill/scripts/run.sh"), "echo hi").expect("write");
        let parent = open_trusted(&from).expect("open");
        let copied = copy_out(&parent, Path::new("repo/skill"), &dir.path().join("a"), 10, 100).expect("copied");
        assert_eq!(copied, Some((2, 12)));
        assert_eq!(std::fs::read_to_string(dir.path().join("a/scripts/run.sh")).expect("read"), "echo hi");
        let too_small = copy_out(&parent, Path::new("repo/skill"), &dir.path().join("b"), 10, 8).expect_err("bytes");
        assert!(too_small.to_string().contains("more than 10 files or 8 bytes"), "{too_small}");
        assert!(copy_out(&parent, Path::new("repo/none"), &dir.path().join("c"), 10, 100).expect("none").is_none());
        std::os::unix::fs::symlink("/etc", from.join("repo/etc")).expect("link");
        assert!(copy_out(&parent, Path::new("repo/etc"), &dir.path().join("d"), 10, 100).expect("no").is_none());
        std::os::unix::fs::symlink("/etc/passwd", from.join("repo/skill/passwd")).expect("link");
        let link = copy_out(&parent, Path::new("repo/skill"), &dir.path().join("e"), 10, 100).expect_err("a link");
        assert_eq!(link.to_string(), "`passwd` is a symbolic link");
        std::fs::remove_file(from.join("repo/skill/passwd")).expect("unlink");
        rustix::fs::mknodat(&parent, "repo/skill/fifo", FileType::Fifo, Mode::from_raw_mode(0o600), 0).expect("fifo");
        let fifo = copy_out(&parent, Path::new("repo/skill"), &dir.path().join("f"), 10, 100).expect_err("a fifo");
        assert_eq!(fifo.to_string(), "`fifo` is not a regular file");
    }
}
