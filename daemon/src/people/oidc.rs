//! OpenID Connect ID tokens, verified by the daemon itself (DESIGN.md §9.1): the web gateway
//! passes its user's ID token on every call, and the daemon trusts the user it names only if
//! the token's signature checks against its issuer's published keys and its `iss`, `aud`, `exp`,
//! `nbf` and `sub` are right. The keys (JWKS, found through the issuer's discovery document)
//! are fetched through the daemon's egress proxy, so the issuer is reached under the same rules
//! as any web request (a provider on the home network needs an entry in
//! `tools.web_proxy.allow`), and cached for ten minutes; a key id not in the cache makes one
//! early refetch (a rotated key) at most every ten seconds (only a registered gateway passes ID
//! tokens, and the web gateway checks each before it does). While the issuer cannot be reached,
//! the keys last fetched stay in use for up to a day (a provider away must not sign out everyone
//! signed in), and it is asked again at most every ten seconds. Only asymmetric algorithms are
//! accepted: a JWKS cannot hold a shared secret, and `none` is never a signature.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use crate::net::egress::proxy::{FetchRequest, WebProxy};

/// How long fetched keys are used.
const JWKS_FRESH: Duration = Duration::from_secs(600);
/// The soonest keys are fetched again for an unknown key id, or after a fetch failed.
const REFETCH_AT_MOST: Duration = Duration::from_secs(10);
/// How long fetched keys stay in use while their issuer cannot be reached.
const KEPT_WHILE_AWAY: Duration = Duration::from_secs(24 * 3600);
/// Clock skew tolerated on `exp` and `nbf`.
const LEEWAY_SECONDS: u64 = 60;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OidcError {
    #[error("the ID token does not parse: {0}")]
    Malformed(String),
    #[error("the ID token is signed with {0:?}, which is not accepted (only asymmetric algorithms are)")]
    Algorithm(Algorithm),
    #[error("the ID token names key `{0}`, which the issuer does not publish")]
    UnknownKey(String),
    #[error("cannot fetch the issuer's keys: {0}")]
    Keys(String),
    /// The issuer could not be reached, or failed (5xx): its last keys may stand meanwhile.
    #[error("cannot fetch the issuer's keys: {0}")]
    Unreachable(String),
    #[error("the ID token is refused: {0}")]
    Invalid(String),
    #[error("the ID token has expired: sign in again")]
    Expired,
    #[error("the ID token is for subject `{token}`, not the user the gateway named (`{named}`)")]
    OtherSubject { token: String, named: String },
    #[error("the ID token has expired, and the provider does not confirm the session: {0}")]
    NotConfirmed(String),
}

/// How long the provider's word (userinfo) that an access token names a subject is taken.
const CONFIRMED_FOR: Duration = Duration::from_secs(300);

/// The claims the daemon reads.
#[derive(Debug, Clone, Deserialize)]
pub struct Claims {
    pub sub: String,
    pub iss: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub email: Option<String>,
    /// When it expires (seconds since the epoch).
    #[serde(default)]
    pub exp: u64,
}

/// The oldest an expired ID token may be and still stand, with a session the provider confirms.
const EXPIRED_AT_MOST: Duration = Duration::from_secs(30 * 24 * 3600);

struct Cached {
    keys: JwkSet,
    fetched: Instant,
    /// When the keys were last asked for, fetched or not.
    tried: Instant,
}

async fn get_json(web: &WebProxy, url: &str) -> Result<serde_json::Value, OidcError> {
    let request = FetchRequest {
        session: "oidc".into(),
        method: "GET".into(),
        url: url.to_string(),
        headers: vec![("accept".into(), "application/json".into())],
        body: vec![],
        follow_redirects: true,
    };
    let response = web.fetch(request).await.map_err(|error| OidcError::Unreachable(format!("{url}: {error}")))?;
    if response.status >= 500 {
        return Err(OidcError::Unreachable(format!("{url} answered {}", response.status)));
    }
    if response.status != 200 {
        return Err(OidcError::Keys(format!("{url} answered {}", response.status)));
    }
    serde_json::from_slice(&response.body).map_err(|error| OidcError::Keys(format!("{url} is not JSON: {error}")))
}

