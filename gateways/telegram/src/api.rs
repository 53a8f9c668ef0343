//! The Telegram Bot API (<https://core.telegram.org/bots/api>): JSON methods POSTed to
//! `{api}/bot{token}/{method}`, files downloaded from `{api}/file/bot{token}/{path}`. A 429 is
//! waited out (its `retry_after`, at most a minute) and the call made again, up to 5 times.

use std::time::Duration;

use baaaht_gateway_kit::daemon::File;
use baaaht_gateway_kit::egress::Egress;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

/// How long a call may take, beyond a long poll's own wait.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The most bytes of one answer of the Bot API read.
const ANSWER_LIMIT: usize = 8 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiError {
    /// Telegram answered `ok: false`: its code and description.
    Refused { code: i64, description: String },
    /// The call did not get an answer (a connection, a timeout, an unreadable answer).
    Transport(String),
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiError::Refused { code, description } => write!(f, "Telegram refused ({code}): {description}"),
            ApiError::Transport(detail) => write!(f, "cannot reach Telegram: {detail}"),
        }
    }
}

impl std::error::Error for ApiError {}

/// A Bot API client for one bot.
#[derive(Clone)]
pub struct Api {
    http: Client<hyper_rustls::HttpsConnector<Egress>, Full<Bytes>>,
    base: String,
    token: String,
}

impl Api {
    /// A client of `api_url` (https, or plain http for a local test server) reached through
    /// `egress`, for the bot whose token is `token`.
    pub fn new(api_url: &str, token: &str, egress: Egress) -> Result<Api, String> {
        let parsed: http::Uri = api_url.parse().map_err(|error| format!("--api-url {api_url}: {error}"))?;
        if parsed.host().is_none() {
            return Err(format!("--api-url {api_url}: give the Bot API's address, e.g. https://api.telegram.org"));
        }
        let https = baaaht_gateway_kit::egress::https(egress)?;
        let http = Client::builder(TokioExecutor::new()).build(https);
        Ok(Api { http, base: api_url.trim_end_matches('/').to_string(), token: token.to_string() })
    }

    /// Calls `method` with `params`; its `result`. `wait` is how long the call itself waits at
    /// Telegram (a long poll), added to the timeout.
    pub async fn call_waiting(&self, method: &str, params: &Value, wait: Duration) -> Result<Value, ApiError> {
        self.retried(method, &Body::Json(params), wait).await
    }

    /// Calls `method` with `body`, waiting out a 429 (up to 5 times).
    async fn retried(&self, method: &str, body: &Body<'_>, wait: Duration) -> Result<Value, ApiError> {
        let mut attempt = 0;
        loop {
            match self.once(method, body, wait).await {
                Err(ApiError::Refused { code: 429, description }) if attempt < 5 => {
                    attempt += 1;
                    let retry = retry_after(&description).unwrap_or(1).min(60);
                    tracing::info!(method, wait_s = retry, "Telegram asks to wait");
                    tokio::time::sleep(Duration::from_secs(retry)).await;
                }
                other => return other,
            }
        }
    }

    pub async fn call(&self, method: &str, params: &Value) -> Result<Value, ApiError> {
        self.call_waiting(method, params, Duration::ZERO).await
    }

    async fn once(&self, method: &str, body: &Body<'_>, wait: Duration) -> Result<Value, ApiError> {
        let (content_type, body) = body.encoded();
        let request = http::Request::post(format!("{}/bot{}/{method}", self.base, self.token))
            .header(http::header::CONTENT_TYPE, content_type)
            .body(Full::new(body))
            .map_err(|error| ApiError::Transport(error.to_string()))?;
        let answer = tokio::time::timeout(CALL_TIMEOUT + wait, self.http.request(request))
            .await
            .map_err(|_elapsed| {
                ApiError::Transport(format!("{method} got no answer within {:?}", CALL_TIMEOUT + wait))
            })?
            // The error names the address only: the token is in the path, never in a message.
            .map_err(|error| {
                ApiError::Transport(format!("{method}: {}", error_without_token(&error.to_string(), &self.token)))
            })?;
        let body = Limited::new(answer.into_body(), ANSWER_LIMIT)
            .collect()
            .await
            .map_err(|error| ApiError::Transport(format!("{method}: reading the answer: {error}")))?
            .to_bytes();
        let value: Value = serde_json::from_slice(&body)
            .map_err(|error| ApiError::Transport(format!("{method}: the answer is not JSON: {error}")))?;
        if value["ok"] == true {
            return Ok(value["result"].clone());
        }
        let code = value["error_code"].as_i64().unwrap_or(0);
        let mut description = value["description"].as_str().unwrap_or("no description").to_string();
        if let Some(seconds) = value["parameters"]["retry_after"].as_u64() {
            description = format!("{description} (retry_after {seconds})");
        }
        Err(ApiError::Refused { code, description })
    }

