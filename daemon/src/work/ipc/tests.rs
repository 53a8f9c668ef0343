use std::collections::BTreeMap;

use super::results::KEPT_REJECTED;
use super::*;

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("folder")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

fn open(temp: &tempfile::TempDir) -> (Arc<Ipc>, PathBuf, PathBuf) {
    let (ipc_dir, state_dir) = (temp.path().join("ipc"), temp.path().join("state"));
    std::fs::create_dir_all(&state_dir).expect("state");
    std::fs::create_dir_all(&ipc_dir).expect("ipc");
    (Arc::new(Ipc::open(ipc_dir.clone(), &state_dir, false).expect("open")), ipc_dir, state_dir)
}

fn workspaces(temp: &tempfile::TempDir) -> crate::sandbox::workspace::Workspaces {
    std::fs::create_dir_all(temp.path().join("sessions")).expect("sessions");
    crate::sandbox::workspace::Workspaces::new(
        temp.path().join("sessions"),
        1 << 20,
        crate::base::config::WorkspaceLimit::Checked,
        1,
    )
}

#[test]
fn a_messages_files_are_kept_in_its_session_and_named_by_its_event_and_a_bad_one_refuses_it() {
    let temp = tempfile::tempdir().expect("tempdir");
    let (ipc, _, state_dir) = open(&temp);
    let workspaces = workspaces(&temp);
    let alice = Context::user("alice");
    let lease = ipc.prepare(&alice, "s1", false).expect("prepare");
    let messages = lease.path.join("messages");
    write(&messages.join("m1.files/chart.png"), "\u{89}PNG");
    write(
        &messages.join("m1.json"),
        r#"{"id":"m1","content":"the chart","files":["chart.png"],"correlationId":"c-4f2a"}"#,
    );
    write(&messages.join("m2.json"), r#"{"id":"m2","content":"a missing file","files":["gone.pdf"]}"#);
    write(&messages.join("m3.files/x"), "x");
    std::os::unix::fs::symlink("/etc/hostname", messages.join("m3.files/host.txt")).expect("link");
    write(&messages.join("m3.json"), r#"{"id":"m3","content":"a link","files":["host.txt"]}"#);
    let bus = crate::store::events::EventBus::default();
    let mut events = bus.subscribe();
    assert_eq!(ipc.deliver_messages(&bus, &workspaces, &mut BTreeMap::new()), 1);
    let (_, event) = events.try_recv().expect("one event");
    assert_eq!(event.correlation_id, "c-4f2a", "the delivery names the request the message came from");
    let crate::store::events::Kind::Message { content, attachments, .. } = event.kind else { panic!("a message") };
    assert_eq!(content, "the chart");
    assert_eq!(attachments.len(), 1);
    assert_eq!((attachments[0].path.as_str(), attachments[0].session.as_str()), ("sent/chart.png", "s1"));
    assert_eq!(workspaces.sent("s1", "chart.png", 100).expect("read").as_deref(), Some("\u{89}PNG".as_bytes()));
    assert!(events.try_recv().is_err(), "the others were refused");
    for gone in ["m1.json", "m1.files", "m2.json", "m3.json", "m3.files"] {
        assert!(!messages.join(gone).exists(), "{gone} was collected");
    }
    let rejected = std::fs::read_dir(state_dir.join("ipc-rejected/user-alice")).expect("rejected").count();
    assert!(rejected >= 1, "the refused messages were set aside");
}

#[test]
fn a_pooled_folder_is_nobodys_until_a_session_takes_it_and_never_replaces_a_slot() {
    let temp = tempfile::tempdir().expect("tempdir");
    let (ipc, ipc_dir, _) = open(&temp);
    let workspaces = workspaces(&temp);
    let bus = crate::store::events::EventBus::default();
    let pooled = ipc.pooled("p1").expect("pooled");
    assert_eq!(pooled.path, ipc_dir.join("pool/p1"));
    // No pass reads the pool's folders, and one that holds anything is not handed on.
    write(&pooled.path.join("messages/m1.json"), r#"{"id":"m1","content":"nobody's"}"#);
    assert_eq!(ipc.deliver_messages(&bus, &workspaces, &mut BTreeMap::new()), 0);
    let alice = Context::user("alice");
    assert!(ipc.adopt(pooled, &alice, "s0").expect("adopt").is_none());
    ipc.sweep();
    assert!(!ipc_dir.join("pool/p1").exists() && !ipc_dir.join("user-alice/tools-s0").exists());
    let pooled = ipc.pooled("p1").expect("pooled");

    let lease = ipc.adopt(pooled, &alice, "s1").expect("adopt").expect("a new session takes it");
    assert_eq!(lease.path, ipc_dir.join("user-alice/tools-s1"));
    assert!(!ipc_dir.join("pool/p1").exists());
    assert_eq!(ipc.held_slots(), vec![("user-alice/tools-s1".to_string(), alice.clone())]);
    write(&lease.path.join("messages/m2.json"), r#"{"id":"m2","content":"hers"}"#);
    let mut events = bus.subscribe();
    assert_eq!(ipc.deliver_messages(&bus, &workspaces, &mut BTreeMap::new()), 1);
    assert_eq!(events.try_recv().expect("delivered").1.session, "s1");

    // A slot that is there stays its session's: the pooled folder is let go instead.
    let second = ipc.pooled("p2").expect("pooled");
    assert!(ipc.adopt(second, &alice, "s1").expect("adopt").is_none());
    ipc.sweep();
    assert!(!ipc_dir.join("pool/p2").exists());
    assert!(lease.path.join("results").is_dir());
    assert!(ipc.pooled("../p3").is_err());
}

#[test]
fn results_are_collected_once_and_survive_a_restart() {
    let temp = tempfile::tempdir().expect("tempdir");
    let (ipc, ipc_dir, state_dir) = open(&temp);
    let alice = Context::user("alice");
    let lease = ipc.prepare(&alice, "s1", true).expect("prepare");
    assert_eq!(lease.checked_cap, Some(SLOT_CAP), "without a filesystem the runner checks the cap");
    let results = lease.path.join("results");
    let file = results.join("toolu_1.json");
    write(&file, r#"{"callId":"toolu_1","tool":"exec","content":"exit code 0","isError":false,"durationMs":5}"#);
    write(&results.join("bad.json"), "{not json");
    write(&results.join("other.json"), r#"{"callId":"toolu_9","tool":"x","content":"","isError":false}"#);

    assert_eq!(ipc.collect_all(), 1);
    assert!(!file.exists(), "a collected file is removed");
    let rejected = state_dir.join("ipc-rejected/user-alice/coder-s1");
    assert!(rejected.join("bad.json").exists());
    assert!(rejected.join("other.json").exists(), "a file naming another call is rejected");
    assert_eq!(ipc.recorded(&alice, "toolu_1").map(|r| r.content).as_deref(), Some("exit code 0"));
    assert!(ipc.recorded(&Context::user("bob"), "toolu_1").is_none(), "the folder is the authority");

    // A file recorded but not removed before a crash is only removed the next time.
    write(&file, r#"{"callId":"toolu_1","tool":"exec","content":"a second run","isError":false}"#);
    let reopened = Ipc::open(ipc_dir, &state_dir, false).expect("reopen");
    assert_eq!(reopened.collect_all(), 1);
    assert_eq!(reopened.recorded(&alice, "toolu_1").map(|r| r.content).as_deref(), Some("exit code 0"));
    assert!(!file.exists());
}

#[test]
fn links_a_container_leaves_are_never_followed() {
    let temp = tempfile::tempdir().expect("tempdir");
    let (ipc, ipc_dir, state_dir) = open(&temp);
    let host = temp.path().join("host");
    write(&host.join("keep.json"), r#"{"callId":"keep","tool":"x","content":"","isError":false}"#);
    let alice = Context::user("alice");
    let lease = ipc.prepare(&alice, "s1", false).expect("prepare");
    let slot = lease.path.clone();
    for sub in ["results", "messages"] {
        std::fs::remove_dir(slot.join(sub)).expect("rmdir");
        std::os::unix::fs::symlink(&host, slot.join(sub)).expect("symlink");
    }
    assert_eq!(ipc.collect_all(), 0);
    let bus = crate::store::events::EventBus::default();
    assert_eq!(ipc.deliver_messages(&bus, &workspaces(&temp), &mut BTreeMap::new()), 0);
    assert!(host.join("keep.json").exists(), "nothing was moved out of the link's target");
    assert!(!state_dir.join("ipc-rejected").exists());
    // The next container start makes real folders again.
    let _again = ipc.prepare(&alice, "s1", false).expect("prepare again");
    for sub in ["results", "messages"] {
        assert!(std::fs::symlink_metadata(slot.join(sub)).expect("stat").is_dir(), "{sub}");
    }
    assert!(host.join("keep.json").exists());
    assert!(ipc_dir.join("user-alice").is_dir());
}

#[test]
fn only_a_sessions_tool_container_delivers_messages_to_its_own_context_and_session() {
    let temp = tempfile::tempdir().expect("tempdir");
    let (ipc, _, _) = open(&temp);
    let alice = Context::user("alice");
    let (tools_lease, coder_lease) =
        (ipc.prepare(&alice, "s1", false).expect("prepare"), ipc.prepare(&alice, "s1", true).expect("prepare"));
    let (tools, coder) = (tools_lease.path.clone(), coder_lease.path.clone());
    assert!(!coder.join("messages").exists(), "a Coder gets no messages folder");
    write(&coder.join("messages/m1.json"), r#"{"id":"m1","content":"from the coder"}"#);
    write(&tools.join("messages/m2.json"), r#"{"id":"m2","content":"hello","sessionId":"s-other"}"#);
    let bus = crate::store::events::EventBus::default();
    let mut events = bus.subscribe();
    assert_eq!(ipc.deliver_messages(&bus, &workspaces(&temp), &mut BTreeMap::new()), 1);
    let (context, event) = events.try_recv().expect("one event");
    assert_eq!((context, event.session.as_str()), (alice, "s1"));
    assert!(events.try_recv().is_err(), "nothing from the coder's folder");
    assert!(coder.join("messages/m1.json").exists());
}

#[test]
fn task_requests_of_a_sessions_tool_container_schedule_once_for_its_own_context() {
    let temp = tempfile::tempdir().expect("tempdir");
    let (ipc, _, state_dir) = open(&temp);
    let alice = Context::user("alice");
    let (tools_lease, coder_lease) =
        (ipc.prepare(&alice, "s1", false).expect("prepare"), ipc.prepare(&alice, "s1", true).expect("prepare"));
    let (tools, coder) = (tools_lease.path.clone(), coder_lease.path.clone());
    assert!(!coder.join("tasks").exists(), "a Coder gets no tasks folder");
    let settings = crate::drive::scheduler::Settings {
        timezone: "UTC".into(),
        max_failures: 5,
        poll: std::time::Duration::from_secs(60),
        grace: std::time::Duration::from_secs(90),
    };
    let scheduler =
        crate::drive::scheduler::Scheduler::open(&state_dir, settings, crate::drive::scheduler::Clock::System)
            .expect("scheduler");
    let inbox = crate::store::inbox::Inbox::new(state_dir.join("inbox"));
    write(&tools.join("tasks/t1.json"), r#"{"id":"t1","prompt":"water the plants","cron":"0 9 * * 1"}"#);
    write(&tools.join("tasks/t2.json"), r#"{"id":"t2","prompt":"x","cron":"0 25 * * *"}"#);
    write(&tools.join("tasks/t3.json"), r#"{"id":"other","prompt":"x","cron":"0 9 * * *"}"#);
    let take = |ipc: &Ipc| {
        ipc.take_task_requests(&mut |context, _, request| {
            crate::drive::scheduler::schedule_requested(&scheduler, &inbox, context, request)
        })
    };
    assert_eq!(take(&ipc), 1);
    let listed = scheduler.list(&crate::drive::scheduler::Filter::default());
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].user_id.as_str(), listed[0].prompt.as_str()), ("alice", "water the plants"));
    let told = inbox.list(&alice, true, false).expect("inbox");
    assert_eq!(told.len(), 1, "the refused request is told");
    assert!(told[0].content.contains("the hour field `25`"), "{}", told[0].content);
    // The same request again (a crash before its file went) schedules nothing new.
    write(&tools.join("tasks/t1.json"), r#"{"id":"t1","prompt":"water the plants","cron":"0 9 * * 1"}"#);
    assert_eq!(take(&ipc), 1);
    assert_eq!(scheduler.count(), 1);
    assert!(std::fs::read_dir(tools.join("tasks")).expect("tasks").next().is_none(), "every file handled");
    // Bob's request with the same id is bob's own task.
    let bob_lease = ipc.prepare(&Context::user("bob"), "s2", false).expect("prepare");
    let bob = bob_lease.path.clone();
    write(&bob.join("tasks/t1.json"), r#"{"id":"t1","prompt":"feed the cat","cron":"0 8 * * *"}"#);
    assert_eq!(take(&ipc), 1);
    let bobs =
        scheduler.list(&crate::drive::scheduler::Filter { context: Some(Context::user("bob")), ..Default::default() });
    assert_eq!(bobs.iter().map(|task| task.prompt.as_str()).collect::<Vec<_>>(), ["feed the cat"]);
}

#[test]
fn a_folder_no_container_holds_goes_once_what_it_queued_was_taken() {
    let temp = tempfile::tempdir().expect("tempdir");
    let (ipc, ipc_dir, state_dir) = open(&temp);
    let alice = Context::user("alice");
    let first = ipc.prepare(&alice, "s1", false).expect("prepare");
    let second = ipc.prepare(&alice, "s1", false).expect("a second container of the session");
    let slot = first.path.clone();
    write(&slot.join("results/toolu_7.json"), r#"{"callId":"toolu_7","tool":"x","content":"late","isError":false}"#);
    write(&slot.join("results/junk/deep/file.bin"), "junk");
    // A big malformed file is deleted, not kept.
    write(&slot.join("results/big.json"), &"x".repeat(2 << 20));
    drop(first);
    ipc.sweep();
    assert!(slot.is_dir(), "a folder still held stays");
    drop(second);
    ipc.sweep();
    assert!(!slot.exists(), "the folder went");
    assert_eq!(ipc.recorded(&alice, "toolu_7").map(|r| r.content).as_deref(), Some("late"), "its result first");
    assert!(!state_dir.join("ipc-rejected/user-alice/tools-s1/big.json").exists());
    // Folders left by an earlier daemon go at its first sweep.
    let left = ipc.prepare(&alice, "s2", true).expect("prepare");
    std::mem::forget(left);
    let reopened = Ipc::open(ipc_dir.clone(), &state_dir, false).expect("reopen");
    reopened.sweep();
    assert!(!ipc_dir.join("user-alice/coder-s2").exists());
}

#[test]
fn set_aside_files_are_kept_to_a_hundred_a_context() {
    let temp = tempfile::tempdir().expect("tempdir");
    let (ipc, _, state_dir) = open(&temp);
    let lease = ipc.prepare(&Context::user("alice"), "s1", true).expect("prepare");
    for n in 0..130 {
        write(&lease.path.join(format!("results/bad{n}.json")), "{");
    }
    ipc.collect_all();
    let kept = std::fs::read_dir(state_dir.join("ipc-rejected/user-alice/coder-s1")).expect("kept").count();
    assert_eq!(kept, KEPT_REJECTED);
}

#[test]
fn call_ids_are_file_names() {
    assert!(is_valid_call_id("toolu_01A09q90qw90lq917835lq9"));
    assert!(is_valid_call_id("call_abc-123"));
    assert!(!is_valid_call_id("../x"));
    assert!(!is_valid_call_id(""));
    assert!(!is_valid_call_id(&"a".repeat(129)));
    assert_eq!(slot_of("tools-s-1.x"), Some(("s-1.x", false)));
    assert_eq!(slot_of("coder-s1"), Some(("s1", true)));
    assert_eq!(slot_of("results"), None);
    assert_eq!(slot_of("tools-.."), None);
}