/// The `host:port` of `url` (the scheme's port when it names none).
pub fn host_port(url: &str) -> Option<String> {
    let uri = url.parse::<http::Uri>().ok()?;
    let host = uri.host()?;
    let port = uri.port_u16().unwrap_or(if uri.scheme_str() == Some("http") { 80 } else { 443 });
    Some(format!("{host}:{port}"))
}

/// The hosts a relying party of `issuer` talks to besides the issuer's own: those of the token,
/// key, userinfo and logout endpoints its discovery document names.
pub async fn endpoint_hosts(web: &WebProxy, issuer: &str) -> Result<Vec<String>, OidcError> {
    let discovery = format!("{}/.well-known/openid-configuration", issuer.trim_end_matches('/'));
    let document = get_json(web, &discovery).await?;
    let mut hosts: Vec<String> = ["token_endpoint", "jwks_uri", "userinfo_endpoint", "end_session_endpoint"]
        .iter()
        .filter_map(|key| document[*key].as_str())
        .filter_map(host_port)
        .collect();
    hosts.sort();
    hosts.dedup();
    Ok(hosts)
}

/// Verifies ID tokens, with every issuer's keys cached.
pub struct Verifier {
    web: Arc<WebProxy>,
    cache: Mutex<HashMap<String, Cached>>,
    /// Sessions the provider confirmed at its userinfo endpoint: a digest of the access token
    /// → the subject it named, and until when that is taken.
    confirmed: Mutex<HashMap<[u8; 32], (String, Instant)>>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier").finish_non_exhaustive()
    }
}

const ACCEPTED: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

impl Verifier {
    pub fn new(web: Arc<WebProxy>) -> Verifier {
        Verifier { web, cache: Mutex::default(), confirmed: Mutex::default() }
    }

    fn cached_key(&self, issuer: &str, kid: Option<&str>, max_age: Duration) -> Option<Result<DecodingKey, OidcError>> {
        let cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        let cached = cache.get(issuer).filter(|cached| cached.fetched.elapsed() < max_age)?;
        let jwk = match kid {
            Some(kid) => cached.keys.find(kid),
            None if cached.keys.keys.len() == 1 => cached.keys.keys.first(),
            None => None,
        }?;
        Some(
            DecodingKey::from_jwk(jwk)
                .map_err(|error| OidcError::Keys(format!("a published key does not load: {error}"))),
        )
    }

    /// The key `kid` of `issuer` (the only key, when the token names none).
    async fn key(&self, issuer: &str, kid: Option<&str>) -> Result<DecodingKey, OidcError> {
        if let Some(key) = self.cached_key(issuer, kid, JWKS_FRESH) {
            return key;
        }
        // Not cached, stale, or a key id not seen yet (rotated): fetch, unless just tried.
        let recent = {
            let cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
            cache.get(issuer).is_some_and(|cached| cached.tried.elapsed() < REFETCH_AT_MOST)
        };
        if !recent {
            // Marked before the fetch: callers meanwhile do not ask again.
            if let Some(cached) = self.cache.lock().unwrap_or_else(PoisonError::into_inner).get_mut(issuer) {
                cached.tried = Instant::now();
            }
            match self.fetch(issuer).await {
                Ok(keys) => {
                    let now = Instant::now();
                    let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
                    cache.insert(issuer.to_string(), Cached { keys, fetched: now, tried: now });
                }
                // Only an issuer away leaves its last keys standing: one that answers (another
                // issuer, a set that does not parse, a 404) is believed.
                Err(error @ OidcError::Unreachable(_)) => {
                    let Some(kept) = self.cached_key(issuer, kid, KEPT_WHILE_AWAY) else { return Err(error) };
                    tracing::warn!(issuer, %error, "cannot fetch the issuer's keys; the last fetched stay in use");
                    return kept;
                }
                Err(error) => {
                    self.cache.lock().unwrap_or_else(PoisonError::into_inner).remove(issuer);
                    return Err(error);
                }
            }
        }
        self.cached_key(issuer, kid, KEPT_WHILE_AWAY)
            .unwrap_or_else(|| Err(OidcError::UnknownKey(kid.unwrap_or("(none)").to_string())))
    }

