//! What the daemon says of a turn, read once for every client. [`said`] turns an event into
//! what a person is shown (words, a phase, an agent at work, an approval, a failure as its
//! sentence), and a [`Turn`] keeps the answer being written from them until it ends. Nothing
//! here calls the daemon or a channel: a chat gateway's turn, the web page and the
//! terminal each show what these give them, in their own way.

use std::time::Duration;

use baaaht_proto::v1;

use crate::sentences;

/// How long a turn may take before the gateway stops following it.
pub const TURN_LIMIT: Duration = Duration::from_secs(900);

/// The answer being written: its text so far (markdown) and what the agents are doing.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Writing {
    pub text: String,
    pub status: String,
    /// What the agent does before its first words ("starting the assistant", "thinking"):
    /// shown in a placeholder already up; a channel that waits for the words (Matrix) shows
    /// its typing sign instead.
    pub phase: String,
}

/// Why an answer did not finish, as its channel tells the person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trouble {
    /// Something failed: the sentence says what (already fit for the person).
    Failed(String),
    /// No answer within [`TURN_LIMIT`].
    TooLong,
}

impl Trouble {
    pub fn sentence(&self) -> String {
        match self {
            Trouble::Failed(sentence) => sentence.clone(),
            Trouble::TooLong => sentences::too_long(TURN_LIMIT.as_secs() / 60),
        }
    }
}

/// One event of the daemon's stream, as a client reads it.
#[derive(Debug, Clone, PartialEq)]
pub enum Said {
    /// A person's message entered the conversation.
    Entered(v1::UserMessageEntered),
    /// What the turn's agent does before its words: its phase (`thinking`) and the sentence
    /// that says it ("the coder is thinking").
    Phase { agent: &'static str, phase: String, said: String },
    /// More words of the answer.
    Words(String),
    /// More of the model's thinking, where it shows it.
    Thinking(String),
    /// A delegation started, went on or ended.
    Delegation { agent: &'static str, task: String, state: String },
    /// A tool ran.
    Tool { agent: &'static str, tool: String, state: String, ms: u64 },
    /// The turn read content from outside: paused what it may no longer do.
    Tainted { source: String, withheld: Vec<String> },
    /// The whole answer, and its entry in the session.
    Answered { entry: String, text: String },
    /// The turn failed: `sentence` is what its people read; `internal`, when the failure was
    /// inside baaaht, is its detail (for the log, and for an operator's own terminal).
    Failed { sentence: String, internal: Option<String> },
    /// A connection waits for someone to allow it.
    Approval(Box<v1::ApprovalRequest>),
    /// A connection's approval was answered, or not in time.
    Settled(v1::ApprovalSettled),
    /// The agents sent a message to the conversation (the `message` tool), maybe with files.
    Sent(v1::OutboundMessage),
    /// A task's notice for the context (a scheduled run's result, a reminder).
    Notice(v1::TaskNotice),
    /// The conversation was moved by an undo or a redo: to `leaf`, with what was done.
    Moved { leaf: String, text: String },
}

/// What `event` says; `None` for an event with nothing in it.
pub fn said(event: &v1::OrchestratorEvent) -> Option<Said> {
    use v1::orchestrator_event::Event;
    Some(match event.event.as_ref()? {
        Event::UserMessage(entered) => Said::Entered(entered.clone()),
        Event::Phase(phase) => Said::Phase {
            agent: sentences::agent(phase.agent),
            phase: phase.phase.clone(),
            said: baaaht_proto::phase_said(phase),
        },
        Event::TextDelta(delta) => Said::Words(delta.text.clone()),
        Event::ThinkingDelta(delta) => Said::Thinking(delta.thinking.clone()),
        Event::Delegation(progress) => Said::Delegation {
            agent: sentences::agent(progress.agent),
            task: progress.task.clone(),
            state: progress.state.clone(),
        },
        Event::Tool(progress) => Said::Tool {
            agent: sentences::agent(progress.agent),
            tool: progress.tool.clone(),
            state: progress.state.clone(),
            ms: progress.duration_ms,
        },
        Event::Tainted(tainted) => Said::Tainted { source: tainted.source.clone(), withheld: tainted.withheld.clone() },
        Event::Reply(reply) => Said::Answered { entry: reply.entry_id.clone(), text: reply.content.clone() },
        Event::Error(error) if error.for_users => Said::Failed { sentence: error.message.clone(), internal: None },
        Event::Error(error) => {
            Said::Failed { sentence: sentences::INTERNAL.to_string(), internal: Some(error.message.clone()) }
        }
        Event::Approval(request) => Said::Approval(Box::new(request.clone())),
        Event::ApprovalSettled(settled) => Said::Settled(settled.clone()),
        Event::Message(message) => Said::Sent(message.clone()),
        Event::Notice(notice) => Said::Notice(notice.clone()),
        Event::Moved(moved) => Said::Moved { leaf: moved.leaf_entry_id.clone(), text: moved.text.clone() },
    })
}

/// What taking one more event did to a [`Turn`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing of the turn's answer changed.
    Nothing,
    /// Its answer or status changed: show it again.
    Changed,
    /// It ended: answered, or with what went wrong.
    Ended(Option<Trouble>),
}

/// A turn being followed: the answer being written, the model's thinking, and what the turn
/// paused after reading from outside.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Turn {
    pub session: String,
    pub id: String,
    pub writing: Writing,
    pub thinking: String,
    /// Where the turn read from outside, and what it may no longer do.
    pub tainted: Option<(String, Vec<String>)>,
}

impl Turn {
    pub fn new(session: &str, id: &str) -> Turn {
        Turn { session: session.to_string(), id: id.to_string(), ..Turn::default() }
    }