    /// Downloads the file at `path` (from getFile), at most `max` bytes.
    pub async fn download(&self, path: &str, max: u64) -> Result<Vec<u8>, String> {
        let request = http::Request::get(format!("{}/file/bot{}/{path}", self.base, self.token))
            .body(Full::new(Bytes::new()))
            .map_err(|error| error.to_string())?;
        let answer = tokio::time::timeout(CALL_TIMEOUT * 4, self.http.request(request))
            .await
            .map_err(|_elapsed| "Telegram did not send the file in time; try again.".to_string())?
            .map_err(|error| {
                format!("cannot fetch the file from Telegram: {}", error_without_token(&error.to_string(), &self.token))
            })?;
        if !answer.status().is_success() {
            return Err(format!("Telegram did not give the file ({}); try again.", answer.status()));
        }
        let limit = usize::try_from(max).unwrap_or(usize::MAX);
        let bytes = Limited::new(answer.into_body(), limit)
            .collect()
            .await
            .map_err(|error| {
                if error.to_string().contains("length limit") {
                    format!("The file is larger than the {} this gateway takes.", baaaht_proto::human_size(max))
                } else {
                    format!("Reading the file from Telegram failed ({error}); try again.")
                }
            })?
            .to_bytes();
        Ok(bytes.to_vec())
    }

    /// A message in `chat`: plain text (no markup to break), as a reply to `reply_to` when set,
    /// with `keyboard` (inline buttons) when set; its message id.
    pub async fn send(
        &self,
        chat: i64,
        text: &str,
        reply_to: Option<i64>,
        keyboard: Option<Value>,
    ) -> Result<i64, ApiError> {
        let mut params = json!({"chat_id": chat, "text": text, "link_preview_options": {"is_disabled": true}});
        if let Some(message) = reply_to {
            params["reply_parameters"] = json!({"message_id": message, "allow_sending_without_reply": true});
        }
        if let Some(keyboard) = keyboard {
            params["reply_markup"] = keyboard;
        }
        let sent = self.call("sendMessage", &params).await?;
        sent["message_id"].as_i64().ok_or_else(|| ApiError::Transport("sendMessage answered no message_id".into()))
    }

    /// Sends `file` to `chat`: a picture Telegram shows (JPEG, PNG, WebP) as a photo, a spoken
    /// answer as a voice note, anything else as a document; its message id.
    pub async fn send_file(&self, chat: i64, file: &File) -> Result<i64, ApiError> {
        let photo = matches!(file.mime_type.as_str(), "image/jpeg" | "image/png" | "image/webp");
        let voice = file.voice && matches!(file.mime_type.as_str(), "audio/ogg" | "audio/opus");
        // Telegram plays a voice note sent as OGG (with Opus inside).
        let as_ogg;
        let file = if voice {
            as_ogg = File { mime_type: "audio/ogg".into(), ..file.clone() };
            &as_ogg
        } else {
            file
        };
        let (method, field) = if voice {
            ("sendVoice", "voice")
        } else if photo {
            ("sendPhoto", "photo")
        } else {
            ("sendDocument", "document")
        };
        let fields = json!({"chat_id": chat});
        let sent = self.retried(method, &Body::Form { fields: &fields, field, file }, Duration::ZERO).await?;
        sent["message_id"].as_i64().ok_or_else(|| ApiError::Transport(format!("{method} answered no message_id")))
    }

