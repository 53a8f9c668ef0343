//! `baaaht chat` and `baaaht sessions`: what a person sees of a turn and of the session store.

use baaaht_proto::v1;

use baaaht_gateway_kit::said::{Said, Step, Turn};
use baaaht_gateway_kit::sentences;

use crate::terminal::clean;

/// Whose conversation: `--group` wins, then `--user`, then the login name.
pub fn context(user: Option<String>, group: Option<String>, env: impl Fn(&str) -> Option<String>) -> v1::ContextRef {
    match (group, user) {
        (Some(group), _) => v1::ContextRef { r#type: v1::ContextType::Group as i32, id: group },
        (None, Some(user)) => v1::ContextRef { r#type: v1::ContextType::User as i32, id: user },
        (None, None) => v1::ContextRef { r#type: v1::ContextType::User as i32, id: login(env) },
    }
}

/// The login name of whoever runs the client (`$USER`, else `local`).
pub fn login(env: impl Fn(&str) -> Option<String>) -> String {
    env("USER").filter(|name| !name.is_empty()).unwrap_or_else(|| "local".into())
}

/// A tool's connection waiting for approval, or a skill waiting for its review, in the kit's
/// words, and how to answer it from another terminal.
pub fn approval_text(request: &v1::ApprovalRequest) -> String {
    let id = clean(&request.id);
    if let (None, Some(_)) = (&request.skill_review, &request.action) {
        let lines: String =
            sentences::review_lines_of(request).iter().map(|line| format!("    {}\n", clean(line))).collect();
        return format!(
            "  ? {}\n{lines}    Allow it once: baaaht egress approve {id}; refuse: baaaht egress deny {id}. {}\n",
            clean(&sentences::review_asked(request)),
            sentences::expires_text(request),
        );
    }
    if let Some(review) = &request.skill_review {
        let lines: String =
            sentences::review_lines(review).iter().map(|line| format!("    {}\n", clean(line))).collect();
        return format!(
            "  ? {}\n{lines}    Answer with `baaaht skills answer {id} install|decline`. {}\n",
            clean(&sentences::review_asked(request)),
            sentences::expires_text(request),
        );
    }
    format!(
        "  ? {} Allow: baaaht egress approve {id} [--session | --always]; refuse: baaaht egress deny {id}. {}\n",
        clean(&sentences::approval_asked(request)),
        sentences::expires_text(request),
    )
}

/// One turn followed on a terminal, the way every channel follows one: each event read by the
/// kit ([`said`]) and the turn's end decided by its [`Turn`]. The answer's words go to `out` as
/// they come, progress to `note`.
pub struct Terminal<O, N> {
    turn: Turn,
    out: O,
    note: N,
    /// Whether any of the answer's words were printed yet.
    printed: bool,
}

impl<O: std::io::Write, N: std::io::Write> Terminal<O, N> {
    pub fn new(session: &str, turn: &str, out: O, note: N) -> Self {
        Terminal { turn: Turn::new(session, turn), out, note, printed: false }
    }

    /// Whether `event` is of this turn.
    pub fn owns(&self, event: &v1::OrchestratorEvent) -> bool {
        self.turn.owns(event)
    }

    /// The progress stream, for what is said beside the turn (a spinner, a notice).
    pub fn note(&mut self) -> &mut N {
        &mut self.note
    }

    /// Prints what one of the turn's events said. When it ended the turn: `Ok` when answered,
    /// else what failed — a failure inside baaaht with its detail, this being the operator's
    /// own terminal.
    pub fn take(&mut self, said: &Said) -> Option<Result<(), String>> {
        let (out, note) = (&mut self.out, &mut self.note);
        // Everything here came from agents and models: shown, never obeyed by the terminal.
        // silent-ok: a closed terminal does not stop the turn; the session keeps the reply.
        let _ = match said {
            Said::Words(text) => {
                self.printed = true;
                write!(out, "{}", clean(text)).and_then(|()| out.flush())
            }
            Said::Delegation { agent, task, state } if state == "started" => {
                writeln!(note, "  → {agent}: {}", clean(task.lines().next().unwrap_or_default()))
            }
            Said::Delegation { agent, state, .. } => writeln!(note, "  ← {agent} {}", clean(state)),
            Said::Tool { agent, tool, state, ms } => {
                writeln!(note, "    · {agent} {} {} ({ms} ms)", clean(tool), clean(state))
            }
            Said::Sent(message) => writeln!(out, "\n{}", clean(&message.content)),
            Said::Tainted { source, withheld } => writeln!(
                note,
                "  ! reading untrusted content ({}): some tools are paused: {}",
                clean(source),
                clean(&withheld.join(", "))
            ),
            _ => Ok(()),
        };
        match self.turn.take(said) {
            Step::Ended(None) => {
                // An answer that came whole, without its words as they were written.
                let whole = if self.printed { String::new() } else { clean(&self.turn.writing.text).into_owned() };
                // silent-ok: as above.
                let _ = writeln!(self.out, "{whole}");
                Some(Ok(()))
            }
            Step::Ended(Some(trouble)) => match said {
                Said::Failed { internal: Some(detail), .. } => Some(Err(detail.clone())),
                _ => Some(Err(trouble.sentence())),
            },
            Step::Changed | Step::Nothing => None,
        }
    }
}

/// A spinner on stderr while a turn has produced no token yet (only on a terminal): one frame
/// per tick, on a line that [`Spinner::clear`] empties again before anything else is printed.
#[derive(Debug, Default)]
pub struct Spinner {
    frame: usize,
    shown: bool,
}

impl Spinner {
    const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

    pub fn tick(&mut self, note: &mut impl std::io::Write) {
        let frame = Self::FRAMES[self.frame % Self::FRAMES.len()];
        self.frame += 1;
        self.shown = true;
        // silent-ok: a spinner that cannot be drawn is no loss.
        let _ = write!(note, "\r{frame} thinking…").and_then(|()| note.flush());
    }

    pub fn clear(&mut self, note: &mut impl std::io::Write) {
        if std::mem::take(&mut self.shown) {
            // silent-ok: as above. `ESC [2K` erases the spinner's line.
            let _ = write!(note, "\r\x1b[2K").and_then(|()| note.flush());
        }
    }
}

/// One line per session.
pub fn sessions_text(list: &v1::SessionList) -> String {
    if list.sessions.is_empty() {
        return "no sessions\n".into();
    }
    let mut text = String::new();
    for s in &list.sessions {
        let whose = if s.group_id.is_empty() { format!("user:{}", s.user_id) } else { format!("group:{}", s.group_id) };
        let title = if s.title.is_empty() { String::new() } else { format!("  \"{}\"", s.title) };
        text.push_str(&format!("{}  {:<8}  {:<20}  last {}{title}\n", s.id, s.status, whose, s.last_activity));
    }
    text
}

/// A transcript, entry by entry, with ids so that a branch can be forked.
pub fn transcript_text(transcript: &v1::SessionTranscript) -> String {
    let mut text = String::new();
    if let Some(h) = &transcript.header {
        let model = if h.model.is_empty() { String::new() } else { format!(", model {}", h.model) };
        text.push_str(&format!("session {} ({}, created {}{model})\n", h.id, h.status, h.created));
    }
    for entry in &transcript.entries {
        use v1::session_entry::Entry;
        let body = match &entry.entry {
            Some(Entry::Message(m)) if m.sender_id.is_empty() => format!("{}: {}", m.role, m.content),
            Some(Entry::Message(m)) => format!("{} ({}): {}", m.role, m.sender_id, m.content),
            Some(Entry::Delegate(d)) => {
                format!("delegated to {}: {}\n    → {}", sentences::agent(d.agent), d.task, d.result)
            }
            Some(Entry::Compaction(c)) => format!("compacted {} entries: {}", c.compacted_entry_ids.len(), c.summary),
            Some(Entry::ModelChange(m)) => format!("model {} → {}", m.previous_model, m.new_model),
            Some(Entry::Activity(a)) => {
                match baaaht_proto::transcript::activity_event(a).and_then(sentences::activity) {
                    Some(said) => format!("· {said}"),
                    None => continue,
                }
            }
            None => "(empty entry)".into(),
        };
        text.push_str(&format!("[{}] {body}\n", entry.id));
    }
    for problem in &transcript.problems {
        text.push_str(&format!("! unreadable {problem}\n"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_streams_to_out_progress_to_notes_and_the_kits_turn_decides_the_end() {
        use baaaht_gateway_kit::said::said;
        use v1::orchestrator_event::Event;
        let event =
            |kind: Event| v1::OrchestratorEvent { turn_id: "t-1".into(), event: Some(kind), ..Default::default() };
        let mut terminal = Terminal::new("s-1", "t-1", vec![], vec![]);
        let mut take = |kind: Event| {
            let event = event(kind);
            assert!(terminal.owns(&event));
            terminal.take(&said(&event).expect("said"))
        };
        let delta = |text: &str| Event::TextDelta(v1::TextDelta { index: 0, text: text.into() });
        assert_eq!(take(delta("Hel")), None);
        assert_eq!(take(delta("lo")), None);
        let started = v1::DelegationProgress {
            agent: v1::AgentRole::Coder as i32,
            task: "write it\nin full".into(),
            state: "started".into(),
            result: String::new(),
        };
        assert_eq!(take(Event::Delegation(started)), None);
        let reply = v1::ReplyComplete { entry_id: "e".into(), content: "Hello".into() };
        assert_eq!(take(Event::Reply(reply.clone())), Some(Ok(())));
        assert_eq!(String::from_utf8_lossy(&terminal.out), "Hello\n");
        assert_eq!(String::from_utf8_lossy(&terminal.note), "  → coder: write it\n");

        // An answer that came whole is printed whole; a failure inside shows its detail here.
        let mut whole = Terminal::new("s-1", "t-1", vec![], vec![]);
        assert_eq!(whole.take(&said(&event(Event::Reply(reply))).expect("said")), Some(Ok(())));
        assert_eq!(String::from_utf8_lossy(&whole.out), "Hello\n");
        let failed = event(Event::Error(v1::TurnError { message: "no model".into(), for_users: false }));
        assert_eq!(whole.take(&said(&failed).expect("said")), Some(Err("no model".into())));
        let told = event(Event::Error(v1::TurnError { message: "The budget is used up.".into(), for_users: true }));
        assert_eq!(whole.take(&said(&told).expect("said")), Some(Err("The budget is used up.".into())));
    }

    #[test]
    fn an_approval_says_how_to_answer_it_from_another_terminal() {
        let request = v1::ApprovalRequest {
            id: "a-0123456789ab".into(),
            agent: v1::AgentRole::Coder as i32,
            host: "pypi.org".into(),
            port: 443,
            expires_in_seconds: 120,
            ..Default::default()
        };
        assert_eq!(
            approval_text(&request),
            "  ? The coder's tools want to reach pypi.org:443. Allow: baaaht egress approve a-0123456789ab [--session \
             | --always]; refuse: baaaht egress deny a-0123456789ab. Denied in 120 s without an answer.\n"
        );
        let review = v1::SkillReview {
            name: "forecast".into(),
            installs_for: "you".into(),
            files: 1,
            bytes: 300,
            hosts: vec!["api.example.com".into()],
            ..Default::default()
        };
        let request = v1::ApprovalRequest { expires_in_seconds: 300, skill_review: Some(review), ..request };
        assert_eq!(
            approval_text(&request),
            "  ? The coder asks to install the skill forecast for you.\n    1 file, 300 bytes in all.\n    No scripts.\n    \
             Hosts it names: api.example.com.\n    The scan found nothing it knows as malicious.\n    Answer with \
             `baaaht skills answer a-0123456789ab install|decline`. Declined in 300 s if nobody answers.\n"
        );
    }

    #[test]
    fn the_spinner_clears_its_own_line_only() {
        let mut note = vec![];
        let mut spinner = Spinner::default();
        spinner.clear(&mut note);
        assert!(note.is_empty(), "nothing to clear yet");
        spinner.tick(&mut note);
        spinner.tick(&mut note);
        spinner.clear(&mut note);
        assert_eq!(String::from_utf8_lossy(&note), "\r⠋ thinking…\r⠙ thinking…\r\x1b[2K");
    }

    #[test]
    fn the_context_is_the_group_then_the_user_then_the_login() {
        let env = |key: &str| (key == "USER").then(|| "alice".to_string());
        assert_eq!(context(None, None, env).id, "alice");
        assert_eq!(context(Some("bob".into()), None, env).id, "bob");
        let family = context(Some("bob".into()), Some("family".into()), env);
        assert_eq!((family.r#type, family.id.as_str()), (v1::ContextType::Group as i32, "family"));
    }
}
