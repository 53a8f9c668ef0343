//! Calling the daemon as a gateway does: registering one from the host, connecting on its
//! socket with its token, and naming the end user a call is for.

use std::path::PathBuf;

use baaaht_proto::client::{self, Client, ConnectOptions};
use baaaht_proto::v1;

/// A registered gateway: where it connects and with what.
pub struct Gateway {
    pub socket: PathBuf,
    pub token: String,
}

/// Registers the gateway `request` describes, as the host.
pub async fn add_gateway(host: &mut Client, request: v1::AddGatewayRequest) -> Gateway {
    let added = host.admin.add_gateway(request).await.expect("AddGateway").into_inner();
    Gateway { socket: added.gateway.expect("info").socket.into(), token: added.token }
}

/// Registers a Slack gateway for `team` that the test runs itself (`--mode external`).
pub async fn slack_gateway(host: &mut Client, name: &str, team: &str) -> Gateway {
    let request = v1::AddGatewayRequest {
        kind: "slack".into(),
        name: name.into(),
        team: team.into(),
        mode: "external".into(),
        ..Default::default()
    };
    add_gateway(host, request).await
}

/// Registers the gateway `request` describes (`--mode external`) and starts its `binary` on
/// its socket with its token and `args`, logging to `{binary}.log` in the daemon's data dir.
pub fn run_external(
    rt: &tokio::runtime::Runtime,
    daemon: &crate::TestDaemon,
    request: v1::AddGatewayRequest,
    binary: &str,
    args: &[&str],
) -> (crate::Running, Gateway) {
    let gateway = rt.block_on(async {
        let mut host = crate::scenario::host_client(daemon).await.expect("host client");
        add_gateway(&mut host, v1::AddGatewayRequest { mode: "external".into(), ..request }).await
    });
    let process = start_external(daemon, &gateway, binary, args, &format!("{binary}.log"));
    (process, gateway)
}

/// Where a gateway's `binary` is taken from: `$BAAAHT_GATEWAY_BIN_DIR` when set (a release
/// build's, for a benchmark of its memory), else beside the other binaries.
fn gateway_bin(binary: &str) -> std::path::PathBuf {
    match std::env::var_os("BAAAHT_GATEWAY_BIN_DIR") {
        Some(dir) => std::path::PathBuf::from(dir).join(binary),
        None => crate::bin(binary),
    }
}

/// Starts the registered `gateway`'s `binary` on its socket with its token and `args`, logging
/// to `log` in the daemon's data dir (again, after a restart).
pub fn start_external(
    daemon: &crate::TestDaemon,
    gateway: &Gateway,
    binary: &str,
    args: &[&str],
    log: &str,
) -> crate::Running {
    let mut command = std::process::Command::new(gateway_bin(binary));
    command
        .arg("--socket")
        .arg(&gateway.socket)
        .args(args)
        .env("BAAAHT_GATEWAY_TOKEN", &gateway.token)
        .env("RUST_LOG", "info");
    crate::spawn(command, &daemon.data_dir.join(log)).expect(binary)
}

/// A client on `gateway`'s socket with its token.
pub async fn connect(gateway: &Gateway) -> Client {
    let options = ConnectOptions { token: Some(gateway.token.clone()), ..ConnectOptions::default() };
    client::connect(&gateway.socket, options).await.expect("connect to the gateway socket")
}

/// `message` as the gateway's user `identity` (and with an ID token, for a web gateway).
pub fn as_user<T>(identity: &str, id_token: Option<&str>, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert(baaaht_proto::USER_HEADER, identity.parse().expect("ascii"));
    if let Some(token) = id_token {
        request.metadata_mut().insert(baaaht_proto::ID_TOKEN_HEADER, token.parse().expect("ascii"));
    }
    request
}

/// The one gateway container `daemon` started, checked to have no network of its own.
pub fn only_container(daemon: &crate::TestDaemon) -> String {
    let containers: Vec<String> =
        daemon.recorded_containers().into_iter().filter(|name| name.starts_with("baaaht-gateway-")).collect();
    assert_eq!(containers.len(), 1, "{containers:?}");
    let network =
        crate::docker(&["inspect", "--format", "{{.HostConfig.NetworkMode}}", &containers[0]]).expect("inspect");
    assert_eq!(network.trim(), "none", "the gateway's container has no network of its own");
    containers[0].clone()
}

/// The egress socket of a channel gateway's container.
pub const EGRESS_SOCKET: &str = "/gateway/egress.sock";

/// What the egress socket at `socket` in `container` answers, from inside, to a tunnel asked
/// to example.com:443 (a host no gateway needs; the refusal comes before any lookup).
pub fn egress_from_inside(container: &str, socket: &str) -> String {
    let probe = format!(
        "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect('{socket}')\n\
         s.sendall(b'CONNECT example.com:443 HTTP/1.1\\r\\nHost: example.com:443\\r\\n\\r\\n')\n\
         print(s.recv(4096).decode())"
    );
    crate::docker(&["exec", container, "python3", "-c", &probe]).expect("a connection from inside")
}
