//! Taint (DESIGN.md §10.3): a turn whose agents read untrusted content loses its ways out.
//!
//! A prompt injection needs private data, untrusted content and a way out at once. The daemon
//! cannot tell an injected instruction from a real one, but it knows where content came from:
//! when a `web_fetch` or `web_search` result, an untrusted MCP server's answer, another
//! person's upload or another member's message enters an agent's context, the user turn it
//! works for (its session and turn; a delegation works for its Assistant's turn, so it carries
//! the taint) is marked. The mark follows the data: files a marked turn wrote mark the turns
//! that read them (`wrote`, `written`), and the callers mark a turn that reads a summary, a
//! search result or a memory made of another member's words or of content from outside. While
//! marked, by `security.taint`:
//! - egress `ask` becomes deny for hosts no rule allows, and `web_fetch` reaches only the
//!   addresses the turn was shown by content from outside (never the daemon's own sentences or
//!   the model's arguments), at most [`FOLLOW_PAGES`] of them on [`FOLLOW_HOSTS`] hosts, since
//!   which links a turn follows can itself carry data out;
//! - `message`, `schedule_task`, skill installs and `delegate` to the Coder are withheld;
//! - a tool that acts (an MCP tool of class `acts`: `work::mcp::effects`) is asked of a person
//!   first, and withheld where nobody can be asked (`work::tools::acting`);
//! - memory writes go to quarantine.
//!
//! Each refusal is a sentence for the agent (what was withheld and why) and an audit line
//! (`taint`). Marks are kept in `data/state/taint.json` and the journal beside it (a line per
//! change, folded every [`FOLD_AFTER`]), bounded in number and size; addresses are kept as
//! digests, never as text (a query may carry a token), and sources pass the redactor. A turn
//! resumed after a restart is still marked; a new turn starts clean. The checks are the
//! daemon's, on the paths every call takes: an agent cannot switch them off.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use sha2::Digest as _;

use crate::base::auth::Live;
use crate::base::config::{ActingInTaint, EgressInTaint, MemoryInTaint, TaintPolicy, Withhold};
use crate::base::state;
use crate::guard::audit::{Audit, Kind, Record};
use crate::guard::redact::{Place, Redact};
use crate::store::events::{Event, EventBus};

const FILE: &str = "taint.json";
const JOURNAL: &str = "taint.journal";
/// Changes journaled before they are folded into `taint.json`.
const FOLD_AFTER: usize = 512;
/// Marks older than this are dropped (a turn is long over by then).
const KEPT_SECONDS: u64 = 7 * 24 * 3600;
/// The most marks kept: past it the oldest go (their turns are over).
const MOST_MARKS: usize = 5_000;
/// The most addresses a turn remembers it was shown.
const MOST_SEEN: usize = 512;
/// An address longer than this is not remembered (so never followed by a marked turn).
const LONGEST_ADDRESS: usize = 2_048;
/// The most sources a mark names, and the most characters of each.
const MOST_SOURCES: usize = 8;
const LONGEST_SOURCE: usize = 300;
/// The most files of a session a mark follows.
const MOST_FILES: usize = 256;
/// The most marked messages kept of one conversation: its earliest (a later turn on the same
/// branch comes after them, so they mark it already).
const MOST_CARRIED_IN_ONE: usize = 16;
/// The most marked messages kept in all (past it the oldest go, and the conversations after
/// them are no longer marked by them). With [`MOST_CARRIED_IN_ONE`], one person's many marked
/// turns in one conversation cannot push others' marks out.
const MOST_CARRIED: usize = 50_000;
/// The most characters of a carried mark's source.
const LONGEST_CARRIED_SOURCE: usize = 120;
/// How the source of a mark carried from an earlier turn of a conversation begins.
pub const EARLIER: &str = "an earlier message of this conversation, whose turn read ";
/// The most shown pages a marked turn may follow, and on how many hosts: which links it
/// follows is a channel out, so it is kept narrow.
pub const FOLLOW_PAGES: usize = 10;
pub const FOLLOW_HOSTS: usize = 3;

/// A tainted turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mark {
    pub session: String,
    pub turn: String,
    /// What it read, first first (e.g. `web_fetch https://example.com/page`), redacted.
    pub sources: Vec<String>,
    /// Seconds since the epoch.
    pub since: u64,
    /// Digests of the shown pages it followed, and of their hosts.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub followed: BTreeSet<String>,
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub hosts: BTreeSet<String>,
    /// The browser's steps it took on its own (clicks, going back), counted: which it takes is
    /// a channel out, as the links it follows are.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub steps: u32,
}

fn is_zero(count: &u32) -> bool {
    *count == 0
}

/// The browser steps (clicks, going back) a marked turn takes before a person is asked: a page
/// of buttons would spell out what the turn read one click at a time. Enough to accept a
/// site's cookies and go on to the next page; a page of sixteen buttons learns 12 bits.
pub const BROWSER_STEPS: u32 = 3;

/// The addresses content from outside showed a turn (digests), which `web_fetch` may follow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Shown {
    session: String,
    turn: String,
    since: u64,
    seen: BTreeSet<String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct File {
    version: u32,
    marks: Vec<Mark>,
    #[serde(default)]
    shown: Vec<Shown>,
    /// Each session's latest user turn (kept for sessions with a mark only).
    #[serde(default)]
    latest: BTreeMap<String, String>,
    /// Each session's files (paths in its workspace, or the digest of a path the redactor
    /// would change) written by a marked turn.
    #[serde(default)]
    files: BTreeMap<String, BTreeMap<String, Written>>,
    /// The messages (their entries in session logs) whose turns were marked: what was said
    /// after them, in their conversation or a fork of it, was said having read what they read.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    carried: BTreeMap<String, Carried>,
}

/// A marked message: its conversation, what its turn read, and when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Carried {
    session: String,
    source: String,
    at: u64,
}

/// A file a marked turn wrote: the source of the mark, and when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Written {
    source: String,
    at: u64,
}

