#!/usr/bin/env python3
"""fake_cloud.py: one fake server that speaks four cloud LLM providers' wire formats.

Each provider request is *translated* into an Anthropic Messages API request (always
`"stream": true`), sent to an "upstream" Anthropic-wire fake (`--upstream URL`, which serves
`POST /v1/messages`), and the upstream's answer (its SSE stream, a plain JSON message, or an
HTTP error with `{"type":"error","error":{...}}` and maybe `retry-after`) is translated back
into the provider's own wire format, event by event, flushed as it arrives.

Providers (one port, told apart by path):
  Gemini API    POST /{v1,v1beta,v1alpha}/models/{model}:generateContent
                POST /{v1,v1beta,v1alpha}/models/{model}:streamGenerateContent[?alt=sse]
  Vertex AI     POST /{v1,v1beta1}/projects/{p}/locations/{r}/publishers/google/models/{m}:{generateContent,streamGenerateContent}
                POST /{v1,v1beta1}/projects/{p}/locations/{r}/publishers/anthropic/models/{m}:{rawPredict,streamRawPredict}
                POST /token   (Google OAuth2 JWT-bearer grant, the key file's token_uri)
  Bedrock       POST /model/{modelId}/converse, POST /model/{modelId}/converse-stream  (SigV4)
  Azure OpenAI  POST /openai/deployments/{deployment}/chat/completions?api-version=...
                POST /openai/v1/chat/completions
                POST /{tenant}/oauth2/v2.0/token  (Entra ID client-credentials grant)
Inspection:     GET /_fake/requests, GET /_fake/stats, POST /_fake/reset

Prints exactly one line, `listening 127.0.0.1:PORT`, to stdout once it accepts connections.
Only loopback addresses are accepted for --host and --upstream.

Dependencies: Python 3.11 stdlib, botocore (SigV4 verification with botocore's own signer)
and cryptography (RS256 verification of the service-account JWT). Versions tested with are
pinned in tests/providers/README.md:
  botocore==1.44.8 cryptography==50.0.2
"""

import argparse
import base64
import datetime
import hmac
import http.client
import http.server
import ipaddress
import json
import math
import re
import secrets
import socket
import struct
import sys
import threading
import time
import uuid
import zlib
from urllib.parse import parse_qs, unquote, urlsplit

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding

GOOGLE_TOKEN_AUDIENCE = "https://oauth2.googleapis.com/token"  # what google-auth puts in `aud`
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
# anthropic_version values Vertex takes in a rawPredict body: the long-standing Vertex one, and
# the dated API version that anthropic-sdk-python 2.x sends (its ANTHROPIC_API_VERSION).
VERTEX_ANTHROPIC_VERSIONS = ("vertex-2023-10-16", "2026-10-21")
AZURE_SCOPES = ("https://cognitiveservices.azure.com/.default", "https://ai.azure.com/.default")
# Azure OpenAI data-plane api-versions (learn.microsoft.com "API version lifecycle"); more
# with --azure-api-versions. Anything else is refused as Azure does.
AZURE_API_VERSIONS = [
    "2022-12-01", "2023-05-15", "2023-06-01-preview", "2023-07-01-preview",
    "2023-08-01-preview", "2023-09-01-preview", "2023-10-01-preview", "2023-12-01-preview",
    "2024-02-01", "2024-02-15-preview", "2024-03-01-preview", "2024-04-01-preview",
    "2024-05-01-preview", "2024-06-01", "2024-07-01-preview", "2024-08-01-preview",
    "2024-09-01-preview", "2024-10-01-preview", "2024-10-21", "2024-12-01-preview",
    "2025-01-01-preview", "2025-02-01-preview", "2025-03-01-preview", "2025-04-01-preview",
]
DYNAMIC_THINKING_BUDGET = 1024  # Gemini thinkingBudget -1 ("dynamic") becomes this many tokens
THINKING_LEVELS = {"minimal": 512, "low": 1024, "medium": 4096, "high": 16384}
# Status an Anthropic error type stands for (docs.anthropic.com/en/api/errors).
ANTHROPIC_ERROR_STATUS = {
    "invalid_request_error": 400, "authentication_error": 401, "permission_error": 403,
    "not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429,
    "api_error": 500, "timeout_error": 504, "overloaded_error": 529,
}


