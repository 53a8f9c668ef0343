//! The web gateway's routes: signing in and out, and who is signed in. Every answer carries a
//! strict Content-Security-Policy; every state-changing request needs the session's CSRF token;
//! the session cookie is HttpOnly, SameSite=Lax, and Secure unless the site is plain HTTP on
//! loopback. What fails inside is logged; the browser reads a plain sentence.

use std::sync::Arc;

use axum::extract::{Form, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use baaaht_proto::client::Client;
use baaaht_proto::v1;
use serde::Deserialize;

use crate::api;
use crate::events::Hub;
use crate::oidc::Oidc;
use crate::store::{self, SignedIn, Store};

/// The session cookie's name (the provider's own cookies may share the host).
pub const COOKIE: &str = "baaaht_web";
/// The cookie that binds a sign-in in progress to the browser that started it.
pub const SIGN_IN_COOKIE: &str = "baaaht_sign_in";

/// What the routes share.
pub struct App {
    pub oidc: Oidc,
    pub store: Store,
    pub daemon: Client,
    /// The issuer, as the daemon names its users (`web:{issuer}#{sub}`).
    pub issuer: String,
    /// The site's own URL, e.g. `https://chat.example.com`.
    pub public_url: String,
    pub hub: Hub,
    /// This run of the gateway, in event ids (a reconnection from an earlier run starts anew).
    pub run: String,
    /// The Content-Security-Policy every answer carries ([`content_security_policy`]).
    pub csp: HeaderValue,
    /// The largest upload taken, in bytes (the daemon's own limit holds as well).
    pub max_upload: u64,
    /// Who may sign in at all.
    pub admission: crate::oidc::Admission,
    /// How the last sign-ins went, for the health check the daemon reads.
    pub sign_ins: SignIns,
    /// Sessions whose last refresh failed (the provider down, or answering without an ID
    /// token), by cookie, and when the next may be tried.
    pub refresh_after: Pauses,
    /// The sessions whose ID token is being refreshed now, by cookie.
    pub refreshing: std::sync::Mutex<std::collections::HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Each signed-in identity's canonical user id, as the daemon last said (for a while: see
    /// [`crate::api::ID_KEPT_FOR`]), so a message costs one call to the daemon, not two.
    pub user_ids: std::sync::Mutex<std::collections::HashMap<String, (String, std::time::Instant)>>,
}

/// Pauses between tries, by key: after a failure the next waits 5 s, then twice as long after
/// each failure more, up to five minutes; a success ends the pauses. So a provider in trouble
/// is not asked again on every request.
#[derive(Debug, Default)]
pub struct Pauses(std::sync::Mutex<std::collections::HashMap<String, (std::time::Instant, std::time::Duration)>>);

impl Pauses {
    /// Whether `key` must wait at `now`.
    pub fn waits(&self, key: &str, now: std::time::Instant) -> bool {
        let pauses = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        pauses.get(key).is_some_and(|(next, _)| now < *next)
    }

    /// Notes how a try of `key` went at `now`.
    pub fn went(&self, key: &str, failed: bool, now: std::time::Instant) {
        let mut pauses = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !failed {
            pauses.remove(key);
            return;
        }
        let pause = pauses.get(key).map_or(REFRESH_PAUSE, |(_, pause)| (*pause * 2).min(REFRESH_PAUSE_MAX));
        pauses.insert(key.to_string(), (now + pause, pause));
    }
}

/// Sign-ins that failed in a row since the last that worked, and why the last one failed: a
/// provider that rotated its keys, or a client secret that no longer matches, shows in the
/// gateway's health (and so in `baahtd gateways list`) instead of only in the browser.
#[derive(Debug, Default)]
pub struct SignIns(std::sync::Mutex<(u32, String)>);

impl SignIns {
    pub fn failed(&self, why: &str) {
        let mut last = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *last = (last.0.saturating_add(1), why.to_string());
    }

    pub fn succeeded(&self) {
        *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = (0, String::new());
    }

    /// `healthy`, or `degraded` and what failed.
    pub fn health(&self) -> (&'static str, String) {
        let last = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match last.0 {
            0 => ("healthy", String::new()),
            1 => ("degraded", format!("the last sign-in failed: {}", last.1)),
            failed => ("degraded", format!("the last {failed} sign-ins failed: {}", last.1)),
        }
    }
}

/// The Content-Security-Policy of every answer. Forms post to this site only, and to the
/// issuer (`issuer_origin`), where signing out continues after the redirect.
pub fn content_security_policy(issuer_origin: &str) -> String {
    format!(
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; \
         frame-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self' {issuer_origin}; frame-ancestors 'none'"
    )
}

/// The scheme, host and port of `url`.
pub fn origin(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("https", url));
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    format!("{scheme}://{host}")
}

