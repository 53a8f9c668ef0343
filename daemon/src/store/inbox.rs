//! A context's inbox: what the daemon had to tell while none of the context's channels was
//! there to hear it (a scheduled task's result, a paused task, a disk nearly full). [`tell`]
//! says a notice on the channel [`channel_for`] finds, else keeps it here. Every client shows
//! the unread ones when it connects; `baaaht inbox` lists them. One file per context under
//! `data/state/inbox/` (the daemon's own folder: no container can write there), written
//! atomically; the newest [`MOST_ITEMS`] are kept, unread ones before read ones.

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::base::auth::Context;
use crate::base::state::{self, StateError};
use crate::store::events::{EventBus, Kind, Notice};

/// The channel a follower that notifies a person's devices (Web Push) counts as: approvals
/// may be asked of them there, but no notice is told on it in place of the inbox.
pub const PUSH: &str = "push";

/// The channel family of `channel` (`slack/dm` → `slack`).
pub fn family(channel: &str) -> &str {
    channel.split('/').next().unwrap_or(channel)
}

/// The channel `context`'s profile (USER.md or GROUP.md) prefers, if it names one.
fn preferred_channel(data_dir: &crate::base::datadir::DataDir, context: &Context) -> Option<String> {
    let profile = match context.kind {
        crate::base::auth::ContextKind::User => "USER.md",
        crate::base::auth::ContextKind::Group => "GROUP.md",
    };
    let text = std::fs::read_to_string(data_dir.context_dir(context).join(profile)).ok()?;
    crate::store::profile::preferred_channel(&text)
}

/// Where a notice for `context` goes (spec §15.7): `own` (a task's channel) when given, else
/// the channel its profile prefers, else the one it last wrote from while that is still
/// connected, else any connected one; `none` is nowhere.
pub fn channel_for(
    data_dir: &crate::base::datadir::DataDir,
    events: &EventBus,
    context: &Context,
    own: &str,
) -> Option<String> {
    if !own.is_empty() {
        return Some(own.to_string());
    }
    if let Some(preferred) = preferred_channel(data_dir, context) {
        return Some(preferred);
    }
    let mut connected = events.connected_channels(context);
    connected.retain(|channel| channel != PUSH);
    match events.last_active(context) {
        Some(last) if connected.contains(&last) => Some(last),
        _ => connected.into_iter().next(),
    }
}

/// Tells `context` `notice`: on `channel` when it is connected there (an event every client of
/// that channel shows), else kept in its inbox.
pub fn tell(
    inbox: &Inbox,
    events: &EventBus,
    context: &Context,
    channel: Option<&str>,
    notice: Notice,
    session: Option<&str>,
) {
    let channel = channel.filter(|channel| *channel != "none");
    let connected =
        channel.is_some_and(|channel| family(channel) != PUSH && events.is_connected(context, family(channel)));
    let told = Notice { channel: channel.unwrap_or_default().to_string(), ..notice.clone() };
    let event = crate::store::events::Event::of_session(session.unwrap_or_default(), Kind::Notice(told));
    events.publish(context, event);
    if connected {
        tracing::info!(context = %context, channel, task = %notice.task_id, "notice sent");
        return;
    }
    let item = Item::new(notice.title, notice.content, &notice.task_id, &notice.run_id);
    match inbox.push(context, item) {
        Ok(_) => tracing::info!(context = %context, task = %notice.task_id, "notice left in the inbox"),
        Err(error) => {
            tracing::error!(context = %context, error = %baaaht_proto::error_chain(&error), "cannot keep a notice")
        }
    }
}

/// Items kept per context.
pub const MOST_ITEMS: usize = 200;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Item {
    pub id: String,
    /// RFC 3339.
    pub at: String,
    pub title: String,
    pub content: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub task_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub run_id: String,
    #[serde(default)]
    pub read: bool,
}

