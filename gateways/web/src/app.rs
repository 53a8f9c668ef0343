//! What the web gateway's routes share ([`App`]) and who calls them: the signed-in browser
//! session behind the cookie, refreshed before its tokens expire, and the API's caller
//! ([`User`], which needs the session's CSRF token for anything that changes state). The
//! session cookie is HttpOnly, SameSite=Lax, and Secure unless the site is plain HTTP on
//! loopback. A refusal of the daemon reaches the browser as a sentence ([`api_error`]).

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::{header, request::Parts, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use baaaht_proto::client::Client;
use baaaht_proto::v1;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::events::{Hub, Me};
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
    /// token), by session key ([`store::key`]), and when the next may be tried.
    pub refresh_after: Pauses,
    /// The sessions whose ID token is being refreshed now, by session key.
    pub refreshing: std::sync::Mutex<std::collections::HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Each signed-in identity's profile (canonical id, groups, admin), as the daemon last said
    /// and when ([`App::profile`]), so a message costs one call to the daemon, not two.
    pub profiles: std::sync::Mutex<std::collections::HashMap<String, (v1::UserProfile, std::time::Instant)>>,
    /// Told the key of each sign-in that ends (signed out, signed over, no longer let in), so
    /// what was tied to it goes too (the notifications of a device allowed in it).
    pub on_session_end: std::sync::OnceLock<SessionEnded>,
}

/// What is told the key of a sign-in that ended.
pub type SessionEnded = Box<dyn Fn(&str) + Send + Sync>;

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
    pub(crate) fn cookie(&self, name: &str, value: &str, path: &str, max_age: Option<u64>) -> Option<HeaderValue> {
        let secure = if self.secure() { "; Secure" } else { "" };
        let age = max_age.map(|age| format!("; Max-Age={age}")).unwrap_or_default();
        HeaderValue::from_str(&format!("{name}={value}; Path={path}; HttpOnly; SameSite=Lax{age}{secure}")).ok()
    }

    /// The session a request's cookie names.
    pub(crate) async fn session(self: &Arc<Self>, headers: &HeaderMap) -> Option<(String, SignedIn)> {
        let id = cookie(headers, COOKIE)?;
        self.session_at(&store::key(&id)).await.map(|session| (id, session))
    }

    /// The live session kept under `key` ([`store::key`]), refreshed first when its ID token
    /// is about to expire: a browser's, or the one a device that notifies was allowed in.
    pub(crate) async fn session_at(self: &Arc<Self>, key: &str) -> Option<SignedIn> {
        let session = self.store.get_at(key)?;
        let now = store::now();
        if session.expires > now + REFRESH_BEFORE || session.refresh_token.is_empty() || self.refresh_waits(key) {
            return (session.expires > now).then_some(session);
        }
        // In a task of its own: a request given up meanwhile (a tab closed) does not lose a
        // refresh token the provider has just rotated.
        let (app, refreshing) = (self.clone(), key.to_string());
        let fresh = tokio::spawn(async move { app.refresh(&refreshing).await }).await.ok().flatten();
        fresh.filter(|session| session.expires > store::now())
    }

    /// Whether session `key`'s refresh failed a moment ago and waits before the next try.
    fn refresh_waits(&self, key: &str) -> bool {
        self.refresh_after.waits(key, std::time::Instant::now())
    }

    /// Notes how session `key`'s refresh went (see [`Pauses`]).
    fn refresh_went(&self, key: &str, failed: bool) {
        self.refresh_after.went(key, failed, std::time::Instant::now());
    }

    /// Session `key` ([`store::key`]) with a fresh ID token from the provider, still let in by the site's
    /// admission lists; as it was when the provider cannot be reached; ended when the provider
    /// refuses the refresh or the account is no longer let in. One refresh at a time per
    /// session: a provider that rotates refresh tokens may end the session of a client that
    /// uses one twice.
    async fn refresh(&self, key: &str) -> Option<SignedIn> {
        let lock = {
            let mut refreshing = self.refreshing.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            refreshing.entry(key.to_string()).or_default().clone()
        };
        let _refreshing = lock.lock().await;
        let session = self.store.get_at(key)?;
        let fresh = if session.expires > store::now() + REFRESH_BEFORE || session.refresh_token.is_empty() {
            Some(session) // refreshed (or spent) meanwhile
        } else {
            let asked = self.oidc.refresh(&session.refresh_token, &session.subject);
            match tokio::time::timeout(REFRESH_TIMEOUT, asked).await {
                Ok(Ok(identity)) => {
                    self.refresh_went(key, false);
                    match self.admission.refuses(&identity) {
                        None => self.store.refreshed(key, identity).unwrap_or_else(|error| {
                            tracing::error!(%error, "cannot keep a refreshed session");
                            None
                        }),
                        Some(why) => {
                            tracing::warn!(subject = %identity.subject, why, "a session ended: the account is no longer let in");
                            self.end_session(key);
                            None
                        }
                    }
                }
                Ok(Err(error @ crate::oidc::OidcError::RefreshRefused(_))) => {
                    tracing::info!(%error, "a session ends with its ID token");
                    if let Err(error) = self.store.spent(key) {
                        tracing::error!(%error, "cannot keep a session");
                    }
                    Some(session)
                }
                Ok(Err(error)) => {
                    tracing::warn!(%error, "a session's ID token could not be refreshed now");
                    self.refresh_went(key, true);
                    Some(session)
                }
                Err(_) => {
                    tracing::warn!("the provider did not refresh a session's ID token within 10 s");
                    self.refresh_went(key, true);
                    Some(session)
                }
            }
        };
        self.refreshing.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(key);
        fresh
    }

    /// Ends the session kept under `key`, and what was tied to it ([`App::on_session_end`]):
    /// the devices allowed in it are told no more (a shared tablet, the next person).
    pub(crate) fn end_session(&self, key: &str) {
        if let Err(error) = self.store.sign_out(key) {
            tracing::error!(%error, "cannot end a session");
        }
        if let Some(ended) = self.on_session_end.get() {
            ended(key);
        }
    }

    /// Reads the client secret again from the daemon (one set while the gateway runs); whether
    /// it differs from the one in use.
    pub(crate) async fn read_client_secret_again(&self) -> bool {
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
pub(crate) fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.to_string())
}

