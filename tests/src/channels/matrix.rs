//! Matrix in the compliance suite: `baaaht-matrix` against a real Synapse, through a relay the
//! health case cuts; the person Alice, a matrix-sdk client with end-to-end encryption (as
//! Element is), in her direct room with the bot. Her chat is what her client reads there from
//! the bot, each message as its latest edit shows it.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use baaaht_gateway_compliance::channel::File;
use baaaht_gateway_compliance::{Channel, FakeDaemon};
use matrix_sdk::room::Room;
use matrix_sdk::ruma::events::room::message::{Relation, RoomMessageEventContent};

use super::cut::Cut;
use crate::matrix_person::MatrixPerson;
use crate::synapse::Synapse;

const BOT: (&str, &str) = ("baaaht", "bot-password");
const ALICE: (&str, &str) = ("alice", "alice-password");

pub struct Matrix {
    // Dropped in this order: the person's client on the runtime, then the gateway, the relay
    // and the homeserver.
    alice: MatrixPerson,
    room: Room,
    bot: String,
    gateway: crate::Running,
    homeserver: Cut,
    _store: tempfile::TempDir,
    _synapse: Synapse,
}

impl Channel for Matrix {
    /// A Matrix event is delivered once: the gateway's sync token (kept in its state folder)
    /// says where it is. Nothing is written again.
    type Written = String;

    /// What the gateway puts in one event (an event holds 64 KiB, an edit carries its text twice).
    const LIMIT: usize = 16 * 1024;
    const NAME: &'static str = "matrix";

    fn secrets() -> HashMap<String, String> {
        HashMap::from([("password".to_string(), BOT.1.to_string())])
    }

    async fn start(daemon: &FakeDaemon, health: &Path) -> Result<Matrix, String> {
        let synapse = tokio::task::block_in_place(Synapse::start).map_err(|error| format!("Synapse: {error:#}"))?;
        let registered = tokio::task::block_in_place(|| {
            Ok::<_, anyhow::Error>((synapse.register(BOT.0, BOT.1)?, synapse.register(ALICE.0, ALICE.1)?))
        });
        let (bot, alice) = registered.map_err(|error| format!("registering on Synapse: {error:#}"))?;
        let homeserver = Cut::start(synapse.port).await.map_err(|error| format!("the relay: {error}"))?;
        let (url, state) = (
            format!("http://127.0.0.1:{}", homeserver.port),
            daemon.folder().join("matrix-state").display().to_string(),
        );
        let args = ["--homeserver", &url, "--user", &bot, "--allow-server", "home.test", "--state-dir", &state];
        let gateway = super::start_gateway(daemon, "baaaht-matrix", health, &args)?;
        let store = tempfile::tempdir().map_err(|error| format!("a store for Alice's client: {error}"))?;
        let person = MatrixPerson::sign_in(&synapse.url(), &alice, ALICE.1, store.path())
            .await
            .map_err(|error| format!("Alice signs in: {error:#}"))?;
        let room = person.dm(&bot).await.map_err(|error| format!("Alice's direct room: {error:#}"))?;
        if let Err(error) = person.joined(&room, &bot, Duration::from_secs(90)).await {
            return Err(format!("{error:#}\n{}", gateway.log_text()));
        }
        Ok(Matrix { alice: person, room, bot, gateway, homeserver, _store: store, _synapse: synapse })
    }

    fn identity(&self) -> String {
        format!("matrix:@{}:home.test", ALICE.0)
    }

    async fn write(&self, text: &str, files: &[File]) -> String {
        for file in files {
            let mime: mime::Mime = file.mime_type.parse().unwrap_or(mime::APPLICATION_OCTET_STREAM);
            let config = matrix_sdk::attachment::AttachmentConfig::new();
            let sent = self.room.send_attachment(file.name.as_str(), &mime, file.bytes.clone(), config).await;
            assert!(sent.is_ok(), "Alice's file was not sent: {sent:?}");
        }
        let said = self.alice.say(&self.room, text).await;
        said.unwrap_or_else(|error| panic!("Alice's message was not sent: {error:#}"))
    }

    async fn redeliver(&self, _: &String) {
        unreachable!("Matrix delivers each event once; its case is not run for Matrix")
    }

    fn shown(&self) -> Vec<String> {
        let room = self.room.room_id().to_string();
        let mut shown: Vec<(String, String)> = vec![];
        for said in self.alice.said().into_iter().filter(|said| said.room == room && said.sender == self.bot) {
            match &said.replaces {
                Some(original) => {
                    if let Some(message) = shown.iter_mut().find(|(id, _)| id == original) {
                        message.1 = said.body;
                    }
                }
                None if said.media.is_none() => shown.push((said.event_id, said.body)),
                None => {}
            }
        }
        shown.into_iter().map(|(_, text)| text).collect()
    }

    fn files(&self) -> Vec<File> {
        let room = self.room.room_id().to_string();
        let sent: Vec<_> =
            self.alice.said().into_iter().filter(|said| said.room == room && said.media.is_some()).collect();
        sent.iter()
            .filter(|said| said.sender == self.bot)
            .filter_map(|said| {
                let handle = tokio::runtime::Handle::current();
                let bytes = tokio::task::block_in_place(|| handle.block_on(self.alice.download(said))).ok()?;
                Some(File { name: said.body.clone(), mime_type: String::new(), bytes, voice: false })
            })
            .collect()
    }

    async fn answer_approval(&self, decision: &str) -> Result<(), String> {
        let asked = self.alice.said().into_iter().rev().find(|said| {
            said.sender == self.bot
                && said.replaces.is_none()
                && (said.body.contains(baaaht_gateway_kit::sentences::ANSWER_WITH)
                    || said.body.contains(baaaht_gateway_kit::sentences::REVIEW_ANSWER_WITH)
                    || said.body.contains(baaaht_gateway_kit::sentences::ACTION_ANSWER_WITH))
        });
        let Some(asked) = asked else { return Err("no approval request in Alice's room".into()) };
        let id =
            matrix_sdk::ruma::OwnedEventId::try_from(asked.event_id.as_str()).map_err(|error| error.to_string())?;
        let mut content = RoomMessageEventContent::text_plain(decision);
        content.relates_to = Some(Relation::Reply(matrix_sdk::ruma::events::relation::Reply::with_event_id(id)));
        self.room.send(content).await.map(drop).map_err(|error| error.to_string())
    }

    fn set_offline(&self, offline: bool) {
        self.homeserver.set_offline(offline);
    }

    async fn wait_for(&self, wait: Duration, check: impl Fn(&Matrix) -> bool + Send + Sync) -> bool {
        super::looked_at_until(wait, Duration::from_millis(100), || check(self)).await
    }

    fn log(&self) -> String {
        self.gateway.log_text()
    }
}
