//! Approvals in chat (DESIGN.md §10.2): a tool's connection to a host no rule allows waits
//! while every connected channel of its context is asked (an `ApprovalRequest` event); the
//! first answer wins (once, for the session, always, or deny), and a timeout, or nobody there
//! to ask, denies. A session's approvals last as long as the daemon; `always` becomes a rule.
//! A skill an agent asks to install waits here too, as its review: answered install or decline
//! (`work::skills::asked`); and so does an acting tool called by a marked turn, answered once or
//! deny (`work::tools::acting`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::base::auth::{Context, Role};
use crate::store::events::{Event, EventBus, Kind};
use crate::store::sessions::log::{ActionReview, SkillReview};

/// An answer to an approval request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Once,
    Session,
    Always,
    Deny,
    /// A skill's review: install it.
    Install,
    /// A skill's review: do not.
    Decline,
}

impl Decision {
    pub fn named(name: &str) -> Option<Decision> {
        Some(match name {
            "once" => Decision::Once,
            "session" => Decision::Session,
            "always" => Decision::Always,
            "deny" => Decision::Deny,
            "install" => Decision::Install,
            "decline" => Decision::Decline,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Once => "once",
            Decision::Session => "session",
            Decision::Always => "always",
            Decision::Deny => "deny",
            Decision::Install => "install",
            Decision::Decline => "decline",
        }
    }

    /// This answer to a request about a subject of kind `asked`: a skill's review takes once
    /// and deny as install and decline (a plain yes or no answers either), and nothing else; a
    /// connection takes no install or decline; an action takes once or deny only (each action
    /// is asked anew).
    fn for_subject(self, asked: Asked) -> Option<Decision> {
        match (asked, self) {
            (Asked::Skill, Decision::Once | Decision::Install) => Some(Decision::Install),
            (Asked::Skill, Decision::Deny | Decision::Decline) => Some(Decision::Decline),
            (Asked::Egress, Decision::Once | Decision::Session | Decision::Always | Decision::Deny) => Some(self),
            (Asked::Action, Decision::Once | Decision::Deny) => Some(self),
            _ => None,
        }
    }
}

/// What is asked about: a connection, or a skill to install.
#[derive(Debug, Clone)]
pub enum Subject {
    /// A tool's connection to `host:port`.
    Egress { host: String, port: u16 },
    /// A skill fetched and checked, waiting for its review.
    Skill(Box<SkillReview>),
    /// An acting tool called by a turn that read content from outside; only `sender` (the
    /// user whose message the turn answers) or an admin may allow it, anyone of the context
    /// deny it: in a group, another member may be the one whose words marked the turn.
    Action { review: Box<ActionReview>, sender: Option<String> },
}

/// The kind of a [`Subject`], which decides the answers it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Asked {
    Egress,
    Skill,
    Action,
}

impl Subject {
    fn kind(&self) -> Asked {
        match self {
            Subject::Egress { .. } => Asked::Egress,
            Subject::Skill(_) => Asked::Skill,
            Subject::Action { .. } => Asked::Action,
        }
    }
}

/// What asks: whose tools, in which session, for what.
#[derive(Debug, Clone)]
pub struct Asking {
    pub context: Context,
    pub session: String,
    pub agent: Role,
    pub subject: Subject,
    pub asked_by: String,
}

/// A request waiting for its answer.
struct Pending {
    context: Context,
    /// The session whose call asks.
    session: String,
    answer: oneshot::Sender<(Decision, String)>,
    asked: std::time::Instant,
    kind: Asked,
    /// Who alone (beside an admin) may allow an action.
    sender: Option<String>,
}

/// Forgets request `.1` when its asking ends, however it ends.
struct Forget<'a>(&'a Approvals, &'a str);

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.0.state().pending.remove(self.1);
    }
}