/// A signed-in caller of the API. For anything but GET and HEAD the request must carry the
/// session's CSRF token in `x-csrf-token`, which only this site's page can read.
pub struct User {
    pub cookie: String,
    pub session: SignedIn,
}

impl FromRequestParts<Arc<App>> for User {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<App>) -> Result<User, Response> {
        let Some((cookie, session)) = app.session(&parts.headers).await else {
            return Err(error(StatusCode::UNAUTHORIZED, "Sign in first."));
        };
        if parts.method != Method::GET && parts.method != Method::HEAD {
            let token = parts.headers.get("x-csrf-token").and_then(|value| value.to_str().ok());
            if token != Some(session.csrf.as_str()) {
                tracing::warn!(path = %parts.uri.path(), "a state-changing request without the session's CSRF token");
                return Err(error(
                    StatusCode::FORBIDDEN,
                    "This request did not come from this site's page; reload it.",
                ));
            }
        }
        Ok(User { cookie, session })
    }
}

/// A JSON error with a sentence for the user.
pub fn error(status: StatusCode, sentence: &str) -> Response {
    (status, Json(json!({"error": sentence}))).into_response()
}

/// A JSON error for a refusal or failure of the daemon, in the words every channel uses
/// ([`baaaht_gateway_kit::sentences::for_users`]): its sentence when it is about what the user
/// asked (a budget, a permission, bad input), a plain one otherwise (the detail is in the log).
pub fn api_error(status: &tonic::Status) -> Response {
    use tonic::Code;
    let code = match status.code() {
        Code::ResourceExhausted | Code::InvalidArgument => StatusCode::BAD_REQUEST,
        Code::PermissionDenied | Code::NotFound | Code::FailedPrecondition => {
            tracing::info!(code = ?status.code(), message = %status.message(), "the daemon refused a web request");
            StatusCode::FORBIDDEN
        }
        Code::Unauthenticated => return error(StatusCode::UNAUTHORIZED, "Your sign-in has expired; sign in again."),
        _ => StatusCode::BAD_GATEWAY,
    };
    error(code, &baaaht_gateway_kit::sentences::for_users(status))
}

