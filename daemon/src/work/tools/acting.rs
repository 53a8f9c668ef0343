//! An acting tool called by a marked turn (DESIGN.md §10.3): a tool whose class is `acts`
//! ([`crate::work::mcp::effects`]) runs in a turn that read content from outside only once a
//! person of the turn's context has seen what it would do — the tool, its arguments exactly as
//! the call has them, and what the turn read — and allowed it once, as a connection is
//! approved in chat ([`crate::net::egress::approvals`]). Where nobody can be asked (a scheduled
//! run, a heartbeat, nobody connected) or nobody answers, it is withheld; either way the agent
//! reads a sentence and the audit a `taint` line. `security.taint.acting_tools` may make it
//! `withhold` (never asked) or `allow` (the undefended baseline `baaaht-bench containment`
//! measures against).

use std::borrow::Cow;

use crate::base::auth::Live;
use crate::base::config::ActingInTaint;
use crate::guard::audit::{Kind, Record};
use crate::net::egress::approvals::{Approvals, Asking, Decision, Subject};
use crate::net::taint::{Mark, Taints};
use crate::store::sessions::log::ActionReview;
use crate::work::mcp::effects::{Class, Effect};

/// The most bytes of one argument's JSON a question carries whole; a call with a longer one is
/// withheld, not asked (what a person cannot read, they cannot allow).
const LONGEST_ARGUMENT: usize = 16 << 10;
/// The most arguments a question shows: every channel shows this many whole (folded); a call
/// with more is withheld.
const MOST_ARGUMENTS: usize = 10;
/// The longest argument name; names are letters, digits, `_`, `-` and `.`, so what a person
/// reads is the name that runs.
const LONGEST_NAME: usize = 32;

/// What `server` is for the browser's own acting actions (`type`): not an MCP server.
pub const BROWSER: &str = "browser";

/// A call to ask about: whose turn, which tool, with what.
pub struct Action<'a> {
    pub live: &'a Live,
    /// The MCP server the tool is of, or [`BROWSER`].
    pub server: &'a str,
    pub tool: &'a str,
    pub class: Class,
    pub arguments: &'a serde_json::Map<String, serde_json::Value>,
}

/// Whether `action` may run now: at once when its tool only reads or its turn is clean; else
/// as the policy says, asking a person of the turn's context. Why not, in a sentence for the
/// agent (audited).
pub async fn allowed(
    taints: &Taints,
    approvals: &Approvals,
    shield: &crate::guard::redact::Shield,
    action: Action<'_>,
) -> Result<(), String> {
    let live = action.live;
    if action.class.effect == Effect::Reads {
        return Ok(());
    }
    let Some(mark) = taints.mark(&live.session, &live.user_turn) else { return Ok(()) };
    let policy = taints.policy().acting_tools;
    let record = |outcome: &str| {
        Record::new(Kind::Taint, format!("container:{}", live.role), outcome)
            .session(&live.session)
            .detail("turn", live.user_turn.as_str())
            .detail("tool", action.called())
            .detail("source", mark.sources.first().cloned().unwrap_or_default())
    };
    let source = mark.sources.first().cloned().unwrap_or_else(|| "content from outside".into());
    let refused = |why: String, outcome: &str, audit: &crate::guard::audit::Audit| {
        audit.record(record(outcome).detail("reason", why.as_str()));
        Err(sentence(&action, &source, &why))
    };
    match policy {
        ActingInTaint::Allow => return Ok(()),
        ActingInTaint::Withhold => {
            return refused("the policy withholds acting tools".into(), "withheld", taints.audit())
        }
        ActingInTaint::Ask => {}
    }
    if let Some(why) = unshowable(action.arguments, shield) {
        return refused(why, "withheld", taints.audit());
    }
    let asking = Asking {
        context: live.context.clone(),
        session: live.session.clone(),
        agent: live.role,
        subject: Subject::Action { review: Box::new(review(&action, &mark)), sender: live.asker.clone() },
        asked_by: action.called(),
    };
    match approvals.ask(&asking).await {
        Ok((Decision::Once, by)) => {
            taints.audit().record(record("allowed").detail("answered_by", by.as_str()));
            Ok(())
        }
        Ok((_, by)) => refused(format!("{by} denied it"), "denied", taints.audit()),
        Err(why) => refused(why.to_string(), "withheld", taints.audit()),
    }
}

impl Action<'_> {
    /// The tool as the agent called it.
    fn called(&self) -> String {
        match self.server {
            BROWSER => format!("browser {}", self.tool),
            server => format!("mcp__{server}__{}", self.tool),
        }
    }

    /// Whose the tool is, in a sentence.
    fn whose(&self) -> String {
        match self.server {
            BROWSER => "the browser".into(),
            server => format!("the MCP server {server}"),
        }
    }
}

/// The sentence the agent reads of an action not taken.
fn sentence(action: &Action<'_>, source: &str, why: &str) -> String {
    format!(
        "`{}` of {} was not run: it acts, and this turn read content from outside ({source}), \
         which may carry instructions that are not the user's; it needs a person's yes, and {why}. Tell the user \
         what you wanted to do and why; they can ask for it in a new message.",
        action.tool,
        action.whose()
    )
}

/// Why `arguments` cannot be shown to a person whole, if they cannot: too many, a name that
/// could read as another, a value too long, or one the channels would show redacted (it looks
/// like a credential: the person would read `[redacted: …]` while the server got the value).
fn unshowable(
    arguments: &serde_json::Map<String, serde_json::Value>,
    shield: &crate::guard::redact::Shield,
) -> Option<String> {
    if arguments.len() > MOST_ARGUMENTS {
        return Some(format!("it has {} arguments, more than the {MOST_ARGUMENTS} a question shows", arguments.len()));
    }
    let plain = |name: &str| {
        !name.is_empty()
            && name.len() <= LONGEST_NAME
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    };
    if let Some(name) = arguments.keys().find(|name| !plain(name)) {
        return Some(format!(
            "its argument name {} is not 1-{LONGEST_NAME} letters, digits, `_`, `-` or `.` (a person could not tell it \
             from another)",
            serde_json::Value::String(name.clone())
        ));
    }
    let long = arguments.iter().find(|(_, value)| value.to_string().len() > LONGEST_ARGUMENT);
    if let Some((name, _)) = long {
        return Some(format!(
            "its argument `{name}` is longer than the {} KiB a question shows",
            LONGEST_ARGUMENT >> 10
        ));
    }
    let hidden = arguments.iter().find(|(_, value)| matches!(shield.scan(&value.to_string()).0, Cow::Owned(_)));
    hidden.map(|(name, _)| {
        format!("its argument `{name}` holds what looks like a credential, which a question would show redacted")
    })
}

/// What the person is shown: the tool, what it does, its arguments whole, and what the turn
/// read.
fn review(action: &Action<'_>, mark: &Mark) -> ActionReview {
    let arguments = action.arguments.iter().map(|(name, value)| (name.clone(), value.to_string())).collect();
    ActionReview {
        server: action.server.to_string(),
        tool: action.tool.to_string(),
        effects: action.class.phrases(),
        arguments,
        source: mark.sources.join("; "),
    }
}
