//! The web gateway's test parts: a real OpenID Connect provider (panva's certified
//! `oidc-provider` from npm, `tests/oidc-provider/`, run by Node), the real `baaaht-web`, and
//! headless Chromium driven over WebDriver (Debian's `chromium` and `chromium-driver`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};

use crate::{spawn, Running};

/// A free loopback port (bound and let go: the caller binds it next).
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The folder of the provider's script and its pinned modules.
pub fn provider_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("oidc-provider")
}

/// Waits for `check` on the log of `running`, polling against a deadline.
fn wait_for_log(running: &Running, limit: Duration, check: impl Fn(&str) -> bool) -> Result<()> {
    let deadline = Instant::now() + limit;
    while !check(&running.log_text()) {
        if Instant::now() > deadline {
            bail!("not ready within {limit:?}:\n{}", running.log_text());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// The provider, at `http://127.0.0.1:PORT`, with the client `gateway` (secret
/// `gateway-secret`) answering at `redirect` and signing out to `post_logout`. Any login name
/// signs in (alice is "Alice Admin"); the password is not checked.
pub struct Provider {
    pub issuer: String,
    pub port: u16,
    pub process: Running,
}

pub const CLIENT_ID: &str = "gateway";
pub const CLIENT_SECRET: &str = "gateway-secret";

impl Provider {
    pub fn start(dir: &Path, redirect: &str, post_logout: &str, id_token_ttl: u64) -> Result<Provider> {
        let modules = provider_dir().join("node_modules/oidc-provider");
        if !modules.is_dir() {
            bail!("{} is missing: run `npm ci` in {} (scripts/test does)", modules.display(), provider_dir().display());
        }
        let port = free_port()?;
        let mut command = Command::new("node");
        command
            .current_dir(provider_dir())
            .arg("provider.mjs")
            .arg(port.to_string())
            .arg(redirect)
            .arg(post_logout)
            .env("ID_TOKEN_TTL", id_token_ttl.to_string());
        let process = spawn(command, &dir.join("oidc-provider.log"))?;
        wait_for_log(&process, Duration::from_secs(30), |log| log.contains("READY"))?;
        Ok(Provider { issuer: format!("http://127.0.0.1:{port}"), port, process })
    }
}

/// `chromedriver` on a free port, for headless Chromium sessions.
pub struct Driver {
    pub url: String,
    pub process: Running,
}

impl Driver {
    pub fn start(dir: &Path) -> Result<Driver> {
        let port = free_port()?;
        let mut command = Command::new("chromedriver");
        command.arg(format!("--port={port}"));
        let process = spawn(command, &dir.join("chromedriver.log"))?;
        wait_for_log(&process, Duration::from_secs(30), |log| log.contains("started successfully"))?;
        Ok(Driver { url: format!("http://127.0.0.1:{port}"), process })
    }

    /// A headless Chromium, `width` pixels wide.
    pub async fn browser(&self, width: u32) -> Result<fantoccini::Client> {
        let capabilities = serde_json::json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--no-first-run", format!("--window-size={width},900")],
            },
        });
        let serde_json::Value::Object(capabilities) = capabilities else { bail!("capabilities") };
        fantoccini::ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities)
            .connect(&self.url)
            .await
            .context("start a headless Chromium")
    }
}

/// A running `baaaht-web` for the gateway whose socket and token these are.
pub fn web_gateway(dir: &Path, socket: &str, token: &str, port: u16) -> Result<Running> {
    let mut command = Command::new(crate::bin("baaaht-web"));
    command
        .args(["--socket", socket, "--listen", &format!("127.0.0.1:{port}")])
        .args(["--public-url", &format!("http://127.0.0.1:{port}")])
        .arg("--state-dir")
        .arg(dir.join("web-state"))
        .env("BAAAHT_GATEWAY_TOKEN", token)
        .env("RUST_LOG", "info");
    let process = spawn(command, &dir.join("baaaht-web.log"))?;
    wait_for_log(&process, Duration::from_secs(60), |log| log.contains("serving") || log.contains("baaaht-web:"))?;
    if !process.log_text().contains("serving") {
        bail!("baaaht-web did not start:\n{}", process.log_text());
    }
    Ok(process)
}
