//! The encrypted secrets store, `config/secrets.enc` (spec §13.2): provider keys and skill
//! credentials, readable only with the passphrase.
//!
//! Format (version 1): `BAAAHTSE` | version u8 | kdf u8 (1 = PBKDF2-HMAC-SHA256) | iterations
//! u32 BE | salt 16 | nonce 12 | AES-256-GCM ciphertext of a JSON object {name: value}, with
//! the whole header as associated data, so a change to any byte is detected. A fresh nonce is
//! drawn for every write; writes are atomic and serialized by an `flock` across processes.
//! Decrypted values live only in memory and are zeroized when dropped. Nothing here logs a value.

pub use crate::base::config::references::{is_valid_name, provider_key_names, reference_names};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::IsTerminal;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use zeroize::Zeroizing;

use crate::base::state;

pub const SECRETS_FILE: &str = "secrets.enc";
const LOCK_FILE: &str = ".secrets.lock";
const MAGIC: &[u8; 8] = b"BAAAHTSE";
const VERSION: u8 = 1;
const KDF_PBKDF2_SHA256: u8 = 1;
/// OWASP's 2023 figure for PBKDF2-HMAC-SHA256; files with fewer are refused.
pub const MIN_ITERATIONS: u32 = 600_000;
const SALT_LEN: usize = 16;
const NONCE_LEN: usize = 12;
const HEADER_LEN: usize = 8 + 1 + 1 + 4 + SALT_LEN + NONCE_LEN;

#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    #[error("cannot read or write {}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not a baaaht secrets file (its header is wrong); it is left untouched", path.display())]
    NotASecretsFile { path: PathBuf },
    #[error("{} has format version {version}, newer than this baaahtd reads: upgrade baaahtd", path.display())]
    NewerVersion { path: PathBuf, version: u8 },
    #[error("{} uses {iterations} key-derivation rounds, fewer than {MIN_ITERATIONS}; it is refused", path.display())]
    WeakKdf { path: PathBuf, iterations: u32 },
    #[error("cannot decrypt {}: wrong passphrase, or the file was modified; it is left untouched", path.display())]
    Decrypt { path: PathBuf },
    #[error("secret name `{0}` is not valid: use 1-128 letters, digits, `_`, `.` or `-`")]
    BadName(String),
    #[error("the value for {0} is empty: give it on standard input")]
    EmptyValue(String),
    #[error(
        "no passphrase: set BAAAHT_PASSPHRASE_FILE to a file holding it, run under systemd with \
         LoadCredential=passphrase:…, or run from a terminal to be asked"
    )]
    NoPassphrase,
    #[error("{} can be read by other users: chmod 600 it", path.display())]
    OpenPassphraseFile { path: PathBuf },
    #[error("the passphrase is empty")]
    EmptyPassphrase,
    #[error("the passphrases do not match")]
    Mismatch,
    #[error("cannot generate random bytes")]
    Random(#[source] getrandom::Error),
    #[error("cannot encrypt the secrets")]
    Encrypt,
    #[error("`${{{name}}}` is neither in the secrets store nor in the environment: run `baaahtd secrets set {name}`")]
    Unresolved { name: String },
    #[error(
        "`${{{name}}}` is an LLM provider's key: it never leaves the daemon (agents reach the model through it); \
         give the server a key of its own"
    )]
    ProviderKey { name: String },
    #[error(
        "`${{{name}}}` is not a secret users' and groups' own servers and skills may use; an admin can list it in \
         config.yaml under secrets.user_usable"
    )]
    NotUserUsable { name: String },
}

/// A passphrase, zeroized when dropped.
pub struct Passphrase(Zeroizing<String>);

impl Passphrase {
    pub fn new(text: String) -> Result<Passphrase, SecretsError> {
        let text = Zeroizing::new(text);
        let trimmed = text.trim_end_matches(['\n', '\r']);
        if trimmed.is_empty() {
            return Err(SecretsError::EmptyPassphrase);
        }
        Ok(Passphrase(Zeroizing::new(trimmed.to_string())))
    }

