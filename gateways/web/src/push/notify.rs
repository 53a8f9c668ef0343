//! What a person's devices are told of an event, as they chose ([`Settings`]): an approval
//! asked, with its answers as the notification's actions; a scheduled task's or heartbeat's
//! result; an answer that finished while no page of theirs was open; a budget nearing its
//! limit. The payload is what the service worker (`ui/sw.js`) shows: no secret, and no more of
//! the conversation than the person chose (all of it, its first line, or only that there is
//! something).

use baaaht_gateway_kit::said::Said;
use baaaht_gateway_kit::sentences;
use serde::Serialize;

use super::devices::{Content, Settings};
use super::message::MOST_PLAINTEXT;

/// How urgently a push service should deliver (RFC 8030 §5.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Urgency {
    Low,
    Normal,
    High,
}

impl Urgency {
    pub fn as_str(self) -> &'static str {
        match self {
            Urgency::Low => "low",
            Urgency::Normal => "normal",
            Urgency::High => "high",
        }
    }
}

/// What kind of thing a notification tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Approval,
    /// An approval answered (anywhere): its notification closes on every device.
    Settled,
    Result,
    Heartbeat,
    Answer,
    Budget,
    /// The one the settings send to try a device.
    Test,
}

/// An answer offered as a notification's button.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Action {
    pub action: &'static str,
    pub title: &'static str,
}

/// What the service worker shows (the push's plaintext, as JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Shown {
    pub kind: Kind,
    pub title: String,
    pub body: String,
    /// Notifications with the same tag replace each other (an approval's answer closes it).
    pub tag: String,
    /// Where a tap opens the app.
    pub url: String,
    /// The approval the actions answer.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub approval: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<Action>,
    /// Shown without sound or vibration (quiet hours).
    pub silent: bool,
}

/// A notification and how its push goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    pub shown: Shown,
    pub urgency: Urgency,
    /// How long the push service may hold it for a device that is off, in seconds.
    pub ttl: u32,
    /// A newer push with the same topic replaces one not yet delivered (RFC 8030 §5.4).
    pub topic: Option<String>,
}

impl Notification {
    /// The plaintext of its push: the JSON the worker reads, cut to fit one message (the body
    /// shortened first, never the answers' ids).
    pub fn payload(&self) -> Vec<u8> {
        let mut shown = self.shown.clone();
        loop {
            let bytes = serde_json::to_vec(&shown).unwrap_or_default();
            if bytes.len() <= MOST_PLAINTEXT || shown.body.is_empty() {
                return bytes;
            }
            let keep = shown
                .body
                .chars()
                .count()
                .saturating_sub(bytes.len() - MOST_PLAINTEXT + 1)
                .min(shown.body.chars().count().saturating_sub(1));
            shown.body = format!("{}…", shown.body.chars().take(keep).collect::<String>().trim_end());
            if keep == 0 {
                shown.body.clear();
            }
        }
    }

    /// The same notification with only that there is something (a push service that found it
    /// too large).
    pub fn shorter(&self) -> Notification {
        let mut shorter = self.clone();
        shorter.shown.body = first_line(&shorter.shown.body, 120);
        shorter
    }
}

/// Where the person is when an event comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moment {
    /// In their quiet hours.
    pub quiet: bool,
    /// No page of theirs is open.
    pub away: bool,
}

