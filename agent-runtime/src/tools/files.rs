//! read_file, write_file, edit_file, list_dir, grep and find.

use std::fmt::Write as _;
use std::io::Write as _;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::paths::{open_error, read_capped, Located, Mounts};
use super::{Params, ToolError, ToolOutput};

/// The largest file read or edited whole.
pub const MAX_FILE_BYTES: usize = 10 << 20;
/// The most text a tool returns to the model.
pub const MAX_OUTPUT_BYTES: usize = 64 << 10;
/// Lines read_file returns when no limit is given.
pub const DEFAULT_LINES: usize = 2000;
/// Matches grep and paths find report at most.
pub const MAX_RESULTS: usize = 500;
/// Entries list_dir reports at most.
pub const MAX_ENTRIES: usize = 1000;

fn ok(content: String) -> Result<ToolOutput, ToolError> {
    Ok(ToolOutput { content, is_error: false, metadata: vec![] })
}

fn io_error(path: &str, error: std::io::Error) -> ToolError {
    if matches!(error.raw_os_error(), Some(code) if code == Errno::NOSPC.raw_os_error() || code == Errno::DQUOT.raw_os_error())
    {
        return super::paths::no_space(path);
    }
    ToolError::Io { path: path.to_string(), message: error.to_string() }
}

/// Opens a regular file for reading, with its status. Opened without blocking: a FIFO, device
/// or socket is refused at once, never waited on.
pub(super) fn open_regular(located: &Located<'_>) -> Result<(OwnedFd, rustix::fs::Stat), ToolError> {
    let shown_path = located.display();
    let fd = located.open(OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY)?;
    let stat = rustix::fs::fstat(&fd).map_err(|errno| open_error(&shown_path, errno))?;
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => Ok((fd, stat)),
        FileType::Directory => Err(ToolError::Path { path: shown_path, reason: "it is a folder: use list_dir".into() }),
        other => Err(ToolError::Path {
            path: shown_path,
            reason: format!("it is not a regular file but {}", kind_name(other)),
        }),
    }
}

/// Opens a regular file for reading and returns it with its contents (up to the cap).
fn read_whole(located: &Located<'_>) -> Result<(OwnedFd, Vec<u8>), ToolError> {
    let shown_path = located.display();
    let (fd, _) = open_regular(located)?;
    let (bytes, more) = read_capped(&fd, MAX_FILE_BYTES).map_err(|error| io_error(&shown_path, error))?;
    if more {
        return Err(ToolError::Failed(format!(
            "{shown_path} is larger than {} MiB; read it in parts with offset and limit",
            MAX_FILE_BYTES >> 20
        )));
    }
    Ok((fd, bytes))
}

pub fn read_file(params: &Params<'_>, mounts: &Mounts) -> Result<ToolOutput, ToolError> {
    let path = params.string("path")?;
    let offset = params.optional_u64("offset")?.unwrap_or(1).max(1) as usize;
    let limit = params.optional_u64("limit")?.map_or(DEFAULT_LINES, |l| l.max(1) as usize);
    let located = mounts.locate(path)?;
    let shown_path = located.display();
    let (fd, stat) = open_regular(&located)?;
    // Enough to reach the requested lines of any sane text file.
    let (bytes, more_bytes) = read_capped(&fd, MAX_FILE_BYTES).map_err(|error| io_error(&shown_path, error))?;
    if bytes[..bytes.len().min(8192)].contains(&0) {
        return ok(format!("{shown_path} is a binary file of {} bytes", stat.st_size));
    }
    let text = String::from_utf8_lossy(&bytes);
    let total = text.lines().count();
    let mut out = String::new();
    let mut shown_lines = 0;
    for (number, line) in text.lines().enumerate().skip(offset - 1).take(limit) {
        if out.len() + line.len() > MAX_OUTPUT_BYTES {
            break;
        }
        let _ = writeln!(out, "{:>6}\t{line}", number + 1);
        shown_lines += 1;
    }
    let last = offset - 1 + shown_lines;
    if offset > total && total > 0 {
        return Err(ToolError::Param {
            name: "offset",
            problem: format!("{shown_path} has {total} lines; offset {offset} is past its end"),
        });
    }
    if last < total || more_bytes {
        let _ = writeln!(out, "[lines {offset}–{last} of {total}; read on with offset={}]", last + 1);
    }
    if total == 0 {
        out = format!("{shown_path} is empty\n");
    }
    ok(out)
}