impl App {
    fn secure(&self) -> bool {
        !is_loopback_http(&self.public_url)
    }

    /// A `Set-Cookie` value for `name`: HttpOnly, SameSite=Lax, Secure unless the site is plain
    /// HTTP on loopback; `max_age` 0 removes it.
    fn cookie(&self, name: &str, value: &str, path: &str, max_age: Option<u64>) -> Option<HeaderValue> {
        let secure = if self.secure() { "; Secure" } else { "" };
        let age = max_age.map(|age| format!("; Max-Age={age}")).unwrap_or_default();
        HeaderValue::from_str(&format!("{name}={value}; Path={path}; HttpOnly; SameSite=Lax{age}{secure}")).ok()
    }

    /// The session a request's cookie names.
    pub(crate) async fn session(self: &Arc<Self>, headers: &HeaderMap) -> Option<(String, SignedIn)> {
        let id = cookie(headers, COOKIE)?;
        let session = self.store.get_even_expired(&id)?;
        let now = store::now();
        if session.expires > now + REFRESH_BEFORE || session.refresh_token.is_empty() || self.refresh_waits(&id) {
            return (session.expires > now).then_some((id, session));
        }
        // In a task of its own: a request given up meanwhile (a tab closed) does not lose a
        // refresh token the provider has just rotated.
        let (app, refreshing) = (self.clone(), id.clone());
        let fresh = tokio::spawn(async move { app.refresh(&refreshing).await }).await.ok().flatten();
        fresh.filter(|session| session.expires > store::now()).map(|session| (id, session))
    }

    /// Whether session `id`'s refresh failed a moment ago and waits before the next try.
    fn refresh_waits(&self, id: &str) -> bool {
        self.refresh_after.waits(id, std::time::Instant::now())
    }

    /// Notes how session `id`'s refresh went (see [`Pauses`]).
    fn refresh_went(&self, id: &str, failed: bool) {
        self.refresh_after.went(id, failed, std::time::Instant::now());
    }

    /// Session `id` with a fresh ID token from the provider, still let in by the site's
    /// admission lists; as it was when the provider cannot be reached; ended when the provider
    /// refuses the refresh or the account is no longer let in. One refresh at a time per
    /// session: a provider that rotates refresh tokens may end the session of a client that
    /// uses one twice.
    async fn refresh(&self, id: &str) -> Option<SignedIn> {
        let lock = {
            let mut refreshing = self.refreshing.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            refreshing.entry(id.to_string()).or_default().clone()
        };
        let _refreshing = lock.lock().await;
        let session = self.store.get_even_expired(id)?;
        let fresh = if session.expires > store::now() + REFRESH_BEFORE || session.refresh_token.is_empty() {
            Some(session) // refreshed (or spent) meanwhile
        } else {
            let asked = self.oidc.refresh(&session.refresh_token, &session.subject);
            match tokio::time::timeout(REFRESH_TIMEOUT, asked).await {
                Ok(Ok(identity)) => {
                    self.refresh_went(id, false);
                    match self.admission.refuses(&identity) {
                        None => self.store.refreshed(id, identity).unwrap_or_else(|error| {
                            tracing::error!(%error, "cannot keep a refreshed session");
                            None
                        }),
                        Some(why) => {
                            tracing::warn!(subject = %identity.subject, why, "a session ended: the account is no longer let in");
                            if let Err(error) = self.store.sign_out(id) {
                                tracing::error!(%error, "cannot end a session");
                            }
                            None
                        }
                    }
                }
                Ok(Err(error @ crate::oidc::OidcError::RefreshRefused(_))) => {
                    tracing::info!(%error, "a session ends with its ID token");
                    if let Err(error) = self.store.spent(id) {
                        tracing::error!(%error, "cannot keep a session");
                    }
                    Some(session)
                }
                Ok(Err(error)) => {
                    tracing::warn!(%error, "a session's ID token could not be refreshed now");
                    self.refresh_went(id, true);
                    Some(session)
                }
                Err(_) => {
                    tracing::warn!("the provider did not refresh a session's ID token within 10 s");
                    self.refresh_went(id, true);
                    Some(session)
                }
            }
        };
        self.refreshing.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(id);
        fresh
    }

