//! Every sentence a person reads from a baaaht channel about a turn, an approval or a refusal,
//! written once: the chat gateways, the web and the terminal say the same things in the same
//! words. A channel only formats them (mrkdwn, HTML, a terminal's colours); the words are here.
//! Nothing here calls the daemon.

use baaaht_proto::v1;

/// The daemon failed inside; what failed is in its log, not in the chat.
pub const INTERNAL: &str = "Something went wrong on the assistant's side; try again.";
/// The daemon did not answer in time, or could not be reached.
pub const UNREACHABLE: &str = "The assistant is not reachable right now; try again in a minute.";
/// The daemon's stream ended before the turn did.
pub const LOST: &str = "Lost the daemon while answering; try again.";
/// A turn that ended without a word.
pub const NO_ANSWER: &str = "(no answer)";
/// How a channel without buttons asks for an approval: what to answer with.
pub const ANSWER_WITH: &str = "Reply to this with one word: once (allow it this time), session (for this \
                               conversation), always, or deny.";
/// A reply to an approval request whose first word is no decision.
pub const NOT_UNDERSTOOD: &str = "That answer was not understood: reply with once, session, always or deny.";
/// `/new`, done.
pub const NEW_CONVERSATION: &str = "A new conversation starts with your next message. It knows nothing of the last \
                                    one, nor of what that one read (a page, another person's words), so nothing is \
                                    paused for it. The last one is kept: search it, or read it in another baaaht \
                                    client.";
/// `/link` said where others read it.
pub const LINK_IN_PRIVATE: &str =
    "Link your channels in a private chat with me: a code said here could be used by whoever reads it.";

/// The answers to an approval request, as a decision and the label of its button.
pub const CHOICES: [(&str, &str); 4] =
    [("once", "Allow once"), ("session", "For this conversation"), ("always", "Always"), ("deny", "Deny")];

/// What a channel's user may read of the daemon's refusal: its sentence when it is about what
/// they asked (a budget, a permission, a bad request); a plain one for anything internal, whose
/// text stays in the log (no host path or internal error reaches a chat).
pub fn for_users(status: &tonic::Status) -> String {
    use tonic::Code;
    match status.code() {
        Code::PermissionDenied
        | Code::ResourceExhausted
        | Code::FailedPrecondition
        | Code::InvalidArgument
        | Code::NotFound => status.message().to_string(),
        Code::Unavailable | Code::DeadlineExceeded => UNREACHABLE.into(),
        _ => {
            tracing::warn!(code = ?status.code(), message = %status.message(), "the daemon failed a channel's request");
            INTERNAL.into()
        }
    }
}

/// A turn the gateway stopped waiting for after `minutes`.
pub fn too_long(minutes: u64) -> String {
    format!(
        "No answer after {minutes} minutes; the gateway stopped waiting. Ask again, or read the conversation in \
         another baaaht client later."
    )
}

/// An agent's name as people read it (assistant, worker, researcher, coder, memory…); "agent"
/// for a role unset or unknown.
pub fn agent(role: i32) -> &'static str {
    baaaht_proto::role_name(role).unwrap_or("agent")
}

/// The first line of the command an approval request was asked for, at most 120 characters
/// (empty when none was).
pub fn asked_for(request: &v1::ApprovalRequest) -> String {
    request.asked_by.lines().next().unwrap_or_default().chars().take(120).collect()
}

/// What an approval request waits for, without the command: "The coder's tools want to reach
/// pypi.org:443".
pub fn wants_to_reach(request: &v1::ApprovalRequest) -> String {
    format!("The {}'s tools want to reach {}:{}", agent(request.agent), request.host, request.port)
}

/// What an approval request waits for, and for which command: "The coder's tools want to reach
/// pypi.org:443 for “pip install requests”."
pub fn approval_asked(request: &v1::ApprovalRequest) -> String {
    let command = asked_for(request);
    let asked = if command.is_empty() { String::new() } else { format!(" for “{command}”") };
    format!("{}{asked}.", wants_to_reach(request))
}

/// How long an approval request waits before it is denied.
pub fn denied_in(seconds: u32) -> String {
    format!("Denied in {seconds} s without an answer.")
}

/// How an approval request ended: "Allowed for this conversation, by Alice." or "Denied, nobody
/// answered in time."
pub fn settled(decision: &str, by: &str) -> String {
    let what = match decision {
        "once" => "Allowed once",
        "session" => "Allowed for this conversation",
        "always" => "Allowed always (a rule)",
        "deny" => "Denied",
        other => other,
    };
    let by = if by == "nobody" { "nobody answered in time".to_string() } else { format!("by {by}") };
    format!("{what}, {by}.")
}

/// An activity's event as a line of text (a transcript printed or exported, or shown as it
/// happens): who asked to reach what and how it was answered, what a turn read from outside,
/// a message.
pub fn activity(event: &v1::orchestrator_event::Event) -> Option<String> {
    use v1::orchestrator_event::Event;
    Some(match event {
        Event::Approval(asked) => {
            let command = asked.asked_by.lines().next().unwrap_or_default();
            let command = if command.is_empty() { String::new() } else { format!(" for `{command}`") };
            format!("The {}'s tools asked to reach {}:{}{command}.", agent(asked.agent), asked.host, asked.port)
        }
        Event::ApprovalSettled(answered) => settled(&answered.decision, &answered.by),
        Event::Tainted(tainted) => format!(
            "The turn read content from outside ({}): paused until the next message: {}.",
            tainted.source,
            tainted.withheld.join(", ")
        ),
        Event::Message(message) => message.content.clone(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_reads_a_refusal_about_what_they_asked_and_never_an_internal_detail() {
        assert_eq!(
            for_users(&tonic::Status::resource_exhausted("your daily budget is used up")),
            "your daily budget is used up"
        );
        assert_eq!(for_users(&tonic::Status::internal("/var/lib/baaaht/x: disk full")), INTERNAL);
        assert_eq!(for_users(&tonic::Status::unavailable("connection refused")), UNREACHABLE);
    }

    #[test]
    fn an_approval_reads_the_same_on_every_channel() {
        let request = v1::ApprovalRequest {
            agent: v1::AgentRole::Coder as i32,
            host: "pypi.org".into(),
            port: 443,
            asked_by: "pip install requests\nand more".into(),
            ..Default::default()
        };
        assert_eq!(wants_to_reach(&request), "The coder's tools want to reach pypi.org:443");
        assert_eq!(asked_for(&request), "pip install requests");
        assert_eq!(
            approval_asked(&request),
            "The coder's tools want to reach pypi.org:443 for “pip install requests”."
        );
        assert_eq!(denied_in(120), "Denied in 120 s without an answer.");
        assert_eq!(settled("session", "Alice"), "Allowed for this conversation, by Alice.");
        assert_eq!(settled("deny", "nobody"), "Denied, nobody answered in time.");
        use v1::orchestrator_event::Event;
        let answered = v1::ApprovalSettled { decision: "once".into(), by: "Alice".into(), ..Default::default() };
        assert_eq!(activity(&Event::ApprovalSettled(answered)).as_deref(), Some("Allowed once, by Alice."));
        assert_eq!(agent(0), "agent");
    }
}
