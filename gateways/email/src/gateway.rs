//! The gateway: the mailbox watched by IMAP IDLE, each new mail from an allowed sender whose
//! sending is authenticated (`auth`) a turn in the conversation of its thread (a new thread, a
//! new conversation; a thread is its sender's, so another's mail naming it starts its own), the
//! answer a reply in the thread sent by SMTP. A mail is marked read when it is taken; one taken
//! but not answered when the gateway stopped gets a sentence saying so when it starts again (or,
//! when no answer can be written for it, is set aside with a line in the log). Mail from anyone
//! else, unauthenticated mail (unless `--unauthenticated isolate` answers it in a conversation
//! of its own, with no one's context), automatic mail, and a sender writing faster than a person
//! does (an auto-responder that does not say so) is left unread and logged. An approval request
//! (a connection to allow, a skill's review to install or decline) is a mail the person answers
//! with one word.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use baaaht_gateway_kit::backoff::Backoff;
use baaaht_gateway_kit::daemon::{context_of, File, Person, Place};
use baaaht_gateway_kit::egress::Egress;
use baaaht_gateway_kit::follow::{Delivery, Follower};
use baaaht_gateway_kit::health::Health;
use baaaht_gateway_kit::seen::Seen;
use baaaht_gateway_kit::sentences::{self, for_users};
use baaaht_gateway_kit::turn::{self, Asked, Surface, Trouble, TurnError, Writing};
use baaaht_proto::client::Client;
use baaaht_proto::v1;
use futures_util::StreamExt as _;

use crate::allow::Allowed;
use crate::auth::{Checks, Verdict};
use crate::mail::{self, Incoming};
use crate::server::{Server, Trust};
use crate::threads::{Pending, Threads};
use crate::wire::{self, Session};

/// How long one IDLE lasts before the gateway looks again (servers drop it after 30 minutes;
/// a look every few minutes also takes a mail whose notice was lost).
const IDLE_FOR: Duration = Duration::from_secs(4 * 60);

/// What the gateway is told to do.
#[derive(Debug, Clone)]
pub struct Options {
    /// The assistant's address (answers come from it) and the name shown with it.
    pub address: String,
    pub name: String,
    /// The mailbox's sign-in (its address unless told) and password.
    pub login: String,
    pub password: String,
    pub imap: Server,
    pub smtp: Server,
    pub mailbox: String,
    pub allowed: Allowed,
    pub max_file_bytes: u64,
    /// How senders are authenticated.
    pub checks: Arc<Checks>,
    /// What becomes of a mail from an allowed address that is not authenticated.
    pub unauthenticated: Unauthenticated,
}

/// What becomes of an allowed sender's mail that is not authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unauthenticated {
    /// Left unread and logged (the default).
    Ignore,
    /// Answered as an unknown sender: a person of its own (`email:ADDRESS/unverified`, which no
    /// address is: a domain has no `/`), with no one's context, the answer not quoting it.
    Isolate,
}

impl Unauthenticated {
    pub fn parse(text: &str) -> Result<Unauthenticated, String> {
        match text {
            "ignore" => Ok(Unauthenticated::Ignore),
            "isolate" => Ok(Unauthenticated::Isolate),
            other => Err(format!(
                "--unauthenticated `{other}`: give ignore (unauthenticated mail is left unread) or isolate (it is \
                 answered as from an unknown sender, with no one's context)"
            )),
        }
    }
}

/// What became of a mail looked at.
enum Taken {
    /// Taken: marked read.
    Yes,
    /// Left unread for good (not looked at again while the gateway runs).
    No,
    /// Left unread for now: looked at again after a while.
    Later,
}

/// The most mails one sender's are taken in a minute, and in an hour: a person writes fewer, an
/// auto-responder that does not say it is one writes more.
const PER_MINUTE: usize = 5;
const PER_HOUR: usize = 30;
/// How long a mail left for later waits to be looked at again.
const LATER: Duration = Duration::from_secs(60);

