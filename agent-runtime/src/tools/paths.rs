//! Path rules for every file tool (spec §8.5): a path is relative to `/workspace` or absolute
//! inside one of the container's mounts; `..`, null bytes, over-long paths and paths outside
//! the mounts are refused before anything is opened. Files are then opened with `openat2` and
//! `RESOLVE_BENEATH` from the mount's root, so the kernel resolves every component (symlinks
//! included) in one step and refuses one that leaves the mount, also a symlink swapped in
//! between a check and the use: there is no check separate from the use.
//!
//! Where the kernel has no `openat2` (gVisor's before 2023 answers ENOSYS, and EPERM through
//! our seccomp profile), [`open_beneath`] walks the path itself, one `O_NOFOLLOW` component
//! at a time from the mount's root: `..` and every symlink are refused, which is stricter
//! than `RESOLVE_BENEATH` (a symlink that stays inside is refused too) and as safe.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use super::ToolError;

/// The longest path accepted, in bytes and in components.
pub const MAX_PATH_BYTES: usize = 4096;
pub const MAX_PATH_COMPONENTS: usize = 256;

/// One mount a tool may use.
#[derive(Debug)]
pub struct Root {
    /// Where it is inside the container, e.g. `/workspace` or `/project/site`.
    pub at: PathBuf,
    pub writable: bool,
    dir: OwnedFd,
}

/// The mounts of a tool container, the first one the default (`/workspace`).
#[derive(Debug)]
pub struct Mounts {
    roots: Vec<Root>,
}

/// A path inside one mount.
#[derive(Debug, Clone, Copy)]
pub struct Located<'a> {
    pub root: &'a Root,
    /// Relative to the root; empty for the root itself.
    pub relative: &'a Path,
}

fn beneath() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS
}

/// Learns now whether the kernel has `openat2`, so that a first call does not ask (under gVisor
/// a runner's start is off every call's path; its first call is not).
pub fn probe() {
    has_openat2();
}

/// Whether this kernel has `openat2`, asked once.
fn has_openat2() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        let probe = rustix::fs::openat2(
            rustix::fs::CWD,
            "/",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::empty(),
        );
        !matches!(probe, Err(Errno::NOSYS | Errno::PERM))
    })
}

/// Opens `path` beneath `dir` with `flags`: `openat2` with `resolve`, or where the kernel has
/// none, a walk that refuses `..` (EXDEV) and every symlink (ELOOP).
pub fn open_beneath(dir: impl AsFd, path: &Path, flags: OFlags, resolve: ResolveFlags) -> Result<OwnedFd, Errno> {
    if has_openat2() {
        return rustix::fs::openat2(dir, path, flags, Mode::empty(), resolve);
    }
    walk_beneath(dir, path, flags)
}

/// [`open_beneath`] without `openat2`: one `O_NOFOLLOW` component at a time.
fn walk_beneath(dir: impl AsFd, path: &Path, flags: OFlags) -> Result<OwnedFd, Errno> {
    let parts: Vec<&std::ffi::OsStr> = path
        .components()
        .filter(|part| *part != Component::CurDir)
        .map(|part| match part {
            Component::Normal(name) => Ok(name),
            _ => Err(Errno::XDEV),
        })
        .collect::<Result<_, _>>()?;
    let Some((last, folders)) = parts.split_last() else {
        return rustix::fs::openat(dir, ".", flags, Mode::empty());
    };
    let walk = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut current = rustix::fs::openat(dir, ".", walk, Mode::empty())?;
    for folder in folders {
        current = match rustix::fs::openat(&current, *folder, walk, Mode::empty()) {
            // O_NOFOLLOW|O_DIRECTORY on a symlink: ENOTDIR; say it was a link.
            Err(Errno::NOTDIR) => return Err(symlink_refusal(&current, folder).unwrap_or(Errno::NOTDIR)),
            other => other?,
        };
    }
    let opened = rustix::fs::openat(&current, *last, flags | OFlags::NOFOLLOW, Mode::empty());
    match opened {
        Err(errno @ (Errno::NOTDIR | Errno::LOOP)) => Err(symlink_refusal(&current, last).unwrap_or(errno)),
        // O_PATH|O_NOFOLLOW opens a symlink itself: refused as the others are.
        Ok(fd)
            if flags.contains(OFlags::PATH)
                && rustix::fs::fstat(&fd).is_ok_and(|stat| {
                    rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::Symlink
                }) =>
        {
            Err(Errno::LOOP)
        }
        other => other,
    }
}

