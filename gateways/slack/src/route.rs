//! Which conversation a Slack event belongs to (spec §17.2): a DM is the sender's own
//! assistant; in a channel, a message that triggers the bot (a mention, a keyword, or any
//! message in a channel listed as `always`) or follows up in a thread the bot answers in goes to
//! the channel's group. Everything else — the bot's own messages, edits, joins — is ignored.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::Value;

/// What makes the bot answer in a channel.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trigger {
    /// Words that count as addressing the bot (case-insensitive, whole words), besides a mention.
    pub keywords: Vec<String>,
    /// Channels where every message is for the bot.
    pub always: Vec<String>,
}

/// Where an event goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The sender's channel identity: `slack:{team}:{user}`.
    pub identity: String,
    pub user: String,
    pub channel: String,
    /// In a channel: its group context; in a DM: the sender's own.
    pub shared: bool,
    /// The thread the answer goes in (a channel message's own ts, or the thread it is in); none
    /// in a DM outside a thread.
    pub thread_ts: Option<String>,
    /// The text without the bot's mention.
    pub text: String,
    /// The event's own ts.
    pub ts: String,
    /// Files shared with the message.
    pub files: Vec<Value>,
}

/// The threads the bot answered in, so follow-ups there need no new mention (kept a day).
#[derive(Debug, Default)]
pub struct Threads {
    known: HashMap<(String, String), Instant>,
}

impl Threads {
    const KEPT: Duration = Duration::from_secs(24 * 3600);

    pub fn answered(&mut self, channel: &str, thread_ts: &str) {
        let now = Instant::now();
        self.known.retain(|_, at| now.duration_since(*at) < Self::KEPT);
        self.known.insert((channel.into(), thread_ts.into()), now);
    }

    pub fn is_answered(&self, channel: &str, thread_ts: &str) -> bool {
        self.known.get(&(channel.to_string(), thread_ts.to_string())).is_some_and(|at| at.elapsed() < Self::KEPT)
    }
}

fn text(value: &Value, key: &str) -> String {
    value[key].as_str().unwrap_or_default().to_string()
}

