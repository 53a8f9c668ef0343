//! The files of a folder a turn can write (a session's workspace, a Coder's project folder),
//! looked at, read and written by descriptor only, never through a link.
//!
//! A container writes in these folders, so it can put a link where a folder or a file was,
//! pointing anywhere on the host: every step here starts from the root's descriptor and opens
//! each folder beneath it with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`
//! ([`shared_dirs::open_dir`]), reads a file only if it is a regular file there, and writes by a
//! new file in the very folder it opened, renamed over the old one.
//!
//! What is not kept: a link, a FIFO, a device or a socket (said), the repository's history
//! (`.git`, which `git` itself keeps) and what a `.gitignore` on the way names (built output,
//! `node_modules`: made again by the build).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::sandbox::shared_dirs;

/// The most a `.gitignore` is read of.
const MOST_IGNORE_BYTES: u64 = 1 << 20;

/// What a file is, as far as telling a change goes, and what it is restored with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    pub size: u64,
    /// Modification and status-change times, in nanoseconds.
    pub mtime: i128,
    pub ctime: i128,
    pub ino: u64,
    /// The permission bits.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

impl Meta {
    fn of(stat: &rustix::fs::Stat) -> Meta {
        Meta {
            size: stat.st_size as u64,
            mtime: i128::from(stat.st_mtime) * 1_000_000_000 + i128::from(stat.st_mtime_nsec),
            ctime: i128::from(stat.st_ctime) * 1_000_000_000 + i128::from(stat.st_ctime_nsec),
            ino: stat.st_ino,
            mode: stat.st_mode & 0o7777,
            uid: stat.st_uid,
            gid: stat.st_gid,
        }
    }
}

/// A folder's files, by their path beneath it (`/`-separated).
#[derive(Debug, Default)]
pub struct Walked {
    pub files: BTreeMap<String, Meta>,
    /// What was found and is not kept, with why (a link, a device, a name that is not UTF-8).
    pub left_out: Vec<(String, &'static str)>,
    /// Whether the walk stopped at its most files: what lies beyond is not looked at.
    pub stopped: bool,
    /// A `.gitignore` was found that holds only from the next turn.
    pub rules_waiting: bool,
}

/// Where a path stands toward git's own folder. Its history (objects, refs, the index) is git's
/// to keep; its config, hooks and info are run by git on the host, so they are kept like any
/// file (an undo takes back a hook a turn wrote). `.gitignore` rules do not reach into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Git {
    Outside,
    /// Config, a hook, info, or a folder on the way to them.
    Kept,
    History,
}

/// Where `path` (a folder when `folder`) stands toward a `.git` folder on its way. The
/// browser's own folder (its unfinished downloads, `.browser/` at a tree's root) is
/// left to it like git's history: a half-written download is not a turn's file to take back.
pub fn git_part(path: &str, folder: bool) -> Git {
    if path == ".browser" || path.starts_with(".browser/") {
        return Git::History;
    }
    let mut parts = path.split('/');
    if !parts.any(|part| part == ".git") {
        return Git::Outside;
    }
    let rest: Vec<&str> = parts.collect();
    let config = |name: &str| matches!(name, "config" | "config.worktree");
    match rest.as_slice() {
        // A `.git` file (a worktree's or a submodule's pointer) is a file like any other.
        [] if !folder => Git::Outside,
        [] => Git::Kept,
        [name] if !folder && config(name) => Git::Kept,
        ["hooks" | "info", ..] => Git::Kept,
        ["modules" | "worktrees", inner @ ..] => {
            let history = inner.iter().any(|part| matches!(*part, "objects" | "refs" | "logs" | "lfs"));
            let kept = folder
                || inner.last().is_some_and(|name| config(name))
                || inner.iter().any(|part| matches!(*part, "hooks" | "info"));
            match !history && kept {
                true => Git::Kept,
                false => Git::History,
            }
        }
        _ => Git::History,
    }
}

/// The `.gitignore` rules on the way to a folder, deepest last.
pub type Rules = Vec<Arc<Gitignore>>;

