//! The workspace cap where the daemon could not give a session's workspace a filesystem of its
//! own (`--workspace-cap`): after each call that can write, the runner adds up the space the
//! workspace takes (allocated blocks; links are counted, never followed). Past the cap, the call
//! fails and the files it wrote (modified since it started) are removed, largest first, until
//! the workspace fits again; files from earlier calls are never touched.

use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::paths::Root;

/// Folders deeper than this are not descended into (their space still counts at the top).
const MAX_DEPTH: usize = 128;

/// A file the current call wrote.
struct Written {
    bytes: u64,
    folder: PathBuf,
    name: OsString,
}

/// Space taken beneath `dir` (which is `folder` relative to the root), and the regular files
/// modified at or after `since` (seconds since the epoch).
fn tally(dir: &OwnedFd, folder: &Path, since: i64, depth: usize, written: &mut Vec<Written>) -> u64 {
    let Ok(entries) = rustix::fs::Dir::read_from(dir) else { return 0 };
    let mut total = 0;
    for entry in entries.flatten() {
        let name = OsStr::from_bytes(entry.file_name().to_bytes()).to_os_string();
        if name == "." || name == ".." {
            continue;
        }
        let Ok(stat) = rustix::fs::statat(dir, &name, AtFlags::SYMLINK_NOFOLLOW) else { continue };
        let bytes = stat.st_blocks as u64 * 512;
        total += bytes;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile if stat.st_mtime >= since => {
                written.push(Written { bytes, folder: folder.to_path_buf(), name });
            }
            FileType::Directory if depth < MAX_DEPTH => {
                let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                if let Ok(child) = rustix::fs::openat(dir, &name, flags, Mode::empty()) {
                    total += tally(&child, &folder.join(&name), since, depth + 1, written);
                }
            }
            _ => {}
        }
    }
    total
}

fn open_root(root: &Root) -> Option<OwnedFd> {
    rustix::fs::open(&root.at, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).ok()
}

/// Bytes the workspace takes.
pub fn usage(root: &Root) -> u64 {
    open_root(root).map_or(0, |dir| tally(&dir, Path::new(""), i64::MAX, 0, &mut vec![]))
}

/// Holds the folder `root` (`what`, as the sentence names it: "the workspace") to `cap` after a
/// call that started at `since` (seconds since the epoch): `None` when it fits, else what was
/// removed, as a sentence for the model.
pub fn enforce(root: &Root, cap: u64, since: i64, what: &str) -> Option<String> {
    let dir = open_root(root)?;
    let mut written = vec![];
    let used = tally(&dir, Path::new(""), since, 0, &mut written);
    if used <= cap {
        return None;
    }
    written.sort_by_key(|file| std::cmp::Reverse(file.bytes));
    let mut left = used;
    let mut removed = vec![];
    for file in written {
        if left <= cap {
            break;
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let parent = if file.folder.as_os_str().is_empty() {
            rustix::fs::openat(&dir, ".", flags, Mode::empty())
        } else {
            super::paths::open_beneath(
                &dir,
                &file.folder,
                flags,
                rustix::fs::ResolveFlags::BENEATH | rustix::fs::ResolveFlags::NO_SYMLINKS,
            )
        };
        let Ok(parent) = parent else { continue };
        if rustix::fs::unlinkat(&parent, &file.name, AtFlags::empty()).is_ok() {
            left = left.saturating_sub(file.bytes);
            removed.push(root.at.join(&file.folder).join(&file.name).display().to_string());
        }
    }
    let mib = |bytes: u64| bytes as f64 / f64::from(1 << 20);
    let mut sentence = format!("{what} went past its cap of {:.0} MiB ({:.1} MiB used)", mib(cap), mib(used));
    if removed.is_empty() {
        sentence.push_str("; nothing this call wrote could be removed: delete files you no longer need");
    } else {
        sentence.push_str(&format!("; removed what this call wrote: {}", removed.join(", ")));
        if left > cap {
            sentence.push_str(&format!(" (still {:.1} MiB used: delete files you no longer need)", mib(left)));
        }
    }
    Some(sentence)
}

#[cfg(test)]
mod tests {
    use super::super::paths::Mounts;
    use super::*;

    #[test]
    fn a_call_past_the_cap_loses_what_it_wrote_and_earlier_files_stay() {
        let temp = tempfile::tempdir().expect("tempdir");
        let mounts = Mounts::open(&[(temp.path().to_path_buf(), true)]).expect("mounts");
        let root = mounts.default_root().expect("root");
        std::fs::write(temp.path().join("old.txt"), vec![b'a'; 64 << 10]).expect("write");
        let earlier = std::fs::metadata(temp.path().join("old.txt")).expect("stat");
        let since = std::os::unix::fs::MetadataExt::mtime(&earlier) + 1;
        assert_eq!(enforce(root, 1 << 20, since, "the workspace"), None);
        // What this call writes: a big file in a subfolder and a small one.
        std::fs::create_dir(temp.path().join("sub")).expect("mkdir");
        std::fs::write(temp.path().join("sub/big.bin"), vec![b'b'; 2 << 20]).expect("write");
        std::fs::write(temp.path().join("small.txt"), "x").expect("write");
        let now = since + 10;
        filetime(&temp.path().join("sub/big.bin"), now);
        filetime(&temp.path().join("small.txt"), now);
        let said = enforce(root, 1 << 20, since, "the workspace").expect("over the cap");
        assert!(said.contains("removed what this call wrote") && said.contains("sub/big.bin"), "{said}");
        assert!(!temp.path().join("sub/big.bin").exists());
        assert!(temp.path().join("old.txt").exists() && temp.path().join("small.txt").exists());
        assert!(usage(root) <= 1 << 20);
    }

    fn filetime(path: &std::path::Path, seconds: i64) {
        let time = rustix::fs::Timespec { tv_sec: seconds, tv_nsec: 0 };
        let times = rustix::fs::Timestamps { last_access: time, last_modification: time };
        rustix::fs::utimensat(rustix::fs::CWD, path, &times, AtFlags::empty()).expect("utimensat");
    }
}