def log(*args):
    print("fake_cloud:", *args, file=sys.stderr, flush=True)


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def b64url_decode(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def is_loopback_host(host):
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def encode_signature(sig):
    """Anthropic's thinking signature (a string) as Gemini's thoughtSignature (bytes, base64 in JSON)."""
    return base64.b64encode(sig.encode("utf-8")).decode("ascii")


def google_bytes(b64):
    """Bytes from a Google JSON `bytes` field: proto3 JSON takes standard or URL-safe base64,
    padded or not, and google-genai sends URL-safe (inlineData.data, thoughtSignature)."""
    s = b64.strip().replace("+", "-").replace("/", "_")
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def decode_signature(b64):
    try:
        return google_bytes(b64).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return b64


def standard_b64(google_b64):
    """Anthropic wants standard, padded base64."""
    try:
        return base64.b64encode(google_bytes(google_b64)).decode("ascii")
    except ValueError:
        raise BadRequest("Invalid value at 'contents[].parts[].inline_data.data' (TYPE_BYTES), Base64 decoding failed")


class BadRequest(Exception):
    """The client's request cannot be translated; each provider words it in its own shape."""


class UpstreamCut(Exception):
    """The upstream closed the connection before the answer's end."""


class ClientGone(Exception):
    """The client closed its connection while we were writing to it."""


class UpstreamError(Exception):
    def __init__(self, status, error_type, message, retry_after=None, body=None):
        super().__init__(f"{status} {error_type}: {message}")
        self.status = status
        self.error_type = error_type
        self.message = message
        self.retry_after = retry_after
        self.body = body  # the upstream's JSON body, as received, when there was one

    @staticmethod
    def from_event(data):
        """An `event: error` in the middle of the upstream stream."""
        err = (data or {}).get("error") or {}
        etype = err.get("type", "api_error")
        return UpstreamError(ANTHROPIC_ERROR_STATUS.get(etype, 500), etype, err.get("message", ""), None, data)


# ---------------------------------------------------------------------------------------------
# Upstream: the Anthropic-wire fake
# ---------------------------------------------------------------------------------------------

class Upstream:
    def __init__(self, url, api_key, timeout):
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or not is_loopback_host(parts.hostname):
            raise SystemExit(f"--upstream must be http:// on a loopback address, not {url!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    def open(self, body, extra_headers=None):
        """Sends `body` (forced to stream) and returns an iterator source of Anthropic events,
        or raises UpstreamError for an HTTP error status."""
        body = dict(body)
        body["stream"] = True
        data = json.dumps(body).encode("utf-8")
        headers = {
            "content-type": "application/json",
            "accept": "text/event-stream",
            "anthropic-version": "2023-06-01",
            "x-api-key": self.api_key,
        }
        headers.update(extra_headers or {})
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.connect()
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.request("POST", self.prefix + "/v1/messages", body=data, headers=headers)
            resp = conn.getresponse()
        except OSError as e:
            conn.close()
            raise UpstreamError(502, "api_error", f"fake_cloud: upstream unreachable: {e}")
        except http.client.HTTPException as e:
            conn.close()
            raise UpstreamCut() from e
        if resp.status != 200:
            try:
                raw = resp.read()
            except (OSError, http.client.HTTPException):
                raw = b""
            retry_after = resp.getheader("retry-after")
            conn.close()
            try:
                parsed = json.loads(raw)
                err = parsed.get("error") or {}
                etype, message = err.get("type", "api_error"), err.get("message", "")
            except (ValueError, AttributeError):
                parsed, etype, message = None, "api_error", raw.decode("utf-8", "replace")
            raise UpstreamError(resp.status, etype, message, retry_after, parsed)
        if "text/event-stream" in (resp.getheader("content-type") or ""):
            return SseSource(conn, resp)
        try:
            message = json.loads(resp.read())
        except (ValueError, OSError, http.client.HTTPException) as e:
            conn.close()
            raise UpstreamCut() from e
        conn.close()
        return MessageSource(message)


class SseSource:
    """Anthropic SSE events read from the upstream as they arrive: (name, data dict, raw data)."""

    def __init__(self, conn, resp):
        self.conn = conn
        self.resp = resp

    def close(self):
        try:
            self.conn.close()
        except OSError:
            pass

    def events(self):
        name, data_lines = None, []
        while True:
            try:
                line = self.resp.readline()
            except (OSError, ValueError, http.client.HTTPException) as e:
                self.close()
                raise UpstreamCut() from e
            if not line:  # EOF: an answer ends with message_stop (or error), never with EOF
                self.close()
                raise UpstreamCut()
            line = line.decode("utf-8").rstrip("\r\n")
            if line.startswith(":"):
                continue
            if line:
                field, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if field == "event":
                    name = value
                elif field == "data":
                    data_lines.append(value)
                continue
            if not data_lines:
                name = None
                continue
            raw = "\n".join(data_lines)
            data = json.loads(raw)
            event = name or data.get("type")
            name, data_lines = None, []
            yield event, data, raw
            if event in ("message_stop", "error"):
                self.close()
                return


class MessageSource:
    """A non-streamed upstream answer (a whole Message) replayed as the events it stands for."""

    def __init__(self, message):
        self.message = message

    def close(self):
        pass

    def events(self):
        m = self.message
        if m.get("type") == "error":
            yield "error", m, json.dumps(m)
            return
        start = {k: v for k, v in m.items() if k not in ("content", "stop_reason", "stop_sequence")}
        start.update(content=[], stop_reason=None, stop_sequence=None)
        for ev in [("message_start", {"type": "message_start", "message": start})] + list(self._blocks(m)) + [
            ("message_delta", {"type": "message_delta",
                               "delta": {"stop_reason": m.get("stop_reason"), "stop_sequence": m.get("stop_sequence")},
                               "usage": {"output_tokens": (m.get("usage") or {}).get("output_tokens", 0)}}),
            ("message_stop", {"type": "message_stop"}),
        ]:
            yield ev[0], ev[1], json.dumps(ev[1])

    @staticmethod
    def _blocks(m):
        for i, b in enumerate(m.get("content") or []):
            t = b.get("type")
            empty = {"text": {"type": "text", "text": ""}, "thinking": {"type": "thinking", "thinking": "", "signature": ""},
                     "tool_use": {**b, "input": {}}}.get(t, b)
            yield "content_block_start", {"type": "content_block_start", "index": i, "content_block": empty}
            deltas = []
            if t == "text":
                deltas = [{"type": "text_delta", "text": b.get("text", "")}]
            elif t == "thinking":
                deltas = [{"type": "thinking_delta", "thinking": b.get("thinking", "")},
                          {"type": "signature_delta", "signature": b.get("signature", "")}]
            elif t == "tool_use":
                deltas = [{"type": "input_json_delta", "partial_json": json.dumps(b.get("input") or {})}]
            for d in deltas:
                yield "content_block_delta", {"type": "content_block_delta", "index": i, "delta": d}
            yield "content_block_stop", {"type": "content_block_stop", "index": i}


def accumulate(events):
    """Builds the whole Anthropic Message from its events. Raises UpstreamError for an
    `event: error`, UpstreamCut when the stream was cut."""
    message, blocks = None, {}
    for name, data, _raw in events:
        if name == "message_start":
            message = dict(data.get("message") or {})
            message["usage"] = dict(message.get("usage") or {})
        elif name == "content_block_start":
            block = dict(data["content_block"])
            if block.get("type") == "tool_use":
                block["_json"] = []
            blocks[data["index"]] = block
        elif name == "content_block_delta":
            block, d = blocks[data["index"]], data["delta"]
            kind = d.get("type")
            if kind == "text_delta":
                block["text"] = block.get("text", "") + d["text"]
            elif kind == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + d["thinking"]
            elif kind == "signature_delta":
                block["signature"] = d["signature"]
            elif kind == "input_json_delta":
                block["_json"].append(d.get("partial_json", ""))
        elif name == "content_block_stop":
            block = blocks[data["index"]]
            if "_json" in block:
                text = "".join(block.pop("_json"))
                block["input"] = json.loads(text) if text.strip() else (block.get("input") or {})
        elif name == "message_delta":
            message = message or {}
            message.update({k: v for k, v in (data.get("delta") or {}).items()})
            message.setdefault("usage", {}).update(data.get("usage") or {})
        elif name == "error":
            raise UpstreamError.from_event(data)
    message = message or {"role": "assistant", "usage": {}}
    message["content"] = [blocks[i] for i in sorted(blocks)]
    return message


def thinking_chars(message):
    return sum(len(b.get("thinking", "")) for b in message.get("content", []) if b.get("type") == "thinking")


def estimate_thought_tokens(chars, output_tokens):
    """Anthropic counts thinking inside output_tokens and does not say how many; the providers
    that report them apart get this estimate (characters / 4, rounded up, at most output_tokens)."""
    return min(output_tokens, math.ceil(chars / 4)) if chars else 0


def parse_data_url(url):
    m = re.match(r"data:([^;,]+);base64,(.*)$", url, re.S)
    return (m.group(1), m.group(2)) if m else (None, None)


def media_block(mime, data=None, url=None):
    """An Anthropic image or document block for base64 `data` (or a URL) of type `mime`."""
    source = {"type": "base64", "media_type": mime, "data": data} if data is not None else {"type": "url", "url": url}
    if mime.startswith("image/"):
        return {"type": "image", "source": source}
    if mime == "application/pdf":
        return {"type": "document", "source": source}
    if mime.startswith("text/") and data is not None:
        return {"type": "document", "source": {"type": "text", "media_type": "text/plain",
                                               "data": base64.b64decode(data).decode("utf-8", "replace")}}
    raise BadRequest(f"Unsupported MIME type: {mime}")


def append_message(messages, role, blocks):
    """Appends blocks as a message, merged into the previous one when it has the same role
    (Anthropic wants the roles to alternate; the providers' formats do not)."""
    if not blocks:
        return
    if messages and messages[-1]["role"] == role:
        messages[-1]["content"].extend(blocks)
    else:
        messages.append({"role": role, "content": list(blocks)})


# ---------------------------------------------------------------------------------------------
# Gemini (Generative Language API and Vertex AI): request translation
# https://ai.google.dev/api/generate-content ; field names checked against google-genai's
# models.py converters (_Part_to_mldev, _FunctionCall_to_mldev, ...).
# ---------------------------------------------------------------------------------------------

# Google's JSON (proto3 JSON mapping) accepts each field under its lowerCamelCase name or its
# original snake_case proto name, and clients use both: google-genai 3.6.1 itself sends
# `generationConfig.thinkingConfig` as {"include_thoughts": ..., "thinking_budget": ...}. The
# request is read after turning every field name into lowerCamelCase, except inside values that
# are free-form JSON (Struct: function args and responses, JSON schemas, defaults, examples)
# and the keys of maps whose keys are user names (schema properties).
GOOGLE_OPAQUE_FIELDS = {"args", "response", "parametersJsonSchema", "responseJsonSchema", "default", "example", "labels"}
GOOGLE_NAME_MAPS = {"properties", "$defs", "defs"}


def google_camel_case(value):
    if isinstance(value, list):
        return [google_camel_case(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, v in value.items():
        if "_" in key and key[:1] not in ("$", "@"):
            head, *rest = key.split("_")
            key = head + "".join(w[:1].upper() + w[1:] for w in rest)
        if key in GOOGLE_OPAQUE_FIELDS:
            out[key] = v
        elif key in GOOGLE_NAME_MAPS and isinstance(v, dict):
            out[key] = {name: google_camel_case(schema) for name, schema in v.items()}
        else:
            out[key] = google_camel_case(v)
    return out


def openapi_to_json_schema(s):
    """Gemini's `parameters` (an OpenAPI 3.0 subset: upper-case types, `nullable`) as JSON Schema."""
    if isinstance(s, list):
        return [openapi_to_json_schema(x) for x in s]
    if not isinstance(s, dict):
        return s
    out = {}
    for k, v in s.items():
        if k == "type" and isinstance(v, str):
            out["type"] = v.lower()
        elif k in ("properties", "$defs", "definitions") and isinstance(v, dict):
            out[k] = {pk: openapi_to_json_schema(pv) for pk, pv in v.items()}
        elif k in ("items", "anyOf", "oneOf", "allOf", "additionalProperties"):
            out[k] = openapi_to_json_schema(v)
        elif k in ("nullable", "propertyOrdering"):
            continue
        else:
            out[k] = v
    if s.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


def gemini_tool_result_content(response):
    """functionResponse.response (a JSON object) as tool_result content: the string under its
    only key `output`/`result`/`content` (or `error`, which also sets is_error), else the JSON."""
    if isinstance(response, dict) and len(response) == 1:
        (key, value), = response.items()
        if isinstance(value, str) and key in ("output", "result", "content", "error"):
            return value, key == "error"
    return json.dumps(response), False


def gemini_to_anthropic(body, model):
    if not isinstance(body, dict):
        raise BadRequest("Invalid JSON payload received. Expected an object.")
    body = google_camel_case(body)
    contents = body.get("contents")
    if not contents:
        raise BadRequest("* GenerateContentRequest.contents: contents is not specified\n")
    out = {"model": model}
    system = body.get("systemInstruction")
    if system:
        texts = [p.get("text", "") for p in system.get("parts", []) if "text" in p]
        if texts:
            out["system"] = "\n".join(texts)

    messages, calls, synth = [], [], 0  # calls: [id, name, answered] in order, for id-less responses
    for content in contents:
        role = "assistant" if content.get("role") == "model" else "user"
        blocks, thought = [], None  # thought: text of thought parts still waiting for a signature

        def flush_thinking(signature):
            nonlocal thought
            if role == "assistant" and (thought is not None or signature):
                blocks.append({"type": "thinking", "thinking": thought or "", "signature": signature})
            thought = None

        for part in content.get("parts") or []:
            sig = part.get("thoughtSignature")
            if part.get("thought"):
                thought = (thought or "") + part.get("text", "")
                if sig:
                    flush_thinking(decode_signature(sig))
                continue
            # A signature on a non-thought part belongs to the thinking just before it (that is
            # where Gemini puts it: on the first functionCall part, or the part after the thoughts).
            if sig or thought is not None:
                flush_thinking(decode_signature(sig) if sig else "")
            if "text" in part:
                if part["text"]:
                    blocks.append({"type": "text", "text": part["text"]})
            elif "inlineData" in part:
                d = part["inlineData"]
                blocks.append(media_block(d.get("mimeType", ""), data=standard_b64(d.get("data", ""))))
            elif "fileData" in part:
                d = part["fileData"]
                blocks.append(media_block(d.get("mimeType", ""), url=d.get("fileUri")))
            elif "functionCall" in part:
                fc = part["functionCall"]
                call_id = fc.get("id")
                if not call_id:
                    synth += 1
                    call_id = f"toolu_gemini_{synth:04d}"
                calls.append([call_id, fc.get("name"), False])
                blocks.append({"type": "tool_use", "id": call_id, "name": fc.get("name"), "input": fc.get("args") or {}})
            elif "functionResponse" in part:
                fr = part["functionResponse"]
                call_id = fr.get("id")
                if not call_id:  # no id: the earliest unanswered call of that name
                    match = next((c for c in calls if not c[2] and c[1] == fr.get("name")), None)
                    call_id = match[0] if match else f"toolu_gemini_unmatched_{fr.get('name')}"
                for c in calls:
                    if c[0] == call_id:
                        c[2] = True
                text, is_error = gemini_tool_result_content(fr.get("response") or {})
                result = [{"type": "text", "text": text}]
                for p in fr.get("parts") or []:  # multimodal function responses
                    if "inlineData" in p:
                        result.append(media_block(p["inlineData"].get("mimeType", ""), data=standard_b64(p["inlineData"].get("data", ""))))
                block = {"type": "tool_result", "tool_use_id": call_id, "content": result}
                if is_error:
                    block["is_error"] = True
                blocks.append(block)
        if thought is not None:
            flush_thinking("")
        append_message(messages, role, blocks)
    out["messages"] = messages

    gc = body.get("generationConfig") or {}
    out["max_tokens"] = gc.get("maxOutputTokens") or 8192
    for src, dst in (("temperature", "temperature"), ("topP", "top_p"), ("topK", "top_k"), ("stopSequences", "stop_sequences")):
        if gc.get(src) is not None:
            out[dst] = gc[src]
    tc = gc.get("thinkingConfig") or {}
    budget = tc.get("thinkingBudget")
    if budget is None and tc.get("thinkingLevel"):
        budget = THINKING_LEVELS.get(str(tc["thinkingLevel"]).lower(), DYNAMIC_THINKING_BUDGET)
    if budget is None and tc.get("includeThoughts"):
        budget = -1
    if budget == -1:
        budget = DYNAMIC_THINKING_BUDGET
    if budget:
        out["thinking"] = {"type": "enabled", "budget_tokens": budget}

    tools = []
    for tool in body.get("tools") or []:
        for fd in tool.get("functionDeclarations") or []:
            if "parametersJsonSchema" in fd:
                schema = fd["parametersJsonSchema"]
            elif "parameters" in fd:
                schema = openapi_to_json_schema(fd["parameters"])
            else:
                schema = {"type": "object", "properties": {}}
            t = {"name": fd["name"], "input_schema": schema}
            if fd.get("description"):
                t["description"] = fd["description"]
            tools.append(t)
    if tools:
        out["tools"] = tools
        fcc = (body.get("toolConfig") or {}).get("functionCallingConfig") or {}
        mode = (fcc.get("mode") or "AUTO").upper()
        allowed = fcc.get("allowedFunctionNames") or []
        if mode == "ANY":
            out["tool_choice"] = {"type": "tool", "name": allowed[0]} if len(allowed) == 1 else {"type": "any"}
        elif mode == "NONE":
            out["tool_choice"] = {"type": "none"}
    return out


GEMINI_FINISH = {"end_turn": "STOP", "stop_sequence": "STOP", "tool_use": "STOP", "pause_turn": "STOP",
                 "max_tokens": "MAX_TOKENS", "model_context_window_exceeded": "MAX_TOKENS", "refusal": "SAFETY"}


def gemini_usage(usage, thought_chars, vertex):
    """usageMetadata; zero counts are left out, as proto3 JSON does."""
    cache_read = usage.get("cache_read_input_tokens") or 0
    prompt = (usage.get("input_tokens") or 0) + cache_read + (usage.get("cache_creation_input_tokens") or 0)
    output = usage.get("output_tokens") or 0
    thoughts = estimate_thought_tokens(thought_chars, output)
    um = {"promptTokenCount": prompt, "candidatesTokenCount": output - thoughts, "totalTokenCount": prompt + output,
          "cachedContentTokenCount": cache_read, "thoughtsTokenCount": thoughts}
    um = {k: v for k, v in um.items() if v}
    if prompt:
        um["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": prompt}]
    if vertex:
        um["trafficType"] = "ON_DEMAND"
    return um


class GeminiAnswer:
    """Anthropic events -> GenerateContentResponse chunks. Thinking text becomes parts with
    `thought: true` (only when thinkingConfig.includeThoughts); the thinking block's signature
    becomes the `thoughtSignature` (base64 of the signature's UTF-8) of the next part sent after
    it (functionCall or text), or of an empty text part at the end; tool_use becomes one
    functionCall part (with Anthropic's tool_use id as its `id`) once its arguments are complete."""

    def __init__(self, model, include_thoughts, vertex):
        self.model, self.include_thoughts, self.vertex = model, include_thoughts, vertex
        self.response_id = secrets.token_urlsafe(16)[:22]
        self.create_time = now_rfc3339()
        self.pending_signature = None
        self.blocks = {}
        self.usage = {}
        self.stop_reason = None
        self.thought_chars = 0

    def _with_signature(self, part):
        if self.pending_signature:
            part["thoughtSignature"] = encode_signature(self.pending_signature)
            self.pending_signature = None
        return part

    def _response(self, parts, finish=None, usage=False):
        cand = {"content": {"parts": parts, "role": "model"}}
        if finish:
            cand["finishReason"] = finish
        cand["index"] = 0
        r = {"candidates": [cand]}
        if usage:
            r["usageMetadata"] = gemini_usage(self.usage, self.thought_chars, self.vertex)
        r["modelVersion"] = self.model
        if self.vertex:
            r["createTime"] = self.create_time
        r["responseId"] = self.response_id
        return r

    def feed(self, name, data):
        """Returns the chunks this event makes (often none)."""
        if name == "message_start":
            self.usage.update((data.get("message") or {}).get("usage") or {})
        elif name == "content_block_start":
            block = dict(data["content_block"])
            block["_json"] = []
            self.blocks[data["index"]] = block
            if block.get("type") == "text" and block.get("text"):
                return [self._response([self._with_signature({"text": block["text"]})])]
        elif name == "content_block_delta":
            block, d = self.blocks[data["index"]], data["delta"]
            kind = d.get("type")
            if kind == "text_delta" and d["text"]:
                return [self._response([self._with_signature({"text": d["text"]})])]
            if kind == "thinking_delta":
                self.thought_chars += len(d["thinking"])
                if self.include_thoughts and d["thinking"]:
                    return [self._response([{"text": d["thinking"], "thought": True}])]
            elif kind == "signature_delta":
                self.pending_signature = d["signature"]
            elif kind == "input_json_delta":
                block["_json"].append(d.get("partial_json", ""))
        elif name == "content_block_stop":
            block = self.blocks[data["index"]]
            if block.get("type") == "tool_use":
                text = "".join(block["_json"])
                args = json.loads(text) if text.strip() else (block.get("input") or {})
                call = {"id": block["id"], "name": block["name"], "args": args}
                return [self._response([self._with_signature({"functionCall": call})])]
        elif name == "message_delta":
            self.stop_reason = (data.get("delta") or {}).get("stop_reason") or self.stop_reason
            self.usage.update(data.get("usage") or {})
        elif name == "message_stop":
            finish = GEMINI_FINISH.get(self.stop_reason, "STOP")
            return [self._response([self._with_signature({"text": ""})], finish, usage=True)]
        elif name == "error":
            raise UpstreamError.from_event(data)
        return []

    def whole(self, message):
        """The non-streamed GenerateContentResponse for a whole Message."""
        self.usage = message.get("usage") or {}
        self.thought_chars = thinking_chars(message)
        parts = []
        for b in message["content"]:
            t = b.get("type")
            if t == "thinking":
                if self.include_thoughts and b.get("thinking"):
                    parts.append({"text": b["thinking"], "thought": True})
                self.pending_signature = b.get("signature") or None
            elif t == "text":
                parts.append(self._with_signature({"text": b["text"]}))
            elif t == "tool_use":
                parts.append(self._with_signature({"functionCall": {"id": b["id"], "name": b["name"], "args": b.get("input") or {}}}))
        if self.pending_signature:
            parts.append(self._with_signature({"text": ""}))
        return self._response(parts, GEMINI_FINISH.get(message.get("stop_reason"), "STOP"), usage=True)


def google_error(code, status, message, details=None):
    """google.rpc.Status as JSON (https://cloud.google.com/apis/design/errors#http_mapping)."""
    err = {"code": code, "message": message, "status": status}
    if details:
        err["details"] = details
    return {"error": err}


def gemini_upstream_error(e, vertex):
    """(status, body, headers) of a Google error for an upstream error."""
    service = "aiplatform.googleapis.com" if vertex else "generativelanguage.googleapis.com"
    headers = {"retry-after": e.retry_after} if e.retry_after else {}
    s = e.status
    if s == 429:
        if vertex:  # Vertex's quota answer (cloud.google.com/vertex-ai/generative-ai/docs/error-code-429)
            msg = ("Resource exhausted. Please try again later. Please refer to "
                   "https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more details.")
            return 429, google_error(429, "RESOURCE_EXHAUSTED", msg), headers
        details = [{"@type": "type.googleapis.com/google.rpc.QuotaFailure",
                    "violations": [{"quotaMetric": f"{service}/generate_content_free_tier_requests",
                                    "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"}]},
                   {"@type": "type.googleapis.com/google.rpc.Help",
                    "links": [{"description": "Learn more about Gemini API quotas",
                               "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}]}]
        if e.retry_after and str(e.retry_after).isdigit():
            details.append({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{int(e.retry_after)}s"})
        msg = ("You exceeded your current quota, please check your plan and billing details. For more information "
               "on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.")
        return 429, google_error(429, "RESOURCE_EXHAUSTED", msg, details), headers
    if s in (503, 529):
        return 503, google_error(503, "UNAVAILABLE", "The model is overloaded. Please try again later."), headers
    if s in (400, 413):
        return 400, google_error(400, "INVALID_ARGUMENT", e.message or "Request contains an invalid argument."), headers
    if s in (401, 403):
        return 403, google_error(403, "PERMISSION_DENIED", e.message or "The caller does not have permission"), headers
    if s == 404:
        return 404, google_error(404, "NOT_FOUND", e.message or "Requested entity was not found."), headers
    if s in (408, 504):
        return 504, google_error(504, "DEADLINE_EXCEEDED", "Deadline expired before operation could complete."), headers
    if s == 502:
        return 502, google_error(502, "UNAVAILABLE", e.message), headers
    return 500, google_error(500, "INTERNAL", "An internal error has occurred. Please retry or report in "
                                              "https://developers.generativeai.google/guide/troubleshooting"), headers


# ---------------------------------------------------------------------------------------------
# Bedrock Converse / ConverseStream
# Shapes: botocore/data/bedrock-runtime/2023-09-30/service-2.json (ConverseRequest, ContentBlock,
# ConverseStreamOutput, the *Exception shapes with their httpStatusCode).
# ---------------------------------------------------------------------------------------------

def bedrock_model_to_anthropic(model_id):
    """`us.anthropic.claude-3-5-sonnet-20240620-v1:0` -> `claude-3-5-sonnet-20240620`; a model id
    of another vendor is forwarded as it is."""
    m = re.match(r"^(?:(?:us|eu|apac|us-gov|global|jp|au|ca)\.)?anthropic\.(.+?)(?:-v\d+(?::\d+)?)?$", model_id)
    return m.group(1) if m else model_id


BEDROCK_IMAGE_TYPES = {"png": "image/png", "jpeg": "image/jpeg", "gif": "image/gif", "webp": "image/webp"}


def bedrock_media(kind, block):
    source = block.get("source") or {}
    if "bytes" not in source:
        raise BadRequest(f"The model only supports {kind} sources of type bytes.")
    fmt = block.get("format", "")
    if kind == "image":
        if fmt not in BEDROCK_IMAGE_TYPES:
            raise BadRequest(f"Unsupported image format: {fmt}")
        return media_block(BEDROCK_IMAGE_TYPES[fmt], data=source["bytes"])
    mime = "application/pdf" if fmt == "pdf" else "text/plain"
    out = media_block(mime, data=source["bytes"])
    if block.get("name"):
        out["title"] = block["name"]
    return out


def bedrock_to_anthropic(body, model_id):
    if not isinstance(body, dict):
        raise BadRequest("Malformed input request, please reformat your input and try again.")
    out = {"model": bedrock_model_to_anthropic(model_id)}
    system = [s["text"] for s in body.get("system") or [] if "text" in s]
    if system:
        out["system"] = "\n".join(system)
    messages = []
    for msg in body.get("messages") or []:
        role = msg.get("role")
        if role not in ("user", "assistant"):
            raise BadRequest(f"1 validation error detected: Value '{role}' at 'messages.role' failed to satisfy constraint")
        blocks = []
        for c in msg.get("content") or []:
            if "text" in c:
                blocks.append({"type": "text", "text": c["text"]})
            elif "image" in c:
                blocks.append(bedrock_media("image", c["image"]))
            elif "document" in c:
                blocks.append(bedrock_media("document", c["document"]))
            elif "toolUse" in c:
                tu = c["toolUse"]
                blocks.append({"type": "tool_use", "id": tu["toolUseId"], "name": tu["name"], "input": tu.get("input") or {}})
            elif "toolResult" in c:
                tr = c["toolResult"]
                content = []
                for rc in tr.get("content") or []:
                    if "text" in rc:
                        content.append({"type": "text", "text": rc["text"]})
                    elif "json" in rc:
                        content.append({"type": "text", "text": json.dumps(rc["json"])})
                    elif "image" in rc:
                        content.append(bedrock_media("image", rc["image"]))
                    elif "document" in rc:
                        content.append(bedrock_media("document", rc["document"]))
                block = {"type": "tool_result", "tool_use_id": tr["toolUseId"], "content": content}
                if tr.get("status") == "error":
                    block["is_error"] = True
                blocks.append(block)
            elif "reasoningContent" in c:
                rc = c["reasoningContent"]
                if "reasoningText" in rc:
                    blocks.append({"type": "thinking", "thinking": rc["reasoningText"].get("text", ""),
                                   "signature": rc["reasoningText"].get("signature", "")})
                elif "redactedContent" in rc:  # a blob: base64 in JSON
                    blocks.append({"type": "redacted_thinking",
                                   "data": base64.b64decode(rc["redactedContent"]).decode("utf-8", "replace")})
            elif "cachePoint" in c:
                if blocks:
                    blocks[-1]["cache_control"] = {"type": "ephemeral"}
        append_message(messages, role, blocks)
    out["messages"] = messages
    ic = body.get("inferenceConfig") or {}
    out["max_tokens"] = ic.get("maxTokens") or 4096
    for src, dst in (("temperature", "temperature"), ("topP", "top_p"), ("stopSequences", "stop_sequences")):
        if ic.get(src) is not None:
            out[dst] = ic[src]
    tc = body.get("toolConfig") or {}
    tools = []
    for t in tc.get("tools") or []:
        spec = t.get("toolSpec")
        if spec:
            tool = {"name": spec["name"], "input_schema": (spec.get("inputSchema") or {}).get("json") or {"type": "object"}}
            if spec.get("description"):
                tool["description"] = spec["description"]
            tools.append(tool)
    if tools:
        out["tools"] = tools
        choice = tc.get("toolChoice") or {}
        if "any" in choice:
            out["tool_choice"] = {"type": "any"}
        elif "tool" in choice:
            out["tool_choice"] = {"type": "tool", "name": choice["tool"]["name"]}
    extra = body.get("additionalModelRequestFields") or {}
    if not isinstance(extra, dict):
        raise BadRequest("additionalModelRequestFields must be an object")
    out.update({k: v for k, v in extra.items() if k != "anthropic_beta"})
    return out, extra.get("anthropic_beta")


BEDROCK_STOP = {"end_turn": "end_turn", "tool_use": "tool_use", "max_tokens": "max_tokens",
                "stop_sequence": "stop_sequence", "pause_turn": "end_turn", "refusal": "content_filtered",
                "model_context_window_exceeded": "model_context_window_exceeded"}


def bedrock_usage(u):
    cache_read = u.get("cache_read_input_tokens") or 0
    cache_write = u.get("cache_creation_input_tokens") or 0
    inp, out = u.get("input_tokens") or 0, u.get("output_tokens") or 0
    usage = {"inputTokens": inp, "outputTokens": out, "totalTokens": inp + out + cache_read + cache_write}
    if cache_read:
        usage["cacheReadInputTokens"] = cache_read
    if cache_write:
        usage["cacheWriteInputTokens"] = cache_write
    return usage


def bedrock_message_content(message):
    content = []
    for b in message["content"]:
        t = b.get("type")
        if t == "thinking":
            content.append({"reasoningContent": {"reasoningText": {"text": b.get("thinking", ""), "signature": b.get("signature", "")}}})
        elif t == "redacted_thinking":
            content.append({"reasoningContent": {"redactedContent": base64.b64encode(b.get("data", "").encode()).decode()}})
        elif t == "text":
            content.append({"text": b["text"]})
        elif t == "tool_use":
            content.append({"toolUse": {"toolUseId": b["id"], "name": b["name"], "input": b.get("input") or {}}})
    return content


# Mid-stream upstream errors as ConverseStream exception events (:exception-type is the member
# name in ConverseStreamOutput, lower camel case).
BEDROCK_STREAM_EXCEPTION = {"rate_limit_error": "throttlingException", "overloaded_error": "serviceUnavailableException",
                            "invalid_request_error": "validationException", "api_error": "internalServerException"}


def eventstream_message(headers, payload):
    """One message of the AWS event-stream framing (application/vnd.amazon.eventstream), as
    botocore/eventstream.py decodes it: prelude (total length, headers length: big-endian
    uint32), CRC32 of the prelude, headers, payload, CRC32 of everything before it. Each header
    is name length (uint8), name, value type 7 (string), value length (uint16), value."""
    hb = b""
    for name, value in headers:
        n, v = name.encode(), value.encode()
        hb += struct.pack(">B", len(n)) + n + b"\x07" + struct.pack(">H", len(v)) + v
    prelude = struct.pack(">II", 12 + len(hb) + len(payload) + 4, len(hb))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + hb + payload
    return message + struct.pack(">I", zlib.crc32(message))


def bedrock_event(event_type, payload):
    # Bedrock pads every event with a "p" member of varying length to hide sizes; clients ignore it.
    payload = dict(payload, p="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123"[: 1 + secrets.randbelow(50)])
    return eventstream_message([(":event-type", event_type), (":content-type", "application/json"),
                                (":message-type", "event")], json.dumps(payload, separators=(",", ":")).encode())


def bedrock_exception_event(exception_type, message):
    return eventstream_message([(":exception-type", exception_type), (":content-type", "application/json"),
                                (":message-type", "exception")], json.dumps({"message": message}).encode())


class BedrockAnswer:
    """Anthropic events -> ConverseStream events (contentBlockStart only for toolUse, as Bedrock)."""

    def __init__(self):
        self.started = time.monotonic()
        self.usage = {}
        self.stop_reason = None

    def feed(self, name, data):
        if name == "message_start":
            self.usage.update((data.get("message") or {}).get("usage") or {})
            return [bedrock_event("messageStart", {"role": "assistant"})]
        i = data.get("index")
        if name == "content_block_start":
            cb = data["content_block"]
            if cb.get("type") == "tool_use":
                return [bedrock_event("contentBlockStart", {"contentBlockIndex": i, "start": {"toolUse": {"toolUseId": cb["id"], "name": cb["name"]}}})]
            if cb.get("type") == "redacted_thinking":
                red = base64.b64encode(cb.get("data", "").encode()).decode()
                return [bedrock_event("contentBlockDelta", {"contentBlockIndex": i, "delta": {"reasoningContent": {"redactedContent": red}}})]
            if cb.get("type") == "text" and cb.get("text"):
                return [bedrock_event("contentBlockDelta", {"contentBlockIndex": i, "delta": {"text": cb["text"]}})]
        elif name == "content_block_delta":
            d, kind = data["delta"], data["delta"].get("type")
            delta = None
            if kind == "text_delta":
                delta = {"text": d["text"]}
            elif kind == "input_json_delta":
                delta = {"toolUse": {"input": d.get("partial_json", "")}}
            elif kind == "thinking_delta":
                delta = {"reasoningContent": {"text": d["thinking"]}}
            elif kind == "signature_delta":
                delta = {"reasoningContent": {"signature": d["signature"]}}
            if delta is not None:
                return [bedrock_event("contentBlockDelta", {"contentBlockIndex": i, "delta": delta})]
        elif name == "content_block_stop":
            return [bedrock_event("contentBlockStop", {"contentBlockIndex": i})]
        elif name == "message_delta":
            self.stop_reason = (data.get("delta") or {}).get("stop_reason") or self.stop_reason
            self.usage.update(data.get("usage") or {})
        elif name == "message_stop":
            latency = int((time.monotonic() - self.started) * 1000)
            return [bedrock_event("messageStop", {"stopReason": BEDROCK_STOP.get(self.stop_reason, "end_turn")}),
                    bedrock_event("metadata", {"usage": bedrock_usage(self.usage), "metrics": {"latencyMs": latency}})]
        elif name == "error":
            err = UpstreamError.from_event(data)
            return [bedrock_exception_event(BEDROCK_STREAM_EXCEPTION.get(err.error_type, "modelStreamErrorException"),
                                            err.message or "The system encountered an unexpected error during processing. Try your request again.")]
        return []


def bedrock_upstream_error(e):
    """(status, error type, message) of Bedrock's own exception for an upstream error."""
    s = e.status
    if s == 429:
        return 429, "ThrottlingException", "Too many requests, please wait before trying again."
    if s in (503, 529):
        return 503, "ServiceUnavailableException", "Bedrock is unable to process your request."
    if s in (400, 413):
        return 400, "ValidationException", e.message or "Malformed input request, please reformat your input and try again."
    if s in (401, 403):
        return 403, "AccessDeniedException", e.message or "You don't have access to the model with the specified model ID."
    if s == 404:
        return 404, "ResourceNotFoundException", e.message or "Model not found."
    if s in (408, 504):
        return 408, "ModelTimeoutException", "Model has timed out in processing the request. Try your request again."
    return 500, "InternalServerException", "The system encountered an unexpected error during processing. Try your request again."


# ---------------------------------------------------------------------------------------------
# Azure OpenAI (Chat Completions)
# ---------------------------------------------------------------------------------------------

def openai_content_blocks(content):
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks = []
    for part in content:
        kind = part.get("type")
        if kind == "text":
            if part.get("text"):
                blocks.append({"type": "text", "text": part["text"]})
        elif kind == "image_url":
            url = (part.get("image_url") or {}).get("url", "")
            mime, data = parse_data_url(url)
            blocks.append(media_block(mime, data=data) if mime else {"type": "image", "source": {"type": "url", "url": url}})
        elif kind == "refusal":
            continue
        else:
            raise BadRequest(f"Invalid content part type: '{kind}'")
    return blocks


def azure_to_anthropic(body, model):
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        raise BadRequest("'messages' is a required property")
    out = {"model": model}
    system, messages = [], []
    for m in body["messages"]:
        role = m.get("role")
        if role in ("system", "developer"):
            system.extend(b["text"] for b in openai_content_blocks(m.get("content")) if b["type"] == "text")
        elif role == "user":
            append_message(messages, "user", openai_content_blocks(m.get("content")))
        elif role == "assistant":
            blocks = openai_content_blocks(m.get("content"))
            for tc in m.get("tool_calls") or []:
                fn = tc.get("function") or {}
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                except ValueError:
                    raise BadRequest(f"Invalid 'tool_calls.function.arguments' of call {tc.get('id')}: not JSON")
                blocks.append({"type": "tool_use", "id": tc["id"], "name": fn.get("name"), "input": args})
            append_message(messages, "assistant", blocks)
        elif role == "tool":
            content = m.get("content")
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content)
            append_message(messages, "user", [{"type": "tool_result", "tool_use_id": m.get("tool_call_id"), "content": content or ""}])
        else:
            raise BadRequest(f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user', 'tool', and 'developer'.")
    if system:
        out["system"] = "\n".join(system)
    out["messages"] = messages
    out["max_tokens"] = body.get("max_completion_tokens") or body.get("max_tokens") or 4096
    for key in ("temperature", "top_p"):
        if body.get(key) is not None:
            out[key] = body[key]
    stop = body.get("stop")
    if stop:
        out["stop_sequences"] = [stop] if isinstance(stop, str) else stop
    tools = []
    for t in body.get("tools") or []:
        if t.get("type") == "function":
            fn = t["function"]
            tool = {"name": fn["name"], "input_schema": fn.get("parameters") or {"type": "object", "properties": {}}}
            if fn.get("description"):
                tool["description"] = fn["description"]
            tools.append(tool)
    if tools:
        out["tools"] = tools
        choice = body.get("tool_choice")
        tc = None
        if choice == "required":
            tc = {"type": "any"}
        elif choice == "none":
            tc = {"type": "none"}
        elif isinstance(choice, dict):
            tc = {"type": "tool", "name": choice["function"]["name"]}
        if body.get("parallel_tool_calls") is False:
            tc = dict(tc or {"type": "auto"}, disable_parallel_tool_use=True)
        if tc:
            out["tool_choice"] = tc
    return out


AZURE_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "pause_turn": "stop", "tool_use": "tool_calls",
                "max_tokens": "length", "model_context_window_exceeded": "length", "refusal": "content_filter"}
SAFE = {"filtered": False, "severity": "safe"}
CONTENT_FILTER_RESULTS = {"hate": SAFE, "self_harm": SAFE, "sexual": SAFE, "violence": SAFE}
PROMPT_FILTER_RESULTS = [{"prompt_index": 0, "content_filter_results": {
    "hate": SAFE, "jailbreak": {"filtered": False, "detected": False}, "self_harm": SAFE, "sexual": SAFE, "violence": SAFE}}]


def openai_usage(u, thought_chars):
    cache_read = u.get("cache_read_input_tokens") or 0
    prompt = (u.get("input_tokens") or 0) + cache_read + (u.get("cache_creation_input_tokens") or 0)
    out = u.get("output_tokens") or 0
    return {"completion_tokens": out,
            "completion_tokens_details": {"accepted_prediction_tokens": 0, "audio_tokens": 0,
                                          "reasoning_tokens": estimate_thought_tokens(thought_chars, out),
                                          "rejected_prediction_tokens": 0},
            "prompt_tokens": prompt,
            "prompt_tokens_details": {"audio_tokens": 0, "cached_tokens": cache_read},
            "total_tokens": prompt + out}


class AzureAnswer:
    """Anthropic events -> chat.completion.chunk objects, as Azure streams them: first a chunk
    with empty `choices` and `prompt_filter_results`, then a role chunk, content / tool_calls
    deltas, a finish chunk, and (with stream_options.include_usage) a usage chunk with empty
    `choices`. Thinking is dropped: Azure does not stream reasoning text."""

    def __init__(self, include_usage):
        self.include_usage = include_usage
        self.id = "chatcmpl-" + secrets.token_urlsafe(22).replace("-", "x").replace("_", "y")[:29]
        self.created = int(time.time())
        self.model = ""
        self.usage = {}
        self.stop_reason = None
        self.tool_index = {}  # Anthropic block index -> tool_calls index
        self.thought_chars = 0

    def _chunk(self, delta=None, finish=None, filters=None, usage=None):
        c = {"choices": [] if delta is None else [{"content_filter_results": filters or {}, "delta": delta,
                                                     "finish_reason": finish, "index": 0, "logprobs": None}],
             "created": self.created, "id": self.id, "model": self.model, "object": "chat.completion.chunk",
             "system_fingerprint": "fp_fake_cloud"}
        if usage is not None:
            c["usage"] = usage
        return c

    def first(self):
        return {"choices": [], "created": 0, "id": "", "model": "", "object": "", "prompt_filter_results": PROMPT_FILTER_RESULTS}

    def feed(self, name, data):
        if name == "message_start":
            msg = data.get("message") or {}
            self.model = msg.get("model") or ""
            self.usage.update(msg.get("usage") or {})
            return [self._chunk({"content": "", "refusal": None, "role": "assistant"})]
        if name == "content_block_start":
            cb = data["content_block"]
            if cb.get("type") == "tool_use":
                n = self.tool_index[data["index"]] = len(self.tool_index)
                call = {"index": n, "id": cb["id"], "type": "function", "function": {"name": cb["name"], "arguments": ""}}
                return [self._chunk({"tool_calls": [call]})]
            if cb.get("type") == "text" and cb.get("text"):
                return [self._chunk({"content": cb["text"]}, filters=CONTENT_FILTER_RESULTS)]
        elif name == "content_block_delta":
            d, kind = data["delta"], data["delta"].get("type")
            if kind == "text_delta" and d["text"]:
                return [self._chunk({"content": d["text"]}, filters=CONTENT_FILTER_RESULTS)]
            if kind == "input_json_delta" and d.get("partial_json"):
                call = {"index": self.tool_index[data["index"]], "function": {"arguments": d["partial_json"]}}
                return [self._chunk({"tool_calls": [call]})]
            if kind == "thinking_delta":
                self.thought_chars += len(d["thinking"])
        elif name == "message_delta":
            self.stop_reason = (data.get("delta") or {}).get("stop_reason") or self.stop_reason
            self.usage.update(data.get("usage") or {})
            return [self._chunk({}, finish=AZURE_FINISH.get(self.stop_reason, "stop"))]
        elif name == "message_stop":
            if self.include_usage:
                return [self._chunk(None, usage=openai_usage(self.usage, self.thought_chars))]
        elif name == "error":
            raise UpstreamError.from_event(data)
        return []

    def whole(self, message):
        text = "".join(b["text"] for b in message["content"] if b.get("type") == "text")
        calls = [{"id": b["id"], "type": "function", "function": {"name": b["name"], "arguments": json.dumps(b.get("input") or {})}}
                 for b in message["content"] if b.get("type") == "tool_use"]
        msg = {"annotations": [], "content": text or None, "refusal": None, "role": "assistant"}
        if calls:
            msg["tool_calls"] = calls
        return {"choices": [{"content_filter_results": CONTENT_FILTER_RESULTS if text else {},
                             "finish_reason": AZURE_FINISH.get(message.get("stop_reason"), "stop"),
                             "index": 0, "logprobs": None, "message": msg}],
                "created": self.created, "id": self.id, "model": message.get("model") or "", "object": "chat.completion",
                "prompt_filter_results": PROMPT_FILTER_RESULTS, "system_fingerprint": "fp_fake_cloud",
                "usage": openai_usage(message.get("usage") or {}, thinking_chars(message))}


def azure_upstream_error(e, api_version):
    """(status, body, headers) of Azure's error for an upstream error."""
    headers = {}
    if e.retry_after:
        headers["retry-after"] = e.retry_after
        if str(e.retry_after).isdigit():
            headers["retry-after-ms"] = str(int(e.retry_after) * 1000)
    s = e.status
    if s == 429:
        wait = e.retry_after or "1"
        msg = (f"Requests to the ChatCompletions_Create Operation under Azure OpenAI API version {api_version} have "
               f"exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after {wait} seconds. "
               "Please go here: https://aka.ms/oai/quotaincrease if you would like to further increase the default rate limit.")
        return 429, {"error": {"code": "429", "message": msg}}, headers
    if s in (503, 529):
        return 503, {"error": {"code": "ServiceUnavailable", "message": "The service is temporarily unable to process your request. Please try again later."}}, headers
    if s in (400, 413):
        return 400, {"error": {"message": e.message, "type": "invalid_request_error", "param": None, "code": None}}, headers
    if s in (408, 504):
        return 408, {"error": {"code": "Timeout", "message": "The operation was timeout."}}, headers
    return 500, {"error": {"code": "InternalServerError", "message": "The server had an error processing your request. "
                           "Sorry about that! You can retry your request, or contact us through an Azure support request "
                           "at: https://go.microsoft.com/fwlink/?linkid=2213926 if you keep seeing this error."}}, headers


# ---------------------------------------------------------------------------------------------
# Shared state
# ---------------------------------------------------------------------------------------------

class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = []
        self.tokens = {}  # access token -> {"issuer", "expires" (epoch seconds), "subject"}
        self.issued = {"google": 0, "entra": 0}
        self.counts = {}

    def record(self, entry):
        with self.lock:
            self.requests.append(entry)
            self.counts[entry["provider"]] = self.counts.get(entry["provider"], 0) + 1
        return entry

    def issue(self, issuer, lifetime, subject):
        prefix = "ya29.fake-" if issuer == "google" else "eyJ0eXAiOiJKV1QifQ.fake-"
        token = prefix + secrets.token_urlsafe(32)
        with self.lock:
            self.tokens[token] = {"issuer": issuer, "expires": time.time() + lifetime, "subject": subject}
            self.issued[issuer] += 1
        return token

    def check_token(self, token, issuer):
        """'ok', 'expired' or 'invalid'."""
        with self.lock:
            info = self.tokens.get(token)
        if not info or info["issuer"] != issuer:
            return "invalid"
        return "ok" if time.time() < info["expires"] else "expired"


# ---------------------------------------------------------------------------------------------
# HTTP handler
# ---------------------------------------------------------------------------------------------

GEMINI_PATH = re.compile(r"^/(v1|v1beta|v1alpha)/models/([^/:]+):(generateContent|streamGenerateContent)$")
VERTEX_PATH = re.compile(r"^/(v1|v1beta1)/projects/([^/]+)/locations/([^/]+)/publishers/(google|anthropic)/models/([^/:]+):(\w+)$")
BEDROCK_PATH = re.compile(r"^/model/([^/]+)/(converse|converse-stream)$")
AZURE_DEPLOYMENT_PATH = re.compile(r"^/openai/deployments/([^/]+)/chat/completions$")
ENTRA_TOKEN_PATH = re.compile(r"^/([^/]+)/oauth2/v2\.0/token$")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake_cloud"
    sys_version = ""

    def setup(self):
        super().setup()
        # Each event is written as soon as it is translated: no Nagle delay on a small write.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    @property
    def cfg(self):
        return self.server.cfg

    @property
    def state(self):
        return self.server.state

    def log_message(self, fmt, *args):
        if self.cfg.verbose:
            log(self.address_string(), fmt % args)

    # --- plumbing ---------------------------------------------------------------------------

    def read_body(self):
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    def send_json(self, status, obj, headers=None, content_type="application/json; charset=UTF-8"):
        data = json.dumps(obj).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        if self.entry is not None:
            self.entry["status"] = status

    def start_stream(self, content_type, headers=None):
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.entry is not None:
            self.entry["status"] = 200

    def write_chunk(self, data):
        if not data:
            return
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))  # one write: one segment, at once
        except OSError as e:
            raise ClientGone() from e

    def end_stream(self):
        try:
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True

    def cut(self):
        """Ends the connection mid-answer: no terminating chunk, no clean end."""
        self.close_connection = True
        if self.entry is not None:
            self.entry["cut"] = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def dispatch(self, method):
        self.entry = None
        self.raw_path, _, self.query_string = self.path.partition("?")
        self.query = {k: v[-1] for k, v in parse_qs(self.query_string).items()}
        try:
            self.body_bytes = self.read_body() if method == "POST" else b""
            self.route(method)
        except ClientGone:
            self.close_connection = True
        except Exception as e:  # a bug here: say so on stderr, and answer 500 if we still can
            log("error handling", method, self.path, repr(e))
            import traceback
            traceback.print_exc(file=sys.stderr)
            self.close_connection = True
            try:
                self.send_json(500, {"error": {"message": f"fake_cloud internal error: {e!r}"}})
            except Exception:
                pass

    def parsed_body(self):
        try:
            return json.loads(self.body_bytes or b"null")
        except ValueError:
            return None

    def new_entry(self, provider, body=None):
        entry = {"provider": provider, "method": self.command, "path": self.path,
                 "headers": {k.lower(): v for k, v in self.headers.items()},
                 "body": body if body is not None else (self.parsed_body() if self.body_bytes else None),
                 "auth_ok": None, "auth_error": None, "upstream": None, "status": None, "time": time.time()}
        if entry["body"] is None and self.body_bytes:
            entry["body"] = self.body_bytes.decode("utf-8", "replace")
        self.entry = self.state.record(entry)
        return entry

    def route(self, method):
        p = self.raw_path
        if p.startswith("/_fake/"):
            return self.fake_control(method, p)
        if method != "POST":
            return self.send_json(404, {"error": {"code": 404, "message": "Not Found", "status": "NOT_FOUND"}})
        if p == "/token":
            return self.google_token()
        m = ENTRA_TOKEN_PATH.match(p)
        if m:
            return self.entra_token(m.group(1))
        m = GEMINI_PATH.match(p)
        if m:
            return self.gemini(unquote(m.group(2)), m.group(3))
        m = VERTEX_PATH.match(p)
        if m:
            return self.vertex(unquote(m.group(2)), unquote(m.group(3)), m.group(4), unquote(m.group(5)), m.group(6))
        m = BEDROCK_PATH.match(p)
        if m:
            return self.bedrock(unquote(m.group(1)), m.group(2) == "converse-stream")
        m = AZURE_DEPLOYMENT_PATH.match(p)
        if m:
            return self.azure(unquote(m.group(1)), v1=False)
        if p == "/openai/v1/chat/completions":
            return self.azure(None, v1=True)
        self.new_entry("unknown")
        self.send_json(404, {"error": {"code": 404, "message": f"fake_cloud: no route for POST {p}", "status": "NOT_FOUND"}})

    def fake_control(self, method, p):
        if p == "/_fake/requests" and method == "GET":
            provider = self.query.get("provider")
            with self.state.lock:
                items = [r for r in self.state.requests if provider in (None, r["provider"])]
                data = json.loads(json.dumps(items))
            return self.send_json(200, data)
        if p == "/_fake/stats" and method == "GET":
            with self.state.lock:
                return self.send_json(200, {"tokens_issued": dict(self.state.issued), "requests": dict(self.state.counts)})
        if p == "/_fake/reset" and method == "POST":
            with self.state.lock:
                self.state.requests.clear()
            return self.send_json(200, {"ok": True})
        self.send_json(404, {"error": "no such control endpoint"})

    # --- the translation loop, shared by every route ----------------------------------------

    def relay(self, anthropic_body, stream, answer, on_error, extra_headers=None):
        """Sends `anthropic_body` upstream and answers the client.

        stream: (content_type, headers, prefix_bytes) to stream, or None for one JSON answer.
        answer: object with feed(name, data) -> list of chunks (streaming) / whole(message).
        on_error(UpstreamError) -> (status, body, headers) before anything was sent.
        encode(chunk) is answer.encode when streaming."""
        self.entry["upstream"] = anthropic_body
        try:
            source = self.server.upstream.open(anthropic_body, extra_headers)
        except UpstreamError as e:
            self.entry["upstream_error"] = {"status": e.status, "type": e.error_type, "message": e.message}
            status, body, headers = on_error(e)
            return self.send_json(status, body, headers)
        except UpstreamCut:
            return self.cut()
        if stream is None:
            try:
                message = accumulate(source.events())
            except UpstreamCut:
                return self.cut()
            except UpstreamError as e:
                self.entry["upstream_error"] = {"status": e.status, "type": e.error_type, "message": e.message}
                status, body, headers = on_error(e)
                return self.send_json(status, body, headers)
            return self.send_json(200, answer.whole(message), getattr(answer, "headers", None))
        content_type, headers, prefix = stream
        self.start_stream(content_type, headers)
        try:
            if prefix:
                self.write_chunk(prefix)
            for name, data, raw in source.events():
                try:
                    chunks = answer.feed(name, data) if not hasattr(answer, "feed_raw") else answer.feed_raw(name, raw)
                except UpstreamError as e:  # an `event: error` mid-stream, in the provider's words
                    self.entry["upstream_error"] = {"status": e.status, "type": e.error_type, "message": e.message}
                    self.write_chunk(answer.stream_error(e))
                    break
                for chunk in chunks:
                    self.write_chunk(answer.encode(chunk))
            tail = getattr(answer, "tail", lambda: b"")()
            if tail and not self.entry.get("upstream_error"):
                self.write_chunk(tail)
            self.end_stream()
        except UpstreamCut:
            self.cut()
        except ClientGone:
            source.close()  # let the upstream see the client went away
            self.close_connection = True

    # --- Google ----------------------------------------------------------------------------

    def gemini(self, model, method):
        entry = self.new_entry("gemini")
        key = self.headers.get("x-goog-api-key") or self.query.get("key")
        if not key:
            entry["auth_ok"], entry["auth_error"] = False, "missing key"
            return self.send_json(403, google_error(403, "PERMISSION_DENIED",
                "Method doesn't allow unregistered callers (callers without established identity). "
                "Please use API Key or other form of API consumer identity to call this API."))
        if not hmac.compare_digest(key, self.cfg.gemini_key or ""):
            entry["auth_ok"], entry["auth_error"] = False, "API_KEY_INVALID"
            msg = "API key not valid. Please pass a valid API key."
            return self.send_json(400, google_error(400, "INVALID_ARGUMENT", msg, [
                {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID", "domain": "googleapis.com",
                 "metadata": {"service": "generativelanguage.googleapis.com"}},
                {"@type": "type.googleapis.com/google.rpc.LocalizedMessage", "locale": "en-US", "message": msg}]))
        entry["auth_ok"] = True
        self.gemini_common(model, method, vertex=False)

    def gemini_common(self, model, method, vertex):
        body = self.parsed_body()
        if body is None:
            return self.send_json(400, google_error(400, "INVALID_ARGUMENT", "Invalid JSON payload received. Unexpected token."))
        try:
            anthropic_body = gemini_to_anthropic(body, model)
        except BadRequest as e:
            return self.send_json(400, google_error(400, "INVALID_ARGUMENT", str(e)))
        tc = (google_camel_case(body).get("generationConfig") or {}).get("thinkingConfig") or {}
        answer = GeminiAnswer(model, bool(tc.get("includeThoughts")), vertex)
        on_error = lambda e: gemini_upstream_error(e, vertex)
        if method == "generateContent":
            return self.relay(anthropic_body, None, answer, on_error)
        sse = self.query.get("alt") == "sse"

        def stream_error(e):
            status, err, _ = gemini_upstream_error(e, vertex)
            return answer.encode(err)
        answer.stream_error = stream_error
        if sse:
            # Gemini's SSE: `data: <one-line JSON>` and a blank line, CRLF line ends, no [DONE].
            answer.encode = lambda chunk: b"data: " + json.dumps(chunk).encode("utf-8") + b"\r\n\r\n"
            return self.relay(anthropic_body, ("text/event-stream", None, b""), answer, on_error)
        # Without alt=sse: one JSON array, streamed element by element.
        first = [True]

        def encode_array(chunk):
            sep = b"[" if first[0] else b",\r\n"
            first[0] = False
            return sep + json.dumps(chunk, indent=2).encode("utf-8")
        answer.encode = encode_array
        answer.tail = lambda: (b"[]" if first[0] else b"]")
        self.relay(anthropic_body, ("application/json; charset=UTF-8", None, b""), answer, on_error)

    def google_auth_error(self, reason, missing=False):
        if missing:
            msg = ("Request is missing required authentication credential. Expected OAuth 2 access token, login cookie "
                   "or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.")
        else:
            msg = ("Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other "
                   "valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.")
        return self.send_json(401, google_error(401, "UNAUTHENTICATED", msg, [
            {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": "googleapis.com",
             "metadata": {"service": "aiplatform.googleapis.com", "method": "google.cloud.aiplatform.v1.PredictionService.GenerateContent"}}]),
            {"WWW-Authenticate": 'Bearer realm="https://accounts.google.com/"'})

    def vertex(self, project, region, publisher, model, method):
        entry = self.new_entry("vertex-anthropic" if publisher == "anthropic" else "vertex")
        auth = self.headers.get("authorization") or ""
        if not auth.lower().startswith("bearer "):
            entry["auth_ok"], entry["auth_error"] = False, "CREDENTIALS_MISSING"
            return self.google_auth_error("CREDENTIALS_MISSING", missing=True)
        verdict = self.state.check_token(auth[7:].strip(), "google")
        if verdict != "ok":
            reason = "ACCESS_TOKEN_EXPIRED" if verdict == "expired" else "ACCESS_TOKEN_TYPE_UNSUPPORTED"
            entry["auth_ok"], entry["auth_error"] = False, reason
            return self.google_auth_error(reason)
        entry["auth_ok"] = True
        if project not in self.cfg.vertex_projects:
            msg = f"Permission denied on resource project {project}."
            return self.send_json(403, google_error(403, "PERMISSION_DENIED", msg, [
                {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "CONSUMER_INVALID", "domain": "googleapis.com",
                 "metadata": {"consumer": f"projects/{project}", "containerInfo": project, "service": "aiplatform.googleapis.com"}},
                {"@type": "type.googleapis.com/google.rpc.LocalizedMessage", "locale": "en-US", "message": msg},
                {"@type": "type.googleapis.com/google.rpc.Help", "links": [{"description": "Google developers console", "url": "https://console.developers.google.com"}]}]))
        if region not in self.cfg.vertex_regions:
            return self.send_json(404, google_error(404, "NOT_FOUND",
                f"Publisher Model `projects/{project}/locations/{region}/publishers/{publisher}/models/{model}` not found."))
        if publisher == "google":
            if method not in ("generateContent", "streamGenerateContent"):
                return self.send_json(400, google_error(400, "INVALID_ARGUMENT", "Gemini cannot be accessed through Vertex Predict/RawPredict API. Please follow https://cloud.google.com/vertex-ai/docs/generative-ai/start/quickstarts/quickstart-multimodal for Gemini usage."))
            return self.gemini_common(model, method, vertex=True)
        if method not in ("rawPredict", "streamRawPredict"):
            return self.send_json(400, google_error(400, "FAILED_PRECONDITION", f"{method} is not supported for publisher model {model}."))
        self.vertex_anthropic(model, method == "streamRawPredict")

    def vertex_anthropic(self, model, stream_method):
        body = self.parsed_body()

        def invalid(message):
            return self.send_json(400, {"type": "error", "error": {"type": "invalid_request_error", "message": message}})
        if not isinstance(body, dict):
            return invalid("Input should be a valid dictionary or object to extract fields from")
        if "anthropic_version" not in body:
            return invalid("anthropic_version: Field required")
        version = body["anthropic_version"]
        if version not in VERTEX_ANTHROPIC_VERSIONS:
            return invalid(f"anthropic_version: Input should be '{VERTEX_ANTHROPIC_VERSIONS[0]}'")
        if "model" in body:
            return invalid("model: Extra inputs are not permitted")
        up = {k: v for k, v in body.items() if k != "anthropic_version"}
        up["model"] = model
        # Upstream, the version goes in the anthropic-version header; Vertex's own name stands for 2023-06-01.
        extra = {"anthropic-version": "2023-06-01" if version.startswith("vertex-") else version}
        if self.headers.get("anthropic-beta"):
            extra["anthropic-beta"] = self.headers["anthropic-beta"]

        def on_error(e):
            headers = {"retry-after": e.retry_after} if e.retry_after else {}
            if e.status == 429:  # Vertex's own quota error, in Google's shape
                msg = (f"Quota exceeded for aiplatform.googleapis.com/online_prediction_requests_per_base_model with base model: "
                       f"anthropic-{model.split('@')[0]}. Please submit a quota increase request. "
                       "https://cloud.google.com/vertex-ai/docs/generative-ai/quotas-genai.")
                return 429, google_error(429, "RESOURCE_EXHAUSTED", msg), headers
            body = e.body if isinstance(e.body, dict) else {"type": "error", "error": {"type": e.error_type, "message": e.message}}
            return e.status, body, headers

        class Passthrough:
            """Anthropic's SSE as received, event by event."""
            def feed_raw(self, name, raw):
                if name == "error":
                    raise UpstreamError.from_event(json.loads(raw))
                return [(name, raw)]

            def encode(self, chunk):
                return f"event: {chunk[0]}\ndata: {chunk[1]}\n\n".encode("utf-8")

            def stream_error(self, e):
                return self.encode(("error", json.dumps(e.body or {"type": "error", "error": {"type": e.error_type, "message": e.message}})))

            def whole(self, message):
                return {k: v for k, v in message.items()}

        if stream_method or body.get("stream") is True:
            return self.relay(up, ("text/event-stream; charset=utf-8", None, b""), Passthrough(), on_error, extra)
        self.relay(up, None, Passthrough(), on_error, extra)

    def google_token(self):
        """OAuth2 JWT-bearer grant (RFC 7523) as oauth2.googleapis.com/token answers it."""
        form = {k: v[-1] for k, v in parse_qs(self.body_bytes.decode("utf-8", "replace")).items()}
        entry = self.new_entry("google-token", body=form)

        def refuse(error, description, status=400):
            entry["auth_ok"], entry["auth_error"] = False, f"{error}: {description}"
            return self.send_json(status, {"error": error, "error_description": description})
        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer":
            return refuse("unsupported_grant_type", f"Invalid grant_type: {form.get('grant_type', '')}")
        assertion = form.get("assertion", "")
        try:
            h64, c64, s64 = assertion.split(".")
            header, claims = json.loads(b64url_decode(h64)), json.loads(b64url_decode(c64))
            signature = b64url_decode(s64)
        except ValueError:
            return refuse("invalid_grant", "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim.")
        entry["jwt"] = {"header": header, "claims": claims}
        try:  # read at each request, so a test may write the file after this server started
            with open(self.cfg.service_account_file) as f:
                key_file = json.load(f)
            private_key = serialization.load_pem_private_key(key_file["private_key"].encode(), password=None)
        except (OSError, ValueError, KeyError, TypeError):
            return refuse("invalid_grant", "Invalid grant: account not found")
        if claims.get("iss") != key_file.get("client_email"):
            return refuse("invalid_grant", "Invalid grant: account not found")
        if header.get("alg") != "RS256" or (header.get("kid") and header["kid"] != key_file.get("private_key_id")):
            return refuse("invalid_grant", "Invalid JWT Signature.")
        try:
            private_key.public_key().verify(signature, f"{h64}.{c64}".encode(), padding.PKCS1v15(), hashes.SHA256())
        except Exception:
            return refuse("invalid_grant", "Invalid JWT Signature.")
        # google-auth sends aud = https://oauth2.googleapis.com/token whatever the token_uri is;
        # other libraries send the token_uri itself. Both are accepted.
        if claims.get("aud") not in (GOOGLE_TOKEN_AUDIENCE, key_file.get("token_uri")):
            return refuse("invalid_grant", f"Invalid JWT: Failed audience check. The right audience is {GOOGLE_TOKEN_AUDIENCE}")
        now = time.time()
        iat, exp = claims.get("iat"), claims.get("exp")
        if (not isinstance(iat, (int, float)) or not isinstance(exp, (int, float)) or exp <= iat or exp - iat > 3600
                or iat > now + 300 or exp < now - 300):
            return refuse("invalid_grant", "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim.")
        if CLOUD_PLATFORM_SCOPE not in str(claims.get("scope", "")).split():
            return refuse("invalid_scope", "Invalid OAuth scope or ID token audience provided.")
        entry["auth_ok"] = True
        token = self.state.issue("google", self.cfg.token_lifetime, claims["iss"])
        self.send_json(200, {"access_token": token, "expires_in": self.cfg.token_lifetime, "token_type": "Bearer"})

    # --- Entra ID ---------------------------------------------------------------------------

    def entra_token(self, tenant):
        form = {k: v[-1] for k, v in parse_qs(self.body_bytes.decode("utf-8", "replace")).items()}
        entry = self.new_entry("entra-token", body={k: ("***" if k == "client_secret" else v) for k, v in form.items()})

        def refuse(status, error, code, description):
            entry["auth_ok"], entry["auth_error"] = False, error
            trace, corr = str(uuid.uuid4()), str(uuid.uuid4())
            stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
            return self.send_json(status, {
                "error": error,
                "error_description": f"AADSTS{code}: {description} Trace ID: {trace} Correlation ID: {corr} Timestamp: {stamp}",
                "error_codes": [code], "timestamp": stamp, "trace_id": trace, "correlation_id": corr,
                "error_uri": f"https://login.microsoftonline.com/error?code={code}"})
        if tenant != self.cfg.azure_tenant:
            return refuse(400, "invalid_request", 90002, f"Tenant '{tenant}' not found. Check to make sure you have the correct tenant ID and are signing into the correct cloud.")
        if form.get("grant_type") != "client_credentials":
            return refuse(400, "unsupported_grant_type", 70003, "The app requested an unsupported grant type.")
        if form.get("client_id") != self.cfg.azure_client_id:
            return refuse(400, "unauthorized_client", 700016, f"Application with identifier '{form.get('client_id')}' was not found in the directory '{tenant}'.")
        if not hmac.compare_digest(form.get("client_secret", ""), self.cfg.azure_client_secret or ""):
            return refuse(401, "invalid_client", 7000215, "Invalid client secret provided. Ensure the secret being sent in the request is the client secret value, not the client secret ID, for a secret added to app "
                          f"'{form.get('client_id')}'.")
        if form.get("scope") not in AZURE_SCOPES:
            return refuse(400, "invalid_scope", 1002012, f"The provided value for scope {form.get('scope')} is not valid. Client credential flows must have a scope value with /.default suffixed to the resource identifier (application ID URI).")
        entry["auth_ok"] = True
        token = self.state.issue("entra", self.cfg.token_lifetime, form["client_id"])
        self.send_json(200, {"token_type": "Bearer", "expires_in": self.cfg.token_lifetime,
                             "ext_expires_in": self.cfg.token_lifetime, "access_token": token})

    # --- Bedrock ----------------------------------------------------------------------------

    def bedrock_error(self, status, error_type, message, coral=False, headers=None):
        namespace = "com.amazon.coral.service" if coral else "com.amazon.bedrock"
        h = {"x-amzn-RequestId": str(uuid.uuid4()),
             "x-amzn-ErrorType": f"{error_type}:http://internal.amazon.com/coral/{namespace}/"}
        h.update(headers or {})
        self.send_json(status, {"message": message}, h, content_type="application/json")

    def sigv4_check(self):
        """None when the request's SigV4 signature is right, else (status, type, message)."""
        auth = self.headers.get("authorization") or ""
        if not auth:
            return 403, "MissingAuthenticationTokenException", "Missing Authentication Token"
        m = re.match(r"^AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, ?"
                     r"SignedHeaders=([^,]+), ?Signature=([0-9a-f]+)$", auth)
        if not m:
            return 403, "IncompleteSignatureException", f"Authorization header requires 'Credential', 'Signature' and 'SignedHeaders' parameters. Authorization={auth}"
        key_id, day, region, service, signed, _sig = m.groups()
        cfg = self.cfg
        if key_id != cfg.aws_access_key_id:
            return 403, "UnrecognizedClientException", "The security token included in the request is invalid."
        if cfg.aws_session_token is not None and self.headers.get("x-amz-security-token") != cfg.aws_session_token:
            return 403, "UnrecognizedClientException", "The security token included in the request is invalid."
        if service != "bedrock":
            return 403, "InvalidSignatureException", "Credential should be scoped to correct service: 'bedrock'. "
        if region != cfg.aws_region:
            return 403, "InvalidSignatureException", "Credential should be scoped to a valid region. "
        amz_date = self.headers.get("x-amz-date") or ""
        try:
            stamp = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
        except ValueError:
            return 403, "IncompleteSignatureException", "Date must be in ISO-8601 'basic format'. Got '%s'." % amz_date
        now = datetime.datetime.now(datetime.timezone.utc)
        fmt = lambda d: d.strftime("%Y%m%dT%H%M%SZ")
        if stamp < now - datetime.timedelta(minutes=5):
            return 403, "InvalidSignatureException", f"Signature expired: {amz_date} is now earlier than {fmt(now - datetime.timedelta(minutes=5))} ({fmt(now)} - 5 min.)"
        if stamp > now + datetime.timedelta(minutes=5):
            return 403, "InvalidSignatureException", f"Signature not yet current: {amz_date} is still later than {fmt(now + datetime.timedelta(minutes=5))} ({fmt(now)} + 5 min.)"
        if day != amz_date[:8]:
            return 403, "InvalidSignatureException", "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '%s' != '%s', from '%s'." % (day, amz_date[:8], amz_date)
        # Re-sign the request as received with botocore's own SigV4 signer and the expected
        # secret, and compare the whole Authorization header.
        names = signed.split(";")
        headers = {}
        for n in names:
            if self.headers.get(n) is None:
                return 403, "InvalidSignatureException", "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details."
            headers[n] = self.headers.get(n)
        url = f"http://{self.headers.get('host')}{self.path}"
        request = AWSRequest(method=self.command, url=url, data=self.body_bytes, headers=headers)
        request.context["timestamp"] = amz_date
        signer = SigV4Auth(Credentials(cfg.aws_access_key_id, cfg.aws_secret_access_key, cfg.aws_session_token), "bedrock", cfg.aws_region)
        canonical = signer.canonical_request(request)
        signature = signer.signature(signer.string_to_sign(request, canonical), request)
        expected = signer._inject_signature_to_request(request, signature).headers["Authorization"]
        if not hmac.compare_digest(expected.replace(", ", ","), auth.replace(", ", ",")):
            return 403, "InvalidSignatureException", "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details."
        return None

    def bedrock(self, model_id, stream):
        entry = self.new_entry("bedrock")
        entry["model_id"] = model_id
        refused = self.sigv4_check()
        if refused:
            entry["auth_ok"], entry["auth_error"] = False, refused[1]
            return self.bedrock_error(*refused, coral=True)
        entry["auth_ok"] = True
        body = self.parsed_body()
        if body is None:
            return self.bedrock_error(400, "SerializationException", "Unexpected character while parsing the request body", coral=True)
        try:
            anthropic_body, beta = bedrock_to_anthropic(body, model_id)
        except BadRequest as e:
            return self.bedrock_error(400, "ValidationException", str(e))
        except (KeyError, TypeError) as e:
            return self.bedrock_error(400, "ValidationException", f"Malformed input request: {e!r}")
        extra = {"anthropic-beta": ",".join(beta)} if isinstance(beta, list) and beta else None

        def on_error(e):
            status, etype, message = bedrock_upstream_error(e)
            headers = {"x-amzn-RequestId": str(uuid.uuid4()),
                       "x-amzn-ErrorType": f"{etype}:http://internal.amazon.com/coral/com.amazon.bedrock/"}
            if e.retry_after:
                headers["retry-after"] = e.retry_after
            return status, {"message": message}, headers
        answer = BedrockAnswer()
        answer.encode = lambda chunk: chunk
        answer.stream_error = lambda e: answer.feed("error", e.body if isinstance(e.body, dict) else {"error": {"type": e.error_type, "message": e.message}})[0]
        if stream:
            return self.relay(anthropic_body, ("application/vnd.amazon.eventstream", {"x-amzn-RequestId": str(uuid.uuid4())}, b""),
                              answer, on_error, extra)

        def whole(message):
            return {"output": {"message": {"role": "assistant", "content": bedrock_message_content(message)}},
                    "stopReason": BEDROCK_STOP.get(message.get("stop_reason"), "end_turn"),
                    "usage": bedrock_usage(message.get("usage") or {}),
                    "metrics": {"latencyMs": int((time.monotonic() - answer.started) * 1000)}}
        answer.whole = whole
        answer.headers = {"x-amzn-RequestId": str(uuid.uuid4())}
        self.relay(anthropic_body, None, answer, on_error, extra)

    # --- Azure OpenAI -----------------------------------------------------------------------

    def azure(self, deployment, v1):
        entry = self.new_entry("azure")
        api_version = self.query.get("api-version")
        if v1:
            if api_version not in (None, "preview", "latest", "v1"):
                return self.send_json(400, {"error": {"code": "BadRequest", "message": "API version not supported"}})
        elif api_version is None:
            return self.send_json(404, {"error": {"code": "404", "message": "Resource not found"}})
        elif api_version not in self.cfg.azure_api_versions:
            return self.send_json(400, {"error": {"code": "BadRequest", "message": "API version not supported"}})
        key = self.headers.get("api-key")
        auth = self.headers.get("authorization") or ""
        if key is not None:
            ok = hmac.compare_digest(key, self.cfg.azure_key or "")
            why = "invalid key"
        elif auth.lower().startswith("bearer "):
            token = auth[7:].strip()
            verdict = self.state.check_token(token, "entra")
            # The v1 API also takes the resource key as a bearer token (OpenAI(api_key=...)).
            ok = verdict == "ok" or (v1 and hmac.compare_digest(token, self.cfg.azure_key or ""))
            why = f"token {verdict}"
        else:
            entry["auth_ok"], entry["auth_error"] = False, "missing key"
            return self.send_json(401, {"error": {"code": "401", "message": "Access denied due to missing subscription key. Make sure to include subscription key when making requests to an API."}})
        if not ok:
            entry["auth_ok"], entry["auth_error"] = False, why
            if key is not None:
                msg = ("Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an "
                       "active subscription and use a correct regional API endpoint for your resource.")
            else:
                msg = "Unauthorized. Access token is missing, invalid, audience is incorrect (https://cognitiveservices.azure.com), or have expired."
            return self.send_json(401, {"error": {"code": "401", "message": msg}})
        entry["auth_ok"] = True
        body = self.parsed_body()
        if body is None:
            return self.send_json(400, {"error": {"message": "We could not parse the JSON body of your request.", "type": "invalid_request_error", "param": None, "code": None}})
        if v1:
            deployment = body.get("model") if isinstance(body, dict) else None
        if deployment not in self.cfg.azure_deployments:
            return self.send_json(404, {"error": {"code": "DeploymentNotFound", "message": "The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again."}})
        entry["deployment"] = deployment
        try:
            anthropic_body = azure_to_anthropic(body, deployment)
        except BadRequest as e:
            return self.send_json(400, {"error": {"message": str(e), "type": "invalid_request_error", "param": None, "code": None}})
        answer = AzureAnswer(bool((body.get("stream_options") or {}).get("include_usage")))
        on_error = lambda e: azure_upstream_error(e, api_version or "v1")
        if not body.get("stream"):
            return self.relay(anthropic_body, None, answer, on_error)
        answer.encode = lambda chunk: b"data: " + json.dumps(chunk).encode("utf-8") + b"\n\n"

        def stream_error(e):
            status, err, _ = azure_upstream_error(e, api_version or "v1")
            inner = err["error"]
            return answer.encode({"error": {"message": inner.get("message"), "type": inner.get("type", "server_error"),
                                            "param": None, "code": inner.get("code")}})
        answer.stream_error = stream_error
        answer.tail = lambda: b"data: [DONE]\n\n"
        self.relay(anthropic_body, ("text/event-stream; charset=utf-8", {"apim-request-id": str(uuid.uuid4())},
                                    answer.encode(answer.first())), answer, on_error)


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        # A client closing a kept-alive connection (even with a reset) is ordinary.
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream", required=True, help="the Anthropic-wire fake, e.g. http://127.0.0.1:PORT")
    ap.add_argument("--upstream-key", default="fake-cloud", help="x-api-key sent upstream")
    ap.add_argument("--upstream-timeout", type=float, default=300.0, help="seconds to wait for the upstream's next byte")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--gemini-key")
    ap.add_argument("--aws-access-key-id")
    ap.add_argument("--aws-secret-access-key")
    ap.add_argument("--aws-session-token", default=None, help="when given, requests must carry it in x-amz-security-token")
    ap.add_argument("--aws-region", default="us-east-1")
    ap.add_argument("--vertex-project", default="", help="comma-separated project ids that exist")
    ap.add_argument("--vertex-region", default="us-central1", help="comma-separated locations that exist")
    ap.add_argument("--service-account-file", default="", help="key file whose public key signs the JWTs (read at each /token request)")
    ap.add_argument("--token-lifetime", type=int, default=3600, help="expires_in of issued Google and Entra tokens, seconds")
    ap.add_argument("--azure-key")
    ap.add_argument("--azure-deployments", default="", help="comma-separated deployment names")
    ap.add_argument("--azure-api-versions", default="", help="extra accepted api-version values, comma-separated")
    ap.add_argument("--azure-tenant", default="")
    ap.add_argument("--azure-client-id", default="")
    ap.add_argument("--azure-client-secret", default="")
    ap.add_argument("--verbose", action="store_true", help="log each request on stderr")
    cfg = ap.parse_args(argv)
    if not is_loopback_host(cfg.host):
        ap.error("--host must be a loopback address")
    split = lambda s: [x for x in (s or "").split(",") if x]
    cfg.vertex_projects = split(cfg.vertex_project)
    cfg.vertex_regions = split(cfg.vertex_region)
    cfg.azure_deployments = split(cfg.azure_deployments)
    cfg.azure_api_versions = AZURE_API_VERSIONS + split(cfg.azure_api_versions)

    server = Server((cfg.host, cfg.port), Handler)
    server.cfg = cfg
    server.state = State()
    server.upstream = Upstream(cfg.upstream, cfg.upstream_key, cfg.upstream_timeout)
    host, port = server.server_address[:2]
    print(f"listening {host}:{port}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
