//! Web Push messages (RFC 8030): a payload encrypted for one subscription (RFC 8291,
//! `aes128gcm`) and the gateway's voluntary identification to the push service (VAPID, RFC 8292).
//!
//! Written on `ring`, which every binary already carries through rustls. The `web-push` crate
//! would bring OpenSSL (its `ece` has no other working backend), `http` 0.2 and a second
//! generation of the RustCrypto curves for these hundred lines, and it leaves the port out of
//! the token's audience. The recipe is checked against RFC 8291's Appendix A byte for byte,
//! and the tests' push service decrypts what the gateway sends with `http_ece`.

use std::path::Path;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::rand::SecureRandom as _;
use ring::signature::KeyPair as _;
use ring::{aead, agreement, hkdf, rand, signature};
use zeroize::Zeroizing;

/// The most bytes of plaintext one message carries: one record of 4096 bytes less its header
/// (86), the tag (16) and the delimiter (1). Push services must take 4096-byte bodies.
pub const MOST_PLAINTEXT: usize = 3993;

/// The record size written in the header: the body is one record, no larger.
const RECORD_SIZE: u32 = 4096;

/// The file holding the VAPID key (PKCS#8), in the web gateway's state folder.
pub const VAPID_FILE: &str = "push-vapid.pkcs8";

#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error("the subscription's key is not a P-256 public key (65 bytes, uncompressed): {0}")]
    Key(&'static str),
    #[error("the subscription's auth secret must be 16 bytes, not {0}")]
    Auth(usize),
    #[error("the message is {0} bytes; a push carries at most {MOST_PLAINTEXT}")]
    TooLarge(usize),
    #[error("the push could not be encrypted or signed ({0})")]
    Crypto(&'static str),
    #[error("the push endpoint `{0}` is not an https:// address")]
    Endpoint(String),
    #[error("the VAPID key in {path} cannot be used: {why}; remove it to make a new one (every device then allows notifications again)")]
    BadKey { path: String, why: String },
    #[error("the VAPID key cannot be written to {path}: {source}")]
    Write { path: String, source: std::io::Error },
}

/// A device's subscription keys, as its browser gave them (base64url in `keys.p256dh`,
/// `keys.auth`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    /// The browser's P-256 public key, uncompressed (65 bytes).
    pub p256dh: Vec<u8>,
    /// The shared authentication secret (16 bytes).
    pub auth: Vec<u8>,
}

impl Keys {
    /// The keys from their base64url forms, checked.
    pub fn decode(p256dh: &str, auth: &str) -> Result<Keys, PushError> {
        let decode = |text: &str| URL_SAFE_NO_PAD.decode(text.trim_end_matches('='));
        let p256dh = decode(p256dh).map_err(|_not_base64| PushError::Key("not base64url"))?;
        let auth = decode(auth).map_err(|_not_base64| PushError::Auth(0))?;
        if p256dh.len() != 65 || p256dh[0] != 4 {
            return Err(PushError::Key("not 65 bytes starting 0x04"));
        }
        if auth.len() != 16 {
            return Err(PushError::Auth(auth.len()));
        }
        // A point on the curve: agreeing a secret with it once is the check ring offers.
        let random = rand::SystemRandom::new();
        let probe = agreement::EphemeralPrivateKey::generate(&agreement::ECDH_P256, &random)
            .map_err(|_unspecified| PushError::Crypto("no key pair"))?;
        agreement::agree_ephemeral(probe, &agreement::UnparsedPublicKey::new(&agreement::ECDH_P256, &p256dh), |_| ())
            .map_err(|_unspecified| PushError::Key("not a point on P-256"))?;
        Ok(Keys { p256dh, auth })
    }
}

