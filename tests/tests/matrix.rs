//! The Matrix gateway (`baaaht-matrix`, the real binary) against a real homeserver — Synapse
//! from PyPI, started by each test on loopback — and the real daemon. People are matrix-sdk
//! clients with end-to-end encryption on, as Element is: they read the gateway's answers only
//! if the gateway encrypted them for their devices.

use std::time::Duration;

use baaaht_proto::v1;
use baaaht_tests::matrix_person::MatrixPerson;
use baaaht_tests::scenario;
use baaaht_tests::synapse::Synapse;

const BOT: (&str, &str) = ("baaaht", "bot-password");
const ALICE: (&str, &str) = ("alice", "alice-password");
const BOB: (&str, &str) = ("bob", "bob-password");
const WAIT: Duration = Duration::from_secs(90);

fn synapse() -> Synapse {
    Synapse::start().expect("Synapse (scripts/test installs it from PyPI)")
}

/// What a daemon needs for the gateway: the bot's password, and Alice linked to `u-alice`.
fn matrix_options() -> baaaht_tests::DaemonOptions {
    let mut options =
        baaaht_tests::DaemonOptions { env: vec![("MATRIX_PASSWORD_HOME".into(), BOT.1.into())], ..Default::default() };
    options.files.push(scenario::linked_identities(&[("matrix:@alice:home.test", "u-alice", "Alice")]));
    options
}

fn arguments(synapse: &Synapse, bot: &str, state: &std::path::Path, allowed: &str) -> Vec<String> {
    [
        "--homeserver",
        &synapse.url(),
        "--user",
        bot,
        "--allow-server",
        allowed,
        "--state-dir",
        &state.display().to_string(),
    ]
    .iter()
    .map(|arg| arg.to_string())
    .collect()
}

fn run_gateway(
    rt: &tokio::runtime::Runtime,
    daemon: &baaaht_tests::TestDaemon,
    synapse: &Synapse,
    args: &[String],
) -> (baaaht_tests::Running, baaaht_tests::gateway::Gateway) {
    // The allowed homeservers are in the registration too, where the daemon reads them.
    let allowed = args.iter().position(|arg| arg == "--allow-server").map(|at| args[at..at + 2].to_vec());
    let request = v1::AddGatewayRequest {
        kind: "matrix".into(),
        name: "home".into(),
        homeserver: synapse.url(),
        args: allowed.unwrap_or_default(),
        ..Default::default()
    };
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    baaaht_tests::gateway::run_external(rt, daemon, request, "baaaht-matrix", &args)
}

