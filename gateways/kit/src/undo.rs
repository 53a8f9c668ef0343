//! `/undo`, `/undo N` and `/redo` from a chat: the daemon's plan is shown first (the files put
//! back, with a short diff summary, what is left as it is and why, what cannot be taken back),
//! and done when the person sends `/undo yes` (`/undo N yes`, `/redo yes`) while the
//! conversation is still as shown.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use baaaht_proto::v1;

use baaaht_proto::client::Client;

use crate::daemon::Person;
use crate::sentences::for_users;

/// The most turns one undo takes back.
pub const MOST_TURNS: u32 = 20;
/// How long a plan shown waits for its `yes`.
const SHOWN_FOR: Duration = Duration::from_secs(600);

/// What a chat message asks of undo.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Command {
    pub turns: u32,
    pub redo: bool,
    /// `yes`: do what was shown.
    pub confirmed: bool,
}

/// `/undo`, `/undo N`, `/redo`, each with `yes` after it to confirm (`/undo@bot` too); none for
/// anything else.
pub fn command(text: &str) -> Option<Command> {
    let mut words = text.split_whitespace();
    let first = words.next()?;
    let first = first.split('@').next().unwrap_or(first).to_ascii_lowercase();
    let redo = match first.as_str() {
        "/undo" => false,
        "/redo" => true,
        _ => return None,
    };
    let mut command = Command { turns: 1, redo, confirmed: false };
    let rest: Vec<String> = words.map(str::to_ascii_lowercase).collect();
    let mut rest = rest.iter().map(String::as_str).peekable();
    if let Some(number) = rest.peek().and_then(|word| word.parse::<u32>().ok()) {
        if redo || !(1..=MOST_TURNS).contains(&number) {
            return None;
        }
        command.turns = number;
        rest.next();
    }
    match (rest.next(), rest.next()) {
        (None, _) => Some(command),
        (Some("yes"), None) => Some(Command { confirmed: true, ..command }),
        _ => None,
    }
}

/// A plan shown: the command, the plan's `from_entry_id` and `digest`, and when.
type ShownPlan = (Command, (String, String), Instant);

/// The plans shown in each chat, waiting for their `yes`.
#[derive(Debug, Default)]
pub struct Shown {
    /// Per chat and person.
    plans: Mutex<HashMap<String, ShownPlan>>,
}

impl Shown {
    fn take(&self, key: &str, asked: Command) -> Option<(String, String)> {
        let mut plans = self.plans.lock().unwrap_or_else(PoisonError::into_inner);
        plans.retain(|_, (_, _, at)| at.elapsed() < SHOWN_FOR);
        let (shown, plan, _) = plans.remove(key)?;
        (shown.turns == asked.turns && shown.redo == asked.redo).then_some(plan)
    }

    fn keep(&self, key: String, command: Command, plan: &v1::UndoPlan) {
        let mut plans = self.plans.lock().unwrap_or_else(PoisonError::into_inner);
        plans.insert(key, (command, (plan.from_entry_id.clone(), plan.digest.clone()), Instant::now()));
    }
}

/// How to confirm `command`.
fn confirm_with(command: Command) -> String {
    match (command.redo, command.turns) {
        (true, _) => "/redo yes".into(),
        (false, 1) => "/undo yes".into(),
        (false, turns) => format!("/undo {turns} yes"),
    }
}

/// The request `command` makes in `session_id` (empty: `context`'s active conversation): it
/// does the undo when `command` confirms the plan last shown to `key`, else asks for the plan.
pub fn request(
    shown: &Shown,
    key: &str,
    command: Command,
    session_id: &str,
    context: Option<v1::ContextRef>,
) -> v1::UndoRequest {
    let expect = match command.confirmed {
        true => shown.take(key, command),
        false => None,
    };
    let apply = expect.is_some();
    let (expect_leaf_entry_id, expect_digest) = expect.unwrap_or_default();
    v1::UndoRequest {
        session_id: session_id.to_string(),
        turns: command.turns,
        redo: command.redo,
        apply,
        expect_leaf_entry_id,
        context,
        expect_digest,
    }
}

/// What to say of the daemon's `plan` for `command`: what was done, or the plan and how to
/// confirm it (kept for `key`'s `yes`).
pub fn reply(shown: &Shown, key: String, command: Command, plan: &v1::UndoPlan) -> String {
    if plan.applied {
        return plan.text.clone();
    }
    shown.keep(key, command, plan);
    let again = if command.confirmed { "It was not shown here yet, or the conversation moved on: " } else { "" };
    format!("{}\n\n{again}Send {} to do it.", plan.text, confirm_with(command))
}

/// Answers `command` of `person` in the conversation (`session_id`, or `context`'s active one)
/// of the chat `chat`: the sentence to say.
pub async fn answer(
    daemon: &Client,
    shown: &Shown,
    person: &Person,
    place: (&str, v1::ContextRef, &str),
    command: Command,
) -> String {
    let (chat, context, session_id) = place;
    let key = format!("{chat}\u{0}{}", person.identity);
    let request = request(shown, &key, command, session_id, Some(context));
    let mut daemon = daemon.clone();
    match daemon.sessions.undo(person.request(request)).await {
        Ok(plan) => reply(shown, key, command, &plan.into_inner()),
        Err(status) => format!("⚠️ {}", for_users(&status)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undo_and_redo_are_read_with_their_count_and_confirmation() {
        let plain = Command { turns: 1, redo: false, confirmed: false };
        assert_eq!(command("/undo"), Some(plain));
        assert_eq!(command("/UNDO@family_bot"), Some(plain));
        assert_eq!(command("/undo 3"), Some(Command { turns: 3, ..plain }));
        assert_eq!(command("/undo 3 yes"), Some(Command { turns: 3, confirmed: true, ..plain }));
        assert_eq!(command("/undo yes"), Some(Command { confirmed: true, ..plain }));
        assert_eq!(command("/redo"), Some(Command { redo: true, ..plain }));
        assert_eq!(command("/redo yes"), Some(Command { redo: true, confirmed: true, ..plain }));
        for not in ["/undo 0", "/undo 21", "/undo the last thing", "/redo 2", "undo", "/undone", "/undo yes please"] {
            assert_eq!(command(not), None, "{not}");
        }
        assert_eq!(confirm_with(Command { turns: 2, ..plain }), "/undo 2 yes");
    }

    #[test]
    fn a_yes_confirms_only_the_plan_shown_in_that_chat() {
        let shown = Shown::default();
        let plain = Command { turns: 1, redo: false, confirmed: false };
        let plan = v1::UndoPlan { from_entry_id: "e-1".into(), digest: "d1".into(), ..Default::default() };
        shown.keep("chat\u{0}ada".into(), plain, &plan);
        assert_eq!(shown.take("chat\u{0}bob", Command { confirmed: true, ..plain }), None);
        assert_eq!(shown.take("chat\u{0}ada", Command { turns: 2, confirmed: true, ..plain }), None, "another count");
        shown.keep("chat\u{0}ada".into(), plain, &plan);
        let confirmed = Command { confirmed: true, ..plain };
        let request = request(&shown, "chat\u{0}ada", confirmed, "s1", None);
        assert!(request.apply);
        assert_eq!((request.expect_leaf_entry_id.as_str(), request.expect_digest.as_str()), ("e-1", "d1"));
        assert_eq!(shown.take("chat\u{0}ada", confirmed), None, "once");
    }
}