/// The notification for `said` (an event of `session`), as `settings` choose at `moment`;
/// `answer_of_theirs` when it is the answer to a message they wrote on the web.
pub fn notification(
    said: &Said,
    session: &str,
    settings: &Settings,
    moment: Moment,
    answer_of_theirs: bool,
) -> Option<Notification> {
    let kinds = &settings.kinds;
    let url = if session.is_empty() { "/".to_string() } else { format!("/?session={}", url_part(session)) };
    let told = |kind: Kind, title: String, text: &str, urgency: Urgency, ttl: u32| Notification {
        shown: Shown {
            kind,
            title,
            body: content(settings.content, text),
            tag: format!("{}-{}", kind_tag(kind), url_part(session)),
            url: url.clone(),
            approval: String::new(),
            actions: vec![],
            silent: moment.quiet,
        },
        urgency,
        ttl,
        topic: None,
    };
    match said {
        Said::Approval(request) if kinds.approvals => {
            let text = if sentences::is_review(request) {
                sentences::review_asked(request)
            } else {
                sentences::approval_asked(request)
            };
            let nothing = settings.content == Content::Nothing;
            // Answered from the lock screen: allow once or deny. A skill is installed after its
            // review is read, in the app; with nothing shown, nothing is answered blind.
            let actions = match (nothing, &request.skill_review) {
                (true, _) => vec![],
                (false, Some(_)) => vec![Action { action: "decline", title: "Decline" }],
                (false, None) => {
                    vec![Action { action: "once", title: "Allow once" }, Action { action: "deny", title: "Deny" }]
                }
            };
            let body = if nothing {
                "Something waits for your answer.".to_string()
            } else {
                format!("{text} {}", sentences::expires_text(request))
            };
            Some(Notification {
                shown: Shown {
                    kind: Kind::Approval,
                    title: "baaaht asks".into(),
                    body,
                    tag: approval_topic(&request.id),
                    url,
                    approval: request.id.clone(),
                    actions,
                    silent: moment.quiet,
                },
                urgency: Urgency::High,
                ttl: request.expires_in_seconds.max(1),
                topic: Some(approval_topic(&request.id)),
            })
        }
        // Who answered, in place of the question on every device.
        Said::Settled(settled) if kinds.approvals => Some(Notification {
            shown: Shown {
                kind: Kind::Settled,
                title: "baaaht".into(),
                body: sentences::settled(&settled.decision, &settled.by),
                tag: approval_topic(&settled.id),
                url,
                approval: settled.id.clone(),
                actions: vec![],
                silent: true,
            },
            urgency: Urgency::Normal,
            ttl: 600,
            topic: Some(approval_topic(&settled.id)),
        }),
        Said::Notice(notice) if notice.heartbeat => (kinds.heartbeats && !moment.quiet)
            .then(|| told(Kind::Heartbeat, "Heartbeat".into(), &notice.content, Urgency::Low, 86_400)),
        Said::Notice(notice) if kinds.results => {
            // A task's title is its owner's words too: with nothing shown, it stays off.
            let title = match (settings.content, notice.title.is_empty(), notice.is_error) {
                (Content::Nothing, _, true) => "A scheduled task needs you".into(),
                (Content::Nothing, _, false) | (_, true, _) => "A scheduled task".into(),
                _ => first_line(&notice.title, 80),
            };
            Some(told(Kind::Result, title, &notice.content, Urgency::Normal, 86_400))
        }
        Said::Answered { text, .. } if kinds.answers && answer_of_theirs && moment.away && !moment.quiet => {
            Some(told(Kind::Answer, "baaaht answered".into(), text, Urgency::Normal, 86_400))
        }
        Said::Sent(message)
            if kinds.budget
                && !moment.quiet
                && message.metadata.get("topic").is_some_and(|topic| topic == "budget") =>
        {
            // The budget's own sentence: no content of any conversation.
            let mut budget = told(Kind::Budget, "Budget".into(), "", Urgency::Normal, 6 * 3600);
            budget.shown.body = first_line(&message.content, 300);
            Some(budget)
        }
        _ => None,
    }
}

/// A test notification, for the settings' "Send a test".
pub fn test(silent: bool) -> Notification {
    Notification {
        shown: Shown {
            kind: Kind::Test,
            title: "baaaht".into(),
            body: "Notifications reach this device.".into(),
            tag: "test".into(),
            url: "/".into(),
            approval: String::new(),
            actions: vec![],
            silent,
        },
        urgency: Urgency::Normal,
        ttl: 300,
        topic: None,
    }
}

/// The topic (and tag) of approval `id`: at most 32 characters of the base64url alphabet.
pub fn approval_topic(id: &str) -> String {
    let id: String = id.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_').take(23).collect();
    format!("approval-{id}")
}

fn kind_tag(kind: Kind) -> &'static str {
    match kind {
        Kind::Approval | Kind::Settled => "approval",
        Kind::Result => "result",
        Kind::Heartbeat => "heartbeat",
        Kind::Answer => "answer",
        Kind::Budget => "budget",
        Kind::Test => "test",
    }
}

/// `text` as the person chose to see it.
fn content(chosen: Content, text: &str) -> String {
    match chosen {
        Content::Full => sentences_clean(text),
        Content::FirstLine => first_line(text, 200),
        Content::Nothing => "You have a message.".into(),
    }
}

/// `text` cleaned of control characters (shown, not obeyed), whole.
fn sentences_clean(text: &str) -> String {
    baaaht_gateway_kit::text::clean(text).trim().to_string()
}

/// The first line of `text` with words in it, at most `limit` characters ("…" where cut).
fn first_line(text: &str, limit: usize) -> String {
    let cleaned = sentences_clean(text);
    let line = cleaned.lines().map(str::trim).find(|line| !line.is_empty()).unwrap_or_default();
    let line = line.trim_start_matches(['#', '>', '*', '-', ' ']);
    if line.chars().count() <= limit {
        let more = cleaned.lines().filter(|line| !line.trim().is_empty()).count() > 1;
        return if more { format!("{line} …") } else { line.to_string() };
    }
    let cut: String = line.chars().take(limit.saturating_sub(1)).collect();
    format!("{}…", cut.trim_end())
}

