//! Every sentence a person reads from a baaaht channel about a turn, an approval (a skill's
//! review too) or a refusal, written once: the chat gateways, the web and the terminal say the
//! same things in the same words. A channel only formats them (mrkdwn, HTML, a terminal's
//! colours); the words are here. Nothing here calls the daemon.

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
/// How a channel without buttons asks for a skill's review: what to answer with.
pub const REVIEW_ANSWER_WITH: &str = "Reply to this with one word: install or decline.";
/// A reply to a skill's review whose first word is neither install nor decline.
pub const REVIEW_NOT_UNDERSTOOD: &str = "That answer was not understood: reply with install or decline.";
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

/// The answers to a skill's review, as a decision and the label of its button.
pub const REVIEW_CHOICES: [(&str, &str); 2] = [("install", "Install"), ("decline", "Decline")];

/// The answers to an action asked in a marked turn, as a decision and the label of its button:
/// each action is asked anew.
pub const ACTION_CHOICES: [(&str, &str); 2] = [("once", "Allow once"), ("deny", "Deny")];
/// How a channel without buttons asks about an action: what to answer with.
pub const ACTION_ANSWER_WITH: &str = "Reply to this with one word: once (do it this time) or deny.";

/// The most characters of an action's argument shown (its beginning and its end; the rest is
/// counted): the daemon asks about at most 10 arguments with names of at most 32 characters, so
/// a whole question fits the smallest channel's message (4,000 characters).
const ARGUMENT_LIMIT: usize = 200;

/// The longest line of a skill's review: what it carries comes from a repository nobody has
/// read yet, so no line of it fills a chat.
const REVIEW_LINE_LIMIT: usize = 300;

/// The most items one line of a review names (scripts, packages, hosts) and the most findings
/// it shows; the rest are counted.
const REVIEW_LIST_LIMIT: usize = 20;

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
/// (empty when none was), its control characters and bidirectional overrides shown, not
/// obeyed: the command is the model's, and the sentence stands beside the answers' buttons.
pub fn asked_for(request: &v1::ApprovalRequest) -> String {
    let line = request.asked_by.lines().next().unwrap_or_default();
    one_line(line.strip_prefix(baaaht_proto::BROWSER_ASKED).unwrap_or(line), 120)
}

/// What an approval request waits for, without the command: "The coder's tools want to reach
/// pypi.org:443", "The browser wants to reach trains.example:443".
pub fn wants_to_reach(request: &v1::ApprovalRequest) -> String {
    if request.asked_by.starts_with(baaaht_proto::BROWSER_ASKED) {
        return format!("The browser wants to reach {}:{}", request.host, request.port);
    }
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

/// How long `request` waits for an answer, and what happens then: denied for a connection,
/// declined for a skill's review.
pub fn expires_text(request: &v1::ApprovalRequest) -> String {
    match request.skill_review {
        Some(_) => format!("Declined in {} s if nobody answers.", request.expires_in_seconds),
        None => denied_in(request.expires_in_seconds),
    }
}

/// Whether `request` carries more than one line says (a skill's review, an action's
/// arguments): a channel shows it whole, as [`review_text`] or [`review_lines_of`] give it.
pub fn is_review(request: &v1::ApprovalRequest) -> bool {
    request.skill_review.is_some() || request.action.is_some()
}

/// How a channel without buttons says what to answer `request` with.
pub fn answer_with(request: &v1::ApprovalRequest) -> &'static str {
    match (&request.skill_review, &request.action) {
        (Some(_), _) => REVIEW_ANSWER_WITH,
        (None, Some(_)) => ACTION_ANSWER_WITH,
        (None, None) => ANSWER_WITH,
    }
}

/// The answers `request` takes, as a decision and the label of its button: install or decline
/// for a skill's review, else once, session, always or deny.
pub fn choices(request: &v1::ApprovalRequest) -> &'static [(&'static str, &'static str)] {
    match (&request.skill_review, &request.action) {
        (Some(_), _) => &REVIEW_CHOICES,
        (None, Some(_)) => &ACTION_CHOICES,
        (None, None) => &CHOICES,
    }
}