    async fn fetch(&self, issuer: &str) -> Result<JwkSet, OidcError> {
        let discovery = format!("{}/.well-known/openid-configuration", issuer.trim_end_matches('/'));
        let document = get_json(&self.web, &discovery).await?;
        if document["issuer"].as_str() != Some(issuer) {
            return Err(OidcError::Keys(format!("{discovery} names another issuer ({})", document["issuer"])));
        }
        let jwks_uri = document["jwks_uri"]
            .as_str()
            .ok_or_else(|| OidcError::Keys(format!("{discovery} has no jwks_uri")))?
            .to_string();
        let keys = get_json(&self.web, &jwks_uri).await?;
        serde_json::from_value(keys).map_err(|error| OidcError::Keys(format!("{jwks_uri} is not a JWK set: {error}")))
    }

    /// Verifies a web gateway's user: `token` as an ID token of `issuer` for `audience` naming
    /// `subject`; or, when it has expired and the gateway also sent the session's
    /// `access_token` (a provider may refresh a session without a new ID token), the ID token
    /// but for its expiry, and the provider's userinfo endpoint saying now that the access token
    /// names the same subject (its word kept [`CONFIRMED_FOR`]).
    pub async fn verify_session(
        &self,
        token: &str,
        access_token: Option<&str>,
        issuer: &str,
        audience: &str,
        subject: &str,
    ) -> Result<Claims, OidcError> {
        match (self.verify_with(token, issuer, audience, subject, true).await, access_token) {
            (Err(OidcError::Expired), Some(access)) => {
                let claims = self.verify_with(token, issuer, audience, subject, false).await?;
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                if claims.exp + EXPIRED_AT_MOST.as_secs() < now.as_secs() {
                    return Err(OidcError::NotConfirmed(
                        "the ID token expired more than 30 days ago: sign in again".into(),
                    ));
                }
                self.confirm(issuer, access, subject).await?;
                Ok(claims)
            }
            (verified, _) => verified,
        }
    }

    /// Asks `issuer`'s userinfo endpoint whether `access_token` names `subject`.
    async fn confirm(&self, issuer: &str, access_token: &str, subject: &str) -> Result<(), OidcError> {
        use sha2::Digest as _;
        let digest: [u8; 32] = sha2::Sha256::digest(format!("{issuer}\0{access_token}").as_bytes()).into();
        {
            let mut confirmed = self.confirmed.lock().unwrap_or_else(PoisonError::into_inner);
            confirmed.retain(|_, (_, until)| *until > Instant::now());
            if confirmed.get(&digest).is_some_and(|(named, _)| named == subject) {
                return Ok(());
            }
        }
        let not = |why: String| OidcError::NotConfirmed(why);
        let discovery = format!("{}/.well-known/openid-configuration", issuer.trim_end_matches('/'));
        let document = get_json(&self.web, &discovery).await.map_err(|error| not(error.to_string()))?;
        let endpoint = document["userinfo_endpoint"]
            .as_str()
            .ok_or_else(|| not("the provider names no userinfo endpoint".into()))?
            .to_string();
        // A bearer token goes over HTTPS, unless the issuer itself is plain HTTP (on loopback).
        if !endpoint.starts_with("https://") && issuer.starts_with("https://") {
            return Err(not(format!("its userinfo endpoint {endpoint} is not HTTPS")));
        }
        let request = FetchRequest {
            session: "oidc".into(),
            method: "GET".into(),
            url: endpoint.clone(),
            headers: vec![
                ("accept".into(), "application/json".into()),
                ("authorization".into(), format!("Bearer {access_token}")),
            ],
            body: vec![],
            follow_redirects: true,
        };
        let answer = self.web.fetch(request).await.map_err(|error| not(format!("{endpoint}: {error}")))?;
        if answer.status != 200 {
            return Err(not(format!("its userinfo endpoint answered {}", answer.status)));
        }
        let info: serde_json::Value =
            serde_json::from_slice(&answer.body).map_err(|error| not(format!("its userinfo is not JSON: {error}")))?;
        if info["sub"].as_str() != Some(subject) {
            return Err(not("its userinfo names someone else".into()));
        }
        let until = Instant::now() + CONFIRMED_FOR;
        self.confirmed.lock().unwrap_or_else(PoisonError::into_inner).insert(digest, (subject.to_string(), until));
        Ok(())
    }