/// Writes `bytes` to `located` atomically: a temporary file in the same folder, fsync, rename,
/// fsync of the folder. The file's permissions are `mode`.
pub(crate) fn write_atomic(located: &Located<'_>, bytes: &[u8], mode: u32) -> Result<(), ToolError> {
    let shown_path = located.display();
    let (dir, name) = located.parent(true)?;
    let temp = format!(".{}.baaaht-{}.tmp", name.to_string_lossy(), std::process::id());
    let flags = OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    // A temp file left by a crash is ours to replace.
    let _ = rustix::fs::unlinkat(&dir, temp.as_str(), AtFlags::empty()); // silent-ok: usually absent
    let fd = rustix::fs::openat(&dir, temp.as_str(), flags, Mode::from_raw_mode(mode & 0o777))
        .map_err(|errno| open_error(&shown_path, errno))?;
    let mut file = std::fs::File::from(fd);
    let written = file.write_all(bytes).and_then(|()| file.sync_all());
    if let Err(error) = written {
        let _ = rustix::fs::unlinkat(&dir, temp.as_str(), AtFlags::empty()); // silent-ok: cleanup of our own temp file
        return Err(io_error(&shown_path, error));
    }
    rustix::fs::renameat(&dir, temp.as_str(), &dir, name.as_os_str()).map_err(|errno| {
        let _ = rustix::fs::unlinkat(&dir, temp.as_str(), AtFlags::empty()); // silent-ok: cleanup of our own temp file
        open_error(&shown_path, errno)
    })?;
    if let Ok(folder) =
        rustix::fs::openat(&dir, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
    {
        // silent-ok: the rename is done; a folder that cannot be synced still holds the file.
        let _ = rustix::fs::fsync(&folder);
    }
    Ok(())
}

pub fn write_file(params: &Params<'_>, mounts: &Mounts) -> Result<ToolOutput, ToolError> {
    let path = params.string("path")?;
    let content = params.string("content")?;
    if content.len() > MAX_FILE_BYTES {
        return Err(ToolError::Param {
            name: "content",
            problem: format!("is {} bytes; at most {} MiB can be written at once", content.len(), MAX_FILE_BYTES >> 20),
        });
    }
    let located = mounts.locate(path)?;
    write_atomic(&located, content.as_bytes(), 0o644)?;
    ok(format!("wrote {} bytes to {}", content.len(), located.display()))
}

pub fn edit_file(params: &Params<'_>, mounts: &Mounts) -> Result<ToolOutput, ToolError> {
    let path = params.string("path")?;
    let old = params.string("old_text")?;
    let new = params.string("new_text")?;
    let replace_all = params.flag("replace_all")?;
    if old.is_empty() {
        return Err(ToolError::Param { name: "old_text", problem: "is empty; give the exact text to replace".into() });
    }
    let located = mounts.locate(path)?;
    let shown_path = located.display();
    let (fd, bytes) = read_whole(&located)?;
    let text = String::from_utf8(bytes).map_err(|_not_utf8| {
        ToolError::Failed(format!("{shown_path} is not UTF-8 text; edit_file cannot change it"))
    })?;
    let count = text.matches(old).count();
    match count {
        0 => {
            return Err(ToolError::Failed(format!(
                "old_text was not found in {shown_path}; read the file and copy the text exactly, including whitespace"
            )))
        }
        1 => {}
        _ if !replace_all => {
            return Err(ToolError::Failed(format!(
                "old_text occurs {count} times in {shown_path}; include more surrounding text to make it unique, \
                 or set replace_all to replace every one"
            )))
        }
        _ => {}
    }
    let mode = rustix::fs::fstat(&fd).map(|stat| stat.st_mode).unwrap_or(0o644);
    let changed = if replace_all { text.replace(old, new) } else { text.replacen(old, new, 1) };
    write_atomic(&located, changed.as_bytes(), mode)?;
    let what = if count == 1 { "1 occurrence".to_string() } else { format!("{count} occurrences") };
    Ok(ToolOutput {
        content: format!("replaced {what} in {shown_path}"),
        is_error: false,
        metadata: vec![("replacements".into(), count.to_string())],
    })
}

/// What a file that is not a regular one is, for messages.
fn kind_name(kind: FileType) -> &'static str {
    match kind {
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice | FileType::BlockDevice => "a device",
        FileType::Symlink => "a symlink",
        FileType::Directory => "a folder",
        _ => "something else",
    }
}