/// What the gateway knows for its whole life.
pub struct Gateway {
    daemon: Client,
    egress: Egress,
    trust: Trust,
    options: Options,
    /// The senders served, followed for what comes between turns.
    follower: Arc<Follower>,
    threads: Mutex<Threads>,
    /// Mails left unread (not allowed, automatic, forged, unreadable), by UID: looked at once.
    ignored: Mutex<HashSet<u32>>,
    /// Approval requests mailed, by the request mail's Message-ID: the request, as kept for
    /// the reply to it.
    asked: Mutex<HashMap<String, Asked>>,
    /// The requests whose settlement was told (once, however many turns waited for it).
    settled: Mutex<Seen>,
    /// Mails left for later, by UID: when they may be looked at again.
    later: Mutex<HashMap<u32, std::time::Instant>>,
    /// When each sender's recent mails were taken.
    recent: Mutex<HashMap<String, std::collections::VecDeque<std::time::Instant>>>,
}

impl Gateway {
    pub fn new(
        daemon: Client,
        egress: Egress,
        trust: Trust,
        options: Options,
        threads: Threads,
        follower: Arc<Follower>,
    ) -> Gateway {
        Gateway {
            daemon,
            egress,
            trust,
            options,
            follower,
            threads: Mutex::new(threads),
            ignored: Mutex::default(),
            asked: Mutex::default(),
            settled: Mutex::new(Seen::new(Duration::from_secs(3600), 256)),
            later: Mutex::default(),
            recent: Mutex::default(),
        }
    }

    /// Who `mail` is from, as the daemon is told: its sender, or, when the sender is not
    /// authenticated (and such mail is answered), an unknown person of its own.
    fn person(&self, mail: &Incoming) -> Person {
        match mail.verified {
            true => Person { identity: format!("email:{}", mail.from), name: mail.name.clone() },
            false => Person {
                identity: format!("email:{}/unverified", mail.from),
                name: Some(format!("{} (unverified)", mail.name.as_deref().unwrap_or(&mail.from))),
            },
        }
    }

    fn domain(&self) -> &str {
        self.options.address.rsplit_once('@').map(|(_, domain)| domain).unwrap_or("localhost")
    }

    /// Signs in and watches the mailbox until the process ends, reconnecting with backoff.
    pub async fn run(self: Arc<Self>, health: Arc<Health>) {
        self.clone().tell_unanswered().await;
        let mut backoff = Backoff::default();
        loop {
            let options = &self.options;
            let signed_in = wire::imap(
                &self.egress,
                &self.trust,
                &options.imap,
                &options.login,
                &options.password,
                &options.mailbox,
            )
            .await;
            let error = match signed_in {
                Ok(session) => {
                    health.up();
                    backoff.reset();
                    tracing::info!(mailbox = %options.mailbox, "watching the mailbox");
                    self.clone().watch(session).await
                }
                Err(error) => error,
            };
            let wait = backoff.next_wait();
            tracing::warn!(%error, retry_in_ms = wait.as_millis() as u64, "the mailbox is out of reach");
            health.down(&error);
            tokio::time::sleep(wait).await;
        }
    }

    /// Takes the new mail, then waits in IDLE for more, until the connection fails (why).
    async fn watch(self: Arc<Self>, mut session: Session) -> String {
        loop {
            if let Err(error) = self.clone().take_new(&mut session).await {
                return error;
            }
            // Mail that arrived while the last was taken was announced then, between commands:
            // IDLE would not announce it again, so it is taken before waiting.
            let mut arrived = false;
            while let Ok(said) = session.unsolicited_responses.try_recv() {
                use async_imap::types::UnsolicitedResponse;
                arrived |= matches!(said, UnsolicitedResponse::Exists(_) | UnsolicitedResponse::Recent(_));
            }
            if arrived {
                continue;
            }
            let mut idle = session.idle();
            if let Err(error) = idle.init().await {
                return format!("IMAP IDLE: {error}");
            }
            let (waiting, _stop) = idle.wait_with_timeout(IDLE_FOR);
            if let Err(error) = waiting.await {
                return format!("IMAP IDLE: {error}");
            }
            session = match idle.done().await {
                Ok(session) => session,
                Err(error) => return format!("IMAP IDLE: {error}"),
            };
        }
    }

