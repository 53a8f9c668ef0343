//! A scriptable fake LLM provider (DESIGN.md §3, the `Provider` seam's test double): real HTTP
//! on an address of this machine, answering each request with the next scripted answer — the
//! providers' exact SSE byte streams, error statuses with `retry-after`, connections cut
//! mid-answer, or long paced streams — and recording what it was sent and whether the client
//! went away before the answer ended.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Chooses an answer from the request it answers (head and body as text).
#[derive(Clone)]
pub struct Responder(pub Arc<dyn Fn(&str) -> Answer + Send + Sync>);

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Responder(..)")
    }
}

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Answer {
    /// Whatever the function makes of the request: a fake model that reads what it was asked.
    Respond(Responder),
    Status {
        code: u16,
        retry_after: Option<String>,
        body: String,
    },
    /// Sends these bytes; with `cut`, closes the connection without finishing the answer.
    Stream {
        body: String,
        cut: bool,
    },
    /// Sends `chunks` one by one, `interval` apart (zero: as fast as the socket takes them).
    Paced {
        chunks: Arc<Vec<String>>,
        interval: Duration,
    },
    /// `answer`, after `wait` (a model's time to its first token).
    Later {
        wait: Duration,
        answer: Box<Answer>,
    },
}

/// The provider's wire format, for the generated streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    Anthropic,
    OpenAi,
}

#[derive(Debug, Default)]
struct Record {
    requests: Mutex<Vec<String>>,
    /// Answers the client stopped reading before their end.
    abandoned: AtomicUsize,
    /// Answers sent to their end.
    completed: AtomicUsize,
    /// A context window as llama.cpp's server keeps one: its size in tokens (the conversation's
    /// characters / 4, the instructions not counted), and whether `GET /props` tells it.
    context: Mutex<Option<(usize, bool)>>,
    /// Requests refused as longer than the context window.
    too_long: AtomicUsize,
}

/// Replaced, in a paced chunk, by [`clock_nanos`] at the moment the chunk is written, so a
/// client in the same process can tell how long each token took to reach it.
pub const STAMP: &str = "@STAMP@";

/// Nanoseconds since this process first asked; the clock [`STAMP`]s are written in.
pub fn clock_nanos() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// The stamp in a token written by [`stamped_token_stream`] (`@NANOS `), if it is one.
pub fn stamp_of(text: &str) -> Option<u64> {
    text.trim_end().strip_prefix('@')?.parse().ok()
}

/// A fake provider; stops when dropped.
pub struct FakeProvider {
    pub address: SocketAddr,
    record: Arc<Record>,
    then: Arc<Mutex<Option<Answer>>>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeProvider {
    /// Listens on 127.0.0.1 and answers from `script` in order, then with `then` for ever
    /// (or a 500 when `then` is `None`).
    pub async fn start(script: Vec<Answer>, then: Option<Answer>) -> std::io::Result<FakeProvider> {
        FakeProvider::start_on("127.0.0.1:0".parse().expect("literal address"), script, then).await
    }

    /// As [`FakeProvider::start`], on `address` (e.g. the container bridge's gateway address,
    /// so that a container with egress reaches it).
    pub async fn start_on(
        address: SocketAddr,
        script: Vec<Answer>,
        then: Option<Answer>,
    ) -> std::io::Result<FakeProvider> {
        let listener = tokio::net::TcpListener::bind(address).await?;
        let address = listener.local_addr()?;
        let record = Arc::new(Record::default());
        let script = Arc::new(Mutex::new(VecDeque::from(script)));
        let recorder = record.clone();
        let then = Arc::new(Mutex::new(then));
        let fallback = then.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let next = script
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .pop_front()
                    .or_else(|| fallback.lock().unwrap_or_else(PoisonError::into_inner).clone());
                tokio::spawn(answer(stream, next, recorder.clone()));
            }
        });
        Ok(FakeProvider { address, record, then, task })
    }

    /// Answers every request after the script with `answer` from now on.
    pub fn answer_with(&self, answer: Answer) {
        *self.then.lock().unwrap_or_else(PoisonError::into_inner) = Some(answer);
    }

    /// `api_base` for an endpoint of `wire` pointing here.
    pub fn api_base(&self, wire: Wire) -> String {
        match wire {
            Wire::Anthropic => format!("http://{}", self.address),
            Wire::OpenAi => format!("http://{}/v1", self.address),
        }
    }

    /// Each request received so far: head and body as text.
    pub fn requests(&self) -> Vec<String> {
        self.record.requests.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Answers whose client went away before the end.
    pub fn abandoned(&self) -> usize {
        self.record.abandoned.load(Ordering::SeqCst)
    }

    /// Answers sent to their end.
    pub fn completed(&self) -> usize {
        self.record.completed.load(Ordering::SeqCst)
    }

    /// From now on keeps a context window of `tokens` as llama.cpp's server does: a request
    /// whose messages are longer (their characters / 4) is refused with its 400 and words, and
    /// `GET /props` tells the window when `tells` (else it is not found).
    pub fn limit_context(&self, tokens: usize, tells: bool) {
        *self.record.context.lock().unwrap_or_else(PoisonError::into_inner) = Some((tokens, tells));
    }

    /// Requests refused as longer than the context window.
    pub fn refused_as_too_long(&self) -> usize {
        self.record.too_long.load(Ordering::SeqCst)
    }
}