/// How a path the redactor would change is kept: its digest behind this.
pub const DIGEST_PATH: &str = "digest:";

/// The version of `taint.json` this daemon writes: 2 keeps digests of addresses.
const VERSION: u32 = 2;

/// One change, as the journal keeps it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "change")]
enum Change {
    Begin {
        session: String,
        turn: String,
        at: u64,
    },
    Marked {
        session: String,
        turn: String,
        source: String,
        at: u64,
        /// The message the turn answers (none: a scheduled run, an archival).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        entry: String,
    },
    Shown {
        session: String,
        turn: String,
        seen: Vec<String>,
        at: u64,
    },
    Followed {
        session: String,
        turn: String,
        page: String,
        host: String,
    },
    Stepped {
        session: String,
        turn: String,
    },
    Wrote {
        session: String,
        paths: Vec<String>,
        source: String,
        at: u64,
    },
    Gone {
        session: String,
        paths: Vec<String>,
    },
}

impl File {
    /// Puts `change` into the file (again, when a journal is replayed: changes are idempotent).
    fn apply(&mut self, change: Change) {
        match change {
            Change::Begin { session, turn, .. } => {
                self.latest.insert(session, turn);
            }
            Change::Marked { session, turn, source, at, entry } => {
                let new = !entry.is_empty() && !self.carried.contains_key(&entry);
                let in_one = || self.carried.values().filter(|carried| carried.session == session).count();
                if new && in_one() < MOST_CARRIED_IN_ONE {
                    let first = source.strip_prefix(EARLIER).unwrap_or(&source);
                    let source = first.chars().take(LONGEST_CARRIED_SOURCE).collect();
                    self.carried.insert(entry, Carried { session: session.clone(), source, at });
                }
                let mark = match self.marks.iter().position(|mark| mark.session == session && mark.turn == turn) {
                    Some(at) => &mut self.marks[at],
                    None => {
                        self.marks.push(Mark {
                            session,
                            turn,
                            sources: vec![],
                            since: at,
                            followed: BTreeSet::new(),
                            hosts: BTreeSet::new(),
                            steps: 0,
                        });
                        self.marks.last_mut().expect("just pushed")
                    }
                };
                if !mark.sources.contains(&source) && mark.sources.len() < MOST_SOURCES {
                    mark.sources.push(source);
                }
            }
            Change::Shown { session, turn, seen, at } => {
                let shown = match self.shown.iter().position(|shown| shown.session == session && shown.turn == turn) {
                    Some(at) => &mut self.shown[at],
                    None => {
                        self.shown.push(Shown { session, turn, since: at, seen: BTreeSet::new() });
                        self.shown.last_mut().expect("just pushed")
                    }
                };
                for digest in seen {
                    if shown.seen.len() >= MOST_SEEN {
                        break;
                    }
                    shown.seen.insert(digest);
                }
            }
            Change::Followed { session, turn, page, host } => {
                if let Some(mark) = self.marks.iter_mut().find(|mark| mark.session == session && mark.turn == turn) {
                    mark.followed.insert(page);
                    mark.hosts.insert(host);
                }
            }
            Change::Stepped { session, turn } => {
                if let Some(mark) = self.marks.iter_mut().find(|mark| mark.session == session && mark.turn == turn) {
                    mark.steps = mark.steps.saturating_add(1);
                }
            }
            Change::Wrote { session, paths, source, at } => {
                let files = self.files.entry(session).or_default();
                for path in paths {
                    if files.len() >= MOST_FILES && !files.contains_key(&path) {
                        break;
                    }
                    files.insert(path, Written { source: source.clone(), at });
                }
            }
            Change::Gone { session, paths } => {
                if let Some(files) = self.files.get_mut(&session) {
                    for path in &paths {
                        files.remove(path);
                    }
                    if files.is_empty() {
                        self.files.remove(&session);
                    }
                }
            }
        }
    }

    /// Drops what is older than [`KEPT_SECONDS`] at `now`, the oldest marks past
    /// [`MOST_MARKS`], and the latest turn of sessions with no mark.
    fn prune(&mut self, now: u64) {
        self.marks.retain(|mark| mark.since + KEPT_SECONDS > now);
        self.shown.retain(|shown| shown.since + KEPT_SECONDS > now);
        if self.marks.len() > MOST_MARKS {
            self.marks.sort_by_key(|mark| mark.since);
            let extra = self.marks.len() - MOST_MARKS;
            self.marks.drain(..extra);
        }
        if self.shown.len() > MOST_MARKS {
            self.shown.sort_by_key(|shown| shown.since);
            let extra = self.shown.len() - MOST_MARKS;
            self.shown.drain(..extra);
        }
        let marked: BTreeSet<&str> = self.marks.iter().map(|mark| mark.session.as_str()).collect();
        self.latest.retain(|session, _| marked.contains(session.as_str()));
        for files in self.files.values_mut() {
            files.retain(|_, written| written.at + KEPT_SECONDS > now);
        }
        self.files.retain(|_, files| !files.is_empty());
        // A conversation goes on for as long as it is written to: its marks are not dropped
        // for their age, only the oldest past the most kept.
        if self.carried.len() > MOST_CARRIED {
            let mut ages: Vec<u64> = self.carried.values().map(|carried| carried.at).collect();
            ages.sort_unstable();
            let oldest_kept = ages[ages.len() - MOST_CARRIED];
            self.carried.retain(|_, carried| carried.at >= oldest_kept);
        }
    }
}

/// A way out a tainted turn may lose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    Message,
    ScheduleTask,
    SkillInstall,
    DelegateCoder,
    MemoryWrite,
    /// A connection to a host no rule allows (which would be asked about).
    EgressAsk,
    /// `web_fetch` of an address the turn was not shown.
    WebFetch,
    /// `web_fetch` of a shown address past the pages and hosts a marked turn may follow.
    FollowMore,
}

