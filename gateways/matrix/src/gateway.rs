//! The gateway: Matrix's sync in, the daemon's turns out. Invitations are accepted only from
//! people on the allowed homeservers; a room of exactly the bot and one person is that
//! person's own conversation (whatever its `is_direct` flag says: its creator writes it), any
//! other room the room's group's (a message there must mention the bot); what comes between
//! turns for a person goes only to a room that is still just them and the bot.
//! Each answer is one message — a reply to the one that asked — edited (`m.replace`) as it is
//! written, at most once per update interval, with a typing notice while the turn starts.
//! Encrypted rooms are read and answered encrypted; files and pictures (encrypted or not) go
//! to the session's uploads. An approval request (a connection to allow, a skill's review to
//! install or decline) is a message answered with one word.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use baaaht_gateway_kit::daemon::{File, Person, Place};
use baaaht_gateway_kit::follow::{Delivery, Follower};
use baaaht_gateway_kit::health::Health;
use baaaht_gateway_kit::seen::Seen;
use baaaht_gateway_kit::sentences;
use baaaht_gateway_kit::text::clean;
use baaaht_gateway_kit::turn::{self, Asked, Surface, Trouble, TurnError, Writing};
use baaaht_proto::client::Client as Daemon;
use baaaht_proto::v1;
use matrix_sdk::config::SyncSettings;
use matrix_sdk::room::Room;
use matrix_sdk::ruma::events::room::member::{MembershipState, StrippedRoomMemberEvent};
use matrix_sdk::ruma::events::room::message::{
    AddMentions, ForwardThread, MessageType, OriginalSyncRoomMessageEvent, Relation, ReplacementMetadata,
    RoomMessageEventContent,
};
use matrix_sdk::ruma::{OwnedEventId, OwnedUserId};
use matrix_sdk::Client;

/// How often the answer being written is edited (homeservers limit how fast a user sends).
const UPDATE_EVERY: Duration = Duration::from_millis(1500);
/// The most characters an answer shows while it is written (Matrix events are at most 64 KiB).
const LIVE_LIMIT: usize = 16_000;
/// The most bytes of one message of a finished answer (its edit says them twice, and a reply
/// quotes what it answers, in an event of at most 64 KiB).
const MESSAGE_BYTES: usize = 16_000;
/// How long a sync waits at the homeserver for something new (the long poll).
const SYNC_WAIT: Duration = Duration::from_secs(30);
/// A sync answered this fast with nothing new is followed by a pause of [`QUICK_SYNC_PAUSE`].
const QUICK_SYNC: Duration = Duration::from_millis(50);
const QUICK_SYNC_PAUSE: Duration = Duration::from_millis(200);

/// What the gateway knows for its whole life.
pub struct Gateway {
    pub daemon: Daemon,
    pub client: Client,
    /// Homeservers whose people may invite the bot and write to it.
    pub allowed_servers: Vec<String>,
    pub max_file_bytes: u64,
    /// The rooms served, followed for what comes between turns.
    pub follower: Arc<Follower>,
    seen: Mutex<Seen>,
    /// Approval requests posted, by the request message's event id: the request, as kept for
    /// the reply to it.
    asked: Mutex<HashMap<OwnedEventId, Asked>>,
    /// The requests whose settlement was shown (once, however many turns waited for it).
    settled: Mutex<Seen>,
}

impl Gateway {
    pub fn new(
        daemon: Daemon,
        client: Client,
        allowed_servers: Vec<String>,
        max_file_bytes: u64,
        follower: Arc<Follower>,
    ) -> Gateway {
        Gateway {
            daemon,
            client,
            allowed_servers,
            max_file_bytes,
            follower,
            seen: Mutex::new(Seen::new(Duration::from_secs(24 * 3600), 10_000)),
            asked: Mutex::default(),
            settled: Mutex::new(Seen::new(Duration::from_secs(3600), 256)),
        }
    }

    fn allows(&self, user: &OwnedUserId) -> bool {
        self.allowed_servers.iter().any(|server| server == user.server_name().as_str())
    }

