//! Access tokens a provider takes instead of a key, fetched by the gateway and kept until
//! shortly before they expire: Google's for Vertex AI (a service account's JSON key signs a JWT,
//! RS256, exchanged at its `token_uri`, RFC 7523) and Microsoft Entra ID's for Azure OpenAI (the
//! client-credentials grant of an app registration). Each exchange goes out by its own route
//! ([`TokenSource::reached_by`]): the daemon's tunnel to the token endpoint's host, in a
//! container, or the provider's relay when the endpoint is at the provider's own address.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use serde_json::{json, Value};
use zeroize::Zeroizing;

use super::{Failure, Route};

/// The scope every Vertex AI call needs.
pub const CLOUD_PLATFORM: &str = "https://www.googleapis.com/auth/cloud-platform";
/// The scope of Azure OpenAI (Cognitive Services).
pub const COGNITIVE_SERVICES: &str = "https://cognitiveservices.azure.com/.default";
/// The audience of a service account's assertion: Google's token endpoint, whatever address the
/// key file's `token_uri` posts it to (as Google's own `google-auth` does).
const GOOGLE_TOKEN_AUDIENCE: &str = "https://oauth2.googleapis.com/token";
/// Entra ID's sign-in address, unless the configuration names another cloud's.
pub const ENTRA_AUTHORITY: &str = "https://login.microsoftonline.com";

/// How a token is obtained.
pub enum Grant {
    /// A Google service account: its key signs the assertion.
    ServiceAccount { client_email: String, key: Box<ring::rsa::KeyPair>, key_id: String, token_uri: String },
    /// An Entra ID app registration's secret.
    ClientCredentials { token_url: String, client_id: String, client_secret: Zeroizing<String> },
}

/// A token kept, and when it must be fetched again.
struct Held {
    token: Zeroizing<String>,
    renew_at: Instant,
}

/// A source of access tokens for one provider.
pub struct TokenSource {
    grant: Grant,
    held: tokio::sync::Mutex<Option<Held>>,
    fetched: std::sync::atomic::AtomicU32,
    /// How the token endpoint is reached.
    route: Route,
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.grant {
            Grant::ServiceAccount { client_email, .. } => format!("service account {client_email}"),
            Grant::ClientCredentials { client_id, .. } => format!("app {client_id}"),
        };
        f.debug_struct("TokenSource").field("grant", &kind).finish_non_exhaustive()
    }
}

/// A key file or secret that cannot be used, as a sentence.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct BadCredentials(pub String);

impl TokenSource {
    /// From a Google service account's JSON key file (its text).
    pub fn service_account(json_key: &str) -> Result<TokenSource, BadCredentials> {
        let key: Value = serde_json::from_str(json_key)
            .map_err(|error| BadCredentials(format!("the service account key is not JSON: {error}")))?;
        let field = |name: &str| {
            key[name].as_str().filter(|value| !value.is_empty()).map(str::to_string).ok_or_else(|| {
                BadCredentials(format!(
                    "the service account key has no `{name}`: download a JSON key for the service account \
                     (IAM → Service accounts → Keys → Add key → JSON)"
                ))
            })
        };
        if key["type"].as_str().is_some_and(|kind| kind != "service_account") {
            return Err(BadCredentials(format!(
                "the key file is a `{}`, not a service account's key: download a JSON key of a service account",
                key["type"].as_str().unwrap_or_default()
            )));
        }
        let pem = Zeroizing::new(field("private_key")?);
        let der = pem_body(&pem)
            .ok_or_else(|| BadCredentials("the service account's `private_key` is not a PEM private key".into()))?;
        let rsa =
            ring::rsa::KeyPair::from_pkcs8(&der).or_else(|_not_pkcs8| ring::rsa::KeyPair::from_der(&der)).map_err(
                |error| BadCredentials(format!("the service account's `private_key` is not an RSA key: {error}")),
            )?;
        let token_uri = key["token_uri"].as_str().unwrap_or("https://oauth2.googleapis.com/token").to_string();
        token_endpoint(&token_uri).map_err(|why| BadCredentials(format!("the service account key's {why}")))?;
        Ok(TokenSource::new(Grant::ServiceAccount {
            client_email: field("client_email")?,
            key: Box::new(rsa),
            key_id: key["private_key_id"].as_str().unwrap_or_default().to_string(),
            token_uri,
        }))
    }

    /// An Entra ID app registration in `tenant`, signing in at `authority`.
    pub fn client_credentials(authority: &str, tenant: &str, client_id: &str, client_secret: &str) -> TokenSource {
        TokenSource::new(Grant::ClientCredentials {
            token_url: format!("{}/{tenant}/oauth2/v2.0/token", authority.trim_end_matches('/')),
            client_id: client_id.to_string(),
            client_secret: Zeroizing::new(client_secret.to_string()),
        })
    }