/// Why an answer was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    #[error("no approval request {0} is waiting (it was answered, or it timed out)")]
    NotWaiting(String),
    #[error("approval request {id} is not {context}'s")]
    NotTheirs { id: String, context: Context },
    #[error("only an admin may allow a host always for a group; answer once or session")]
    AdminOnly,
    #[error("only an admin may install a skill for a group; decline it, or ask an admin to answer")]
    GroupInstallAdminOnly,
    #[error("a skill's review is answered install or decline, not {0}")]
    NotAReviewAnswer(&'static str),
    #[error("a connection's approval is answered once, session, always or deny, not {0}")]
    NotAnEgressAnswer(&'static str),
    #[error("an action is answered once or deny, not {0} (each one is asked anew)")]
    NotAnActionAnswer(&'static str),
    #[error("only the person whose message this turn answers (or an admin) may allow its action; you may deny it")]
    NotTheSender,
}

/// Why a connection was asked about and nobody allowed it: nobody could be asked, or nobody
/// answered in time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoAnswer {
    #[error("nobody can be asked during a scheduled run")]
    Unattended,
    #[error("nobody of {context} is connected to be asked")]
    NobodyConnected { context: Context },
    #[error("nobody answered within {} s", timeout.as_secs())]
    TimedOut { timeout: Duration },
    #[error("{MOST_OPEN} questions of this conversation wait for an answer already")]
    TooMany,
}

/// The most questions about hosts one session has open at once: a command or a page asking
/// for host after host does not bury the person in questions.
pub const MOST_OPEN: usize = 4;

/// Every context's waiting requests, and what each session was allowed.
#[derive(Debug)]
pub struct Approvals {
    events: Arc<EventBus>,
    timeout: Duration,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    pending: HashMap<String, Pending>,
    /// (session, host, port) allowed for the session.
    granted: HashSet<(String, String, u16)>,
    /// (session, host, port) a person denied: not asked again in the session.
    denied: HashSet<(String, String, u16)>,
    /// Sessions whose runs have nobody to ask (scheduled runs, heartbeats).
    unattended: HashSet<String>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State").field("pending", &self.pending.len()).finish_non_exhaustive()
    }
}