impl Way {
    fn what(self) -> &'static str {
        match self {
            Way::Message => "`message` (it reaches every channel of the conversation)",
            Way::ScheduleTask => "`schedule_task`",
            Way::SkillInstall => "installing skills",
            Way::DelegateCoder => "delegating to the coder",
            Way::MemoryWrite => "writing memory",
            Way::EgressAsk => "connections to hosts no rule allows",
            Way::WebFetch => "`web_fetch` of addresses not in what it read",
            Way::FollowMore => "following more links",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Way::Message => "message",
            Way::ScheduleTask => "schedule_task",
            Way::SkillInstall => "skill_install",
            Way::DelegateCoder => "delegate_coder",
            Way::MemoryWrite => "memory_write",
            Way::EgressAsk => "egress_ask",
            Way::WebFetch => "web_fetch",
            Way::FollowMore => "follow_more",
        }
    }
}

/// What becomes of a memory write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemoryWrite {
    /// Kept as asked; the origin is the agent's inference from the user's words.
    Keep,
    /// Kept aside until its owner confirms it; the source it came from.
    Quarantine(String),
    /// Refused, with the sentence for the agent.
    Refuse(String),
}

/// The file and its journal.
struct Kept {
    file: File,
    journal: state::Journal,
}

/// Every tainted turn, and the turns calls run for now.
pub struct Taints {
    path: std::path::PathBuf,
    policy: TaintPolicy,
    kept: Mutex<Kept>,
    /// (session, turn) → tool calls running for it now.
    calls: Mutex<HashMap<(String, String), usize>>,
    audit: Audit,
    events: Arc<EventBus>,
    redact: Redact,
}

impl std::fmt::Debug for Taints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Taints").field("path", &self.path).finish_non_exhaustive()
    }
}

/// A tool call in progress for its turn; dropped when the call ends.
#[derive(Debug)]
pub struct Calling {
    taints: Arc<Taints>,
    key: (String, String),
}

impl Drop for Calling {
    fn drop(&mut self) {
        let mut calls = self.taints.calls.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = calls.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                calls.remove(&self.key);
            }
        }
    }
}

