//! A session's log (spec §14.2): `sessions/{id}/session.jsonl`, one JSON entry per line — a
//! header, then messages, delegations, compactions and model changes, each naming its parent,
//! so that branches share their history — and what its people were shown besides (approvals,
//! notices: [`Activity`]), each naming the entry it came after and on no branch. Only the daemon writes it, one fsync per entry. A line
//! that does not parse (e.g. cut by a crash) is reported with its line number and skipped, and
//! never removed from the file.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The log format's version, in every header.
pub const VERSION: u32 = 1;
pub const FILE_NAME: &str = "session.jsonl";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Header {
    pub version: u32,
    pub id: String,
    /// RFC 3339.
    pub created: String,
    pub user_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,
    /// "user" or "group".
    pub context_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The session and entry it was forked from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkPoint>,
    /// A scheduled run's own session (an isolated or silent task's): a message sent without
    /// naming a session never goes to it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub run: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForkPoint {
    pub session_id: String,
    pub entry_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    /// "user", "assistant" or "system".
    pub role: String,
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_type: Option<String>,
    /// Who wrote a user message (in a group session, one of several users).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender_id: Option<String>,
    /// Files shared with a user message, in the session's `uploads/` (the content names them too).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
}

/// A file shared with a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Attachment {
    /// `uploads/NAME`, in the workspace of `session`.
    pub path: String,
    /// The session UploadFile stored it in (a fork's messages keep their original's).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub session: String,
    pub mime_type: String,
    pub size_bytes: u64,
}

/// One line of the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Entry {
    Header(Header),
    #[serde(rename_all = "camelCase")]
    Message {
        id: String,
        parent: String,
        timestamp: String,
        message: Message,
    },
    #[serde(rename_all = "camelCase")]
    Delegate {
        id: String,
        parent: String,
        timestamp: String,
        agent: String,
        task: String,
        result: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
        /// Its answer was the turn's reply, streamed to the person (the reply entry after it
        /// holds it).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        returned: bool,
    },
    #[serde(rename_all = "camelCase")]
    Compaction {
        id: String,
        parent: String,
        timestamp: String,
        summary: String,
        compacted_entry_ids: Vec<String>,
        /// Whose messages it summarises (user ids): their words are in it (DESIGN.md §10.3).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        senders: Vec<String>,
    },
    #[serde(rename_all = "camelCase")]
    ModelChange {
        id: String,
        parent: String,
        timestamp: String,
        previous_model: String,
        new_model: String,
    },
    /// Something the conversation's people were shown besides its messages, kept so that the
    /// conversation shows it again when opened anew. It is on no branch: no entry names it as
    /// its parent, the agents' history never holds it, and a fork leaves it behind.
    #[serde(rename_all = "camelCase")]
    Activity {
        id: String,
        /// The entry it came after (the branch's end when it happened).
        after: String,
        timestamp: String,
        activity: Activity,
    },
}

/// What an [`Entry::Activity`] showed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Activity {
    /// A tool's connection waited for someone to allow it (`approval`: its id), a skill for
    /// its review (`review`), or an acting tool of a marked turn (`action`; host and port empty).
    #[serde(rename_all = "camelCase")]
    Approval {
        approval: String,
        host: String,
        port: u16,
        agent: String,
        asked_by: String,
        expires_in: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        review: Option<Box<SkillReview>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        action: Option<Box<ActionReview>>,
    },
    /// Someone answered it (`by`, "nobody" when nobody did in time).
    #[serde(rename_all = "camelCase")]
    ApprovalSettled { approval: String, decision: String, by: String },
    /// A message for the conversation's people: an agent's, a budget's warning, a memory's
    /// review.
    Message {
        content: String,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        metadata: BTreeMap<String, String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        attachments: Vec<Attachment>,
    },
}

/// A skill an agent asked to install, fetched and checked, as its review card shows it
/// (`v1::SkillReview`): every string in it comes from the skill's repository.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SkillReview {
    pub name: String,
    pub description: String,
    pub source: String,
    pub commit: String,
    /// "you" or "the group NAME".
    pub installs_for: String,
    pub replaces: bool,
    pub files: u32,
    pub bytes: u64,
    /// (path, size in bytes) of each script.
    pub scripts: Vec<(String, u64)>,
    pub packages: Vec<String>,
    pub secrets: Vec<String>,
    pub hosts: Vec<String>,
    pub findings: Vec<String>,
    pub always_loaded: bool,
    /// It would take the place of the system's skill of the same name.
    pub hides_system_skill: bool,
}