    /// The text itself, for writing it to the passphrase file the user asked for.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Passphrase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Passphrase(<redacted>)")
    }
}

/// The passphrase file `baaahtd setup` may create for the daemon: `config/passphrase`, 0600.
pub const PASSPHRASE_FILE: &str = "passphrase";

/// The file the passphrase is read from without asking: `BAAAHT_PASSPHRASE_FILE`, systemd's
/// `$CREDENTIALS_DIRECTORY/passphrase`, else `config/passphrase` when it exists.
pub fn passphrase_file(config_dir: &Path) -> Option<PathBuf> {
    std::env::var_os("BAAAHT_PASSPHRASE_FILE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("CREDENTIALS_DIRECTORY").map(|dir| Path::new(&dir).join("passphrase")))
        .or_else(|| Some(config_dir.join(PASSPHRASE_FILE)).filter(|path| path.exists()))
}

/// Where the passphrase comes from: [`passphrase_file`], else a prompt on the terminal (asked
/// twice when `confirm`, i.e. when a new store is created). A `config/passphrase` that other
/// users could read is refused.
pub fn passphrase_from(config_dir: &Path, confirm: bool) -> Result<Passphrase, SecretsError> {
    if let Some(path) = passphrase_file(config_dir) {
        if path == config_dir.join(PASSPHRASE_FILE) {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).map_err(|source| SecretsError::Io { path: path.clone(), source })?;
            if mode.permissions().mode() & 0o077 != 0 {
                return Err(SecretsError::OpenPassphraseFile { path });
            }
        }
        let text = std::fs::read_to_string(&path).map_err(|source| SecretsError::Io { path, source })?;
        return Passphrase::new(text);
    }
    // The prompt reads /dev/tty, so standard input stays free for the secret's value.
    if !std::io::stderr().is_terminal() {
        return Err(SecretsError::NoPassphrase);
    }
    let first =
        rpassword::prompt_password("baaaht secrets passphrase: ").map_err(|_no_tty| SecretsError::NoPassphrase)?;
    let first = Passphrase::new(first)?;
    if confirm {
        let again = Zeroizing::new(
            rpassword::prompt_password("again, to confirm: ").map_err(|_no_tty| SecretsError::NoPassphrase)?,
        );
        if again.trim_end_matches(['\n', '\r']) != first.0.as_str() {
            return Err(SecretsError::Mismatch);
        }
    }
    Ok(first)
}

/// The decrypted contents of the store.
pub struct Secrets {
    entries: BTreeMap<String, Zeroizing<String>>,
    salt: [u8; SALT_LEN],
    iterations: u32,
    key: Zeroizing<[u8; 32]>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets").field("names", &self.entries.keys().collect::<Vec<_>>()).finish_non_exhaustive()
    }
}

impl Secrets {
    pub fn get(&self, name: &str) -> Option<&str> {
        self.entries.get(name).map(|value| value.as_str())
    }

    pub fn names(&self) -> Vec<String> {
        self.entries.keys().cloned().collect()
    }
}

/// The secrets store as the running daemon reads it: as opened at start, and opened again
/// (with the passphrase it was opened with: its file, or systemd's credential) when its file
/// changes, so a secret set while the daemon runs is used at once. A store that cannot be
/// opened again keeps what was read last, with a warning.
#[derive(Debug)]
pub struct LiveSecrets {
    config_dir: PathBuf,
    read: std::sync::Mutex<Read>,
}

/// The store's file as it was read: its modification time and size.
type Stamp = (std::time::SystemTime, u64);

/// What [`LiveSecrets`] read last, and the file's stamp then.
#[derive(Debug)]
struct Read {
    secrets: Option<Arc<Secrets>>,
    stamp: Option<Stamp>,
}