/// The tokens a request's messages take, as [`FakeProvider::limit_context`] counts them.
fn message_tokens(body: &serde_json::Value) -> usize {
    fn chars(value: &serde_json::Value) -> usize {
        match value {
            serde_json::Value::String(text) => text.len(),
            serde_json::Value::Array(items) => items.iter().map(chars).sum(),
            serde_json::Value::Object(fields) => {
                fields.iter().filter(|(key, _)| *key != "type").map(|(_, v)| chars(v)).sum()
            }
            _ => 0,
        }
    }
    let conversation = body["messages"].as_array().into_iter().flatten().filter(|m| m["role"] != "system");
    conversation.map(|m| chars(&m["content"])).sum::<usize>() / 4
}

/// A complete HTTP answer with a JSON body.
fn json_reply(status: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

impl Drop for FakeProvider {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn answer(stream: tokio::net::TcpStream, answer: Option<Answer>, record: Arc<Record>) {
    // silent-ok: Nagle would hold small paced chunks back; without it they leave at once.
    let _ = stream.set_nodelay(true);
    let (mut reader, mut writer) = stream.into_split();
    let mut buffer = vec![];
    let mut chunk = [0u8; 16 * 1024];
    // The head, then the body by content-length.
    let body_start = loop {
        let n = reader.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return;
        }
        buffer.extend_from_slice(&chunk[..n]);
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
    };
    let head = String::from_utf8_lossy(&buffer[..body_start]).to_ascii_lowercase();
    // What `GET /v1/models` lists (OpenAI's format, as Ollama, llama.cpp and vLLM answer it).
    if head.starts_with("get ") && head.split_whitespace().nth(1).is_some_and(|path| path.ends_with("/models")) {
        let body = r#"{"object":"list","data":[{"id":"fake-model","object":"model","owned_by":"baaaht-tests"}]}"#;
        let reply = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        // silent-ok: a client that hung up does not want the list.
        let _ = writer.write_all(reply.as_bytes()).await;
        return;
    }
    // What llama.cpp's server tells of itself: the context each request gets.
    if head.starts_with("get /props ") {
        let asked = String::from_utf8_lossy(&buffer[..body_start]).into_owned();
        record.requests.lock().unwrap_or_else(PoisonError::into_inner).push(asked);
        let context = *record.context.lock().unwrap_or_else(PoisonError::into_inner);
        let reply = match context {
            Some((tokens, true)) => json_reply(
                "200 OK",
                &format!(r#"{{"default_generation_settings":{{"n_ctx":{tokens}}},"total_slots":1}}"#),
            ),
            _ => json_reply(
                "404 Not Found",
                r#"{"error":{"code":404,"message":"File Not Found","type":"not_found_error"}}"#,
            ),
        };
        // silent-ok: as above.
        let _ = writer.write_all(reply.as_bytes()).await;
        return;
    }
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:").map(|v| v.trim().to_string()))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buffer.len() < body_start + length {
        let n = reader.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            break;
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
    let request = String::from_utf8_lossy(&buffer).into_owned();
    let context = *record.context.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((tokens, _)) = context {
        let asked = message_tokens(&body_of(&request));
        if asked > tokens {
            record.too_long.fetch_add(1, Ordering::SeqCst);
            record.requests.lock().unwrap_or_else(PoisonError::into_inner).push(request);
            // llama.cpp's server's very answer.
            let body = format!(
                r#"{{"error":{{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":{asked},"n_ctx":{tokens}}}}}"#
            );
            // silent-ok: as above.
            let _ = writer.write_all(json_reply("400 Bad Request", &body).as_bytes()).await;
            return;
        }
    }
    let answer = match answer {
        Some(Answer::Respond(responder)) => Some((responder.0)(&request)),
        other => other,
    };
    record.requests.lock().unwrap_or_else(PoisonError::into_inner).push(request);
    let answer = match answer {
        Some(Answer::Later { wait, answer }) => {
            tokio::time::sleep(wait).await;
            Some(*answer)
        }
        other => other,
    };
    const STREAM_HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
    let chunks: Vec<String>;
    let (parts, interval, cut): (&[String], Duration, bool) = match &answer {
        Some(Answer::Status { code, retry_after, body }) => {
            let extra = retry_after.as_ref().map(|s| format!("retry-after: {s}\r\n")).unwrap_or_default();
            chunks = vec![format!(
                "HTTP/1.1 {code} Error\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )];
            (&chunks, Duration::ZERO, false)
        }
        Some(Answer::Stream { body, cut }) => {
            chunks = vec![format!("{STREAM_HEAD}{body}")];
            (&chunks, Duration::ZERO, *cut)
        }
        Some(Answer::Paced { chunks: paced, interval }) => {
            // silent-ok: a client gone before the head shows up as abandoned below.
            let _ = writer.write_all(STREAM_HEAD.as_bytes()).await;
            (paced.as_slice(), *interval, false)
        }
        Some(Answer::Respond(_) | Answer::Later { .. }) | None => {
            chunks = vec!["HTTP/1.1 500 Internal\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_string()];
            (&chunks, Duration::ZERO, false)
        }
    };
    let send = async {
        for (index, part) in parts.iter().enumerate() {
            if index > 0 && !interval.is_zero() {
                tokio::time::sleep(interval).await;
            }
            let written = if part.contains(STAMP) {
                writer.write_all(part.replace(STAMP, &clock_nanos().to_string()).as_bytes()).await
            } else {
                writer.write_all(part.as_bytes()).await
            };
            if written.is_err() {
                return false;
            }
        }
        true
    };
    // The client sends nothing after its request: a read that ends means it went away.
    let gone = async {
        loop {
            match reader.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    let finished = tokio::select! {
        finished = send => finished,
        () = gone => false,
    };
    if finished {
        record.completed.fetch_add(1, Ordering::SeqCst);
    } else {
        record.abandoned.fetch_add(1, Ordering::SeqCst);
    }
    if !cut {
        // silent-ok: the connection closes either way.
        let _ = writer.shutdown().await;
    }
}

/// An answer streaming `tokens` one-word text deltas in `wire`'s format, one SSE event per
/// chunk, ending with usage and the stop event.
pub fn token_stream(wire: Wire, tokens: usize, interval: Duration) -> Answer {
    tokens_of(wire, tokens, interval, |index| format!("t{index} "))
}

/// An answer streaming `text` word by word (each word and its space a text delta), one every
/// `interval`. The words must need no JSON escaping.
pub fn words_stream(wire: Wire, text: &str, interval: Duration) -> Answer {
    let words: Vec<String> = text.split_inclusive(' ').map(str::to_string).collect();
    tokens_of(wire, words.len(), interval, |index| words[index].clone())
}

/// As [`token_stream`], each token's text the time it was written (`@NANOS `, see [`stamp_of`]).
pub fn stamped_token_stream(wire: Wire, tokens: usize, interval: Duration) -> Answer {
    tokens_of(wire, tokens, interval, |_| format!("@{STAMP} "))
}

/// `text` as a JSON string, quoted and escaped (a token may hold a newline or a quote).
fn json_text(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

fn tokens_of(wire: Wire, tokens: usize, interval: Duration, text: impl Fn(usize) -> String) -> Answer {
    let mut chunks = Vec::with_capacity(tokens + 6);
    match wire {
        Wire::Anthropic => {
            chunks.push("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_fake\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"fake-model\",\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n".to_string());
            chunks.push("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n".to_string());
            for index in 0..tokens {
                chunks.push(format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":{}}}}}\n\n", json_text(&text(index))));
            }
            chunks
                .push("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n".to_string());
            chunks.push(format!("event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"end_turn\",\"stop_sequence\":null}},\"usage\":{{\"output_tokens\":{tokens}}}}}\n\n"));
            chunks.push("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n".to_string());
        }
        Wire::OpenAi => {
            for index in 0..tokens {
                let role = if index == 0 { "\"role\":\"assistant\"," } else { "" };
                chunks.push(format!("data: {{\"id\":\"chatcmpl-fake\",\"object\":\"chat.completion.chunk\",\"model\":\"fake-model\",\"choices\":[{{\"index\":0,\"delta\":{{{role}\"content\":{}}},\"finish_reason\":null}}]}}\n\n", json_text(&text(index))));
            }
            chunks.push("data: {\"id\":\"chatcmpl-fake\",\"object\":\"chat.completion.chunk\",\"model\":\"fake-model\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n".to_string());
            chunks.push(format!("data: {{\"id\":\"chatcmpl-fake\",\"object\":\"chat.completion.chunk\",\"model\":\"fake-model\",\"choices\":[],\"usage\":{{\"prompt_tokens\":12,\"completion_tokens\":{tokens},\"total_tokens\":{}}}}}\n\n", tokens + 12));
            chunks.push("data: [DONE]\n\n".to_string());
        }
    }
    Answer::Paced { chunks: Arc::new(chunks), interval }
}

/// Anthropic's documented text example: "Hello" with a ping, usage 3 in / 2 out.
pub const ANTHROPIC_HELLO: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"test-model\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\nevent: ping\ndata: {\"type\":\"ping\"}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\nevent: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":2}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

/// OpenAI's documented chunk sequence: "Hello", finish_reason stop, no usage chunk.
pub const OPENAI_HELLO: &str = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"test-model\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hello\"},\"finish_reason\":null}]}\n\ndata: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"test-model\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";

/// Anthropic's overloaded answer.
pub fn overloaded() -> Answer {
    Answer::Status {
        code: 529,
        retry_after: None,
        body: "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}".into(),
    }
}

/// The images in the last request the model was sent: (media type, base64 data) in order.
pub fn images_sent(provider: &FakeProvider) -> Vec<(String, String)> {
    provider.requests().last().map(|request| images_in(&body_of(request))).unwrap_or_default()
}

/// The images in every request the model was sent from the `from`th on (another agent may
/// have been asked something since the one that was shown them).
pub fn images_since(provider: &FakeProvider, from: usize) -> Vec<(String, String)> {
    provider.requests().iter().skip(from).flat_map(|request| images_in(&body_of(request))).collect()
}

/// The images in request `body`: (media type, base64 data) in order.
fn images_in(body: &serde_json::Value) -> Vec<(String, String)> {
    let blocks = body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .flat_map(|message| message["content"].as_array().cloned().unwrap_or_default());
    blocks
        .filter(|block| block["type"] == "image")
        .map(|block| {
            let source = &block["source"];
            (
                source["media_type"].as_str().unwrap_or_default().into(),
                source["data"].as_str().unwrap_or_default().into(),
            )
        })
        .collect()
}

/// The JSON body of a recorded request.
pub fn body_of(request: &str) -> serde_json::Value {
    let body = request.split_once("\r\n\r\n").map(|(_, body)| body).unwrap_or_default();
    serde_json::from_str(body).unwrap_or(serde_json::Value::Null)
}

fn sse(event: &str, data: &serde_json::Value) -> String {
    format!("event: {event}\ndata: {data}\n\n")
}

/// An Anthropic answer: `text` (may be empty), then `calls` (id, tool name, input), with the
/// stop reason they imply.
pub fn anthropic_answer(text: &str, calls: &[(&str, &str, serde_json::Value)]) -> Answer {
    use serde_json::json;
    let mut body = sse(
        "message_start",
        &json!({"type": "message_start", "message": {"id": "msg_fake", "type": "message", "role": "assistant", "content": [], "model": "fake-model", "usage": {"input_tokens": 20, "output_tokens": 1}}}),
    );
    let mut index = 0;
    if !text.is_empty() {
        body.push_str(&sse(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
        ));
        body.push_str(&sse(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}}),
        ));
        body.push_str(&sse("content_block_stop", &json!({"type": "content_block_stop", "index": index})));
        index += 1;
    }
    for (id, name, input) in calls {
        body.push_str(&sse("content_block_start", &json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})));
        body.push_str(&sse("content_block_delta", &json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": input.to_string()}})));
        body.push_str(&sse("content_block_stop", &json!({"type": "content_block_stop", "index": index})));
        index += 1;
    }
    let stop = if calls.is_empty() { "end_turn" } else { "tool_use" };
    body.push_str(&sse("message_delta", &json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 10}})));
    body.push_str(&sse("message_stop", &json!({"type": "message_stop"})));
    Answer::Stream { body, cut: false }
}

