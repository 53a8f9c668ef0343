//! The Events API over HTTP, for a workspace that does not use Socket Mode: Slack POSTs each
//! event to `/slack/events`. A request counts only when its `X-Slack-Signature` is the HMAC of
//! its body with the app's signing secret and its `X-Slack-Request-Timestamp` is within five
//! minutes (slack-morphism's [`SlackEventSignatureVerifier`]), so a captured request cannot be
//! replayed later; within the window a replay is the same event id, which the gateway has seen.
//! Each event is acknowledged at once and answered after, as in Socket Mode.

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use slack_morphism::signature_verifier::SlackEventSignatureVerifier;

use crate::gateway::Gateway;

/// Where Slack sends the events (the app's Request URL ends with it).
pub const PATH: &str = "/slack/events";
/// The largest request read; Slack's events are a few kilobytes.
const MAX_BODY: usize = 1 << 20;
/// How long a request's head and its body may take to arrive.
const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// Connections served at once; more wait to be accepted.
const MAX_CONNECTIONS: usize = 256;

/// Answers Slack's requests on `listener` until the task is dropped.
pub async fn serve(listener: tokio::net::TcpListener, gateway: Arc<Gateway>, verifier: SlackEventSignatureVerifier) {
    let verifier = Arc::new(verifier);
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                tracing::warn!(%error, "cannot accept an Events API connection");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let (gateway, verifier) = (gateway.clone(), verifier.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let (gateway, verifier) = (gateway.clone(), verifier.clone());
                async move { Ok::<_, Infallible>(handle(request, &gateway, &verifier).await) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            if let Err(error) = connection.await {
                tracing::debug!(%error, "an Events API connection ended");
            }
            drop(slot);
        });
    }
}

fn answer(status: StatusCode, body: Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    response
}

fn header<'a>(request: &'a Request<Incoming>, name: &str) -> &'a str {
    request.headers().get(name).and_then(|value| value.to_str().ok()).unwrap_or_default()
}

async fn handle(
    request: Request<Incoming>,
    gateway: &Arc<Gateway>,
    verifier: &SlackEventSignatureVerifier,
) -> Response<Full<Bytes>> {
    if request.uri().path() != PATH {
        return answer(StatusCode::NOT_FOUND, json!({"error": format!("Slack's events go to {PATH}")}));
    }
    if request.method() != Method::POST {
        return answer(StatusCode::METHOD_NOT_ALLOWED, json!({"error": "POST events here"}));
    }
    let timestamp = header(&request, SlackEventSignatureVerifier::SLACK_SIGNED_TIMESTAMP).to_string();
    let signature = header(&request, SlackEventSignatureVerifier::SLACK_SIGNED_HASH_HEADER).to_string();
    let retry = header(&request, "x-slack-retry-num").to_string();
    let body = match tokio::time::timeout(READ_TIMEOUT, Limited::new(request.into_body(), MAX_BODY).collect()).await {
        Ok(Ok(body)) => body.to_bytes(),
        Ok(Err(_too_large)) => {
            return answer(StatusCode::PAYLOAD_TOO_LARGE, json!({"error": "the request is too large"}))
        }
        Err(_slow) => {
            return answer(StatusCode::REQUEST_TIMEOUT, json!({"error": "the request's body came too slowly"}))
        }
    };
    let Ok(text) = std::str::from_utf8(&body) else {
        return answer(StatusCode::BAD_REQUEST, json!({"error": "the body is not UTF-8"}));
    };
    if let Err(error) = verifier.verify(&signature, text, &timestamp) {
        tracing::warn!(%error, "an Events API request was refused: bad signature or stale timestamp");
        return answer(StatusCode::UNAUTHORIZED, json!({"error": "the request's signature or timestamp is not valid"}));
    }
    let Ok(payload) = serde_json::from_str::<Value>(text) else {
        // Slack's `ssl_check` and other form posts: nothing to do.
        return answer(StatusCode::OK, json!({}));
    };
    match payload["type"].as_str().unwrap_or_default() {
        "url_verification" => answer(StatusCode::OK, json!({"challenge": payload["challenge"]})),
        "event_callback" if payload["team_id"].as_str().is_some_and(|team| team != gateway.team) => {
            tracing::warn!(team = %payload["team_id"], "an event for another workspace is ignored");
            answer(StatusCode::OK, json!({}))
        }
        "event_callback" => {
            let event_id = payload["event_id"].as_str().unwrap_or_default();
            if !retry.is_empty() {
                tracing::info!(event_id, retry, "Slack delivers an event again");
            }
            if let Some(route) = gateway.take(event_id, &payload["event"]) {
                // Answered once the daemon has the message (Slack delivers it again when a
                // gateway dies before), within the 3 s Slack waits.
                let (taken, held) = tokio::sync::oneshot::channel();
                let gateway = gateway.clone();
                tokio::spawn(async move { gateway.answer(route, taken).await });
                crate::socket_mode::until_taken(held).await;
            }
            answer(StatusCode::OK, json!({}))
        }
        other => {
            tracing::debug!(kind = other, "an Events API request with nothing to do");
            answer(StatusCode::OK, json!({}))
        }
    }
}