/// The page's answer to a daemon call: JSON made of what it answered, or its refusal.
pub(crate) fn answer<T>(called: Result<tonic::Response<T>, tonic::Status>, shown: impl FnOnce(T) -> Value) -> Response {
    match called {
        Ok(answered) => Json(shown(answered.into_inner())).into_response(),
        Err(status) => api_error(&status),
    }
}

/// How long a user's canonical id is taken as the daemon last gave it (linking identities may
/// change it; the daemon checks every call either way).
pub const ID_KEPT_FOR: std::time::Duration = std::time::Duration::from_secs(30);

/// Where a request acts: the user's own context, or a room (a group) they are in.
#[derive(Debug, Default, Deserialize)]
pub struct Place {
    #[serde(default)]
    pub room: String,
}

impl App {
    /// The context `place` names for `user`: a room's group, once the daemon has shown it to
    /// them (members only: anyone else is refused here, before a stream is opened), or the
    /// user's own.
    pub async fn context(&self, user: &SignedIn, place: &Place) -> Result<v1::ContextRef, tonic::Status> {
        let mut daemon = self.daemon.clone();
        if !place.room.is_empty() {
            let room = v1::GroupRef { id: place.room.clone() };
            daemon.admin.show_group(self.as_user(user, room)).await?;
            return Ok(v1::ContextRef { r#type: v1::ContextType::Group as i32, id: place.room.clone() });
        }
        Ok(v1::ContextRef { r#type: v1::ContextType::User as i32, id: self.user_id(user).await? })
    }

    /// `user`'s profile as the daemon said it at most `max_age` ago: the one place the web asks
    /// the daemon who someone is. `Duration::ZERO` asks anew (a list of rooms and sessions must
    /// show a group made or joined at once); every answer is kept for the next.
    pub async fn profile(
        &self,
        user: &SignedIn,
        max_age: std::time::Duration,
    ) -> Result<v1::UserProfile, tonic::Status> {
        let identity = self.identity(user);
        let kept = {
            let profiles = self.profiles.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            profiles.get(&identity).filter(|(_, when)| when.elapsed() < max_age).map(|(me, _)| me.clone())
        };
        if let Some(me) = kept {
            return Ok(me);
        }
        let mut daemon = self.daemon.clone();
        let me = daemon.gateways.who_am_i(self.as_user(user, v1::WhoAmIRequest {})).await?.into_inner();
        self.keep_profile(user, &me);
        Ok(me)
    }

    /// Keeps `me` as `user`'s profile the daemon just said (an answer to an update is one too).
    pub fn keep_profile(&self, user: &SignedIn, me: &v1::UserProfile) {
        let mut profiles = self.profiles.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if profiles.len() >= 10_000 {
            profiles.retain(|_, (_, when)| when.elapsed() < ID_KEPT_FOR);
        }
        profiles.insert(self.identity(user), (me.clone(), std::time::Instant::now()));
    }

    /// The canonical id of `user`, as the daemon said it at most [`ID_KEPT_FOR`] ago.
    pub async fn user_id(&self, user: &SignedIn) -> Result<String, tonic::Status> {
        Ok(self.profile(user, ID_KEPT_FOR).await?.id)
    }

    /// Who `user` is, to tell their own messages from others' (without showing anyone's ids).
    pub async fn me(&self, user: &SignedIn) -> Result<Me, tonic::Status> {
        Ok(Me { identity: self.identity(user), id: self.user_id(user).await? })
    }

    /// The channel identity of `user` (`web:{issuer}#{sub}`).
    pub fn identity(&self, user: &SignedIn) -> String {
        format!("web:{}#{}", self.issuer, user.subject)
    }
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