impl Item {
    /// A new unread item; its id and time are given when it is kept.
    pub fn new(title: impl Into<String>, content: impl Into<String>, task_id: &str, run_id: &str) -> Item {
        Item {
            id: String::new(),
            at: String::new(),
            title: title.into(),
            content: content.into(),
            task_id: task_id.to_string(),
            run_id: run_id.to_string(),
            read: false,
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct File {
    #[serde(default)]
    items: Vec<Item>,
}

#[derive(Debug)]
pub struct Inbox {
    dir: PathBuf,
    /// One writer at a time (read, change, write).
    lock: Mutex<()>,
    /// What an item's text passes before it is kept.
    redact: Option<crate::guard::redact::Redact>,
}

impl Inbox {
    pub fn new(dir: PathBuf) -> Inbox {
        Inbox { dir, lock: Mutex::new(()), redact: None }
    }

    /// This inbox, its items cleaned by `redact` before they are kept.
    pub fn redacting(self, redact: crate::guard::redact::Redact) -> Inbox {
        Inbox { redact: Some(redact), ..self }
    }

    fn path(&self, context: &Context) -> PathBuf {
        self.dir.join(format!("{}.json", crate::base::datadir::folder_of(context)))
    }

    fn load(&self, context: &Context) -> File {
        state::read_json_or_set_aside(&self.path(context), File::default)
    }

    /// Adds an item for `context`; on disk when this returns.
    pub fn push(&self, context: &Context, mut item: Item) -> Result<Item, StateError> {
        if let Some(redact) = &self.redact {
            use crate::guard::redact::Place::Inbox;
            item.title = redact.clean_string(Inbox, std::mem::take(&mut item.title));
            item.content = redact.clean_string(Inbox, std::mem::take(&mut item.content));
        }
        let _writer = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        let mut file = self.load(context);
        if item.id.is_empty() {
            item.id = format!("n-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        }
        if item.at.is_empty() {
            item.at = state::now_rfc3339();
        }
        file.items.push(item.clone());
        while file.items.len() > MOST_ITEMS {
            let oldest = file.items.iter().position(|item| item.read).unwrap_or(0);
            file.items.remove(oldest);
        }
        std::fs::create_dir_all(&self.dir).map_err(|source| StateError::Write { path: self.dir.clone(), source })?;
        state::write_json(&self.path(context), &file)?;
        Ok(item)
    }

    /// `context`'s items, oldest first (only unread ones when `unread_only`); with
    /// `mark_read`, those returned are marked read.
    pub fn list(&self, context: &Context, unread_only: bool, mark_read: bool) -> Result<Vec<Item>, StateError> {
        let _writer = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        let mut file = self.load(context);
        let items: Vec<Item> = file.items.iter().filter(|item| !unread_only || !item.read).cloned().collect();
        if mark_read && items.iter().any(|item| !item.read) {
            for item in &mut file.items {
                item.read = true;
            }
            state::write_json(&self.path(context), &file)?;
        }
        Ok(items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_are_kept_read_once_and_capped() {
        let temp = tempfile::tempdir().expect("temp");
        let inbox = Inbox::new(temp.path().join("inbox"));
        let alice = Context::user("alice");
        let item = |title: &str| Item::new(title, "c", "", "");
        inbox.push(&alice, item("one")).expect("push");
        assert!(inbox.list(&Context::user("bob"), false, false).expect("bob").is_empty());
        assert_eq!(inbox.list(&alice, true, true).expect("unread").len(), 1);
        assert!(inbox.list(&alice, true, false).expect("unread again").is_empty());
        for n in 0..MOST_ITEMS + 5 {
            inbox.push(&alice, item(&format!("n{n}"))).expect("push");
        }
        let all = inbox.list(&alice, false, false).expect("all");
        assert_eq!(all.len(), MOST_ITEMS);
        assert!(all.iter().all(|item| item.title != "one"), "the read item goes first");
    }

    #[test]
    fn a_follower_that_notifies_a_phone_is_no_channel_to_tell_on_instead_of_the_inbox() {
        let temp = tempfile::tempdir().expect("temp");
        let data_dir = crate::base::datadir::DataDir::new(temp.path().join("data"));
        let (inbox, events) = (Inbox::new(temp.path().join("inbox")), EventBus::default());
        let alice = Context::user("alice");
        let _notifying = events.connect(&alice, PUSH);
        assert_eq!(channel_for(&data_dir, &events, &alice, ""), None, "only her phone follows");
        let notice = Notice { title: "Plants".into(), content: "Water them.".into(), ..Notice::default() };
        tell(&inbox, &events, &alice, Some(PUSH), notice, None);
        assert_eq!(inbox.list(&alice, true, false).expect("inbox").len(), 1, "kept for when she opens a client");
        let _web = events.connect(&alice, "web");
        assert_eq!(channel_for(&data_dir, &events, &alice, "").as_deref(), Some("web"));
    }
}