/// The route of `event` (an Events API `event`) for workspace `team` and bot user `bot`.
pub fn route(event: &Value, team: &str, bot: &str, trigger: &Trigger, threads: &Threads) -> Option<Route> {
    let kind = text(event, "type");
    if kind != "message" && kind != "app_mention" {
        return None;
    }
    // Edits, deletions, joins, the bot's own and other bots' messages are not questions.
    let subtype = text(event, "subtype");
    if !(subtype.is_empty() || subtype == "file_share" || subtype == "thread_broadcast") {
        return None;
    }
    let user = text(event, "user");
    if user.is_empty() || user == bot || event.get("bot_id").is_some_and(|id| !id.is_null()) {
        return None;
    }
    // A user of another workspace (a Slack Connect channel) is not this gateway's to name.
    let user_team = [text(event, "user_team"), text(event, "team")].into_iter().find(|team| !team.is_empty());
    if user_team.is_some_and(|user_team| user_team != team) {
        return None;
    }
    let channel = text(event, "channel");
    let ts = text(event, "ts");
    let thread = Some(text(event, "thread_ts")).filter(|thread| !thread.is_empty());
    let mention = format!("<@{bot}>");
    let raw = text(event, "text");
    let clean = raw.replace(&mention, "").trim().to_string();
    let direct = text(event, "channel_type") == "im" || channel.starts_with('D');
    let files = event["files"].as_array().cloned().unwrap_or_default();
    let base = Route {
        identity: format!("slack:{team}:{user}"),
        user,
        channel: channel.clone(),
        shared: !direct,
        thread_ts: thread.clone(),
        text: clean,
        ts: ts.clone(),
        files,
    };
    if direct {
        // A DM arrives as `message`; its `app_mention` twin (when mentioned) is the same message.
        return (kind == "message").then_some(base);
    }
    let mentioned = raw.contains(&mention);
    // A mention arrives twice (message and app_mention): the message event is the one taken.
    if kind == "app_mention" {
        return None;
    }
    let keyword = trigger.keywords.iter().any(|word| {
        raw.split(|c: char| !c.is_alphanumeric() && c != '-' && c != '_').any(|said| said.eq_ignore_ascii_case(word))
    });
    let always = trigger.always.contains(&channel);
    let follow_up = thread.as_deref().is_some_and(|thread| threads.is_answered(&channel, thread));
    if !(mentioned || keyword || always || follow_up) {
        return None;
    }
    Some(Route { thread_ts: Some(thread.unwrap_or(ts)), ..base })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn routed(event: Value, trigger: &Trigger, threads: &Threads) -> Option<Route> {
        route(&event, "T1", "UBOT", trigger, threads)
    }

    #[test]
    fn a_dm_is_the_senders_own_and_a_channel_mention_is_the_groups_in_a_thread() {
        let (trigger, threads) = (Trigger::default(), Threads::default());
        let dm =
            json!({"type": "message", "channel": "D1", "channel_type": "im", "user": "U7", "text": "hi", "ts": "1.1"});
        let dm = routed(dm, &trigger, &threads).expect("a DM");
        assert_eq!(
            (dm.identity.as_str(), dm.shared, dm.thread_ts, dm.text.as_str()),
            ("slack:T1:U7", false, None, "hi")
        );
        let mention =
            json!({"type": "message", "channel": "C1", "user": "U7", "text": "<@UBOT> what's up?", "ts": "2.2"});
        let mention = routed(mention, &trigger, &threads).expect("a mention");
        assert_eq!(
            (mention.shared, mention.thread_ts.as_deref(), mention.text.as_str()),
            (true, Some("2.2"), "what's up?")
        );
        // Its app_mention twin is not a second question.
        let twin =
            json!({"type": "app_mention", "channel": "C1", "user": "U7", "text": "<@UBOT> what's up?", "ts": "2.2"});
        assert_eq!(routed(twin, &trigger, &threads), None);
    }

    #[test]
    fn a_user_of_another_workspace_is_not_named_as_one_of_this_ones() {
        let (trigger, threads) = (Trigger::default(), Threads::default());
        let guest = json!({"type": "message", "channel": "C1", "user": "U9", "user_team": "T2", "team": "T2",
            "text": "<@UBOT> hi", "ts": "3.3"});
        assert_eq!(routed(guest, &trigger, &threads), None);
        let own =
            json!({"type": "message", "channel": "C1", "user": "U7", "team": "T1", "text": "<@UBOT> hi", "ts": "3.4"});
        assert!(routed(own, &trigger, &threads).is_some());
    }

    #[test]
    fn channel_chatter_is_ignored_unless_it_triggers_or_follows_up() {
        let mut threads = Threads::default();
        let trigger = Trigger { keywords: vec!["baaaht".into()], always: vec!["C9".into()] };
        let said = |channel: &str, text: &str, thread: Option<&str>| {
            let mut event = json!({"type": "message", "channel": channel, "user": "U7", "text": text, "ts": "5.5"});
            if let Some(thread) = thread {
                event["thread_ts"] = json!(thread);
            }
            event
        };
        assert_eq!(routed(said("C1", "lunch?", None), &trigger, &threads), None);
        assert!(routed(said("C1", "hey Baaaht, lunch?", None), &trigger, &threads).is_some());
        assert_eq!(routed(said("C1", "baaahtish", None), &trigger, &threads), None);
        assert!(routed(said("C9", "anything", None), &trigger, &threads).is_some());
        assert_eq!(routed(said("C1", "and then?", Some("4.4")), &trigger, &threads), None);
        threads.answered("C1", "4.4");
        let follow = routed(said("C1", "and then?", Some("4.4")), &trigger, &threads).expect("a follow-up");
        assert_eq!(follow.thread_ts.as_deref(), Some("4.4"));
    }

    #[test]
    fn bots_edits_and_joins_are_not_questions() {
        let (trigger, threads) = (Trigger::default(), Threads::default());
        for event in [
            json!({"type": "message", "channel": "D1", "user": "UBOT", "text": "my own", "ts": "1"}),
            json!({"type": "message", "channel": "D1", "bot_id": "B2", "user": "U2", "text": "a bot", "ts": "1"}),
            json!({"type": "message", "subtype": "message_changed", "channel": "D1", "user": "U7", "ts": "1"}),
            json!({"type": "message", "subtype": "channel_join", "channel": "C1", "user": "U7", "text": "<@UBOT>", "ts": "1"}),
            json!({"type": "reaction_added", "user": "U7"}),
        ] {
            assert_eq!(routed(event.clone(), &trigger, &threads), None, "{event}");
        }
        let shared = json!({"type": "message", "subtype": "file_share", "channel": "D1", "user": "U7", "text": "", "ts": "1", "files": [{"id": "F1"}]});
        assert_eq!(routed(shared, &trigger, &threads).expect("a file").files.len(), 1);
    }
}