/// An acting tool's call in a marked turn, as its question shows it (`v1::ActionReview`): every
/// string in it comes from the model or a tool's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ActionReview {
    pub server: String,
    pub tool: String,
    /// What its class says it does, a phrase each.
    pub effects: Vec<String>,
    /// (name, JSON value) of each argument, whole.
    pub arguments: Vec<(String, String)>,
    /// What the turn read from outside.
    pub source: String,
}

impl ActionReview {
    /// Every string in it, to be cleaned of secrets before anyone sees it.
    pub fn texts_mut(&mut self) -> impl Iterator<Item = &mut String> {
        [&mut self.server, &mut self.tool, &mut self.source]
            .into_iter()
            .chain(self.effects.iter_mut())
            .chain(self.arguments.iter_mut().flat_map(|(name, value)| [name, value]))
    }
}

impl SkillReview {
    /// Every string in it, to be cleaned of secrets before anyone sees it.
    pub fn texts_mut(&mut self) -> impl Iterator<Item = &mut String> {
        [&mut self.name, &mut self.description, &mut self.source, &mut self.commit, &mut self.installs_for]
            .into_iter()
            .chain(self.scripts.iter_mut().map(|(path, _)| path))
            .chain(self.packages.iter_mut())
            .chain(self.secrets.iter_mut())
            .chain(self.hosts.iter_mut())
            .chain(self.findings.iter_mut())
    }
}

impl Entry {
    pub fn id(&self) -> &str {
        match self {
            Entry::Header(header) => &header.id,
            Entry::Message { id, .. }
            | Entry::Delegate { id, .. }
            | Entry::Compaction { id, .. }
            | Entry::ModelChange { id, .. }
            | Entry::Activity { id, .. } => id,
        }
    }

    /// An activity: on no branch.
    pub fn is_activity(&self) -> bool {
        matches!(self, Entry::Activity { .. })
    }

    /// Hangs the entry under `new_parent` (a header has no parent and stays as it is).
    fn reparent(&mut self, new_parent: &str) {
        match self {
            Entry::Header(_) => {}
            Entry::Activity { after, .. } => *after = new_parent.to_string(),
            Entry::Message { parent, .. }
            | Entry::Delegate { parent, .. }
            | Entry::Compaction { parent, .. }
            | Entry::ModelChange { parent, .. } => *parent = new_parent.to_string(),
        }
    }

    /// The parent entry; the header and activities have none.
    pub fn parent(&self) -> Option<&str> {
        match self {
            Entry::Header(_) | Entry::Activity { .. } => None,
            Entry::Message { parent, .. }
            | Entry::Delegate { parent, .. }
            | Entry::Compaction { parent, .. }
            | Entry::ModelChange { parent, .. } => Some(parent),
        }
    }
}

/// A line that is not an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corrupt {
    /// 1-based.
    pub line: usize,
    pub reason: String,
}

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("session {0} already exists")]
    Exists(String),
    #[error("session log {} cannot be read or written", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("session log {}: its first line is not a header", path.display())]
    NoHeader { path: PathBuf },
    #[error("entry {id}: parent {parent} is not in session {session}")]
    UnknownParent { session: String, id: String, parent: String },
    #[error("entry {id} is already in session {session}")]
    DuplicateId { session: String, id: String },
    #[error("entry {0} is not in the session")]
    UnknownEntry(String),
    #[error("cannot encode an entry: {0}")]
    Encode(String),
}

/// The entries of a log and the lines that were skipped.
#[derive(Debug, Clone, Default)]
pub struct Read {
    pub entries: Vec<Entry>,
    pub corrupt: Vec<Corrupt>,
}

impl Read {
    pub fn header(&self) -> Option<&Header> {
        match self.entries.first() {
            Some(Entry::Header(header)) => Some(header),
            _ => None,
        }
    }

    /// Root → `leaf`: the entries of one branch (never an activity).
    pub fn branch(&self, leaf: &str) -> Result<Vec<Entry>, LogError> {
        let by_id: HashMap<&str, &Entry> =
            self.entries.iter().filter(|entry| !entry.is_activity()).map(|entry| (entry.id(), entry)).collect();
        let mut branch = vec![];
        let mut current = by_id.get(leaf).copied().ok_or_else(|| LogError::UnknownEntry(leaf.to_string()))?;
        let mut seen = HashSet::new();
        loop {
            if !seen.insert(current.id()) {
                break; // A cycle cannot be written by append; stop rather than loop.
            }
            branch.push(current.clone());
            match current.parent().and_then(|parent| by_id.get(parent)) {
                Some(parent) => current = parent,
                None => break,
            }
        }
        branch.reverse();
        Ok(branch)
    }

