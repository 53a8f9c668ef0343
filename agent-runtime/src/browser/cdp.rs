//! The DevTools protocol over Chromium's `--remote-debugging-pipe`: each message is a JSON
//! object ended by a NUL byte, the runner's commands on Chromium's fd 3 and its answers and
//! events on fd 4. No port is opened, so nothing else in the container (and no page) can reach
//! the protocol. Commands carry an id and, for a page, the session id of its attachment
//! (`Target.attachToTarget` with `flatten`); answers come back under the id, events are handed
//! to one receiver in the order Chromium sent them.
//!
//! Written by hand over a pipe rather than with a crate (`chromiumoxide`): its generated
//! protocol crate (650 kB compressed) and its second WebSocket stack would more than double the
//! container binary's build for the twenty commands the browser tool sends, and a WebSocket
//! means a listening port in the browser's container.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::{mpsc, oneshot};

/// The largest message taken from Chromium (a full-page screenshot is the largest answer).
pub const MAX_MESSAGE: usize = 64 << 20;

/// The id a message starts with (`{"id":N,`, as Chromium writes its answers).
fn answered_id(message: &[u8]) -> Option<u64> {
    let digits = message.strip_prefix(b"{\"id\":")?;
    let end = digits.iter().position(|byte| !byte.is_ascii_digit())?;
    std::str::from_utf8(&digits[..end]).ok()?.parse().ok()
}

/// Reads past the rest of a message, to its NUL; false when the pipe ended first.
async fn skip_message(reader: &mut (impl tokio::io::AsyncBufRead + Unpin)) -> bool {
    loop {
        let Ok(buffer) = reader.fill_buf().await else { return false };
        if buffer.is_empty() {
            return false;
        }
        match buffer.iter().position(|byte| *byte == 0) {
            Some(at) => {
                reader.consume(at + 1);
                return true;
            }
            None => {
                let all = buffer.len();
                reader.consume(all);
            }
        }
    }
}

/// Why a command got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CdpError {
    /// Chromium answered with an error.
    #[error("{method}: {message}")]
    Failed { method: String, message: String },
    /// No answer in time: the page (or the browser) is busy.
    #[error("{method}: no answer within {} s", .limit.as_secs())]
    Timeout { method: String, limit: Duration },
    /// The pipe closed: Chromium is gone.
    #[error("the browser is gone")]
    Gone,
}

/// An event: its method, its parameters, and the session it came from (empty: the browser).
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub method: String,
    pub params: Value,
    pub session: String,
}

type Waiting = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, String>>>>>;

/// One connection to a Chromium over its pipe.
pub struct Cdp {
    writer: tokio::sync::Mutex<Box<dyn tokio::io::AsyncWrite + Send + Unpin>>,
    next: AtomicU64,
    waiting: Waiting,
}

impl std::fmt::Debug for Cdp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cdp").field("next", &self.next).finish_non_exhaustive()
    }
}

impl Cdp {
    /// A connection writing to `writer` and reading from `reader`; the events, in order, on the
    /// receiver. The reader runs on a task of the current runtime until the pipe closes.
    pub fn start(
        writer: impl tokio::io::AsyncWrite + Send + Unpin + 'static,
        reader: impl tokio::io::AsyncRead + Send + Unpin + 'static,
    ) -> (Arc<Cdp>, mpsc::UnboundedReceiver<Event>) {
        let waiting: Waiting = Arc::default();
        let (events, received) = mpsc::unbounded_channel();
        let cdp = Arc::new(Cdp { writer: tokio::sync::Mutex::new(Box::new(writer)), next: AtomicU64::new(1), waiting });
        let waiting = cdp.waiting.clone();
        tokio::spawn(async move {
            let mut reader = tokio::io::BufReader::with_capacity(1 << 16, reader);
            let mut message = Vec::new();
            loop {
                message.clear();
                match (&mut reader).take(MAX_MESSAGE as u64 + 1).read_until(0, &mut message).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                if message.last() != Some(&0) {
                    if message.len() <= MAX_MESSAGE {
                        // Cut by the end of the pipe.
                        break;
                    }
                    // Longer than a message may be (a page far too large to read whole): the
                    // rest is passed over, and the command it answers fails.
                    let id = answered_id(&message);
                    if !skip_message(&mut reader).await {
                        break;
                    }
                    let waiter = id.and_then(|id| waiting.lock().unwrap_or_else(PoisonError::into_inner).remove(&id));
                    if let Some(waiter) = waiter {
                        let why = format!("its answer is larger than the {} MiB the tool reads", MAX_MESSAGE >> 20);
                        // silent-ok: whoever asked stopped waiting.
                        let _ = waiter.send(Err(why));
                    }
                    continue;
                }
                message.pop();
                let Ok(value) = serde_json::from_slice::<Value>(&message) else { continue };
                if let Some(id) = value.get("id").and_then(Value::as_u64) {
                    let waiter = waiting.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
                    if let Some(waiter) = waiter {
                        let answer = match value.get("error") {
                            Some(error) => Err(error["message"].as_str().unwrap_or("an error").to_string()),
                            None => Ok(value.get("result").cloned().unwrap_or(Value::Null)),
                        };
                        // silent-ok: whoever asked stopped waiting.
                        let _ = waiter.send(answer);
                    }
                } else if let Some(method) = value.get("method").and_then(Value::as_str) {
                    let event = Event {
                        method: method.to_string(),
                        params: value.get("params").cloned().unwrap_or(Value::Null),
                        session: value.get("sessionId").and_then(Value::as_str).unwrap_or_default().to_string(),
                    };
                    if events.send(event).is_err() {
                        break;
                    }
                }
            }
            // Every command still waiting learns that the browser is gone.
            waiting.lock().unwrap_or_else(PoisonError::into_inner).clear();
        });
        (cdp, received)
    }