    /// Syncs until the process ends. On a device's first start its rooms' history is not
    /// answered; a device that goes on answers what was written while it was stopped.
    pub async fn run(self: Arc<Self>, health: Arc<Health>, first: bool) {
        let mut backoff = baaaht_gateway_kit::backoff::Backoff::default();
        // The first sync of a new device only finds where the timeline is now.
        let mut skipped = !first;
        while !skipped {
            match self.client.sync_once(SyncSettings::default()).await {
                Ok(_) => skipped = true,
                Err(error) => {
                    let wait = backoff.next_wait();
                    tracing::warn!(%error, retry_in_ms = wait.as_millis() as u64, "the homeserver is out of reach");
                    health.down(&error.to_string());
                    tokio::time::sleep(wait).await;
                }
            }
        }
        // Invitations waiting from before are answered too.
        for room in self.client.invited_rooms() {
            let gateway = self.clone();
            tokio::spawn(async move { gateway.invited(room, None).await });
        }
        let gateway = self.clone();
        self.client.add_event_handler(move |event: StrippedRoomMemberEvent, room: Room| {
            let gateway = gateway.clone();
            async move {
                if event.content.membership == MembershipState::Invite
                    && gateway.client.user_id() == Some(event.state_key.as_ref())
                {
                    tokio::spawn(async move { gateway.invited(room, Some(event.sender)).await });
                }
            }
        });
        let gateway = self.clone();
        self.client.add_event_handler(move |event: OriginalSyncRoomMessageEvent, room: Room| {
            let gateway = gateway.clone();
            async move {
                tokio::spawn(async move { gateway.message(event, room).await });
            }
        });
        tracing::info!("listening to Matrix");
        // Synced here, not by matrix-sdk's own loop (`sync`, `sync_with_callback`): that one
        // waits a second after any sync that came less than a second after the one before, so
        // while people wrote every message and answer waited up to a second
        // (`baaaht-bench channels --only matrix`). The homeserver's long poll paces this one.
        let settings = SyncSettings::default().timeout(SYNC_WAIT);
        // After a failure, a sync that does not wait says at once whether the homeserver is
        // back (a long poll would leave the gateway unhealthy for its whole wait).
        let mut recovering = false;
        loop {
            let started = Instant::now();
            let asked = if recovering { settings.clone().timeout(Duration::ZERO) } else { settings.clone() };
            match self.client.sync_once(asked).await {
                Ok(response) => {
                    health.up();
                    backoff.reset();
                    // A homeserver that answers at once with nothing new (one that ignores the
                    // wait asked for) is not asked again at once.
                    let nothing = response.rooms.is_empty() && response.to_device.is_empty();
                    if nothing && !recovering && started.elapsed() < QUICK_SYNC {
                        tokio::time::sleep(QUICK_SYNC_PAUSE).await;
                    }
                    recovering = false;
                }
                Err(error) => {
                    let wait = backoff.next_wait();
                    tracing::warn!(%error, retry_in_ms = wait.as_millis() as u64, "the sync failed");
                    health.down(&error.to_string());
                    recovering = true;
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    /// An invitation: joined when it comes from an allowed homeserver, else declined.
    async fn invited(&self, room: Room, by: Option<OwnedUserId>) {
        let inviter = match by {
            Some(user) => Some(user),
            None => room
                .invite_details()
                .await
                .ok()
                .and_then(|details| details.inviter)
                .map(|member| member.user_id().to_owned()),
        };
        let allowed = inviter.as_ref().is_some_and(|user| self.allows(user));
        if !allowed {
            tracing::warn!(room = %room.room_id(), inviter = ?inviter, "an invitation from outside the allowed homeservers declined");
            if let Err(error) = room.leave().await {
                tracing::warn!(%error, "cannot decline an invitation");
            }
            return;
        }
        // A homeserver may not have the room ready the moment it invites: tried a few times.
        let mut wait = Duration::from_millis(500);
        for _ in 0..6 {
            match room.join().await {
                Ok(()) => {
                    tracing::info!(room = %room.room_id(), inviter = ?inviter, "joined a room on invitation");
                    return;
                }
                Err(error) => {
                    tracing::info!(%error, "cannot join yet");
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                }
            }
        }
        tracing::warn!(room = %room.room_id(), "could not join a room it was invited to");
    }

    /// Whether `room`'s members (joined or invited) are exactly `me` and `sender`, and no one
    /// else may join it or read it: only an invitation lets anyone in (not a public, knocking
    /// or space-restricted room, where whoever made it and left could come back and read
    /// what was said since; a guest too needs an invitation then), its history is not
    /// world-readable, and no invitation to an address waits in it (whoever takes it up
    /// joins). A room whose members or rules cannot be read is not.
    async fn just_us(&self, room: &Room, sender: &OwnedUserId, me: &OwnedUserId) -> bool {
        use matrix_sdk::ruma::events::room::history_visibility::HistoryVisibility;
        use matrix_sdk::ruma::events::room::join_rules::JoinRule;
        use matrix_sdk::RoomMemberships;
        let closed = matches!(room.join_rule(), Some(JoinRule::Invite | JoinRule::Private))
            && room.history_visibility().is_some_and(|seen| seen != HistoryVisibility::WorldReadable);
        if !closed || Self::invites_an_address(room).await {
            tracing::info!(
                room = %room.room_id(),
                join_rule = ?room.join_rule(),
                history = ?room.history_visibility(),
                "a room others may join or read is taken as a group's"
            );
            return false;
        }
        match room.members(RoomMemberships::ACTIVE).await {
            Ok(members) => {
                members.len() == 2
                    && members.iter().any(|member| member.user_id() == sender)
                    && members.iter().any(|member| member.user_id() == me)
            }
            Err(error) => {
                tracing::warn!(%error, room = %room.room_id(), "cannot read a room's members; it is taken as a group's");
                false
            }
        }
    }

    /// Whether `room` holds an invitation to an address (`m.room.third_party_invite`) not
    /// revoked (a revoked one is empty), or cannot say.
    async fn invites_an_address(room: &Room) -> bool {
        use matrix_sdk::deserialized_responses::RawAnySyncOrStrippedState;
        use matrix_sdk::ruma::events::StateEventType;
        let events = match room.get_state_events(StateEventType::RoomThirdPartyInvite).await {
            Ok(events) => events,
            Err(error) => {
                tracing::warn!(%error, room = %room.room_id(), "cannot read a room's invitations to addresses");
                return true;
            }
        };
        events.iter().any(|event| {
            let json = match event {
                RawAnySyncOrStrippedState::Sync(raw) => raw.json().get(),
                RawAnySyncOrStrippedState::Stripped(raw) => raw.json().get(),
            };
            let content = serde_json::from_str::<serde_json::Value>(json).map(|event| event["content"].clone());
            content.map_or(true, |content| content.as_object().is_none_or(|fields| !fields.is_empty()))
        })
    }

    /// A message in a room the bot is in.
    async fn message(&self, event: OriginalSyncRoomMessageEvent, room: Room) {
        let me = match self.client.user_id() {
            Some(me) => me.to_owned(),
            None => return,
        };
        if event.sender == me || !self.allows(&event.sender) {
            return;
        }
        if !self.seen.lock().unwrap_or_else(PoisonError::into_inner).first(event.event_id.as_str(), Instant::now()) {
            tracing::info!(event = %event.event_id, "an event seen before is dropped");
            return;
        }
        // An edit is not asked again.
        if matches!(event.content.relates_to, Some(Relation::Replacement(_))) {
            return;
        }
        // A private conversation is a room of exactly two, the bot and the one who wrote: the
        // person's own. Any other room is its group's, whoever flagged it direct (a flag its
        // creator writes) and however few have joined yet.
        let group = !self.just_us(&room, &event.sender, &me).await;
        let (mut text, file) = match &event.content.msgtype {
            MessageType::Text(text) => (text.body.clone(), None),
            MessageType::Notice(_) => return,
            MessageType::Image(image) => (
                String::new(),
                Some((
                    image.body.clone(),
                    mime_of(image.info.as_deref().and_then(|info| info.mimetype.clone())),
                    self.client.media().get_file(image, false).await,
                )),
            ),
            MessageType::File(file) => (
                String::new(),
                Some((
                    file.filename.clone().unwrap_or_else(|| file.body.clone()),
                    mime_of(file.info.as_deref().and_then(|info| info.mimetype.clone())),
                    self.client.media().get_file(file, false).await,
                )),
            ),
            _ => return,
        };
        // An answer to an approval request.
        let replied_to = match &event.content.relates_to {
            Some(Relation::Reply(reply)) => Some(reply.in_reply_to.event_id.clone()),
            Some(Relation::Thread(thread)) => thread.in_reply_to.as_ref().map(|reply| reply.event_id.clone()),
            _ => None,
        };
        if let Some(approval) = replied_to
            .as_ref()
            .and_then(|id| self.asked.lock().unwrap_or_else(PoisonError::into_inner).get(id).cloned())
        {
            self.approval_answered(&room, &event, approval, &text).await;
            return;
        }
        if group {
            let mentioned = event.content.mentions.as_ref().is_some_and(|mentions| mentions.user_ids.contains(&me));
            let named = text.contains(me.as_str())
                || text.to_lowercase().contains(&format!("{}:", me.localpart().to_lowercase()));
            if !mentioned && !named {
                return;
            }
            text = text.replace(me.as_str(), "").trim_start_matches([':', ',', ' ']).trim().to_string();
            let prefix = format!("{}:", me.localpart());
            if text.to_lowercase().starts_with(&prefix.to_lowercase()) {
                text = text[prefix.len()..].trim().to_string();
            }
        }
        // silent-ok: a typing notice is a courtesy.
        let _ = room.typing_notice(true).await;
        let files = match file {
            None => vec![],
            Some((name, mime_type, Ok(Some(bytes)))) if bytes.len() as u64 <= self.max_file_bytes => {
                vec![File { name, mime_type, bytes, voice: false }]
            }
            Some((name, ..)) => {
                let sentence =
                    format!("⚠️ {} could not be fetched, or is larger than this gateway takes.", clean(&name));
                // silent-ok: the person is told if Matrix takes it; the log says the rest.
                let _ = room.send(RoomMessageEventContent::text_plain(sentence)).await;
                return;
            }
        };
        let person = Person {
            identity: format!("matrix:{}", event.sender),
            name: room
                .get_member_no_sync(&event.sender)
                .await
                .ok()
                .flatten()
                .and_then(|member| member.display_name().map(str::to_string)),
        };
        let message = turn::Message {
            chat: room.room_id().to_string(),
            person,
            place: if group { Place::Shared { chat: room.room_id().to_string() } } else { Place::Own },
            text,
            files,
            channel: v1::ChannelType::Matrix,
            session_id: String::new(),
        };
        let answering = Answering { gateway: self, room: &room, asked: &event };
        if let Err(error) = turn::run(&self.daemon, &self.follower, message, &answering).await {
            tracing::warn!(room = %room.room_id(), %error, "a turn from Matrix failed");
            let text = match error {
                TurnError::Daemon(sentence) => format!("⚠️ {sentence}"),
                TurnError::Channel(_) => "⚠️ Matrix did not take the answer; try again.".into(),
            };
            // silent-ok: when Matrix does not take this either, the log says why above.
            let _ = room
                .send(RoomMessageEventContent::text_plain(text).make_reply_to(
                    &event.clone().into_full_event(room.room_id().to_owned()),
                    ForwardThread::Yes,
                    AddMentions::No,
                ))
                .await;
        }
        // silent-ok: the notice ends by itself.
        let _ = room.typing_notice(false).await;
    }

    /// Sends what comes between turns (a scheduled task's result, a later message) to its room
    /// until the follower ends.
    pub async fn deliver(self: Arc<Self>, mut deliveries: tokio::sync::mpsc::Receiver<Delivery>) {
        while let Some(delivery) = deliveries.recv().await {
            let room = matrix_sdk::ruma::RoomId::parse(&delivery.chat).ok().and_then(|id| self.client.get_room(&id));
            let Some(room) = room else {
                tracing::warn!(room = %delivery.chat, "what came between turns is for a room the bot is not in");
                continue;
            };
            // A person's own conversation goes only to a room that is still just them and the bot.
            if let Some(own) = &delivery.own {
                let person = own.strip_prefix("matrix:").and_then(|user| matrix_sdk::ruma::UserId::parse(user).ok());
                let still_theirs = match (person, self.client.user_id()) {
                    (Some(person), Some(me)) => self.just_us(&room, &person, &me.to_owned()).await,
                    _ => false,
                };
                if !still_theirs {
                    tracing::warn!(room = %delivery.chat, "what came between turns for a person is not posted: their room is no longer just them and the bot");
                    continue;
                }
            }
            if let Err(error) = post(&room, &delivery.text, delivery.files).await {
                tracing::warn!(room = %delivery.chat, %error, "Matrix did not take what came between turns");
            }
        }
    }

    /// `event` answers the approval request `approval`: its first word is the decision. Taken,
    /// the request's settlement says so (its message edited); not, a message says why.
    async fn approval_answered(&self, room: &Room, event: &OriginalSyncRoomMessageEvent, approval: Asked, text: &str) {
        let person = Person { identity: format!("matrix:{}", event.sender), name: None };
        let Some(told) = turn::answer_by_word(&self.daemon, &person, &approval, text).await else { return };
        if let Err(error) = room.send(RoomMessageEventContent::text_plain(told)).await {
            tracing::warn!(%error, "cannot say why an approval's answer was not taken");
        }
    }

    /// How a request this gateway posted in `room` was settled, however and by whom it was
    /// answered: its message edited to say so.
    async fn approval_settled(&self, room: &Room, settled: &v1::ApprovalSettled) {
        let posted = {
            let asked = self.asked.lock().unwrap_or_else(PoisonError::into_inner);
            asked.iter().find(|(_, asked)| asked.id == settled.id).map(|(event, _)| event.clone())
        };
        let Some(posted) = posted else { return };
        if !self.settled.lock().unwrap_or_else(PoisonError::into_inner).first(&settled.id, Instant::now()) {
            return;
        }
        let text = sentences::settled(&settled.decision, &settled.by);
        let content =
            RoomMessageEventContent::text_plain(text).make_replacement(ReplacementMetadata::new(posted, None));
        if let Err(error) = room.send(content).await {
            tracing::warn!(%error, "an approval's answer could not be shown");
        }
    }

    /// Posts an approval request in `room` (a skill's review whole), answered by a reply of one
    /// word.
    async fn ask_approval(&self, room: &Room, request: &v1::ApprovalRequest) {
        if self.asked.lock().unwrap_or_else(PoisonError::into_inner).values().any(|asked| asked.id == request.id) {
            return;
        }
        let text = clean(&approval_text(request)).into_owned();
        match room.send(RoomMessageEventContent::text_plain(text)).await {
            Ok(sent) => {
                let mut asked = self.asked.lock().unwrap_or_else(PoisonError::into_inner);
                if asked.len() >= 256 {
                    asked.clear();
                }
                asked.insert(sent.response.event_id, Asked::of(request));
            }
            Err(error) => tracing::warn!(%error, "an approval request could not be posted"),
        }
    }
}

/// An approval request as a message, with how to answer it and how long it waits: a
/// connection's in one paragraph, a skill's review or an action's arguments line by line.
fn approval_text(request: &v1::ApprovalRequest) -> String {
    let expires = sentences::expires_text(request);
    if sentences::is_review(request) {
        let ending = format!("{} {expires}", sentences::answer_with(request));
        // Within one message's bytes, at four bytes a character at most.
        return sentences::review_text(request, &ending, MESSAGE_BYTES / 4);
    }
    format!("{} {} {expires}", sentences::approval_asked(request), sentences::ANSWER_WITH)
}

fn mime_of(mime: Option<String>) -> String {
    mime.filter(|mime| !mime.trim().is_empty()).unwrap_or_else(|| "application/octet-stream".into())
}

/// The answer's message: its event once it is up, and what it shows.
pub struct Shown {
    event: Option<OwnedEventId>,
    text: String,
}

/// One turn's answer in Matrix: a reply to the message that asked, put up with its first words
/// (the typing notice stands for it until then: each event costs the homeserver a round, and a
/// placeholder first would hold the first words back by one), then edited.
struct Answering<'a> {
    gateway: &'a Gateway,
    room: &'a Room,
    asked: &'a OriginalSyncRoomMessageEvent,
}

impl Answering<'_> {
    /// Shows `text`: the reply put up, or edited once it is.
    async fn put(&self, answer: &mut Shown, text: &str) -> Result<(), String> {
        let content = RoomMessageEventContent::text_plain(text);
        let content = match &answer.event {
            Some(event) => content.make_replacement(ReplacementMetadata::new(event.clone(), None)),
            None => {
                let asked = self.asked.clone().into_full_event(self.room.room_id().to_owned());
                content.make_reply_to(&asked, ForwardThread::Yes, AddMentions::No)
            }
        };
        let sent = self.room.send(content).await.map_err(|error| error.to_string())?;
        answer.event.get_or_insert(sent.response.event_id);
        answer.text = text.to_string();
        Ok(())
    }
}

impl Surface for Answering<'_> {
    type Answer = Shown;

    fn update_every(&self) -> Duration {
        UPDATE_EVERY
    }

    async fn typing(&self) {
        // silent-ok: a typing notice is a courtesy (the SDK sends it again only after 3 s).
        let _ = self.room.typing_notice(true).await;
    }

    async fn open(&self) -> Result<Shown, String> {
        Ok(Shown { event: None, text: String::new() })
    }

    async fn show(&self, answer: &mut Shown, writing: &Writing) -> Result<bool, String> {
        // Nothing to show yet: the typing notice says it is coming.
        if writing.text.trim().is_empty() && writing.status.is_empty() {
            return Ok(false);
        }
        let live = turn::live(writing, LIVE_LIMIT);
        if live == answer.text {
            return Ok(false);
        }
        self.put(answer, &live).await?;
        Ok(true)
    }

    async fn close(&self, mut answer: Shown, writing: &Writing, trouble: Option<Trouble>) -> Result<(), String> {
        let whole = turn::whole(&clean(&writing.text), trouble);
        // An event holds at most 64 KiB and an edit carries its text twice: a long answer goes
        // on in messages after the first.
        let mut parts = baaaht_gateway_kit::text::pieces(&whole, MESSAGE_BYTES).into_iter();
        self.put(&mut answer, &parts.next().unwrap_or_default()).await?;
        for part in parts {
            self.room.send(RoomMessageEventContent::text_plain(part)).await.map_err(|error| error.to_string())?;
        }
        Ok(())
    }

    async fn message(&self, text: &str, files: Vec<File>) -> Result<(), String> {
        post(self.room, text, files).await
    }

    async fn approval(&self, event: &v1::orchestrator_event::Event) {
        use v1::orchestrator_event::Event;
        match event {
            Event::Approval(request) => self.gateway.ask_approval(self.room, request).await,
            Event::ApprovalSettled(settled) => self.gateway.approval_settled(self.room, settled).await,
            _ => {}
        }
    }
}

/// Sends `text` to `room`, then each of `files` (in an encrypted room the SDK encrypts a file
/// before it uploads it).
async fn post(room: &Room, text: &str, files: Vec<File>) -> Result<(), String> {
    room.send(RoomMessageEventContent::text_plain(clean(text))).await.map_err(|error| error.to_string())?;
    for file in files {
        let mime: mime::Mime = file.mime_type.parse().unwrap_or(mime::APPLICATION_OCTET_STREAM);
        let config = matrix_sdk::attachment::AttachmentConfig::new();
        room.send_attachment(file.name.as_str(), &mime, file.bytes, config)
            .await
            .map_err(|error| format!("{}: {error}", file.name))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_approval_says_how_to_answer_it_in_its_kind_words() {
        let request = v1::ApprovalRequest {
            id: "a-0123456789ab".into(),
            agent: v1::AgentRole::Coder as i32,
            host: "pypi.org".into(),
            port: 443,
            expires_in_seconds: 120,
            ..Default::default()
        };
        let asked = approval_text(&request);
        assert!(asked.starts_with("The coder's tools want to reach pypi.org:443. Reply to this"), "{asked}");
        assert!(asked.ends_with(" Denied in 120 s without an answer."), "{asked}");
        let review = v1::SkillReview { name: "forecast".into(), installs_for: "you".into(), ..Default::default() };
        let review = v1::ApprovalRequest { expires_in_seconds: 300, skill_review: Some(review), ..request };
        let asked = approval_text(&review);
        assert!(asked.starts_with("The coder asks to install the skill forecast for you.\n\n"), "{asked}");
        assert!(asked.contains("\nNo scripts.\n"), "{asked}");
        assert!(
            asked
                .ends_with("\n\nReply to this with one word: install or decline. Declined in 300 s if nobody answers."),
            "{asked}"
        );
    }
}