    /// Entries no other entry names as its parent: the ends of the branches.
    pub fn leaves(&self) -> Vec<&str> {
        let parents: HashSet<&str> = self.entries.iter().filter_map(Entry::parent).collect();
        self.entries
            .iter()
            .filter(|entry| !entry.is_activity())
            .map(Entry::id)
            .filter(|id| !parents.contains(id))
            .collect()
    }

    /// `branch` (as [`Read::branch`] gives it) with the activities that came after its
    /// entries, each after the entry it came after, in the order they were written.
    pub fn with_activities(&self, branch: Vec<Entry>) -> Vec<Entry> {
        let mut after: HashMap<&str, Vec<&Entry>> = HashMap::new();
        for entry in &self.entries {
            if let Entry::Activity { after: previous, .. } = entry {
                after.entry(previous.as_str()).or_default().push(entry);
            }
        }
        let mut shown = Vec::with_capacity(branch.len());
        for entry in branch {
            let activities = after.remove(entry.id()).unwrap_or_default();
            shown.push(entry);
            shown.extend(activities.into_iter().cloned());
        }
        shown
    }
}

/// One session's log file.
#[derive(Debug)]
pub struct SessionLog {
    path: PathBuf,
    session: String,
    ids: HashSet<String>,
    /// Those of activities, which no entry may name as its parent.
    activities: HashSet<String>,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> LogError + '_ {
    move |source| LogError::Io { path: path.to_path_buf(), source }
}

fn line_of(entry: &Entry) -> Result<Vec<u8>, LogError> {
    let mut line = serde_json::to_vec(entry).map_err(|error| LogError::Encode(error.to_string()))?;
    line.push(b'\n');
    Ok(line)
}

/// Reads the log at `path`, skipping (and reporting) lines that are not entries.
pub fn read(path: &Path) -> Result<Read, LogError> {
    let text = std::fs::read(path).map_err(io(path))?;
    let mut read = Read::default();
    for (index, line) in text.split(|byte| *byte == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Entry>(line) {
            Ok(Entry::Header(_)) if !read.entries.is_empty() => {
                read.corrupt.push(Corrupt { line: index + 1, reason: "a second header".into() })
            }
            Ok(entry) => read.entries.push(entry),
            Err(error) => read.corrupt.push(Corrupt { line: index + 1, reason: error.to_string() }),
        }
    }
    if read.header().is_none() {
        return Err(LogError::NoHeader { path: path.to_path_buf() });
    }
    Ok(read)
}

impl SessionLog {
    /// Creates `{folder}/session.jsonl` with `header`; refuses an existing session.
    pub fn create(folder: &Path, header: Header) -> Result<SessionLog, LogError> {
        std::fs::create_dir_all(folder).map_err(io(folder))?;
        let path = folder.join(FILE_NAME);
        let session = header.id.clone();
        let mut file = match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => return Err(LogError::Exists(session)),
            Err(error) => return Err(io(&path)(error)),
        };
        file.write_all(&line_of(&Entry::Header(header))?).and_then(|()| file.sync_all()).map_err(io(&path))?;
        std::fs::File::open(folder).and_then(|dir| dir.sync_all()).map_err(io(folder))?;
        Ok(SessionLog { path, ids: HashSet::from([session.clone()]), activities: HashSet::new(), session })
    }

    /// Opens an existing log; `read` tells what it holds.
    pub fn open(folder: &Path) -> Result<(SessionLog, Read), LogError> {
        let path = folder.join(FILE_NAME);
        let read = read(&path)?;
        let session = read.header().map(|header| header.id.clone()).unwrap_or_default();
        let ids = read.entries.iter().map(|entry| entry.id().to_string()).collect();
        let activities = read.entries.iter().filter(|entry| entry.is_activity()).map(|e| e.id().to_string()).collect();
        Ok((SessionLog { path, session, ids, activities }, read))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether `id` is an entry new messages may hang under (not an activity).
    pub fn takes_children(&self, id: &str) -> bool {
        self.ids.contains(id) && !self.activities.contains(id)
    }

    /// How many activities it holds.
    pub fn activities(&self) -> usize {
        self.activities.len()
    }

    /// Appends `entry` (its parent must be in the log), with an fsync.
    pub fn append(&mut self, entry: &Entry) -> Result<(), LogError> {
        let id = entry.id().to_string();
        if matches!(entry, Entry::Header(_)) || self.ids.contains(&id) {
            return Err(LogError::DuplicateId { session: self.session.clone(), id });
        }
        let parent = match entry {
            Entry::Activity { after, .. } => Some(after.as_str()),
            _ => entry.parent(),
        };
        if let Some(parent) = parent.filter(|parent| !self.ids.contains(*parent) || self.activities.contains(*parent)) {
            return Err(LogError::UnknownParent { session: self.session.clone(), id, parent: parent.to_string() });
        }
        let mut file = std::fs::OpenOptions::new().read(true).append(true).open(&self.path).map_err(io(&self.path))?;
        let length = file.metadata().map_err(io(&self.path))?.len();
        // A line cut by a crash stays as it is (reported when read); the next entry starts anew.
        let ends_cleanly = {
            use std::os::unix::fs::FileExt;
            let mut last = [0u8; 1];
            length == 0 || (file.read_exact_at(&mut last, length - 1).is_ok() && last[0] == b'\n')
        };
        let mut bytes = if ends_cleanly { vec![] } else { vec![b'\n'] };
        bytes.extend(line_of(entry)?);
        if let Err(error) = file.write_all(&bytes).and_then(|()| file.sync_data()) {
            // Not kept means not there: a part of the line (the disk filled under it, say)
            // would read back as an entry or a torn line.
            // silent-ok: the write's own error is the one to report.
            let _ = file.set_len(length);
            return Err(io(&self.path)(error));
        }
        if entry.is_activity() {
            self.activities.insert(id.clone());
        }
        self.ids.insert(id);
        Ok(())
    }
}

