//! What one request to a provider is, before it is sent: its URL (the provider's address for
//! the model), its headers (the key, a token, or a SigV4 signature), its body in the provider's
//! format, and the decoder its answer is read with.

use std::time::SystemTime;

use super::{Endpoint, Failure, Signer, Wire};
use crate::model::{Event, Request, StreamError};
use crate::sse::SseDecoder;
use crate::{anthropic, bedrock, gemini, openai};

/// A request ready to send.
pub(crate) struct Prepared {
    pub(crate) url: String,
    /// Besides `Host` and `Content-Type`.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
    pub(crate) decoder: Decoder,
}

/// The headers that carry what signs a request in.
const SIGNING_HEADERS: &[&str] = &["x-api-key", "authorization", "api-key", "x-goog-api-key", "x-amz-security-token"];

impl Prepared {
    /// What signs the request in (keys, tokens, signatures, and each part of an authorization
    /// header), to be kept out of any failure's words.
    pub(crate) fn secrets(&self) -> Vec<String> {
        let mut secrets = vec![];
        for (name, value) in &self.headers {
            if SIGNING_HEADERS.contains(&name.as_str()) {
                secrets.push(value.clone());
                // A bearer credential whatever its length; a signature's long parts.
                if let Some((scheme, credential)) = value.split_once(' ') {
                    if scheme.eq_ignore_ascii_case("bearer") {
                        secrets.push(credential.trim().to_string());
                    }
                }
                secrets.extend(value.split([' ', ',', '=']).filter(|part| part.len() >= 16).map(str::to_string));
            }
        }
        secrets
    }
}

/// Reads an answer's bytes in its format.
pub(crate) enum Decoder {
    Anthropic(SseDecoder, anthropic::StreamDecoder),
    OpenAi(SseDecoder, openai::StreamDecoder),
    Gemini(SseDecoder, gemini::StreamDecoder),
    Converse(bedrock::StreamDecoder),
}

impl Decoder {
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Result<Vec<Event>, StreamError> {
        let mut events = vec![];
        match self {
            Decoder::Anthropic(sse, decoder) => {
                for event in sse.push(bytes) {
                    events.extend(decoder.decode(&event)?);
                }
            }
            Decoder::OpenAi(sse, decoder) => {
                for event in sse.push(bytes) {
                    events.extend(decoder.decode(&event)?);
                }
            }
            Decoder::Gemini(sse, decoder) => {
                for event in sse.push(bytes) {
                    events.extend(decoder.decode(&event)?);
                }
            }
            Decoder::Converse(decoder) => events = decoder.push(bytes)?,
        }
        Ok(events)
    }
}

/// The Generative Language API's address.
pub const GEMINI_BASE: &str = "https://generativelanguage.googleapis.com";
/// The API version of Azure OpenAI's deployment URLs, unless configured (the latest GA).
pub const AZURE_API_VERSION: &str = "2024-10-21";
/// Anthropic's version on Vertex AI, sent in the body.
const VERTEX_ANTHROPIC_VERSION: &str = "vertex-2023-10-16";

/// Vertex AI's address in `region` (`global` has no region in its host).
pub fn vertex_base(region: &str) -> String {
    if region == "global" {
        "https://aiplatform.googleapis.com".into()
    } else {
        format!("https://{region}-aiplatform.googleapis.com")
    }
}

/// Whether `model` on Vertex AI is one of Anthropic's (served by its `rawPredict`).
pub fn vertex_anthropic(model: &str) -> bool {
    model.starts_with("claude")
}

/// `base` without a trailing `/`, or `default` when it is empty.
fn base_or(base: &str, default: impl FnOnce() -> String) -> String {
    let base = base.trim_end_matches('/');
    if base.is_empty() {
        default()
    } else {
        base.to_string()
    }
}

/// A model name as one path segment.
fn segment(model: &str) -> String {
    percent_encoding::utf8_percent_encode(model, percent_encoding::NON_ALPHANUMERIC)
        .to_string()
        .replace("%2D", "-")
        .replace("%2E", ".")
        .replace("%5F", "_")
        .replace("%40", "@")
}

fn json_bytes(value: &serde_json::Value) -> Vec<u8> {
    value.to_string().into_bytes()
}

