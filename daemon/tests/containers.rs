//! Component tests against a real container engine: every container is hardened, and the
//! lifecycle rules of spec §5.4 hold (timeouts, exit codes, OOM, pids, start retries, logs,
//! orphans). With BAAAHT_TEST_PODMAN=1 the same suite runs against Podman (README, "Podman").

mod common;

use std::net::TcpListener;
use std::time::Duration;

use baaaht_daemon::base::auth::{Context, Role};
use baaaht_daemon::sandbox::container::manager::{ContainerError, RunRequest, RunStatus, BINARIES_MOUNT};
use baaaht_daemon::sandbox::container::MountSpec;
use baaaht_proto::selftest::SelfTestReport;

/// Overrides every test in this file uses: the engine under test.
fn engine_env() -> Vec<(&'static str, &'static str)> {
    if std::env::var("BAAAHT_TEST_PODMAN").as_deref() == Ok("1") {
        vec![("BAAAHT__CONTAINER__RUNTIME", "podman")]
    } else {
        vec![("BAAAHT__CONTAINER__RUNTIME", "docker")]
    }
}

async fn start(extra: &[(&'static str, &'static str)]) -> common::Running {
    common::require_engine().await;
    let mut env = engine_env();
    env.extend_from_slice(extra);
    common::start(&env).await
}

fn request(command: &[&str], timeout: Duration) -> RunRequest {
    RunRequest {
        role: Role::Tool,
        session_id: "s-test".into(),
        context: Context::user("alice"),
        command: command.iter().map(|part| part.to_string()).collect(),
        mounts: vec![],
        env: vec![],
        timeout,
        daemon_socket: false,
        working_dir: None,
        image: None,
        limits: None,
    }
}