/// Waits for `running`'s log to say `what`.
fn logged(running: &baaaht_tests::Running, what: &str) -> bool {
    let deadline = std::time::Instant::now() + WAIT;
    while !running.log_text().contains(what) {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    true
}

#[test]
fn an_encrypted_dm_is_answered_as_edits_of_one_reply_a_file_comes_encrypted_and_a_restart_keeps_the_device() {
    let rt = baaaht_tests::runtime();
    // The people's clients close their stores on the runtime when they are dropped.
    let _entered = rt.enter();
    let synapse = synapse();
    let bot = synapse.register(BOT.0, BOT.1).expect("bot");
    let alice = synapse.register(ALICE.0, ALICE.1).expect("alice");
    let brain = scenario::report_sending_brain(scenario::paced_echo_brain(Duration::from_millis(700)));
    let (_provider, daemon) = scenario::start(&rt, brain, matrix_options()).expect("daemon");
    let state = daemon.data_dir.join("matrix-state");
    let args = arguments(&synapse, &bot, &state, "home.test");
    let (gateway, registered) = run_gateway(&rt, &daemon, &synapse, &args);
    assert!(logged(&gateway, "listening to Matrix"), "{}\n{}", gateway.log_text(), synapse.log_text());
    let logs = || format!("{}\n{}", gateway.log_text(), daemon.log_text());
    let store = tempfile::tempdir().expect("store");
    let (person, room) = rt.block_on(async {
        let person = MatrixPerson::sign_in(&synapse.url(), &alice, ALICE.1, store.path()).await.expect("alice");
        let room = person.dm(&bot).await.expect("a DM");
        person.joined(&room, &bot, WAIT).await.unwrap_or_else(|error| panic!("{error}\n{}", logs()));
        (person, room)
    });
    rt.block_on(async {
        let encrypted = room.latest_encryption_state().await.expect("state").is_encrypted();
        assert!(encrypted, "the DM is end-to-end encrypted");
        let asked = person.say(&room, "hello from matrix in many words").await.expect("say");
        let (text, edits) = person
            .wait_for_answer(&asked, WAIT, |text| text == "echo: hello from matrix in many words")
            .await
            .unwrap_or_else(|error| panic!("{error}\n{}", logs()));
        assert_eq!(text, "echo: hello from matrix in many words");
        // Put up with its first words (no placeholder), then edited as it grew.
        let first = person.said().into_iter().find(|said| said.reply_to.as_deref() == Some(asked.as_str()));
        let first = first.map(|said| said.body).unwrap_or_default();
        assert!(first.starts_with("echo:") && first != text, "the reply came with its first words: {first:?}");
        assert!(edits >= 1, "the answer grew as it was written ({edits} edits)");
        assert_eq!(person.undecryptable(), 0, "alice read everything");

        // A file the Worker sends comes as an encrypted attachment Alice's client opens.
        let asked = person.say(&room, scenario::ASK_FOR_REPORT).await.expect("say");
        let answered = person.wait_for_answer(&asked, WAIT, |text| text == scenario::REPORT_SENT).await;
        assert!(answered.is_ok(), "{answered:?}\n{}", logs());
        let said = person.said();
        assert!(said.iter().any(|said| said.body == scenario::REPORT_MESSAGE), "{said:#?}");
        let file =
            said.iter().find(|said| said.media.is_some()).unwrap_or_else(|| panic!("no file: {said:#?}\n{}", logs()));
        assert_eq!(file.body, scenario::REPORT_NAME);
        let encrypted = matches!(&file.media, Some(matrix_sdk::ruma::events::room::message::MessageType::File(content))
            if matches!(content.source, matrix_sdk::ruma::events::room::MediaSource::Encrypted(_)));
        assert!(encrypted, "the file was encrypted before it was uploaded: {:?}", file.media);
        assert_eq!(person.download(file).await.expect("download"), scenario::REPORT);
        assert_eq!(person.undecryptable(), 0, "alice read everything");
    });
    // The gateway is stopped and started again: the same device, so Alice's client reads it.
    drop(gateway);
    let mut command = std::process::Command::new(baaaht_tests::bin("baaaht-matrix"));
    command
        .arg("--socket")
        .arg(&registered.socket)
        .args(&args)
        .env("BAAAHT_GATEWAY_TOKEN", &registered.token)
        .env("RUST_LOG", "info");
    let again = baaaht_tests::spawn(command, &daemon.data_dir.join("baaaht-matrix-again.log")).expect("restart");
    assert!(logged(&again, "listening to Matrix"), "{}", again.log_text());
    assert!(again.log_text().contains("the kept Matrix device goes on"), "{}", again.log_text());
    rt.block_on(async {
        let asked = person.say(&room, "after the restart").await.expect("say");
        let answered = person.wait_for_answer(&asked, WAIT, |text| text == "echo: after the restart").await;
        assert!(answered.is_ok(), "{answered:?}\n{}", again.log_text());
        assert_eq!(person.undecryptable(), 0, "no \"unable to decrypt\" after the restart");
        // One conversation, Alice's own, with both messages.
        let mut host = scenario::host_client(&daemon).await.expect("host");
        let filter = v1::SessionFilter { user_id: "u-alice".into(), ..Default::default() };
        let listed = host.sessions.list_sessions(filter).await.expect("sessions").into_inner().sessions;
        assert_eq!(listed.len(), 1, "{listed:#?}");
    });
}

#[test]
fn a_room_mention_is_answered_in_the_room_and_a_file_reaches_the_uploads() {
    let rt = baaaht_tests::runtime();
    // The people's clients close their stores on the runtime when they are dropped.
    let _entered = rt.enter();
    let synapse = synapse();
    let bot = synapse.register(BOT.0, BOT.1).expect("bot");
    let alice = synapse.register(ALICE.0, ALICE.1).expect("alice");
    let bob = synapse.register(BOB.0, BOB.1).expect("bob");
    let (_provider, daemon) = scenario::start(&rt, scenario::echo_brain(), matrix_options()).expect("daemon");
    let args = arguments(&synapse, &bot, &daemon.data_dir.join("matrix-state"), "home.test");
    let (gateway, _) = run_gateway(&rt, &daemon, &synapse, &args);
    assert!(logged(&gateway, "listening to Matrix"), "{}", gateway.log_text());
    let logs = || format!("{}\n{}", gateway.log_text(), daemon.log_text());
    let (alice_store, bob_store) = (tempfile::tempdir().expect("store"), tempfile::tempdir().expect("store"));
    rt.block_on(async {
        let person = MatrixPerson::sign_in(&synapse.url(), &alice, ALICE.1, alice_store.path()).await.expect("alice");
        let other = MatrixPerson::sign_in(&synapse.url(), &bob, BOB.1, bob_store.path()).await.expect("bob");
        // A family room of three, encrypted.
        let mut request = matrix_sdk::ruma::api::client::room::create_room::v3::Request::new();
        request.name = Some("Family".into());
        request.invite = vec![
            matrix_sdk::ruma::UserId::parse(bob.as_str()).expect("bob"),
            matrix_sdk::ruma::UserId::parse(bot.as_str()).expect("bot"),
        ];
        let encryption =
            matrix_sdk::ruma::events::room::encryption::RoomEncryptionEventContent::with_recommended_defaults();
        request.initial_state =
            vec![matrix_sdk::ruma::events::InitialStateEvent::with_empty_state_key(encryption).to_raw_any()];
        let room = person.client.create_room(request).await.expect("a room");
        let deadline = std::time::Instant::now() + WAIT;
        let bob_room = loop {
            if let Ok(invited) = other.room(room.room_id().as_str()) {
                break invited;
            }
            assert!(std::time::Instant::now() < deadline, "bob was not invited");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        bob_room.join().await.expect("bob joins");
        person.joined(&room, &bot, WAIT).await.unwrap_or_else(|error| panic!("{error}\n{}", logs()));
        person.joined(&room, &bob, WAIT).await.expect("bob joined");
        // Chatter without the bot's name is not for it.
        let chatter = person.say(&room, "dinner at eight?").await.expect("say");
        let asked = person.say(&room, "baaaht: what is for dinner?").await.expect("say");
        let (text, _) = person
            .wait_for_answer(&asked, WAIT, |text| text == "echo: Alice: what is for dinner?")
            .await
            .unwrap_or_else(|error| panic!("{error}\n{}", logs()));
        assert_eq!(text, "echo: Alice: what is for dinner?");
        assert!(person.answer_to(&chatter).is_none(), "chatter is not answered");
        // Bob reads the answer too: it was encrypted for every device in the room.
        let bob_read = other.wait_for_answer(&asked, WAIT, |text| text == "echo: Alice: what is for dinner?").await;
        assert!(bob_read.is_ok(), "{bob_read:?}");
        assert_eq!(person.undecryptable() + other.undecryptable(), 0);
        // A file in the DM is stored in Alice's uploads (an encrypted attachment).
        let dm = person.dm(&bot).await.expect("a DM");
        person.joined(&dm, &bot, WAIT).await.expect("the bot joins the DM");
        let config = matrix_sdk::attachment::AttachmentConfig::new();
        let sent = dm
            .send_attachment("list.txt", &"text/plain".parse().expect("mime"), b"eggs, flour, milk".to_vec(), config)
            .await
            .expect("an attachment");
        let file = person.wait_for_answer(sent.event_id.as_str(), WAIT, |text| text.contains("uploads/list.txt")).await;
        assert!(file.is_ok(), "{file:?}\n{}", logs());
    });
    let group = std::fs::read_to_string(daemon.data_dir.join("data/state/groups.json")).unwrap_or_default();
    assert!(group.contains("matrix-"), "the room's group was made on first use: {group}");
}

/// DESIGN.md §5.8 against Synapse: a stranger makes a room flagged direct with the bot and
/// Alice. It is not Alice's private conversation (three are in it, whatever the flag says): her
/// words there are answered only when she names the bot, in the room's group, never from her
/// own context; her own DM stays hers.
#[test]
fn a_strangers_direct_flagged_room_is_a_group_not_a_members_private_chat() {
    let rt = baaaht_tests::runtime();
    let _entered = rt.enter();
    let synapse = synapse();
    let bot = synapse.register(BOT.0, BOT.1).expect("bot");
    let alice = synapse.register(ALICE.0, ALICE.1).expect("alice");
    let mallory = synapse.register("mallory", "mallory-password").expect("mallory");
    let (_provider, daemon) = scenario::start(&rt, scenario::echo_brain(), matrix_options()).expect("daemon");
    let args = arguments(&synapse, &bot, &daemon.data_dir.join("matrix-state"), "home.test");
    let (gateway, _) = run_gateway(&rt, &daemon, &synapse, &args);
    assert!(logged(&gateway, "listening to Matrix"), "{}", gateway.log_text());
    let logs = || format!("{}\n{}", gateway.log_text(), daemon.log_text());
    let (alice_store, mallory_store) = (tempfile::tempdir().expect("store"), tempfile::tempdir().expect("store"));
    rt.block_on(async {
        let person = MatrixPerson::sign_in(&synapse.url(), &alice, ALICE.1, alice_store.path()).await.expect("alice");
        let stranger = MatrixPerson::sign_in(&synapse.url(), &mallory, "mallory-password", mallory_store.path())
            .await
            .expect("mallory");
        // Mallory's room with the bot and Alice in it: made, joined by both, as `room` asks.
        use matrix_sdk::ruma::api::client::room::create_room::v3::{Request, RoomPreset};
        let joined = |mut request: Request| {
            let (person, stranger, logs) = (&person, &stranger, &logs);
            let (alice, bot) = (alice.clone(), bot.clone());
            async move {
                request.invite = [&alice, &bot]
                    .iter()
                    .map(|user| matrix_sdk::ruma::UserId::parse(user.as_str()).expect("user"))
                    .collect();
                let room = stranger.client.create_room(request).await.expect("a room");
                let deadline = std::time::Instant::now() + WAIT;
                let alices = loop {
                    if let Ok(invited) = person.room(room.room_id().as_str()) {
                        break invited;
                    }
                    assert!(std::time::Instant::now() < deadline, "alice was not invited");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                };
                alices.join().await.expect("alice joins");
                stranger.joined(&room, &bot, WAIT).await.unwrap_or_else(|error| panic!("{error}\n{}", logs()));
                stranger.joined(&room, &alice, WAIT).await.expect("alice joined");
                (room, alices)
            }
        };
        // Flagged direct.
        let mut request = Request::new();
        request.is_direct = true;
        let (_room, alices) = joined(request).await;
        // Not a private chat: a message that does not name the bot is not answered ...
        let private = person.say(&alices, "what do you remember about me?").await.expect("say");
        // ... and one that does is answered as the room's, not from Alice's own context.
        let named = person.say(&alices, "baaaht: hello").await.expect("say");
        let (text, _) = stranger
            .wait_for_answer(&named, WAIT, |text| !text.is_empty() && !text.ends_with('…'))
            .await
            .unwrap_or_else(|error| panic!("{error}\n{}", logs()));
        assert_eq!(text, "echo: Alice: hello", "answered in the group, names in front: {}", logs());
        assert!(stranger.answer_to(&private).is_none(), "{:?}", stranger.answer_to(&private));

        // Mallory's rooms with the bot and Alice, which Mallory then leaves: two are in each,
        // but Mallory may come back and read what is said since — a public room, and an
        // invite-only one where an invitation to Mallory's address waits. Still a group's.
        let mut public = Request::new();
        public.preset = Some(RoomPreset::PublicChat);
        let mut closed = Request::new();
        closed.preset = Some(RoomPreset::PrivateChat);
        for (request, asked) in [(public, "hello again"), (closed, "hello once more")] {
            let invites_an_address = request.preset == Some(RoomPreset::PrivateChat);
            let (room, alices) = joined(request).await;
            if invites_an_address {
                // The key server is never asked (no one takes the invitation up here).
                let invitation = serde_json::json!({
                    "display_name": "m…@elsewhere.test",
                    "key_validity_url": "http://127.0.0.1:9/_matrix/identity/v2/pubkey/isvalid",
                    "public_key": "bm90IGEga2V5",
                });
                room.send_state_event_raw("m.room.third_party_invite", "a-token", invitation)
                    .await
                    .expect("an invitation to an address");
            }
            room.leave().await.expect("mallory leaves");
            let private = person.say(&alices, "what do you remember about me, just us?").await.expect("say");
            let named = person.say(&alices, &format!("baaaht: {asked}")).await.expect("say");
            let (text, _) = person
                .wait_for_answer(&named, WAIT, |text| !text.is_empty() && !text.ends_with('…'))
                .await
                .unwrap_or_else(|error| panic!("{error}\n{}", logs()));
            assert_eq!(text, format!("echo: Alice: {asked}"), "answered as the room's group: {}", logs());
            assert!(person.answer_to(&private).is_none(), "{:?}", person.answer_to(&private));
        }
        assert_eq!(gateway.log_text().matches("a room others may join or read is taken as a group's").count(), 4);
    });
    rt.block_on(async {
        let mut host = scenario::host_client(&daemon).await.expect("host");
        let filter = v1::SessionFilter { user_id: "u-alice".into(), ..Default::default() };
        let own = host.sessions.list_sessions(filter).await.expect("sessions").into_inner().sessions;
        let own: Vec<&v1::SessionHeader> = own.iter().filter(|session| session.group_id.is_empty()).collect();
        assert!(own.is_empty(), "nothing of Alice's own was said in Mallory's room: {own:#?}");
    });
    let groups = std::fs::read_to_string(daemon.data_dir.join("data/state/groups.json")).unwrap_or_default();
    assert!(groups.contains("matrix-"), "the room is a group's: {groups}");
    // The device's stores and their passphrase are the gateway's alone.
    use std::os::unix::fs::PermissionsExt as _;
    let mut folders = vec![daemon.data_dir.join("matrix-state")];
    while let Some(folder) = folders.pop() {
        let mode = std::fs::metadata(&folder).expect("folder").permissions().mode();
        assert_eq!(mode & 0o077, 0, "{} is {mode:o}", folder.display());
        for entry in std::fs::read_dir(&folder).expect("read").flatten() {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
            } else {
                let mode = std::fs::metadata(&path).expect("file").permissions().mode();
                assert_eq!(mode & 0o077, 0, "{} is {mode:o}", path.display());
            }
        }
    }
}

#[test]
fn an_invitation_from_another_homeserver_is_declined() {
    let rt = baaaht_tests::runtime();
    // The people's clients close their stores on the runtime when they are dropped.
    let _entered = rt.enter();
    let synapse = synapse();
    let bot = synapse.register(BOT.0, BOT.1).expect("bot");
    let alice = synapse.register(ALICE.0, ALICE.1).expect("alice");
    let (_provider, daemon) = scenario::start(&rt, scenario::echo_brain(), matrix_options()).expect("daemon");
    // Only people of family.example may write: home.test's Alice may not.
    let args = arguments(&synapse, &bot, &daemon.data_dir.join("matrix-state"), "family.example");
    let (gateway, _) = run_gateway(&rt, &daemon, &synapse, &args);
    assert!(logged(&gateway, "listening to Matrix"), "{}", gateway.log_text());
    let store = tempfile::tempdir().expect("store");
    rt.block_on(async {
        let person = MatrixPerson::sign_in(&synapse.url(), &alice, ALICE.1, store.path()).await.expect("alice");
        person.dm(&bot).await.expect("a DM");
    });
    assert!(logged(&gateway, "an invitation from outside the allowed homeservers declined"), "{}", gateway.log_text());
}

#[test]
fn in_its_container_the_gateway_reaches_the_homeserver_through_the_daemon_and_a_new_container_keeps_the_device() {
    let rt = baaaht_tests::runtime();
    let _entered = rt.enter();
    let synapse = synapse();
    let bot = synapse.register(BOT.0, BOT.1).expect("bot");
    let alice = synapse.register(ALICE.0, ALICE.1).expect("alice");
    let mut options = matrix_options();
    // The homeserver is on loopback, which the egress filter lets in only when told to.
    options.env.push(("BAAAHT__TOOLS__WEB_PROXY__ALLOW".into(), format!("[\"127.0.0.1:{}\"]", synapse.tls_port)));
    let (_provider, daemon) = scenario::start(&rt, scenario::echo_brain(), options).expect("daemon");
    let ca = synapse.ca().display().to_string();
    let added = rt.block_on(async {
        let mut host = scenario::host_client(&daemon).await.expect("host client");
        let request = v1::AddGatewayRequest {
            kind: "matrix".into(),
            name: "home".into(),
            homeserver: synapse.tls_url(),
            mode: "container".into(),
            args: ["--user", &bot, "--allow-server", "home.test", "--ca-file", &ca].map(String::from).to_vec(),
            ..Default::default()
        };
        host.admin.add_gateway(request).await.expect("AddGateway").into_inner()
    });
    assert_eq!(added.gateway.as_ref().map(|info| info.namespace.as_str()), Some("matrix:"));
    let logs = || format!("{}\n{}", daemon.log_text(), synapse.log_text());
    let store = tempfile::tempdir().expect("store");
    rt.block_on(async {
        let person = MatrixPerson::sign_in(&synapse.url(), &alice, ALICE.1, store.path()).await.expect("alice");
        let room = person.dm(&bot).await.expect("a DM");
        person.joined(&room, &bot, WAIT).await.unwrap_or_else(|error| panic!("{error}\n{}", logs()));
        let asked = person.say(&room, "from a container").await.expect("say");
        let answered = person.wait_for_answer(&asked, WAIT, |text| text == "echo: from a container").await;
        assert!(answered.is_ok(), "{answered:?}\n{}", logs());
        let container = baaaht_tests::gateway::only_container(&daemon);
        // From inside, the egress socket opens the homeserver only.
        let refused = baaaht_tests::gateway::egress_from_inside(&container, baaaht_tests::gateway::EGRESS_SOCKET);
        assert!(refused.starts_with("HTTP/1.1 403 Forbidden"), "{refused}");
        assert!(
            refused.contains(&format!("127.0.0.1:{}", synapse.tls_port)),
            "the host it may reach is named: {refused}"
        );

        // The container goes: the daemon starts another, which goes on as the same device with
        // the keys kept in the gateway's state folder, so Alice reads what it writes.
        baaaht_tests::docker(&["rm", "-f", &container]).expect("remove the container");
        let asked = person.say(&room, "after the container was replaced").await.expect("say");
        let answered =
            person.wait_for_answer(&asked, 2 * WAIT, |text| text == "echo: after the container was replaced").await;
        assert!(answered.is_ok(), "{answered:?}\n{}", logs());
        assert_eq!(person.undecryptable(), 0, "no \"unable to decrypt\" after the container was replaced");
        let bot_id = matrix_sdk::ruma::UserId::parse(bot.as_str()).expect("user id");
        let devices = person.client.encryption().get_user_devices(&bot_id).await.expect("the bot's devices");
        assert_eq!(devices.devices().count(), 1, "the bot has one device, kept across containers");
    });
}