    /// Whether `event` is of this turn.
    pub fn owns(&self, event: &v1::OrchestratorEvent) -> bool {
        event.turn_id == self.id
    }

    /// Takes what one of the turn's own events said.
    pub fn take(&mut self, said: &Said) -> Step {
        let writing = &mut self.writing;
        match said {
            Said::Words(text) => writing.text.push_str(text),
            // Once the words come, they are what is shown.
            Said::Phase { said, .. } if writing.text.is_empty() => writing.phase = said.clone(),
            Said::Thinking(text) => self.thinking.push_str(text),
            Said::Delegation { agent, state, .. } => writing.status = format!("{agent} {state}"),
            Said::Tool { tool, state, ms, .. } => writing.status = format!("{tool} {state} ({ms} ms)"),
            Said::Tainted { source, withheld } => self.tainted = Some((source.clone(), withheld.clone())),
            Said::Answered { text, .. } => {
                writing.text = text.clone();
                return Step::Ended(None);
            }
            Said::Failed { sentence, internal } => {
                if let Some(detail) = internal {
                    tracing::warn!(message = %detail, "the turn failed");
                }
                return Step::Ended(Some(Trouble::Failed(sentence.clone())));
            }
            _ => return Step::Nothing,
        }
        Step::Changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use v1::orchestrator_event::Event;

    fn event(turn: &str, event: Event) -> v1::OrchestratorEvent {
        v1::OrchestratorEvent {
            session_id: "s-1".into(),
            turn_id: turn.into(),
            event: Some(event),
            ..Default::default()
        }
    }

    #[test]
    fn a_turn_is_written_from_its_phase_words_and_status_until_its_answer() {
        let mut turn = Turn::new("s-1", "t-1");
        let phase = v1::TurnPhase { agent: v1::AgentRole::Assistant as i32, phase: "thinking".into() };
        let steps: Vec<Step> = [
            Event::Phase(phase.clone()),
            Event::TextDelta(v1::TextDelta { index: 0, text: "Hel".into() }),
            Event::Phase(phase),
            Event::TextDelta(v1::TextDelta { index: 0, text: "lo".into() }),
            Event::Tool(v1::ToolProgress {
                agent: v1::AgentRole::Coder as i32,
                tool: "exec".into(),
                state: "running".into(),
                duration_ms: 3,
            }),
        ]
        .into_iter()
        .map(|kind| turn.take(&said(&event("t-1", kind)).expect("said")))
        .collect();
        assert_eq!(steps, [Step::Changed, Step::Changed, Step::Nothing, Step::Changed, Step::Changed]);
        assert_eq!((turn.writing.text.as_str(), turn.writing.status.as_str()), ("Hello", "exec running (3 ms)"));
        assert!(!turn.writing.phase.is_empty(), "the phase before the words stays what it was");
        let answered =
            said(&event("t-1", Event::Reply(v1::ReplyComplete { entry_id: "e".into(), content: "Hi!".into() })));
        assert_eq!(turn.take(&answered.expect("said")), Step::Ended(None));
        assert_eq!(turn.writing.text, "Hi!");
        assert!(turn.owns(&event("t-1", Event::TextDelta(v1::TextDelta::default()))));
        assert!(!turn.owns(&event("t-2", Event::TextDelta(v1::TextDelta::default()))));
    }

    #[test]
    fn a_failure_inside_is_the_plain_sentence_and_one_about_the_request_its_own() {
        let inside = v1::TurnError { message: "/var/lib/baaaht/x: disk full".into(), for_users: false };
        let Some(Said::Failed { sentence, internal }) = said(&event("t", Event::Error(inside))) else {
            panic!("a failure")
        };
        assert_eq!(
            (sentence.as_str(), internal.as_deref()),
            (sentences::INTERNAL, Some("/var/lib/baaaht/x: disk full"))
        );
        let told = v1::TurnError { message: "Your daily budget is used up.".into(), for_users: true };
        let failed = said(&event("t", Event::Error(told))).expect("said");
        assert_eq!(
            Turn::default().take(&failed),
            Step::Ended(Some(Trouble::Failed("Your daily budget is used up.".into())))
        );
        assert_eq!(said(&v1::OrchestratorEvent::default()), None);
    }
}
