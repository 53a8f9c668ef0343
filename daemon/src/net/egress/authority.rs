//! The daemon's own certificate authority (DESIGN.md §10.2): made once, its key (0600) never
//! leaving `data/state/`; the certificates it issues let the edge (`egress::edge`) terminate a
//! tool command's TLS to a host a secret is bound to. Tool containers trust it through the
//! bundle written beside it; nothing else does.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use base64::Engine as _;
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose};
use zeroize::Zeroizing;

/// The authority's key (0600) and certificate, and the bundle tool containers trust (the
/// daemon's own trusted roots and the authority), in `data/state/`.
pub const KEY_FILE: &str = "egress-ca.key";
pub const CERT_FILE: &str = "egress-ca.pem";
pub const TRUST_FILE: &str = "egress-trust.pem";
/// Where tool containers find the bundle: in place of Debian's, so every program trusts it.
pub const TRUST_IN_CONTAINER: &str = "/etc/ssl/certs/ca-certificates.crt";
/// A certificate the authority issues is made again after this many days (it is valid for 90).
const REISSUE_DAYS: i64 = 30;
/// The most certificates kept at once.
const MAX_ISSUED: usize = 256;

/// Why the authority could not be opened, or a certificate issued. An error of the file system
/// or of making a key is in the sentence, as it always was, and so not a `#[source]` as well (a
/// chain printer would say it twice).
#[derive(Debug, thiserror::Error)]
pub enum AuthorityError {
    #[error("cannot make {}: {error}", path.display())]
    Folder { path: PathBuf, error: std::io::Error },
    #[error("cannot read {}: {error}", path.display())]
    Read { path: PathBuf, error: std::io::Error },
    #[error("{} is not a key: {error}", path.display())]
    NotAKey { path: PathBuf, error: rcgen::Error },
    #[error(transparent)]
    Write(#[from] crate::base::state::StateError),
    /// A key or a certificate could not be made.
    #[error(transparent)]
    Certificate(#[from] rcgen::Error),
    /// `host` cannot be named in a certificate.
    #[error("{host}: {error}")]
    Name { host: String, error: rcgen::Error },
    #[error(transparent)]
    Tls(#[from] rustls::Error),
}

/// The daemon's certificate authority: made once, its key never leaving `data/state/`.
pub struct Authority {
    key: KeyPair,
    certificate: rcgen::Certificate,
    trust: PathBuf,
    issued: Mutex<HashMap<String, (jiff::Timestamp, Arc<rustls::ServerConfig>)>>,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority").field("trust", &self.trust).finish_non_exhaustive()
    }
}

/// The authority's own certificate: the same name and key each time it is made, so the
/// certificates it issues chain to the one written down the first time.
fn authority_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::OrganizationName, "baaaht");
    params.distinguished_name.push(DnType::CommonName, "baaaht egress authority");
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    params.not_before = rcgen::date_time_ymd(2025, 1, 1);
    params.not_after = rcgen::date_time_ymd(2045, 1, 1);
    params
}

/// `params` valid from the day before `now` for 90 days.
fn valid_from(params: &mut CertificateParams, now: jiff::Timestamp) {
    let day = |timestamp: jiff::Timestamp| {
        let date = timestamp.to_zoned(jiff::tz::TimeZone::UTC).date();
        (i32::from(date.year()), date.month() as u8, date.day() as u8)
    };
    let (from, until) =
        (day(now - jiff::SignedDuration::from_hours(24)), day(now + jiff::SignedDuration::from_hours(90 * 24)));
    params.not_before = rcgen::date_time_ymd(from.0, from.1, from.2);
    params.not_after = rcgen::date_time_ymd(until.0, until.1, until.2);
}

impl Authority {
    /// The authority of the data dir whose state folder is `state`: made and written down the
    /// first time; the trust bundle written afresh from the daemon's trusted roots.
    pub fn open(state: &Path) -> Result<Authority, AuthorityError> {
        std::fs::create_dir_all(state).map_err(|error| AuthorityError::Folder { path: state.to_path_buf(), error })?;
        let key_path = state.join(KEY_FILE);
        let key = match std::fs::read_to_string(&key_path) {
            Ok(pem) => {
                KeyPair::from_pem(&pem).map_err(|error| AuthorityError::NotAKey { path: key_path.clone(), error })?
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                let key = KeyPair::generate()?;
                let pem = Zeroizing::new(key.serialize_pem());
                crate::base::state::write_atomic(&key_path, pem.as_bytes(), 0o600)?;
                tracing::info!(key = %key_path.display(), "made the egress certificate authority");
                key
            }
            Err(error) => return Err(AuthorityError::Read { path: key_path, error }),
        };
        let certificate = authority_params().self_signed(&key)?;
        let cert_path = state.join(CERT_FILE);
        let pem = match std::fs::read_to_string(&cert_path) {
            Ok(pem) => pem,
            Err(_) => {
                let pem = certificate.pem();
                crate::base::state::write_atomic(&cert_path, pem.as_bytes(), 0o644)?;
                pem
            }
        };
        let mut bundle = String::new();
        for root in rustls_native_certs::load_native_certs().certs {
            bundle.push_str(&pem_of("CERTIFICATE", root.as_ref()));
        }
        bundle.push_str(&pem);
        let trust = state.join(TRUST_FILE);
        crate::base::state::write_atomic(&trust, bundle.as_bytes(), 0o644)?;
        Ok(Authority { key, certificate, trust, issued: Mutex::default() })
    }