impl Approvals {
    pub fn new(events: Arc<EventBus>, timeout: Duration) -> Approvals {
        Approvals { events, timeout, state: Mutex::default() }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks `session` as run with nobody to ask (a scheduled run) while `unattended`.
    pub fn unattended(&self, session: &str, unattended: bool) {
        let mut state = self.state();
        if unattended {
            state.unattended.insert(session.to_string());
        } else {
            state.unattended.remove(session);
        }
    }

    /// Whether `host:port` was allowed for `session` (an answer `session`).
    pub fn granted(&self, session: &str, host: &str, port: u16) -> bool {
        self.state().granted.contains(&(session.to_string(), host.to_string(), port))
    }

    /// Asks the people of `asking.context`; answers the decision and who made it, or why the
    /// connection is denied (the skill declined).
    pub async fn ask(&self, asking: &Asking) -> Result<(Decision, String), NoAnswer> {
        let key = match &asking.subject {
            Subject::Egress { host, port } => Some((asking.session.clone(), host.clone(), *port)),
            Subject::Skill(_) | Subject::Action { .. } => None,
        };
        let (id, answered) = {
            let mut state = self.state();
            if key.as_ref().is_some_and(|key| state.granted.contains(key)) {
                return Ok((Decision::Session, "an approval for this session".into()));
            }
            if key.as_ref().is_some_and(|key| state.denied.contains(key)) {
                return Ok((Decision::Deny, "an earlier answer in this conversation".into()));
            }
            let open = state.pending.values().filter(|pending| pending.session == asking.session).count();
            if key.is_some() && open >= MOST_OPEN {
                return Err(NoAnswer::TooMany);
            }
            if state.unattended.contains(&asking.session) {
                return Err(NoAnswer::Unattended);
            }
            if self.events.connected_channels(&asking.context).is_empty() {
                return Err(NoAnswer::NobodyConnected { context: asking.context.clone() });
            }
            let id = format!("a-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
            let (answer, answered) = oneshot::channel();
            let kind = asking.subject.kind();
            let sender = match &asking.subject {
                Subject::Action { sender, .. } => sender.clone(),
                _ => None,
            };
            let asked = std::time::Instant::now();
            let pending = Pending {
                context: asking.context.clone(),
                session: asking.session.clone(),
                answer,
                asked,
                kind,
                sender,
            };
            state.pending.insert(id.clone(), pending);
            (id, answered)
        };
        // Given up (the turn cancelled while it waits): nothing waits for an answer any more.
        let _forget = Forget(self, &id);
        let expires_in = u32::try_from(self.timeout.as_secs()).unwrap_or(u32::MAX);
        let (host, port, review, action) = match &asking.subject {
            Subject::Egress { host, port } => (host.clone(), *port, None, None),
            Subject::Skill(review) => (String::new(), 0, Some(review.clone()), None),
            Subject::Action { review, .. } => (String::new(), 0, None, Some(review.clone())),
        };
        let request = Kind::ApprovalRequest {
            id: id.clone(),
            host,
            port,
            agent: asking.agent,
            asked_by: asking.asked_by.clone(),
            expires_in,
            review,
            action,
        };
        self.events.publish(&asking.context, Event::of_session(&asking.session, request));
        let answer = tokio::time::timeout(self.timeout, answered).await;
        let settled = |decision: &str, by: &str| Kind::ApprovalSettled {
            id: id.clone(),
            decision: decision.into(),
            by: by.into(),
        };
        match answer {
            Ok(Ok((decision, by))) => {
                match key {
                    Some(key) if decision == Decision::Session => {
                        self.state().granted.insert(key);
                    }
                    Some(key) if decision == Decision::Deny => {
                        self.state().denied.insert(key);
                    }
                    _ => {}
                }
                self.events
                    .publish(&asking.context, Event::of_session(&asking.session, settled(decision.as_str(), &by)));
                Ok((decision, by))
            }
            _ => {
                self.state().pending.remove(&id);
                let denied = match asking.subject.kind() {
                    Asked::Skill => Decision::Decline,
                    Asked::Egress | Asked::Action => Decision::Deny,
                };
                let settled = settled(denied.as_str(), "nobody");
                self.events.publish(&asking.context, Event::of_session(&asking.session, settled));
                Err(NoAnswer::TimedOut { timeout: self.timeout })
            }
        }
    }

    /// Takes `decision` by `by` (the user `who`, when a user answers) for request `id`, when it
    /// is `context`'s (`None`: a host client, any context's); `admin`: whether `by` may write a
    /// group's rules (and install its skills, and allow anyone's action). Answers the decision
    /// taken (a review's once is install, its deny decline).
    pub fn answer(
        &self,
        id: &str,
        context: Option<&Context>,
        decision: Decision,
        (by, who): (&str, Option<&str>),
        admin: bool,
    ) -> Result<Decision, AnswerError> {
        let mut state = self.state();
        let Some(pending) = state.pending.get(id) else { return Err(AnswerError::NotWaiting(id.to_string())) };
        if let Some(context) = context.filter(|context| **context != pending.context) {
            return Err(AnswerError::NotTheirs { id: id.to_string(), context: context.clone() });
        }
        let decision = decision.for_subject(pending.kind).ok_or(match pending.kind {
            Asked::Skill => AnswerError::NotAReviewAnswer(decision.as_str()),
            Asked::Egress => AnswerError::NotAnEgressAnswer(decision.as_str()),
            Asked::Action => AnswerError::NotAnActionAnswer(decision.as_str()),
        })?;
        let group = pending.context.kind == crate::base::auth::ContextKind::Group;
        if decision == Decision::Always && group && !admin {
            return Err(AnswerError::AdminOnly);
        }
        if decision == Decision::Install && group && !admin {
            return Err(AnswerError::GroupInstallAdminOnly);
        }
        let sender = pending.sender.as_deref();
        if pending.kind == Asked::Action && decision == Decision::Once && !admin && (sender.is_none() || who != sender)
        {
            return Err(AnswerError::NotTheSender);
        }
        let pending = state.pending.remove(id).ok_or_else(|| AnswerError::NotWaiting(id.to_string()))?;
        // silent-ok: the connection (the install) may have been given up meanwhile.
        let _ = pending.answer.send((decision, by.to_string()));
        Ok(decision)
    }

    /// How many more seconds request `id` waits for an answer; none once it was answered or
    /// given up (or was asked of a daemon before this one).
    pub fn waiting_for(&self, id: &str) -> Option<u32> {
        let state = self.state();
        let left = self.timeout.checked_sub(state.pending.get(id)?.asked.elapsed())?;
        Some(u32::try_from(left.as_secs()).unwrap_or(u32::MAX).max(1))
    }

    /// Whether request `id` waits for an action's answer.
    pub fn is_action(&self, id: &str) -> bool {
        self.state().pending.get(id).is_some_and(|pending| pending.kind == Asked::Action)
    }

    /// The context whose request `id` is, while it waits.
    pub fn context_of(&self, id: &str) -> Option<Context> {
        self.state().pending.get(id).map(|pending| pending.context.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asking(session: &str) -> Asking {
        Asking {
            context: Context::user("alice"),
            session: session.into(),
            agent: Role::Coder,
            subject: Subject::Egress { host: "pypi.org".into(), port: 443 },
            asked_by: "exec: pip download x".into(),
        }
    }

    /// Alice follows her events: the request comes, the first answer wins, the second finds
    /// nothing waiting; `session` holds for the session only.
    #[tokio::test]
    async fn the_first_answer_wins_and_a_session_approval_holds_for_its_session() {
        let events = Arc::new(EventBus::default());
        let _following = events.connect(&Context::user("alice"), "tui");
        let mut seen = events.subscribe();
        let approvals = Arc::new(Approvals::new(events.clone(), Duration::from_secs(5)));
        let asked = tokio::spawn({
            let approvals = approvals.clone();
            async move { approvals.ask(&asking("s1")).await }
        });
        let (_, event) = seen.recv().await.expect("an event");
        let Kind::ApprovalRequest { id, host, port, .. } = event.kind else { panic!("{event:?}") };
        assert_eq!((host.as_str(), port), ("pypi.org", 443));
        assert_eq!(
            approvals.answer(&id, Some(&Context::user("bob")), Decision::Once, ("bob", None), false),
            Err(AnswerError::NotTheirs { id: id.clone(), context: Context::user("bob") })
        );
        approvals.answer(&id, Some(&Context::user("alice")), Decision::Session, ("alice", None), false).expect("taken");
        assert_eq!(
            approvals.answer(&id, None, Decision::Deny, ("root", None), true),
            Err(AnswerError::NotWaiting(id.clone()))
        );
        assert_eq!(asked.await.expect("asked"), Ok((Decision::Session, "alice".to_string())));
        let (_, settled) = seen.recv().await.expect("settled");
        assert!(matches!(settled.kind, Kind::ApprovalSettled { ref decision, .. } if decision == "session"));
        // The same session is not asked again; another is.
        assert_eq!(approvals.ask(&asking("s1")).await.map(|(decision, _)| decision), Ok(Decision::Session));
        approvals.unattended("s2", true);
        let unattended = approvals.ask(&asking("s2")).await.expect_err("nobody to ask");
        assert_eq!(unattended, NoAnswer::Unattended);
        assert_eq!(unattended.to_string(), "nobody can be asked during a scheduled run");
    }

    /// A host denied is not asked about again in the session; past four open questions a
    /// session's next is refused without asking.
    #[tokio::test]
    async fn a_denied_host_is_not_asked_again_and_few_questions_wait_at_once() {
        let events = Arc::new(EventBus::default());
        let _following = events.connect(&Context::user("alice"), "tui");
        let mut seen = events.subscribe();
        let approvals = Arc::new(Approvals::new(events.clone(), Duration::from_secs(30)));
        let asked = tokio::spawn({
            let approvals = approvals.clone();
            async move { approvals.ask(&asking("s1")).await }
        });
        let (_, event) = seen.recv().await.expect("an event");
        let Kind::ApprovalRequest { id, .. } = event.kind else { panic!("{event:?}") };
        approvals.answer(&id, Some(&Context::user("alice")), Decision::Deny, ("alice", None), false).expect("taken");
        assert_eq!(asked.await.expect("asked").map(|(decision, _)| decision), Ok(Decision::Deny));
        let again = approvals.ask(&asking("s1")).await.expect("answered at once");
        assert_eq!(again, (Decision::Deny, "an earlier answer in this conversation".to_string()));
        let mut waiting = vec![];
        for n in 0..MOST_OPEN {
            let approvals = approvals.clone();
            let mut asked = asking("s1");
            asked.subject = Subject::Egress { host: format!("h{n}.example"), port: 443 };
            waiting.push(tokio::spawn(async move { approvals.ask(&asked).await }));
        }
        for _ in 0..1000 {
            if approvals.state().pending.len() == MOST_OPEN {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(approvals.state().pending.len(), MOST_OPEN);
        let mut fifth = asking("s1");
        fifth.subject = Subject::Egress { host: "h9.example".into(), port: 443 };
        assert_eq!(approvals.ask(&fifth).await, Err(NoAnswer::TooMany));
        assert_eq!(NoAnswer::TooMany.to_string(), "4 questions of this conversation wait for an answer already");
        for waiter in waiting {
            waiter.abort();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn nobody_there_or_nobody_answering_denies() {
        let events = Arc::new(EventBus::default());
        let approvals = Approvals::new(events.clone(), Duration::from_secs(120));
        let nobody = approvals.ask(&asking("s1")).await.expect_err("nobody connected");
        assert_eq!(nobody.to_string(), "nobody of user:alice is connected to be asked");
        let _following = events.connect(&Context::user("alice"), "web");
        let unanswered = approvals.ask(&asking("s1")).await.expect_err("nobody answered");
        assert_eq!(unanswered, NoAnswer::TimedOut { timeout: Duration::from_secs(120) });
        assert_eq!(unanswered.to_string(), "nobody answered within 120 s");
        assert!(approvals.state().pending.is_empty());
    }

    /// An action is answered once or deny; in a group only the turn's sender (or an admin)
    /// allows it, while any member may deny it.
    #[tokio::test]
    async fn an_action_is_allowed_by_its_sender_or_an_admin_and_denied_by_anyone() {
        let events = Arc::new(EventBus::default());
        let family = Context::group("family");
        let _following = events.connect(&family, "telegram");
        let mut seen = events.subscribe();
        let approvals = Arc::new(Approvals::new(events.clone(), Duration::from_secs(5)));
        let review = ActionReview { server: "mail".into(), tool: "send".into(), ..ActionReview::default() };
        let asking = Asking {
            context: family.clone(),
            session: "s1".into(),
            agent: Role::Worker,
            subject: Subject::Action { review: Box::new(review), sender: Some("u-alice".into()) },
            asked_by: "mcp__mail__send".into(),
        };
        for (who, admin, answer) in
            [("u-alice", false, Decision::Once), ("u-ada", true, Decision::Once), ("u-bob", false, Decision::Deny)]
        {
            let asked = tokio::spawn({
                let (approvals, asking) = (approvals.clone(), asking.clone());
                async move { approvals.ask(&asking).await }
            });
            let (_, event) = seen.recv().await.expect("an event");
            let Kind::ApprovalRequest { id, action, .. } = event.kind else { panic!("{event:?}") };
            assert_eq!(action.map(|action| action.tool), Some("send".to_string()));
            let session = approvals.answer(&id, Some(&family), Decision::Session, ("Alice", Some("u-alice")), false);
            assert_eq!(session, Err(AnswerError::NotAnActionAnswer("session")));
            let bob = approvals.answer(&id, Some(&family), Decision::Once, ("Bob", Some("u-bob")), false);
            assert_eq!(bob, Err(AnswerError::NotTheSender), "another member does not allow it");
            assert_eq!(approvals.answer(&id, Some(&family), answer, (who, Some(who)), admin), Ok(answer));
            assert_eq!(asked.await.expect("asked").map(|(decision, _)| decision), Ok(answer));
            let (_, settled) = seen.recv().await.expect("settled");
            assert!(matches!(settled.kind, Kind::ApprovalSettled { .. }));
        }
    }

    /// A skill's review takes install or decline (once and deny as those), not session or
    /// always; in a group only an admin's install installs, while any member may decline.
    #[tokio::test]
    async fn a_review_is_answered_install_or_decline_and_in_a_group_installed_by_an_admin_only() {
        let events = Arc::new(EventBus::default());
        let family = Context::group("family");
        let _following = events.connect(&family, "telegram");
        let mut seen = events.subscribe();
        let approvals = Arc::new(Approvals::new(events.clone(), Duration::from_secs(5)));
        let review = SkillReview { name: "forecast".into(), ..SkillReview::default() };
        let asking = Asking {
            context: family.clone(),
            session: "s1".into(),
            agent: Role::Worker,
            subject: Subject::Skill(Box::new(review)),
            asked_by: "install_skill https://x.example/r.git".into(),
        };
        for (answer, admin, then) in [(Decision::Install, true, "install"), (Decision::Deny, false, "decline")] {
            let asked = tokio::spawn({
                let (approvals, asking) = (approvals.clone(), asking.clone());
                async move { approvals.ask(&asking).await }
            });
            let (_, event) = seen.recv().await.expect("an event");
            let Kind::ApprovalRequest { id, host, review, .. } = event.kind else { panic!("{event:?}") };
            assert_eq!((host.as_str(), review.map(|review| review.name)), ("", Some("forecast".to_string())));
            let refused = approvals.answer(&id, Some(&family), Decision::Session, ("ada", None), true);
            assert_eq!(refused, Err(AnswerError::NotAReviewAnswer("session")));
            let member = approvals.answer(&id, Some(&family), Decision::Once, ("bob", None), false);
            assert_eq!(member, Err(AnswerError::GroupInstallAdminOnly), "a member's yes is not enough");
            assert_eq!(
                approvals.answer(&id, Some(&family), answer, ("ada", None), admin).map(Decision::as_str),
                Ok(then)
            );
            assert_eq!(asked.await.expect("asked").map(|(decision, _)| decision.as_str()), Ok(then));
            let (_, settled) = seen.recv().await.expect("settled");
            assert!(matches!(settled.kind, Kind::ApprovalSettled { ref decision, .. } if decision == then));
        }
    }
}