/// `plaintext` encrypted for `keys` with a key pair made for this message alone: the body of
/// the push.
pub fn encrypt(keys: &Keys, plaintext: &[u8]) -> Result<Vec<u8>, PushError> {
    if plaintext.len() > MOST_PLAINTEXT {
        return Err(PushError::TooLarge(plaintext.len()));
    }
    let random = rand::SystemRandom::new();
    let ephemeral = agreement::EphemeralPrivateKey::generate(&agreement::ECDH_P256, &random)
        .map_err(|_unspecified| PushError::Crypto("no key pair"))?;
    let public = ephemeral.compute_public_key().map_err(|_unspecified| PushError::Crypto("no public key"))?;
    let theirs = agreement::UnparsedPublicKey::new(&agreement::ECDH_P256, &keys.p256dh);
    let shared = agreement::agree_ephemeral(ephemeral, &theirs, |secret| Zeroizing::new(secret.to_vec()))
        .map_err(|_unspecified| PushError::Key("not a point on P-256"))?;
    let mut salt = [0u8; 16];
    random.fill(&mut salt).map_err(|_unspecified| PushError::Crypto("no randomness"))?;
    seal(&shared, public.as_ref(), keys, &salt, plaintext)
}

/// A length for `hkdf` expansions.
struct Length(usize);

impl hkdf::KeyType for Length {
    fn len(&self) -> usize {
        self.0
    }
}

/// The body for `plaintext` once the shared secret is agreed (RFC 8291 §3.3–3.4, RFC 8188):
/// `salt ‖ record size ‖ key length ‖ our public key ‖ sealed (plaintext ‖ 0x02)`.
fn seal(shared: &[u8], ours: &[u8], keys: &Keys, salt: &[u8; 16], plaintext: &[u8]) -> Result<Vec<u8>, PushError> {
    let failed = |_unspecified| PushError::Crypto("key derivation");
    let expand = |prk: &hkdf::Prk, info: &[&[u8]], out: &mut [u8]| -> Result<(), PushError> {
        prk.expand(info, Length(out.len())).map_err(failed)?.fill(out).map_err(failed)
    };
    let mut ikm = Zeroizing::new([0u8; 32]);
    let key_prk = hkdf::Salt::new(hkdf::HKDF_SHA256, &keys.auth).extract(shared);
    expand(&key_prk, &[b"WebPush: info\0", &keys.p256dh, ours], &mut ikm[..])?;
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, salt).extract(&ikm[..]);
    let mut cek = Zeroizing::new([0u8; 16]);
    expand(&prk, &[b"Content-Encoding: aes128gcm\0"], &mut cek[..])?;
    let mut nonce = [0u8; 12];
    expand(&prk, &[b"Content-Encoding: nonce\0"], &mut nonce)?;
    let key =
        aead::UnboundKey::new(&aead::AES_128_GCM, &cek[..]).map_err(|_unspecified| PushError::Crypto("content key"))?;
    let mut record = Vec::with_capacity(plaintext.len() + 17);
    record.extend_from_slice(plaintext);
    // The last (and only) record's delimiter.
    record.push(2);
    aead::LessSafeKey::new(key)
        .seal_in_place_append_tag(aead::Nonce::assume_unique_for_key(nonce), aead::Aad::empty(), &mut record)
        .map_err(|_unspecified| PushError::Crypto("sealing"))?;
    let mut body = Vec::with_capacity(86 + record.len());
    body.extend_from_slice(salt);
    body.extend_from_slice(&RECORD_SIZE.to_be_bytes());
    body.push(ours.len() as u8);
    body.extend_from_slice(ours);
    body.extend_from_slice(&record);
    Ok(body)
}

/// The gateway's VAPID key: made once, kept in its state folder (0600). Every subscription is
/// bound to its public half, so it never changes by itself.
pub struct Vapid {
    pair: signature::EcdsaKeyPair,
}

impl std::fmt::Debug for Vapid {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Vapid").field("public", &self.public()).finish_non_exhaustive()
    }
}

