//! An engine that answers its version but hangs on everything else: the daemon must go
//! degraded (visible in status) and recover by itself when the engine answers again.
//!
//! The stand-in engine is a Unix socket speaking just enough of the Engine API (`/_ping`,
//! `/version`, `/info`); a real dockerd cannot be made to hang without disturbing every other test.

mod common;

use std::time::Duration;

use baaaht_daemon::sandbox::container::EngineStatus;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const VERSION: &str = r#"{"Version":"20.10.24-standin","ApiVersion":"1.41","MinAPIVersion":"1.12","Os":"linux","Arch":"amd64","Components":[{"Name":"Engine","Version":"20.10.24-standin"}]}"#;

/// Serves `/_ping` and `/version`; every other request gets no answer at all.
async fn stand_in_engine(listener: tokio::net::UnixListener) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else { return };
        tokio::spawn(async move {
            let mut buffer = Vec::new();
            let mut chunk = [0u8; 4096];
            loop {
                let Ok(n) = stream.read(&mut chunk).await else { return };
                if n == 0 {
                    return;
                }
                buffer.extend_from_slice(&chunk[..n]);
                while let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
                    buffer.drain(..end + 4);
                    let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
                    let body = if path.ends_with("/_ping") {
                        "OK"
                    } else if path.ends_with("/version") {
                        VERSION
                    } else if path.ends_with("/info") {
                        // The runtimes, asked at connect (runc only: no gVisor here).
                        r#"{"Runtimes":{"runc":{"path":"runc"}}}"#
                    } else {
                        // Hang: hold the connection and never answer.
                        std::future::pending::<()>().await;
                        return;
                    };
                    let response = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nApi-Version: 1.41\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if stream.write_all(response.as_bytes()).await.is_err() {
                        return;
                    }
                }
            }
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_engine_means_degraded_mode_and_recovery_by_itself() {
    let temp = tempfile::tempdir().expect("tempdir");
    let socket = temp.path().join("engine.sock");
    let listener = tokio::net::UnixListener::bind(&socket).expect("bind");
    let engine_task = tokio::spawn(stand_in_engine(listener));
    let socket_text = socket.display().to_string();
    let running =
        common::start(&[("BAAAHT__CONTAINER__SOCKET", &socket_text), ("BAAAHT__CONTAINER__ENGINE_TIMEOUT", "1")]).await;
    let mut engine = running.shared.engine.clone();

    // Ready first: the version answers.
    let ready =
        tokio::time::timeout(Duration::from_secs(20), engine.wait_for(|e| matches!(e.status, EngineStatus::Ready(_))));
    ready.await.expect("ready in time").expect("watch");
    // Reconciling lists containers: that call hangs, and the daemon goes degraded.
    let degraded = tokio::time::timeout(
        Duration::from_secs(20),
        engine.wait_for(
            |e| matches!(&e.status, EngineStatus::Unavailable { reason } if reason.contains("did not answer")),
        ),
    );
    let status = degraded.await.expect("degraded in time").expect("watch").status.clone();
    let reason = status.degraded_reason().expect("a reason");
    assert!(reason.starts_with("degraded: the container engine did not answer list containers within 1 s"), "{reason}");
    // Container work is refused with that sentence meanwhile.
    let mut host =
        baaaht_proto::client::connect(&running.data_dir.socket_path(), Default::default()).await.expect("connect");
    let status = host.system.get_status(baaaht_proto::v1::StatusRequest::default()).await.expect("status").into_inner();
    assert!(status.degraded.iter().any(|d| d.contains("did not answer")), "{:?}", status.degraded);
    // And it recovers by itself once the engine answers again (here: its version, on re-probe).
    let recovered = tokio::time::timeout(Duration::from_secs(30), engine.wait_for(|e| e.runtime.is_some()));
    recovered.await.expect("recovered in time").expect("watch");
    running.stop().await;
    engine_task.abort();
}