    /// Reads the client secret again from the daemon (one set while the gateway runs); whether
    /// it differs from the one in use.
    async fn read_client_secret_again(&self) -> bool {
        let mut daemon = self.daemon.clone();
        match daemon.gateways.get_gateway_secrets(v1::GatewaySecretsRequest {}).await {
            Ok(answer) => self.oidc.use_client_secret(answer.into_inner().secrets.get("client_secret").cloned()),
            Err(status) => {
                tracing::warn!(error = %status.message(), "cannot read the client secret again");
                false
            }
        }
    }

    /// A call to the daemon as `session`'s user, with the ID token it verifies itself.
    pub(crate) fn as_user<T>(&self, session: &SignedIn, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        let metadata = request.metadata_mut();
        let identity = format!("web:{}#{}", self.issuer, session.subject);
        if let Ok(value) = identity.parse() {
            metadata.insert(baaaht_proto::USER_HEADER, value);
        }
        if let Ok(value) = session.id_token.parse() {
            metadata.insert(baaaht_proto::ID_TOKEN_HEADER, value);
        }
        if !session.access_token.is_empty() {
            if let Ok(value) = session.access_token.parse() {
                metadata.insert(baaaht_proto::ACCESS_TOKEN_HEADER, value);
            }
        }
        let name: String = session.name.chars().filter(|c| c.is_ascii_graphic() || *c == ' ').take(80).collect();
        if let Ok(value) = name.parse() {
            metadata.insert(baaaht_proto::USER_NAME_HEADER, value);
        }
        request
    }
}

/// How long before its ID token expires a session gets a fresh one (where the provider gave a
/// refresh token).
const REFRESH_BEFORE: u64 = 60;
/// How long the provider has to refresh one.
const REFRESH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// The first pause after a failed refresh, and the longest.
const REFRESH_PAUSE: std::time::Duration = std::time::Duration::from_secs(5);
const REFRESH_PAUSE_MAX: std::time::Duration = std::time::Duration::from_secs(300);

/// Whether `url` is plain HTTP on loopback (the one place a cookie may go without Secure).
pub fn is_loopback_http(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else { return false };
    let host = rest.split(['/', '?']).next().unwrap_or_default();
    let host = host.rsplit_once(':').map_or(host, |(host, _)| host);
    matches!(host, "127.0.0.1" | "localhost" | "[::1]")
}

/// The value of cookie `name`.
fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.to_string())
}

pub fn router(app: Arc<App>) -> Router {
    use crate::api;
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
        .route("/api/sessions/{id}/model", post(api::model))
        .route("/api/sessions/{id}/stop", post(api::stop))
        .route("/api/sessions/{id}/export", get(api::export))
        .route("/api/sessions/{id}/files/sent/{name}", get(crate::files::download))
        .route("/api/sessions/{id}/entries/{entry}/artifacts/{n}", get(crate::artifacts::serve))
        .route("/api/rooms", get(api::rooms).post(api::create_room))
        .route("/api/rooms/{id}/members", post(api::add_member))
        .route("/api/uploads", post(api::upload))
        .route("/api/approvals/{id}", post(api::approve))
        .route("/api/memory/review", get(api::memory_review))
        .route("/api/memory/review/{key}", post(api::settle_memory))
        .route("/api/memory", get(api::memories))
        .route("/api/memory/{key}/forget", post(api::forget_memory))
        .route("/api/settings", post(api::settings))
        .route("/api/home", get(crate::home::home))
        .route("/api/models", get(crate::home::models))
        .route("/api/search", get(crate::search::search))
        .route("/ui/{*file}", get(crate::assets::serve))
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
         <script src=\"/ui/theme.js\"></script></head><body>{body}</body></html>",
        escape(title)
    ))
}