/// An Anthropic answer that is one call of tool `name` (id `id`), its arguments written in
/// `pieces`, `pause` apart: a model that names what it calls before it writes the rest.
pub fn anthropic_call_in_pieces(id: &str, name: &str, pieces: &[&str], pause: Duration) -> Answer {
    use serde_json::json;
    let delta = |piece: &str| {
        sse(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": piece}}),
        )
    };
    let mut chunks: Vec<String> = pieces.iter().map(|piece| delta(piece)).collect();
    let Some(first) = chunks.first_mut() else { return anthropic_answer("", &[]) };
    let mut head = sse(
        "message_start",
        &json!({"type": "message_start", "message": {"id": "msg_fake", "type": "message", "role": "assistant", "content": [], "model": "fake-model", "usage": {"input_tokens": 20, "output_tokens": 1}}}),
    );
    head.push_str(&sse(
        "content_block_start",
        &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
    ));
    first.insert_str(0, &head);
    if let Some(last) = chunks.last_mut() {
        last.push_str(&sse("content_block_stop", &json!({"type": "content_block_stop", "index": 0})));
        last.push_str(&sse("message_delta", &json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 10}})));
        last.push_str(&sse("message_stop", &json!({"type": "message_stop"})));
    }
    Answer::Paced { chunks: Arc::new(chunks), interval: pause }
}