    fn new(grant: Grant) -> TokenSource {
        TokenSource {
            grant,
            held: tokio::sync::Mutex::new(None),
            fetched: std::sync::atomic::AtomicU32::new(0),
            route: Route::Direct,
        }
    }

    /// The same, its token endpoint reached by `route` (straight, by default).
    pub fn reached_by(self, route: Route) -> TokenSource {
        TokenSource { route, ..self }
    }

    /// Where tokens are fetched (its host must be reachable from the gateway).
    pub fn token_url(&self) -> &str {
        match &self.grant {
            Grant::ServiceAccount { token_uri, .. } => token_uri,
            Grant::ClientCredentials { token_url, .. } => token_url,
        }
    }

    /// How many tokens were fetched so far.
    pub fn fetched(&self) -> u32 {
        self.fetched.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A token valid for a while yet: the one held, or a new one.
    pub async fn token(&self, provider: &str, timeout: Duration) -> Result<Zeroizing<String>, Failure> {
        let mut held = self.held.lock().await;
        if let Some(current) = held.as_ref().filter(|held| Instant::now() < held.renew_at) {
            return Ok(current.token.clone());
        }
        let form = self.form(provider)?;
        let sent: Vec<String> = form
            .iter()
            .filter(|(name, _)| *name != "grant_type" && *name != "scope")
            .map(|(_, value)| value.to_string())
            .collect();
        let answer = super::http::post_form(provider, &self.route, timeout, self.token_url(), &form)
            .await
            .map_err(|failure| failure.scrubbed(&sent))?;
        let token = answer["access_token"].as_str().filter(|token| !token.is_empty()).ok_or_else(|| Failure::Http {
            provider: provider.to_string(),
            message: format!("the token endpoint {} gave no access_token", self.token_url()),
        })?;
        // A lifetime past a day is taken as a day (and an absurd one cannot overflow the clock).
        let lifetime = Duration::from_secs(answer["expires_in"].as_u64().unwrap_or(3600).min(86_400));
        // Fetched again five minutes before it expires, or at half its life if it is short.
        let margin = Duration::from_secs(300).min(lifetime / 2);
        *held = Some(Held { token: Zeroizing::new(token.to_string()), renew_at: Instant::now() + lifetime - margin });
        self.fetched.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Zeroizing::new(token.to_string()))
    }

    /// Forgets the token held (the provider refused it).
    pub async fn forget(&self) {
        *self.held.lock().await = None;
    }

    /// The form posted to the token endpoint.
    fn form(&self, provider: &str) -> Result<Vec<(&'static str, Zeroizing<String>)>, Failure> {
        Ok(match &self.grant {
            Grant::ServiceAccount { client_email, key, key_id, .. } => {
                let assertion = jwt(client_email, key, key_id, GOOGLE_TOKEN_AUDIENCE, SystemTime::now())
                    .map_err(|message| Failure::Unusable { provider: provider.to_string(), reason: message })?;
                vec![
                    ("grant_type", Zeroizing::new("urn:ietf:params:oauth:grant-type:jwt-bearer".to_string())),
                    ("assertion", assertion),
                ]
            }
            Grant::ClientCredentials { client_id, client_secret, .. } => vec![
                ("grant_type", Zeroizing::new("client_credentials".to_string())),
                ("client_id", Zeroizing::new(client_id.clone())),
                ("client_secret", client_secret.clone()),
                ("scope", Zeroizing::new(COGNITIVE_SERVICES.to_string())),
            ],
        })
    }
}

/// The host and port of the token endpoint at `url`, which is sent a signed assertion or a
/// secret: over `https://`, or `http://` to this machine's loopback only; or why not, as the
/// end of a sentence.
pub fn token_endpoint(url: &str) -> Result<(String, u16), String> {
    let uri: http::Uri = url.parse().map_err(|_unparsable| format!("token endpoint `{url}` is not a URL"))?; // silent-ok: the message names the input
    let host = uri.host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
    if host.is_empty() {
        return Err(format!("token endpoint `{url}` names no host"));
    }
    let loopback = host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    let port = match uri.scheme_str() {
        Some("https") => uri.port_u16().unwrap_or(443),
        Some("http") if loopback => uri.port_u16().unwrap_or(80),
        _ => {
            return Err(format!(
                "token endpoint `{url}` is not an https:// address: a signed assertion or a secret is never sent \
                 in the clear (http:// only to this machine's loopback)"
            ))
        }
    };
    Ok((host, port))
}