/// The addresses in `text` (http and https, without a trailing punctuation mark or fragment).
fn addresses(text: &str) -> impl Iterator<Item = String> + '_ {
    text.match_indices("http").filter_map(move |(at, _)| {
        let rest = &text[at..];
        if !(rest.starts_with("http://") || rest.starts_with("https://")) {
            return None;
        }
        let end = rest
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`' | '\\' | '|' | '{' | '}'))
            .unwrap_or(rest.len());
        let found = rest[..end].trim_end_matches(['.', ',', ';', ':', ')', ']', '!', '?']);
        Some(normal(found))
    })
}

/// `url` as compared: without its fragment.
fn normal(url: &str) -> String {
    url.split('#').next().unwrap_or(url).to_string()
}

/// The forms in which a server could give back what a turn sent it (`asked`), lowercased: as
/// written, percent-decoded, reversed, and each word of it that is base64 (standard or for
/// URLs) or hex decoded — an address found in one of them is the model's own, echoed.
fn echoes(asked: &str) -> Vec<String> {
    use base64::Engine as _;
    const SHORTEST: usize = 16;
    let decoded = percent_encoding::percent_decode_str(asked).decode_utf8_lossy().into_owned();
    let mut echoes = vec![asked.to_string(), asked.chars().rev().collect(), decoded.chars().rev().collect()];
    for text in [asked, decoded.as_str()] {
        // `=` ends a word: a query's `v=` before it, padding after it.
        let words = text.split(|c: char| !(c.is_ascii_alphanumeric() || "+/-_".contains(c)));
        for word in words.filter(|word| word.len() >= SHORTEST) {
            let engines =
                [&base64::engine::general_purpose::STANDARD_NO_PAD, &base64::engine::general_purpose::URL_SAFE_NO_PAD];
            for bytes in engines.iter().filter_map(|engine| engine.decode(word).ok()) {
                echoes.push(String::from_utf8_lossy(&bytes).into_owned());
            }
            if word.len() % 2 == 0 && word.bytes().all(|byte| byte.is_ascii_hexdigit()) {
                let bytes: Vec<u8> = (0..word.len())
                    .step_by(2)
                    .filter_map(|at| u8::from_str_radix(&word[at..at + 2], 16).ok())
                    .collect();
                echoes.push(String::from_utf8_lossy(&bytes).into_owned());
            }
        }
    }
    echoes.push(decoded);
    echoes.iter().map(|echo| echo.to_lowercase()).collect()
}

/// What is kept of `text` (an address, a host): a digest, so that nothing it carries is.
fn digest(text: &str) -> String {
    let digest = sha2::Sha256::digest(text.as_bytes());
    digest.iter().take(16).map(|byte| format!("{byte:02x}")).collect()
}

impl Taints {
    /// The marks kept in `state_dir`.
    pub fn open(state_dir: &Path, policy: TaintPolicy, audit: Audit, events: Arc<EventBus>, redact: Redact) -> Taints {
        let path = state_dir.join(FILE);
        let mut file: File = state::read_json_or_set_aside(&path, || File { version: VERSION, ..File::default() });
        let mut rewrite = false;
        if file.version < VERSION {
            // Version 1 kept the addresses a turn was shown as text; its marks are of turns
            // long over, and the addresses are not kept.
            tracing::info!(file = %path.display(), "the tainted turns' file is rewritten without the addresses it kept");
            file = File { version: VERSION, ..File::default() };
            rewrite = true;
        }
        let journal = match state::Journal::open::<Change>(state_dir.join(JOURNAL), FOLD_AFTER) {
            Ok((journal, changes)) => {
                rewrite |= !journal.is_empty();
                for change in changes {
                    file.apply(change);
                }
                journal
            }
            Err(error) => {
                tracing::error!(%error, "the tainted turns' journal cannot be read; the marks in it are lost");
                rewrite = true;
                state::Journal::empty(state_dir.join(JOURNAL), FOLD_AFTER)
            }
        };
        file.prune(state::now_seconds());
        let taints = Taints {
            path,
            policy,
            kept: Mutex::new(Kept { file, journal }),
            calls: Mutex::default(),
            audit,
            events,
            redact,
        };
        if rewrite {
            let mut kept = taints.lock();
            taints.fold(&mut kept);
        }
        taints
    }

    /// Where refusals are recorded.
    pub fn audit(&self) -> &Audit {
        &self.audit
    }

    pub fn policy(&self) -> &TaintPolicy {
        &self.policy
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes the file whole; the journal goes.
    fn fold(&self, kept: &mut Kept) {
        let written = state::write_json(&self.path, &kept.file).map_err(|error| error.to_string());
        let folded = written.and_then(|()| kept.journal.folded().map_err(|error| error.to_string()));
        if let Err(error) = folded {
            tracing::error!(%error, "cannot save the tainted turns; a restart would forget them");
        }
    }

    /// Applies `change` and keeps it: a journal line, or the whole file now and then.
    fn change(&self, kept: &mut Kept, change: Change) {
        let journaled = kept.journal.keep(&change);
        kept.file.apply(change);
        match journaled {
            Ok(true) => {}
            Ok(false) => self.fold(kept),
            Err(error) => {
                tracing::error!(%error, "cannot journal a tainted turn; the whole file is written instead");
                self.fold(kept);
            }
        }
    }

    /// A new user turn `turn` of `session` starts (clean).
    pub fn begin(&self, session: &str, turn: &str) {
        let mut kept = self.lock();
        if kept.file.latest.get(session).is_some_and(|latest| latest == turn) {
            return;
        }
        // Only a session with a mark needs its latest turn known.
        let marked = kept.file.marks.iter().any(|mark| mark.session == session);
        let begin = Change::Begin { session: session.into(), turn: turn.into(), at: state::now_seconds() };
        if marked {
            self.change(&mut kept, begin);
        } else {
            kept.file.apply(begin);
        }
        kept.file.prune(state::now_seconds());
    }

    /// A tool call of `live`'s turn runs until the guard is dropped.
    pub fn calling(self: &Arc<Self>, live: &Live) -> Calling {
        let key = (live.session.clone(), live.user_turn.clone());
        *self.calls.lock().unwrap_or_else(PoisonError::into_inner).entry(key.clone()).or_default() += 1;
        Calling { taints: self.clone(), key }
    }

    /// Marks `live`'s turn: its agent read `source`. The turn's channels are told the first time.
    pub fn taint(&self, live: &Live, source: &str) {
        let source: String = self.redact.clean(Place::State, source).chars().take(LONGEST_SOURCE).collect();
        let first = {
            let mut kept = self.lock();
            let known = kept.file.marks.iter().find(|mark| mark.session == live.session && mark.turn == live.user_turn);
            let first = known.is_none();
            if known.is_some_and(|mark| mark.sources.contains(&source) || mark.sources.len() >= MOST_SOURCES) {
                return;
            }
            if first && kept.file.latest.get(&live.session) != Some(&live.user_turn) {
                kept.file.latest.insert(live.session.clone(), live.user_turn.clone());
                let begin = Change::Begin {
                    session: live.session.clone(),
                    turn: live.user_turn.clone(),
                    at: state::now_seconds(),
                };
                self.change(&mut kept, begin);
            }
            let marked = Change::Marked {
                session: live.session.clone(),
                turn: live.user_turn.clone(),
                source: source.clone(),
                at: state::now_seconds(),
                entry: live.entry.clone(),
            };
            self.change(&mut kept, marked);
            first
        };
        if first {
            tracing::info!(session = %live.session, turn = %live.user_turn, %source, "turn tainted");
            let record = Record::new(Kind::Taint, format!("container:{}", live.role), "tainted")
                .context(&live.context)
                .session(&live.session)
                .correlation(&live.correlation_id);
            self.audit.record(record.detail("turn", live.user_turn.as_str()).detail("source", source.as_str()));
            let kind = crate::store::events::Kind::Tainted { source, withheld: self.withheld() };
            let event = Event::of_turn(&live.session, &live.user_turn, &live.correlation_id, kind);
            self.events.publish(&live.context, event);
        }
    }

    /// What the earliest marked message among `entries` (a conversation's branch, or what
    /// leads to a message a search found) read, if one is: the turn that reads them reads it,
    /// through what was answered after it (a reply, a delegate's result, a summary). A turn
    /// of that conversation is marked by [`EARLIER`] and it.
    pub fn carried<'a>(&self, entries: impl IntoIterator<Item = &'a str>) -> Option<String> {
        let kept = self.lock();
        entries.into_iter().find_map(|entry| kept.file.carried.get(entry)).map(|carried| carried.source.clone())
    }

    /// The turn `session`'s tools work for now: that of a call in progress, else its latest.
    fn working_turn(&self, kept: &Kept, session: &str) -> Option<String> {
        let calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        let mut running: Vec<&String> = calls.keys().filter(|(of, _)| of == session).map(|(_, turn)| turn).collect();
        running.sort();
        running.first().map(|turn| turn.to_string()).or_else(|| kept.file.latest.get(session).cloned())
    }

    /// Content from outside (`text`: a page fetched, search results, an untrusted server's
    /// answer) reached `session`'s tools: the addresses in it are ones the turn they work for
    /// was shown, which it may follow while marked. Only content from outside shows an
    /// address: never the daemon's own sentences, never what the model asked for.
    ///
    /// `asked` is what the turn sent for it (a fetch's address and body, a search's words, a
    /// call's parameters): an address the answer only echoes back from it (a page that repeats
    /// its query, a redirect to an address in the request) was the model's own words, not
    /// shown, whatever the encoding the request gave it in (as written or percent-decoded).
    pub fn shown(&self, session: &str, turn: Option<&str>, text: &str, asked: &str) {
        let echoes = echoes(asked);
        let seen: BTreeSet<String> = addresses(text)
            .filter(|address| address.len() <= LONGEST_ADDRESS)
            .filter(|address| {
                let lower = address.to_lowercase();
                !echoes.iter().any(|echo| echo.contains(&lower))
            })
            .map(|address| digest(&address))
            .collect();
        if seen.is_empty() {
            return;
        }
        let mut kept = self.lock();
        let Some(turn) = turn.map(str::to_string).or_else(|| self.working_turn(&kept, session)) else { return };
        let known = kept.file.shown.iter().find(|shown| shown.session == session && shown.turn == turn);
        let seen: Vec<String> = match known {
            Some(shown) if shown.seen.len() >= MOST_SEEN => return,
            Some(shown) => seen.into_iter().filter(|digest| !shown.seen.contains(digest)).collect(),
            None => seen.into_iter().collect(),
        };
        if seen.is_empty() {
            return;
        }
        let change = Change::Shown { session: session.into(), turn, seen, at: state::now_seconds() };
        self.change(&mut kept, change);
    }

    /// What the policy withholds from a tainted turn, for the status line.
    pub fn withheld(&self) -> Vec<String> {
        let policy = &self.policy;
        let mut withheld = vec![];
        if policy.egress_ask == EgressInTaint::Deny {
            withheld.push("new hosts".to_string());
        }
        for (way, setting) in [
            ("message", policy.message),
            ("schedule_task", policy.schedule_task),
            ("skill installs", policy.skill_install),
            ("delegating to the coder", policy.delegate_coder),
        ] {
            if setting == Withhold::Withhold {
                withheld.push(way.to_string());
            }
        }
        match policy.memory_write {
            MemoryInTaint::Quarantine => withheld.push("memory writes (kept for review)".into()),
            MemoryInTaint::Withhold => withheld.push("memory writes".into()),
            MemoryInTaint::Allow => {}
        }
        match policy.acting_tools {
            ActingInTaint::Ask => withheld.push("tools that act (asked first)".into()),
            ActingInTaint::Withhold => withheld.push("tools that act".into()),
            ActingInTaint::Allow => {}
        }
        withheld
    }

    /// The mark of `session`'s turn `turn`, if it is tainted.
    pub fn mark(&self, session: &str, turn: &str) -> Option<Mark> {
        let kept = self.lock();
        kept.file.marks.iter().find(|mark| mark.session == session && mark.turn == turn).cloned()
    }

    /// The mark `session`'s tools work under now: that of a turn a call runs for, else that
    /// of its latest turn.
    pub fn of_session(&self, session: &str) -> Option<Mark> {
        let turns: Vec<String> = {
            let calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
            calls.keys().filter(|(of, _)| of == session).map(|(_, turn)| turn.clone()).collect()
        };
        let kept = self.lock();
        let latest = kept.file.latest.get(session);
        kept.file
            .marks
            .iter()
            .find(|mark| mark.session == session && (turns.contains(&mark.turn) || latest == Some(&mark.turn)))
            .cloned()
    }

    /// The sentence an agent is told when `way` is withheld from its turn `mark`.
    fn sentence(way: Way, mark: &Mark) -> String {
        let source = mark.sources.first().map(String::as_str).unwrap_or("untrusted content");
        // A mark carried from an earlier turn stays with the conversation: a new message does
        // not lift it, a new conversation does.
        let again = match source.starts_with(EARLIER) {
            true => "in a new conversation (`/new`), which starts without what this one read",
            false => "in a new message",
        };
        if way == Way::FollowMore {
            return format!(
                "`web_fetch` of this address is paused for the rest of this turn: the turn read content from outside \
                 ({source}), and such a turn follows at most {FOLLOW_PAGES} of the links it was shown, on at most \
                 {FOLLOW_HOSTS} hosts (which links it follows could carry data out). Tell the user what you wanted \
                 to read; they can ask for it {again}."
            );
        }
        format!(
            "{} is paused for the rest of this turn: the turn read content from outside ({source}), which may \
             carry instructions that are not the user's. Tell the user what you wanted to do and why; they can \
             ask for it {again}.",
            capitalized(way.what())
        )
    }

    fn refuse(&self, mark: &Mark, principal: &str, way: Way) -> String {
        let why = Self::sentence(way, mark);
        let record = Record::new(Kind::Taint, principal, "withheld").session(&mark.session);
        let record = record.detail("turn", mark.turn.as_str()).detail("withheld", way.as_str());
        self.audit.record(record.detail("source", mark.sources.first().cloned().unwrap_or_default()));
        why
    }

    /// Whether `live`'s turn may use `way`; why not, in a sentence for the agent (audited).
    pub fn allow(&self, live: &Live, way: Way) -> Result<(), String> {
        if !self.withholds(way) {
            return Ok(());
        }
        match self.mark(&live.session, &live.user_turn) {
            Some(mark) => Err(self.refuse(&mark, &format!("container:{}", live.role), way)),
            None => Ok(()),
        }
    }

    /// Whether [`Taints::allow`] would let `live` take `way` now; nothing is refused or
    /// recorded (for work started ahead of a call that will ask).
    pub fn would_allow(&self, live: &Live, way: Way) -> bool {
        !self.withholds(way) || self.mark(&live.session, &live.user_turn).is_none()
    }

    /// Whether the policy withholds `way` from a marked turn.
    fn withholds(&self, way: Way) -> bool {
        let setting = match way {
            Way::Message => self.policy.message,
            Way::ScheduleTask => self.policy.schedule_task,
            Way::SkillInstall => self.policy.skill_install,
            Way::DelegateCoder => self.policy.delegate_coder,
            Way::MemoryWrite => match self.policy.memory_write {
                MemoryInTaint::Withhold => Withhold::Withhold,
                _ => Withhold::Allow,
            },
            Way::EgressAsk | Way::WebFetch | Way::FollowMore => Withhold::Withhold,
        };
        setting == Withhold::Withhold
    }

    /// What becomes of a memory write of `live`'s turn.
    pub fn memory_write(&self, live: &Live) -> MemoryWrite {
        let Some(mark) = self.mark(&live.session, &live.user_turn) else { return MemoryWrite::Keep };
        match self.policy.memory_write {
            MemoryInTaint::Allow => MemoryWrite::Keep,
            MemoryInTaint::Quarantine => {
                MemoryWrite::Quarantine(mark.sources.first().cloned().unwrap_or_else(|| "untrusted content".into()))
            }
            MemoryInTaint::Withhold => {
                MemoryWrite::Refuse(self.refuse(&mark, &format!("container:{}", live.role), Way::MemoryWrite))
            }
        }
    }

    /// Whether `session`'s tools (which work for whichever turn calls them) may use `way`:
    /// not while the turn they work for is tainted and the policy withholds it.
    pub fn allow_session(&self, session: &str, way: Way, principal: &str) -> Result<(), String> {
        let withheld = match way {
            Way::EgressAsk => self.policy.egress_ask == EgressInTaint::Deny,
            Way::ScheduleTask => self.policy.schedule_task == Withhold::Withhold,
            Way::Message => self.policy.message == Withhold::Withhold,
            _ => true,
        };
        match self.of_session(session).filter(|_| withheld) {
            Some(mark) => Err(self.refuse(&mark, principal, way)),
            None => Ok(()),
        }
    }

    /// Whether `session`'s tools may be asked about a host no rule names; why not, in a
    /// sentence.
    pub fn may_ask(&self, session: &str, principal: &str) -> Result<(), String> {
        self.allow_session(session, Way::EgressAsk, principal)
    }

    /// Whether `session`'s `web_fetch` may reach `url` (on `host`): always in a clean turn; in
    /// a tainted one, a host a rule allows (`allowed`), or an address content from outside
    /// showed the turn, up to [`FOLLOW_PAGES`] pages on [`FOLLOW_HOSTS`] hosts.
    pub fn may_fetch(
        &self,
        session: &str,
        url: &str,
        host: &str,
        allowed: bool,
        principal: &str,
    ) -> Result<(), String> {
        let Some(mark) = self.of_session(session) else { return Ok(()) };
        if allowed {
            return Ok(());
        }
        let page = digest(&normal(url));
        let mut kept = self.lock();
        let shown = kept
            .file
            .shown
            .iter()
            .any(|shown| shown.session == mark.session && shown.turn == mark.turn && shown.seen.contains(&page));
        if !shown {
            drop(kept);
            return Err(self.refuse(&mark, principal, Way::WebFetch));
        }
        let host = digest(&host.to_ascii_lowercase());
        let current = kept.file.marks.iter().find(|known| known.session == mark.session && known.turn == mark.turn);
        let (followed, hosts) = current.map(|mark| (mark.followed.clone(), mark.hosts.clone())).unwrap_or_default();
        if followed.contains(&page) {
            return Ok(());
        }
        let new_host = !hosts.contains(&host);
        if followed.len() >= FOLLOW_PAGES || (new_host && hosts.len() >= FOLLOW_HOSTS) {
            drop(kept);
            return Err(self.refuse(&mark, principal, Way::FollowMore));
        }
        let change = Change::Followed { session: mark.session.clone(), turn: mark.turn.clone(), page, host };
        self.change(&mut kept, change);
        Ok(())
    }

    /// Whether `session`'s browser may take one more step of its own (a click, going back)
    /// without a person: always in a clean turn; in a marked one, [`BROWSER_STEPS`] of them.
    /// The step is counted when it may.
    pub fn may_step(&self, session: &str) -> bool {
        let Some(mark) = self.of_session(session) else { return true };
        let mut kept = self.lock();
        let steps = kept
            .file
            .marks
            .iter()
            .find(|known| known.session == mark.session && known.turn == mark.turn)
            .map_or(0, |known| known.steps);
        if steps >= BROWSER_STEPS {
            return false;
        }
        self.change(&mut kept, Change::Stepped { session: mark.session.clone(), turn: mark.turn.clone() });
        true
    }

    /// A turn marked `mark` wrote `paths` (in its session's workspace): turns that read them
    /// later read what it wrote, and are marked too. A path the redactor would change is kept
    /// as its digest ([`DIGEST_PATH`]).
    pub fn wrote(&self, mark: &Mark, paths: Vec<String>) {
        let source = mark.sources.first().cloned().unwrap_or_else(|| "content from outside".into());
        self.wrote_from(&mark.session, source, paths);
    }

    /// `files` of `session` (each with what the turn that wrote its content read) were put back
    /// by an undo or a redo: they are marked again, as when that turn wrote them.
    pub fn put_back(&self, session: &str, files: Vec<(String, String)>) {
        let mut by_source: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (path, source) in files {
            by_source.entry(source).or_default().push(path);
        }
        for (source, paths) in by_source {
            self.wrote_from(session, source, paths);
        }
    }

    fn wrote_from(&self, session: &str, source: String, paths: Vec<String>) {
        let paths: BTreeSet<String> = paths
            .into_iter()
            .map(|path| normal_path(&path))
            .filter(|path| !path.is_empty())
            .map(|path| match self.redact.shield().scan(&path).1.is_empty() {
                true => path,
                false => format!("{DIGEST_PATH}{}", digest(&path)),
            })
            .collect();
        let mut kept = self.lock();
        let known = kept.file.files.get(session);
        let paths: Vec<String> =
            paths.into_iter().filter(|path| known.is_none_or(|files| !files.contains_key(path))).collect();
        if paths.is_empty() {
            return;
        }
        let change = Change::Wrote { session: session.to_string(), paths, source, at: state::now_seconds() };
        self.change(&mut kept, change);
    }

    /// The files of `session` written by a marked turn, with the source of each mark.
    pub fn written(&self, session: &str) -> BTreeMap<String, String> {
        let kept = self.lock();
        let files = kept.file.files.get(session).into_iter().flatten();
        files.map(|(path, written)| (path.clone(), written.source.clone())).collect()
    }

    /// Whether `path` (as a tool names it) is one of `written`'s.
    pub fn is_written(written: &BTreeMap<String, String>, path: &str) -> bool {
        let path = normal_path(path);
        written.contains_key(&path) || written.contains_key(&format!("{DIGEST_PATH}{}", digest(&path)))
    }

    /// `paths` of `session` are no longer there: reading the session's files no longer reads
    /// them.
    pub fn gone(&self, session: &str, paths: Vec<String>) {
        if paths.is_empty() {
            return;
        }
        let mut kept = self.lock();
        self.change(&mut kept, Change::Gone { session: session.into(), paths });
    }
}

/// A path in a workspace as the marks keep it: relative, without `./`, `//` or `/workspace/`.
fn normal_path(path: &str) -> String {
    let path = path.trim();
    let path = path.strip_prefix("/workspace").filter(|rest| rest.is_empty() || rest.starts_with('/')).unwrap_or(path);
    path.split('/').filter(|part| !part.is_empty() && *part != ".").collect::<Vec<_>>().join("/")
}

fn capitalized(text: &str) -> String {
    let mut characters = text.chars();
    match characters.next() {
        Some(first) if first.is_ascii_lowercase() => first.to_ascii_uppercase().to_string() + characters.as_str(),
        _ => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::auth::{Context, Role};

    fn live(turn: &str) -> Live {
        Live {
            session: "s1".into(),
            context: Context::user("alice"),
            role: Role::Worker,
            turn_id: "d-1".into(),
            correlation_id: "c".into(),
            user_turn: turn.into(),
            entry: format!("e-{turn}"),
            asker: None,
            speaks: false,
        }
    }

    fn taints(dir: &Path) -> Arc<Taints> {
        let audit = Audit::open(dir.join("audit"), false, 1, Arc::new(crate::base::metrics::Metrics::off()));
        let shield = Arc::new(crate::guard::redact::Shield::with_values(&[(
            "GITHUB_TOKEN",
            "ghp_canary0123456789abcdefghijklmnopqrstu",
        )]));
        let redact = Redact::new(shield, audit.clone());
        Arc::new(Taints::open(dir, TaintPolicy::default(), audit, Arc::new(EventBus::default()), redact))
    }

    #[test]
    fn a_tainted_turn_loses_its_ways_out_and_the_next_starts_clean_even_after_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = taints(dir.path());
        first.begin("s1", "t1");
        assert_eq!(first.allow(&live("t1"), Way::ScheduleTask), Ok(()));
        first.shown("s1", Some("t1"), "see https://evil.example/next.", "");
        first.taint(&live("t1"), "web_fetch https://evil.example/page");
        let why = first.allow(&live("t1"), Way::ScheduleTask).expect_err("withheld");
        assert!(why.starts_with("`schedule_task` is paused") && why.contains("web_fetch https://evil.example/page"));
        assert!(matches!(first.memory_write(&live("t1")), MemoryWrite::Quarantine(source) if source.contains("evil")));
        assert!(first.may_ask("s1", "container:tool").is_err());
        let fetch = |taints: &Taints, url: &str, allowed: bool| {
            let host = url.split('/').nth(2).unwrap_or_default().to_string();
            taints.may_fetch("s1", url, &host, allowed, "x")
        };
        assert_eq!(fetch(&first, "https://evil.example/next", false), Ok(()), "a link it was shown");
        assert!(fetch(&first, "https://evil.example/next?memory=secret", false).is_err());
        assert_eq!(fetch(&first, "https://allowed.example/", true), Ok(()));
        drop(first);
        let again = taints(dir.path());
        assert!(again.allow(&live("t1"), Way::DelegateCoder).is_err(), "kept across a restart");
        assert_eq!(fetch(&again, "https://evil.example/next", false), Ok(()), "what it was shown is kept too");
        again.begin("s1", "t2");
        assert_eq!(again.allow(&live("t2"), Way::DelegateCoder), Ok(()));
        assert_eq!(again.may_ask("s1", "x"), Ok(()), "the session's tools work for the new turn");
        let background = again.calling(&live("t1"));
        assert!(again.may_ask("s1", "x").is_err(), "while a call of the tainted turn runs");
        drop(background);
        assert_eq!(again.may_ask("s1", "x"), Ok(()));
    }

    #[test]
    fn a_marked_message_marks_the_turns_that_read_what_came_after_it_even_after_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = taints(dir.path());
        first.begin("s1", "t1");
        first.taint(&live("t1"), "web_fetch https://evil.example/page");
        assert_eq!(first.carried(["e-t0"]), None, "an earlier message is not marked");
        drop(first);
        let again = taints(dir.path());
        let carried = again.carried(["e-t0", "e-t1", "reply-1"]).expect("the marked turn's message is on the branch");
        assert_eq!(carried, "web_fetch https://evil.example/page");
        // The next turn is marked by it; its own mark names the first source, not a chain.
        again.begin("s1", "t2");
        again.taint(&live("t2"), &format!("{EARLIER}{carried}"));
        let why = again.allow(&live("t2"), Way::Message).expect_err("withheld");
        assert!(why.contains("whose turn read web_fetch https://evil.example/page"), "{why}");
        assert!(why.contains("in a new conversation (`/new`)"), "{why}");
        assert_eq!(again.carried(["e-t2"]), Some(carried));
    }

    #[test]
    fn a_marked_turn_follows_few_shown_links_on_few_hosts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let taints = taints(dir.path());
        taints.begin("s1", "t1");
        let links: String = (0..20).map(|n| format!(" https://h{}.example/p{n}", n % 5)).collect();
        taints.shown("s1", Some("t1"), &links, "");
        taints.taint(&live("t1"), "web_fetch https://h0.example/");
        let fetch = |n: usize| {
            taints.may_fetch(
                "s1",
                &format!("https://h{}.example/p{n}", n % 5),
                &format!("h{}.example", n % 5),
                false,
                "x",
            )
        };
        // Three hosts: h0, h1, h2; a fourth host is refused, the same hosts still served.
        assert_eq!(fetch(0), Ok(()));
        assert_eq!(fetch(1), Ok(()));
        assert_eq!(fetch(2), Ok(()));
        let refused = fetch(3).expect_err("a fourth host");
        assert!(refused.contains("at most 10 of the links") && refused.contains("at most 3 hosts"), "{refused}");
        assert_eq!(fetch(0), Ok(()), "a page followed already");
        for n in [5, 6, 7, 10, 11, 12, 15] {
            assert_eq!(fetch(n), Ok(()), "page {n}");
        }
        assert!(fetch(16).is_err(), "the eleventh page");
    }

    #[test]
    fn a_marked_turns_browser_takes_few_steps_of_its_own() {
        let dir = tempfile::tempdir().expect("tempdir");
        let taints = taints(dir.path());
        taints.begin("s1", "t1");
        assert!((0..20).all(|_| taints.may_step("s1")), "a clean turn clicks freely");
        taints.taint(&live("t1"), "the browser at https://evil.example/keypad");
        assert!((0..BROWSER_STEPS).all(|_| taints.may_step("s1")));
        assert!(!taints.may_step("s1"), "then a person is asked");
        drop(taints);
        assert!(!super::tests::taints(dir.path()).may_step("s1"), "counted across a restart");
    }

    #[test]
    fn what_an_answer_only_echoes_of_the_request_is_not_shown() {
        let dir = tempfile::tempdir().expect("tempdir");
        let taints = taints(dir.path());
        taints.begin("s1", "t1");
        taints.taint(&live("t1"), "web_fetch https://allowed.example/");
        // The model's own address bounced off an allowed host: in the request, in the page, in
        // the address it ended up at, percent-encoded or not.
        let asked = "https://allowed.example/x?u=http%3A%2F%2Fcollect.example%2Fc%3Fd%3DSECRET";
        let page =
            "https://allowed.example/x?u=http://collect.example/c?d=SECRET see http://collect.example/c?d=SECRET";
        taints.shown("s1", Some("t1"), page, asked);
        let refused = taints.may_fetch("s1", "http://collect.example/c?d=SECRET", "collect.example", false, "agent");
        assert!(refused.is_err(), "an echo is not shown");
        // Nor is one it gives back transformed: decoded from base64 or hex, reversed, in
        // other letters' case.
        use base64::Engine as _;
        let sent = "http://collect.example/c?d=SECRET2";
        let forms = [
            base64::engine::general_purpose::STANDARD.encode(sent),
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sent),
            sent.bytes().map(|byte| format!("{byte:02x}")).collect(),
            sent.chars().rev().collect(),
            sent.to_uppercase(),
        ];
        for form in forms {
            let asked = format!("https://allowed.example/decode?v={form}");
            taints.shown("s1", Some("t1"), &format!("your link: {sent} and {}", sent.to_uppercase()), &asked);
            let refused = taints.may_fetch("s1", sent, "collect.example", false, "agent");
            assert!(refused.is_err(), "an echo of {form} is not shown");
        }
        // What the page says of its own is.
        taints.shown("s1", Some("t1"), "next: https://allowed.example/page2", asked);
        assert!(taints.may_fetch("s1", "https://allowed.example/page2", "allowed.example", false, "agent").is_ok());
    }

    #[test]
    fn addresses_are_found_without_trailing_punctuation_or_fragment() {
        let found: Vec<String> =
            addresses("go to https://a.example/x#top, or (http://b.example/y). \"https://c.example/z\"").collect();
        assert_eq!(found, vec!["https://a.example/x", "http://b.example/y", "https://c.example/z"]);
    }

    #[test]
    fn the_file_stays_small_keeps_no_address_or_secret_and_files_carry_the_mark() {
        let dir = tempfile::tempdir().expect("tempdir");
        let taints = taints(dir.path());
        let token = "ghp_canary0123456789abcdefghijklmnopqrstu";
        taints.begin("s1", "t1");
        for n in 0..60 {
            let page: String = (0..50).map(|m| format!(" https://site{n}.example/{m}?token={token}")).collect();
            taints.shown("s1", Some("t1"), &page, "");
            taints.taint(&live("t1"), &format!("web_fetch https://site{n}.example/?token={token}"));
        }
        let mark = taints.mark("s1", "t1").expect("marked");
        assert_eq!(mark.sources.len(), MOST_SOURCES);
        taints.wrote(&mark, vec!["notes//page.md".into(), "/workspace/out.txt".into(), format!("{token}.txt")]);
        let written = taints.written("s1");
        assert!(Taints::is_written(&written, "/workspace/notes/page.md") && Taints::is_written(&written, "./out.txt"));
        assert!(Taints::is_written(&written, &format!("/workspace/{token}.txt")), "{written:?}");
        assert!(!Taints::is_written(&written, "notes"));
        taints.gone("s1", vec!["out.txt".into()]);
        drop(taints);
        let mut on_disk = String::new();
        for name in [FILE, JOURNAL] {
            on_disk.push_str(&std::fs::read_to_string(dir.path().join(name)).unwrap_or_default());
        }
        assert!(on_disk.len() < 100_000, "{} bytes", on_disk.len());
        assert!(!on_disk.contains(token) && !on_disk.contains("site3.example/7"), "{on_disk}");
        let again = super::tests::taints(dir.path());
        let written = again.written("s1");
        assert!(Taints::is_written(&written, "notes/page.md") && !Taints::is_written(&written, "out.txt"));
        assert!(again.mark("s1", "t1").is_some());
        // An undo or a redo that puts a marked turn's content back marks the file again.
        again.put_back("s1", vec![("out.txt".into(), "web_fetch https://site1.example/".into())]);
        let written = again.written("s1");
        assert_eq!(written.get("out.txt").map(String::as_str), Some("web_fetch https://site1.example/"));
    }
}
