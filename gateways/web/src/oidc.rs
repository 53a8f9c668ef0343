//! Sign-in with OpenID Connect (`openidconnect`): the issuer's discovery, the authorization
//! code flow with PKCE (S256), `state` (one use, ten minutes) and `nonce` checked, the ID token
//! validated (signature against the issuer's keys, issuer, audience, expiry, nonce), and
//! RP-initiated logout where the provider offers it. The issuer and client come from the
//! daemon, which verifies every ID token again on every call.

use std::future::Future;
use std::pin::Pin;

use baaaht_proto::egress::Egress;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use openidconnect::core::{
    CoreAuthenticationFlow, CoreClient, CoreGenderClaim, CoreJweContentEncryptionAlgorithm, CoreJwsSigningAlgorithm,
};
use openidconnect::{
    AuthorizationCode, ClientId, ClientSecret, CsrfToken, EndpointMaybeSet, EndpointNotSet, EndpointSet, IssuerUrl,
    LogoutRequest, Nonce, OAuth2TokenResponse as _, PkceCodeChallenge, PkceCodeVerifier, PostLogoutRedirectUrl,
    ProviderMetadataWithLogout, RedirectUrl, RefreshToken, Scope, TokenResponse as _,
};

/// The most an answer of the issuer may be.
const MAX_ANSWER: usize = 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    #[error("the issuer {issuer}: {message}")]
    Discovery { issuer: String, message: String },
    #[error("{0}")]
    Config(String),
    #[error("the sign-in failed: {0}")]
    SignIn(String),
    #[error("the provider refused to refresh the session: {0}")]
    RefreshRefused(String),
    /// The provider refused the site's client credentials at its token endpoint.
    #[error("the provider refused this site's client credentials: {0}")]
    Client(String),
}

impl OidcError {
    /// Whether the failure tells of the site or its provider (a secret refused, keys that do
    /// not check, the provider out of reach), not of one browser's answer (a used or made-up
    /// code, an answer naming another issuer), which anyone can send: only the site's make its
    /// health degraded.
    pub fn is_the_sites(&self) -> bool {
        match self {
            OidcError::Client(_) | OidcError::Discovery { .. } | OidcError::Config(_) => true,
            OidcError::SignIn(why) => !why.starts_with("refused: ") && why != "the answer came from another issuer",
            OidcError::RefreshRefused(_) => false,
        }
    }

    /// What the person signing in is told: what failed, and who can fix it.
    pub fn for_people(&self) -> &'static str {
        match self {
            OidcError::Client(_) => {
                "The sign-in could not be completed: the identity provider refused this site's client \
                 credentials (its client id or secret). Whoever runs this assistant must store the client \
                 secret the provider gave (baahtd secrets set); then sign in again."
            }
            OidcError::SignIn(_) => {
                "The sign-in could not be completed: the identity provider's answer was refused or could not be \
                 checked; sign in again."
            }
            _ => {
                "The sign-in could not be completed: the identity provider could not be reached; try again in a minute."
            }
        }
    }
}

/// How often the provider's keys may be read again because a token's signature did not check.
const REDISCOVER_AT_MOST: std::time::Duration = std::time::Duration::from_secs(60);

/// An HTTP error for openidconnect's client.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HttpError(String);

type Https = Client<hyper_rustls::HttpsConnector<Egress>, Full<Bytes>>;

/// The HTTP client openidconnect calls: no redirects followed, answers at most 1 MiB. It dials
/// through `egress` (the daemon's tunnel, in the gateway's container).
#[derive(Clone)]
pub struct Http(Https);

impl Http {
    pub fn new(egress: Egress) -> Result<Http, OidcError> {
        // ring, named: a library asking for the default cannot choose when more than one is built.
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(tokio_rustls::rustls::crypto::ring::default_provider())
            .map_err(|error| OidcError::Config(format!("cannot load the system's CA certificates: {error}")))?
            .https_or_http()
            .enable_http1()
            .wrap_connector(egress);
        Ok(Http(Client::builder(TokioExecutor::new()).build(https)))
    }
}

