//! Socket Mode (<https://api.slack.com/apis/socket-mode>): one WebSocket that Slack pushes the
//! workspace's events into, opened with the app token, dialled through the gateway's egress
//! (the daemon's tunnel in a container).
//!
//! Envelopes are read as Slack sends them, as JSON: a file's `size` and a sender's
//! `user_team` reach the gateway as they are. Each delivery is routed (and a repeat dropped by
//! its event id) and answered; it is acknowledged once the daemon has its message, or after
//! [`ACK_WITHIN`] (Slack wants the ack within 3 s), so a gateway that dies before the daemon has
//! it (a file being fetched, a restart) gets the delivery again from Slack. A `disconnect` (Slack recycling the connection), a close or a silent connection
//! brings a new one; an event delivered again over it is a repeat.

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{json, Value};
use slack_morphism::prelude::*;
use tokio_tungstenite::tungstenite::Message;

use crate::egress::{host_and_port, Egress};
use crate::gateway::Gateway;
use crate::health::Health;

/// How often the gateway pings Slack; a connection silent for three of these is dead.
const PING_EVERY: Duration = Duration::from_secs(30);

/// The longest a delivery waits for the daemon to take its message before it is acknowledged
/// anyway (Slack delivers again after 3 s without an ack).
pub const ACK_WITHIN: Duration = Duration::from_millis(2500);

/// Waits until `taken` is told (or dropped) or [`ACK_WITHIN`] passes.
pub async fn until_taken(taken: tokio::sync::oneshot::Receiver<()>) {
    // silent-ok: either way the delivery is acknowledged now.
    let _ = tokio::time::timeout(ACK_WITHIN, taken).await;
}

/// Keeps a Socket Mode connection open until the process ends.
pub async fn run(gateway: Arc<Gateway>, app_token: SlackApiToken, egress: Egress, health: Arc<Health>) {
    let mut backoff = baaaht_gateway_kit::backoff::Backoff::default();
    loop {
        let mut greeted = false;
        match connection(&gateway, &app_token, &egress, &health, &mut greeted).await {
            // A connection Slack took and later ended: a new one at once.
            Ok(why) if greeted => {
                tracing::info!(%why, "Socket Mode: reconnecting");
                health.down(&why);
                backoff.reset();
            }
            Ok(why) | Err(why) => {
                let wait = backoff.next_wait();
                tracing::warn!(%why, retry_in_ms = wait.as_millis() as u64, "Socket Mode: cannot connect");
                health.down(&why);
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// One connection, from apps.connections.open to its end; why it ended (Ok: reconnect now).
async fn connection(
    gateway: &Arc<Gateway>,
    app_token: &SlackApiToken,
    egress: &Egress,
    health: &Health,
    greeted: &mut bool,
) -> Result<String, String> {
    let session = gateway.slack.open_session(app_token);
    let request = SlackApiAppsConnectionOpenRequest::new();
    let opened = crate::gateway::patiently("apps.connections.open", || session.apps_connections_open(&request))
        .await
        .map_err(|error| format!("apps.connections.open with the app token failed: {error}"))?;
    let url = opened.url.0.to_string();
    let uri: http::Uri = url.parse().map_err(|error| format!("Slack's Socket Mode URL is unreadable: {error}"))?;
    let (host, port) = host_and_port(&uri).map_err(|error| error.to_string())?;
    let stream = egress.dial(&host, port).await.map_err(|error| format!("cannot reach {host}:{port}: {error}"))?;
    let (socket, _) = tokio_tungstenite::client_async_tls_with_config(url.as_str(), stream, None, None)
        .await
        .map_err(|error| format!("the Socket Mode handshake with {host} failed: {error}"))?;
    let (mut sink, mut source) = socket.split();
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.tick().await;
    let mut silent = 0;
    // Acks of deliveries whose message the daemon took (or that waited long enough).
    let (acks, mut acking) = tokio::sync::mpsc::unbounded_channel::<String>();
    loop {
        let frame = tokio::select! {
            frame = source.next() => frame,
            Some(envelope_id) = acking.recv() => {
                let ack = json!({ "envelope_id": envelope_id }).to_string();
                sink.send(Message::text(ack)).await.map_err(|error| format!("Socket Mode: cannot ack: {error}"))?;
                continue;
            }
            _ = ping.tick() => {
                silent += 1;
                if silent >= 3 {
                    return Ok(format!("no word from Slack for {} s", (PING_EVERY * 3).as_secs()));
                }
                sink.send(Message::Ping(Default::default())).await.map_err(|error| format!("Socket Mode: {error}"))?;
                continue;
            }
        };
        silent = 0;
        let text = match frame {
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Close(close))) => {
                return Ok(format!(
                    "Slack closed the connection ({})",
                    close.map(|c| c.reason.to_string()).unwrap_or_default()
                ))
            }
            Some(Ok(_)) => continue,
            Some(Err(error)) => return Ok(format!("the connection failed: {error}")),
            None => return Ok("the connection ended".into()),
        };
        let Ok(envelope) = serde_json::from_str::<Value>(text.as_str()) else {
            tracing::warn!(bytes = text.len(), "Socket Mode: a frame that is not JSON is skipped");
            continue;
        };
        match envelope["type"].as_str().unwrap_or_default() {
            "hello" => {
                tracing::info!(host, "Socket Mode: connected");
                *greeted = true;
                health.up();
            }
            "disconnect" => {
                return Ok(format!(
                    "Slack asked to reconnect ({})",
                    envelope["reason"].as_str().unwrap_or("no reason")
                ));
            }
            // A click on an approval's button: acknowledged first (Slack waits 3 s for it), then
            // answered, even when the ack is lost.
            "interactive" => {
                let acked = match envelope["envelope_id"].as_str() {
                    Some(envelope_id) => {
                        sink.send(Message::text(json!({ "envelope_id": envelope_id }).to_string())).await
                    }
                    None => Ok(()),
                };
                let gateway = gateway.clone();
                let payload = envelope["payload"].clone();
                tokio::spawn(async move { gateway.interact(&payload).await });
                acked.map_err(|error| format!("Socket Mode: cannot ack: {error}"))?;
            }
            kind => {
                let route = (kind == "events_api")
                    .then(|| {
                        let payload = &envelope["payload"];
                        gateway.take(payload["event_id"].as_str().unwrap_or_default(), &payload["event"])
                    })
                    .flatten();
                // Answered even if the ack is lost: Slack's redelivery is then a repeat.
                let envelope_id = envelope["envelope_id"].as_str().map(str::to_string);
                match (route, envelope_id) {
                    (Some(route), Some(envelope_id)) => {
                        let (taken, held) = tokio::sync::oneshot::channel();
                        let gateway = gateway.clone();
                        tokio::spawn(async move { gateway.answer(route, taken).await });
                        let acks = acks.clone();
                        tokio::spawn(async move {
                            until_taken(held).await;
                            // silent-ok: a connection gone meanwhile: Slack delivers it again.
                            let _ = acks.send(envelope_id);
                        });
                    }
                    (Some(route), None) => {
                        let (taken, _) = tokio::sync::oneshot::channel();
                        let gateway = gateway.clone();
                        tokio::spawn(async move { gateway.answer(route, taken).await });
                    }
                    (None, Some(envelope_id)) => {
                        let ack = json!({ "envelope_id": envelope_id }).to_string();
                        sink.send(Message::text(ack))
                            .await
                            .map_err(|error| format!("Socket Mode: cannot ack: {error}"))?;
                    }
                    (None, None) => {}
                }
            }
        }
    }
}