/// The host's address on the engine's bridge (docker0), where a test server is reachable from
/// the host but must not be from a network-less container; loopback when there is no bridge.
fn bridge_address() -> std::net::IpAddr {
    let output = std::process::Command::new("ip").args(["-4", "-o", "addr", "show", "docker0"]).output();
    let text = output.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    text.split_whitespace()
        .skip_while(|word| *word != "inet")
        .nth(1)
        .and_then(|cidr| cidr.split('/').next())
        .and_then(|ip| ip.parse().ok())
        .unwrap_or(std::net::IpAddr::from([127, 0, 0, 1]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_is_confined_as_designed() {
    let running = start(&[]).await;
    let server = TcpListener::bind((bridge_address(), 0)).expect("test server on the bridge");
    server.set_nonblocking(true).expect("nonblocking");
    let probe = server.local_addr().expect("address").to_string();
    let agent = format!("{BINARIES_MOUNT}/baaaht-agent");
    let mut run = request(&[&agent, "self-test", "--probe", &probe], Duration::from_secs(60));
    run.daemon_socket = true;
    let outcome = running.shared.containers.run(run).await.expect("runs");
    let stdout = String::from_utf8_lossy(&outcome.output.stdout);
    let report: SelfTestReport = serde_json::from_str(stdout.trim()).unwrap_or_else(|error| {
        panic!("no report ({error}): {stdout} / {}", outcome.stderr_tail(10));
    });
    assert_eq!((report.uid, report.gid), (1000, 1000));
    assert_eq!(report.cap_eff, "0000000000000000");
    assert_eq!(report.cap_bnd, "0000000000000000");
    assert!(report.no_new_privs);
    assert_eq!(report.seccomp, "filter");
    assert!(report.root_read_only, "writing to / succeeded");
    assert!(report.tmp_writable);
    assert!(report.unshare_blocked && report.mount_blocked && report.ptrace_blocked, "{report:?}");
    assert_eq!(report.interfaces, vec!["lo".to_string()]);
    assert!(!report.probe_reachable, "reached {probe}");
    assert!(report.daemon_socket, "its own daemon socket did not answer");
    assert_eq!(report.problems, Vec::<String>::new());
    assert_eq!(outcome.status, RunStatus::Exited(0));
    // Nothing connected to the host's test server.
    assert!(server.accept().is_err(), "a container connected to the host");
    // Its logs are kept.
    let logs = running.data_dir.root().join("data/logs").join(&outcome.container_id);
    assert!(std::fs::read_to_string(logs.join("stdout.log")).expect("stdout.log").contains("\"seccomp\":\"filter\""));
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_hog_is_oom_killed_and_reported() {
    let running = start(&[("BAAAHT__CONTAINER__ROLE_LIMITS__TOOL", r#"{"memory": "64m"}"#)]).await;
    let hog = request(&["python3", "-c", "data = b'x' * (400 << 20); print(len(data))"], Duration::from_secs(60));
    let outcome = running.shared.containers.run(hog).await.expect("runs");
    assert_eq!(outcome.status, RunStatus::OutOfMemory { limit_bytes: 64 << 20 });
    assert_eq!(outcome.status.to_string(), "killed: out of memory (limit 64 MiB)");
    running.stop().await;
}

/// A container an operator kills with the engine's CLI is reported as killed, never as out of
/// memory (the OOMKilled flag cannot be trusted, so the engine's `kill` events decide).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_killed_through_the_engine_is_not_reported_as_out_of_memory() {
    let running = start(&[]).await;
    let cli = if std::env::var("BAAAHT_TEST_PODMAN").as_deref() == Ok("1") { "podman" } else { "docker" };
    let mut sleeper = request(&["sleep", "60"], Duration::from_secs(60));
    sleeper.session_id = "s-killed".into();
    let containers = running.shared.containers.clone();
    let run = tokio::spawn(async move { containers.run(sleeper).await });
    let label = format!("label={}=s-killed", baaaht_daemon::sandbox::container::LABEL_SESSION);
    let mut killed = false;
    for _ in 0..200 {
        let found = std::process::Command::new(cli).args(["ps", "-q", "--filter", &label]).output().expect(cli);
        let id = String::from_utf8_lossy(&found.stdout).trim().to_string();
        if !id.is_empty() {
            let status = std::process::Command::new(cli).args(["kill", &id]).status().expect(cli);
            killed = status.success();
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(killed, "the sleeping container never showed up in `{cli} ps`");
    let outcome = run.await.expect("joins").expect("runs");
    assert_eq!(outcome.status, RunStatus::Exited(137));
    assert_eq!(outcome.status.to_string(), "exited with code 137");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_bomb_stays_inside_the_pids_limit() {
    let running = start(&[("BAAAHT__CONTAINER__ROLE_LIMITS__TOOL", r#"{"pids": 48}"#)]).await;
    let script = "import os, time\nn = 0\nfor _ in range(500):\n    try:\n        pid = os.fork()\n    except OSError:\n        break\n    if pid == 0:\n        time.sleep(30)\n        os._exit(0)\n    n += 1\nprint(n)\n";
    let outcome = running.shared.containers.run(request(&["python3", "-c", script], Duration::from_secs(60))).await;
    let outcome = outcome.expect("runs");
    assert_eq!(outcome.status, RunStatus::Exited(0), "{}", outcome.stderr_tail(5));
    let forked: u32 = String::from_utf8_lossy(&outcome.output.stdout).trim().parse().expect("a count");
    assert!((1..48).contains(&forked), "forked {forked} processes with a limit of 48");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleeping_command_is_killed_at_its_timeout_keeping_partial_output() {
    let running = start(&[]).await;
    let started = std::time::Instant::now();
    let outcome = running
        .shared
        .containers
        .run(request(&["sh", "-c", "echo partial; sleep 60"], Duration::from_secs(3)))
        .await
        .expect("runs");
    assert_eq!(outcome.status, RunStatus::TimedOut(Duration::from_secs(3)));
    assert_eq!(outcome.status.to_string(), "killed at its timeout of 3 s");
    assert_eq!(String::from_utf8_lossy(&outcome.output.stdout), "partial\n");
    assert!(started.elapsed() < Duration::from_secs(30), "took {:?}", started.elapsed());
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_reports_its_exit_code_and_stderr_tail() {
    let running = start(&[]).await;
    let outcome = running
        .shared
        .containers
        .run(request(&["sh", "-c", "echo first >&2; echo last >&2; exit 7"], Duration::from_secs(30)))
        .await
        .expect("runs");
    assert_eq!(outcome.status, RunStatus::Exited(7));
    assert_eq!(outcome.stderr_tail(1), "last");
    assert_eq!(outcome.stderr_tail(5), "first\nlast");
    let stderr = running.data_dir.root().join("data/logs").join(&outcome.container_id).join("stderr.log");
    assert_eq!(std::fs::read_to_string(stderr).expect("kept"), "first\nlast\n");
    // The container is gone and forgotten.
    let inventory = running.shared.containers.inventory().await;
    assert!(!inventory.containers.iter().any(|entry| entry.id == outcome.container_id), "{inventory:?}");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_failure_is_retried_once_then_reported_with_the_engines_message() {
    let running = start(&[("BAAAHT__CONTAINER__IMAGE", "baaaht/does-not-exist:never")]).await;
    let error = running.shared.containers.run(request(&["true"], Duration::from_secs(30))).await.expect_err("no image");
    match &error {
        ContainerError::StartFailed { attempts, message } => {
            assert_eq!(*attempts, 2);
            assert!(message.to_lowercase().contains("no such image"), "{message}");
        }
        other => panic!("expected StartFailed, got {other:?}"),
    }
    // Status says why containers cannot run.
    running.shared.containers.check_image().await;
    let problems = running.shared.containers.problems();
    assert!(problems.iter().any(|p| p.contains("run `baaahtd images build`")), "{problems:?}");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_socket_is_never_mounted() {
    let running = start(&[]).await;
    let mut engine = running.shared.engine.clone();
    let ready = engine.wait_for(|engine| engine.runtime.is_some()).await.expect("engine watch").clone();
    let socket = ready.runtime.expect("engine").engine().socket.clone();
    let mut run = request(&["true"], Duration::from_secs(30));
    run.mounts = vec![MountSpec { host: socket, target: "/var/run/docker.sock".into(), read_only: true }];
    let error = running.shared.containers.run(run).await.expect_err("refused");
    assert!(error.to_string().contains("refusing to mount the container engine's socket"), "{error}");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_crash_services_are_adopted_and_everything_else_is_removed() {
    let running = start(&[]).await;
    let data_dir = running.data_dir.clone();
    let containers = running.shared.containers.clone();
    let mut service = request(&["sleep", "3600"], Duration::from_secs(30));
    service.session_id = "s-keep".into();
    let kept = containers.start_service(service.clone()).await.expect("service starts");
    let orphan = containers.start_service(service).await.expect("second service starts");
    // A task container in flight when the daemon dies.
    let in_flight = {
        let containers = containers.clone();
        tokio::spawn(async move { containers.run(request(&["sleep", "3600"], Duration::from_secs(3600))).await })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while containers.inventory().await.containers.len() < 3 {
        assert!(std::time::Instant::now() < deadline, "the task container never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let inventory = containers.inventory().await;
    let task =
        inventory.containers.iter().find(|e| e.name != kept.name && e.name != orphan.name).expect("task").clone();
    drop(containers);
    in_flight.abort();
    let temp = running.crash().await;

    // Forget the second service on disk, as if the crash came before it was recorded.
    let inventory_path = data_dir.state_dir().join("containers.json");
    let text = std::fs::read_to_string(&inventory_path).expect("inventory");
    let mut inventory: serde_json::Value = serde_json::from_str(&text).expect("json");
    inventory["containers"].as_array_mut().expect("list").retain(|entry| entry["name"] != orphan.name.as_str());
    std::fs::write(&inventory_path, serde_json::to_vec(&inventory).expect("encode")).expect("write");

    let restarted = common::start_on(data_dir.clone(), &engine_env()).await;
    let containers = restarted.shared.containers.clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let names: Vec<String> = containers.inventory().await.containers.into_iter().map(|e| e.name).collect();
        if names == vec![kept.name.clone()] && restarted.shared.listeners.container_count() == 1 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not reconciled: {names:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let runtime = restarted.shared.engine.borrow().clone().runtime.expect("engine");
    let owned = runtime
        .list_by_label(&[
            ("baaaht", "1"),
            ("baaaht.owner", &baaaht_daemon::sandbox::container::manager::owner_id(&data_dir)),
        ])
        .await
        .expect("list");
    let names: Vec<&str> = owned.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, vec![kept.name.as_str()], "left unaccounted: {names:?}");
    assert!(owned[0].running, "the adopted service stopped");
    assert!(data_dir.root().join("data/run").join(&kept.name).join("daemon.sock").exists(), "socket not re-created");
    assert!(!data_dir.root().join("data/run").join(&task.name).exists(), "task socket folder left behind");
    // A clean stop removes the adopted service too.
    restarted.stop().await;
    let owned = runtime
        .list_by_label(&[("baaaht.owner", &baaaht_daemon::sandbox::container::manager::owner_id(&data_dir))])
        .await;
    assert!(owned.expect("list").is_empty(), "containers left after a clean stop");
    drop(temp);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_health_and_stop_on_a_running_service() {
    let running = start(&[]).await;
    let service = running.shared.containers.start_service(request(&["sleep", "3600"], Duration::from_secs(30))).await;
    let service = service.expect("starts");
    let runtime = running.shared.engine.borrow().clone().runtime.expect("engine");
    let result = runtime.exec(&service.id, &["sh".into(), "-c".into(), "id -u; echo err >&2; exit 3".into()]).await;
    let result = result.expect("exec");
    assert_eq!(result.exit_code, 3);
    assert_eq!(String::from_utf8_lossy(&result.output.stdout), "1000\n");
    assert_eq!(String::from_utf8_lossy(&result.output.stderr), "err\n");
    let health = runtime.inspect_health(&service.id).await.expect("health");
    assert!(health.running);
    assert_eq!(health.status, "none");
    runtime.stop(&service.id, Duration::from_secs(1)).await.expect("stop");
    assert!(!runtime.inspect_health(&service.id).await.expect("health").running);
    running.shared.containers.stop_service(&service.name).await.expect("removed");
    let error = runtime.inspect_health(&service.id).await.expect_err("gone");
    assert!(matches!(error, baaaht_daemon::sandbox::container::RuntimeError::NotFound(_)), "{error:?}");
    running.stop().await;
}