impl LiveSecrets {
    /// `opened` is what was read at start from `config_dir`'s store.
    pub fn new(config_dir: &Path, opened: Option<Secrets>) -> LiveSecrets {
        let read = Read { secrets: opened.map(Arc::new), stamp: Self::stamp(config_dir) };
        LiveSecrets { config_dir: config_dir.to_path_buf(), read: std::sync::Mutex::new(read) }
    }

    fn stamp(config_dir: &Path) -> Option<Stamp> {
        let metadata = std::fs::metadata(SecretStore::new(config_dir).path()).ok()?;
        Some((metadata.modified().ok()?, metadata.len()))
    }

    /// The secrets as the store holds them now.
    pub fn current(&self) -> Option<Arc<Secrets>> {
        // Told once the lock is let go: a log line is cleaned with the store's values.
        let mut told: Option<Box<dyn FnOnce()>> = None;
        let mut read = self.read.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let stamp = Self::stamp(&self.config_dir);
        if stamp != read.stamp && stamp.is_some() && passphrase_file(&self.config_dir).is_some() {
            let store = SecretStore::new(&self.config_dir);
            let reopen = || passphrase_from(&self.config_dir, false).and_then(|passphrase| store.open(&passphrase));
            // The key takes a moment to derive: on a runtime's thread, its other tasks move on.
            let opened = match tokio::runtime::Handle::try_current() {
                Ok(runtime) if runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                    tokio::task::block_in_place(reopen)
                }
                _ => reopen(),
            };
            match opened {
                Ok(secrets) => {
                    let path = store.path().display().to_string();
                    told =
                        Some(Box::new(move || tracing::info!(store = %path, "the secrets store changed: read again")));
                    *read = Read { secrets: Some(Arc::new(secrets)), stamp };
                }
                Err(error) => {
                    let path = store.path().display().to_string();
                    told = Some(Box::new(
                        move || tracing::warn!(store = %path, %error, "the secrets store changed but cannot be read; using what was read before"),
                    ));
                    read.stamp = stamp;
                }
            }
        }
        let current = read.secrets.clone();
        drop(read);
        if let Some(tell) = told {
            tell();
        }
        current
    }
}

fn derive_key(passphrase: &Passphrase, salt: &[u8], iterations: u32) -> Zeroizing<[u8; 32]> {
    let mut key = Zeroizing::new([0u8; 32]);
    pbkdf2::pbkdf2_hmac::<sha2::Sha256>(passphrase.0.as_bytes(), salt, iterations, key.as_mut());
    key
}

/// The store in one config folder.
#[derive(Debug, Clone)]
pub struct SecretStore {
    path: PathBuf,
    lock_path: PathBuf,
}