/// Whether `rules` leave out `path` (a folder when `is_dir`).
pub fn ignored(rules: &Rules, path: &str, is_dir: bool) -> bool {
    if rules.is_empty() {
        return false;
    }
    let path = Path::new("/").join(path);
    for rule in rules.iter().rev() {
        match rule.matched(&path, is_dir) {
            ignore::Match::Ignore(_) => return true,
            ignore::Match::Whitelist(_) => return false,
            ignore::Match::None => {}
        }
    }
    false
}

/// The `.gitignore` files whose rules hold during a turn, by path, with the hash of their
/// content at the turn's start: one a turn writes (or changes) holds from the next turn, so a
/// turn cannot hide its own changes behind it.
pub type Frozen = std::collections::HashMap<String, String>;

/// Which `.gitignore` files hold: never one whose content a turn wrote (`written`: the hashes;
/// an undo of several turns must see what the later ones made), and during a turn only those
/// as they were at its start (`frozen`).
#[derive(Debug, Default)]
pub struct Ignores<'a> {
    pub frozen: Option<&'a Frozen>,
    pub written: Option<&'a std::collections::HashSet<String>>,
}

/// The rules of the `.gitignore` in `dir` (at `rel` beneath the root), if there is one and it
/// holds (`waiting` is set for one that holds from the next turn).
fn rules_in(dir: &OwnedFd, rel: &str, ignores: &Ignores<'_>, waiting: &mut bool) -> Option<Arc<Gitignore>> {
    let bytes = shared_dirs::read_regular(dir, OsStr::new(".gitignore"), MOST_IGNORE_BYTES).ok()??;
    let hash = super::objects::hash_of(&bytes);
    if ignores.written.is_some_and(|written| written.contains(&hash)) {
        return None;
    }
    if let Some(frozen) = ignores.frozen {
        if frozen.get(&joined(rel, ".gitignore")) != Some(&hash) {
            *waiting = true;
            return None;
        }
    }
    let root = Path::new("/").join(rel);
    let mut builder = GitignoreBuilder::new(&root);
    for line in String::from_utf8_lossy(&bytes).lines() {
        // A line git would not take is skipped, as git skips it.
        let _ = builder.add_line(None, line);
    }
    builder.build().ok().filter(|rules| !rules.is_empty()).map(Arc::new)
}

fn joined(prefix: &str, name: &str) -> String {
    match prefix.is_empty() {
        true => name.to_string(),
        false => format!("{prefix}/{name}"),
    }
}

/// Every file beneath `root`, up to `most` of them. What a `.gitignore` names is left out unless
/// `known` says it was looked at before (for a folder: that something beneath it was): a
/// `.gitignore` a turn writes does not hide what it then changes.
pub fn walk(root: &OwnedFd, most: usize, known: &dyn Fn(&str, bool) -> bool) -> std::io::Result<Walked> {
    walk_beneath(root, "", &Rules::new(), most, known, &Ignores::default(), &mut |_, _, _| {})
}