/// The DER bytes inside a PEM block.
fn pem_body(pem: &str) -> Option<Zeroizing<Vec<u8>>> {
    let body: String =
        pem.lines().map(str::trim).filter(|line| !line.starts_with("-----") && !line.is_empty()).collect();
    let der = base64::engine::general_purpose::STANDARD.decode(body.as_bytes()).ok()?;
    (!der.is_empty()).then(|| Zeroizing::new(der))
}

/// The signed assertion of a service account (RFC 7523 §2.1, as Google asks: `iss` the account,
/// `scope`, `aud` Google's token endpoint, an hour at most).
fn jwt(
    client_email: &str,
    key: &ring::rsa::KeyPair,
    key_id: &str,
    audience: &str,
    now: SystemTime,
) -> Result<Zeroizing<String>, String> {
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let issued = now.duration_since(UNIX_EPOCH).map_err(|_before| "the clock is before 1970".to_string())?.as_secs();
    let mut header = json!({"alg": "RS256", "typ": "JWT"});
    if !key_id.is_empty() {
        header["kid"] = json!(key_id);
    }
    let claims = json!({
        "iss": client_email,
        "scope": CLOUD_PLATFORM,
        "aud": audience,
        "iat": issued,
        "exp": issued + 3600,
    });
    let signing_input = format!("{}.{}", url.encode(header.to_string()), url.encode(claims.to_string()));
    let mut signature = vec![0; key.public().modulus_len()];
    key.sign(
        &ring::signature::RSA_PKCS1_SHA256,
        &ring::rand::SystemRandom::new(),
        signing_input.as_bytes(),
        &mut signature,
    )
    .map_err(|_unspecified| "the service account's key could not sign".to_string())?;
    Ok(Zeroizing::new(format!("{signing_input}.{}", url.encode(signature))))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A throwaway RSA key (PKCS#8), made for these tests with `openssl genpkey -algorithm RSA
    /// -pkeyopt rsa_keygen_bits:2048`.
    const KEY: &str = include_str!("../../tests/fixtures/service-account.key");

    fn account() -> String {
        json!({
            "type": "service_account",
            "project_id": "proj",
            "private_key_id": "k1",
            "private_key": KEY,
            "client_email": "baaaht@proj.iam.gserviceaccount.com",
            "token_uri": "http://127.0.0.1:9/token",
        })
        .to_string()
    }

    #[test]
    fn a_service_accounts_assertion_is_an_rs256_jwt_its_public_key_verifies() {
        let source = TokenSource::service_account(&account()).expect("a valid key");
        let Grant::ServiceAccount { key, client_email, key_id, .. } = &source.grant else { panic!("kind") };
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let assertion = jwt(client_email, key, key_id, GOOGLE_TOKEN_AUDIENCE, now).expect("signs");
        let parts: Vec<&str> = assertion.split('.').collect();
        assert_eq!(parts.len(), 3);
        let url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let claims: Value = serde_json::from_slice(&url.decode(parts[1]).expect("base64")).expect("json");
        assert_eq!(
            claims,
            json!({"iss": "baaaht@proj.iam.gserviceaccount.com", "scope": CLOUD_PLATFORM,
                   "aud": "https://oauth2.googleapis.com/token", "iat": 1_700_000_000u64, "exp": 1_700_003_600u64})
        );
        let header: Value = serde_json::from_slice(&url.decode(parts[0]).expect("base64")).expect("json");
        assert_eq!(header, json!({"alg": "RS256", "typ": "JWT", "kid": "k1"}));
        let public = ring::signature::UnparsedPublicKey::new(
            &ring::signature::RSA_PKCS1_2048_8192_SHA256,
            key.public().as_ref().to_vec(),
        );
        let signed = format!("{}.{}", parts[0], parts[1]);
        public.verify(signed.as_bytes(), &url.decode(parts[2]).expect("base64")).expect("the signature verifies");
    }

    #[test]
    fn a_wrong_key_file_is_told_in_a_sentence() {
        let error = TokenSource::service_account("{").expect_err("not json");
        assert!(error.0.starts_with("the service account key is not JSON"), "{error}");
        let user = json!({"type": "authorized_user", "client_id": "x"}).to_string();
        let error = TokenSource::service_account(&user).expect_err("a user's credentials");
        assert!(error.0.contains("`authorized_user`, not a service account's key"), "{error}");
        let no_email = json!({"type": "service_account", "private_key": KEY}).to_string();
        let error = TokenSource::service_account(&no_email).expect_err("no email");
        assert!(error.0.contains("has no `client_email`"), "{error}");
        let bad_key = json!({"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----", "client_email": "a"}).to_string();
        let error = TokenSource::service_account(&bad_key).expect_err("not rsa");
        assert!(error.0.contains("is not an RSA key"), "{error}");
    }
}
