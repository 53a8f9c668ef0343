//! A local OpenID Connect issuer for the tests and benchmarks: an ES256 key pair, its discovery
//! document and JWKS served on loopback (`http://127.0.0.1:PORT`), and ID tokens signed with
//! it — or with another key under the same key id, to forge one.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use base64::Engine as _;
use ring::signature::{EcdsaKeyPair, KeyPair as _, ECDSA_P256_SHA256_FIXED_SIGNING};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The key id every token names.
pub const KID: &str = "test-key-1";

struct Key {
    pkcs8: Vec<u8>,
    jwk: serde_json::Value,
}

fn new_key() -> Key {
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 =
        EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).expect("a P-256 key").as_ref().to_vec();
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &pkcs8, &rng).expect("the key loads");
    // The public key is the uncompressed point 0x04 | x | y.
    let point = pair.public_key().as_ref();
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let jwk = serde_json::json!({
        "kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": KID,
        "x": b64(&point[1..33]), "y": b64(&point[33..65]),
    });
    Key { pkcs8, jwk }
}

/// The issuer; stops serving when dropped.
pub struct TestIssuer {
    /// `http://127.0.0.1:PORT`, also the `iss` of its tokens.
    pub issuer: String,
    pub port: u16,
    key: Key,
    /// Requests for the JWKS so far.
    pub jwks_fetches: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl TestIssuer {
    /// Serves discovery and keys on a fresh loopback port.
    pub async fn start() -> std::io::Result<TestIssuer> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let issuer = format!("http://127.0.0.1:{port}");
        let key = new_key();
        let discovery = serde_json::json!({"issuer": issuer, "jwks_uri": format!("{issuer}/jwks")}).to_string();
        let jwks = serde_json::json!({"keys": [key.jwk.clone()]}).to_string();
        let fetches = Arc::new(AtomicUsize::new(0));
        let counted = fetches.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else { return };
                let (discovery, jwks, counted) = (discovery.clone(), jwks.clone(), counted.clone());
                tokio::spawn(async move {
                    let mut buffer = vec![0u8; 4096];
                    let n = stream.read(&mut buffer).await.unwrap_or(0);
                    let head = String::from_utf8_lossy(&buffer[..n]).into_owned();
                    let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                    let (status, body) = match path.as_str() {
                        "/.well-known/openid-configuration" => ("200 OK", discovery),
                        "/jwks" => {
                            counted.fetch_add(1, Ordering::SeqCst);
                            ("200 OK", jwks)
                        }
                        _ => ("404 Not Found", "{}".to_string()),
                    };
                    let reply = format!(
                        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    // silent-ok: a client that hung up does not want the answer.
                    let _ = stream.write_all(reply.as_bytes()).await;
                });
            }
        });
        Ok(TestIssuer { issuer, port, key, jwks_fetches: fetches, task })
    }

    /// Claims of an ID token for `subject` and `audience`, valid from `nbf` to `exp` seconds
    /// from now (negative: in the past).
    pub fn claims(&self, subject: &str, audience: &str, nbf: i64, exp: i64) -> serde_json::Value {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs() as i64;
        serde_json::json!({
            "iss": self.issuer, "sub": subject, "aud": audience,
            "iat": now, "nbf": now + nbf, "exp": now + exp, "name": "Test User",
        })
    }

    /// `claims` signed with this issuer's key.
    pub fn token(&self, claims: &serde_json::Value) -> String {
        sign(&self.key, claims)
    }

    /// `claims` signed with another key under the same key id: a forgery.
    pub fn forged(&self, claims: &serde_json::Value) -> String {
        sign(&new_key(), claims)
    }
}

fn sign(key: &Key, claims: &serde_json::Value) -> String {
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
    header.kid = Some(KID.to_string());
    jsonwebtoken::encode(&header, claims, &jsonwebtoken::EncodingKey::from_ec_der(&key.pkcs8)).expect("signs")
}

impl Drop for TestIssuer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