/// Every file beneath the folder `at` beneath `root` (`""`: the root itself), up to `most` of
/// them, under the `.gitignore` rules `above` it and those on the way that hold (`ignores`). `entered` is told of each folder as it is
/// opened, before it is read (to watch it for changes from then on).
#[allow(clippy::too_many_arguments)]
pub fn walk_beneath(
    root: &OwnedFd,
    at: &str,
    above: &Rules,
    most: usize,
    known: &dyn Fn(&str, bool) -> bool,
    ignores: &Ignores<'_>,
    entered: &mut dyn FnMut(&OwnedFd, &str, &Rules),
) -> std::io::Result<Walked> {
    let mut walked = Walked::default();
    if git_part(at, true) == Git::History {
        return Ok(walked);
    }
    let Some(start) = open_folder(root, at)? else { return Ok(walked) };
    let mut rules = above.clone();
    if git_part(at, true) == Git::Outside {
        rules.extend(rules_in(&start, at, ignores, &mut walked.rules_waiting));
    }
    entered(&start, at, &rules);
    let mut pending: Vec<(OwnedFd, String, Rules)> = vec![(start, at.to_string(), rules)];
    while let Some((dir, prefix, rules)) = pending.pop() {
        for entry in rustix::fs::Dir::read_from(&dir)? {
            let entry = entry?;
            let bytes = entry.file_name().to_bytes();
            if bytes == b"." || bytes == b".." {
                continue;
            }
            let Ok(name) = std::str::from_utf8(bytes) else {
                let shown = joined(&prefix, &String::from_utf8_lossy(bytes));
                walked.left_out.push((shown, "its name is not UTF-8"));
                continue;
            };
            let path = joined(&prefix, name);
            let mut kind = entry.file_type();
            let mut stat = None;
            if kind == FileType::Unknown || kind == FileType::RegularFile {
                match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(found) => {
                        kind = FileType::from_raw_mode(found.st_mode);
                        stat = Some(found);
                    }
                    // Gone since the folder was read.
                    Err(Errno::NOENT) => continue,
                    Err(errno) => return Err(errno.into()),
                }
            }
            let git = git_part(&path, kind == FileType::Directory);
            let left = match git {
                Git::History => continue,
                Git::Kept => false,
                Git::Outside => {
                    ignored(&rules, &path, kind == FileType::Directory) && !known(&path, kind == FileType::Directory)
                }
            };
            match kind {
                _ if left => {}
                FileType::Directory => {
                    let Some(inner) = shared_dirs::open_dir(&dir, name)? else { continue };
                    let mut inner_rules = rules.clone();
                    if git == Git::Outside {
                        inner_rules.extend(rules_in(&inner, &path, ignores, &mut walked.rules_waiting));
                    }
                    entered(&inner, &path, &inner_rules);
                    pending.push((inner, path, inner_rules));
                }
                FileType::RegularFile => {
                    if walked.files.len() >= most {
                        walked.stopped = true;
                        return Ok(walked);
                    }
                    if let Some(stat) = stat {
                        walked.files.insert(path, Meta::of(&stat));
                    }
                }
                other => walked.left_out.push((path, not_kept(other))),
            }
        }
    }
    Ok(walked)
}

/// Why a thing that is not a regular file or a folder is not kept.
fn not_kept(kind: FileType) -> &'static str {
    match kind {
        FileType::Symlink => "it is a link",
        _ => "it is not a regular file (a device, FIFO or socket)",
    }
}

/// What is at a path beneath a folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    File(Meta),
    /// A folder, the walk's to look into.
    Folder,
    /// A link, a device…: not kept, and why.
    Other(&'static str),
    Nothing,
}

/// What is at `path` beneath `root` now.
pub fn look_at(root: &OwnedFd, path: &str) -> std::io::Result<Found> {
    let (folder, name) = split(path).ok_or_else(|| refused(path))?;
    let Some(dir) = open_folder(root, folder)? else { return Ok(Found::Nothing) };
    match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => Ok(match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => Found::File(Meta::of(&stat)),
            FileType::Directory => Found::Folder,
            other => Found::Other(not_kept(other)),
        }),
        Err(Errno::NOENT) | Err(Errno::NOTDIR) => Ok(Found::Nothing),
        Err(errno) => Err(errno.into()),
    }
}

/// Splits `path` into its folder and its name; `None` for a path that climbs (`..`), is
/// absolute or names nothing.
fn split(path: &str) -> Option<(&str, &str)> {
    if path.is_empty()
        || path.starts_with('/')
        || path.split('/').any(|part| part.is_empty() || part == "." || part == "..")
    {
        return None;
    }
    Some(path.rsplit_once('/').unwrap_or(("", path)))
}

fn refused(path: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{path} is not a path beneath the folder"))
}

/// The folder `rel` beneath `root`, never through a link; `None` when it is not there.
fn open_folder(root: &OwnedFd, rel: &str) -> std::io::Result<Option<OwnedFd>> {
    match rel.is_empty() {
        true => root.try_clone().map(Some),
        false => shared_dirs::open_dir(root, rel),
    }
}

/// The file `path` beneath `root`: what it is now, `None` when there is no regular file there.
pub fn stat(root: &OwnedFd, path: &str) -> std::io::Result<Option<Meta>> {
    Ok(match look_at(root, path)? {
        Found::File(meta) => Some(meta),
        _ => None,
    })
}

