//! Direct HTTPS for the web gateway's site (`--tls-cert`, `--tls-key`): served by `baaaht-web`
//! as a host process, or by the daemon in front of the gateway's container (which then never
//! holds the private key). The certificate and key are PEM files; they are read again when
//! they change on disk (checked at most once a minute, at a handshake), so a renewed
//! certificate is served without a restart, and a renewal caught half-written keeps the last
//! good pair until it is whole.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// How often the files are looked at for a change.
const CHECK_EVERY: Duration = Duration::from_secs(60);

/// The certificate chain and key in `cert` and `key`, checked to belong together.
fn load(cert: &Path, key: &Path, provider: &CryptoProvider) -> Result<CertifiedKey, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<_, _>>())
        .map_err(|error| format!("--tls-cert {}: {error}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!("--tls-cert {}: no PEM certificate in it", cert.display()));
    }
    let private = PrivateKeyDer::from_pem_file(key).map_err(|error| format!("--tls-key {}: {error}", key.display()))?;
    CertifiedKey::from_der(chain, private, provider)
        .map_err(|error| format!("--tls-key {} does not go with --tls-cert {}: {error}", key.display(), cert.display()))
}

/// When the files were last changed (the later of the two).
fn changed(cert: &Path, key: &Path) -> Option<SystemTime> {
    let modified = |path: &Path| std::fs::metadata(path).and_then(|meta| meta.modified()).ok();
    modified(cert).max(modified(key))
}

struct Current {
    key: Arc<CertifiedKey>,
    changed: Option<SystemTime>,
    checked: Instant,
}

/// The certificate to present, read again when its files change.
struct Reloading {
    cert: PathBuf,
    key: PathBuf,
    provider: Arc<CryptoProvider>,
    current: Mutex<Current>,
}

impl std::fmt::Debug for Reloading {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloading").field("cert", &self.cert).field("key", &self.key).finish_non_exhaustive()
    }
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if current.checked.elapsed() >= CHECK_EVERY {
            current.checked = Instant::now();
            let changed = changed(&self.cert, &self.key);
            if changed != current.changed {
                match load(&self.cert, &self.key, &self.provider) {
                    Ok(key) => {
                        tracing::info!(cert = %self.cert.display(), "the TLS certificate changed on disk: serving the new one");
                        *current = Current { key: Arc::new(key), changed, checked: Instant::now() };
                    }
                    Err(error) => {
                        tracing::warn!(%error, "the TLS certificate changed on disk but does not load: keeping the last one")
                    }
                }
            }
        }
        Some(current.key.clone())
    }
}

/// A server configuration presenting the certificate in `cert` with the key in `key` (HTTP/2
/// and HTTP/1.1 offered); a sentence naming the file when they do not load.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let loaded = load(cert, key, &provider)?;
    let current = Current { key: Arc::new(loaded), changed: changed(cert, key), checked: Instant::now() };
    let resolver = Reloading {
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
        provider: provider.clone(),
        current: Mutex::new(current),
    };
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("TLS: {error}"))?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The TLS side of `stream`, once its handshake is done (10 s at most).
pub async fn accept<S>(
    acceptor: &tokio_rustls::TlsAcceptor,
    stream: S,
) -> std::io::Result<tokio_rustls::server::TlsStream<S>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await {
        Ok(accepted) => accepted,
        Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "no TLS handshake within 10 s")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_or_mismatched_files_are_named() {
        let folder = tempfile::tempdir().expect("tempdir");
        let cert = folder.path().join("cert.pem");
        let key = folder.path().join("key.pem");
        let error = server_config(&cert, &key).expect_err("no files");
        assert!(error.starts_with(&format!("--tls-cert {}", cert.display())), "{error}");
        std::fs::write(&cert, "not a certificate").expect("write");
        let error = server_config(&cert, &key).expect_err("no certificate");
        assert!(error.contains("no PEM certificate in it"), "{error}");
    }
}