/// Starts session `header` in `folder` from the branch of `source` ending at `entry`: the new
/// log holds that branch (same ids) under its own header, which records where it came from.
pub fn fork(source: &Read, entry: &str, folder: &Path, mut header: Header) -> Result<SessionLog, LogError> {
    let branch = source.branch(entry)?;
    let origin = source.header().map(|h| h.id.clone()).unwrap_or_default();
    header.forked_from = Some(ForkPoint { session_id: origin.clone(), entry_id: entry.to_string() });
    let new_id = header.id.clone();
    let mut log = SessionLog::create(folder, header)?;
    for mut entry in branch.into_iter().skip(1) {
        // What hung off the old header now hangs off the new one.
        if entry.parent() == Some(origin.as_str()) {
            entry.reparent(&new_id);
        }
        log.append(&entry)?;
    }
    Ok(log)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(id: &str) -> Header {
        Header {
            version: VERSION,
            id: id.into(),
            created: "2026-11-22T10:00:00Z".into(),
            user_id: "alice".into(),
            group_id: None,
            context_type: "user".into(),
            title: None,
            forked_from: None,
            run: false,
        }
    }

    fn message(id: &str, parent: &str, role: &str, content: &str) -> Entry {
        Entry::Message {
            id: id.into(),
            parent: parent.into(),
            timestamp: "2026-11-22T10:00:01Z".into(),
            message: Message {
                role: role.into(),
                content: content.into(),
                channel_type: None,
                sender_id: None,
                attachments: vec![],
            },
        }
    }

    #[test]
    fn the_specs_example_reads_as_a_tree() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join(FILE_NAME), concat!(
            r#"{"type":"header","version":1,"id":"session-abc","created":"2026-02-05T10:00:00Z","userId":"user-123","contextType":"user"}"#, "\n",
            r#"{"type":"message","id":"msg-1","parent":"session-abc","timestamp":"t","message":{"role":"user","content":"Hello"}}"#, "\n",
            r#"{"type":"message","id":"msg-2","parent":"msg-1","timestamp":"t","message":{"role":"assistant","content":"Hi! How can I help?"}}"#, "\n",
            r#"{"type":"message","id":"msg-3","parent":"msg-2","timestamp":"t","message":{"role":"user","content":"Review this code"}}"#, "\n",
            r#"{"type":"message","id":"msg-4","parent":"msg-2","timestamp":"t","message":{"role":"user","content":"Actually, help me debug instead"}}"#, "\n",
            r#"{"type":"delegate","id":"del-1","parent":"msg-3","timestamp":"t","agent":"worker","task":"Search","result":"Found 3"}"#, "\n",
        )).expect("write");
        let (_, read) = SessionLog::open(dir.path()).expect("opens");
        assert!(read.corrupt.is_empty(), "{:?}", read.corrupt);
        let ids: Vec<String> = read.branch("del-1").expect("branch").iter().map(|e| e.id().to_string()).collect();
        assert_eq!(ids, ["session-abc", "msg-1", "msg-2", "msg-3", "del-1"]);
        assert_eq!(read.leaves(), ["msg-4", "del-1"]);
    }

    #[test]
    fn appends_check_parents_and_survive_a_cut_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut log = SessionLog::create(dir.path(), header("s1")).expect("create");
        assert!(matches!(SessionLog::create(dir.path(), header("s1")), Err(LogError::Exists(_))));
        log.append(&message("m1", "s1", "user", "hi")).expect("append");
        let unknown = log.append(&message("m2", "nope", "user", "x")).expect_err("unknown parent");
        assert_eq!(unknown.to_string(), "entry m2: parent nope is not in session s1");
        assert!(matches!(log.append(&message("m1", "s1", "user", "again")), Err(LogError::DuplicateId { .. })));
        // A crash cut the last line in half.
        let mut file = std::fs::OpenOptions::new().append(true).open(log.path()).expect("open");
        file.write_all(br#"{"type":"message","id":"m9","par"#).expect("write");
        log.append(&message("m2", "m1", "assistant", "hello")).expect("append after the cut");
        let (_, read) = SessionLog::open(dir.path()).expect("opens");
        assert_eq!(read.corrupt.len(), 1);
        assert_eq!(read.corrupt[0].line, 3, "{:?}", read.corrupt);
        assert_eq!(read.entries.len(), 3);
        let text = std::fs::read_to_string(log.path()).expect("read");
        assert!(text.contains(r#""id":"m9","par"#), "a corrupt line is never removed");
    }

    #[test]
    fn a_fork_carries_its_branch_and_says_where_it_came_from() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut log = SessionLog::create(&dir.path().join("s1"), header("s1")).expect("create");
        log.append(&message("m1", "s1", "user", "one")).expect("append");
        log.append(&message("m2", "m1", "assistant", "two")).expect("append");
        log.append(&message("m3", "m2", "user", "three")).expect("append");
        let (_, read) = SessionLog::open(&dir.path().join("s1")).expect("opens");
        let forked = fork(&read, "m2", &dir.path().join("s2"), header("s2")).expect("fork");
        let (_, copy) = SessionLog::open(forked.path().parent().expect("folder")).expect("opens");
        let ids: Vec<&str> = copy.entries.iter().map(Entry::id).collect();
        assert_eq!(ids, ["s2", "m1", "m2"]);
        assert_eq!(
            copy.header().and_then(|h| h.forked_from.clone()),
            Some(ForkPoint { session_id: "s1".into(), entry_id: "m2".into() })
        );
        assert_eq!(copy.entries[1].parent(), Some("s2"));
    }

    #[test]
    fn an_activity_is_kept_beside_its_branch_and_never_on_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut log = SessionLog::create(dir.path(), header("s1")).expect("create");
        log.append(&message("m1", "s1", "user", "clone it")).expect("append");
        let activity = |id: &str, after: &str, decision: &str| Entry::Activity {
            id: id.into(),
            after: after.into(),
            timestamp: "2026-11-22T10:00:02Z".into(),
            activity: Activity::ApprovalSettled {
                approval: "a1".into(),
                decision: decision.into(),
                by: "Alice".into(),
            },
        };
        log.append(&activity("x1", "m1", "once")).expect("append an activity");
        log.append(&message("m2", "m1", "assistant", "cloned")).expect("the reply hangs off the message");
        log.append(&activity("x2", "m2", "deny")).expect("append an activity");
        assert!(matches!(log.append(&activity("x3", "nope", "deny")), Err(LogError::UnknownParent { .. })));
        assert!(
            matches!(log.append(&message("m3", "x1", "user", "under it")), Err(LogError::UnknownParent { .. })),
            "nothing hangs under an activity"
        );
        assert!(matches!(log.append(&activity("x4", "x1", "deny")), Err(LogError::UnknownParent { .. })));
        let (_, read) = SessionLog::open(dir.path()).expect("opens");
        assert_eq!(read.leaves(), ["m2"], "an activity ends no branch");
        let branch = read.branch("m2").expect("branch");
        assert_eq!(branch.iter().map(Entry::id).collect::<Vec<_>>(), ["s1", "m1", "m2"]);
        let shown = read.with_activities(branch);
        assert_eq!(shown.iter().map(Entry::id).collect::<Vec<_>>(), ["s1", "m1", "x1", "m2", "x2"]);
        assert!(read.branch("x1").is_err(), "no branch ends at an activity");
        let line = std::fs::read_to_string(log.path()).expect("read");
        assert!(line.contains(r#""type":"activity","id":"x1","after":"m1""#), "{line}");
        assert!(line.contains(r#""activity":{"kind":"approval_settled","approval":"a1""#), "{line}");
    }
}