/// Reads the file `path` beneath `root` if it is a regular file of at most `cap` bytes: its
/// bytes and what it is (from the very descriptor read). `None` when it is not there.
pub fn read(root: &OwnedFd, path: &str, cap: u64) -> std::io::Result<Option<(Vec<u8>, Meta)>> {
    use std::io::Read as _;
    let (folder, name) = split(path).ok_or_else(|| refused(path))?;
    let Some(dir) = open_folder(root, folder)? else { return Ok(None) };
    let Some((fd, stat)) = shared_dirs::open_regular(&dir, OsStr::new(name))? else { return Ok(None) };
    if stat.st_size as u64 > cap {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("it is {} bytes, more than the {cap} kept of a file", stat.st_size),
        ));
    }
    let mut bytes = Vec::with_capacity(stat.st_size as usize);
    std::fs::File::from(fd).take(cap + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(std::io::Error::new(std::io::ErrorKind::FileTooLarge, format!("it grew past {cap} bytes")));
    }
    Ok(Some((bytes, Meta::of(&stat))))
}

/// The first folder on the way to `path` beneath `root` that is something else now (a file, a
/// link): putting `path` back replaces it with the folder.
pub fn in_the_way(root: &OwnedFd, path: &str) -> std::io::Result<Option<String>> {
    let (folder, _) = split(path).ok_or_else(|| refused(path))?;
    let mut dir = root.try_clone()?;
    let mut at = String::new();
    for part in folder.split('/').filter(|part| !part.is_empty()) {
        at = joined(&at, part);
        match rustix::fs::statat(&dir, part, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(found) if FileType::from_raw_mode(found.st_mode) == FileType::Directory => {
                let Some(inner) = shared_dirs::open_dir(&dir, part)? else { return Ok(Some(at)) };
                dir = inner;
            }
            Ok(_) => return Ok(Some(at)),
            Err(Errno::NOENT) => return Ok(None),
            Err(errno) => return Err(errno.into()),
        }
    }
    Ok(None)
}

/// Opens (making what is missing, owned as `root` is) the folder `rel` beneath `root`. A file
/// or a link where a folder must be is removed first (the link itself, never what it names).
fn make_folder(root: &OwnedFd, rel: &str) -> std::io::Result<OwnedFd> {
    let owner = rustix::fs::fstat(root)?;
    let mut dir = root.try_clone()?;
    for part in rel.split('/').filter(|part| !part.is_empty()) {
        dir = match shared_dirs::open_dir(&dir, part)? {
            Some(inner) => inner,
            None => {
                if let Ok(found) = rustix::fs::statat(&dir, part, AtFlags::SYMLINK_NOFOLLOW) {
                    if FileType::from_raw_mode(found.st_mode) != FileType::Directory {
                        rustix::fs::unlinkat(&dir, part, AtFlags::empty())?;
                    }
                }
                match rustix::fs::mkdirat(&dir, part, Mode::from_raw_mode(owner.st_mode & 0o7777)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(errno) => return Err(errno.into()),
                }
                let inner = shared_dirs::open_dir(&dir, part)?.ok_or_else(|| {
                    std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{part} is not a folder (a link?)"))
                })?;
                chown(&inner, owner.st_uid, owner.st_gid)?;
                inner
            }
        };
    }
    Ok(dir)
}

fn chown(fd: impl AsFd, uid: u32, gid: u32) -> std::io::Result<()> {
    use rustix::process::{Gid, Uid};
    match rustix::fs::fchown(fd, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid))) {
        // Without root, files stay the daemon's (and the folder's group lets containers in).
        Ok(()) | Err(Errno::PERM) => Ok(()),
        Err(errno) => Err(errno.into()),
    }
}

