//! What reaches a chat between its turns: a scheduled task's result, a message an agent sends
//! after the answer was written (a background job done, a reminder). The gateway keeps the
//! chats it has served (`chats.json` in its state folder: each chat's context and the person who
//! last wrote there) and follows each of those contexts with one subscription, as that person —
//! so the daemon counts the channel as connected and sends the scheduler's notices to it. A
//! notice meant for this channel, or a message in a conversation no turn of this gateway is
//! following, becomes a [`Delivery`] to each of the context's chats. A person who may no longer
//! read the context (unlinked, left the group) is not followed until they write again.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use baaaht_proto::client::Client;
use baaaht_proto::v1;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::backoff::Backoff;
use crate::daemon::{download, File, Person};
use crate::said::{said, Said};
use crate::sentences::for_users;
use crate::watch::{watch, Flow, Lost, Watch};

/// The file in the gateway's state folder that keeps its chats.
pub const CHATS_FILE: &str = "chats.json";
/// The most chats a gateway keeps (the oldest served go first).
const MOST_CHATS: usize = 10_000;

/// Something for a chat outside a turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The chat's id in its channel (a Telegram chat, a Slack channel, a Matrix room, an address).
    pub chat: String,
    /// A scheduled task's title, for a channel that shows one (an email's subject).
    pub title: Option<String>,
    pub text: String,
    pub files: Vec<File>,
    /// The conversation it belongs to (empty when it belongs to none).
    pub session: String,
    /// For a person's own chat, who it is for (their identity): a channel whose chats can gain
    /// people (a Matrix room) checks it is still theirs alone before it posts. None for a
    /// group's chat.
    pub own: Option<String>,
}

/// One chat the gateway served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Chat {
    chat: String,
    /// The person who last wrote there (their identity in the gateway's namespace).
    identity: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    /// A group's chat (else the person's own).
    group: bool,
    /// The user's or group's id.
    context: String,
    /// When it was last served (seconds since the epoch), to let the oldest go past the cap.
    at: u64,
}

