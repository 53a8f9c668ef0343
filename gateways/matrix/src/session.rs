//! The gateway's Matrix device, kept across restarts and container replacements: the client's
//! stores (its end-to-end encryption keys among them) in SQLite in the state folder, and the
//! signed-in session (user, device, access token) beside them. A gateway started again goes on
//! as the same device, so people's clients keep the keys they share with it and nobody sees
//! "unable to decrypt"; only the first start signs in with the password. The state folder is
//! its owner's alone (0700, every file in it 0600): the stores' passphrase lies beside them.

use std::path::{Path, PathBuf};

use matrix_sdk::authentication::matrix::MatrixSession;
use matrix_sdk::Client;

/// Where the session is kept.
fn session_path(state: &Path) -> PathBuf {
    state.join("session.json")
}

/// The passphrase the stores are encrypted with: made on the first start, kept beside them.
fn passphrase(state: &Path) -> Result<String, String> {
    let path = state.join("store.key");
    match std::fs::read_to_string(&path) {
        Ok(key) if !key.trim().is_empty() => return Ok(key.trim().to_string()),
        Ok(_) => return Err(format!("{} is empty; move the state folder away to start afresh", path.display())),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(format!("cannot read {}: {error}", path.display())),
    }
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|error| format!("no randomness for the store's key: {error}"))?;
    let key: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    baaaht_gateway_kit::state::write_atomic(&path, key.as_bytes())
        .map_err(|error| format!("cannot write {}: {error}", path.display()))?;
    Ok(key)
}

/// Makes `folder` and everything in it its owner's alone: folders 0700, files 0600.
fn owners_only(folder: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt as _;
    let set = |path: &Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .map_err(|error| format!("cannot make {} its owner's only: {error}", path.display()))
    };
    set(folder, 0o700)?;
    let entries = std::fs::read_dir(folder).map_err(|error| format!("cannot read {}: {error}", folder.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => owners_only(&path)?,
            Ok(kind) if kind.is_file() => set(&path, 0o600)?,
            _ => {}
        }
    }
    Ok(())
}

/// What the client is built with.
pub struct Settings<'a> {
    pub homeserver: &'a str,
    pub user: &'a str,
    pub password: &'a str,
    pub device_name: &'a str,
    pub state: &'a Path,
    /// The local proxy in front of the daemon's egress (in a container).
    pub proxy: Option<String>,
    /// Extra certificate authorities (PEM), for a household's own homeserver.
    pub ca_pem: Option<Vec<u8>>,
}

/// The signed-in client — the kept session restored, or a first sign-in (then kept) — and
/// whether it is the first (its rooms' history before now is not answered).
pub async fn signed_in(settings: &Settings<'_>) -> Result<(Client, bool), String> {
    std::fs::create_dir_all(settings.state)
        .map_err(|error| format!("cannot make {}: {error}", settings.state.display()))?;
    owners_only(settings.state)?;
    let key = passphrase(settings.state)?;
    // The SDK's store for small machines: a connection per core with 500 kB of cache each (its
    // default is four connections a core, each with SQLite's 2 MB).
    let store =
        matrix_sdk::SqliteStoreConfig::with_low_memory_config(settings.state.join("store")).passphrase(Some(&key));
    let mut builder = Client::builder()
        .homeserver_url(settings.homeserver)
        .sqlite_store_with_config_and_cache_path(store, None::<&std::path::Path>);
    if let Some(proxy) = &settings.proxy {
        builder = builder.proxy(proxy);
    }
    if let Some(pem) = &settings.ca_pem {
        let certificates = matrix_sdk::reqwest::Certificate::from_pem_bundle(pem)
            .map_err(|error| format!("--ca-file: not PEM certificates: {error}"))?;
        builder = builder.add_root_certificates(certificates);
    }
    let client = builder.build().await.map_err(|error| format!("cannot open the Matrix client: {error}"))?;
    // The SDK made its stores with the umask's modes.
    owners_only(settings.state)?;
    let kept = session_path(settings.state);
    let first = match std::fs::read(&kept) {
        Ok(bytes) => {
            let session: MatrixSession = serde_json::from_slice(&bytes).map_err(|error| {
                format!(
                    "{} is not a Matrix session ({error}); move the state folder away to sign in afresh",
                    kept.display()
                )
            })?;
            if session.meta.user_id.as_str() != settings.user {
                return Err(format!(
                    "the kept session is {}'s, not {}'s: give the gateway its own state folder",
                    session.meta.user_id, settings.user
                ));
            }
            client
                .restore_session(session)
                .await
                .map_err(|error| format!("cannot restore the kept Matrix session: {error}"))?;
            tracing::info!(device = ?client.device_id(), "the kept Matrix device goes on");
            false
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            client
                .matrix_auth()
                .login_username(settings.user, settings.password)
                .initial_device_display_name(settings.device_name)
                .send()
                .await
                .map_err(|error| format!("the homeserver refused the sign-in of {}: {error}", settings.user))?;
            let session = client.matrix_auth().session().ok_or("signed in, but the client holds no session")?;
            let bytes = serde_json::to_vec(&session).map_err(|error| format!("cannot keep the session: {error}"))?;
            baaaht_gateway_kit::state::write_atomic(&kept, &bytes)
                .map_err(|error| format!("cannot write {}: {error}", kept.display()))?;
            tracing::info!(device = ?client.device_id(), "signed in to Matrix as a new device");
            true
        }
        Err(error) => return Err(format!("cannot read {}: {error}", kept.display())),
    };
    Ok((client, first))
}
