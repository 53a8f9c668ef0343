//! The web gateway's test parts: a real OpenID Connect provider (panva's certified
//! `oidc-provider` from npm, `tests/oidc-provider/`, run by Node), the real `baaaht-web`, and
//! headless Chromium driven over WebDriver (Debian's `chromium` and `chromium-driver`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};

use crate::{spawn, DaemonOptions, Running};

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

/// The provider, at `http://127.0.0.1:PORT`, signing with a key it makes at start, with the
/// client `gateway` (secret
/// `gateway-secret`) answering at `redirect` and signing out to `post_logout`. Any login name
/// signs in (alice is "Alice Admin"); the password is not checked.
pub struct Provider {
    pub issuer: String,
    pub port: u16,
    pub process: Running,
    /// How it was started, to start it again.
    command: Vec<String>,
    env: Vec<(String, String)>,
}

pub const CLIENT_ID: &str = "gateway";
pub const CLIENT_SECRET: &str = "gateway-secret";

impl Provider {
    pub fn start(dir: &Path, redirect: &str, post_logout: &str, id_token_ttl: u64) -> Result<Provider> {
        Provider::start_refreshing(dir, redirect, post_logout, id_token_ttl, 0, true)
    }

    /// As [`Provider::start`], issuing refresh tokens that last `refresh_ttl` seconds (none
    /// when 0); a refresh brings a new ID token, or only an access token when not
    /// `id_tokens_on_refresh` (as OpenID Connect allows).
    pub fn start_refreshing(
        dir: &Path,
        redirect: &str,
        post_logout: &str,
        id_token_ttl: u64,
        refresh_ttl: u64,
        id_tokens_on_refresh: bool,
    ) -> Result<Provider> {
        let modules = provider_dir().join("node_modules/oidc-provider");
        if !modules.is_dir() {
            bail!("{} is missing: run `npm ci` in {} (scripts/test does)", modules.display(), provider_dir().display());
        }
        let port = free_port()?;
        let command = vec!["provider.mjs".to_string(), port.to_string(), redirect.into(), post_logout.into()];
        let env = [
            ("ID_TOKEN_TTL".to_string(), id_token_ttl.to_string()),
            ("REFRESH_TTL".to_string(), refresh_ttl.to_string()),
            // Keys of its own, new at each start (see [`Provider::restart`]).
            ("FRESH_KEYS".to_string(), "1".to_string()),
        ]
        .into_iter()
        .chain((!id_tokens_on_refresh).then(|| ("NO_REFRESH_ID_TOKEN".to_string(), "1".to_string())))
        .collect::<Vec<_>>();
        let process = Provider::spawn(dir, &command, &env)?;
        Ok(Provider { issuer: format!("http://127.0.0.1:{port}"), port, process, command, env })
    }

    fn spawn(dir: &Path, args: &[String], env: &[(String, String)]) -> Result<Running> {
        let mut command = Command::new("node");
        command.current_dir(provider_dir()).args(args).envs(env.iter().map(|(k, v)| (k, v)));
        let process = spawn(command, &dir.join("oidc-provider.log"))?;
        wait_for_log(&process, Duration::from_secs(30), |log| log.contains("READY"))?;
        Ok(process)
    }

    /// Stops the provider and starts it again at the same address: its signing keys are new
    /// (it makes them at start), as after a key rotation.
    pub fn restart(&mut self, dir: &Path) -> Result<()> {
        Command::new("kill").args(["-9", &self.process.id().to_string()]).status()?;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
            if std::time::Instant::now() > deadline {
                bail!("the provider on port {} did not stop", self.port);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // The old one (ended) is reaped as the new one takes its place.
        self.process = Provider::spawn(dir, &self.command, &self.env)?;
        Ok(())
    }
}

/// `chromedriver` on a free port, for headless Chromium sessions. It leads its own process
/// group, with the browsers it starts: dropped (a test that ends, or one that panics), the
/// whole group goes, so no Chromium outlives its test.
pub struct Driver {
    pub url: String,
    pub process: Running,
}

impl Driver {
    pub fn start(dir: &Path) -> Result<Driver> {
        let port = free_port()?;
        let mut command = Command::new("chromedriver");
        command.arg(format!("--port={port}"));
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let process = spawn(command, &dir.join("chromedriver.log"))?;
        wait_for_log(&process, Duration::from_secs(30), |log| log.contains("started successfully"))?;
        Ok(Driver { url: format!("http://127.0.0.1:{port}"), process })
    }