impl SecretStore {
    pub fn new(config_dir: &Path) -> SecretStore {
        SecretStore { path: config_dir.join(SECRETS_FILE), lock_path: config_dir.join(LOCK_FILE) }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn exists(&self) -> bool {
        self.path.exists()
    }

    fn io(&self, source: std::io::Error) -> SecretsError {
        SecretsError::Io { path: self.path.clone(), source }
    }

    /// Decrypts the store; a missing file is an empty store with a new salt.
    pub fn open(&self, passphrase: &Passphrase) -> Result<Secrets, SecretsError> {
        let bytes = match std::fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                let mut salt = [0u8; SALT_LEN];
                getrandom::fill(&mut salt).map_err(SecretsError::Random)?;
                let key = derive_key(passphrase, &salt, MIN_ITERATIONS);
                return Ok(Secrets { entries: BTreeMap::new(), salt, iterations: MIN_ITERATIONS, key });
            }
            Err(source) => return Err(self.io(source)),
        };
        let path = self.path.clone();
        if bytes.len() < HEADER_LEN + 16 || &bytes[..8] != MAGIC || bytes[9] != KDF_PBKDF2_SHA256 {
            return Err(SecretsError::NotASecretsFile { path });
        }
        if bytes[8] != VERSION {
            return Err(SecretsError::NewerVersion { path, version: bytes[8] });
        }
        let iterations = u32::from_be_bytes([bytes[10], bytes[11], bytes[12], bytes[13]]);
        if iterations < MIN_ITERATIONS {
            return Err(SecretsError::WeakKdf { path, iterations });
        }
        let mut salt = [0u8; SALT_LEN];
        salt.copy_from_slice(&bytes[14..14 + SALT_LEN]);
        let nonce = Nonce::from_slice(&bytes[14 + SALT_LEN..HEADER_LEN]);
        let key = derive_key(passphrase, &salt, iterations);
        let cipher = Aes256Gcm::new_from_slice(key.as_ref()).map_err(|_length| SecretsError::Encrypt)?;
        let plaintext = cipher
            .decrypt(nonce, Payload { msg: &bytes[HEADER_LEN..], aad: &bytes[..HEADER_LEN] })
            .map(Zeroizing::new)
            .map_err(|_tag_mismatch| SecretsError::Decrypt { path: path.clone() })?;
        let parsed: BTreeMap<String, String> =
            serde_json::from_slice(&plaintext).map_err(|_not_json| SecretsError::Decrypt { path })?;
        let entries = parsed.into_iter().map(|(name, value)| (name, Zeroizing::new(value))).collect();
        Ok(Secrets { entries, salt, iterations, key })
    }

    /// Encrypts `secrets` with a fresh nonce and replaces the file atomically (0600).
    fn save(&self, secrets: &Secrets) -> Result<(), SecretsError> {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).map_err(SecretsError::Random)?;
        let mut header = Vec::with_capacity(HEADER_LEN);
        header.extend_from_slice(MAGIC);
        header.push(VERSION);
        header.push(KDF_PBKDF2_SHA256);
        header.extend_from_slice(&secrets.iterations.to_be_bytes());
        header.extend_from_slice(&secrets.salt);
        header.extend_from_slice(&nonce);
        let plain: BTreeMap<&str, &str> =
            secrets.entries.iter().map(|(name, value)| (name.as_str(), value.as_str())).collect();
        let plaintext = Zeroizing::new(serde_json::to_vec(&plain).map_err(|_encoding| SecretsError::Encrypt)?);
        let cipher = Aes256Gcm::new_from_slice(secrets.key.as_ref()).map_err(|_length| SecretsError::Encrypt)?;
        let ciphertext = cipher
            .encrypt(Nonce::from_slice(&nonce), Payload { msg: &plaintext, aad: &header })
            .map_err(|_aead| SecretsError::Encrypt)?;
        header.extend_from_slice(&ciphertext);
        state::write_atomic(&self.path, &header, 0o600)
            .map_err(|error| self.io(std::io::Error::other(error.to_string())))
    }

    /// Holds the cross-process lock for one read-modify-write.
    fn lock(&self) -> Result<File, SecretsError> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&self.lock_path)
            .map_err(|source| SecretsError::Io { path: self.lock_path.clone(), source })?;
        file.lock().map_err(|source| SecretsError::Io { path: self.lock_path.clone(), source })?;
        Ok(file)
    }

    /// Sets `name` to `value`; a wrong passphrase leaves the file as it was.
    pub fn set(&self, passphrase: &Passphrase, name: &str, value: Zeroizing<String>) -> Result<(), SecretsError> {
        if !is_valid_name(name) {
            return Err(SecretsError::BadName(name.into()));
        }
        if value.is_empty() {
            return Err(SecretsError::EmptyValue(name.into()));
        }
        let _lock = self.lock()?;
        let mut secrets = self.open(passphrase)?;
        secrets.entries.insert(name.to_string(), value);
        self.save(&secrets)
    }

    /// Removes `name`; returns whether it was there.
    pub fn remove(&self, passphrase: &Passphrase, name: &str) -> Result<bool, SecretsError> {
        let _lock = self.lock()?;
        let mut secrets = self.open(passphrase)?;
        let removed = secrets.entries.remove(name).is_some();
        if removed {
            self.save(&secrets)?;
        }
        Ok(removed)
    }
}