    /// Every unread mail not looked at yet: taken (marked read, its turn started) or left.
    async fn take_new(self: Arc<Self>, session: &mut Session) -> Result<(), String> {
        let unread = session.uid_search("UNSEEN").await.map_err(|error| format!("IMAP SEARCH: {error}"))?;
        let mut uids: Vec<u32> = {
            let ignored = self.ignored.lock().unwrap_or_else(PoisonError::into_inner);
            let later = self.later.lock().unwrap_or_else(PoisonError::into_inner);
            let now = std::time::Instant::now();
            unread
                .into_iter()
                .filter(|uid| !ignored.contains(uid) && later.get(uid).is_none_or(|at| *at <= now))
                .collect()
        };
        uids.sort_unstable();
        for uid in uids {
            let raw = {
                let mut fetched = session
                    .uid_fetch(uid.to_string(), "BODY.PEEK[]")
                    .await
                    .map_err(|error| format!("IMAP FETCH: {error}"))?;
                let mut raw = None;
                while let Some(fetch) = fetched.next().await {
                    let fetch = fetch.map_err(|error| format!("IMAP FETCH: {error}"))?;
                    if let Some(body) = fetch.body() {
                        raw = Some(body.to_vec());
                    }
                }
                raw
            };
            let Some(raw) = raw else { continue };
            let taken = self.clone().arrived(uid, &raw).await;
            if matches!(taken, Taken::Yes | Taken::No) {
                self.later.lock().unwrap_or_else(PoisonError::into_inner).remove(&uid);
            }
            if let Taken::Yes = taken {
                let mut stored = session
                    .uid_store(uid.to_string(), "+FLAGS (\\Seen)")
                    .await
                    .map_err(|error| format!("IMAP STORE: {error}"))?;
                while let Some(done) = stored.next().await {
                    done.map_err(|error| format!("IMAP STORE: {error}"))?;
                }
            } else if let Taken::No = taken {
                self.ignored.lock().unwrap_or_else(PoisonError::into_inner).insert(uid);
            } else {
                let again = std::time::Instant::now() + LATER;
                self.later.lock().unwrap_or_else(PoisonError::into_inner).insert(uid, again);
            }
        }
        Ok(())
    }

    /// Whether `sender` may have one more mail taken now (a person writes fewer than
    /// [`PER_MINUTE`] a minute and [`PER_HOUR`] an hour); noted when it may.
    fn within_pace(&self, sender: &str) -> bool {
        let now = std::time::Instant::now();
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        if recent.len() > 1024 {
            recent
                .retain(|_, times| times.back().is_some_and(|at| now.duration_since(*at) < Duration::from_secs(3600)));
        }
        let times = recent.entry(sender.to_string()).or_default();
        while times.front().is_some_and(|at| now.duration_since(*at) >= Duration::from_secs(3600)) {
            times.pop_front();
        }
        let last_minute = times.iter().filter(|at| now.duration_since(**at) < Duration::from_secs(60)).count();
        if last_minute >= PER_MINUTE || times.len() >= PER_HOUR {
            return false;
        }
        times.push_back(now);
        true
    }

