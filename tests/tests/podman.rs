//! The daemon on Podman (its Docker-compatible API, runc, explicit ulimits): a turn in which
//! the Coder writes and runs a script, and the isolation tiers where the engine offers no
//! gVisor (Podman here): `auto` falls back to runc and the log says why, `gvisor` is refused
//! with the fix. `scripts/test` starts Podman's service on /run/podman/podman.sock and builds
//! the base image into it (README, "Podman"); without them these tests fail and say so.

use std::time::Duration;

use baaaht_tests::scenario::{self, coder_brain, message, user, HELLO};
use baaaht_tests::DaemonOptions;

const PODMAN_SOCKET: &str = "/run/podman/podman.sock";

/// Options that put the daemon on Podman; fails the test, with the fix, when Podman is not there.
fn on_podman(mut options: DaemonOptions) -> DaemonOptions {
    let answers = std::process::Command::new("curl")
        .args(["-sf", "--max-time", "10", "--unix-socket", PODMAN_SOCKET, "http://d/_ping"])
        .output()
        .is_ok_and(|output| output.status.success());
    assert!(
        answers,
        "Podman's API does not answer on {PODMAN_SOCKET}: start it with `podman system service --time=0 \
         unix://{PODMAN_SOCKET} &` and build the image with `BAAAHT__CONTAINER__RUNTIME=podman baaahtd images build` \
         (scripts/test does both)"
    );
    options.env.push(("BAAAHT__CONTAINER__RUNTIME".into(), "podman".into()));
    options
}

#[test]
fn a_coder_turn_runs_on_podman_where_auto_isolation_falls_back_to_runc_and_says_why() {
    let rt = baaaht_tests::runtime();
    let (_fake, daemon) =
        scenario::start(&rt, coder_brain(), on_podman(DaemonOptions::default())).expect("fake provider and daemon");
    rt.block_on(async {
        let mut client = scenario::host_client(&daemon).await.expect("connect");
        let turn = scenario::turn(
            &mut client,
            message(user("alice"), "alice", "Write hello.sh and run it, please."),
            Duration::from_secs(180),
        )
        .await
        .unwrap_or_else(|error| panic!("{error:#}\n{}", daemon.log_text()));
        let reply = turn.reply.clone().unwrap_or_else(|| panic!("no reply: {:?}\n{}", turn.error, daemon.log_text()));
        assert!(reply.content.contains(HELLO), "{reply:?}");
    });
    let log = daemon.log_text();
    assert!(log.contains(r#""engine":"podman""#), "not on Podman:\n{log}");
    assert!(
        log.contains("gVisor is not available (gVisor is offered on Docker only")
            && log.contains("roles set to auto run under runc"),
        "{log}"
    );
    // The doctor says which tier each role got and why, and proves runc from inside.
    let said = daemon.cli(&["doctor", "--role", "coder"]);
    assert!(said.contains("[ok  ] started under runc, runs on the host's kernel"), "{said}");
    assert!(said.contains("coder       runc    (asked auto): gVisor is offered on Docker only"), "{said}");
}

#[test]
fn gvisor_asked_for_where_the_engine_has_none_is_refused_with_the_fix() {
    let options = DaemonOptions {
        env: vec![("BAAAHT__CONTAINER__ISOLATION".into(), r#"{"coder": "gvisor"}"#.into())],
        ..DaemonOptions::default()
    };
    let daemon = baaaht_tests::TestDaemon::start(on_podman(options)).expect("daemon starts");
    let refused = std::process::Command::new(baaaht_tests::bin("baaaht"))
        .args(["doctor", "--role", "coder"])
        .env("BAAAHT_SOCKET", daemon.socket())
        .output()
        .expect("baaaht doctor runs");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{said}");
    assert!(
        said.contains("coder containers: container.isolation asks for gVisor, but gVisor is offered on Docker only")
            && said.contains("install Debian's runsc and register it with the engine"),
        "{said}"
    );
    assert!(daemon.log_text().contains("those set to gvisor are refused"), "{}", daemon.log_text());
}