/// Why a symlink at `name` in `dir` is refused, or none when it is no symlink: one that could
/// lead out (absolute, or with `..`) as `RESOLVE_BENEATH` refuses it (EXDEV), any other ELOOP.
fn symlink_refusal(dir: &OwnedFd, name: &std::ffi::OsStr) -> Option<Errno> {
    let target = rustix::fs::readlinkat(dir, name, Vec::new()).ok()?;
    let target = Path::new(std::ffi::OsStr::from_bytes(target.as_bytes()));
    let leads_out = target.is_absolute() || target.components().any(|part| part == Component::ParentDir);
    Some(if leads_out { Errno::XDEV } else { Errno::LOOP })
}

/// Turns an errno from opening `shown` into a sentence.
pub fn open_error(shown: &str, errno: Errno) -> ToolError {
    match errno {
        Errno::NOENT => ToolError::NotFound(shown.to_string()),
        Errno::XDEV => ToolError::Path {
            path: shown.to_string(),
            reason: "it leads outside the mounted folders (through a symlink)".into(),
        },
        Errno::LOOP => ToolError::Path {
            path: shown.to_string(),
            reason:
                "a symlink on the way is not followed (too many of them, or a kernel without openat2, where none are)"
                    .into(),
        },
        Errno::NAMETOOLONG => ToolError::Path { path: shown.to_string(), reason: "the path is too long".into() },
        Errno::NOTDIR => ToolError::Path { path: shown.to_string(), reason: "a part of it is not a folder".into() },
        Errno::ISDIR => ToolError::Path { path: shown.to_string(), reason: "it is a folder".into() },
        Errno::ACCESS | Errno::PERM => ToolError::Path { path: shown.to_string(), reason: "permission denied".into() },
        Errno::ROFS => ToolError::Path { path: shown.to_string(), reason: "it is on a read-only mount".into() },
        Errno::NOSPC | Errno::DQUOT | Errno::FBIG => no_space(shown),
        other => ToolError::Io { path: shown.to_string(), message: std::io::Error::from(other).to_string() },
    }
}

/// The sentence for a write the workspace's cap stopped.
pub fn no_space(shown: &str) -> ToolError {
    ToolError::Failed(format!(
        "{shown}: the workspace is full (it has a size cap); delete files you no longer need and try again"
    ))
}

impl Mounts {
    /// Opens each `(container path, writable)` root.
    pub fn open(roots: &[(PathBuf, bool)]) -> std::io::Result<Mounts> {
        let mut opened = Vec::with_capacity(roots.len());
        for (at, writable) in roots {
            let dir = rustix::fs::open(at, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
            opened.push(Root { at: at.clone(), writable: *writable, dir });
        }
        Ok(Mounts { roots: opened })
    }

    /// The mount a tool path is in, and the path relative to it; refuses what spec §8.5 forbids.
    pub fn locate<'a>(&'a self, path: &'a str) -> Result<Located<'a>, ToolError> {
        let refuse = |reason: &str| ToolError::Path { path: shown(path), reason: reason.into() };
        if path.contains('\0') {
            return Err(refuse("it contains a null byte"));
        }
        if path.len() > MAX_PATH_BYTES {
            return Err(refuse(&format!("it is longer than {MAX_PATH_BYTES} bytes")));
        }
        let candidate = Path::new(path);
        let mut count = 0;
        for component in candidate.components() {
            count += 1;
            if component == Component::ParentDir {
                return Err(refuse("`..` is not allowed"));
            }
        }
        if count > MAX_PATH_COMPONENTS {
            return Err(refuse(&format!("it has more than {MAX_PATH_COMPONENTS} parts")));
        }
        let default = self.roots.first().ok_or_else(|| refuse("no folder is mounted"))?;
        if !candidate.is_absolute() {
            let relative = candidate.strip_prefix(".").unwrap_or(candidate);
            return Ok(Located { root: default, relative });
        }
        for root in &self.roots {
            if let Ok(relative) = candidate.strip_prefix(&root.at) {
                return Ok(Located { root, relative });
            }
        }
        let mounted: Vec<String> = self.roots.iter().map(|root| root.at.display().to_string()).collect();
        Err(refuse(&format!("it is outside the mounted folders ({})", mounted.join(", "))))
    }

    pub fn default_root(&self) -> Option<&Root> {
        self.roots.first()
    }
}

/// A path as shown in messages: at most 200 characters.
pub fn shown(path: &str) -> String {
    if path.chars().count() > 200 {
        format!("{}…", path.chars().take(200).collect::<String>())
    } else {
        path.to_string()
    }
}

impl Located<'_> {
    /// The path as the model sees it (inside the container).
    pub fn display(&self) -> String {
        if self.relative.as_os_str().is_empty() {
            self.root.at.display().to_string()
        } else {
            self.root.at.join(self.relative).display().to_string()
        }
    }

    fn relative_or_dot(&self) -> &Path {
        if self.relative.as_os_str().is_empty() {
            Path::new(".")
        } else {
            self.relative
        }
    }