    /// The browsers it started that are still running (their process ids).
    pub fn browsers(&self) -> Vec<u32> {
        let group = self.process.id();
        let listed = Command::new("pgrep").args(["-g", &group.to_string()]).output();
        let listed = listed.map(|output| String::from_utf8_lossy(&output.stdout).into_owned()).unwrap_or_default();
        listed.lines().filter_map(|pid| pid.trim().parse().ok()).filter(|pid| *pid != group).collect()
    }

    /// A headless Chromium, `width` pixels wide; under 500 (narrower than a desktop window
    /// can be), a phone: a 390×844 touch screen, as Chromium's device emulation makes it.
    pub async fn browser(&self, width: u32) -> Result<fantoccini::Client> {
        let mut options = serde_json::json!({
            "binary": "/usr/bin/chromium",
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--no-first-run", format!("--window-size={},900", width.max(500))],
        });
        if width < 500 {
            options["mobileEmulation"] =
                serde_json::json!({"deviceMetrics": {"width": width, "height": 844, "pixelRatio": 1.0, "touch": true}});
        }
        let capabilities = serde_json::json!({"browserName": "chrome", "goog:chromeOptions": options});
        let serde_json::Value::Object(capabilities) = capabilities else { bail!("capabilities") };
        fantoccini::ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities)
            .connect(&self.url)
            .await
            .context("start a headless Chromium")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // silent-ok: the group may be gone already; the driver itself is killed by `Running`.
        let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", self.process.id())]).status();
    }
}

/// The identities file (`data/state/identities.json`) naming each web login at `issuer` as a
/// user: `(login, user id, name)`.
pub fn known_as(issuer: &str, people: &[(&str, &str, &str)]) -> (String, String) {
    let created = "2026-11-23T00:00:00Z";
    let mut identities = serde_json::Map::new();
    let mut users = serde_json::Map::new();
    for (login, user, name) in people {
        identities.insert(
            format!("web:{issuer}#{login}"),
            serde_json::json!({"user": user, "own": user, "created": created}),
        );
        users.insert(user.to_string(), serde_json::json!({"name": name, "created": created}));
    }
    let file = serde_json::json!({"version": 1, "identities": identities, "users": users});
    ("data/state/identities.json".into(), file.to_string())
}

/// The status `url` answers with (0: nothing answered within 5 s).
pub fn status_of(url: &str) -> u16 {
    let output = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5", url])
        .output()
        .expect("curl");
    String::from_utf8_lossy(&output.stdout).trim().parse().unwrap_or(0)
}