/// `text` safe in HTML text and attributes.
pub fn escape(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '&' => "&amp;".into(),
            '<' => "&lt;".into(),
            '>' => "&gt;".into(),
            '"' => "&quot;".into(),
            '\'' => "&#39;".into(),
            c => c.to_string(),
        })
        .collect()
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
async fn follow(
    State(app): State<Arc<App>>,
    user: api::User,
    headers: HeaderMap,
    Query(place): Query<api::Place>,
) -> Response {
    use axum::response::sse::{Event, KeepAlive, Sse};
    let api::User { cookie: cookie_id, session } = user;
    // Who first: their own context then comes from the id just looked up, not a second call.
    let me = match app.me(&session).await {
        Ok(me) => me,
        Err(status) => return api::api_error(&status),
    };
    let context = match app.context(&session, &place).await {
        Ok(context) => context,
        Err(status) => return api::api_error(&status),
    };
    let subscription = v1::EventSubscription {
        context: Some(context.clone()),
        session_id: String::new(),
        channel: v1::ChannelType::Web as i32,
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
    let mut daemon = app.daemon.clone();
    if let Err(status) = daemon.gateways.who_am_i(app.as_user(&session, v1::WhoAmIRequest {})).await {
        tracing::warn!(code = ?status.code(), message = %status.message(), "the daemon refused a signed-in user");
        let sentence = if status.code() == tonic::Code::PermissionDenied {
            "You are signed in, but this assistant does not let this account in."
        } else {
            "The assistant is not reachable right now; try again in a minute."
        };
        return failed(StatusCode::FORBIDDEN, sentence);
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
    if let Err(error) = app.store.sign_out(&id) {
        tracing::error!(%error, "cannot end a session");
    }
    let back = format!("{}/signed-out", app.public_url.trim_end_matches('/'));
    let target = app.oidc.logout_url(&session.id_token, &back).unwrap_or_else(|| "/signed-out".into());
    let mut response = Redirect::to(&target).into_response();
    if let Some(expired) = app.cookie(COOKIE, "", "/", Some(0)) {
        response.headers_mut().insert(header::SET_COOKIE, expired);
    }
    response
}

async fn signed_out() -> Response {
    page("Signed out", "<h1>You are signed out</h1><p><a href=\"/login\">Sign in again</a></p>").into_response()
}

async fn me(State(app): State<Arc<App>>, user: api::User) -> Response {
    let mut daemon = app.daemon.clone();
    match daemon.gateways.who_am_i(app.as_user(&user.session, v1::WhoAmIRequest {})).await {
        Ok(me) => {
            let mut shown = api::profile_json(&me.into_inner());
            shown["name"] =
                serde_json::json!(shown["name"].as_str().filter(|name| !name.is_empty()).unwrap_or(&user.session.name));
            shown["email"] = serde_json::json!(user.session.email);
            shown["identity"] = serde_json::json!(app.identity(&user.session));
            shown["csrf"] = serde_json::json!(user.session.csrf);
            axum::Json(shown).into_response()
        }
        Err(status) => api::api_error(&status),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_refresh_waits_longer_each_time_and_a_success_ends_the_wait() {
        use std::time::{Duration, Instant};
        let (pauses, start) = (Pauses::default(), Instant::now());
        assert!(!pauses.waits("s", start), "nothing failed yet");
        pauses.went("s", true, start);
        assert!(
            pauses.waits("s", start + Duration::from_secs(4)) && !pauses.waits("s", start + Duration::from_secs(5))
        );
        pauses.went("s", true, start);
        assert!(pauses.waits("s", start + Duration::from_secs(9)), "twice as long after the second");
        assert!(!pauses.waits("other", start), "by session");
        for _ in 0..20 {
            pauses.went("s", true, start);
        }
        assert!(!pauses.waits("s", start + Duration::from_secs(300)), "never more than five minutes");
        pauses.went("s", false, start);
        assert!(!pauses.waits("s", start));
    }

    #[test]
    fn failing_sign_ins_make_the_health_degraded_until_one_works() {
        let sign_ins = SignIns::default();
        assert_eq!(sign_ins.health(), ("healthy", String::new()));
        sign_ins.failed("the ID token is not valid");
        sign_ins.failed("the ID token is not valid");
        assert_eq!(sign_ins.health(), ("degraded", "the last 2 sign-ins failed: the ID token is not valid".into()));
        sign_ins.succeeded();
        assert_eq!(sign_ins.health().0, "healthy");
    }

    #[test]
    fn only_loopback_http_goes_without_secure_cookies() {
        assert!(is_loopback_http("http://127.0.0.1:8080"));
        assert!(is_loopback_http("http://localhost/"));
        assert!(!is_loopback_http("http://192.168.1.2:8080"));
        assert!(!is_loopback_http("https://127.0.0.1:8080"));
        assert!(!is_loopback_http("http://localhost.evil.example"));
    }

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

    #[test]
    fn cookies_are_found_by_name() {
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_static("_session=x; baaaht_web=abc; other=1"));
        assert_eq!(cookie(&headers, COOKIE).as_deref(), Some("abc"));
        assert_eq!(cookie(&headers, "missing"), None);
        assert_eq!(escape("<a href=\"x\">'&"), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;");
        assert_eq!(origin("https://id.example.com/realms/home"), "https://id.example.com");
        assert!(content_security_policy("http://127.0.0.1:9").contains("form-action 'self' http://127.0.0.1:9;"));
    }
}
