//! The web gateway's routes: the pages, signing in and out, who is signed in, the page's API
//! ([`crate::api`] and the rooms beside it) and the events a browser follows. Every answer
//! carries a strict Content-Security-Policy; what fails inside is logged, and the browser reads
//! a plain sentence.

use std::sync::Arc;

use axum::extract::{Form, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{delete, get, post};
use axum::Router;
use baaaht_proto::v1;
use serde::Deserialize;

use crate::api;
use crate::app::{self, cookie, escape, App, Place, User, COOKIE, SIGN_IN_COOKIE};
use crate::store::{self, SignedIn};

/// Every route of the site, over `app`; the push API's over `push` too.
pub fn router(app: Arc<App>, push: Arc<crate::push::Push>) -> Router {
    Router::new()
        .route("/", get(home))
        .route("/login", get(login))
        .route("/auth/callback", get(callback))
        .route("/logout", post(logout))
        .route("/signed-out", get(signed_out))
        .route("/api/me", get(me))
        .route("/api/messages", post(api::send))
        .route("/api/events", get(follow))
        .route("/api/sessions", get(api::list).post(api::create))
        .route("/api/sessions/{id}", get(api::read))
        .route("/api/sessions/{id}/resume", post(api::resume))
        .route("/api/sessions/{id}/archive", post(api::archive))
        .route("/api/sessions/{id}/compact", post(api::compact))
        .route("/api/sessions/{id}/fork", post(api::fork))
        .route("/api/sessions/{id}/undo", post(api::undo))
        .route("/api/sessions/{id}/model", post(api::model))
        .route("/api/sessions/{id}/stop", post(api::stop))
        .route("/api/sessions/{id}/export", get(api::export))
        .route("/api/sessions/{id}/files/sent/{name}", get(crate::files::download))
        .route("/api/sessions/{id}/entries/{entry}/artifacts/{n}", get(crate::artifacts::serve))
        .route("/api/rooms", get(api::rooms).post(api::create_room))
        .route("/api/rooms/{id}/members", post(api::add_member))
        .route("/api/uploads", post(api::upload))
        .route("/api/approvals", get(crate::push::api::waiting))
        .route("/api/approvals/{id}", post(api::approve))
        .route("/api/push", get(crate::push::api::show))
        .route("/api/push/devices", post(crate::push::api::add))
        .route("/api/push/devices/{id}", delete(crate::push::api::remove))
        .route("/api/push/settings", post(crate::push::api::choose))
        .route("/api/push/test", post(crate::push::api::test))
        .route("/manifest.webmanifest", get(crate::assets::manifest))
        .route("/sw.js", get(crate::assets::worker))
        .route("/offline", get(offline))
        .route("/api/memory/review", get(api::memory_review))
        .route("/api/memory/review/{key}", post(api::settle_memory))
        .route("/api/memory", get(api::memories))
        .route("/api/memory/{key}/forget", post(api::forget_memory))
        .route("/api/settings", post(api::settings))
        .route("/api/tasks", get(crate::tasks::list))
        .route("/api/tasks/{id}/{action}", post(crate::tasks::act))
        .route("/api/home", get(crate::home::home))
        .route("/api/models", get(crate::home::models))
        .route("/api/search", get(crate::search::search))
        .route("/ui/{*file}", get(crate::assets::serve))
        .layer(axum::Extension(push))
        .layer(axum::middleware::map_response_with_state(app.clone(), security_headers))
        .with_state(app)
}

/// The headers every answer carries.
async fn security_headers(State(app): State<Arc<App>>, mut response: Response) -> Response {
    let headers = response.headers_mut();
    let set = |headers: &mut HeaderMap, name: &'static str, value: &'static str| {
        headers.insert(name, HeaderValue::from_static(value));
    };
    // An artifact comes with a policy of its own.
    if !headers.contains_key(header::CONTENT_SECURITY_POLICY) {
        headers.insert(header::CONTENT_SECURITY_POLICY, app.csp.clone());
    }
    set(headers, "x-content-type-options", "nosniff");
    set(headers, "referrer-policy", "no-referrer");
    set(headers, "cross-origin-opener-policy", "same-origin");
    response
}

/// A page: the site's frame around `body` (already escaped).
fn page(title: &str, body: &str) -> Html<String> {
    shell(title, &format!("<main class=\"page\">{body}</main>"))
}

/// The document around `body`: the style, and the theme the user chose applied before it is drawn.
fn shell(title: &str, body: &str) -> Html<String> {
    Html(format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" \
         content=\"width=device-width, initial-scale=1\"><title>{} · baaaht</title><link rel=\"stylesheet\" href=\"/ui/app.css\">\
         <link rel=\"manifest\" href=\"/manifest.webmanifest\"><meta name=\"theme-color\" content=\"#2f5fd0\">\
         <link rel=\"icon\" href=\"/ui/icons/icon-192.png\"><link rel=\"apple-touch-icon\" href=\"/ui/icons/icon-192.png\">\
         <script src=\"/ui/theme.js\"></script></head><body>{body}</body></html>",
        escape(title)
    ))
}