impl Vapid {
    /// The key in `state_dir`, made there the first time.
    pub fn open(state_dir: &Path) -> Result<Vapid, PushError> {
        let path = state_dir.join(VAPID_FILE);
        let random = rand::SystemRandom::new();
        let algorithm = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = match std::fs::read(&path) {
            Ok(bytes) => Zeroizing::new(bytes),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                let made = signature::EcdsaKeyPair::generate_pkcs8(algorithm, &random)
                    .map_err(|_unspecified| PushError::Crypto("no VAPID key"))?;
                baaaht_gateway_kit::state::write_atomic(&path, made.as_ref())
                    .map_err(|source| PushError::Write { path: path.display().to_string(), source })?;
                Zeroizing::new(made.as_ref().to_vec())
            }
            Err(error) => {
                return Err(PushError::BadKey { path: path.display().to_string(), why: error.to_string() });
            }
        };
        let pair = signature::EcdsaKeyPair::from_pkcs8(algorithm, &pkcs8, &random)
            .map_err(|error| PushError::BadKey { path: path.display().to_string(), why: error.to_string() })?;
        Ok(Vapid { pair })
    }

    /// The public key as a page's `applicationServerKey` takes it (base64url, 65 bytes).
    pub fn public(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.pair.public_key().as_ref())
    }

    /// The `Authorization` header for a push to `endpoint`, valid 12 hours from `now` (seconds
    /// since the epoch); `subject` is a `mailto:` or `https:` contact for the push service.
    pub fn authorization(&self, endpoint: &str, subject: &str, now: u64) -> Result<String, PushError> {
        let header = URL_SAFE_NO_PAD.encode(br#"{"typ":"JWT","alg":"ES256"}"#);
        let claims = serde_json::json!({"aud": origin(endpoint)?, "exp": now + 12 * 3600, "sub": subject});
        let signed = format!("{header}.{}", URL_SAFE_NO_PAD.encode(claims.to_string()));
        let signature = self
            .pair
            .sign(&rand::SystemRandom::new(), signed.as_bytes())
            .map_err(|_unspecified| PushError::Crypto("signing the VAPID token"))?;
        Ok(format!("vapid t={signed}.{}, k={}", URL_SAFE_NO_PAD.encode(signature.as_ref()), self.public()))
    }
}

/// The origin of an https `endpoint` (`https://host[:port]`, the port only when not 443): the
/// token's audience.
pub fn origin(endpoint: &str) -> Result<String, PushError> {
    let refused = || PushError::Endpoint(endpoint.chars().take(200).collect());
    let rest = endpoint.strip_prefix("https://").ok_or_else(refused)?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.is_empty() || authority.contains('@') {
        return Err(refused());
    }
    let authority = authority.to_ascii_lowercase();
    Ok(format!("https://{}", authority.strip_suffix(":443").unwrap_or(&authority)))
}

/// What a push service's answer means for the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// Taken (201, or another 2xx).
    Accepted,
    /// The subscription is gone (404, 410): the device is removed.
    Gone,
    /// Too large (413): a shorter message may go.
    TooLarge,
    /// Too many (429) or the service failing (5xx): again after this many seconds.
    Later(u64),
    /// Refused otherwise (400, 401, 403…): said in the log, the device kept.
    Refused(u16),
}

