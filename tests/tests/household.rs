//! A household under load for two minutes with every fault `baaaht-bench household --faults
//! --dockerd` injects (issue 39): 25 people in 5 groups, three of them on the web (the real
//! `baaaht-web`, signed in through the real OIDC provider), three on Slack (the real
//! `baaaht-slack` in its container) and three at the real TUI in a terminal, a task of each
//! group's every minute; containers killed, the model failing (500, 429) and stalling, baaahtd killed with
//! SIGKILL and restarted, the data dir's filesystem full, the web's sign-in provider away,
//! dockerd restarted. Nothing is lost or doubled: every message is answered, or refused with a
//! sentence its sender saw; no scheduled slot runs twice; nothing is left behind.

use std::time::Duration;

use baaaht_tests::household::{self, Kind, Outcome, Plan};

#[test]
fn a_household_loses_and_doubles_nothing_through_every_fault() {
    let plan = Plan {
        users: 25,
        groups: 5,
        run_for: Duration::from_secs(120),
        message_every: Duration::from_secs(20),
        faults: true,
        restart_dockerd: true,
        web_people: 3,
        slack_people: 3,
        tui_people: 3,
        outage: Duration::from_secs(15),
        containers: None,
        pools: false,
    };
    let report = baaaht_tests::runtime().block_on(household::run(plan)).expect("the household runs");
    let logs = || format!("{}\n\nfaults: {:#?}\nrefusals: {:#?}", report.logs, report.faults, report.refusals());

    // Every fault was injected.
    let injected: Vec<&str> = report.faults.iter().map(|(_, what)| what.as_str()).collect();
    for fault in [
        "docker kill",
        "answering 500",
        "kill -9 baaahtd",
        "answering 429",
        "stalling",
        "full",
        "provider away",
        "dockerd",
    ] {
        assert!(injected.iter().any(|what| what.contains(fault)), "not injected: {fault}; {injected:?}");
    }
    assert!(!injected.iter().any(|what| what.contains("none running")), "nothing was there to kill: {injected:?}");
    // The Slack gateway's container (always running) among them.
    assert!(injected.iter().any(|what| what.contains("baaaht-gateway-")), "the gateway not killed: {injected:?}");
    // Nothing lost, nothing doubled.
    let lost = report.lost();
    // What went wrong is printed after the logs, where a cut-off tail of the output still shows it.
    assert!(lost.is_empty(), "{}\n\nlost: {lost:#?}", logs());
    let doubled = report.doubled();
    assert!(doubled.is_empty(), "{}\n\ndoubled: {doubled:#?}", logs());
    // Each kind of message was answered, most of them (the faults refuse some).
    for kind in [Kind::Chat, Kind::Coder, Kind::Mcp, Kind::Group, Kind::Web, Kind::Slack, Kind::Upload, Kind::Tui] {
        let answered = report.count(|sent| sent.kind == kind && sent.outcome == Outcome::Answered);
        assert!(answered > 0, "{}\n\nno {kind:?} answered", logs());
    }
    // Most of what was sent while no fault was in force was answered (a fault's effects last a
    // while after it: containers restart, the engine is probed again).
    let quiet = report.count(|sent| sent.fault.is_none());
    let answered = report.count(|sent| sent.fault.is_none() && sent.outcome == Outcome::Answered);
    assert!(answered * 2 > quiet, "{}\n\n{answered} of {quiet} sent without a fault answered", logs());
    // Every refusal is a sentence its sender saw, and a refusal of the daemon's is a sentence
    // for a person, never an internal error's detail (a full disk under a container's start
    // included). An Assistant passing on what a tool told it, "Sorry, …", speaks for itself.
    assert!(report.refusals().iter().all(|(why, _)| !why.trim().is_empty()), "{:#?}", report.refusals());
    for (why, _) in report.refusals().into_iter().filter(|(why, _)| !why.starts_with("Sorry")) {
        let detail =
            ["os error", "could not be recorded", "cannot record"].into_iter().find(|detail| why.contains(detail));
        assert!(detail.is_none(), "refused with: {why}");
    }
    // The scheduler ran each slot once at most, and every slot that came due ran or was skipped
    // on purpose, with its reason (the previous run still going while the model stalled); the
    // minute begun as the run ends may not have ticked yet.
    for task in &report.tasks {
        assert_eq!(task.twice, 0, "a slot ran twice: {task:?}");
        assert!(task.run + task.skipped.len() >= task.due.saturating_sub(1), "{}\n\n{task:?}", logs());
        assert!(task.skipped.iter().all(|reason| !reason.trim().is_empty()), "{task:?}");
    }
    // Stopped as systemd stops it, the daemon left nothing behind.
    assert_eq!(report.stop_failed, None, "{}\n\nstopped in {:?}", logs(), report.stopped_in);
    assert_eq!(report.leftover_containers, Vec::<String>::new());
    assert_eq!(report.leftover_mounts, Vec::<String>::new());
    // The TUIs came back by themselves after the daemon's restart.
    assert_eq!(report.tui_not_connected, Vec::<String>::new());
}