/// What a browser is told when something failed inside (the detail is in the log).
fn failed(status: StatusCode, sentence: &str) -> Response {
    (
        status,
        page(
            "Something went wrong",
            &format!("<h1>Something went wrong</h1><p>{}</p><p><a href=\"/\">Back</a></p>", escape(sentence)),
        ),
    )
        .into_response()
}

async fn home(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let Some((_, session)) = app.session(&headers).await else {
        return Redirect::to("/login").into_response();
    };
    let body = format!(include_str!("../ui/home.html"), name = escape(&session.name), csrf = escape(&session.csrf));
    shell("baaaht", &body).into_response()
}

/// The user's events as Server-Sent Events, from the one after `Last-Event-ID`.
async fn follow(State(app): State<Arc<App>>, user: User, headers: HeaderMap, Query(place): Query<Place>) -> Response {
    use axum::response::sse::{Event, KeepAlive, Sse};
    let User { cookie: cookie_id, session } = user;
    // Who first: their own context then comes from the id just looked up, not a second call.
    let me = match app.me(&session).await {
        Ok(me) => me,
        Err(status) => return app::api_error(&status),
    };
    let context = match app.context(&session, &place).await {
        Ok(context) => context,
        Err(status) => return app::api_error(&status),
    };
    let subscription = v1::EventSubscription {
        context: Some(context.clone()),
        session_id: String::new(),
        channel: v1::ChannelType::Web as i32,
        notifies: false,
    };
    // Each user follows as themselves, a room too: the daemon decides who may.
    let key = format!("{}\n{}:{}", app.identity(&session), context.r#type, context.id);
    let feed = app.hub.feed(&key, me, &app.daemon, app.as_user(&session, subscription));
    // A new connection starts from now; one that comes back, from where it was (if it was in
    // this run of the gateway: ids are `{run}.{n}`).
    let mut last = headers
        .get("last-event-id")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split_once('.'))
        .filter(|(run, _)| *run == app.run)
        .and_then(|(_, n)| n.parse::<u64>().ok())
        .unwrap_or_else(|| feed.newest());
    let mut changes = feed.changes();
    let listening = feed.listen();
    let stream = async_stream(move |sender| async move {
        let _listening = listening;
        loop {
            // A stream lives as long as its session: signed out or expired, it ends.
            if app.store.get(&cookie_id).is_none() {
                return;
            }
            // The daemon's stream ended: the browser reconnects, and that follows it anew.
            let ended = feed.ended();
            for (id, json) in feed.after(last) {
                last = id;
                if sender
                    .send(Ok::<_, std::convert::Infallible>(
                        Event::default().id(format!("{}.{id}", app.run)).data(json),
                    ))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            if ended {
                return;
            }
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return },
                () = tokio::time::sleep(std::time::Duration::from_secs(15)) => {}
                () = sender.closed() => return,
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default()).into_response()
}

/// A stream fed by `produce` through a channel.
fn async_stream<T, F, Fut>(produce: F) -> tokio_stream::wrappers::ReceiverStream<T>
where
    T: Send + 'static,
    F: FnOnce(tokio::sync::mpsc::Sender<T>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (sender, receiver) = tokio::sync::mpsc::channel(64);
    tokio::spawn(produce(sender));
    tokio_stream::wrappers::ReceiverStream::new(receiver)
}

#[derive(Debug, Deserialize)]
struct LoginQuery {
    next: Option<String>,
}

/// Whether `next` is a plain path of this site: `/`, or `/` and a letter or digit, then letters,
/// digits and `/-_.?=&` only (nothing a browser could read as another site: no `//`, `\`,
/// escapes or control characters).
pub fn safe_next(next: &str) -> bool {
    next.len() <= 200
        && next.starts_with('/')
        && next.chars().nth(1).is_none_or(|c| c.is_ascii_alphanumeric())
        && next.chars().all(|c| c.is_ascii_alphanumeric() || "/-_.?=&".contains(c))
        && !next.contains("//")
}

async fn login(State(app): State<Arc<App>>, Query(query): Query<LoginQuery>) -> Response {
    let next = query.next.filter(|next| safe_next(next)).unwrap_or_else(|| "/".into());
    let (state, binding) = match (store::random_id(), store::random_id()) {
        (Ok(state), Ok(binding)) => (state, binding),
        (Err(error), _) | (_, Err(error)) => {
            tracing::error!(%error, "cannot start a sign-in");
            return failed(StatusCode::INTERNAL_SERVER_ERROR, "The sign-in could not start; try again.");
        }
    };
    let start = app.oidc.start(state);
    if let Err(error) = app.store.begin_with(&start.state, &binding, start.nonce, start.pkce_verifier, next) {
        tracing::error!(%error, "cannot start a sign-in");
        return failed(StatusCode::INTERNAL_SERVER_ERROR, "The sign-in could not start; try again.");
    }
    let mut response = Redirect::to(&start.url).into_response();
    let age = store::PENDING_FOR.as_secs();
    if let Some(cookie) = app.cookie(SIGN_IN_COOKIE, &binding, "/auth/callback", Some(age)) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

#[derive(Debug, Deserialize)]
struct Callback {
    code: Option<String>,
    state: Option<String>,
    iss: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

async fn callback(State(app): State<Arc<App>>, headers: HeaderMap, Query(answer): Query<Callback>) -> Response {
    if let Some(error) = answer.error {
        tracing::warn!(%error, description = answer.error_description.as_deref().unwrap_or_default(), "the provider refused a sign-in");
        return failed(StatusCode::BAD_REQUEST, "The sign-in was refused by the identity provider.");
    }
    let (Some(code), Some(state)) = (answer.code, answer.state) else {
        return failed(StatusCode::BAD_REQUEST, "This is not an answer to a sign-in; sign in again.");
    };
    let binding = cookie(&headers, SIGN_IN_COOKIE);
    let Some(pending) = app.store.take_pending(&state, binding.as_deref()) else {
        tracing::warn!(cookie = binding.is_some(), "a sign-in answer with an unknown, used or foreign state");
        return failed(StatusCode::BAD_REQUEST, "This sign-in has expired or was used already; sign in again.");
    };
    let finish = |verifier: String| app.oidc.finish(&code, answer.iss.as_deref(), &pending.nonce, verifier);
    let finished = match finish(pending.pkce_verifier.clone()).await {
        // A client secret set since the gateway started: read again from the daemon, and the
        // code (not taken by a refused client) exchanged once more.
        Err(crate::oidc::OidcError::Client(why)) if app.read_client_secret_again().await => {
            tracing::info!(%why, "the provider refused the client secret; trying the one the daemon holds now");
            finish(pending.pkce_verifier).await
        }
        finished => finished,
    };
    let identity = match finished {
        Ok(identity) => identity,
        Err(error) => {
            tracing::warn!(%error, "a sign-in failed");
            if error.is_the_sites() {
                app.sign_ins.failed(&error.to_string());
            }
            return failed(StatusCode::BAD_REQUEST, error.for_people());
        }
    };
    app.sign_ins.succeeded();
    if let Some(why) = app.admission.refuses(&identity) {
        tracing::warn!(subject = %identity.subject, email = %identity.email, why, "a sign-in refused by the site's admission lists");
        return failed(
            StatusCode::FORBIDDEN,
            "You are signed in with your provider, but this site does not let this account in. Ask whoever runs it.",
        );
    }
    let csrf = match store::random_id() {
        Ok(csrf) => csrf,
        Err(error) => {
            tracing::error!(%error, "cannot make a CSRF token");
            return failed(StatusCode::INTERNAL_SERVER_ERROR, "The sign-in could not be completed; try again.");
        }
    };
    let session = SignedIn {
        subject: identity.subject,
        name: identity.name,
        email: identity.email,
        id_token: identity.id_token,
        expires: identity.expires,
        csrf,
        refresh_token: identity.refresh_token.unwrap_or_default(),
        access_token: String::new(),
    };
    // The daemon meets the user (first sign-in creates them) and checks the ID token itself.
    if let Err(status) = app.profile(&session, std::time::Duration::ZERO).await {
        tracing::warn!(code = ?status.code(), message = %status.message(), "the daemon refused a signed-in user");
        let sentence = if status.code() == tonic::Code::PermissionDenied {
            "You are signed in, but this assistant does not let this account in."
        } else {
            baaaht_gateway_kit::sentences::UNREACHABLE
        };
        return failed(StatusCode::FORBIDDEN, sentence);
    }
    // A sign-in over another on this browser ends that one (a shared tablet, the next person).
    if let Some(before) = cookie(&headers, COOKIE) {
        if app.store.get_even_expired(&before).is_some() {
            app.end_session(&store::key(&before));
        }
    }
    let id = match app.store.sign_in(session) {
        Ok(id) => id,
        Err(error) => {
            tracing::error!(%error, "cannot keep a session");
            return failed(StatusCode::INTERNAL_SERVER_ERROR, "The sign-in could not be completed; try again.");
        }
    };
    let mut response = Redirect::to(&pending.next).into_response();
    let cookies = [app.cookie(COOKIE, &id, "/", None), app.cookie(SIGN_IN_COOKIE, "", "/auth/callback", Some(0))];
    for cookie in cookies.into_iter().flatten() {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    response
}

#[derive(Debug, Deserialize)]
struct LogoutForm {
    csrf: Option<String>,
}

async fn logout(State(app): State<Arc<App>>, headers: HeaderMap, Form(form): Form<LogoutForm>) -> Response {
    // An expired session is signed out too, at the provider as well.
    let found = cookie(&headers, COOKIE).and_then(|id| app.store.get_even_expired(&id).map(|session| (id, session)));
    let Some((id, session)) = found else {
        return Redirect::to("/signed-out").into_response();
    };
    if form.csrf.as_deref() != Some(session.csrf.as_str()) {
        tracing::warn!("a sign-out without the session's CSRF token");
        return failed(
            StatusCode::FORBIDDEN,
            "This request did not come from this site's page; reload it and try again.",
        );
    }
    app.end_session(&store::key(&id));
    let back = format!("{}/signed-out", app.public_url.trim_end_matches('/'));
    let target = app.oidc.logout_url(&session.id_token, &back).unwrap_or_else(|| "/signed-out".into());
    let mut response = Redirect::to(&target).into_response();
    if let Some(expired) = app.cookie(COOKIE, "", "/", Some(0)) {
        response.headers_mut().insert(header::SET_COOKIE, expired);
    }
    response
}

/// What the installed app shows when the network is gone (its service worker keeps it).
async fn offline() -> Response {
    page(
        "Offline",
        "<h1>You are offline</h1><p>baaaht cannot reach your server right now. Your conversations are kept \
         there, and go on when you are back.</p><p><a href=\"/\">Try again</a></p>",
    )
    .into_response()
}

async fn signed_out() -> Response {
    page("Signed out", "<h1>You are signed out</h1><p><a href=\"/login\">Sign in again</a></p>").into_response()
}

async fn me(State(app): State<Arc<App>>, user: User) -> Response {
    match app.profile(&user.session, std::time::Duration::ZERO).await {
        Ok(me) => {
            let mut shown = api::profile_json(&me);
            shown["name"] =
                serde_json::json!(shown["name"].as_str().filter(|name| !name.is_empty()).unwrap_or(&user.session.name));
            shown["email"] = serde_json::json!(user.session.email);
            shown["identity"] = serde_json::json!(app.identity(&user.session));
            shown["csrf"] = serde_json::json!(user.session.csrf);
            axum::Json(shown).into_response()
        }
        Err(status) => app::api_error(&status),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_paths_of_the_site_come_after_a_sign_in() {
        for good in ["/", "/sessions/s-1", "/rooms?id=family&x=1"] {
            assert!(safe_next(good), "{good}");
        }
        for bad in [
            "//evil.example",
            "/\\evil.example",
            "/%09/evil.example",
            "/\tx",
            "https://evil.example",
            "evil",
            "/a//b",
            "/.x",
        ] {
            assert!(!safe_next(bad), "{bad}");
        }
    }
}
