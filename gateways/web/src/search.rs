//! `GET /api/search?q=WORDS&room=ID`: what was said in the place's conversations (the user's
//! own, or a room's they are in) that matches, best first — the daemon's search index asked
//! as the signed-in user. The side bar shows these below the conversations whose titles match.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::response::Response;
use baaaht_proto::v1;
use serde::Deserialize;
use serde_json::json;

use crate::app::{answer, api_error, App, Place, User};

#[derive(Debug, Deserialize)]
pub struct Asked {
    #[serde(default)]
    q: String,
    #[serde(default)]
    room: String,
}

pub async fn search(State(app): State<Arc<App>>, user: User, Query(asked): Query<Asked>) -> Response {
    let context = match app.context(&user.session, &Place { room: asked.room }).await {
        Ok(context) => context,
        Err(status) => return api_error(&status),
    };
    let query = v1::SessionQuery { context: Some(context), query: asked.q, limit: 20, ..Default::default() };
    let mut daemon = app.daemon.clone();
    answer(daemon.sessions.search_sessions(app.as_user(&user.session, query)).await, |found| {
        let hits: Vec<serde_json::Value> = found
            .hits
            .iter()
            .map(|hit| {
                json!({"session": hit.session_id, "title": hit.session_title, "entry": hit.entry_id,
                       "role": hit.role, "text": hit.content, "at": hit.at})
            })
            .collect();
        json!({"hits": hits})
    })
}
