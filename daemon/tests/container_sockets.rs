//! Component test: the daemon in-process on a temp data dir, with container sockets created
//! through its listener set, exercised by a real client over real Unix sockets.

mod common;

use std::os::unix::fs::PermissionsExt;

use baaaht_daemon::base::auth::{ContainerIdentity, Context, Role};
use baaaht_proto::client::{self, ConnectOptions};
use baaaht_proto::v1;

use common::start;

fn identity(name: &str, role: Role, context: Context) -> ContainerIdentity {
    ContainerIdentity { name: name.into(), role, session_id: format!("session-{name}"), context }
}

fn user_ref(id: &str) -> Option<v1::ContextRef> {
    Some(v1::ContextRef { r#type: v1::ContextType::User as i32, id: id.into() })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_acts_only_with_its_own_token_for_its_own_context() {
    let running = start(&[]).await;
    let listeners = running.shared.listeners.clone();
    let alice = listeners.add_container(identity("worker-a", Role::Worker, Context::user("alice"))).expect("socket");
    let bob = listeners.add_container(identity("worker-b", Role::Worker, Context::user("bob"))).expect("socket");

    // The socket lives in a folder only the daemon can traverse on the host.
    assert!(alice.path.starts_with(running.data_dir.root().join("data/run")));
    let run_mode = std::fs::metadata(running.data_dir.root().join("data/run")).expect("stat").permissions().mode();
    assert_eq!(run_mode & 0o777, 0o700);
    assert_eq!(std::fs::metadata(&alice.path).expect("stat").permissions().mode() & 0o777, 0o600);

    let connect = |path: std::path::PathBuf, token: Option<String>| async move {
        client::connect(&path, ConnectOptions { token, ..Default::default() }).await.expect("connect")
    };
    let manifest = |id: &str| v1::SkillManifestRequest { context: user_ref(id) };

    // Right token, own context: authorized.
    let mut client = connect(alice.path.clone(), Some(alice.token.clone())).await;
    let found = client.skills.get_skill_manifest(manifest("alice")).await.expect("authorized").into_inner();
    assert!(found.skills.iter().all(|skill| skill.scope == "system"), "{found:?}");

    // Another context: denied.
    let error = client.skills.get_skill_manifest(manifest("bob")).await.expect_err("other context");
    assert_eq!(error.code(), tonic::Code::PermissionDenied);
    assert_eq!(error.message(), "context user:bob is outside this container's context user:alice");

    // A host-client RPC: denied for a container.
    let error = client.system.get_status(v1::StatusRequest::default()).await.expect_err("host only");
    assert_eq!(error.code(), tonic::Code::PermissionDenied);
    assert!(error.message().starts_with("GetStatus is for host clients"), "{}", error.message());

    // A role's RPC another role may not call.
    let error = client.agents.delegate_to_agent(v1::DelegateRequest::default()).await.expect_err("assistant only");
    assert_eq!(error.code(), tonic::Code::PermissionDenied);

    // No token, a wrong token, and bob's token on alice's socket: unauthenticated.
    for token in [None, Some("0".repeat(64)), Some(bob.token.clone())] {
        let mut client = connect(alice.path.clone(), token.clone()).await;
        let error = client.skills.get_skill_manifest(manifest("alice")).await.expect_err("refused");
        assert_eq!(error.code(), tonic::Code::Unauthenticated, "{token:?}: {error:?}");
    }

    // A container token on the host socket: refused, and the message says why.
    let mut host = connect(running.data_dir.socket_path(), Some(alice.token.clone())).await;
    let error = host.system.get_status(v1::StatusRequest::default()).await.expect_err("wrong socket");
    assert_eq!(error.code(), tonic::Code::Unauthenticated);
    assert!(error.message().contains("only accepted on the socket of the container"), "{}", error.message());

    assert_eq!(listeners.container_count(), 2);

    // Removal revokes the token on open connections and removes the socket.
    listeners.remove_container("worker-a");
    let error = client.skills.get_skill_manifest(manifest("alice")).await.expect_err("revoked");
    assert_eq!(error.code(), tonic::Code::Unauthenticated);
    assert!(!alice.folder.exists(), "socket folder left behind");
    let reconnect = client::connect(&alice.path, ConnectOptions::default()).await;
    assert!(reconnect.is_err(), "the socket still accepts");

    running.stop().await;
    assert!(!bob.folder.exists(), "shutdown leaves container sockets");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_names_cannot_escape_the_socket_folder() {
    let running = start(&[]).await;
    let listeners = running.shared.listeners.clone();
    for name in ["../evil", "a/b", "", ".."] {
        let error = listeners.add_container(identity(name, Role::Tool, Context::user("alice"))).expect_err(name);
        assert!(error.to_string().contains("is not usable as a folder name"), "{error}");
    }
    listeners.add_container(identity("tool-1", Role::Tool, Context::user("alice"))).expect("first");
    let error = listeners.add_container(identity("tool-1", Role::Tool, Context::user("alice"))).expect_err("dup");
    assert!(error.to_string().contains("already exists"), "{error}");
    running.stop().await;
}