    /// Sends `method` with `params` (to the page of `session`; empty: the browser) and waits at
    /// most `limit` for its answer.
    pub async fn call(&self, session: &str, method: &str, params: Value, limit: Duration) -> Result<Value, CdpError> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut message = json!({ "id": id, "method": method, "params": params });
        if !session.is_empty() {
            message["sessionId"] = Value::from(session);
        }
        let mut bytes = message.to_string().into_bytes();
        bytes.push(0);
        let (answer, answered) = oneshot::channel();
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner).insert(id, answer);
        let forget = || self.waiting.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
        {
            let mut writer = self.writer.lock().await;
            if writer.write_all(&bytes).await.is_err() || writer.flush().await.is_err() {
                forget();
                return Err(CdpError::Gone);
            }
        }
        match tokio::time::timeout(limit, answered).await {
            Ok(Ok(Ok(result))) => Ok(result),
            Ok(Ok(Err(message))) => Err(CdpError::Failed { method: method.to_string(), message }),
            Ok(Err(_dropped)) => Err(CdpError::Gone),
            Err(_elapsed) => {
                forget();
                Err(CdpError::Timeout { method: method.to_string(), limit })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn commands_are_answered_by_id_and_events_come_in_order() {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let (their_reader, mut their_writer) = tokio::io::split(theirs);
        let (our_reader, our_writer) = tokio::io::split(ours);
        let (cdp, mut events) = Cdp::start(our_writer, our_reader);
        let asking = {
            let cdp = cdp.clone();
            tokio::spawn(async move {
                cdp.call("S1", "Page.navigate", json!({"url": "http://a.example/"}), Duration::from_secs(5)).await
            })
        };
        // What Chromium reads: one NUL-ended message with the session.
        let mut their_reader = tokio::io::BufReader::new(their_reader);
        let mut sent = vec![];
        their_reader.read_until(0, &mut sent).await.expect("read");
        let sent: Value = serde_json::from_slice(&sent[..sent.len() - 1]).expect("JSON");
        assert_eq!((sent["method"].as_str(), sent["sessionId"].as_str()), (Some("Page.navigate"), Some("S1")));
        let id = sent["id"].as_u64().expect("id");
        // An event first, then the answer, then an error for an id nobody waits for.
        let event = json!({"method": "Page.loadEventFired", "params": {"timestamp": 1}, "sessionId": "S1"});
        let answer = json!({"id": id, "result": {"frameId": "F"}});
        let stray = json!({"id": 999, "error": {"message": "nobody asked"}});
        for message in [event, answer, stray] {
            their_writer.write_all(format!("{message}\0").as_bytes()).await.expect("write");
        }
        let answered = asking.await.expect("joined").expect("answered");
        assert_eq!(answered["frameId"], "F");
        let got = events.recv().await.expect("an event");
        assert_eq!((got.method.as_str(), got.session.as_str()), ("Page.loadEventFired", "S1"));
        // An error answer is the command's error; a closed pipe ends every wait.
        let failing = {
            let cdp = cdp.clone();
            tokio::spawn(async move { cdp.call("", "Browser.nothing", json!({}), Duration::from_secs(5)).await })
        };
        let mut sent = vec![];
        their_reader.read_until(0, &mut sent).await.expect("read");
        let id = serde_json::from_slice::<Value>(&sent[..sent.len() - 1]).expect("JSON")["id"].as_u64().expect("id");
        their_writer
            .write_all(format!("{}\0", json!({"id": id, "error": {"message": "no such method"}})).as_bytes())
            .await
            .expect("write");
        let failed = failing.await.expect("joined");
        // An answer past the most a message may be fails its command; the pipe goes on.
        let huge = {
            let cdp = cdp.clone();
            tokio::spawn(async move {
                cdp.call("", "Accessibility.getFullAXTree", json!({}), Duration::from_secs(20)).await
            })
        };
        let mut sent = vec![];
        their_reader.read_until(0, &mut sent).await.expect("read");
        let id = serde_json::from_slice::<Value>(&sent[..sent.len() - 1]).expect("JSON")["id"].as_u64().expect("id");
        let writing = tokio::spawn(async move {
            let padding = "x".repeat(MAX_MESSAGE + 10);
            their_writer
                .write_all(format!("{{\"id\":{id},\"result\":{{\"nodes\":\"{padding}\"}}}}\0").as_bytes())
                .await
                .expect("write");
            their_writer
        });
        let answered = huge.await.expect("joined");
        assert!(
            matches!(&answered, Err(CdpError::Failed { message, .. }) if message.contains("larger than the 64 MiB")),
            "{answered:?}"
        );
        let their_writer = writing.await.expect("written");
        assert_eq!(
            failed,
            Err(CdpError::Failed { method: "Browser.nothing".into(), message: "no such method".into() })
        );
        let late = cdp.call("", "Browser.getVersion", json!({}), Duration::from_millis(50)).await;
        assert!(matches!(late, Err(CdpError::Timeout { .. })), "{late:?}");
        // Chromium gone: a command waiting learns it, and so does one sent after.
        let waiting = {
            let cdp = cdp.clone();
            tokio::spawn(async move { cdp.call("", "Browser.getVersion", json!({}), Duration::from_secs(5)).await })
        };
        let mut sent = vec![];
        their_reader.read_until(0, &mut sent).await.expect("read");
        drop((their_writer, their_reader));
        assert_eq!(waiting.await.expect("joined"), Err(CdpError::Gone));
    }
}
