//! Notifications' test parts: a local push service (`tests/push-service/push_service.py`: HTTPS
//! on loopback with a test authority's certificate, checking VAPID and decrypting each message
//! with http_ece, proved against pywebpush when it starts), and a small DevTools client over
//! Chromium's websocket for what WebDriver cannot do: the installability check, delivering a
//! push to the page's service worker, a click on a notification's action.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{json, Value};

use crate::{spawn, Running};

/// The local push service.
pub struct PushService {
    /// `https://127.0.0.1:PORT`: where its subscriptions' endpoints are.
    pub origin: String,
    pub port: u16,
    /// The authority its certificate is signed by (the gateway's `--ca-file`).
    pub ca: PathBuf,
    control: String,
    pub process: Running,
}

impl PushService {
    /// Starts it in `dir` (its certificate, key and log there); returns once pywebpush's
    /// message was taken by it.
    pub fn start(dir: &Path) -> Result<PushService> {
        let tls = dir.join("push-tls");
        crate::tls::test_authority(&tls, "push test authority")?;
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("push-service/push_service.py");
        let mut command = Command::new("python3");
        command.arg(script).arg(tls.join("server.pem")).arg(tls.join("server.key")).arg(tls.join("ca.pem"));
        let process = spawn(command, &dir.join("push-service.log"))?;
        let deadline = Instant::now() + Duration::from_secs(60);
        let ports = loop {
            let log = process.log_text();
            if let Some(line) = log.lines().find(|line| line.starts_with("ready ")) {
                let ports: Vec<u16> = line.split_whitespace().skip(1).filter_map(|port| port.parse().ok()).collect();
                break ports;
            }
            if Instant::now() > deadline || log.contains("Traceback") || log.contains("refused pywebpush") {
                bail!("the push service did not start:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let [port, control] = ports[..] else { bail!("the push service said {ports:?}") };
        Ok(PushService {
            origin: format!("https://127.0.0.1:{port}"),
            port,
            ca: tls.join("ca.pem"),
            control: format!("http://127.0.0.1:{control}"),
            process,
        })
    }

    /// A subscription named `name`: its endpoint and keys, as a browser's `PushSubscription`
    /// has them.
    pub fn subscribe(&self, name: &str) -> Result<Value> {
        self.control("POST", &format!("/subscriptions/{name}"))
    }

    /// Every message for subscription `name` answers 410 Gone from now on.
    pub fn gone(&self, name: &str) -> Result<()> {
        self.control("POST", &format!("/gone/{name}")).map(|_| ())
    }

    /// What it took, in order: each message's subscription, VAPID claims and key, TTL,
    /// Urgency, Topic, and its decrypted text (`data`).
    pub fn received(&self) -> Vec<Value> {
        self.control("GET", "/received").ok().and_then(|list| list.as_array().cloned()).unwrap_or_default()
    }

    /// The notifications it took (their `data` read as the service worker reads it) of `kind`.
    pub fn shown(&self, kind: &str) -> Vec<(Value, Value)> {
        self.received()
            .into_iter()
            .filter_map(|taken| {
                let shown: Value = serde_json::from_str(taken["data"].as_str()?).ok()?;
                (shown["kind"] == kind).then_some((taken, shown))
            })
            .collect()
    }

    fn control(&self, method: &str, path: &str) -> Result<Value> {
        let output = Command::new("curl")
            .args(["-s", "-f", "-X", method, &format!("{}{path}", self.control)])
            .output()
            .context("curl")?;
        if !output.status.success() {
            bail!("the push service's {method} {path} failed");
        }
        serde_json::from_slice(&output.stdout).context("the push service's answer")
    }
}

/// Chromium's DevTools, over the websocket of the browser a WebDriver session started.
pub struct DevTools {
    socket: tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
    next: u64,
    /// Events read while waiting for answers, not yet taken.
    events: Vec<Value>,
}

impl DevTools {
    /// The DevTools of `browser` (its `goog:chromeOptions.debuggerAddress`).
    pub async fn of(browser: &fantoccini::Client) -> Result<DevTools> {
        let capabilities = browser.capabilities().context("the session's capabilities")?;
        let address = capabilities
            .get("goog:chromeOptions")
            .and_then(|options| options["debuggerAddress"].as_str())
            .context("no debuggerAddress")?
            .to_string();
        let version = Command::new("curl").args(["-s", &format!("http://{address}/json/version")]).output()?;
        let version: Value = serde_json::from_slice(&version.stdout).context("/json/version")?;
        let url = version["webSocketDebuggerUrl"].as_str().context("no webSocketDebuggerUrl")?;
        let (socket, _) = tokio_tungstenite::connect_async(url).await.context("the DevTools websocket")?;
        Ok(DevTools { socket, next: 0, events: vec![] })
    }

    /// Calls `method` (in target session `session`, or the browser's) and returns its result.
    pub async fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Result<Value> {
        use tokio_tungstenite::tungstenite::Message;
        self.next += 1;
        let id = self.next;
        let mut call = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            call["sessionId"] = json!(session);
        }
        self.socket.send(Message::text(call.to_string())).await?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let read = tokio::time::timeout(left, self.socket.next()).await;
            let Ok(Some(message)) = read else { bail!("{method}: no answer within 30 s") };
            let Message::Text(text) = message? else { continue };
            let answer: Value = serde_json::from_str(&text)?;
            if answer["id"] == id {
                if let Some(error) = answer.get("error") {
                    bail!("{method}: {error}");
                }
                return Ok(answer["result"].clone());
            }
            if answer.get("method").is_some() {
                self.events.push(answer);
            }
        }
    }

    /// The first event `method` (read already, or within `limit`) whose params `wanted` takes.
    pub async fn event(&mut self, method: &str, limit: Duration, wanted: impl Fn(&Value) -> bool) -> Result<Value> {
        use tokio_tungstenite::tungstenite::Message;
        let deadline = Instant::now() + limit;
        loop {
            if let Some(at) = self.events.iter().position(|event| event["method"] == method && wanted(&event["params"]))
            {
                return Ok(self.events.remove(at)["params"].clone());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let read = tokio::time::timeout(left, self.socket.next()).await;
            let Ok(Some(message)) = read else { bail!("no {method} within {limit:?}") };
            if let Message::Text(text) = message? {
                self.events.push(serde_json::from_str(&text)?);
            }
        }
    }

    /// A session attached to the first target of `kind` (`page`, `service_worker`) whose URL
    /// starts with `url`.
    pub async fn attach(&mut self, kind: &str, url: &str) -> Result<String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let targets = self.call(None, "Target.getTargets", json!({})).await?;
            let found =
                targets["targetInfos"].as_array().into_iter().flatten().find(|target| {
                    target["type"] == kind && target["url"].as_str().is_some_and(|at| at.starts_with(url))
                });
            if let Some(target) = found {
                let id = target["targetId"].clone();
                let attached =
                    self.call(None, "Target.attachToTarget", json!({"targetId": id, "flatten": true})).await?;
                return attached["sessionId"].as_str().map(str::to_string).context("no sessionId");
            }
            if Instant::now() > deadline {
                bail!("no {kind} target at {url}: {targets}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// `expression` evaluated (its promise awaited) in target session `session`: its value.
    pub async fn evaluate(&mut self, session: &str, expression: &str) -> Result<Value> {
        let params = json!({"expression": expression, "awaitPromise": true, "returnByValue": true});
        let result = self.call(Some(session), "Runtime.evaluate", params).await?;
        if let Some(thrown) = result.get("exceptionDetails") {
            bail!("{expression}: {thrown}");
        }
        Ok(result["result"]["value"].clone())
    }
}
