//! The page's push API: the key a device subscribes with, the person's devices and choices,
//! adding and removing a device, a test notification, and the approvals waiting (what the
//! app's "Approvals" shortcut opens). Each for the signed-in person only.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::json;

use super::devices::{DevicesError, Settings};
use super::Push;
use crate::app::{error, App, User};

/// `GET /api/push`: the key to subscribe with, the person's devices and what they chose.
pub async fn show(State(app): State<Arc<App>>, Extension(push): Extension<Arc<Push>>, user: User) -> Response {
    let person = push.devices.of(&app.identity(&user.session));
    let devices: Vec<serde_json::Value> = person
        .devices
        .iter()
        .map(|device| json!({"id": device.id, "label": device.label, "added": device.added, "endpoint": device.endpoint}))
        .collect();
    Json(json!({"key": push.sender.public_key(), "devices": devices, "settings": person.settings})).into_response()
}

#[derive(Debug, Deserialize)]
pub struct Subscribed {
    endpoint: String,
    keys: SubscriptionKeys,
    #[serde(default)]
    label: String,
    /// Only tie the person's own device at this address to this sign-in (the page does so
    /// when it loads in a browser that allowed notifications before): nothing is added.
    #[serde(default)]
    renew: bool,
}

#[derive(Debug, Deserialize)]
pub struct SubscriptionKeys {
    p256dh: String,
    auth: String,
}

/// `POST /api/push/devices` with the browser's `PushSubscription` (and a label): this device
/// is told from now on, tied to this sign-in.
pub async fn add(
    State(app): State<Arc<App>>,
    Extension(push): Extension<Arc<Push>>,
    user: User,
    Json(given): Json<Subscribed>,
) -> Response {
    let person = app.identity(&user.session);
    let session = crate::store::key(&user.cookie);
    if given.renew {
        let renewed = push.devices.renew(&person, &given.endpoint, &session);
        return changed(&push, renewed.map(|renewed| json!({"renewed": renewed})));
    }
    let keys = (given.keys.p256dh.as_str(), given.keys.auth.as_str());
    let added = push.devices.add(&person, &given.endpoint, keys, &given.label, &session);
    changed(&push, added.map(|id| json!({"id": id})))
}

/// `DELETE /api/push/devices/{id}`: the device is no longer told.
pub async fn remove(
    State(app): State<Arc<App>>,
    Extension(push): Extension<Arc<Push>>,
    user: User,
    Path(id): Path<String>,
) -> Response {
    match push.devices.remove(&app.identity(&user.session), &id) {
        Ok(false) => error(StatusCode::NOT_FOUND, "You have no such device; reload the settings."),
        removed => changed(&push, removed.map(|_| json!({}))),
    }
}

/// `POST /api/push/settings`: what the person is told, how much of it, and their quiet hours.
pub async fn choose(
    State(app): State<Arc<App>>,
    Extension(push): Extension<Arc<Push>>,
    user: User,
    Json(settings): Json<Settings>,
) -> Response {
    match push.devices.choose(&app.identity(&user.session), settings) {
        Ok(()) => Json(json!({})).into_response(),
        Err(failed) => refused(&failed),
    }
}

/// `POST /api/push/test`: a notification to each of the person's devices.
pub async fn test(State(app): State<Arc<App>>, Extension(push): Extension<Arc<Push>>, user: User) -> Response {
    let identity = app.identity(&user.session);
    let person = push.devices.of(&identity);
    if person.devices.is_empty() {
        return error(StatusCode::BAD_REQUEST, "No device of yours allows notifications yet.");
    }
    let quiet = person.settings.quiet.as_ref().is_some_and(|quiet| quiet.holds(jiff::Timestamp::now()));
    let devices = super::signed_in(&app, &push, person.devices).await;
    if devices.is_empty() {
        return error(StatusCode::BAD_REQUEST, "No device of yours is signed in any more; sign in on it again.");
    }
    let sent = devices.len();
    push.tell(&identity, devices, super::notify::test(quiet));
    let devices = sent;
    Json(json!({"sent": devices})).into_response()
}

/// `GET /api/approvals`: the approvals waiting for the person, the newest last, each with its
/// conversation.
pub async fn waiting(State(app): State<Arc<App>>, user: User) -> Response {
    let waiting = app.hub.waiting.of(&app.identity(&user.session));
    let waiting: Vec<serde_json::Value> =
        waiting.iter().map(|asked| json!({"id": asked.id, "session": asked.session})).collect();
    Json(json!({"waiting": waiting})).into_response()
}

/// The page's answer to a change of the devices: `answer`, with the followers told to look
/// again; or the refusal.
fn changed(push: &Push, answer: Result<serde_json::Value, DevicesError>) -> Response {
    match answer {
        Ok(answer) => {
            push.changed();
            Json(answer).into_response()
        }
        Err(failed) => refused(&failed),
    }
}

/// A refusal as the page shows it: the person's mistake is theirs to read, a failure inside is
/// logged.
fn refused(failed: &DevicesError) -> Response {
    match failed {
        DevicesError::Refused(sentence) => error(StatusCode::BAD_REQUEST, sentence),
        failed => {
            tracing::error!(error = %failed, "cannot keep the devices");
            error(StatusCode::INTERNAL_SERVER_ERROR, "Your devices could not be saved; try again.")
        }
    }
}