fn kind_of(mode: u32) -> &'static str {
    match FileType::from_raw_mode(mode) {
        FileType::Directory => "dir ",
        FileType::RegularFile => "file",
        FileType::Symlink => "link",
        _ => "other",
    }
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ`.
fn utc(seconds: i64) -> String {
    let days = seconds.div_euclid(86_400);
    let rest = seconds.rem_euclid(86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rest / 3600, rest / 60 % 60, rest % 60)
}

pub fn list_dir(params: &Params<'_>, mounts: &Mounts) -> Result<ToolOutput, ToolError> {
    let path = params.optional_string("path")?.unwrap_or(".");
    let located = mounts.locate(path)?;
    let shown_path = located.display();
    let dir = located.open(OFlags::RDONLY | OFlags::DIRECTORY)?;
    let mut names = vec![];
    for entry in rustix::fs::Dir::read_from(&dir).map_err(|errno| open_error(&shown_path, errno))? {
        let entry = entry.map_err(|errno| open_error(&shown_path, errno))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name != "." && name != ".." {
            names.push(name);
        }
    }
    names.sort();
    let total = names.len();
    let mut out = format!("{shown_path}: {total} entries\n");
    for name in names.iter().take(MAX_ENTRIES) {
        match rustix::fs::statat(&dir, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => {
                let kind = kind_of(stat.st_mode);
                let suffix = if kind == "dir " { "/" } else { "" };
                let _ = writeln!(out, "{kind}  {:>10}  {}  {name}{suffix}", stat.st_size, utc(stat.st_mtime));
            }
            // Gone since it was listed.
            Err(_) => continue,
        }
    }
    if total > MAX_ENTRIES {
        let _ = writeln!(out, "[{} more entries not shown]", total - MAX_ENTRIES);
    }
    ok(out)
}

/// The ignore files the walk reads in every folder; one that is not a regular file (a FIFO
/// would block the walk forever) stops the walk with a sentence.
const IGNORE_FILES: &[&str] = &[".gitignore", ".ignore"];

/// The first of `folder`'s ignore files that is not a regular file, with what it is.
fn odd_ignore_file(folder: &Path) -> Option<(std::path::PathBuf, FileType)> {
    IGNORE_FILES.iter().find_map(|name| {
        let path = folder.join(name);
        let kind = FileType::from_raw_mode(rustix::fs::lstat(&path).ok()?.st_mode);
        (kind != FileType::RegularFile).then_some((path, kind))
    })
}

/// A walk over the folder `located` (confined: the walk starts from a descriptor opened beneath
/// the mount, and never follows a symlink), yielding paths relative to it. A folder whose
/// ignore file is not a regular file is not entered, and recorded in the returned cell.
type Odd = std::sync::Arc<std::sync::Mutex<Option<(std::path::PathBuf, FileType)>>>;

fn walk(located: &Located<'_>) -> Result<(OwnedFd, std::path::PathBuf, ignore::Walk, Odd), ToolError> {
    let dir = located.open(OFlags::PATH | OFlags::DIRECTORY)?;
    let start = std::path::PathBuf::from(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&dir)));
    let odd: Odd = Odd::default();
    if let Some(found) = odd_ignore_file(&start) {
        *odd.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(found);
    }
    let seen = odd.clone();
    let walk = ignore::WalkBuilder::new(&start)
        .follow_links(false)
        .hidden(false)
        .git_ignore(true)
        .git_global(false)
        .git_exclude(false)
        .require_git(false)
        .parents(false)
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(move |entry| {
            if !entry.file_type().is_some_and(|kind| kind.is_dir()) {
                return true;
            }
            match odd_ignore_file(entry.path()) {
                None => true,
                Some(found) => {
                    seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get_or_insert(found);
                    false
                }
            }
        })
        .build();
    Ok((dir, start, walk, odd))
}

/// Refuses a walk that met an ignore file that is not a regular file.
fn check_odd(odd: &Odd, start: &Path, base: &str) -> Result<(), ToolError> {
    let found = odd.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    let Some((path, kind)) = found else { return Ok(()) };
    let relative = path.strip_prefix(start).unwrap_or(&path);
    Err(ToolError::Path {
        path: Path::new(base).join(relative).display().to_string(),
        reason: format!(
            "it is {}, not a regular file; grep and find read it as an ignore file: remove it",
            kind_name(kind)
        ),
    })
}

fn glob_matcher(pattern: &str, name: &'static str) -> Result<(globset::GlobMatcher, bool), ToolError> {
    let glob = globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map_err(|error| ToolError::Param { name, problem: format!("`{pattern}` is not a glob: {error}") })?;
    // A pattern without `/` matches file names anywhere, as `find -name` does.
    Ok((glob.compile_matcher(), !pattern.contains('/')))
}

pub fn find(params: &Params<'_>, mounts: &Mounts) -> Result<ToolOutput, ToolError> {
    let pattern = params.string("pattern")?;
    let (matcher, by_name) = glob_matcher(pattern, "pattern")?;
    let located = mounts.locate(params.optional_string("path")?.unwrap_or("."))?;
    let base = located.display();
    let (_dir, start, walk, odd) = walk(&located)?;
    check_odd(&odd, &start, &base)?;
    let mut found = vec![];
    let mut more = false;
    for entry in walk.flatten() {
        let Ok(relative) = entry.path().strip_prefix(&start) else { continue };
        if relative.as_os_str().is_empty() || entry.file_type().is_some_and(|t| t.is_dir()) {
            continue;
        }
        let hit = if by_name {
            relative.file_name().is_some_and(|n| matcher.is_match(n))
        } else {
            matcher.is_match(relative)
        };
        if hit {
            if found.len() == MAX_RESULTS {
                more = true;
                break;
            }
            found.push(Path::new(&base).join(relative).display().to_string());
        }
    }
    check_odd(&odd, &start, &base)?;
    found.sort();
    let mut out = found.join("\n");
    if found.is_empty() {
        out = format!("no file under {base} matches {pattern}");
    } else if more {
        let _ = write!(out, "\n[only the first {MAX_RESULTS} matches are shown; narrow the pattern]");
    }
    ok(out)
}

pub fn grep(params: &Params<'_>, mounts: &Mounts) -> Result<ToolOutput, ToolError> {
    use grep_searcher::{BinaryDetection, SearcherBuilder};
    let pattern = params.string("pattern")?;
    let ignore_case = params.flag("ignore_case")?;
    let filter = params.optional_string("glob")?.map(|glob| glob_matcher(glob, "glob")).transpose()?;
    let matcher =
        grep_regex::RegexMatcherBuilder::new().case_insensitive(ignore_case).build(pattern).map_err(|error| {
            ToolError::Param { name: "pattern", problem: format!("not a valid regular expression: {error}") }
        })?;
    let located = mounts.locate(params.optional_string("path")?.unwrap_or("."))?;
    let base = located.display();
    let (dir, start, walk, odd) = walk(&located)?;
    check_odd(&odd, &start, &base)?;
    let mut searcher = SearcherBuilder::new().binary_detection(BinaryDetection::quit(0)).line_number(true).build();
    let mut out = String::new();
    let mut hits = 0;
    let mut truncated = false;
    'files: for entry in walk.flatten() {
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let Ok(relative) = entry.path().strip_prefix(&start) else { continue };
        if let Some((glob, by_name)) = &filter {
            let hit =
                if *by_name { relative.file_name().is_some_and(|n| glob.is_match(n)) } else { glob.is_match(relative) };
            if !hit {
                continue;
            }
        }
        // Opened again beneath the searched folder: a file swapped for a symlink is refused.
        // Without blocking, and only a regular file: a FIFO swapped in is skipped at once.
        let Ok(fd) = super::paths::open_beneath(
            dir.as_fd(),
            relative,
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY,
            rustix::fs::ResolveFlags::BENEATH | rustix::fs::ResolveFlags::NO_SYMLINKS,
        ) else {
            continue;
        };
        if !rustix::fs::fstat(&fd).is_ok_and(|stat| FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile) {
            continue;
        }
        let file = std::fs::File::from(fd);
        let shown_file = Path::new(&base).join(relative).display().to_string();
        let mut stop = false;
        let sink = grep_searcher::sinks::UTF8(|line_number, line| {
            if hits == MAX_RESULTS || out.len() > MAX_OUTPUT_BYTES {
                stop = true;
                return Ok(false);
            }
            hits += 1;
            let line: String = line.trim_end_matches(['\n', '\r']).chars().take(500).collect();
            let _ = writeln!(out, "{shown_file}:{line_number}:{line}");
            Ok(true)
        });
        // silent-ok: an unreadable file (gone, not UTF-8 in part) is skipped, as grep -s does.
        let _ = searcher.search_file(&matcher, &file, sink);
        if stop {
            truncated = true;
            break 'files;
        }
    }
    check_odd(&odd, &start, &base)?;
    if hits == 0 {
        return ok(format!("no match for {pattern} under {base}"));
    }
    if truncated {
        let _ = writeln!(out, "[stopped after {hits} matches; narrow the pattern or the path]");
    }
    ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::{paths::Mounts, run, ToolOutput};

    struct Fixture {
        _temp: tempfile::TempDir,
        mounts: Mounts,
        root: std::path::PathBuf,
    }

    fn fixture() -> Fixture {
        let temp = tempfile::tempdir().expect("tempdir");
        let root = temp.path().join("workspace");
        std::fs::create_dir(&root).expect("workspace");
        let mounts = Mounts::open(&[(root.clone(), true)]).expect("mounts");
        Fixture { _temp: temp, mounts, root }
    }

    fn call(fixture: &Fixture, tool: &str, params: serde_json::Value) -> ToolOutput {
        let tool = baaaht_proto::ToolName::named(tool).expect("a tool's name");
        run(tool, &params, &fixture.mounts)
    }

    fn path(fixture: &Fixture, relative: &str) -> String {
        fixture.root.join(relative).display().to_string()
    }

    #[test]
    fn fifos_and_other_special_files_are_refused_at_once() {
        let f = fixture();
        let mkfifo = |relative: &str| {
            let status = std::process::Command::new("mkfifo").arg(f.root.join(relative)).status().expect("mkfifo");
            assert!(status.success());
        };
        mkfifo("pipe");
        let started = std::time::Instant::now();
        let read = call(&f, "read_file", json!({"path": "pipe"}));
        assert!(read.is_error && read.content.contains("not a regular file but a FIFO"), "{}", read.content);
        let edit = call(&f, "edit_file", json!({"path": "pipe", "old_text": "a", "new_text": "b"}));
        assert!(edit.is_error && edit.content.contains("a FIFO"), "{}", edit.content);
        let read = call(&f, "read_file", json!({"path": "/dev/null"}));
        assert!(read.is_error, "{}", read.content);
        // grep skips a FIFO among the files; an ignore file that is one stops grep and find.
        std::fs::write(f.root.join("a.txt"), "needle\n").expect("write");
        let found = call(&f, "grep", json!({"pattern": "needle"}));
        assert!(!found.is_error && found.content.contains("a.txt:1:needle"), "{}", found.content);
        std::fs::create_dir(f.root.join("sub")).expect("mkdir");
        mkfifo("sub/.gitignore");
        for tool in ["grep", "find"] {
            let refused = call(&f, tool, json!({"pattern": "needle"}));
            assert!(
                refused.is_error && refused.content.contains("sub/.gitignore` is refused: it is a FIFO"),
                "{tool}: {}",
                refused.content
            );
        }
        mkfifo(".ignore");
        let refused = call(&f, "find", json!({"pattern": "*"}));
        assert!(refused.is_error && refused.content.contains("/.ignore"), "{}", refused.content);
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "nothing waited on a FIFO");
    }

    #[test]
    fn write_read_and_edit_round_trip() {
        let f = fixture();
        let wrote = call(&f, "write_file", json!({"path": "a/b/notes.txt", "content": "one\ntwo\nthree\ntwo\n"}));
        assert!(!wrote.is_error, "{}", wrote.content);
        let read = call(&f, "read_file", json!({"path": "a/b/notes.txt", "offset": 2, "limit": 2}));
        assert_eq!(read.content, "     2\ttwo\n     3\tthree\n[lines 2–3 of 4; read on with offset=4]\n");
        let ambiguous = call(&f, "edit_file", json!({"path": "a/b/notes.txt", "old_text": "two", "new_text": "2"}));
        assert!(ambiguous.is_error);
        assert!(ambiguous.content.contains("occurs 2 times"), "{}", ambiguous.content);
        let all = call(
            &f,
            "edit_file",
            json!({"path": "a/b/notes.txt", "old_text": "two", "new_text": "2", "replace_all": true}),
        );
        assert_eq!(all.content, format!("replaced 2 occurrences in {}", path(&f, "a/b/notes.txt")));
        assert_eq!(std::fs::read_to_string(f.root.join("a/b/notes.txt")).expect("file"), "one\n2\nthree\n2\n");
        let missing = call(&f, "edit_file", json!({"path": "a/b/notes.txt", "old_text": "four", "new_text": "4"}));
        assert!(missing.is_error && missing.content.contains("was not found"), "{}", missing.content);
        let leftovers: Vec<_> = std::fs::read_dir(f.root.join("a/b")).expect("list").flatten().collect();
        assert_eq!(leftovers.len(), 1, "no temporary file is left behind");
    }

    #[test]
    fn escapes_are_refused() {
        let f = fixture();
        std::os::unix::fs::symlink("/", f.root.join("root-link")).expect("symlink");
        std::os::unix::fs::symlink("/etc/passwd", f.root.join("passwd-link")).expect("symlink");
        let deep = vec!["d"; 5000].join("/");
        for (tool, params, says) in [
            ("read_file", json!({"path": "../secret"}), "`..` is not allowed"),
            ("read_file", json!({"path": "/etc/passwd"}), "outside the mounted folders"),
            ("read_file", json!({"path": "root-link/etc/passwd"}), "leads outside the mounted folders"),
            ("read_file", json!({"path": "passwd-link"}), "leads outside the mounted folders"),
            ("list_dir", json!({"path": "root-link"}), "leads outside the mounted folders"),
            ("write_file", json!({"path": "root-link/tmp/x", "content": "x"}), "leads outside the mounted folders"),
            ("read_file", json!({"path": "a\u{0}b"}), "null byte"),
            ("read_file", json!({"path": deep}), "longer than 4096 bytes"),
            ("read_file", json!({"path": 7}), "must be a string"),
            ("read_file", json!({}), "parameter `path`: is required"),
        ] {
            let output = call(&f, tool, params);
            assert!(output.is_error, "{tool}: {}", output.content);
            assert!(output.content.contains(says), "{tool}: {} (expected {says})", output.content);
        }
        assert!(!std::path::Path::new("/tmp/x").exists() || std::fs::read_to_string("/tmp/x").is_ok_and(|t| t != "x"));
        let segments = vec!["d"; 300].join("/");
        let output = call(&f, "read_file", json!({"path": segments}));
        assert!(output.content.contains("more than 256 parts"), "{}", output.content);
    }

    #[test]
    fn a_symlink_swapped_in_while_reading_never_leaks_what_it_points_to() {
        let f = fixture();
        let outside = f.root.parent().expect("temp dir").join("secret.txt");
        std::fs::write(&outside, "SECRET outside the workspace\n").expect("write");
        let victim = f.root.join("victim.txt");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let swapper = {
            let (stop, victim, outside, root) = (stop.clone(), victim.clone(), outside.clone(), f.root.clone());
            std::thread::spawn(move || {
                let staged = root.join("staged");
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    // silent-ok: the reader may hold either version at any moment.
                    let _ = std::fs::write(&staged, "inside\n");
                    let _ = std::fs::rename(&staged, &victim);
                    // The regular file stays a moment, so that readers meet both states even
                    // on a loaded machine.
                    std::thread::sleep(std::time::Duration::from_micros(200));
                    let _ = std::fs::remove_file(&staged);
                    let _ = std::os::unix::fs::symlink(&outside, &staged);
                    let _ = std::fs::rename(&staged, &victim);
                }
            })
        };
        let mut served = 0;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut attempts = 0;
        while attempts < 3000 || (served == 0 && std::time::Instant::now() < deadline) {
            attempts += 1;
            for tool in ["read_file", "edit_file"] {
                let params = json!({"path": "victim.txt", "old_text": "inside", "new_text": "inside"});
                let output = call(&f, tool, params);
                assert!(!output.content.contains("SECRET"), "{tool} leaked: {}", output.content);
                served += usize::from(!output.is_error);
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        swapper.join().expect("swapper");
        assert!(served > 0, "the regular file was read at least once");
        assert_eq!(std::fs::read_to_string(&outside).expect("outside"), "SECRET outside the workspace\n");
    }

    #[test]
    fn list_grep_and_find() {
        let f = fixture();
        std::fs::create_dir_all(f.root.join("src/deep")).expect("dirs");
        std::fs::write(f.root.join("src/main.rs"), "fn main() {\n    println!(\"Hello\");\n}\n").expect("write");
        std::fs::write(f.root.join("src/deep/lib.rs"), "// hello again\n").expect("write");
        std::fs::write(f.root.join("notes.md"), "HELLO\n").expect("write");
        std::fs::write(f.root.join(".gitignore"), "target/\n").expect("write");
        std::fs::create_dir(f.root.join("target")).expect("dir");
        std::fs::write(f.root.join("target/out.rs"), "hello from a build\n").expect("write");
        std::os::unix::fs::symlink("/etc", f.root.join("etc-link")).expect("symlink");

        let listing = call(&f, "list_dir", json!({})).content;
        assert!(listing.starts_with(&format!("{}: 5 entries\n", f.root.display())), "{listing}");
        assert!(listing.contains("dir ") && listing.contains("src/") && listing.contains("link"), "{listing}");

        let found = call(&f, "find", json!({"pattern": "*.rs"})).content;
        assert_eq!(
            found,
            format!("{}\n{}", path(&f, "src/deep/lib.rs"), path(&f, "src/main.rs")),
            "ignored and linked files are skipped"
        );

        let hits = call(&f, "grep", json!({"pattern": "hello", "ignore_case": true, "glob": "*.rs"})).content;
        assert_eq!(
            hits,
            format!(
                "{}:1:// hello again\n{}:2:    println!(\"Hello\");\n",
                path(&f, "src/deep/lib.rs"),
                path(&f, "src/main.rs")
            )
        );
        let none = call(&f, "grep", json!({"pattern": "root:x"})).content;
        assert!(none.starts_with("no match"), "the symlink to /etc is not followed: {none}");
        let bad = call(&f, "grep", json!({"pattern": "("}));
        assert!(bad.is_error && bad.content.contains("not a valid regular expression"), "{}", bad.content);
    }

    #[test]
    fn dates_are_utc() {
        assert_eq!(super::utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::utc(1_795_000_000), "2026-11-18T11:06:40Z");
    }
}