    /// A new mail: whether it was taken (its turn started, or an approval answered).
    async fn arrived(self: Arc<Self>, uid: u32, raw: &[u8]) -> Taken {
        let mut mail = match mail::read(raw, uid, self.options.max_file_bytes) {
            Ok(mail) => mail,
            Err(why) => {
                tracing::warn!(uid, why, "a mail left unread: it cannot be read");
                return Taken::No;
            }
        };
        let sender = mail.from.clone();
        if sender == self.options.address {
            tracing::info!(uid, "a mail from the assistant's own address left unread");
            return Taken::No;
        }
        if !self.options.allowed.allows(&sender) {
            tracing::warn!(uid, sender, subject = %mail.subject, "a mail from a sender not allowed left unread");
            return Taken::No;
        }
        if mail.automatic {
            tracing::info!(uid, sender, subject = %mail.subject, "an automatic mail left unread");
            return Taken::No;
        }
        match self.options.checks.check(raw, &sender, &mail.results, mail.return_path.as_deref()).await {
            Verdict::Authenticated(how) => {
                tracing::info!(uid, sender, %how, "the sender is authenticated");
                mail.verified = true;
            }
            Verdict::Unsure(why) => {
                tracing::warn!(
                    uid,
                    sender,
                    why,
                    "a mail left unread for now: whether its sender sent it is not known yet"
                );
                return Taken::Later;
            }
            Verdict::Unauthenticated(why) if self.options.unauthenticated == Unauthenticated::Ignore => {
                tracing::warn!(
                    uid,
                    sender,
                    why,
                    "a mail left unread: nothing shows its sender sent it (its From is what anyone may write)"
                );
                return Taken::No;
            }
            Verdict::Unauthenticated(why) => {
                tracing::warn!(
                    uid,
                    sender,
                    why,
                    "an unauthenticated mail answered as from an unknown sender, with no one's context"
                );
            }
        }
        let identity = self.person(&mail).identity;
        let (pending, seen) = {
            let threads = self.threads.lock().unwrap_or_else(PoisonError::into_inner);
            (threads.is_pending(&mail.id), threads.taken_before(&mail.id, &identity))
        };
        if pending {
            return Taken::Yes;
        }
        if seen {
            tracing::info!(uid, sender, "a mail seen before is dropped");
            return Taken::Yes;
        }
        // Paced by who it is from: a stranger writing as Alice spends none of Alice's pace.
        if !self.within_pace(&identity) {
            tracing::warn!(
                uid,
                sender,
                "a mail left unread for now: its sender writes faster than {PER_MINUTE} a minute or {PER_HOUR} an hour \
                 (an auto-responder that does not say it is one?)"
            );
            return Taken::Later;
        }
        let approval = mail
            .answers
            .iter()
            .find_map(|id| self.asked.lock().unwrap_or_else(PoisonError::into_inner).get(id).cloned());
        if let Some(approval) = approval.filter(|_| mail.verified) {
            tokio::spawn(async move { self.approval_answered(&mail, approval).await });
            return Taken::Yes;
        }
        let pending = Pending { raw: String::from_utf8_lossy(raw).into_owned(), uid, verified: mail.verified };
        if let Err(error) = self.threads.lock().unwrap_or_else(PoisonError::into_inner).take(&mail.id, pending) {
            tracing::error!(%error, "a mail left unread: the gateway cannot keep its state");
            return Taken::No;
        }
        tracing::info!(uid, sender, "a mail taken");
        tokio::spawn(async move { self.answer(mail).await });
        Taken::Yes
    }

    /// The turn of `mail`, in the conversation of its thread; its answer a reply.
    async fn answer(&self, mail: Incoming) {
        let ran = match self.message_of(&mail).await {
            Ok(message) => {
                let answering = Answering { gateway: self, mail: &mail, sent: Mutex::default() };
                turn::run(&self.daemon, &self.follower, message, &answering).await
            }
            Err(status) => Err(TurnError::Daemon(for_users(&status))),
        };
        if let Err(error) = ran {
            tracing::warn!(%error, "a turn from email failed");
            let sentence = match error {
                TurnError::Daemon(sentence) => sentence,
                TurnError::Channel(_) => "The answer could not be sent; ask again.".into(),
            };
            if let Err(error) = self.reply(&mail, &format!("⚠️ {sentence}"), &[]).await {
                tracing::warn!(%error, "cannot tell the sender what went wrong");
            }
        }
        if let Err(error) = self.threads.lock().unwrap_or_else(PoisonError::into_inner).done(&mail.id) {
            tracing::warn!(%error, "cannot note a mail as answered");
        }
    }