/// Puts `bytes` at `path` beneath `root` with `meta`'s mode and owner, whole or not at all: a
/// new file in the same folder, synced and renamed over what was there (a link there is
/// replaced, never followed). Folders on the way are made again when they are gone.
pub fn write(root: &OwnedFd, path: &str, bytes: &[u8], meta: &Meta) -> std::io::Result<()> {
    use std::io::Write as _;
    let (folder, name) = split(path).ok_or_else(|| refused(path))?;
    let dir = make_folder(root, folder)?;
    if let Ok(found) = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        if FileType::from_raw_mode(found.st_mode) == FileType::Directory {
            return Err(std::io::Error::new(
                std::io::ErrorKind::IsADirectory,
                format!("{path} is a folder now; it is not replaced by the file"),
            ));
        }
    }
    let mut suffix = [0u8; 6];
    getrandom::fill(&mut suffix).map_err(std::io::Error::other)?;
    // Short whatever the name's length (a name near the 255-byte limit is put back too).
    let temp: String = format!(".undo-{}", suffix.iter().map(|b| format!("{b:02x}")).collect::<String>());
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(&dir, temp.as_str(), flags, Mode::from_raw_mode(0o600))?;
    let written = (|| {
        chown(&fd, meta.uid, meta.gid)?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(meta.mode))?;
        let mut file = std::fs::File::from(fd);
        file.write_all(bytes)?;
        file.sync_all()?;
        rustix::fs::renameat(&dir, temp.as_str(), &dir, name)?;
        rustix::fs::fsync(&dir)?;
        Ok(())
    })();
    if written.is_err() {
        // silent-ok: the draft may not exist; the write's own error is what is said.
        let _ = rustix::fs::unlinkat(&dir, temp.as_str(), AtFlags::empty());
    }
    written
}