/// An Anthropic answer that thinks first (a thinking block with `signature`), then says `text`
/// and makes `calls`.
pub fn anthropic_thinking_answer(
    thinking: &str,
    signature: &str,
    text: &str,
    calls: &[(&str, &str, serde_json::Value)],
) -> Answer {
    use serde_json::json;
    let Answer::Stream { body, .. } = anthropic_answer(text, calls) else { unreachable!("a stream") };
    // The thinking block is block 0: the others move up by one.
    let mut shifted = String::new();
    for event in body.split("\n\n").filter(|event| !event.is_empty()) {
        let Some((head, data)) = event.split_once("data: ") else { continue };
        let mut value: serde_json::Value = serde_json::from_str(data).expect("the fake's own json");
        if let Some(index) = value["index"].as_u64() {
            value["index"] = json!(index + 1);
        }
        shifted.push_str(&format!("{head}data: {value}\n\n"));
        if value["type"] == "message_start" {
            shifted.push_str(&sse("content_block_start", &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}})));
            shifted.push_str(&sse("content_block_delta", &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": thinking}})));
            shifted.push_str(&sse("content_block_delta", &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": signature}})));
            shifted.push_str(&sse("content_block_stop", &json!({"type": "content_block_stop", "index": 0})));
        }
    }
    Answer::Stream { body: shifted, cut: false }
}

/// What an Anthropic request asks, as a fake model reads it.
#[derive(Debug, Clone, Default)]
pub struct Asked {
    /// The names of the tools offered.
    pub tools: Vec<String>,
    /// Every tool result sent back so far, in order.
    pub results: Vec<String>,
    /// Those sent back since the last message the user wrote (this turn's).
    pub turn_results: Vec<String>,
    /// The text of the first user message.
    pub first: String,
    pub system: String,
    /// The whole body.
    pub body: serde_json::Value,
}

impl Asked {
    pub fn of(request: &str) -> Asked {
        let body = body_of(request);
        let tools = body["tools"]
            .as_array()
            .map(|tools| tools.iter().filter_map(|t| t["name"].as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        let mut results = vec![];
        let mut turn_results = vec![];
        let mut first = String::new();
        for message in body["messages"].as_array().into_iter().flatten() {
            let content = &message["content"];
            let blocks: Vec<&serde_json::Value> = match content {
                serde_json::Value::Array(blocks) => blocks.iter().collect(),
                other => vec![other],
            };
            // The agent's note of the time is not the person's words.
            let blocks = blocks.into_iter().filter(|block| {
                !block["text"].as_str().or(block.as_str()).is_some_and(|text| text.starts_with(baaaht_proto::TIME_NOTE))
            });
            for block in blocks {
                if block["type"] == "tool_result" {
                    let text = match &block["content"] {
                        serde_json::Value::String(text) => text.clone(),
                        serde_json::Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
                        _ => String::new(),
                    };
                    results.push(text.clone());
                    turn_results.push(text);
                } else if message["role"] == "user" {
                    if block["type"] == "text" || block.is_string() {
                        turn_results.clear();
                    }
                    if first.is_empty() {
                        first = block["text"].as_str().or(block.as_str()).unwrap_or_default().to_string();
                    }
                }
            }
        }
        let system = match &body["system"] {
            serde_json::Value::String(text) => text.clone(),
            serde_json::Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
            _ => String::new(),
        };
        Asked { tools, results, turn_results, first, system, body }
    }

    pub fn offers(&self, tool: &str) -> bool {
        self.tools.iter().any(|name| name == tool)
    }
}