impl Chat {
    fn context(&self) -> v1::ContextRef {
        let kind = if self.group { v1::ContextType::Group } else { v1::ContextType::User };
        v1::ContextRef { r#type: kind as i32, id: self.context.clone() }
    }

    fn person(&self) -> Person {
        Person { identity: self.identity.clone(), name: self.name.clone() }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Kept {
    chats: Vec<Chat>,
}

/// A context, as the follower keys it.
type Key = (bool, String);

fn key_of(context: &v1::ContextRef) -> Key {
    (context.r#type == v1::ContextType::Group as i32, context.id.clone())
}

/// The chats a gateway served, and a subscription per context of theirs.
pub struct Follower {
    daemon: Client,
    channel: v1::ChannelType,
    /// The channel's name as the scheduler names it (`telegram`).
    name: &'static str,
    path: Option<PathBuf>,
    chats: Mutex<BTreeMap<String, Chat>>,
    /// The contexts followed now, each by its task.
    following: Mutex<HashMap<Key, tokio::task::AbortHandle>>,
    /// Conversations a turn of this gateway is answering now, and how many turns.
    turns: Mutex<HashMap<String, usize>>,
    out: mpsc::Sender<Delivery>,
    /// The undo plans shown in its chats, waiting for their `yes`.
    undos: crate::undo::Shown,
}

/// A turn of this gateway answering in a conversation, until dropped.
pub struct InTurn {
    follower: Arc<Follower>,
    session: String,
}

impl Drop for InTurn {
    fn drop(&mut self) {
        let mut turns = self.follower.turns.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = turns.get_mut(&self.session) {
            *count -= 1;
            if *count == 0 {
                turns.remove(&self.session);
            }
        }
    }
}

impl Follower {
    /// The follower of a gateway on `channel`, its chats kept in `state` (in memory only
    /// without one), following every context it served before; what it delivers comes out of
    /// the receiver, for the gateway to send.
    /// The undo plans shown in this gateway's chats.
    pub fn undos(&self) -> &crate::undo::Shown {
        &self.undos
    }

    pub fn open(
        daemon: Client,
        channel: v1::ChannelType,
        state: Option<&Path>,
    ) -> Result<(Arc<Follower>, mpsc::Receiver<Delivery>), String> {
        let name = match channel {
            v1::ChannelType::Telegram => "telegram",
            v1::ChannelType::Slack => "slack",
            v1::ChannelType::Matrix => "matrix",
            v1::ChannelType::Email => "email",
            v1::ChannelType::Web => "web",
            _ => "other",
        };
        if let Some(state) = state {
            std::fs::create_dir_all(state).map_err(|error| format!("cannot make {}: {error}", state.display()))?;
        }
        let path = state.map(|state| state.join(CHATS_FILE));
        let kept = match &path {
            Some(path) => read(path)?,
            None => Kept::default(),
        };
        let chats = kept.chats.into_iter().map(|chat| (chat.chat.clone(), chat)).collect();
        let (out, deliveries) = mpsc::channel(64);
        let follower = Arc::new(Follower {
            daemon,
            channel,
            name,
            path,
            chats: Mutex::new(chats),
            following: Mutex::default(),
            turns: Mutex::default(),
            out,
            undos: crate::undo::Shown::default(),
        });
        let contexts: Vec<v1::ContextRef> = {
            let chats = follower.chats.lock().unwrap_or_else(PoisonError::into_inner);
            chats.values().map(Chat::context).collect()
        };
        // A context of several chats is followed once.
        for context in contexts {
            follower.follow(&context);
        }
        Ok((follower, deliveries))
    }

    /// `person` wrote in `chat`, whose context is `context`: the chat is kept, and its context
    /// followed.
    pub fn served(self: &Arc<Self>, chat: &str, person: &Person, context: &v1::ContextRef) {
        let chat = Chat {
            chat: chat.to_string(),
            identity: person.identity.clone(),
            name: person.name.clone(),
            group: context.r#type == v1::ContextType::Group as i32,
            context: context.id.clone(),
            at: now(),
        };
        let changed = {
            let mut chats = self.chats.lock().unwrap_or_else(PoisonError::into_inner);
            let known = chats.get(&chat.chat);
            // The time alone is written at most once a day.
            let changed = known.is_none_or(|known| {
                (known.identity.as_str(), known.group, known.context.as_str())
                    != (chat.identity.as_str(), chat.group, chat.context.as_str())
                    || known.name != chat.name
                    || chat.at.saturating_sub(known.at) > 86_400
            });
            if changed {
                chats.insert(chat.chat.clone(), chat);
                while chats.len() > MOST_CHATS {
                    let oldest = chats.values().min_by_key(|chat| chat.at).map(|chat| chat.chat.clone());
                    let Some(oldest) = oldest else { break };
                    chats.remove(&oldest);
                }
            }
            changed.then(|| Kept { chats: chats.values().cloned().collect() })
        };
        if let (Some(kept), Some(path)) = (changed, &self.path) {
            if let Err(error) = write(path, &kept) {
                tracing::warn!(path = %path.display(), %error, "the chats served are not kept; after a restart, what comes between turns waits for the next message");
            }
        }
        self.follow(context);
    }

    /// A turn answering in `session`: until the guard is dropped, what the agents send there is
    /// the turn's to show, not the follower's.
    pub fn in_turn(self: &Arc<Self>, session: &str) -> InTurn {
        *self.turns.lock().unwrap_or_else(PoisonError::into_inner).entry(session.to_string()).or_default() += 1;
        InTurn { follower: self.clone(), session: session.to_string() }
    }

    /// Whether a turn of this gateway is answering in `session` now.
    fn answering(&self, session: &str) -> bool {
        self.turns.lock().unwrap_or_else(PoisonError::into_inner).contains_key(session)
    }

    /// The chats of `context`, and the person who last wrote in one of them.
    fn chats_of(&self, context: &v1::ContextRef) -> (Vec<String>, Option<Person>) {
        let key = key_of(context);
        let chats = self.chats.lock().unwrap_or_else(PoisonError::into_inner);
        let mut of: Vec<&Chat> = chats.values().filter(|chat| key_of(&chat.context()) == key).collect();
        of.sort_by_key(|chat| std::cmp::Reverse(chat.at));
        (of.iter().map(|chat| chat.chat.clone()).collect(), of.first().map(|chat| chat.person()))
    }

    /// Starts following `context` unless it is followed already.
    fn follow(self: &Arc<Self>, context: &v1::ContextRef) {
        let key = key_of(context);
        let mut following = self.following.lock().unwrap_or_else(PoisonError::into_inner);
        if following.get(&key).is_some_and(|task| !task.is_finished()) {
            return;
        }
        let follower = self.clone();
        let context = context.clone();
        let task = tokio::spawn(async move { follower.run(context).await });
        following.insert(key, task.abort_handle());
    }

    /// Follows `context` until its last person may no longer read it.
    async fn run(self: Arc<Self>, context: v1::ContextRef) {
        let mut watcher = ContextWatch { follower: self, context, person: None };
        watch(&mut watcher, Backoff::default()).await;
    }

    /// What `event` brings for the context's chats, if anything.
    async fn take(&self, context: &v1::ContextRef, person: &Person, event: v1::OrchestratorEvent) {
        let (title, text, files) = match said(&event) {
            Some(Said::Notice(notice)) => {
                let family = notice.channel.split('/').next().unwrap_or_default();
                if family != self.name {
                    return;
                }
                let mark = if notice.is_error { "⚠️ " } else { "" };
                let text = format!("{mark}{}\n\n{}", notice.title.trim(), notice.content.trim());
                (Some(notice.title), text, vec![])
            }
            Some(Said::Sent(message)) if !self.answering(&event.session_id) => {
                let (text, files) = read_sent(&self.daemon, person, &event.session_id, &message).await;
                (None, text, files)
            }
            _ => return,
        };
        let session = event.session_id;
        let chats: Vec<(String, Option<String>)> = {
            let key = key_of(context);
            let chats = self.chats.lock().unwrap_or_else(PoisonError::into_inner);
            let mut of: Vec<&Chat> = chats.values().filter(|chat| key_of(&chat.context()) == key).collect();
            of.sort_by_key(|chat| std::cmp::Reverse(chat.at));
            of.iter().map(|chat| (chat.chat.clone(), (!chat.group).then(|| chat.identity.clone()))).collect()
        };
        for (chat, own) in chats {
            let delivery = Delivery {
                chat,
                title: title.clone(),
                text: text.clone(),
                files: files.clone(),
                session: session.clone(),
                own,
            };
            if self.out.send(delivery).await.is_err() {
                return;
            }
        }
    }
}

/// A context followed for its chats: subscribed as the person who last wrote in one of them,
/// until none is left or they may no longer read it.
struct ContextWatch {
    follower: Arc<Follower>,
    context: v1::ContextRef,
    /// Who the stream is read as.
    person: Option<Person>,
}

impl Watch for ContextWatch {
    async fn subscribe(&mut self) -> Result<tonic::Streaming<v1::OrchestratorEvent>, Lost> {
        let (_, Some(person)) = self.follower.chats_of(&self.context) else { return Err(Lost::Unwanted) };
        let subscription = v1::EventSubscription {
            context: Some(self.context.clone()),
            session_id: String::new(),
            channel: self.follower.channel as i32,
            notifies: false,
        };
        let mut daemon = self.follower.daemon.clone();
        let events = daemon.sessions.subscribe_events(person.request(subscription)).await.map_err(Lost::Refused)?;
        self.person = Some(person);
        Ok(events.into_inner())
    }

    async fn take(&mut self, event: v1::OrchestratorEvent) -> Flow {
        if let Some(person) = &self.person {
            self.follower.take(&self.context, person, event).await;
        }
        Flow::Go
    }

    async fn lost(&mut self, lost: Lost) -> Flow {
        use tonic::Code;
        if let Lost::Refused(status) = &lost {
            if matches!(status.code(), Code::PermissionDenied | Code::NotFound | Code::Unauthenticated) {
                let person = self.follower.chats_of(&self.context).1.map(|person| person.identity).unwrap_or_default();
                tracing::info!(context = %self.context.id, %person, why = %status.message(), "a context is no longer followed");
                return Flow::Stop;
            }
        }
        tracing::debug!(context = %self.context.id, why = %lost.reason(), "following a context again");
        Flow::Go
    }
}

/// `message`'s text and the files it sent, read as `person` from the conversation `session`;
/// a file that cannot be read is named in the text instead.
pub async fn read_sent(
    daemon: &Client,
    person: &Person,
    session: &str,
    message: &v1::OutboundMessage,
) -> (String, Vec<File>) {
    let (mut text, mut files) = (message.content.clone(), vec![]);
    for attachment in &message.attachments {
        match download(daemon, person, session, attachment).await {
            Ok(file) => files.push(file),
            Err(status) => {
                tracing::warn!(path = %attachment.path, error = %status.message(), "cannot read a file an agent sent");
                text.push_str(&format!("\n({} could not be sent: {})", attachment.filename, for_users(&status)));
            }
        }
    }
    (text, files)
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|since| since.as_secs()).unwrap_or_default()
}

/// The chats kept at `path` (none when it is not there yet).
fn read(path: &Path) -> Result<Kept, String> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|error| {
            format!(
                "{} is not a list of chats ({error}); move it away and start the gateway again (chats are kept \
                 again as people write)",
                path.display()
            )
        }),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(Kept::default()),
        Err(error) => Err(format!("cannot read {}: {error}", path.display())),
    }
}

fn write(path: &Path, kept: &Kept) -> std::io::Result<()> {
    let bytes = serde_json::to_vec_pretty(kept).map_err(std::io::Error::other)?;
    crate::state::write_atomic(path, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chats_are_kept_across_a_restart_and_a_bad_file_says_what_to_do() {
        let dir = std::env::temp_dir().join(format!("baaaht-follow-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join(CHATS_FILE);
        let chat = Chat {
            chat: "42".into(),
            identity: "telegram:1:42".into(),
            name: Some("Ann".into()),
            group: false,
            context: "ann".into(),
            at: 7,
        };
        write(&path, &Kept { chats: vec![chat.clone()] }).expect("write");
        assert_eq!(read(&path).expect("read").chats, vec![chat.clone()]);
        assert_eq!(chat.context(), v1::ContextRef { r#type: v1::ContextType::User as i32, id: "ann".into() });
        std::fs::write(&path, b"{not json").expect("corrupt");
        let error = read(&path).expect_err("a bad file");
        assert!(error.contains("move it away"), "{error}");
        assert!(read(&dir.join("missing.json")).expect("missing").chats.is_empty());
        std::fs::remove_dir_all(&dir).expect("clean");
    }
}