    /// The turn's message, in the session of the mail's thread (a new one for a new thread).
    async fn message_of(&self, mail: &Incoming) -> Result<turn::Message, tonic::Status> {
        let person = self.person(mail);
        // A thread is its sender's: another's mail naming its ids starts a conversation of its own.
        let known =
            self.threads.lock().unwrap_or_else(PoisonError::into_inner).session_of(&mail.answers, &person.identity);
        let session_id = match known {
            Some(session) => session,
            None => {
                let context = context_of(&self.daemon, &person, &Place::Own).await?;
                let title = if mail.subject.is_empty() { "Mail".to_string() } else { mail.subject.clone() };
                let request = v1::NewSessionRequest { context: Some(context), title };
                let mut daemon = self.daemon.clone();
                daemon.sessions.new_session(person.request(request)).await?.into_inner().id
            }
        };
        let ids: Vec<String> = std::iter::once(mail.id.clone()).chain(mail.answers.iter().cloned()).collect();
        let remembered =
            self.threads.lock().unwrap_or_else(PoisonError::into_inner).remember(&ids, &session_id, &person.identity);
        if let Err(error) = remembered {
            tracing::warn!(%error, "the thread's conversation is not kept; a reply may start a new one");
        }
        // A reply in the thread whose subject (or first line, above what it quotes) is `/undo`
        // (`/undo 2 yes`, `/redo`) asks for that.
        let first_line = mail.text.lines().map(str::trim).find(|line| !line.is_empty());
        let first_line = first_line.filter(|line| baaaht_gateway_kit::undo::command(line).is_some());
        let text = match undo_subject(&mail.subject).or(first_line) {
            Some(command) => command.to_string(),
            None if mail.text.is_empty() && mail.files.is_empty() => mail.subject.clone(),
            None => mail.text.clone(),
        };
        Ok(turn::Message {
            chat: mail.from.clone(),
            person,
            place: Place::Own,
            text,
            files: mail.files.clone(),
            channel: v1::ChannelType::Email,
            session_id,
        })
    }

    /// The reply to `mail` saying `text` with `files`, and its Message-ID; why none can be
    /// written (never a panic: whatever the mail said, it is set aside).
    fn written_reply(&self, mail: &Incoming, text: &str, files: &[File]) -> Result<(lettre::Message, String), String> {
        let options = &self.options;
        let id = mail::new_id(self.domain());
        // An answer to a sender not authenticated does not quote them: the household's address
        // does not carry a stranger's words to whoever they named.
        let quoted = mail.verified;
        let writing = std::panic::AssertUnwindSafe(|| {
            mail::reply(&options.address, &options.name, mail, text, files, &id, quoted)
        });
        let message = std::panic::catch_unwind(writing)
            .map_err(|_panicked| "the answer could not be written (the mail library failed on it)".to_string())??;
        Ok((message, id))
    }

    /// Sends `text` as a reply to `mail` in its thread; the reply's Message-ID.
    async fn reply(&self, mail: &Incoming, text: &str, files: &[File]) -> Result<String, String> {
        let options = &self.options;
        let (message, id) = self.written_reply(mail, text, files)?;
        wire::send(&self.egress, &self.trust, &options.smtp, &options.login, &options.password, &message).await?;
        let identity = self.person(mail).identity;
        let mut threads = self.threads.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(session) = threads.session_of(std::slice::from_ref(&mail.id), &identity) {
            if let Err(error) = threads.remember(std::slice::from_ref(&id), &session, &identity) {
                tracing::warn!(%error, "the reply's id is not kept; an answer to it may start a new conversation");
            }
        }
        drop(threads);
        tracing::info!(to = %mail.from, "a reply sent");
        Ok(id)
    }

    /// Mails what comes between turns (a scheduled task's result, a later message) to its
    /// sender until the follower ends; a reply to that mail goes on in its conversation.
    pub async fn deliver(self: Arc<Self>, mut deliveries: tokio::sync::mpsc::Receiver<Delivery>) {
        while let Some(delivery) = deliveries.recv().await {
            let subject = delivery.title.clone().filter(|title| !title.trim().is_empty()).unwrap_or_else(|| {
                let first = delivery.text.lines().find(|line| !line.trim().is_empty()).unwrap_or("A message");
                let first: String = first.trim().chars().take(70).collect();
                format!("From your assistant: {first}")
            });
            if let Err(error) = self.mail(&delivery, &subject).await {
                tracing::warn!(%error, "what came between turns could not be mailed");
            }
        }
    }

    /// Sends `delivery` as a new mail titled `subject`.
    async fn mail(&self, delivery: &Delivery, subject: &str) -> Result<(), String> {
        let options = &self.options;
        let id = mail::new_id(self.domain());
        let to = (delivery.chat.as_str(), None);
        let message =
            mail::new_mail(&options.address, &options.name, to, subject, &delivery.text, &delivery.files, &id)?;
        wire::send(&self.egress, &self.trust, &options.smtp, &options.login, &options.password, &message).await?;
        if !delivery.session.is_empty() {
            let mut threads = self.threads.lock().unwrap_or_else(PoisonError::into_inner);
            let owner = format!("email:{}", delivery.chat);
            if let Err(error) = threads.remember(std::slice::from_ref(&id), &delivery.session, &owner) {
                tracing::warn!(%error, "the mail's id is not kept; an answer to it may start a new conversation");
            }
        }
        tracing::info!(to = %delivery.chat, "a mail sent between turns");
        Ok(())
    }