/// `text` safe in a URL's query value and a tag: letters, digits, `-` and `_` only.
fn url_part(text: &str) -> String {
    text.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_').take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use baaaht_proto::v1;

    fn settings(content: Content) -> Settings {
        Settings { content, ..Settings::default() }
    }

    const HERE: Moment = Moment { quiet: false, away: true };

    fn approval() -> Said {
        Said::Approval(Box::new(v1::ApprovalRequest {
            id: "a-123".into(),
            host: "pypi.org".into(),
            port: 443,
            agent: v1::AgentRole::Coder as i32,
            expires_in_seconds: 300,
            ..Default::default()
        }))
    }

    #[test]
    fn an_approval_carries_allow_once_and_deny_and_replaces_itself_by_topic() {
        let told = notification(&approval(), "s-1", &settings(Content::FirstLine), HERE, false).expect("told");
        assert_eq!(told.shown.approval, "a-123");
        assert_eq!(told.shown.actions.iter().map(|a| a.action).collect::<Vec<_>>(), ["once", "deny"]);
        assert!(told.shown.body.starts_with("The coder's tools want to reach pypi.org:443"), "{}", told.shown.body);
        assert_eq!((told.urgency, told.ttl), (Urgency::High, 300));
        assert_eq!(told.topic.as_deref(), Some("approval-a-123"));
        assert_eq!(told.shown.url, "/?session=s-1");
        let blind = notification(&approval(), "s-1", &settings(Content::Nothing), HERE, false).expect("told");
        assert!(blind.shown.actions.is_empty(), "nothing is answered blind");
        assert!(!blind.shown.body.contains("pypi"), "{}", blind.shown.body);
    }

    #[test]
    fn content_is_what_the_person_chose_and_quiet_hours_hold() {
        let notice = Said::Notice(v1::TaskNotice {
            title: "Plants".into(),
            content: "Water the ficus.\nAnd the fern, 200 ml.".into(),
            ..Default::default()
        });
        let full = notification(&notice, "", &settings(Content::Full), HERE, false).expect("told");
        assert_eq!(full.shown.body, "Water the ficus.\nAnd the fern, 200 ml.");
        let first = notification(&notice, "", &settings(Content::FirstLine), HERE, false).expect("told");
        assert_eq!(first.shown.body, "Water the ficus. …");
        let nothing = notification(&notice, "", &settings(Content::Nothing), HERE, false).expect("told");
        assert_eq!(nothing.shown.body, "You have a message.");
        assert_eq!(nothing.shown.title, "A scheduled task", "a task's title is words too");
        let separated = Said::Answered { entry: "e".into(), text: "Yes.\u{2028}And the PIN is 4711.".into() };
        let first = notification(&separated, "s", &settings(Content::FirstLine), HERE, true).expect("told");
        assert_eq!(first.shown.body, "Yes.<U+2028>And the PIN is 4711.", "a separator is shown, not obeyed");
        let quiet = Moment { quiet: true, away: true };
        assert!(notification(&notice, "", &settings(Content::Full), quiet, false).expect("told").shown.silent);
        let heartbeat = Said::Notice(v1::TaskNotice { content: "x".into(), heartbeat: true, ..Default::default() });
        assert!(notification(&heartbeat, "", &Settings::default(), HERE, false).is_some());
        assert!(notification(&heartbeat, "", &Settings::default(), quiet, false).is_none(), "no heartbeat wakes");
        let answered = Said::Answered { entry: "e".into(), text: "Done.".into() };
        assert!(notification(&answered, "s", &Settings::default(), HERE, true).is_some());
        let there = Moment { quiet: false, away: false };
        assert!(notification(&answered, "s", &Settings::default(), there, true).is_none(), "a page is open");
        assert!(notification(&answered, "s", &Settings::default(), HERE, false).is_none(), "not their message");
        let mut off = Settings::default();
        off.kinds.results = false;
        assert!(notification(&notice, "", &off, HERE, false).is_none());
    }

    #[test]
    fn a_payload_always_fits_one_message() {
        let long = "word ".repeat(2000);
        let notice = Said::Notice(v1::TaskNotice { content: long, ..Default::default() });
        let told = notification(&notice, "s", &settings(Content::Full), HERE, false).expect("told");
        let payload = told.payload();
        assert!(payload.len() <= MOST_PLAINTEXT, "{}", payload.len());
        let shown: serde_json::Value = serde_json::from_slice(&payload).expect("json");
        assert!(shown["body"].as_str().expect("body").ends_with('…'));
        assert_eq!(approval_topic("a-0123456789abcdef0123456789"), "approval-a-0123456789abcdef01234");
        assert!(approval_topic("a-0123456789abcdef0123456789").len() <= 32);
    }
}