/// `text` as one line of at most `limit` characters: control characters shown, not obeyed
/// ([`crate::text::clean`]), any run of white space (a newline too) one space, and what is
/// cut marked with "…". Every string of a review goes through it.
fn one_line(text: &str, limit: usize) -> String {
    let cleaned = crate::text::clean(text);
    let words: Vec<&str> = cleaned.split_whitespace().collect();
    let line = words.join(" ");
    if line.chars().count() <= limit {
        return line;
    }
    let mut cut: String = line.chars().take(limit.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// A size as people read it: "812 bytes", "4.2 KB", "1.3 MB".
fn size(bytes: u64) -> String {
    match bytes {
        0..1_000 => format!("{bytes} bytes"),
        1_000..1_000_000 => format!("{:.1} KB", bytes as f64 / 1e3),
        _ => format!("{:.1} MB", bytes as f64 / 1e6),
    }
}

/// A file an agent sent, as a line where the file itself cannot be shown (a terminal):
/// "📎 page.png (image/png, 48.2 KB)".
pub fn file_sent(file: &v1::Attachment) -> String {
    let kind = if file.mime_type.is_empty() { String::new() } else { format!("{}, ", one_line(&file.mime_type, 60)) };
    format!("📎 {} ({kind}{})", one_line(&file.filename, 120), size(file.size_bytes))
}

/// `items` named after `lead` on one line of at most [`REVIEW_LINE_LIMIT`] characters: at
/// most [`REVIEW_LIST_LIMIT`] of them, the others counted ("and 3 more").
fn listed(lead: &str, items: &[String]) -> String {
    // What is kept free for " and 99999 more." at the end.
    const TAIL: usize = 16;
    let mut line = lead.to_string();
    let mut shown = 0;
    for item in items {
        let piece = if shown == 0 { format!(" {item}") } else { format!(", {item}") };
        let fits = line.chars().count() + piece.chars().count() + TAIL <= REVIEW_LINE_LIMIT;
        if shown == REVIEW_LIST_LIMIT || (shown > 0 && !fits) {
            break;
        }
        line.push_str(&piece);
        shown += 1;
    }
    if shown < items.len() {
        line.push_str(&format!(" and {} more", items.len() - shown));
    }
    line.push('.');
    line
}

/// A review's skill and whom it would be installed for: "the skill forecast for you".
fn the_skill(review: &v1::SkillReview) -> String {
    let whom = one_line(&review.installs_for, 80);
    let whom = if whom.is_empty() { String::new() } else { format!(" for {whom}") };
    format!("the skill {}{whom}", one_line(&review.name, 64))
}

/// What a skill's review asks, its first line: "The worker asks to install the skill forecast
/// for you." (and that it would replace the one installed, when it would). A request that is
/// no review reads as [`approval_asked`].
pub fn review_asked(request: &v1::ApprovalRequest) -> String {
    if let (None, Some(action)) = (&request.skill_review, &request.action) {
        return action_asked(request, action);
    }
    let Some(review) = &request.skill_review else { return approval_asked(request) };
    let replaces = if review.replaces { " (it would replace the one installed)" } else { "" };
    format!("The {} asks to install {}{replaces}.", agent(request.agent), the_skill(review))
}

/// What a skill's review says of the skill, a line each: its description, where it comes
/// from, its size, its scripts, the packages, secrets and hosts it would use.
pub fn review_facts(review: &v1::SkillReview) -> Vec<String> {
    let mut facts = vec![];
    let description = one_line(&review.description, REVIEW_LINE_LIMIT);
    if !description.is_empty() {
        facts.push(description);
    }
    let source = one_line(&review.source, 200);
    let commit: String = one_line(&review.commit, 40).chars().take(12).collect();
    facts.extend(match (source.is_empty(), commit.is_empty()) {
        (false, false) => Some(format!("From {source}, commit {commit}.")),
        (false, true) => Some(format!("From {source}.")),
        (true, false) => Some(format!("Commit {commit}.")),
        (true, true) => None,
    });
    let files = if review.files == 1 { "1 file".to_string() } else { format!("{} files", review.files) };
    facts.push(format!("{files}, {} in all.", size(review.bytes)));
    let scripts: Vec<String> = review
        .scripts
        .iter()
        .map(|script| format!("{} ({})", one_line(&script.path, 100), size(script.size_bytes)))
        .collect();
    facts.push(if scripts.is_empty() { "No scripts.".into() } else { listed("Scripts:", &scripts) });
    let each = |items: &[String]| items.iter().map(|item| one_line(item, 100)).collect::<Vec<_>>();
    if !review.packages.is_empty() {
        facts.push(listed("Packages it would install:", &each(&review.packages)));
    }
    if !review.secrets.is_empty() {
        facts.push(listed("Secrets it asks for:", &each(&review.secrets)));
    }
    facts.push(if review.hosts.is_empty() {
        "It names no hosts.".into()
    } else {
        listed("Hosts it names:", &each(&review.hosts))
    });
    if review.always_loaded {
        facts.push("It is always loaded: its whole text goes into every agent's instructions.".into());
    }
    if review.hides_system_skill {
        facts.push("It takes the place of the system's skill of the same name.".into());
    }
    facts
}

/// What a skill's scan found: its sentence ("The scan found nothing it knows as malicious." or
/// "⚠ The scan found:"), then each finding, at most [`REVIEW_LIST_LIMIT`] of them (the
/// sentence counts them all when there are more).
pub fn review_scan(review: &v1::SkillReview) -> (String, Vec<String>) {
    let found = review.findings.len();
    let said = match found {
        0 => "The scan found nothing it knows as malicious.".to_string(),
        _ if found <= REVIEW_LIST_LIMIT => "⚠ The scan found:".to_string(),
        _ => format!("⚠ The scan found {found} things; the first {REVIEW_LIST_LIMIT}:"),
    };
    let findings =
        review.findings.iter().take(REVIEW_LIST_LIMIT).map(|finding| one_line(finding, REVIEW_LINE_LIMIT)).collect();
    (said, findings)
}

/// A skill's review as lines of text, for a channel that writes text: its facts, then what
/// its scan found, each finding a bullet.
pub fn review_lines(review: &v1::SkillReview) -> Vec<String> {
    let (said, findings) = review_scan(review);
    let mut lines = review_facts(review);
    lines.push(said);
    lines.extend(findings.into_iter().map(|finding| format!("• {finding}")));
    lines
}

/// What an action asked in a marked turn is: "The worker asks to run send_email of the MCP
/// server mail, in a turn that read content from outside."
fn action_asked(request: &v1::ApprovalRequest, action: &v1::ActionReview) -> String {
    format!(
        "The {} asks to run {} of the MCP server {}, in a turn that read content from outside.",
        agent(request.agent),
        one_line(&action.tool, 64),
        one_line(&action.server, 64)
    )
}

/// Whether `c` shows nothing (or nothing like itself) where it stands: a format or default-
/// ignorable character (zero-width, soft hyphen, joiners, variation selectors, tag
/// characters, fillers) or a line or paragraph separator. An argument shows each one named.
fn invisible(c: char) -> bool {
    matches!(c,
        '\u{00ad}' | '\u{034f}' | '\u{061c}' | '\u{115f}' | '\u{1160}' | '\u{17b4}' | '\u{17b5}'
        | '\u{180b}'..='\u{180f}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{206f}'
        | '\u{3164}' | '\u{fe00}'..='\u{fe0f}' | '\u{feff}' | '\u{ffa0}' | '\u{fff0}'..='\u{fffb}'
        | '\u{1bca0}'..='\u{1bca3}' | '\u{1d173}'..='\u{1d17a}' | '\u{e0000}'..='\u{e0fff}')
}

/// An argument's value as a person reads it: every control character, bidirectional mark and
/// invisible character shown by its code, a newline as ↵, and past [`ARGUMENT_LIMIT`]
/// characters folded to its beginning and its end, the rest counted.
fn argument_value(value: &str) -> String {
    let mut shown = String::new();
    for c in crate::text::clean(value).chars() {
        match c {
            '\n' => shown.push_str("↵ "),
            c if invisible(c) => shown.push_str(&format!("<U+{:04X}>", c as u32)),
            c => shown.push(c),
        }
    }
    let count = shown.chars().count();
    if count <= ARGUMENT_LIMIT {
        return shown;
    }
    // Its end too: what a long value carries last is often what matters.
    let tail = ARGUMENT_LIMIT / 4;
    let head: String = shown.chars().take(ARGUMENT_LIMIT - tail).collect();
    let end: String = shown.chars().skip(count - tail).collect();
    format!("{head} … ({} characters not shown) … {end}", count - ARGUMENT_LIMIT)
}

/// What an action would do, a line each: what its class says, what the turn read, then each
/// argument exactly as the call has it (made visible and folded, [`argument_value`]).
pub fn action_lines(action: &v1::ActionReview) -> Vec<String> {
    let effects: Vec<String> = action.effects.iter().map(|effect| one_line(effect, 120)).collect();
    // "(as … says)" goes after the rest, without a semicolon.
    let (said, does): (Vec<String>, Vec<String>) = effects.into_iter().partition(|effect| effect.starts_with('('));
    let mut lines = vec![];
    if !does.is_empty() {
        let said = said.first().map(|said| format!(" {said}")).unwrap_or_default();
        lines.push(format!("It {}{said}.", does.join("; ")));
    }
    lines.push(format!("The turn read {}: what it says may not be what you asked.", one_line(&action.source, 300)));
    if action.arguments.is_empty() {
        lines.push("With no arguments.".into());
    } else {
        lines.push("With:".into());
        lines.extend(
            action
                .arguments
                .iter()
                .map(|argument| format!("• {}: {}", argument_value(&argument.name), argument_value(&argument.value))),
        );
    }
    lines
}

/// The lines of a request that carries more than a sentence ([`is_review`]): a skill's review
/// or an action's; none for a connection.
pub fn review_lines_of(request: &v1::ApprovalRequest) -> Vec<String> {
    match (&request.skill_review, &request.action) {
        (Some(review), _) => review_lines(review),
        (None, Some(action)) => action_lines(action),
        (None, None) => vec![],
    }
}

/// A skill's or an action's review as one text of at most `limit` characters: what is asked,
/// its lines, then `ending` (how to answer, how long it waits). Lines that would not fit are
/// left out, and counted.
pub fn review_text(request: &v1::ApprovalRequest, ending: &str, limit: usize) -> String {
    let lines = review_lines_of(request);
    let head = review_asked(request);
    // Room for the lines: the limit less the first line, the ending, their blank lines and a
    // note of what was left out.
    let mut room = limit.saturating_sub(head.chars().count() + ending.chars().count() + 40);
    let mut kept = vec![];
    for line in &lines {
        let length = line.chars().count() + 1;
        if length > room {
            break;
        }
        room -= length;
        kept.push(line.as_str());
    }
    let mut body = kept.join("\n");
    if kept.len() < lines.len() {
        body.push_str(&format!("\n(and {} more lines)", lines.len() - kept.len()));
    }
    [head.as_str(), body.trim_start(), ending]
        .into_iter()
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// How an approval request ended: "Allowed for this conversation, by Alice.", "Denied, nobody
/// answered in time." or, for a skill's review, "Install approved, by Ada." or "Declined, by
/// Ada.".
pub fn settled(decision: &str, by: &str) -> String {
    let what = match decision {
        "once" => "Allowed once",
        "session" => "Allowed for this conversation",
        "always" => "Allowed always (a rule)",
        "deny" => "Denied",
        "install" => "Install approved",
        "decline" => "Declined",
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
        Event::Approval(v1::ApprovalRequest { skill_review: Some(review), agent: role, .. }) => {
            let source = one_line(&review.source, 200);
            let source = if source.is_empty() { String::new() } else { format!(" from {source}") };
            format!("The {} asked to install {}{source}.", agent(*role), the_skill(review))
        }
        Event::Approval(v1::ApprovalRequest { action: Some(action), agent: role, .. }) => format!(
            "The {} asked to run {} of the MCP server {} (the turn had read {}).",
            agent(*role),
            one_line(&action.tool, 64),
            one_line(&action.server, 64),
            one_line(&action.source, 200)
        ),
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

    /// An action's question shows every argument, invisible characters by their code, a long
    /// value's beginning and end, and fits a 4,000-character message whole at the most the
    /// daemon asks about (10 arguments, names of 32 characters, values of 16 KiB).
    #[test]
    fn an_actions_question_shows_every_argument_and_fits_a_message_whole() {
        let mut arguments: Vec<v1::ActionArgument> = (0..10)
            .map(|n| v1::ActionArgument { name: format!("{n:0>32}"), value: format!("\"{}\"", "é".repeat(16_000)) })
            .collect();
        arguments[0].value = "\"Hi\u{e0049}\u{e0047}\u{200b}\u{00ad}\u{2028}x\u{202e}y\n…the end\"".into();
        let action = v1::ActionReview {
            server: "mail".into(),
            tool: "send".into(),
            effects: vec!["acts outside this conversation".into(), "(as the tool says)".into()],
            arguments,
            source: "the MCP server mail".into(),
        };
        let request = v1::ApprovalRequest {
            id: "a-1".into(),
            expires_in_seconds: 120,
            action: Some(action),
            ..v1::ApprovalRequest::default()
        };
        let text = review_text(&request, &format!("{ACTION_ANSWER_WITH} Denied in 120 s without an answer."), 4_000);
        assert!(text.chars().count() <= 4_000, "{}", text.chars().count());
        assert!(!text.contains("more lines"), "nothing is left out: {text}");
        assert!(
            text.contains("• 00000000000000000000000000000000: \"Hi<U+E0049><U+E0047><U+200B><U+00AD><U+2028>x<U+202E>y↵ …the end\""),
            "{text}"
        );
        assert!(text.contains("(15802 characters not shown) … éééé"), "{text}");
        assert_eq!(choices(&request), &ACTION_CHOICES);
    }

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
        assert_eq!(choices(&request), CHOICES);
        assert_eq!(expires_text(&v1::ApprovalRequest { expires_in_seconds: 90, ..request }), denied_in(90));
        let shot = v1::Attachment {
            filename: "page.png".into(),
            mime_type: "image/png".into(),
            path: "sent/page.png".into(),
            size_bytes: 48_200,
            voice: false,
        };
        assert_eq!(file_sent(&shot), "📎 page.png (image/png, 48.2 KB)");
        // The browser serves every agent: it is named, not a role's tools.
        let browsing = v1::ApprovalRequest {
            agent: v1::AgentRole::Tool as i32,
            host: "trains.example".into(),
            port: 443,
            asked_by: format!("{}open https://trains.example/times", baaaht_proto::BROWSER_ASKED),
            ..Default::default()
        };
        assert_eq!(
            approval_asked(&browsing),
            "The browser wants to reach trains.example:443 for “open https://trains.example/times”."
        );
    }

    fn forecast() -> v1::ApprovalRequest {
        let review = v1::SkillReview {
            name: "forecast".into(),
            description: "Tells the weather\nfor a city.".into(),
            source: "https://github.com/acme/skills".into(),
            commit: "0123456789abcdef0123456789abcdef01234567".into(),
            installs_for: "you".into(),
            replaces: false,
            files: 3,
            bytes: 4_200,
            scripts: vec![v1::SkillScript { path: "scripts/forecast.sh".into(), size_bytes: 812 }],
            packages: vec!["apt jq".into()],
            secrets: vec![],
            hosts: vec!["api.example.com".into()],
            findings: vec![],
            always_loaded: false,
            hides_system_skill: false,
        };
        v1::ApprovalRequest {
            id: "a-0123456789ab".into(),
            agent: v1::AgentRole::Worker as i32,
            expires_in_seconds: 300,
            skill_review: Some(review),
            ..Default::default()
        }
    }

    #[test]
    fn a_skill_review_reads_the_same_on_every_channel() {
        let mut request = forecast();
        assert_eq!(review_asked(&request), "The worker asks to install the skill forecast for you.");
        assert_eq!(choices(&request), REVIEW_CHOICES);
        assert_eq!(expires_text(&request), "Declined in 300 s if nobody answers.");
        let Some(review) = request.skill_review.as_mut() else { unreachable!() };
        assert_eq!(
            review_lines(review),
            [
                "Tells the weather for a city.",
                "From https://github.com/acme/skills, commit 0123456789ab.",
                "3 files, 4.2 KB in all.",
                "Scripts: scripts/forecast.sh (812 bytes).",
                "Packages it would install: apt jq.",
                "Hosts it names: api.example.com.",
                "The scan found nothing it knows as malicious.",
            ]
        );
        review.replaces = true;
        review.installs_for = "the group Ops".into();
        review.scripts.clear();
        review.hosts.clear();
        review.secrets = vec!["WEATHER_KEY".into()];
        review.findings = vec!["scripts/x.sh:3: runs what it downloads (remote-exec): curl x | sh".into()];
        review.always_loaded = true;
        review.hides_system_skill = true;
        let lines = review_lines(review);
        assert!(lines.contains(&"No scripts.".to_string()), "{lines:#?}");
        let always = "It is always loaded: its whole text goes into every agent's instructions.";
        assert!(lines.contains(&always.to_string()), "{lines:#?}");
        let hides = "It takes the place of the system's skill of the same name.";
        assert!(lines.contains(&hides.to_string()), "{lines:#?}");
        assert!(lines.contains(&"It names no hosts.".to_string()), "{lines:#?}");
        assert!(lines.contains(&"Secrets it asks for: WEATHER_KEY.".to_string()), "{lines:#?}");
        assert_eq!(
            lines[lines.len() - 2..],
            ["⚠ The scan found:", "• scripts/x.sh:3: runs what it downloads (remote-exec): curl x | sh"]
        );
        assert_eq!(
            review_asked(&request),
            "The worker asks to install the skill forecast for the group Ops (it would replace the one installed)."
        );
        let text = review_text(&request, REVIEW_ANSWER_WITH, usize::MAX);
        assert!(text.starts_with("The worker asks to install the skill forecast for the group Ops"), "{text}");
        assert!(text.ends_with("\n\nReply to this with one word: install or decline."), "{text}");
        assert_eq!(settled("install", "Ada"), "Install approved, by Ada.");
        assert_eq!(settled("decline", "Ada"), "Declined, by Ada.");
        assert_eq!(settled("decline", "nobody"), "Declined, nobody answered in time.");
        use v1::orchestrator_event::Event;
        assert_eq!(
            activity(&Event::Approval(request)).as_deref(),
            Some(
                "The worker asked to install the skill forecast for the group Ops from https://github.com/acme/skills."
            )
        );
    }

    #[test]
    fn what_a_repository_wrote_is_one_line_each_and_its_lists_are_capped() {
        let mut request = forecast();
        let Some(review) = request.skill_review.as_mut() else { unreachable!() };
        review.name = "evil\u{1b}]52;c;aGk=\u{7}\nname".into();
        review.description = "x".repeat(1_000);
        // Short names: twenty of them, the rest counted; long ones: as many as the line holds.
        review.hosts = (0..50).map(|n| format!("h{n}.io")).collect();
        review.packages = (0..50).map(|n| format!("pip package-with-a-long-name-{n}")).collect();
        review.scripts =
            (0..30).map(|n| v1::SkillScript { path: format!("scripts/{n}.sh"), size_bytes: 1_500_000 }).collect();
        review.findings = (0..25).map(|n| format!("SKILL.md:{n}: {}", "y".repeat(400))).collect();
        let lines = review_lines(review);
        assert!(lines.iter().all(|line| line.chars().count() <= 300 + 2), "{lines:#?}");
        assert!(lines.iter().all(|line| !line.contains('\n') && !line.contains('\u{1b}')), "{lines:#?}");
        assert!(lines[0].ends_with('…'));
        let hosts = lines.iter().find(|line| line.starts_with("Hosts it names:")).expect("the hosts");
        assert!(hosts.ends_with(", h19.io and 30 more."), "{hosts}");
        let packages = lines.iter().find(|line| line.starts_with("Packages")).expect("the packages");
        assert!(packages.ends_with(" more.") && packages.chars().count() <= 300, "{packages}");
        let scripts = lines.iter().find(|line| line.starts_with("Scripts:")).expect("the scripts");
        assert!(scripts.contains("scripts/0.sh (1.5 MB)") && scripts.ends_with(" more."), "{scripts}");
        assert!(lines.contains(&"⚠ The scan found 25 things; the first 20:".to_string()), "{lines:#?}");
        assert_eq!(lines.iter().filter(|line| line.starts_with("• ")).count(), 20);
        assert_eq!(review_asked(&request), "The worker asks to install the skill evil^[]52;c;aGk=^G name for you.");
        // A message of 1,000 characters holds the first line, what fits, and the ending.
        let text = review_text(&request, "Declined in 300 s if nobody answers.", 1_000);
        assert!(text.chars().count() <= 1_000, "{}", text.chars().count());
        assert!(text.contains("more lines)") && text.ends_with("if nobody answers."), "{text}");
    }
}
