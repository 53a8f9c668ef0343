//! A person on Matrix, as the tests drive one: a matrix-sdk client with end-to-end encryption
//! (as Element is), its stores in a folder of its own, syncing in the background and keeping
//! every message it can read and counting every one it cannot decrypt.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use matrix_sdk::config::SyncSettings;
use matrix_sdk::room::Room;
use matrix_sdk::ruma::events::room::encrypted::OriginalSyncRoomEncryptedEvent;
use matrix_sdk::ruma::events::room::message::{MessageType, OriginalSyncRoomMessageEvent, Relation};
use matrix_sdk::ruma::{OwnedUserId, UserId};
use matrix_sdk::Client;

/// A message the person's client read.
#[derive(Debug, Clone)]
pub struct Said {
    pub event_id: String,
    pub room: String,
    pub sender: String,
    pub body: String,
    /// The message it answers (a rich reply), if any.
    pub reply_to: Option<String>,
    /// The message it replaces (an edit), if any.
    pub replaces: Option<String>,
    /// A file or picture it carries ([`MatrixPerson::download`] reads it).
    pub media: Option<MessageType>,
}

/// A signed-in person, syncing until dropped.
pub struct MatrixPerson {
    pub client: Client,
    said: Arc<Mutex<Vec<Said>>>,
    undecryptable: Arc<AtomicUsize>,
    sync: tokio::task::JoinHandle<()>,
}

impl Drop for MatrixPerson {
    fn drop(&mut self) {
        self.sync.abort();
    }
}

impl MatrixPerson {
    /// Signs `user` in at `homeserver`, its stores in `store`, and starts syncing.
    pub async fn sign_in(homeserver: &str, user: &str, password: &str, store: &Path) -> Result<MatrixPerson> {
        let client = Client::builder().homeserver_url(homeserver).sqlite_store(store, None).build().await?;
        client.matrix_auth().login_username(user, password).initial_device_display_name("test client").send().await?;
        let said: Arc<Mutex<Vec<Said>>> = Arc::default();
        let undecryptable = Arc::new(AtomicUsize::new(0));
        let kept = said.clone();
        client.add_event_handler(move |event: OriginalSyncRoomMessageEvent, room: Room| {
            let kept = kept.clone();
            async move {
                let (body, replaces) = match &event.content.relates_to {
                    Some(Relation::Replacement(replacement)) => {
                        (replacement.new_content.msgtype.body().to_string(), Some(replacement.event_id.to_string()))
                    }
                    _ => (event.content.body().to_string(), None),
                };
                let reply_to = match &event.content.relates_to {
                    Some(Relation::Reply(reply)) => Some(reply.in_reply_to.event_id.to_string()),
                    Some(Relation::Thread(thread)) => {
                        thread.in_reply_to.as_ref().map(|reply| reply.event_id.to_string())
                    }
                    _ => None,
                };
                kept.lock().unwrap_or_else(PoisonError::into_inner).push(Said {
                    event_id: event.event_id.to_string(),
                    room: room.room_id().to_string(),
                    sender: event.sender.to_string(),
                    body,
                    reply_to,
                    replaces,
                    media: matches!(&event.content.msgtype, MessageType::File(_) | MessageType::Image(_))
                        .then(|| event.content.msgtype.clone()),
                });
            }
        });
        let counted = undecryptable.clone();
        client.add_event_handler(move |_event: OriginalSyncRoomEncryptedEvent| {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::Relaxed);
            }
        });
        client.sync_once(SyncSettings::default()).await?;
        let syncing = client.clone();
        let sync = tokio::spawn(async move {
            // The next sync at once, as Element does (matrix-sdk's own loop waits a second
            // after a quick one); the homeserver's long poll paces it.
            let settings = SyncSettings::default().timeout(Duration::from_millis(500));
            loop {
                if syncing.sync_once(settings.clone()).await.is_err() {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        });
        Ok(MatrixPerson { client, said, undecryptable, sync })
    }

    /// Everything read so far.
    pub fn said(&self) -> Vec<Said> {
        self.said.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The bytes of the file or picture `said` carries, decrypted as Element would.
    pub async fn download(&self, said: &Said) -> Result<Vec<u8>> {
        let media = self.client.media();
        let bytes = match &said.media {
            Some(MessageType::File(file)) => media.get_file(file, false).await?,
            Some(MessageType::Image(image)) => media.get_file(image, false).await?,
            _ => bail!("{} carries no file", said.event_id),
        };
        bytes.context("the file has no source")
    }

    /// How many messages could not be decrypted.
    pub fn undecryptable(&self) -> usize {
        self.undecryptable.load(Ordering::Relaxed)
    }

    /// A direct, end-to-end encrypted room with `user`.
    pub async fn dm(&self, user: &str) -> Result<Room> {
        let user: OwnedUserId = UserId::parse(user)?;
        Ok(self.client.create_dm(&user).await?)
    }

    /// Waits until `user` has joined `room`.
    pub async fn joined(&self, room: &Room, user: &str, limit: Duration) -> Result<()> {
        let user: OwnedUserId = UserId::parse(user)?;
        let deadline = Instant::now() + limit;
        loop {
            // silent-ok: a sync error shows as the deadline.
            let _ = room.sync_members().await;
            if room.get_member_no_sync(&user).await.ok().flatten().is_some_and(|member| {
                *member.membership() == matrix_sdk::ruma::events::room::member::MembershipState::Join
            }) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{user} did not join {} within {limit:?}", room.room_id());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Sends `text` in `room`: its event id.
    pub async fn say(&self, room: &Room, text: &str) -> Result<String> {
        let content = matrix_sdk::ruma::events::room::message::RoomMessageEventContent::text_plain(text);
        Ok(room.send(content).await?.response.event_id.to_string())
    }

    /// What the answer to `asked` shows now (its latest edit): its text and how many edits
    /// made it.
    pub fn answer_to(&self, asked: &str) -> Option<(String, usize)> {
        let said = self.said();
        let reply = said.iter().find(|said| said.reply_to.as_deref() == Some(asked) && said.replaces.is_none())?;
        let edits: Vec<&Said> = said.iter().filter(|said| said.replaces.as_deref() == Some(&reply.event_id)).collect();
        let text = edits.last().map(|edit| edit.body.clone()).unwrap_or_else(|| reply.body.clone());
        Some((text, edits.len()))
    }

    /// Waits until the answer to `asked` satisfies `done`: its text and edits.
    pub async fn wait_for_answer(
        &self,
        asked: &str,
        limit: Duration,
        done: impl Fn(&str) -> bool,
    ) -> Result<(String, usize)> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some((text, edits)) = self.answer_to(asked).filter(|(text, _)| done(text)) {
                return Ok((text, edits));
            }
            if Instant::now() > deadline {
                bail!("no answer to {asked} within {limit:?}: {:#?}", self.answer_to(asked));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A room of this person's, by id.
    pub fn room(&self, id: &str) -> Result<Room> {
        let id = matrix_sdk::ruma::RoomId::parse(id)?;
        self.client.get_room(&id).context("no such room")
    }
}