    /// Mails taken before the gateway last stopped whose answers never went out: their senders
    /// are told (a mail no answer can be written for is set aside, said in the log).
    async fn tell_unanswered(self: Arc<Self>) {
        let unanswered = self.threads.lock().unwrap_or_else(PoisonError::into_inner).unanswered();
        for (id, pending) in unanswered {
            match mail::read(pending.raw.as_bytes(), pending.uid, self.options.max_file_bytes) {
                Ok(mut mail) => {
                    mail.verified = pending.verified;
                    let sentence = "⚠️ The assistant was restarted while answering this, so no answer was sent. \
                                    What it wrote, if anything, is in your conversation in the other baaaht apps; \
                                    reply to this mail to ask again.";
                    match self.written_reply(&mail, sentence, &[]) {
                        Err(why) => {
                            tracing::warn!(
                                why,
                                uid = pending.uid,
                                "a mail taken before the restart is set aside: no answer can be written for it"
                            );
                        }
                        Ok(_) => {
                            if let Err(error) = self.reply(&mail, sentence, &[]).await {
                                tracing::warn!(%error, "cannot tell a sender their mail went unanswered; told at the next start");
                                continue;
                            }
                        }
                    }
                }
                Err(why) => tracing::warn!(why, "a mail taken before the restart cannot be read again; set aside"),
            }
            if let Err(error) = self.threads.lock().unwrap_or_else(PoisonError::into_inner).done(&id) {
                tracing::warn!(%error, "cannot note a mail as answered");
            }
        }
    }

    /// Mails an approval request in the thread of `mail` (a skill's review whole).
    async fn ask_approval(&self, mail: &Incoming, request: &v1::ApprovalRequest) {
        if self.asked.lock().unwrap_or_else(PoisonError::into_inner).values().any(|asked| asked.id == request.id) {
            return;
        }
        match self.reply(mail, &approval_text(request), &[]).await {
            Ok(id) => {
                let mut asked = self.asked.lock().unwrap_or_else(PoisonError::into_inner);
                if asked.len() >= 256 {
                    asked.clear();
                }
                asked.insert(id, Asked::of(request));
            }
            Err(error) => tracing::warn!(%error, "an approval request could not be mailed"),
        }
    }

    /// `mail` answers the approval request `approval`: its first word is the decision. Taken,
    /// the request's settlement says so in the thread of the mail that asked; not, a reply says
    /// why.
    async fn approval_answered(&self, mail: &Incoming, approval: Asked) {
        let Some(told) = turn::answer_by_word(&self.daemon, &self.person(mail), &approval, &mail.text).await else {
            return;
        };
        if let Err(error) = self.reply(mail, &told, &[]).await {
            tracing::warn!(%error, "cannot say why an approval's answer was not taken");
        }
    }

    /// How a request this gateway mailed was settled, told in the thread of `mail` (the mail
    /// whose turn it held up), however and by whom it was answered.
    async fn approval_settled(&self, mail: &Incoming, settled: &v1::ApprovalSettled) {
        if !self.asked.lock().unwrap_or_else(PoisonError::into_inner).values().any(|asked| asked.id == settled.id) {
            return;
        }
        let now = std::time::Instant::now();
        if !self.settled.lock().unwrap_or_else(PoisonError::into_inner).first(&settled.id, now) {
            return;
        }
        if let Err(error) = self.reply(mail, &sentences::settled(&settled.decision, &settled.by), &[]).await {
            tracing::warn!(%error, "an approval's answer could not be told");
        }
    }
}