    /// The bundle tool containers trust.
    pub fn trust(&self) -> &Path {
        &self.trust
    }

    /// A TLS server configuration presenting a certificate for `host`, issued now or lately.
    pub(super) fn server_for(&self, host: &str) -> Result<Arc<rustls::ServerConfig>, AuthorityError> {
        let now = jiff::Timestamp::now();
        {
            let issued = self.issued.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some((at, config)) = issued.get(host) {
                if now.duration_since(*at).as_secs() < REISSUE_DAYS * 86_400 {
                    return Ok(config.clone());
                }
            }
        }
        // Made outside the lock: a key takes a while.
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, host);
        params.subject_alt_names = vec![match host.parse::<std::net::IpAddr>() {
            Ok(address) => rcgen::SanType::IpAddress(address),
            Err(_) => rcgen::SanType::DnsName(
                host.try_into().map_err(|error| AuthorityError::Name { host: host.to_string(), error })?,
            ),
        }];
        valid_from(&mut params, now);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.use_authority_key_identifier_extension = true;
        let leaf = params.signed_by(&key, &self.certificate, &self.key)?;
        let chain = vec![leaf.der().clone(), self.certificate.der().clone()];
        let private = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, private)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        let mut issued = self.issued.lock().unwrap_or_else(PoisonError::into_inner);
        // A bound `*.domain` covers names without end: the oldest certificate makes room.
        if issued.len() >= MAX_ISSUED && !issued.contains_key(host) {
            let oldest = issued.iter().min_by_key(|(_, (at, _))| *at).map(|(host, _)| host.clone());
            if let Some(oldest) = oldest {
                issued.remove(&oldest);
            }
        }
        issued.insert(host.to_string(), (now, config.clone()));
        Ok(config)
    }
}

/// `der` as PEM text under `label`.
fn pem_of(label: &str, der: &[u8]) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(der);
    let mut text = format!("-----BEGIN {label}-----\n");
    for line in encoded.as_bytes().chunks(64) {
        text.push_str(std::str::from_utf8(line).unwrap_or_default());
        text.push('\n');
    }
    text.push_str(&format!("-----END {label}-----\n"));
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::pem::PemObject as _;

    /// A TLS handshake with a server of `authority` for `host`, by a client trusting only
    /// `root`; the client's error, if any.
    async fn handshake(authority: &Authority, host: &str, root: &str) -> Result<(), Box<dyn std::error::Error>> {
        let mut roots = rustls::RootCertStore::empty();
        let root = rustls::pki_types::CertificateDer::from_pem_slice(root.as_bytes()).expect("pem");
        roots.add(root).expect("root");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let (near, far) = tokio::io::duplex(64 * 1024);
        let server = tokio_rustls::TlsAcceptor::from(authority.server_for(host)?);
        let name = rustls::pki_types::ServerName::try_from(host.to_string()).expect("name");
        let (served, connected) =
            tokio::join!(server.accept(far), tokio_rustls::TlsConnector::from(Arc::new(client)).connect(name, near));
        connected?;
        served?;
        Ok(())
    }

    #[tokio::test]
    async fn the_authority_is_made_once_and_its_certificates_chain_to_what_it_wrote() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        drop(Authority::open(dir.path()).expect("made"));
        let key = std::fs::metadata(dir.path().join(KEY_FILE)).expect("key");
        assert_eq!(key.permissions().mode() & 0o777, 0o600);
        let written = std::fs::read_to_string(dir.path().join(CERT_FILE)).expect("certificate");
        // Opened again: the same key, so what it issues verifies against the certificate
        // written the first time, for names and addresses alike.
        let again = Authority::open(dir.path()).expect("opened");
        assert!(std::fs::read_to_string(again.trust()).expect("bundle").ends_with(&written));
        handshake(&again, "git.example.com", &written).await.expect("a name");
        handshake(&again, "10.1.2.3", &written).await.expect("an address");
        let kept = again.server_for("git.example.com").expect("kept");
        assert!(Arc::ptr_eq(&kept, &again.server_for("git.example.com").expect("kept")));
        // Another authority's certificates are not trusted in its place.
        let other = tempfile::tempdir().expect("tempdir");
        let stranger = Authority::open(other.path()).expect("another");
        let refused = handshake(&stranger, "git.example.com", &written).await.expect_err("another authority");
        let refused = refused.to_string();
        assert!(refused.contains("UnknownIssuer") || refused.contains("invalid peer certificate"), "{refused}");
    }
}