/// Waits until the site answers `/signed-out` (true) or `limit` seconds pass.
pub fn serving(site: &str, limit: u64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(limit);
    while Instant::now() < deadline {
        if status_of(&format!("{site}/signed-out")) == 200 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// The conversation open in `browser` after it says hello and is answered, and a Coder of
/// `daemon`'s self-test user lingering in it (its connections ask for that conversation).
pub async fn coder_in_conversation(
    browser: &fantoccini::Client,
    daemon: &crate::TestDaemon,
) -> Result<(String, crate::LingeringAgent)> {
    say(browser, "hello").await;
    if !answered(browser, "echo: hello").await {
        bail!("no answer to hello");
    }
    let current = browser.find(fantoccini::Locator::Css("#sessions [aria-current]")).await?;
    let session = current.attr("data-id").await?.context("the conversation's id")?;
    let coder = tokio::task::block_in_place(|| daemon.lingering_agent("coder", Some(&session), &[]))?;
    Ok((session, coder))
}

/// A running `baaaht-web` for the gateway whose socket and token these are, with `extra`
/// arguments (its address is plain HTTP on loopback unless they name a `--public-url`).
pub fn web_gateway(dir: &Path, socket: &str, token: &str, port: u16, extra: &[&str]) -> Result<Running> {
    let mut command = Command::new(crate::bin("baaaht-web"));
    command.args(extra).args(["--socket", socket, "--listen", &format!("127.0.0.1:{port}")]);
    if !extra.contains(&"--public-url") {
        command.args(["--public-url", &format!("http://127.0.0.1:{port}")]);
    }
    command.arg("--state-dir").arg(dir.join("web-state")).env("BAAAHT_GATEWAY_TOKEN", token).env("RUST_LOG", "info");
    let process = spawn(command, &dir.join("baaaht-web.log"))?;
    wait_for_log(&process, Duration::from_secs(60), |log| log.contains("serving") || log.contains("baaaht-web:"))?;
    if !process.log_text().contains("serving") {
        bail!("baaaht-web did not start:\n{}", process.log_text());
    }
    Ok(process)
}

/// Signs `login` in through the provider's own form, in a browser at the site's home; returns
/// once the page names them.
pub async fn sign_in(browser: &fantoccini::Client, site: &str, login: &str) -> Result<()> {
    use fantoccini::Locator;
    browser.goto(site).await?;
    let form = browser.wait().at_most(Duration::from_secs(30)).for_element(Locator::Css("input[name=login]")).await;
    form.context("the provider's sign-in form")?.send_keys(login).await?;
    browser.find(Locator::Css("input[name=password]")).await?.send_keys("secret").await?;
    browser.find(Locator::Css("button.login-submit")).await?.click().await?;
    browser.wait().at_most(Duration::from_secs(30)).for_element(Locator::Id("who")).await.context("signed in")?;
    Ok(())
}

// A browser's sign-in without the browser: curl with a cookie jar.

/// What `/api/me` answers the browser whose cookies are in `jar` (its HTTP status).
pub fn me_status(site: &str, jar: &Path) -> String {
    let jar = jar.to_str().expect("a jar path");
    let output = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-b", jar, &format!("{site}/api/me")])
        .output()
        .expect("curl");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Where `url` redirects to (curl with the cookie jar `jar`), or `None` when it answers.
pub fn redirect_of(url: &str, jar: &Path, form: &[&str]) -> Option<String> {
    let jar = jar.to_str().expect("a jar path");
    let output = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{redirect_url}", "-c", jar, "-b", jar])
        .args(form)
        .arg(url)
        .output()
        .expect("curl");
    let target = String::from_utf8_lossy(&output.stdout).trim().to_string();
    (!target.is_empty()).then_some(target)
}

/// The page `url` answers with (curl with the cookie jar `jar`).
pub fn page_of(url: &str, jar: &Path) -> String {
    let jar = jar.to_str().expect("a jar path");
    let output = Command::new("curl").args(["-s", "-L", "-c", jar, "-b", jar, url]).output().expect("curl");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A sign-in as a browser makes it, stopped at the provider's answer: the callback URL (with
/// its code) the browser would be sent to. (The provider's form posts to its own full URL.)
pub fn callback_for(site: &str, login: &str, jar: &Path) -> String {
    let form = page_of(&format!("{site}/login"), jar);
    let action = form.split("action=\"").nth(1).and_then(|rest| rest.split('"').next()).expect("the provider's form");
    let login = format!("login={login}");
    let fields = ["--data-urlencode", "prompt=login", "--data-urlencode", &login, "--data-urlencode", "password=x"];
    let mut next = redirect_of(action, jar, &fields).expect("the provider answers the form");
    while !next.starts_with(&format!("{site}/auth/callback")) {
        next = redirect_of(&next, jar, &[]).unwrap_or_else(|| panic!("the provider stopped at {next}"));
    }
    next
}

/// A browser session's cookie and CSRF token, for requests made outside the page.
#[derive(Debug, Clone)]
pub struct Session {
    pub cookie: String,
    pub csrf: String,
}

impl Session {
    /// The session of the page open in `browser`.
    pub async fn of(browser: &fantoccini::Client) -> Result<Session> {
        let cookie = browser.get_named_cookie("baaaht_web").await?;
        let csrf = browser.find(fantoccini::Locator::Id("composer")).await?.attr("data-csrf").await?;
        Ok(Session { cookie: format!("baaaht_web={}", cookie.value()), csrf: csrf.unwrap_or_default() })
    }

    /// `method path` at `site` with this session's cookie, the CSRF token when `csrf`, and a
    /// JSON body: the status and the body.
    pub fn call(&self, site: &str, method: &str, path: &str, body: Option<&str>, csrf: bool) -> Result<(u16, String)> {
        let mut command = Command::new("curl");
        command.args(["-s", "-o", "-", "-w", "\n%{http_code}", "-X", method]);
        command.args(["-H", &format!("cookie: {}", self.cookie)]);
        if csrf {
            command.args(["-H", &format!("x-csrf-token: {}", self.csrf)]);
        }
        if let Some(body) = body {
            command.args(["-H", "content-type: application/json", "--data", body]);
        }
        let output = command.arg(format!("{site}{path}")).output().context("curl")?;
        let text = String::from_utf8_lossy(&output.stdout).to_string();
        let (body, code) = text.rsplit_once('\n').context("curl printed no status")?;
        Ok((code.trim().parse().context("a status")?, body.to_string()))
    }
}

impl Session {
    /// The value of header `name` in the answer to `GET path` at `site` (empty when missing).
    pub fn header(&self, site: &str, path: &str, name: &str) -> Result<String> {
        let output = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-D", "-", "-H", &format!("cookie: {}", self.cookie)])
            .arg(format!("{site}{path}"))
            .output()
            .context("curl")?;
        let text = String::from_utf8_lossy(&output.stdout).to_string();
        Ok(text
            .lines()
            .filter_map(|line| line.split_once(':'))
            .find(|(key, _)| key.trim().eq_ignore_ascii_case(name))
            .map(|(_, value)| value.trim().to_string())
            .unwrap_or_default())
    }

    /// Uploads `file` as `name` into conversation `session`, sent in chunks without a length
    /// when `chunked` (so only the bytes tell its size): the status and the body.
    pub fn upload(&self, site: &str, session: &str, name: &str, file: &Path, chunked: bool) -> Result<(u16, String)> {
        let mut command = Command::new("curl");
        command.args(["-s", "-o", "-", "-w", "\n%{http_code}", "-X", "POST"]);
        command.args(["-H", &format!("cookie: {}", self.cookie), "-H", &format!("x-csrf-token: {}", self.csrf)]);
        command.args(["-H", "content-type: application/octet-stream"]);
        if chunked {
            command.args(["-H", "transfer-encoding: chunked"]);
        }
        command.arg("--data-binary").arg(format!("@{}", file.display()));
        let output =
            command.arg(format!("{site}/api/uploads?name={name}&session={session}")).output().context("curl")?;
        let text = String::from_utf8_lossy(&output.stdout).to_string();
        let (body, code) = text.rsplit_once('\n').context("curl printed no status")?;
        Ok((code.trim().parse().context("a status")?, body.to_string()))
    }
}

/// Signs `login` in as a browser does (the provider's own form, with the cookie jar `jar`),
/// without one: the session cookie and the page's CSRF token.
pub fn signed_in(site: &str, login: &str, jar: &Path) -> Result<Session> {
    let home = page_of(&callback_for(site, login, jar), jar);
    let csrf = home.split("data-csrf=\"").nth(1).and_then(|rest| rest.split('"').next()).context("not signed in")?;
    let jar_text = std::fs::read_to_string(jar)?;
    let value = jar_text
        .lines()
        .find(|line| line.contains("\tbaaaht_web\t"))
        .and_then(|line| line.rsplit('\t').next())
        .context("no session cookie")?;
    Ok(Session { cookie: format!("baaaht_web={value}"), csrf: csrf.to_string() })
}

/// One HTTP/1.1 request to the site at `site` as `session` (its cookie and CSRF token), with
/// a JSON body: the status and the JSON answered (null when it is not JSON).
pub async fn request(
    site: std::net::SocketAddr,
    method: &str,
    path: &str,
    session: &Session,
    body: Option<serde_json::Value>,
) -> Result<(u16, serde_json::Value)> {
    use http_body_util::BodyExt as _;
    let stream = tokio::net::TcpStream::connect(site).await?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", site.to_string())
        .header("cookie", &session.cookie)
        .header("x-csrf-token", &session.csrf)
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(hyper::body::Bytes::from(body.map(|b| b.to_string()).unwrap_or_default())))?;
    let response = sender.send_request(request).await?;
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await?.to_bytes();
    Ok((status, serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null)))
}

/// Follows `/api/events` as a browser's EventSource does: each event's JSON with when it
/// arrived ([`crate::fake_provider::clock_nanos`]); the channel closes when the stream ends.
pub async fn events(
    site: std::net::SocketAddr,
    session: &Session,
) -> Result<tokio::sync::mpsc::UnboundedReceiver<(u64, serde_json::Value)>> {
    use http_body_util::BodyExt as _;
    let stream = tokio::net::TcpStream::connect(site).await?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let request = hyper::Request::builder()
        .uri("/api/events")
        .header("host", site.to_string())
        .header("cookie", &session.cookie)
        .header("accept", "text/event-stream")
        .body(http_body_util::Empty::<hyper::body::Bytes>::new())?;
    let response = sender.send_request(request).await?;
    if response.status() != 200 {
        bail!("/api/events answered {}", response.status());
    }
    let (events, receiver) = tokio::sync::mpsc::unbounded_channel();
    let mut body = response.into_body();
    tokio::spawn(async move {
        let _sender = sender;
        let mut pending = String::new();
        while let Some(Ok(frame)) = body.frame().await {
            let arrived = crate::fake_provider::clock_nanos();
            let Ok(data) = frame.into_data() else { continue };
            pending.push_str(&String::from_utf8_lossy(&data));
            while let Some(end) = pending.find("\n\n") {
                let event: String = pending.drain(..end + 2).collect();
                for line in event.lines() {
                    if let Some(json) = line.strip_prefix("data:") {
                        if let Ok(value) = serde_json::from_str::<serde_json::Value>(json.trim()) {
                            if events.send((arrived, value)).is_err() {
                                return;
                            }
                        }
                    }
                }
            }
        }
    });
    Ok(receiver)
}

/// A self-signed certificate for `localhost` and 127.0.0.1 in `dir`: its PEM file and its
/// key's.
pub fn self_signed(dir: &Path) -> Result<(PathBuf, PathBuf)> {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let made = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
        .args(["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .context("openssl")?;
    if !made.status.success() {
        bail!("openssl req: {}", String::from_utf8_lossy(&made.stderr));
    }
    Ok((cert, key))
}

/// A test certificate authority and a server certificate it issued for `localhost` and the
/// address `ip` (as a public CA's would be: the server's is no CA itself), in `dir`: the
/// authority's PEM file, the server's and its key's.
pub fn issued_for(dir: &Path, ip: &str) -> Result<(PathBuf, PathBuf, PathBuf)> {
    let (ca, ca_key) = (dir.join("ca.pem"), dir.join("ca-key.pem"));
    let (cert, key, request, extensions) =
        (dir.join("cert.pem"), dir.join("key.pem"), dir.join("cert.csr"), dir.join("cert.ext"));
    std::fs::write(&extensions, format!("subjectAltName=DNS:localhost,IP:{ip}\nbasicConstraints=critical,CA:FALSE\n"))?;
    let openssl = |args: &[&std::ffi::OsStr]| -> Result<()> {
        let made = Command::new("openssl").args(args).output().context("openssl")?;
        if !made.status.success() {
            bail!("openssl {:?}: {}", args.first(), String::from_utf8_lossy(&made.stderr));
        }
        Ok(())
    };
    let os = |text: &'static str| std::ffi::OsStr::new(text);
    let ec = [os("-newkey"), os("ec"), os("-pkeyopt"), os("ec_paramgen_curve:prime256v1"), os("-nodes")];
    let mut args = vec![os("req"), os("-x509")];
    args.extend(ec);
    args.extend([os("-days"), os("2"), os("-subj"), os("/CN=baaaht test CA"), os("-keyout")]);
    args.extend([ca_key.as_os_str(), os("-out"), ca.as_os_str()]);
    openssl(&args)?;
    let mut args = vec![os("req")];
    args.extend(ec);
    args.extend([os("-subj"), os("/CN=localhost"), os("-keyout"), key.as_os_str(), os("-out"), request.as_os_str()]);
    openssl(&args)?;
    openssl(&[
        os("x509"),
        os("-req"),
        os("-in"),
        request.as_os_str(),
        os("-CA"),
        ca.as_os_str(),
        os("-CAkey"),
        ca_key.as_os_str(),
        os("-CAcreateserial"),
        os("-days"),
        os("2"),
        os("-extfile"),
        extensions.as_os_str(),
        os("-out"),
        cert.as_os_str(),
    ])?;
    Ok((ca, cert, key))
}

/// `GET url` over HTTPS trusting `ca` only: the status, the HTTP version and the headers.
pub fn https_head(url: &str, ca: &Path) -> (u16, String, String) {
    let output = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-D", "-", "-w", "\n%{http_code} %{http_version}", "--max-time", "5"])
        .arg("--cacert")
        .arg(ca)
        .arg(url)
        .output();
    let text = output.map(|output| String::from_utf8_lossy(&output.stdout).to_string()).unwrap_or_default();
    let (headers, last) = text.rsplit_once('\n').unwrap_or(("", &text));
    let (code, version) = last.split_once(' ').unwrap_or((last, ""));
    (code.trim().parse().unwrap_or(0), version.trim().to_string(), headers.to_string())
}

/// Whether a PNG screenshot shows something: decoded, its pixels have many colours and no
/// one colour covers nearly all of it.
pub fn png_shows_something(png: &[u8]) -> Result<bool> {
    let mut decoder = png::Decoder::new(png);
    decoder.set_transformations(png::Transformations::normalize_to_color8());
    let mut reader = decoder.read_info().context("not a PNG")?;
    let mut pixels = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut pixels).context("the image data")?;
    let channels = frame.color_type.samples();
    if channels < 3 {
        bail!("a grey screenshot ({:?})", frame.color_type);
    }
    let mut counts: std::collections::HashMap<&[u8], usize> = std::collections::HashMap::new();
    for pixel in pixels[..frame.buffer_size()].chunks(channels) {
        *counts.entry(&pixel[..3]).or_default() += 1;
    }
    let most = counts.values().max().copied().unwrap_or_default();
    let all = (frame.width * frame.height) as usize;
    Ok(counts.len() >= 16 && most * 100 < all * 98)
}

// What the browser tests share: the site, its daemon, and steps in a browser.

/// Waits until `check` holds in the browser, polling against a deadline.
pub async fn until<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// A free port for the site, its address, and the provider that signs its users in (ID tokens
/// lasting `ttl` seconds), answering to the site's callback and sign-out pages.
pub fn site_and_provider(dir: &std::path::Path, ttl: u64) -> (u16, String, Provider) {
    let port = free_port().expect("port");
    let site = format!("http://127.0.0.1:{port}");
    let provider = Provider::start(dir, &format!("{site}/auth/callback"), &format!("{site}/signed-out"), ttl)
        .expect("the OIDC provider");
    (port, site, provider)
}

/// A daemon answering with `brain` whose egress lets it reach `provider`, with the web
/// gateway's client secret, `env` and `files` besides.
pub fn daemon_for(
    rt: &tokio::runtime::Runtime,
    provider: &Provider,
    brain: crate::fake_provider::Answer,
    env: Vec<(String, String)>,
    files: Vec<(String, String)>,
) -> (crate::fake_provider::FakeProvider, crate::TestDaemon) {
    daemon_offering(rt, provider, brain, env, files, &[])
}

/// As [`daemon_for`], its provider also offering `models` (providers.yaml's `models:`) in the
/// model pickers.
pub fn daemon_offering(
    rt: &tokio::runtime::Runtime,
    provider: &Provider,
    brain: crate::fake_provider::Answer,
    env: Vec<(String, String)>,
    files: Vec<(String, String)>,
    models: &[&str],
) -> (crate::fake_provider::FakeProvider, crate::TestDaemon) {
    let fake = rt.block_on(crate::fake_provider::FakeProvider::start(vec![], Some(brain))).expect("fake provider");
    let mut wired = crate::scenario::options_for(&fake);
    for (path, text) in &mut wired.files {
        if path == "config/providers.yaml" && !models.is_empty() {
            text.push_str(&format!("    models: [{}]\n", models.join(", ")));
        }
    }
    // The daemon fetches the provider's keys through its egress proxy: loopback is allowed here.
    let mut options = DaemonOptions {
        env: vec![
            ("BAAAHT__TOOLS__WEB_PROXY__ALLOW".into(), format!("[\"127.0.0.1:{}\"]", provider.port)),
            ("WEB_CLIENT_SECRET_HOME".into(), CLIENT_SECRET.into()),
        ],
        files,
        ..DaemonOptions::default()
    };
    options.env.extend(env);
    options.env.extend(wired.env);
    options.files.extend(wired.files);
    (fake, crate::TestDaemon::start(options).expect("daemon"))
}

/// The site within a browser's reach: `baaaht-web` run by hand on `port` for `daemon`
/// (registered for `provider`), and chromedriver.
pub fn site_for(
    rt: &tokio::runtime::Runtime,
    dir: &Path,
    daemon: &crate::TestDaemon,
    provider: &Provider,
    port: u16,
) -> (Running, Driver) {
    let added = register(rt, daemon, provider, "external", vec![]);
    let socket = added.gateway.expect("info").socket;
    let gateway = web_gateway(dir, &socket, &added.token, port, &[]).expect("baaaht-web");
    (gateway, Driver::start(dir).expect("chromedriver"))
}

/// Registers the web gateway `home` for `provider`, run as `mode` with `args`.
pub fn register(
    rt: &tokio::runtime::Runtime,
    daemon: &crate::TestDaemon,
    provider: &Provider,
    mode: &str,
    args: Vec<String>,
) -> baaaht_proto::v1::AddGatewayResponse {
    add_gateway(rt, daemon, provider, "home", mode, args).expect("AddGateway")
}

/// Asks the daemon to register the web gateway `name` for `provider`, run as `mode` with `args`.
pub fn add_gateway(
    rt: &tokio::runtime::Runtime,
    daemon: &crate::TestDaemon,
    provider: &Provider,
    name: &str,
    mode: &str,
    args: Vec<String>,
) -> Result<baaaht_proto::v1::AddGatewayResponse, tonic::Status> {
    rt.block_on(async {
        let mut host = crate::scenario::host_client(daemon).await.expect("host client");
        let request = baaaht_proto::v1::AddGatewayRequest {
            kind: "web".into(),
            name: name.into(),
            issuer: provider.issuer.clone(),
            audience: CLIENT_ID.into(),
            mode: mode.into(),
            args,
            ..Default::default()
        };
        host.admin.add_gateway(request).await.map(tonic::Response::into_inner)
    })
}

pub async fn text_of(browser: &fantoccini::Client, css: &str) -> String {
    match browser.find(fantoccini::Locator::Css(css)).await {
        Ok(element) => element.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// The text of every element `css` finds, in the page's order.
pub async fn texts_of(browser: &fantoccini::Client, css: &str) -> Vec<String> {
    let mut texts = vec![];
    for element in browser.find_all(fantoccini::Locator::Css(css)).await.unwrap_or_default() {
        texts.push(element.text().await.unwrap_or_default());
    }
    texts
}

/// Clicks the element `css` finds, once it is there and can be clicked (a side bar may still
/// be sliding in).
pub async fn click(browser: &fantoccini::Client, css: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let clicked = match browser.find(fantoccini::Locator::Css(css)).await {
            Ok(element) => element.click().await.map_err(|error| error.to_string()),
            Err(error) => Err(error.to_string()),
        };
        match clicked {
            Ok(()) => return,
            Err(error) if tokio::time::Instant::now() > deadline => panic!("click {css}: {error}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Replaces what the field at `css` holds with `text`, once it can be typed into (a dialog
/// still opening, under load, is waited for as [`click`] waits).
pub async fn fill(browser: &fantoccini::Client, css: &str, text: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let filled = match browser.find(fantoccini::Locator::Css(css)).await {
            Ok(element) => match element.clear().await {
                Ok(()) => element.send_keys(text).await.map_err(|error| error.to_string()),
                Err(error) => Err(error.to_string()),
            },
            Err(error) => Err(error.to_string()),
        };
        match filled {
            Ok(()) => return,
            Err(error) if tokio::time::Instant::now() > deadline => panic!("fill {css}: {error}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Types `text` into the composer and sends it (Enter).
pub async fn say(browser: &fantoccini::Client, text: &str) {
    let input = browser.find(fantoccini::Locator::Id("input")).await.expect("the composer");
    input.send_keys(&format!("{text}\n")).await.expect("type");
}

/// Waits until the newest finished answer contains `text`.
pub async fn answered(browser: &fantoccini::Client, text: &str) -> bool {
    until(Duration::from_secs(120), || async {
        let answers = browser.find_all(fantoccini::Locator::Css(".assistant.done")).await.unwrap_or_default();
        match answers.last() {
            Some(answer) => answer.text().await.is_ok_and(|shown| shown.contains(text)),
            None => false,
        }
    })
    .await
}

/// Keeps a screenshot as a test artifact (in $BAAAHT_SCREENSHOTS when set) after checking it
/// shows something.
pub async fn screenshot(browser: &fantoccini::Client, dir: &std::path::Path, name: &str) {
    let shot = browser.screenshot().await.expect("screenshot");
    assert!(png_shows_something(&shot).expect("a PNG"), "{name} is blank");
    std::fs::write(dir.join(format!("{name}.png")), &shot).expect("keep the screenshot");
    if let Ok(keep) = std::env::var("BAAAHT_SCREENSHOTS") {
        std::fs::create_dir_all(&keep).expect("screenshot folder");
        std::fs::write(std::path::Path::new(&keep).join(format!("{name}.png")), &shot).expect("screenshot");
    }
}

/// What axe-core (Deque's accessibility checker, `tests/browser/`) finds serious or critical on
/// the page open in `browser` now: one line per violation, with the elements it is about.
pub async fn accessibility_problems(browser: &fantoccini::Client) -> Result<Vec<String>> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("browser/node_modules/axe-core/axe.min.js");
    let source = std::fs::read_to_string(&script).with_context(|| {
        format!("{} is missing: run `npm ci` in tests/browser (scripts/test does)", script.display())
    })?;
    browser.execute(&source, vec![]).await.context("load axe-core into the page")?;
    let found = browser
        .execute_async(
            "const done = arguments[arguments.length - 1];
             axe.run(document, { resultTypes: ['violations'] })
               .then((result) => done({ checked: result.passes.length + result.violations.length, problems: result.violations
                 .filter((v) => v.impact === 'serious' || v.impact === 'critical')
                 .map((v) => `${v.impact} ${v.id}: ${v.help} — ${v.nodes.slice(0, 4).map((n) => n.target.join(' ') + ' (' + (n.failureSummary || '').replace(/\\s+/g, ' ').slice(0, 160) + ')').join('; ')}`) }))
               .catch((error) => done({ checked: 0, problems: [`axe-core failed: ${error}`] }));",
            vec![],
        )
        .await
        .context("run axe-core")?;
    let problems: Vec<String> = serde_json::from_value(found["problems"].clone()).context("axe-core's answer")?;
    // A run that checked nothing proves nothing.
    if found["checked"].as_u64().unwrap_or(0) < 10 && problems.is_empty() {
        bail!("axe-core checked almost nothing: {found}");
    }
    Ok(problems)
}

/// Whether the element `css` finds is shown (present, displayed and with a size).
pub async fn shown(browser: &fantoccini::Client, css: &str) -> bool {
    match browser.find(fantoccini::Locator::Css(css)).await {
        Ok(element) => element.is_displayed().await.unwrap_or(false),
        Err(_) => false,
    }
}