/// An approval request as a mail's text, with how to answer it and how long it waits: a
/// connection's in a paragraph, a skill's review or an action's arguments line by line.
/// The undo command a mail's subject is, past its `Re:`/`Fwd:` prefixes (`/undo`, `/undo 2 yes`,
/// `/redo yes`).
fn undo_subject(subject: &str) -> Option<&str> {
    let mut rest = subject.trim();
    loop {
        let lower = rest.to_ascii_lowercase();
        match ["re:", "fwd:", "fw:", "aw:", "sv:"].iter().find(|prefix| lower.starts_with(**prefix)) {
            Some(prefix) => rest = rest[prefix.len()..].trim_start(),
            None => break,
        }
    }
    baaaht_gateway_kit::undo::command(rest).map(|_| rest)
}

fn approval_text(request: &v1::ApprovalRequest) -> String {
    let expires = sentences::expires_text(request);
    if sentences::is_review(request) {
        let ending = format!("{} {expires}", sentences::answer_with(request));
        return sentences::review_text(request, &ending, usize::MAX);
    }
    format!("{}\n\n{} {expires}", sentences::approval_asked(request), sentences::ANSWER_WITH)
}

/// One turn's answer by mail: written whole when it is done (a mail cannot be edited).
struct Answering<'a> {
    gateway: &'a Gateway,
    mail: &'a Incoming,
    /// What the agents sent meanwhile (the `message` tool): it goes with the answer's mail.
    sent: Mutex<(Vec<String>, Vec<File>)>,
}

impl Surface for Answering<'_> {
    type Answer = ();

    fn update_every(&self) -> Duration {
        // Nothing is shown while the answer is written.
        Duration::from_secs(3600)
    }

    async fn open(&self) -> Result<(), String> {
        Ok(())
    }

    async fn show(&self, _answer: &mut (), _writing: &Writing) -> Result<bool, String> {
        Ok(false)
    }

    async fn close(&self, _answer: (), writing: &Writing, trouble: Option<Trouble>) -> Result<(), String> {
        let (said, files) = std::mem::take(&mut *self.sent.lock().unwrap_or_else(PoisonError::into_inner));
        let mut text = turn::whole(writing.text.trim(), trouble);
        for message in said {
            text.push_str(&format!("\n\n{}", message.trim()));
        }
        self.gateway.reply(self.mail, &text, &files).await.map(drop)
    }

    async fn message(&self, text: &str, files: Vec<File>) -> Result<(), String> {
        let mut sent = self.sent.lock().unwrap_or_else(PoisonError::into_inner);
        sent.0.push(text.to_string());
        sent.1.extend(files);
        Ok(())
    }

    async fn approval(&self, event: &v1::orchestrator_event::Event) {
        use v1::orchestrator_event::Event;
        match event {
            Event::Approval(request) => self.gateway.ask_approval(self.mail, request).await,
            Event::ApprovalSettled(settled) => self.gateway.approval_settled(self.mail, settled).await,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_subject_asks_for_an_undo_past_its_reply_prefixes() {
        assert_eq!(super::undo_subject("Re: RE: /undo"), Some("/undo"));
        assert_eq!(super::undo_subject("/undo 2 yes"), Some("/undo 2 yes"));
        assert_eq!(super::undo_subject("Fwd: /redo yes"), Some("/redo yes"));
        assert_eq!(super::undo_subject("Re: Plans for the weekend"), None);
        assert_eq!(super::undo_subject("Re: /undo everything"), None);
    }

    use super::*;

    #[test]
    fn an_approval_mail_says_how_to_answer_it_in_its_kind_words() {
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
            format!(
                "The coder's tools want to reach pypi.org:443.\n\n{} Denied in 120 s without an answer.",
                sentences::ANSWER_WITH
            )
        );
        let review = v1::SkillReview {
            name: "forecast".into(),
            installs_for: "you".into(),
            findings: vec!["scripts/x.sh:3: runs what it downloads (remote-exec): curl x | sh".into()],
            ..Default::default()
        };
        let review = v1::ApprovalRequest { expires_in_seconds: 300, skill_review: Some(review), ..request };
        let asked = approval_text(&review);
        assert!(asked.starts_with("The coder asks to install the skill forecast for you.\n\n"), "{asked}");
        assert!(asked.contains("\n⚠ The scan found:\n• scripts/x.sh:3: runs what it downloads"), "{asked}");
        assert!(
            asked.ends_with(&format!("\n\n{} Declined in 300 s if nobody answers.", sentences::REVIEW_ANSWER_WITH)),
            "{asked}"
        );
    }
}