impl<'c> openidconnect::AsyncHttpClient<'c> for Http {
    type Error = HttpError;
    type Future = Pin<Box<dyn Future<Output = Result<openidconnect::HttpResponse, HttpError>> + Send + Sync + 'c>>;

    fn call(&'c self, request: openidconnect::HttpRequest) -> Self::Future {
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let request = http::Request::from_parts(parts, Full::new(Bytes::from(body)));
            let response = self.0.request(request).await.map_err(|error| HttpError(error.to_string()))?;
            let (parts, body) = response.into_parts();
            let limited = http_body_util::Limited::new(body, MAX_ANSWER);
            let bytes = limited.collect().await.map_err(|error| HttpError(error.to_string()))?.to_bytes();
            Ok(http::Response::from_parts(parts, bytes.to_vec()))
        })
    }
}

type Configured =
    CoreClient<EndpointSet, EndpointNotSet, EndpointNotSet, EndpointNotSet, EndpointMaybeSet, EndpointMaybeSet>;

/// The relying party.
pub struct Oidc {
    /// Replaced when the provider's keys are read again or the client secret changes.
    client: std::sync::RwLock<Configured>,
    http: Http,
    issuer: String,
    client_id: String,
    client_secret: std::sync::Mutex<Option<String>>,
    redirect: RedirectUrl,
    /// When the discovery document and keys were last read again for a token that did not
    /// check (none yet: the first time is at once).
    rediscovered: tokio::sync::Mutex<Option<std::time::Instant>>,
    end_session: Option<String>,
    /// Scopes asked for beyond `openid email profile` (e.g. `groups`).
    pub extra_scopes: Vec<String>,
    /// The claim that lists an account's groups.
    pub groups_claim: String,
}

/// Where to send the browser to sign in, and what to keep until it comes back.
pub struct Start {
    pub url: String,
    pub state: String,
    pub nonce: String,
    pub pkce_verifier: String,
}

/// Who signed in.
#[derive(Debug, Clone)]
pub struct Identity {
    pub subject: String,
    pub name: String,
    pub email: String,
    pub id_token: String,
    /// Seconds since the epoch.
    pub expires: u64,
    /// Whether the provider says it verified the email address (`email_verified`).
    pub email_verified: bool,
    /// The groups the provider lists for them (the `--groups-claim`, `groups` by default).
    pub groups: Vec<String>,
    /// What gets a fresh ID token when this one expires, where the provider gives one.
    pub refresh_token: Option<String>,
    /// The access token of a refresh that brought no ID token (`id_token` is then empty, and
    /// `expires` the access token's).
    pub access_token: String,
}

/// Who may sign in at all: when a list is given, an account must match it.
#[derive(Debug, Clone, Default)]
pub struct Admission {
    /// Email addresses let in (compared without case), verified by the provider.
    pub emails: Vec<String>,
    /// Domains whose verified addresses are let in (`example.com`).
    pub domains: Vec<String>,
    /// Groups of which an account must be in at least one.
    pub groups: Vec<String>,
}

impl Admission {
    /// Why `identity` may not sign in, or `None` when it may. With both emails and domains
    /// given, matching either lets an account in.
    pub fn refuses(&self, identity: &Identity) -> Option<&'static str> {
        if !self.emails.is_empty() || !self.domains.is_empty() {
            let email = identity.email.to_lowercase();
            if email.is_empty() || !identity.email_verified {
                return Some("the provider gave no verified email address");
            }
            let domain = email.rsplit_once('@').map(|(_, domain)| domain).unwrap_or_default();
            let listed = self.emails.iter().any(|allowed| allowed.to_lowercase() == email)
                || self.domains.iter().any(|allowed| allowed.trim_start_matches('@').to_lowercase() == domain);
            if !listed {
                return Some("the email address is not on the site's list");
            }
        }
        if !self.groups.is_empty() && !identity.groups.iter().any(|group| self.groups.contains(group)) {
            return Some("the account is in none of the required groups");
        }
        None
    }
}