/// The request `request` is for `endpoint`.
pub(crate) async fn prepare(endpoint: &Endpoint, request: &Request) -> Result<Prepared, Failure> {
    let unusable = |reason: String| Failure::Unusable { provider: endpoint.name.clone(), reason };
    let model = request.model.as_str();
    // The model is a segment of the address for most clouds: a dot segment would climb out of it.
    if matches!(model.trim(), "" | "." | "..") {
        return Err(unusable(format!("`{model}` is not a model's name: name one of the provider's models")));
    }
    let sse = |accept: bool| {
        if accept {
            vec![("accept".to_string(), "text/event-stream".to_string())]
        } else {
            vec![]
        }
    };
    let mut prepared = match endpoint.wire {
        Wire::Anthropic => {
            let capped;
            let request = match (endpoint.max_output, request.max_tokens) {
                (Some(cap), Some(asked)) if asked > cap => {
                    capped = Request { max_tokens: Some(cap), ..request.clone() };
                    &capped
                }
                _ => request,
            };
            let mut headers = sse(true);
            headers.push(("anthropic-version".into(), "2023-06-01".into()));
            if let Some(key) = &endpoint.api_key {
                headers.push(("x-api-key".into(), key.clone()));
            }
            Prepared {
                url: format!("{}/v1/messages", endpoint.api_base.trim_end_matches('/')),
                headers,
                body: json_bytes(&anthropic::request_body(request)),
                decoder: Decoder::Anthropic(SseDecoder::new(), anthropic::StreamDecoder::new()),
            }
        }
        Wire::OpenAi => {
            let mut headers = sse(true);
            if let Some(key) = &endpoint.api_key {
                headers.push(("authorization".into(), format!("Bearer {key}")));
            }
            Prepared {
                url: format!("{}/chat/completions", endpoint.api_base.trim_end_matches('/')),
                headers,
                body: json_bytes(&openai::request_body(request, endpoint.max_output)),
                decoder: Decoder::OpenAi(SseDecoder::new(), openai::StreamDecoder::new()),
            }
        }
        Wire::Gemini => {
            let base = base_or(&endpoint.api_base, || GEMINI_BASE.into());
            // A base written without its version takes the one whose features we use.
            let versioned =
                if base.ends_with("/v1beta") || base.ends_with("/v1") { base } else { format!("{base}/v1beta") };
            let mut headers = sse(true);
            if let Some(key) = &endpoint.api_key {
                headers.push(("x-goog-api-key".into(), key.clone()));
            }
            Prepared {
                url: format!("{versioned}/models/{}:streamGenerateContent?alt=sse", segment(model)),
                headers,
                body: json_bytes(&gemini::request_body(request, endpoint.max_output)),
                decoder: Decoder::Gemini(SseDecoder::new(), gemini::StreamDecoder::new()),
            }
        }
        Wire::Azure => {
            let base = endpoint.api_base.trim_end_matches('/');
            let version =
                if endpoint.cloud.api_version.is_empty() { AZURE_API_VERSION } else { &endpoint.cloud.api_version };
            // The v1 API names the deployment in the body; dated versions in the path.
            let url = if version == "v1" {
                format!("{base}/openai/v1/chat/completions")
            } else {
                format!("{base}/openai/deployments/{}/chat/completions?api-version={version}", segment(model))
            };
            let mut headers = sse(true);
            if let Some(key) = &endpoint.api_key {
                headers.push(("api-key".into(), key.clone()));
            }
            Prepared {
                url,
                headers,
                body: json_bytes(&openai::request_body(request, endpoint.max_output)),
                decoder: Decoder::OpenAi(SseDecoder::new(), openai::StreamDecoder::new()),
            }
        }
        Wire::Bedrock => {
            let region = &endpoint.cloud.region;
            let base = base_or(&endpoint.api_base, || bedrock::default_base(region));
            Prepared {
                url: format!("{base}{}", bedrock::path(model)),
                headers: vec![("accept".into(), "application/vnd.amazon.eventstream".into())],
                body: json_bytes(&bedrock::request_body(request, endpoint.max_output)),
                decoder: Decoder::Converse(bedrock::StreamDecoder::new(model)),
            }
        }
        Wire::Vertex => {
            let cloud = &endpoint.cloud;
            let base = base_or(&endpoint.api_base, || vertex_base(&cloud.region));
            let publisher = format!("{base}/v1/projects/{}/locations/{}/publishers", cloud.project, cloud.region);
            if vertex_anthropic(model) {
                let mut body = anthropic::request_body(request);
                if let Some(fields) = body.as_object_mut() {
                    fields.remove("model");
                    fields.insert("anthropic_version".into(), VERTEX_ANTHROPIC_VERSION.into());
                }
                Prepared {
                    url: format!("{publisher}/anthropic/models/{}:streamRawPredict", segment(model)),
                    headers: sse(true),
                    body: json_bytes(&body),
                    decoder: Decoder::Anthropic(SseDecoder::new(), anthropic::StreamDecoder::new()),
                }
            } else {
                Prepared {
                    url: format!("{publisher}/google/models/{}:streamGenerateContent?alt=sse", segment(model)),
                    headers: sse(true),
                    body: json_bytes(&gemini::request_body(request, endpoint.max_output)),
                    decoder: Decoder::Gemini(SseDecoder::new(), gemini::StreamDecoder::new()),
                }
            }
        }
    };
    match &endpoint.signer {
        None => {}
        Some(Signer::Tokens(source)) => {
            let token = source.token(&endpoint.name, endpoint.timeout).await.map_err(|failure| Failure::Provider {
                provider: endpoint.name.clone(),
                kind: "authentication",
                message: format!("no access token from {}: {failure}", source.token_url()),
            })?;
            prepared.headers.push(("authorization".into(), format!("Bearer {}", token.as_str())));
        }
        Some(Signer::Aws(keys)) => {
            let target = super::target::Target::parse(&endpoint.name, &prepared.url)?;
            let host = target.host_header();
            let mut signed: Vec<(&str, &str)> = vec![("host", &host), ("content-type", "application/json")];
            signed.extend(prepared.headers.iter().map(|(name, value)| (name.as_str(), value.as_str())));
            let added =
                bedrock::sign(keys, &endpoint.cloud.region, &prepared.url, &signed, &prepared.body, SystemTime::now())
                    .map_err(|error| unusable(error.to_string()))?;
            prepared.headers.extend(added);
        }
    }
    Ok(prepared)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{Cloud, Route};

    fn endpoint(wire: Wire, api_base: &str, cloud: Cloud) -> Endpoint {
        Endpoint {
            name: "p".into(),
            wire,
            api_base: api_base.into(),
            api_key: Some("k".into()),
            cloud,
            signer: None,
            timeout: std::time::Duration::from_secs(1),
            max_output: None,
            route: Route::Direct,
        }
    }

    fn url_of(endpoint: &Endpoint, model: &str) -> (String, Vec<(String, String)>, serde_json::Value) {
        let request = Request { model: model.into(), ..Request::default() };
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
        let prepared = runtime.block_on(prepare(endpoint, &request)).expect("prepares");
        (prepared.url, prepared.headers, serde_json::from_slice(&prepared.body).expect("json"))
    }

    #[test]
    fn what_signed_a_request_never_reaches_a_failures_words() {
        let mut azure = endpoint(Wire::Azure, "https://res.openai.azure.com", Cloud::default());
        azure.api_key = Some("azure-key-0123456789".into());
        let request = Request { model: "d".into(), ..Request::default() };
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
        let prepared = runtime.block_on(prepare(&azure, &request)).expect("prepares");
        let echoed = Failure::Status {
            provider: "azure".into(),
            status: 400,
            retry_after: None,
            message: "bad request: api-key: azure-key-0123456789 (azure%2Dkey%2D0123456789)".into(),
        };
        let scrubbed = echoed.scrubbed(&prepared.secrets()).to_string();
        assert_eq!(scrubbed, "azure answered 400: bad request: api-key: [redacted] ([redacted])");
    }

    #[test]
    fn each_provider_is_addressed_as_it_documents() {
        let gemini = endpoint(Wire::Gemini, "", Cloud::default());
        let (url, headers, _) = url_of(&gemini, "gemini-2.5-flash");
        assert_eq!(
            url,
            "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        );
        assert!(headers.contains(&("x-goog-api-key".into(), "k".into())));

        let azure = endpoint(Wire::Azure, "https://res.openai.azure.com/", Cloud::default());
        let (url, headers, _) = url_of(&azure, "my-gpt4o");
        assert_eq!(
            url,
            "https://res.openai.azure.com/openai/deployments/my-gpt4o/chat/completions?api-version=2024-10-21"
        );
        assert!(headers.contains(&("api-key".into(), "k".into())));
        let v1 = endpoint(
            Wire::Azure,
            "https://res.openai.azure.com",
            Cloud { api_version: "v1".into(), ..Cloud::default() },
        );
        let (url, _, body) = url_of(&v1, "my-gpt4o");
        assert_eq!(
            (url.as_str(), body["model"].as_str()),
            ("https://res.openai.azure.com/openai/v1/chat/completions", Some("my-gpt4o"))
        );

        let bedrock = endpoint(Wire::Bedrock, "", Cloud { region: "eu-west-1".into(), ..Cloud::default() });
        let (url, _, _) = url_of(&bedrock, "anthropic.claude-3-5-sonnet-20240620-v1:0");
        assert_eq!(url, "https://bedrock-runtime.eu-west-1.amazonaws.com/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse-stream");

        let cloud = Cloud { region: "us-east5".into(), project: "proj".into(), ..Cloud::default() };
        let vertex = endpoint(Wire::Vertex, "", cloud);
        let (url, _, body) = url_of(&vertex, "claude-sonnet-4@20250514");
        assert_eq!(url, "https://us-east5-aiplatform.googleapis.com/v1/projects/proj/locations/us-east5/publishers/anthropic/models/claude-sonnet-4@20250514:streamRawPredict");
        assert_eq!((body.get("model"), body["anthropic_version"].as_str()), (None, Some("vertex-2023-10-16")));
        let (url, _, body) = url_of(&vertex, "gemini-2.5-pro");
        assert_eq!(url, "https://us-east5-aiplatform.googleapis.com/v1/projects/proj/locations/us-east5/publishers/google/models/gemini-2.5-pro:streamGenerateContent?alt=sse");
        assert!(body.get("contents").is_some());
        assert_eq!(vertex_base("global"), "https://aiplatform.googleapis.com");
    }
}