/// Whose file names a secret: the system's own (`config/`, written by an admin) or a user's
/// or group's (`users/{id}/…`, `groups/{id}/…`, which their owners or their skills write).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Referrer {
    System,
    Context,
}

/// Secrets handed to what runs in a container (a skill's script, an MCP server): each name
/// checked against the [`Rules`] for the file that names it, each read and each refusal
/// audited with the caller and the request it serves. The store is read afresh when it changed.
#[derive(Debug, Clone)]
pub struct Handout {
    live: Arc<LiveSecrets>,
    rules: Rules,
    audit: crate::guard::audit::Audit,
}

/// Who is handed a secret: the caller, the correlation id of its request, and what the secret
/// is for (`("skill", "weather")`, `("mcp_server", "github")`), as the audit line names it.
#[derive(Debug, Clone, Copy)]
pub struct Asker<'a> {
    pub caller: &'a crate::base::auth::Caller,
    pub correlation_id: &'a str,
    pub consumer: (&'static str, &'a str),
}

impl Handout {
    pub fn new(live: Arc<LiveSecrets>, rules: Rules, audit: crate::guard::audit::Audit) -> Handout {
        Handout { live, rules, audit }
    }

    /// `reference` (text with `${NAME}`s) resolved for `asker`, from the store, else the
    /// daemon's environment; `referrer` wrote it. Why not, in a sentence.
    pub fn resolve(
        &self,
        asker: Asker<'_>,
        referrer: Referrer,
        reference: &str,
    ) -> Result<Zeroizing<String>, SecretsError> {
        use crate::guard::audit::{Kind, Record};
        let record = |outcome: &str, name: &str| {
            Record::by(Kind::Secret, asker.caller, outcome)
                .correlation(asker.correlation_id)
                .detail("name", name)
                .detail(asker.consumer.0, asker.consumer.1)
        };
        for name in reference_names(reference) {
            if let Err(why) = self.rules.check(name, referrer) {
                self.audit.record(record("refused", name).detail("reason", why.to_string()));
                return Err(why);
            }
        }
        let value = resolve_references(reference, self.live.current().as_deref(), |name| std::env::var(name).ok())?;
        for name in reference_names(reference) {
            self.audit.record(record("read", name));
        }
        Ok(value)
    }
}

/// Which secrets a file may name: an LLM provider's key never (it never leaves the daemon);
/// a user's or group's own file only those the admin listed in `secrets.user_usable`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    user_usable: std::collections::BTreeSet<String>,
    provider_keys: std::collections::BTreeSet<String>,
}

impl Rules {
    pub fn of(loaded: &crate::base::config::LoadedConfig) -> Rules {
        Rules {
            user_usable: loaded.config.secrets.user_usable.iter().cloned().collect(),
            provider_keys: provider_key_names(&loaded.providers),
        }
    }

    /// Whether `name` may be named by `referrer`'s file; why not, in a sentence.
    pub fn check(&self, name: &str, referrer: Referrer) -> Result<(), SecretsError> {
        if self.provider_keys.contains(name) {
            return Err(SecretsError::ProviderKey { name: name.to_string() });
        }
        if referrer == Referrer::Context && !self.user_usable.contains(name) {
            return Err(SecretsError::NotUserUsable { name: name.to_string() });
        }
        Ok(())
    }
}