impl Delivery {
    /// The meaning of `status`, with the answer's `Retry-After` (seconds) when it had one.
    pub fn of(status: u16, retry_after: Option<&str>) -> Delivery {
        let wait = || retry_after.and_then(|value| value.trim().parse::<u64>().ok()).unwrap_or(60).clamp(1, 3600);
        match status {
            200..=299 => Delivery::Accepted,
            404 | 410 => Delivery::Gone,
            413 => Delivery::TooLarge,
            429 | 500..=599 => Delivery::Later(wait()),
            other => Delivery::Refused(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(text: &str) -> Vec<u8> {
        (0..text.len()).step_by(2).map(|at| u8::from_str_radix(&text[at..at + 2], 16).expect("hex")).collect()
    }

    /// RFC 8291, Appendix A: the same keys, secret and salt give the RFC's message.
    #[test]
    fn the_message_of_rfc_8291_appendix_a_is_made_byte_for_byte() {
        let ours = hex(
            "04fe33f4ab0dea71914db55823f73b54948f41306d920732dbb9a59a53286482200e597a7b7bc260ba1c227998580992e93973\
             002f3012a28ae8f06bbb78e5ec0f",
        );
        let keys = Keys {
            p256dh: hex(
                "042571b2becdfde360551aaf1ed0f4cd366c11cebe555f89bcb7b186a53339173168ece2ebe018597bd30479b86e3c8f8ec\
                 ed577ca59187e9246990db682008b0e",
            ),
            auth: hex("05305932a1c7eabe13b6cec9fda48882"),
        };
        let shared = URL_SAFE_NO_PAD.decode("kyrL1jIIOHEzg3sM2ZWRHDRB62YACZhhSlknJ672kSs").expect("the secret");
        let salt: [u8; 16] = hex("0c6bfaadad67958803092d454676f397").try_into().expect("16 bytes");
        let body = seal(&shared, &ours, &keys, &salt, b"When I grow up, I want to be a watermelon").expect("sealed");
        let expected = hex(
            "0c6bfaadad67958803092d454676f397000010004104fe33f4ab0dea71914db55823f73b54948f41306d920732dbb9a59a532\
             86482200e597a7b7bc260ba1c227998580992e93973002f3012a28ae8f06bbb78e5ec0ff297de5b429bba7153d3a4ae0caa09\
             1fd425f3b4b5414add8ab37a19c1bbb05cf5cb5b2a2e0562d558635641ec52812c6c8ff42e95ccb86be7cd",
        );
        assert_eq!(body, expected);
    }

    #[test]
    fn a_message_is_one_record_and_no_larger() {
        let keys = Keys::decode(
            "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4",
            "BTBZMqHH6r4Tts7J_aSIgg",
        )
        .expect("the RFC's keys");
        assert_eq!(encrypt(&keys, &[b'a'; MOST_PLAINTEXT]).expect("encrypted").len(), 4096);
        assert!(matches!(encrypt(&keys, &[b'a'; MOST_PLAINTEXT + 1]), Err(PushError::TooLarge(3994))));
        assert!(matches!(Keys::decode("AAAA", "BTBZMqHH6r4Tts7J_aSIgg"), Err(PushError::Key(_))));
        assert!(matches!(
            Keys::decode(
                "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4",
                "AAAA"
            ),
            Err(PushError::Auth(3))
        ));
    }

    #[test]
    fn the_vapid_token_names_the_endpoints_origin_and_is_signed_by_the_kept_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        let vapid = Vapid::open(dir.path()).expect("the key");
        assert_eq!(Vapid::open(dir.path()).expect("the key").public(), vapid.public(), "the same key the next time");
        let header =
            vapid.authorization("https://127.0.0.1:8443/push/abc", "mailto:admin@home.example", 1000).expect("signed");
        let (token, key) = header.strip_prefix("vapid t=").expect("vapid").split_once(", k=").expect("k=");
        assert_eq!(key, vapid.public());
        let parts: Vec<&str> = token.split('.').collect();
        let claims: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).expect("base64")).expect("JSON");
        assert_eq!(claims["aud"], "https://127.0.0.1:8443");
        assert_eq!(claims["exp"], 1000 + 12 * 3600);
        let public = URL_SAFE_NO_PAD.decode(key).expect("base64");
        signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, public)
            .verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &URL_SAFE_NO_PAD.decode(parts[2]).expect("base64"))
            .expect("signed by the key it names");
        assert_eq!(origin("https://fcm.googleapis.com:443/fcm/send/x").expect("https"), "https://fcm.googleapis.com");
        assert!(origin("http://fcm.googleapis.com/x").is_err());
        assert!(origin("https://user@evil/x").is_err());
    }

    #[test]
    fn a_push_services_answer_says_what_becomes_of_the_device() {
        assert_eq!(Delivery::of(201, None), Delivery::Accepted);
        assert_eq!(Delivery::of(410, None), Delivery::Gone);
        assert_eq!(Delivery::of(404, None), Delivery::Gone);
        assert_eq!(Delivery::of(413, None), Delivery::TooLarge);
        assert_eq!(Delivery::of(429, Some("120")), Delivery::Later(120));
        assert_eq!(Delivery::of(503, None), Delivery::Later(60));
        assert_eq!(Delivery::of(401, None), Delivery::Refused(401));
    }
}