    /// Replaces the text of message `message` in `chat` (and its buttons: none unless given).
    pub async fn edit(&self, chat: i64, message: i64, text: &str, keyboard: Option<Value>) -> Result<(), ApiError> {
        let mut params = json!({"chat_id": chat, "message_id": message, "text": text,
            "link_preview_options": {"is_disabled": true}});
        if let Some(keyboard) = keyboard {
            params["reply_markup"] = keyboard;
        }
        match self.call("editMessageText", &params).await {
            // An edit to the same text is refused as such: nothing was lost.
            Err(ApiError::Refused { code: 400, description }) if description.contains("message is not modified") => {
                Ok(())
            }
            other => other.map(drop),
        }
    }
}

/// A call's parameters: JSON, or a form with one file (multipart/form-data).
enum Body<'a> {
    Json(&'a Value),
    Form { fields: &'a Value, field: &'a str, file: &'a File },
}

impl Body<'_> {
    /// Its content type and bytes.
    fn encoded(&self) -> (String, Bytes) {
        match self {
            Body::Json(params) => ("application/json".into(), Bytes::from(params.to_string())),
            Body::Form { fields, field, file } => {
                // A boundary the file's bytes do not hold.
                let mut boundary = format!("baaaht-{:x}", std::process::id());
                while file.bytes.windows(boundary.len()).any(|window| window == boundary.as_bytes()) {
                    boundary.push('x');
                }
                let mut body = vec![];
                for (name, value) in fields.as_object().into_iter().flatten() {
                    let value = value.as_str().map_or_else(|| value.to_string(), str::to_string);
                    body.extend_from_slice(
                        format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n")
                            .as_bytes(),
                    );
                }
                // The name is a safe one (letters, digits, `.`, `-`, `_`): nothing to quote.
                let name = baaaht_proto::files::safe_name(&file.name);
                body.extend_from_slice(
                    format!(
                        "--{boundary}\r\nContent-Disposition: form-data; name=\"{field}\"; filename=\"{name}\"\r\nContent-Type: {}\r\n\r\n",
                        file.mime_type
                    )
                    .as_bytes(),
                );
                body.extend_from_slice(&file.bytes);
                body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
                (format!("multipart/form-data; boundary={boundary}"), Bytes::from(body))
            }
        }
    }
}

/// The seconds in a refusal's `(retry_after N)`.
fn retry_after(description: &str) -> Option<u64> {
    description.rsplit_once("(retry_after ")?.1.trim_end_matches(')').parse().ok()
}

/// `text` without `token` in it.
fn error_without_token(text: &str, token: &str) -> String {
    if token.is_empty() {
        text.to_string()
    } else {
        text.replace(token, "<token>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_goes_as_a_form_whose_boundary_its_bytes_do_not_hold() {
        let boundary = format!("baaaht-{:x}", std::process::id());
        let file = File {
            name: "my chart.png".into(),
            mime_type: "image/png".into(),
            bytes: boundary.clone().into_bytes(),
            voice: false,
        };
        let fields = json!({"chat_id": 42});
        let (content_type, body) = Body::Form { fields: &fields, field: "photo", file: &file }.encoded();
        let chosen = content_type.strip_prefix("multipart/form-data; boundary=").expect("a form");
        assert_eq!(chosen, format!("{boundary}x"));
        let body = String::from_utf8(body.to_vec()).expect("text");
        assert!(body.contains("name=\"chat_id\"\r\n\r\n42\r\n"), "{body}");
        assert!(body.contains("name=\"photo\"; filename=\"my_chart.png\"\r\nContent-Type: image/png"), "{body}");
        assert!(body.ends_with(&format!("\r\n--{chosen}--\r\n")), "{body}");
    }

    #[test]
    fn a_refusal_says_how_long_to_wait_and_no_error_names_the_token() {
        assert_eq!(retry_after("Too Many Requests: retry after 3 (retry_after 3)"), Some(3));
        assert_eq!(retry_after("Bad Request: chat not found"), None);
        assert_eq!(
            error_without_token("error sending request for /bot123:ABC/getMe", "123:ABC"),
            "error sending request for /bot<token>/getMe"
        );
    }
}