/// Replaces every `${NAME}` in `text` with the secret `NAME`, else the environment variable
/// `NAME` (spec §16.2); a reference found in neither is an error naming it.
pub fn resolve_references(
    text: &str,
    secrets: Option<&Secrets>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Zeroizing<String>, SecretsError> {
    let mut out = Zeroizing::new(String::with_capacity(text.len()));
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        let Some(length) = rest[start + 2..].find('}') else { break };
        let name = &rest[start + 2..start + 2 + length];
        out.push_str(&rest[..start]);
        match secrets.and_then(|secrets| secrets.get(name)) {
            Some(value) => out.push_str(value),
            None => match env(name).map(Zeroizing::new) {
                Some(value) => out.push_str(&value),
                None => return Err(SecretsError::Unresolved { name: name.to_string() }),
            },
        }
        rest = &rest[start + 2 + length + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Opens the secrets store for reading provider keys, when a passphrase is provided without a
/// prompt (`BAAAHT_PASSPHRASE_FILE` or systemd credentials). Without one, keys come from the
/// environment only, and a warning says so.
pub fn open_unattended(config_dir: &Path) -> Option<Secrets> {
    let store = SecretStore::new(config_dir);
    if !store.exists() {
        return None;
    }
    if passphrase_file(config_dir).is_none() {
        tracing::warn!(
            store = %store.path().display(),
            "the secrets store is locked: set BAAAHT_PASSPHRASE_FILE (or a systemd credential named passphrase, \
             or let `baaahtd setup` write config/passphrase) so provider keys can be read from it; using the \
             environment only"
        );
        return None;
    }
    match passphrase_from(config_dir, false).and_then(|passphrase| store.open(&passphrase)) {
        Ok(secrets) => Some(secrets),
        Err(error) => {
            tracing::error!(
                store = %store.path().display(),
                error = %baaaht_proto::error_chain(&error),
                "cannot open the secrets store; provider keys come from the environment only"
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pass(text: &str) -> Passphrase {
        Passphrase::new(text.into()).expect("passphrase")
    }

    #[test]
    fn a_secret_set_while_the_daemon_runs_is_read_at_once() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join(PASSPHRASE_FILE);
        std::fs::write(&file, "correct horse battery staple\n").expect("passphrase");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("0600");
        let passphrase = passphrase_from(dir.path(), false).expect("from the file");
        let store = SecretStore::new(dir.path());
        store.set(&passphrase, "ONE", Zeroizing::new("1".into())).expect("set");
        let live = LiveSecrets::new(dir.path(), Some(store.open(&passphrase).expect("open")));
        assert_eq!(live.current().expect("read").get("TWO"), None);
        store.set(&passphrase, "TWO", Zeroizing::new("2".into())).expect("set meanwhile");
        let now = live.current().expect("read again");
        assert_eq!((now.get("ONE"), now.get("TWO")), (Some("1"), Some("2")));
        // A store that cannot be read keeps what was read last.
        std::fs::write(store.path(), b"not a store").expect("spoil");
        assert_eq!(live.current().expect("kept").get("TWO"), Some("2"));
    }

    #[test]
    fn round_trip_list_and_remove() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SecretStore::new(dir.path());
        assert!(store.open(&pass("pw")).expect("empty").names().is_empty());
        store.set(&pass("pw"), "ANTHROPIC_API_KEY", Zeroizing::new("sk-ant-1".into())).expect("set");
        store.set(&pass("pw"), "BRAVE_API_KEY", Zeroizing::new("brave".into())).expect("set");
        let secrets = store.open(&pass("pw")).expect("open");
        assert_eq!(secrets.names(), ["ANTHROPIC_API_KEY", "BRAVE_API_KEY"]);
        assert_eq!(secrets.get("ANTHROPIC_API_KEY"), Some("sk-ant-1"));
        let bytes = std::fs::read(store.path()).expect("read");
        assert!(!bytes.windows(8).any(|w| w == b"sk-ant-1"), "plaintext on disk");
        assert_eq!(&bytes[..8], MAGIC);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(store.path()).expect("stat").permissions().mode() & 0o777, 0o600);
        assert!(store.remove(&pass("pw"), "BRAVE_API_KEY").expect("rm"));
        assert!(!store.remove(&pass("pw"), "BRAVE_API_KEY").expect("rm again"));
        assert_eq!(store.open(&pass("pw")).expect("open").names(), ["ANTHROPIC_API_KEY"]);
        // A fresh nonce per write: the same contents encrypt differently.
        let before = std::fs::read(store.path()).expect("read");
        store.set(&pass("pw"), "ANTHROPIC_API_KEY", Zeroizing::new("sk-ant-1".into())).expect("same value");
        let after = std::fs::read(store.path()).expect("read");
        assert_ne!(before[14 + SALT_LEN..HEADER_LEN], after[14 + SALT_LEN..HEADER_LEN]);
        assert_eq!(before[14..14 + SALT_LEN], after[14..14 + SALT_LEN], "the salt stays");
    }

    #[test]
    fn wrong_passphrase_and_tampering_are_detected_and_leave_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SecretStore::new(dir.path());
        store.set(&pass("right"), "KEY", Zeroizing::new("value".into())).expect("set");
        let original = std::fs::read(store.path()).expect("read");
        let error = store.set(&pass("wrong"), "OTHER", Zeroizing::new("x".into())).expect_err("wrong");
        assert!(error.to_string().contains("wrong passphrase, or the file was modified"), "{error}");
        assert_eq!(std::fs::read(store.path()).expect("read"), original, "file changed");
        // One flipped bit anywhere after the magic is detected: header (authenticated) or body.
        for index in [8, 12, 20, 30, HEADER_LEN, original.len() / 2, original.len() - 1] {
            let mut tampered = original.clone();
            tampered[index] ^= 0x01;
            std::fs::write(store.path(), &tampered).expect("write");
            let error = store.open(&pass("right")).expect_err("tampered");
            assert!(
                matches!(
                    error,
                    SecretsError::Decrypt { .. }
                        | SecretsError::NewerVersion { .. }
                        | SecretsError::WeakKdf { .. }
                        | SecretsError::NotASecretsFile { .. }
                ),
                "byte {index}: {error:?}"
            );
        }
        std::fs::write(store.path(), b"not a secrets file at all, just text").expect("write");
        assert!(matches!(store.open(&pass("right")), Err(SecretsError::NotASecretsFile { .. })));
    }

    #[test]
    fn names_and_values_are_checked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SecretStore::new(dir.path());
        for bad in ["", "has space", "a/b", "é"] {
            assert!(matches!(store.set(&pass("p"), bad, Zeroizing::new("v".into())), Err(SecretsError::BadName(_))));
        }
        assert!(matches!(store.set(&pass("p"), "K", Zeroizing::new(String::new())), Err(SecretsError::EmptyValue(_))));
        assert!(matches!(Passphrase::new("\n".into()), Err(SecretsError::EmptyPassphrase)));
        assert!(!store.exists(), "nothing written on refusal");
    }

    #[test]
    fn references_resolve_from_the_store_then_the_environment() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SecretStore::new(dir.path());
        store.set(&pass("p"), "FROM_STORE", Zeroizing::new("s3cret".into())).expect("set");
        let secrets = store.open(&pass("p")).expect("open");
        let env = |name: &str| (name == "FROM_ENV" || name == "FROM_STORE").then(|| format!("env-{name}"));
        let cases = [
            ("${FROM_STORE}", Ok("s3cret")),
            ("Bearer ${FROM_ENV}", Ok("Bearer env-FROM_ENV")),
            ("${FROM_STORE}-${FROM_ENV}", Ok("s3cret-env-FROM_ENV")),
            ("plain", Ok("plain")),
            ("${MISSING}", Err("`${MISSING}` is neither in the secrets store nor in the environment")),
        ];
        for (text, expected) in cases {
            let result = resolve_references(text, Some(&secrets), env);
            match (result, expected) {
                (Ok(value), Ok(expected)) => assert_eq!(value.as_str(), expected, "{text}"),
                (Err(error), Err(words)) => assert!(error.to_string().contains(words), "{error}"),
                (other, expected) => panic!("{text}: {:?} vs {expected:?}", other.map(|v| v.to_string())),
            }
        }
    }
}