    /// Opens the file or folder with `flags`, confined to the mount.
    pub fn open(&self, flags: OFlags) -> Result<OwnedFd, ToolError> {
        open_beneath(&self.root.dir, self.relative_or_dot(), flags | OFlags::CLOEXEC, beneath())
            .map_err(|errno| open_error(&self.display(), errno))
    }

    /// The parent folder (created with its missing ancestors when `create`) and the file name.
    pub fn parent(&self, create: bool) -> Result<(OwnedFd, std::ffi::OsString), ToolError> {
        if !self.root.writable {
            return Err(ToolError::Path { path: self.display(), reason: "it is on a read-only mount".into() });
        }
        let name = self
            .relative
            .file_name()
            .ok_or_else(|| ToolError::Path { path: self.display(), reason: "it names a folder, not a file".into() })?
            .to_os_string();
        let parent = self.relative.parent().unwrap_or(Path::new(""));
        let mut dir =
            open_beneath(&self.root.dir, Path::new("."), OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, beneath())
                .map_err(|errno| open_error(&self.root.at.display().to_string(), errno))?;
        let mut walked = self.root.at.clone();
        for component in parent.components() {
            let Component::Normal(part) = component else { continue };
            walked.push(part);
            let shown_dir = walked.display().to_string();
            let open = |dir: &OwnedFd| {
                open_beneath(dir, Path::new(part), OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, beneath())
            };
            dir = match open(&dir) {
                Ok(next) => next,
                Err(Errno::NOENT) if create => {
                    match rustix::fs::mkdirat(&dir, part, Mode::from_raw_mode(0o755)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(errno) => return Err(open_error(&shown_dir, errno)),
                    }
                    open(&dir).map_err(|errno| open_error(&shown_dir, errno))?
                }
                Err(errno) => return Err(open_error(&shown_dir, errno)),
            };
        }
        Ok((dir, name))
    }
}

/// Reads everything from `fd` up to `cap` bytes; says whether there was more. Read straight into
/// a buffer that starts at 16 KiB and doubles, without a second descriptor: a small file is one
/// read and the end-of-file read, which under gVisor is each a round trip to the sandbox's kernel.
pub fn read_capped(fd: impl AsFd, cap: usize) -> std::io::Result<(Vec<u8>, bool)> {
    let limit = cap.saturating_add(1);
    let mut bytes = Vec::with_capacity(limit.min(16 << 10));
    while bytes.len() < limit {
        if bytes.len() == bytes.capacity() {
            bytes.reserve_exact(bytes.capacity().min(limit - bytes.len()));
        }
        match rustix::io::read(fd.as_fd(), rustix::buffer::spare_capacity(&mut bytes)) {
            Ok(0) => break,
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => {}
            Err(errno) => return Err(errno.into()),
        }
    }
    let more = bytes.len() > cap;
    bytes.truncate(cap);
    Ok((bytes, more))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The walk without `openat2` opens what is inside and refuses what could lead out.
    #[test]
    fn the_walk_without_openat2_refuses_dot_dot_and_every_symlink() {
        let root = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(root.path().join("a/b")).expect("mkdir");
        std::fs::write(root.path().join("a/b/file.txt"), "hello").expect("write");
        std::os::unix::fs::symlink("b", root.path().join("a/inside")).expect("link");
        std::os::unix::fs::symlink("/etc", root.path().join("out")).expect("link");
        std::os::unix::fs::symlink("b/file.txt", root.path().join("a/file-link")).expect("link");
        let dir = rustix::fs::open(root.path(), OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .expect("root");
        let open = |path: &str, flags: OFlags| walk_beneath(&dir, Path::new(path), flags | OFlags::CLOEXEC);
        let fd = open("a/b/file.txt", OFlags::RDONLY).expect("a file inside");
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::fs::File::from(fd), &mut text).expect("read");
        assert_eq!(text, "hello");
        assert!(open(".", OFlags::PATH | OFlags::DIRECTORY).is_ok());
        assert!(open("./a/./b", OFlags::PATH | OFlags::DIRECTORY).is_ok());
        assert_eq!(open("a/../a/b/file.txt", OFlags::RDONLY).err(), Some(Errno::XDEV));
        assert_eq!(open("/etc/passwd", OFlags::RDONLY).err(), Some(Errno::XDEV));
        assert_eq!(open("out/passwd", OFlags::RDONLY).err(), Some(Errno::XDEV));
        assert_eq!(open("out", OFlags::RDONLY).err(), Some(Errno::XDEV));
        assert_eq!(open("a/inside/file.txt", OFlags::RDONLY).err(), Some(Errno::LOOP));
        assert_eq!(open("a/file-link", OFlags::RDONLY).err(), Some(Errno::LOOP));
        assert_eq!(open("a/file-link", OFlags::PATH).err(), Some(Errno::LOOP));
        assert_eq!(open("a/missing", OFlags::RDONLY).err(), Some(Errno::NOENT));
    }
}