    /// Verifies `token` as an ID token of `issuer` for `audience` naming `subject`.
    pub async fn verify(&self, token: &str, issuer: &str, audience: &str, subject: &str) -> Result<Claims, OidcError> {
        self.verify_with(token, issuer, audience, subject, true).await
    }

    /// As [`Verifier::verify`], its expiry checked only when `expiry`.
    async fn verify_with(
        &self,
        token: &str,
        issuer: &str,
        audience: &str,
        subject: &str,
        expiry: bool,
    ) -> Result<Claims, OidcError> {
        let header = jsonwebtoken::decode_header(token).map_err(|error| OidcError::Malformed(error.to_string()))?;
        if !ACCEPTED.contains(&header.alg) {
            return Err(OidcError::Algorithm(header.alg));
        }
        let key = self.key(issuer, header.kid.as_deref()).await?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[issuer]);
        validation.set_audience(&[audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.validate_nbf = true;
        validation.validate_exp = expiry;
        validation.leeway = LEEWAY_SECONDS;
        let data = jsonwebtoken::decode::<Claims>(token, &key, &validation).map_err(|error| match error.kind() {
            jsonwebtoken::errors::ErrorKind::ExpiredSignature => OidcError::Expired,
            _ => OidcError::Invalid(error.to_string()),
        })?;
        if data.claims.sub != subject {
            return Err(OidcError::OtherSubject { token: data.claims.sub, named: subject.to_string() });
        }
        Ok(data.claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    /// Connects to the loopback issuer while it is up; refuses while it is away.
    #[derive(Default)]
    struct Switch {
        away: AtomicBool,
        connections: AtomicUsize,
    }

    #[async_trait::async_trait]
    impl crate::net::egress::proxy::Connector for Switch {
        async fn connect(&self, address: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
            self.connections.fetch_add(1, Ordering::SeqCst);
            if self.away.load(Ordering::SeqCst) || !address.ip().is_loopback() {
                return Err(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "the issuer is away"));
            }
            tokio::net::TcpStream::connect(address).await
        }
    }

    /// While set, the test issuer answers 404 (one test in this module uses it).
    static BROKEN: AtomicBool = AtomicBool::new(false);

    /// A loopback issuer publishing one P-256 key (RFC 7517's example), kid `1`; while
    /// [`BROKEN`], it answers 404.
    async fn issuer() -> String {
        let port = crate::net::egress::proxy::tests::server(|path, port| {
            let issuer = format!("http://127.0.0.1:{port}");
            let body = if path == "/jwks" {
                serde_json::json!({"keys": [{"kty": "EC", "crv": "P-256", "kid": "1", "use": "sig",
                    "x": "MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4",
                    "y": "4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM"}]})
            } else {
                serde_json::json!({"issuer": issuer, "jwks_uri": format!("{issuer}/jwks")})
            }
            .to_string();
            let status = if BROKEN.load(Ordering::SeqCst) { "404 Not Found" } else { "200 OK" };
            format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
        })
        .await;
        format!("http://127.0.0.1:{port}")
    }

    fn verifier(issuer: &str, switch: Arc<Switch>) -> Verifier {
        let host = issuer.trim_start_matches("http://").to_string();
        let config = crate::base::config::WebProxyConfig { allow: vec![host], ..Default::default() };
        let resolver = Arc::new(crate::net::egress::proxy::SystemResolver);
        Verifier::new(Arc::new(WebProxy::new(&config, resolver, switch).expect("proxy")))
    }

    /// Makes the cached keys of `issuer` look fetched and last tried `ago`.
    fn age(verifier: &Verifier, issuer: &str, ago: Duration) {
        let then = Instant::now().checked_sub(ago).expect("the clock runs long enough");
        let mut cache = verifier.cache.lock().unwrap_or_else(PoisonError::into_inner);
        let cached = cache.get_mut(issuer).expect("cached");
        (cached.fetched, cached.tried) = (then, then);
    }

    #[tokio::test]
    async fn an_issuer_away_leaves_the_last_keys_in_use_and_is_asked_again_at_most_every_ten_seconds() {
        let issuer = issuer().await;
        let switch = Arc::new(Switch::default());
        let verifier = verifier(&issuer, switch.clone());
        verifier.key(&issuer, Some("1")).await.expect("fetched");
        let fetched = switch.connections.load(Ordering::SeqCst);
        assert_eq!(fetched, 2, "discovery and keys");
        verifier.key(&issuer, Some("1")).await.expect("cached");
        assert_eq!(switch.connections.load(Ordering::SeqCst), fetched, "fresh keys are not fetched again");

        // The issuer goes away and the keys grow stale: they stay in use, with one try to refresh.
        switch.away.store(true, Ordering::SeqCst);
        age(&verifier, &issuer, JWKS_FRESH + Duration::from_secs(1));
        verifier.key(&issuer, Some("1")).await.expect("the last keys while the issuer is away");
        assert_eq!(switch.connections.load(Ordering::SeqCst), fetched + 1, "one try");
        verifier.key(&issuer, Some("1")).await.expect("the last keys while the issuer is away");
        assert_eq!(switch.connections.load(Ordering::SeqCst), fetched + 1, "not tried again within ten seconds");
        // A key id they do not hold is not taken on their word.
        let unknown = verifier.key(&issuer, Some("2")).await.err().expect("unknown");
        assert_eq!(unknown, OidcError::UnknownKey("2".into()));

        // Older than a day, they are not used: the error says why.
        age(&verifier, &issuer, KEPT_WHILE_AWAY + Duration::from_secs(1));
        let error = verifier.key(&issuer, Some("1")).await.err().expect("too old");
        assert!(matches!(&error, OidcError::Unreachable(why) if why.contains("cannot connect to")), "{error}");

        // Back, the issuer is asked again and its keys are fresh.
        switch.away.store(false, Ordering::SeqCst);
        age(&verifier, &issuer, KEPT_WHILE_AWAY + Duration::from_secs(1));
        verifier.key(&issuer, Some("1")).await.expect("fetched again");
        assert!(verifier.cached_key(&issuer, Some("1"), JWKS_FRESH).is_some(), "fresh again");

        // An issuer that answers, but not with keys, is believed: the last keys go.
        BROKEN.store(true, Ordering::SeqCst);
        age(&verifier, &issuer, JWKS_FRESH + Duration::from_secs(1));
        let error = verifier.key(&issuer, Some("1")).await.err().expect("not keys");
        assert!(matches!(&error, OidcError::Keys(why) if why.contains("answered 404")), "{error}");
        let again = verifier.key(&issuer, Some("1")).await.err().expect("still not keys");
        assert!(matches!(&again, OidcError::Keys(_)), "the stale keys are not used: {again}");
    }
}