/// Removes the file `path` beneath `root` (the entry itself; a folder is left).
pub fn remove(root: &OwnedFd, path: &str) -> std::io::Result<()> {
    let (folder, name) = split(path).ok_or_else(|| refused(path))?;
    let Some(dir) = open_folder(root, folder)? else { return Ok(()) };
    match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(found) if FileType::from_raw_mode(found.st_mode) == FileType::Directory => Ok(()),
        Ok(_) => {
            shared_dirs::remove(&dir, OsStr::new(name))?;
            rustix::fs::fsync(&dir)?;
            Ok(())
        }
        Err(Errno::NOENT) | Err(Errno::NOTDIR) => Ok(()),
        Err(errno) => Err(errno.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(dir: &Path) -> OwnedFd {
        shared_dirs::open_trusted(dir).expect("root")
    }

    #[test]
    fn a_walk_finds_files_beneath_and_leaves_out_links_git_and_what_gitignore_names() {
        let dir = tempfile::tempdir().expect("temp");
        let at = dir.path();
        std::fs::create_dir_all(at.join("src/deep")).expect("the test's files");
        std::fs::create_dir_all(at.join(".git/objects")).expect("the test's files");
        std::fs::create_dir_all(at.join("target/debug")).expect("the test's files");
        std::fs::write(at.join("a.txt"), "a").expect("the test's files");
        std::fs::write(at.join("src/deep/b.rs"), "b").expect("the test's files");
        std::fs::write(at.join(".git/HEAD"), "ref").expect("the test's files");
        std::fs::write(at.join(".git/objects/ab"), "history").expect("the test's files");
        std::fs::write(at.join(".git/config"), "[core]").expect("the test's files");
        std::fs::create_dir_all(at.join(".git/hooks")).expect("the test's files");
        std::fs::write(at.join(".git/hooks/post-checkout"), "#!/bin/sh").expect("the test's files");
        std::fs::write(at.join("target/debug/out"), "built").expect("the test's files");
        std::fs::write(at.join("src/keep.log"), "kept").expect("the test's files");
        std::fs::write(at.join("src/drop.log"), "dropped").expect("the test's files");
        std::fs::write(at.join(".gitignore"), "target/\n*.log\n").expect("the test's files");
        std::fs::write(at.join("src/.gitignore"), "!keep.log\n").expect("the test's files");
        std::os::unix::fs::symlink("/etc/passwd", at.join("src/link")).expect("the test's files");
        let nothing = |_: &str, _: bool| false;
        let walked = walk(&root(at), 100, &nothing).expect("walk");
        let names: Vec<&str> = walked.files.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                ".git/config",
                ".git/hooks/post-checkout",
                ".gitignore",
                "a.txt",
                "src/.gitignore",
                "src/deep/b.rs",
                "src/keep.log"
            ]
        );
        assert_eq!(walked.left_out, [("src/link".to_string(), "it is a link")]);
        assert!(!walked.stopped);
        for (path, folder, part) in [
            (".git", true, Git::Kept),
            (".browser", true, Git::History),
            (".browser/profile/Default/Cookies", false, Git::History),
            ("src/.browser", true, Git::Outside),
            (".git", false, Git::Outside),
            (".git/config", false, Git::Kept),
            (".git/hooks/x", false, Git::Kept),
            (".git/index", false, Git::History),
            (".git/objects", true, Git::History),
            ("sub/.git/modules/lib/hooks/pre-commit", false, Git::Kept),
            ("sub/.git/modules/lib/config", false, Git::Kept),
            ("sub/.git/modules/lib/objects", true, Git::History),
            ("sub/.git/modules/lib/HEAD", false, Git::History),
            ("src/git/config", false, Git::Outside),
        ] {
            assert_eq!(git_part(path, folder), part, "{path}");
        }
        let few = walk(&root(at), 2, &nothing).expect("walk");
        assert!(few.stopped && few.files.len() == 2);
        // What was looked at before stays looked at, whatever a .gitignore says now.
        let known = |path: &str, folder: bool| match folder {
            true => "target/debug/out".starts_with(&format!("{path}/")),
            false => path == "target/debug/out" || path == "src/drop.log",
        };
        let walked = walk(&root(at), 100, &known).expect("walk");
        assert!(walked.files.contains_key("target/debug/out") && walked.files.contains_key("src/drop.log"));
    }

    #[test]
    fn a_file_is_read_and_written_beneath_the_root_only_never_through_a_link() {
        let dir = tempfile::tempdir().expect("temp");
        let outside = tempfile::tempdir().expect("temp");
        let at = dir.path();
        std::fs::write(outside.path().join("secret"), "host secret").expect("the test's files");
        std::os::unix::fs::symlink(outside.path(), at.join("out")).expect("the test's files");
        std::os::unix::fs::symlink(outside.path().join("secret"), at.join("s")).expect("the test's files");
        let root = root(at);
        assert!(read(&root, "out/secret", 100).expect("read").is_none());
        assert!(read(&root, "s", 100).is_err());
        assert!(read(&root, "../x", 100).is_err() && read(&root, "/etc/passwd", 100).is_err());
        let meta = Meta { size: 0, mtime: 0, ctime: 0, ino: 0, mode: 0o640, uid: 0, gid: 0 };
        // A link where a folder must be is replaced by the folder, never written through.
        write(&root, "out/secret", b"over", &meta).expect("write");
        assert_eq!(std::fs::read_to_string(outside.path().join("secret")).expect("the test's files"), "host secret");
        assert!(std::fs::symlink_metadata(at.join("out")).expect("there").is_dir());
        assert_eq!(std::fs::read_to_string(at.join("out/secret")).expect("the test's files"), "over");
        // A link where the file was is replaced, not followed.
        write(&root, "s", b"mine", &meta).expect("write");
        assert_eq!(std::fs::read_to_string(outside.path().join("secret")).expect("the test's files"), "host secret");
        assert_eq!(std::fs::read_to_string(at.join("s")).expect("the test's files"), "mine");
        write(&root, "new/deeper/f.txt", b"made", &meta).expect("write");
        write(&root, &"n".repeat(254), b"a name near the limit", &meta).expect("a long name is put back too");
        let (bytes, found) = read(&root, "new/deeper/f.txt", 100).expect("read").expect("there");
        assert_eq!((bytes.as_slice(), found.mode), (&b"made"[..], 0o640));
        assert_eq!(stat(&root, "new/deeper/f.txt").expect("stat").map(|meta| meta.size), Some(4));
        remove(&root, "new/deeper/f.txt").expect("remove");
        assert!(stat(&root, "new/deeper/f.txt").expect("stat").is_none());
        remove(&root, "out/secret").expect("nothing there");
        assert!(outside.path().join("secret").exists());
    }
}