/// A token endpoint's failure as an [`OidcError`]: the provider refusing the site's client
/// ([`OidcError::Client`]), refusing the grant (`refused: …`), or not answering.
fn token_error<E: std::error::Error>(
    error: openidconnect::RequestTokenError<
        E,
        openidconnect::StandardErrorResponse<openidconnect::core::CoreErrorResponseType>,
    >,
) -> OidcError {
    use openidconnect::core::CoreErrorResponseType;
    match error {
        openidconnect::RequestTokenError::ServerResponse(answer) => match answer.error() {
            CoreErrorResponseType::InvalidClient | CoreErrorResponseType::UnauthorizedClient => {
                OidcError::Client(answer.to_string())
            }
            _ => OidcError::SignIn(format!("refused: {answer}")),
        },
        other => OidcError::SignIn(other.to_string()),
    }
}

/// The claims of a userinfo answer beyond the standard ones (the groups claim among them).
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
struct OtherClaims {
    #[serde(flatten)]
    claims: serde_json::Map<String, serde_json::Value>,
}

impl openidconnect::AdditionalClaims for OtherClaims {}

/// The claims of an ID token already verified, as JSON (for what the typed claims lack).
fn payload_of(id_token: &str) -> serde_json::Value {
    use base64::Engine as _;
    let payload = id_token.split('.').nth(1).unwrap_or_default();
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

/// The groups named in claim `claim`: a list of strings, or one string.
fn groups_in(payload: &serde_json::Value, claim: &str) -> Vec<String> {
    match &payload[claim] {
        serde_json::Value::Array(groups) => {
            groups.iter().filter_map(|group| group.as_str()).map(str::to_string).collect()
        }
        serde_json::Value::String(group) => vec![group.clone()],
        _ => vec![],
    }
}

impl Oidc {
    /// Reads `issuer`'s discovery document and makes the client `client_id` (with its secret
    /// for a confidential client) answering at `redirect`.
    pub async fn discover(
        issuer: &str,
        client_id: &str,
        client_secret: Option<String>,
        redirect: &str,
        egress: Egress,
    ) -> Result<Oidc, OidcError> {
        let http = Http::new(egress)?;
        let redirect = RedirectUrl::new(redirect.to_string())
            .map_err(|error| OidcError::Config(format!("--public-url gives the callback `{redirect}`: {error}")))?;
        let (client, end_session) =
            Self::client_of(&http, issuer, client_id, client_secret.clone(), redirect.clone()).await?;
        Ok(Oidc {
            client: std::sync::RwLock::new(client),
            http,
            issuer: issuer.to_string(),
            client_id: client_id.to_string(),
            client_secret: std::sync::Mutex::new(client_secret),
            redirect,
            rediscovered: tokio::sync::Mutex::new(None),
            end_session,
            extra_scopes: vec![],
            groups_claim: "groups".into(),
        })
    }

    /// The client from `issuer`'s discovery document and keys, read now.
    async fn client_of(
        http: &Http,
        issuer: &str,
        client_id: &str,
        client_secret: Option<String>,
        redirect: RedirectUrl,
    ) -> Result<(Configured, Option<String>), OidcError> {
        let issuer_url = IssuerUrl::new(issuer.to_string())
            .map_err(|error| OidcError::Config(format!("issuer `{issuer}`: {error}")))?;
        let metadata = ProviderMetadataWithLogout::discover_async(issuer_url, http)
            .await
            .map_err(|error| OidcError::Discovery { issuer: issuer.into(), message: error.to_string() })?;
        let end_session = metadata.additional_metadata().end_session_endpoint.as_ref().map(|url| url.to_string());
        let client = CoreClient::from_provider_metadata(
            metadata,
            ClientId::new(client_id.into()),
            client_secret.map(ClientSecret::new),
        )
        .set_redirect_uri(redirect);
        Ok((client, end_session))
    }

    fn client(&self) -> Configured {
        self.client.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Reads the provider's discovery document and keys again (a key rotated since), unless
    /// that was done less than [`REDISCOVER_AT_MOST`] ago; whether they were read.
    async fn rediscover(&self) -> bool {
        let mut rediscovered = self.rediscovered.lock().await;
        if rediscovered.is_some_and(|when| when.elapsed() < REDISCOVER_AT_MOST) {
            return false;
        }
        *rediscovered = Some(std::time::Instant::now());
        let secret = self.client_secret.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        match Self::client_of(&self.http, &self.issuer, &self.client_id, secret, self.redirect.clone()).await {
            Ok((client, _)) => {
                tracing::info!(issuer = %self.issuer, "read the provider's keys again");
                *self.client.write().unwrap_or_else(std::sync::PoisonError::into_inner) = client;
                true
            }
            Err(error) => {
                tracing::warn!(%error, "cannot read the provider's keys again");
                false
            }
        }
    }

    /// Uses `secret` as the client secret from now on; whether it differs from the one used.
    pub fn use_client_secret(&self, secret: Option<String>) -> bool {
        let mut current = self.client_secret.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if *current == secret {
            return false;
        }
        *current = secret.clone();
        let mut client = self.client.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut replaced = client.clone();
        if let Some(secret) = secret {
            replaced = replaced.set_client_secret(ClientSecret::new(secret));
        }
        *client = replaced;
        true
    }

    /// A sign-in: the provider's URL with a fresh state, nonce and PKCE challenge.
    pub fn start(&self, state: String) -> Start {
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let nonce = Nonce::new_random();
        let kept = nonce.clone();
        let (url, state, _) = self
            .client()
            .authorize_url(CoreAuthenticationFlow::AuthorizationCode, move || CsrfToken::new(state), move || kept)
            .add_scope(Scope::new("email".into()))
            .add_scope(Scope::new("profile".into()))
            .add_scopes(self.extra_scopes.iter().map(|scope| Scope::new(scope.clone())))
            .set_pkce_challenge(challenge)
            .url();
        Start {
            url: url.to_string(),
            state: state.secret().clone(),
            nonce: nonce.secret().clone(),
            pkce_verifier: verifier.secret().clone(),
        }
    }

    /// Finishes a sign-in: the code exchanged (with the PKCE verifier), the ID token checked
    /// against the nonce, who signed in. `iss`, when the provider sends it back, must be ours.
    pub async fn finish(
        &self,
        code: &str,
        iss: Option<&str>,
        nonce: &str,
        pkce_verifier: String,
    ) -> Result<Identity, OidcError> {
        if iss.is_some_and(|iss| iss.trim_end_matches('/') != self.issuer.trim_end_matches('/')) {
            return Err(OidcError::SignIn("the answer came from another issuer".into()));
        }
        let client = self.client();
        let request = client
            .exchange_code(AuthorizationCode::new(code.into()))
            .map_err(|error| OidcError::Config(error.to_string()))?
            .set_pkce_verifier(PkceCodeVerifier::new(pkce_verifier));
        let tokens = request.request_async(&self.http).await.map_err(token_error)?;
        let id_token = tokens.id_token().ok_or_else(|| OidcError::SignIn("the provider sent no ID token".into()))?;
        let nonce = Nonce::new(nonce.into());
        let checked = match id_token.claims(&client.id_token_verifier(), &nonce) {
            Ok(claims) => Ok(claims.clone()),
            // Signed with a key not read yet (rotated at the provider): its keys are read again.
            Err(error) if self.rediscover().await => {
                tracing::info!(%error, "an ID token did not check with the keys read before; checking with the new ones");
                id_token.claims(&self.client().id_token_verifier(), &nonce).cloned()
            }
            Err(error) => Err(error),
        };
        let claims = checked.map_err(|error| OidcError::SignIn(format!("the ID token is not valid: {error}")))?;
        Ok(self.identity_of(id_token.to_string(), &claims, tokens.refresh_token()))
    }

    /// Who an ID token (already verified) names, with what it says of them.
    fn identity_of(
        &self,
        id_token: String,
        claims: &openidconnect::IdTokenClaims<openidconnect::EmptyAdditionalClaims, CoreGenderClaim>,
        refresh_token: Option<&RefreshToken>,
    ) -> Identity {
        let name = claims
            .name()
            .and_then(|name| name.get(None))
            .map(|name| name.to_string())
            .or_else(|| claims.preferred_username().map(|name| name.to_string()))
            .unwrap_or_default();
        Identity {
            subject: claims.subject().to_string(),
            name,
            email: claims.email().map(|email| email.to_string()).unwrap_or_default(),
            email_verified: claims.email_verified().unwrap_or(false),
            groups: groups_in(&payload_of(&id_token), &self.groups_claim),
            id_token,
            expires: claims.expiration().timestamp().max(0) as u64,
            refresh_token: refresh_token.map(|token| token.secret().clone()),
            access_token: String::new(),
        }
    }

    /// A fresh ID token for `subject` with `refresh_token`, checked as at sign-in (but for a
    /// nonce: a refreshed ID token carries none, or the one of the sign-in) and checked to name
    /// the same subject. [`OidcError::RefreshRefused`] when the provider said no (the refresh
    /// token is spent, revoked or expired: asking again will not help).
    pub async fn refresh(&self, refresh_token: &str, subject: &str) -> Result<Identity, OidcError> {
        let token = RefreshToken::new(refresh_token.to_string());
        let client = self.client();
        let request = client.exchange_refresh_token(&token).map_err(|error| OidcError::Config(error.to_string()))?;
        let tokens = request.request_async(&self.http).await.map_err(|error| match token_error(error) {
            OidcError::SignIn(answer) if answer.starts_with("refused: ") => OidcError::RefreshRefused(answer),
            other => other,
        })?;
        let Some(id_token) = tokens.id_token() else {
            // The provider may refresh without a new ID token (OpenID Connect Core §12.2): its
            // userinfo endpoint must then say the new access token names the same subject.
            return self.confirmed(&client, &tokens, subject).await;
        };
        let any_nonce = |_: Option<&Nonce>| -> Result<(), String> { Ok(()) };
        let checked = match id_token.claims(&client.id_token_verifier(), any_nonce) {
            Ok(claims) => Ok(claims.clone()),
            Err(_) if self.rediscover().await => {
                id_token.claims(&self.client().id_token_verifier(), any_nonce).cloned()
            }
            Err(error) => Err(error),
        };
        let claims =
            checked.map_err(|error| OidcError::SignIn(format!("the refreshed ID token is not valid: {error}")))?;
        if claims.subject().as_str() != subject {
            return Err(OidcError::SignIn("the refreshed ID token names someone else".into()));
        }
        Ok(self.identity_of(id_token.to_string(), &claims, tokens.refresh_token()))
    }

    /// The session refreshed without an ID token, when the provider's userinfo endpoint says
    /// its new access token names `subject`: `id_token` empty, `expires` the access token's.
    async fn confirmed(
        &self,
        client: &Configured,
        tokens: &openidconnect::core::CoreTokenResponse,
        subject: &str,
    ) -> Result<Identity, OidcError> {
        let expected = openidconnect::SubjectIdentifier::new(subject.to_string());
        let request = client
            .user_info(tokens.access_token().clone(), Some(expected))
            .map_err(|error| OidcError::SignIn(format!("the provider's refresh brought no ID token and {error}")))?;
        let info: openidconnect::UserInfoClaims<OtherClaims, CoreGenderClaim> =
            request.request_async(&self.http).await.map_err(|error| {
                OidcError::SignIn(format!("the provider's refresh brought no ID token, and its userinfo: {error}"))
            })?;
        let lasts = tokens.expires_in().unwrap_or(std::time::Duration::from_secs(300));
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Ok(Identity {
            subject: info.subject().to_string(),
            name: info.name().and_then(|name| name.get(None)).map(|name| name.to_string()).unwrap_or_default(),
            email: info.email().map(|email| email.to_string()).unwrap_or_default(),
            id_token: String::new(),
            expires: (now + lasts).as_secs(),
            email_verified: info.email_verified().unwrap_or(false),
            groups: groups_in(&serde_json::Value::Object(info.additional_claims().claims.clone()), &self.groups_claim),
            refresh_token: tokens.refresh_token().map(|token| token.secret().clone()),
            access_token: tokens.access_token().secret().clone(),
        })
    }

    /// Where to send the browser to sign out at the provider too, when it offers that.
    pub fn logout_url(&self, id_token: &str, back: &str) -> Option<String> {
        let end_session = self.end_session.as_ref()?;
        let url = openidconnect::EndSessionUrl::new(end_session.clone()).ok()?;
        let hint: openidconnect::IdToken<
            openidconnect::EmptyAdditionalClaims,
            CoreGenderClaim,
            CoreJweContentEncryptionAlgorithm,
            CoreJwsSigningAlgorithm,
        > = id_token.parse().ok()?;
        let request = LogoutRequest::from(url).set_id_token_hint(&hint);
        let request = match PostLogoutRedirectUrl::new(back.to_string()) {
            Ok(back) => request.set_post_logout_redirect_uri(back),
            Err(_) => request,
        };
        Some(request.http_get_url().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn someone(email: &str, verified: bool, groups: &[&str]) -> Identity {
        Identity {
            subject: "s".into(),
            name: "S".into(),
            email: email.into(),
            id_token: String::new(),
            expires: 0,
            refresh_token: None,
            email_verified: verified,
            groups: groups.iter().map(|group| group.to_string()).collect(),
            access_token: String::new(),
        }
    }

    #[test]
    fn only_listed_verified_addresses_and_required_groups_are_let_in() {
        let open = Admission::default();
        assert_eq!(open.refuses(&someone("", false, &[])), None, "no lists: everyone the provider signs in");
        let by_mail =
            Admission { emails: vec!["Gran@Example.org".into()], domains: vec!["family.test".into()], groups: vec![] };
        assert_eq!(by_mail.refuses(&someone("gran@example.org", true, &[])), None);
        assert_eq!(by_mail.refuses(&someone("kid@family.test", true, &[])), None);
        assert!(by_mail.refuses(&someone("kid@family.test", false, &[])).is_some(), "unverified");
        assert!(
            by_mail.refuses(&someone("kid@evil.family.test", true, &[])).is_some(),
            "a subdomain is another domain"
        );
        assert!(by_mail.refuses(&someone("mallory@example.com", true, &[])).is_some());
        let by_group = Admission { groups: vec!["family".into()], ..Admission::default() };
        assert_eq!(by_group.refuses(&someone("", false, &["users", "family"])), None);
        assert!(by_group.refuses(&someone("", false, &["users"])).is_some());
    }

    #[test]
    fn groups_are_read_from_a_list_or_a_string() {
        use base64::Engine as _;
        let payload =
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(r#"{"groups":["a","b"],"role":"admins"}"#);
        let claims = payload_of(&format!("header.{payload}.signature"));
        assert_eq!(groups_in(&claims, "groups"), ["a", "b"]);
        assert_eq!(groups_in(&claims, "role"), ["admins"]);
        assert!(groups_in(&claims, "missing").is_empty());
        assert!(groups_in(&payload_of("not a token"), "groups").is_empty());
    }
}
