#!/usr/bin/env python3
"""oracle.py: proves fake_cloud.py speaks each provider's wire format by driving each
provider's official SDK against it, with a scripted Anthropic-wire upstream fake in this file
that records what the translation produced.

  python3 tests/providers/oracle.py        # one line per check; exit 0 when all pass

SDKs (pinned; see README.md for the pip line):
  google-genai==3.6.1 google-auth==2.63.0 boto3==1.44.8 botocore==1.44.8 openai==3.57.0
  anthropic[vertex]==2.14.0 cryptography==50.0.2

Nothing here leaves the machine: before any SDK is imported, name resolution and socket
connections are limited to loopback, every SDK gets a 127.0.0.1 base URL / endpoint_url, and
the cloud credential/metadata environment is cleared.
"""

import os
import socket
import sys

# --- loopback only -----------------------------------------------------------------------------
_LOOPBACK_NAMES = {"127.0.0.1", "localhost", "::1", None}
_real_getaddrinfo = socket.getaddrinfo
_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _guard_address(address):
    if isinstance(address, tuple) and address:
        host = address[0]
        if not (host in _LOOPBACK_NAMES or str(host).startswith("127.")):
            raise OSError(f"oracle: refusing to connect to {host!r} (loopback only)")


def _getaddrinfo(host, *args, **kwargs):
    if not (host in _LOOPBACK_NAMES or str(host).startswith("127.")):
        raise OSError(f"oracle: refusing to resolve {host!r} (loopback only)")
    return _real_getaddrinfo(host, *args, **kwargs)


def _connect(self, address):
    _guard_address(address)
    return _real_connect(self, address)


def _connect_ex(self, address):
    _guard_address(address)
    return _real_connect_ex(self, address)


socket.getaddrinfo = _getaddrinfo
socket.socket.connect = _connect
socket.socket.connect_ex = _connect_ex

# --- no ambient cloud configuration ----------------------------------------------------------
for _k in list(os.environ):
    if _k.upper().startswith(("AWS_", "GOOGLE_", "GCLOUD", "CLOUDSDK_", "AZURE_", "OPENAI_", "ANTHROPIC_",
                              "CLOUD_ML_", "GCE_", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")):
        del os.environ[_k]
os.environ.update({
    "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    "NO_GCE_CHECK": "true", "GCE_METADATA_HOST": "127.0.0.1:1", "GCE_METADATA_IP": "127.0.0.1:1",
    "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
})

import base64  # noqa: E402
import collections  # noqa: E402
import http.server  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import urllib.error  # noqa: E402
import urllib.parse  # noqa: E402
import urllib.request  # noqa: E402
import zlib  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ["CLOUDSDK_CONFIG"] = tempfile.mkdtemp(prefix="oracle-gcloud-")  # no gcloud ADC

import anthropic  # noqa: E402
import boto3  # noqa: E402
import botocore.exceptions  # noqa: E402
import google.auth.exceptions  # noqa: E402
import google.auth.transport.requests  # noqa: E402
import openai  # noqa: E402
from anthropic import AnthropicVertex  # noqa: E402
from botocore.config import Config  # noqa: E402
from google import genai  # noqa: E402
from google.genai import errors as genai_errors  # noqa: E402
from google.genai import types  # noqa: E402
from google.oauth2 import service_account  # noqa: E402

from make_service_account import make_service_account  # noqa: E402

GEMINI_KEY = "gemini-test-key"
AWS_KEY_ID, AWS_SECRET, AWS_TOKEN, AWS_REGION = "AKIAFAKECLOUD0000001", "fake/secret+KEY0000000000000000000000000", "fake-session-token", "us-east-1"
PROJECT, REGION = "baaaht-test-project", "us-central1"
AZ_KEY, AZ_DEPLOYMENT, AZ_TENANT, AZ_CLIENT, AZ_SECRET = "azure-test-key", "gpt-4o-deploy", "tenant-1234", "client-5678", "client-secret-9"
AZ_API_VERSION = "2024-10-21"
CLOUD_SCOPE = "https://www.googleapis.com/auth/cloud-platform"


def tiny_png():
    """A valid 1x1 PNG, made with zlib (no image library)."""
    def chunk(kind, data):
        return len(data).to_bytes(4, "big") + kind + data + zlib.crc32(kind + data).to_bytes(4, "big")
    ihdr = (1).to_bytes(4, "big") * 2 + bytes([8, 2, 0, 0, 0])
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00")) + chunk(b"IEND", b"")


PNG = tiny_png()
PNG_B64 = base64.b64encode(PNG).decode()


# ---------------------------------------------------------------------------------------------
# The upstream: a scripted Anthropic Messages API fake that records every request
# ---------------------------------------------------------------------------------------------

def ev(name, **data):
    return (name, {"type": name, **data})


def anthropic_answer(*blocks, stop="end_turn", input_tokens=11, output_tokens=9, cache_read=0, model="fake-model"):
    """Anthropic stream events. blocks: ("text", [pieces]), ("thinking", [pieces], signature),
    ("tool", id, name, input_dict)."""
    usage = {"input_tokens": input_tokens, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": cache_read}
    events = [ev("message_start", message={"id": "msg_fake", "type": "message", "role": "assistant", "content": [],
                                           "model": model, "stop_reason": None, "stop_sequence": None, "usage": usage}),
              ev("ping")]
    for i, b in enumerate(blocks):
        if b[0] == "text":
            events.append(ev("content_block_start", index=i, content_block={"type": "text", "text": ""}))
            events += [ev("content_block_delta", index=i, delta={"type": "text_delta", "text": p}) for p in b[1]]
        elif b[0] == "thinking":
            events.append(ev("content_block_start", index=i, content_block={"type": "thinking", "thinking": "", "signature": ""}))
            events += [ev("content_block_delta", index=i, delta={"type": "thinking_delta", "thinking": p}) for p in b[1]]
            events.append(ev("content_block_delta", index=i, delta={"type": "signature_delta", "signature": b[2]}))
        elif b[0] == "tool":
            events.append(ev("content_block_start", index=i, content_block={"type": "tool_use", "id": b[1], "name": b[2], "input": {}}))
            js = json.dumps(b[3])
            events += [ev("content_block_delta", index=i, delta={"type": "input_json_delta", "partial_json": part})
                       for part in (js[: len(js) // 2], js[len(js) // 2:])]
        events.append(ev("content_block_stop", index=i))
    events.append(ev("message_delta", delta={"stop_reason": stop, "stop_sequence": None}, usage={"output_tokens": output_tokens}))
    events.append(ev("message_stop"))
    return events


class UpstreamFake:
    def __init__(self):
        self.lock = threading.Lock()
        self.script = collections.deque()
        self.requests = []
        self.abandoned = 0
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                with outer.lock:
                    outer.requests.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                                           "body": json.loads(body)})
                    answer = outer.script.popleft() if outer.script else ("status", 500, {"type": "error", "error": {"type": "api_error", "message": "script empty"}}, {})
                kind = answer[0]
                if kind == "status":
                    _, code, payload, headers = answer
                    data = json.dumps(payload).encode()
                    self.send_response(code)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                    return
                _, events, opts = answer
                self.send_response(200)
                self.send_header("content-type", "text/event-stream; charset=utf-8")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                try:
                    for i, (name, data) in enumerate(events):
                        if opts.get("cut_after") == i:  # close mid-answer, without the terminating chunk
                            self.close_connection = True
                            self.connection.shutdown(socket.SHUT_RDWR)
                            return
                        if opts.get("delay"):
                            time.sleep(opts["delay"])
                        payload = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))
                    self.wfile.write(b"0\r\n\r\n")
                except ConnectionError:  # fake_cloud went away: its client did
                    self.close_connection = True
                    with outer.lock:
                        outer.abandoned += 1

        class S(http.server.ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                if not isinstance(sys.exc_info()[1], ConnectionError):
                    super().handle_error(request, client_address)

        self.server = S(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def push(self, *answers):
        with self.lock:
            self.script.extend(answers)

    def sse(self, events, **opts):
        self.push(("sse", events, opts))

    def status(self, code, etype, message, headers=None):
        self.push(("status", code, {"type": "error", "error": {"type": etype, "message": message}}, headers or {}))

    def reset(self):
        with self.lock:
            self.script.clear()
            self.requests.clear()

    def last(self):
        with self.lock:
            return self.requests[-1]


# ---------------------------------------------------------------------------------------------
# fake_cloud.py as a subprocess
# ---------------------------------------------------------------------------------------------

class FakeCloud:
    def __init__(self, upstream_port, sa_file, token_lifetime=3600, session_token=AWS_TOKEN):
        args = [sys.executable, os.path.join(HERE, "fake_cloud.py"), "--upstream", f"http://127.0.0.1:{upstream_port}",
                "--port", "0", "--host", "127.0.0.1", "--gemini-key", GEMINI_KEY,
                "--aws-access-key-id", AWS_KEY_ID, "--aws-secret-access-key", AWS_SECRET, "--aws-region", AWS_REGION,
                "--vertex-project", PROJECT, "--vertex-region", REGION, "--service-account-file", sa_file,
                "--token-lifetime", str(token_lifetime), "--azure-key", AZ_KEY, "--azure-deployments", f"{AZ_DEPLOYMENT},other-deploy",
                "--azure-tenant", AZ_TENANT, "--azure-client-id", AZ_CLIENT, "--azure-client-secret", AZ_SECRET]
        if session_token:
            args += ["--aws-session-token", session_token]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("listening 127.0.0.1:"), f"unexpected first line {line!r}"
        self.line = line
        self.port = int(line.strip().rsplit(":", 1)[1])
        self.base = f"http://127.0.0.1:{self.port}"

    def get(self, path):
        with urllib.request.urlopen(self.base + path, timeout=10) as r:
            return json.loads(r.read())

    def requests(self, provider=None):
        return self.get("/_fake/requests" + (f"?provider={provider}" if provider else ""))

    def stats(self):
        return self.get("/_fake/stats")

    def raw(self, method, path, body=None, headers=None):
        """(status, headers, parsed body) of a raw request."""
        data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                raw = json.loads(raw)
            except ValueError:
                pass
            return e.code, dict(e.headers), raw

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------

CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def blocks_of(req, role=None):
    out = []
    for m in req["body"]["messages"]:
        if role in (None, m["role"]):
            out += m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
    return out


def expect_raises(exc_type, fn):
    try:
        fn()
    except exc_type as e:
        return e
    raise AssertionError(f"expected {exc_type.__name__}")


# --- Gemini API (google-genai, api key) --------------------------------------------------------

# A google-genai Client closes its HTTP client when it is garbage-collected, even while its
# `models` is still in use: every client made here is kept alive until the end.
KEEP = []


def keep(client):
    KEEP.append(client)
    return client


def gemini_client(ctx, key=GEMINI_KEY, api_version="v1beta"):
    return keep(genai.Client(api_key=key, http_options=types.HttpOptions(base_url=ctx.fake.base, api_version=api_version)))


WEATHER_DECL = types.FunctionDeclaration(
    name="get_weather", description="Weather in a city",
    parameters=types.Schema(type="OBJECT", properties={"city": types.Schema(type="STRING")}, required=["city"]))


@check
def gemini_stream_text(ctx):
    ctx.up.sse(anthropic_answer(("text", ["Hel", "lo ", "world"]), input_tokens=21, output_tokens=5, cache_read=4))
    client = gemini_client(ctx)
    texts, last = [], None
    for chunk in client.models.generate_content_stream(
            model="gemini-2.5-flash", contents="Say hello",
            config=types.GenerateContentConfig(system_instruction="Be brief", max_output_tokens=300, temperature=0.3,
                                               stop_sequences=["END"])):
        last = chunk
        for p in chunk.candidates[0].content.parts or []:
            if p.text:
                texts.append(p.text)
    assert texts == ["Hel", "lo ", "world"], texts
    assert last.candidates[0].finish_reason == types.FinishReason.STOP
    u = last.usage_metadata
    assert (u.prompt_token_count, u.candidates_token_count, u.total_token_count, u.cached_content_token_count) == (25, 5, 30, 4), u
    up = ctx.up.last()["body"]
    assert up["system"] == "Be brief" and up["max_tokens"] == 300 and up["temperature"] == 0.3 and up["stop_sequences"] == ["END"], up
    assert up["stream"] is True and up["model"] == "gemini-2.5-flash" and up["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Say hello"}]}], up
    rec = ctx.fake.requests("gemini")[-1]
    assert rec["path"] == "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse" and rec["auth_ok"], rec["path"]
    assert rec["headers"]["x-goog-api-key"] == GEMINI_KEY
    return f"deltas {texts}, usage prompt=25 candidates=5 total=30 cached=4"


@check
def gemini_generate_default_v1(ctx):
    ctx.up.sse(anthropic_answer(("text", ["Whole ", "answer"]), stop="max_tokens"))
    r = gemini_client(ctx, api_version=None).models.generate_content(model="gemini-2.5-flash", contents="hi")
    assert r.text == "Whole answer", r.text
    assert r.candidates[0].finish_reason == types.FinishReason.MAX_TOKENS
    path = ctx.fake.requests("gemini")[-1]["path"]
    assert path == "/v1/models/gemini-2.5-flash:generateContent", path
    return f"SDK default api version hits {path}; MAX_TOKENS"


@check
def gemini_tool_round_trip(ctx):
    ctx.up.sse(anthropic_answer(("text", ["Checking."]), ("tool", "toolu_01ABC", "get_weather", {"city": "Paris"}), stop="tool_use"))
    client = gemini_client(ctx)
    config = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[WEATHER_DECL])],
                                         tool_config=types.ToolConfig(function_calling_config=types.FunctionCallingConfig(mode="ANY")))
    user = types.Content(role="user", parts=[types.Part(text="Weather in Paris?")])
    r = client.models.generate_content(model="gemini-2.5-flash", contents=[user], config=config)
    fc = r.function_calls[0]
    assert (fc.name, fc.args, fc.id) == ("get_weather", {"city": "Paris"}, "toolu_01ABC"), fc
    up = ctx.up.last()["body"]
    assert up["tools"] == [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}, "description": "Weather in a city"}], up["tools"]
    assert up["tool_choice"] == {"type": "any"}, up.get("tool_choice")
    # Send the result back, once with the id and once without (matched by name).
    for with_id in (True, False):
        ctx.up.sse(anthropic_answer(("text", ["Sunny."])))
        model_turn = r.candidates[0].content
        if not with_id:
            model_turn = types.Content(role="model", parts=[types.Part(function_call=types.FunctionCall(name="get_weather", args={"city": "Paris"}))])
        response = types.Part(function_response=types.FunctionResponse(id=fc.id if with_id else None, name="get_weather", response={"result": "sunny, 24C"}))
        r2 = client.models.generate_content(model="gemini-2.5-flash", contents=[user, model_turn, types.Content(role="user", parts=[response])], config=config)
        assert r2.text == "Sunny."
        msgs = ctx.up.last()["body"]["messages"]
        tool_use = [b for b in msgs[1]["content"] if b["type"] == "tool_use"][0]
        result = msgs[2]["content"][0]
        assert result["type"] == "tool_result" and result["tool_use_id"] == tool_use["id"] and result["content"] == [{"type": "text", "text": "sunny, 24C"}], msgs
        if with_id:
            assert tool_use["id"] == "toolu_01ABC"
    return "functionCall.id = Anthropic tool_use id; functionResponse -> tool_result (by id, and by name without id)"


@check
def gemini_thinking(ctx):
    ctx.up.sse(anthropic_answer(("thinking", ["Let me ", "think."], "c2lnLWFiYw=="), ("text", ["42"]), output_tokens=20))
    client = gemini_client(ctx)
    config = types.GenerateContentConfig(thinking_config=types.ThinkingConfig(thinking_budget=2048, include_thoughts=True))
    parts, last = [], None
    for chunk in client.models.generate_content_stream(model="gemini-2.5-pro", contents="Meaning of life?", config=config):
        parts += chunk.candidates[0].content.parts or []
        last = chunk
    thoughts = [p.text for p in parts if p.thought]
    assert thoughts == ["Let me ", "think."], parts
    signed = [p for p in parts if p.thought_signature]
    assert len(signed) == 1 and signed[0].text == "42" and signed[0].thought_signature == b"c2lnLWFiYw==", signed
    u = last.usage_metadata
    assert u.thoughts_token_count == 4 and u.candidates_token_count == 16 and u.total_token_count == 31, u
    assert ctx.up.last()["body"]["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    # The model turn sent back reaches the upstream as a signed thinking block.
    ctx.up.sse(anthropic_answer(("text", ["ok"])))
    model_turn = types.Content(role="model", parts=parts)
    client.models.generate_content(model="gemini-2.5-pro", contents=[
        types.Content(role="user", parts=[types.Part(text="Meaning of life?")]), model_turn,
        types.Content(role="user", parts=[types.Part(text="Why?")])], config=config)
    assistant = ctx.up.last()["body"]["messages"][1]["content"]
    assert assistant[0] == {"type": "thinking", "thinking": "Let me think.", "signature": "c2lnLWFiYw=="}, assistant
    assert assistant[1] == {"type": "text", "text": "42"}, assistant
    return "thought parts (thought=True), signature on the next part as thoughtSignature, round trip to a signed thinking block"


@check
def gemini_image(ctx):
    ctx.up.sse(anthropic_answer(("text", ["A pixel."])))
    r = gemini_client(ctx).models.generate_content(model="gemini-2.5-flash", contents=[
        types.Part.from_bytes(data=PNG, mime_type="image/png"), "What is this?"])
    assert r.text == "A pixel."
    content = ctx.up.last()["body"]["messages"][0]["content"]
    assert content[0] == {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}}, content
    return "inlineData -> Anthropic base64 image block"


@check
def gemini_rate_limited(ctx):
    ctx.up.status(429, "rate_limit_error", "Number of requests has exceeded your rate limit", {"retry-after": "7"})
    e = expect_raises(genai_errors.ClientError, lambda: list(gemini_client(ctx).models.generate_content_stream(model="gemini-2.5-flash", contents="hi")))
    assert e.code == 429 and e.status == "RESOURCE_EXHAUSTED", (e.code, e.status)
    assert e.response.headers.get("retry-after") == "7"
    retry = [d for d in e.details["error"]["details"] if d["@type"].endswith("RetryInfo")]
    assert retry == [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}], e.details
    return "ClientError 429 RESOURCE_EXHAUSTED, retry-after: 7, RetryInfo retryDelay 7s"


@check
def gemini_overloaded(ctx):
    ctx.up.status(529, "overloaded_error", "Overloaded")
    e = expect_raises(genai_errors.ServerError, lambda: gemini_client(ctx).models.generate_content(model="gemini-2.5-flash", contents="hi"))
    assert e.code == 503 and e.status == "UNAVAILABLE", (e.code, e.status)
    return "upstream 529 -> ServerError 503 UNAVAILABLE"


@check
def gemini_bad_key(ctx):
    e = expect_raises(genai_errors.ClientError, lambda: gemini_client(ctx, key="wrong").models.generate_content(model="gemini-2.5-flash", contents="hi"))
    assert e.code == 400 and e.status == "INVALID_ARGUMENT" and e.message == "API key not valid. Please pass a valid API key.", e
    assert e.details["error"]["details"][0]["reason"] == "API_KEY_INVALID"
    rec = ctx.fake.requests("gemini")[-1]
    assert rec["auth_ok"] is False and rec["upstream"] is None
    return "ClientError 400 INVALID_ARGUMENT API_KEY_INVALID"


@check
def gemini_mid_stream_error(ctx):
    events = anthropic_answer(("text", ["partial", "never"]))
    events = events[:4] + [ev("error", error={"type": "overloaded_error", "message": "Overloaded"})]
    ctx.up.sse(events)
    got = []

    def run():
        for chunk in gemini_client(ctx).models.generate_content_stream(model="gemini-2.5-flash", contents="hi"):
            got.append(chunk.text)
    e = expect_raises(genai_errors.ServerError, run)
    assert got == ["partial"] and e.code == 503, (got, e)
    return "text, then data: {\"error\":{code 503 UNAVAILABLE}} -> ServerError mid-stream"


@check
def gemini_cut(ctx):
    ctx.up.sse(anthropic_answer(("text", ["before", " the cut", "never"])), cut_after=5)
    got = []

    def run():
        for chunk in gemini_client(ctx).models.generate_content_stream(model="gemini-2.5-flash", contents="hi"):
            got.append(chunk.text)
    e = expect_raises(Exception, run)
    assert got == ["before", " the cut"], got
    return f"upstream cut -> client connection cut ({type(e).__name__})"


# --- Vertex AI: service-account token exchange, Gemini and Anthropic on Vertex ------------------

def sa_credentials(ctx, path=None):
    return service_account.Credentials.from_service_account_file(path or ctx.sa_file, scopes=[CLOUD_SCOPE])


def vertex_client(ctx, project=PROJECT, location=REGION, creds=None, fake=None):
    return keep(genai.Client(vertexai=True, project=project, location=location, credentials=creds or sa_credentials(ctx),
                             http_options=types.HttpOptions(base_url=(fake or ctx.fake).base)))


@check
def google_auth_token_exchange(ctx):
    creds = sa_credentials(ctx)
    before = ctx.fake.stats()["tokens_issued"]["google"]
    creds.refresh(google.auth.transport.requests.Request())
    assert creds.token.startswith("ya29.fake-") and creds.valid, creds.token
    left = (creds.expiry - __import__("datetime").datetime.utcnow()).total_seconds()
    assert 3500 < left <= 3600, left
    assert ctx.fake.stats()["tokens_issued"]["google"] == before + 1
    rec = ctx.fake.requests("google-token")[-1]
    claims, header = rec["jwt"]["claims"], rec["jwt"]["header"]
    with open(ctx.sa_file) as f:
        info = json.load(f)
    assert claims["iss"] == info["client_email"] and claims["scope"] == CLOUD_SCOPE
    assert claims["aud"] == "https://oauth2.googleapis.com/token", claims
    assert claims["exp"] - claims["iat"] == 3600 and header == {"alg": "RS256", "typ": "JWT", "kid": info["private_key_id"]}, (claims, header)
    assert rec["headers"]["content-type"] == "application/x-www-form-urlencoded"
    ctx.notes["jwt"] = {"header": header, "claim_names": sorted(claims)}
    return f"JWT header {header['alg']}/{header['typ']}/kid, claims {sorted(claims)}, aud={claims['aud']}"


@check
def google_auth_wrong_key(ctx):
    other = os.path.join(ctx.tmp, "other-key.json")
    with open(ctx.sa_file) as f:
        info = json.load(f)
    make_service_account(other, info["token_uri"], PROJECT, info["client_email"])  # same account, another key
    e = expect_raises(google.auth.exceptions.RefreshError, lambda: sa_credentials(ctx, other).refresh(google.auth.transport.requests.Request()))
    assert "invalid_grant" in str(e) and "Invalid JWT Signature" in str(e), e
    return "a JWT signed by another key -> RefreshError invalid_grant: Invalid JWT Signature."


@check
def vertex_gemini_stream(ctx):
    ctx.up.sse(anthropic_answer(("text", ["Ver", "tex"]), input_tokens=8, output_tokens=2))
    before = ctx.fake.stats()["tokens_issued"]["google"]
    texts, last = [], None
    for chunk in vertex_client(ctx).models.generate_content_stream(model="gemini-2.5-flash", contents="hi"):
        texts += [p.text for p in chunk.candidates[0].content.parts or [] if p.text]
        last = chunk
    assert texts == ["Ver", "tex"] and last.usage_metadata.total_token_count == 10, (texts, last.usage_metadata)
    assert last.usage_metadata.traffic_type == types.TrafficType.ON_DEMAND
    assert ctx.fake.stats()["tokens_issued"]["google"] == before + 1
    rec = ctx.fake.requests("vertex")[-1]
    assert rec["auth_ok"] and rec["headers"]["authorization"].startswith("Bearer ya29.fake-")
    assert rec["path"] == f"/v1beta1/projects/{PROJECT}/locations/{REGION}/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse", rec["path"]
    return f"token exchanged, then {rec['path'].split('?')[0]}"


@check
def vertex_gemini_tool_round_trip(ctx):
    ctx.up.sse(anthropic_answer(("tool", "toolu_V1", "get_weather", {"city": "Oslo"}), stop="tool_use"))
    client = vertex_client(ctx)
    config = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[WEATHER_DECL])])
    user = types.Content(role="user", parts=[types.Part(text="Oslo?")])
    r = client.models.generate_content(model="gemini-2.5-flash", contents=[user], config=config)
    fc = r.function_calls[0]
    assert (fc.id, fc.name, fc.args) == ("toolu_V1", "get_weather", {"city": "Oslo"}), fc
    ctx.up.sse(anthropic_answer(("text", ["Cold."])))
    client.models.generate_content(model="gemini-2.5-flash", config=config, contents=[
        user, r.candidates[0].content,
        types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(id=fc.id, name=fc.name, response={"temp": -3}))])])
    result = ctx.up.last()["body"]["messages"][2]["content"][0]
    assert result == {"type": "tool_result", "tool_use_id": "toolu_V1", "content": [{"type": "text", "text": '{"temp": -3}'}]}, result
    return "functionCall/functionResponse round trip on Vertex; a non-string response is sent as its JSON"


@check
def vertex_gemini_thinking_image_throttled(ctx):
    ctx.up.sse(anthropic_answer(("thinking", ["Pondering"], "sigVG"), ("text", ["A dot."])))
    client = vertex_client(ctx)
    r = client.models.generate_content(model="gemini-2.5-pro", contents=[types.Part.from_bytes(data=PNG, mime_type="image/png"), "What?"],
                                       config=types.GenerateContentConfig(thinking_config=types.ThinkingConfig(include_thoughts=True)))
    parts = r.candidates[0].content.parts
    assert parts[0].thought and parts[0].text == "Pondering" and not parts[0].thought_signature, parts
    assert parts[1].text == "A dot." and parts[1].thought_signature == b"sigVG" and not parts[1].thought, parts
    up = ctx.up.last()["body"]
    assert up["messages"][0]["content"][0]["source"]["data"] == PNG_B64 and up["thinking"] == {"type": "enabled", "budget_tokens": 1024}, up
    ctx.up.status(429, "rate_limit_error", "slow down", {"retry-after": "4"})
    e = expect_raises(genai_errors.ClientError, lambda: list(client.models.generate_content_stream(model="gemini-2.5-pro", contents="x")))
    assert e.code == 429 and e.status == "RESOURCE_EXHAUSTED" and e.response.headers["retry-after"] == "4", e
    return "non-streamed thought part + signed text part; image; includeThoughts without budget -> 1024; 429 RESOURCE_EXHAUSTED"


@check
def vertex_wrong_project_and_region(ctx):
    e = expect_raises(genai_errors.ClientError, lambda: vertex_client(ctx, project="no-such-project").models.generate_content(model="gemini-2.5-flash", contents="hi"))
    assert e.code == 403 and e.status == "PERMISSION_DENIED" and e.message == "Permission denied on resource project no-such-project.", e
    assert e.details["error"]["details"][0]["reason"] == "CONSUMER_INVALID"
    e = expect_raises(genai_errors.ClientError, lambda: vertex_client(ctx, location="europe-west9").models.generate_content(model="gemini-2.5-flash", contents="hi"))
    assert e.code == 404 and e.status == "NOT_FOUND" and "not found" in e.message, e
    return "unknown project -> 403 PERMISSION_DENIED CONSUMER_INVALID; unknown location -> 404 NOT_FOUND Publisher Model ... not found."


@check
def vertex_token_expiry_and_refresh(ctx):
    key_file = os.path.join(ctx.tmp, "short-lived-key.json")
    fake = FakeCloud(ctx.up.port, key_file, token_lifetime=2)
    make_service_account(key_file, f"{fake.base}/token", PROJECT)  # its token_uri: this second fake
    try:
        creds = sa_credentials(ctx, key_file)
        ctx.up.sse(anthropic_answer(("text", ["one"])))
        vertex_client(ctx, creds=creds, fake=fake).models.generate_content(model="gemini-2.5-flash", contents="hi")
        old = creds.token
        assert fake.stats()["tokens_issued"]["google"] == 1
        time.sleep(2.5)
        status, _, body = fake.raw("POST", f"/v1/projects/{PROJECT}/locations/{REGION}/publishers/google/models/gemini-2.5-flash:generateContent",
                                   {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}, {"authorization": f"Bearer {old}", "content-type": "application/json"})
        assert status == 401 and body["error"]["status"] == "UNAUTHENTICATED" and body["error"]["details"][0]["reason"] == "ACCESS_TOKEN_EXPIRED", body
        ctx.up.sse(anthropic_answer(("text", ["two"])))
        r = vertex_client(ctx, creds=creds, fake=fake).models.generate_content(model="gemini-2.5-flash", contents="hi")
        assert r.text == "two" and creds.token != old
        assert fake.stats()["tokens_issued"]["google"] == 2
    finally:
        fake.stop()
    return "expired token -> 401 UNAUTHENTICATED ACCESS_TOKEN_EXPIRED; google-auth refreshed (tokens_issued 1 -> 2)"


@check
def vertex_bad_token(ctx):
    # google-genai sets Authorization itself from its credentials: a raw request carries a bogus token.
    status, headers, body = ctx.fake.raw("POST", f"/v1/projects/{PROJECT}/locations/{REGION}/publishers/google/models/m:generateContent",
                                         {"contents": [{"parts": [{"text": "x"}]}]}, {"authorization": "Bearer not-a-token"})
    assert status == 401 and body["error"]["status"] == "UNAUTHENTICATED", body
    status, _, body = ctx.fake.raw("POST", f"/v1/projects/{PROJECT}/locations/{REGION}/publishers/google/models/m:generateContent",
                                   {"contents": [{"parts": [{"text": "x"}]}]}, {})
    assert status == 401 and body["error"]["details"][0]["reason"] == "CREDENTIALS_MISSING", body
    return "bogus bearer -> 401 UNAUTHENTICATED; no bearer -> 401 CREDENTIALS_MISSING"


def anthropic_vertex(ctx, **kw):
    kw.setdefault("credentials", sa_credentials(ctx))
    return AnthropicVertex(region=REGION, project_id=PROJECT, base_url=ctx.fake.base + "/v1", max_retries=0, **kw)


CLAUDE = "claude-sonnet-4@20250514"


@check
def vertex_anthropic_stream(ctx):
    ctx.up.sse(anthropic_answer(("text", ["Bon", "jour"]), input_tokens=13, output_tokens=3))
    with anthropic_vertex(ctx).messages.stream(model=CLAUDE, max_tokens=64, messages=[{"role": "user", "content": "hi"}]) as s:
        texts = list(s.text_stream)
        final = s.get_final_message()
    assert texts == ["Bon", "jour"] and final.usage.input_tokens == 13 and final.usage.output_tokens == 3, (texts, final.usage)
    rec = ctx.fake.requests("vertex-anthropic")[-1]
    assert rec["path"] == f"/v1/projects/{PROJECT}/locations/{REGION}/publishers/anthropic/models/{CLAUDE}:streamRawPredict", rec["path"]
    assert rec["body"]["anthropic_version"] == anthropic._constants.ANTHROPIC_API_VERSION and "model" not in rec["body"], rec["body"]
    up = ctx.up.last()["body"]
    assert up["model"] == CLAUDE and "anthropic_version" not in up, up
    return f"{rec['path'].split('/publishers/')[1]} with anthropic_version {rec['body']['anthropic_version']}, no model in body"


@check
def vertex_anthropic_tools_thinking_image(ctx):
    ctx.up.sse(anthropic_answer(("thinking", ["hmm"], "sigV"), ("tool", "toolu_AV", "get_weather", {"city": "Rome"}), stop="tool_use"))
    client = anthropic_vertex(ctx)
    tools = [{"name": "get_weather", "description": "w", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    first = [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}},
                                          {"type": "text", "text": "Weather where this was taken?"}]}]
    m = client.messages.create(model=CLAUDE, max_tokens=2048, messages=first, tools=tools, thinking={"type": "enabled", "budget_tokens": 1024})
    assert [b.type for b in m.content] == ["thinking", "tool_use"] and m.content[0].signature == "sigV" and m.stop_reason == "tool_use", m
    assert ctx.fake.requests("vertex-anthropic")[-1]["path"].endswith(":rawPredict")
    assert ctx.up.last()["body"]["messages"][0]["content"][0]["source"]["data"] == PNG_B64
    ctx.up.sse(anthropic_answer(("text", ["Warm."])))
    client.messages.create(model=CLAUDE, max_tokens=2048, tools=tools, thinking={"type": "enabled", "budget_tokens": 1024}, messages=first + [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_AV", "content": "22C"}]}])
    msgs = ctx.up.last()["body"]["messages"]
    assert msgs[1]["content"][0]["type"] == "thinking" and msgs[2]["content"][0]["tool_use_id"] == "toolu_AV", msgs
    return "rawPredict: thinking block (signature kept), tool_use, image, tool_result id passed through"


@check
def vertex_anthropic_errors(ctx):
    ctx.up.status(429, "rate_limit_error", "slow down", {"retry-after": "3"})
    e = expect_raises(anthropic.RateLimitError, lambda: anthropic_vertex(ctx).messages.create(model=CLAUDE, max_tokens=5, messages=[{"role": "user", "content": "hi"}]))
    assert e.response.headers.get("retry-after") == "3" and e.body["error"]["status"] == "RESOURCE_EXHAUSTED", e.body
    ctx.up.status(529, "overloaded_error", "Overloaded")
    e = expect_raises(anthropic.APIStatusError, lambda: anthropic_vertex(ctx).messages.create(model=CLAUDE, max_tokens=5, messages=[{"role": "user", "content": "hi"}]))
    assert e.status_code == 529 and e.body == {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, e.body
    e = expect_raises(anthropic.AuthenticationError, lambda: anthropic_vertex(ctx, credentials=None, access_token="ya29.bogus").messages.create(
        model=CLAUDE, max_tokens=5, messages=[{"role": "user", "content": "hi"}]))
    assert e.status_code == 401
    creds = sa_credentials(ctx)
    creds.refresh(google.auth.transport.requests.Request())
    hdr = {"authorization": f"Bearer {creds.token}", "content-type": "application/json"}
    path = f"/v1/projects/{PROJECT}/locations/{REGION}/publishers/anthropic/models/{CLAUDE}:rawPredict"
    status, _, body = ctx.fake.raw("POST", path, {"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}, hdr)
    assert status == 400 and body["error"]["message"] == "anthropic_version: Field required", body
    status, _, body = ctx.fake.raw("POST", path, {"anthropic_version": "2023-06-01", "max_tokens": 5, "messages": []}, hdr)
    assert status == 400 and "vertex-2023-10-16" in body["error"]["message"], body
    return "429 -> RateLimitError (Google RESOURCE_EXHAUSTED body, retry-after 3); 529 passes through; bad token -> AuthenticationError; no anthropic_version -> 400"


# --- Bedrock (boto3) ---------------------------------------------------------------------------

MODEL_ID = "anthropic.claude-3-5-sonnet-20240620-v1:0"


def bedrock(ctx, key_id=AWS_KEY_ID, secret=AWS_SECRET, token=AWS_TOKEN, region=AWS_REGION):
    return boto3.client("bedrock-runtime", region_name=region, endpoint_url=ctx.fake.base, aws_access_key_id=key_id,
                        aws_secret_access_key=secret, aws_session_token=token,
                        config=Config(retries={"total_max_attempts": 1}, connect_timeout=5, read_timeout=30))


@check
def bedrock_converse_stream_text(ctx):
    ctx.up.sse(anthropic_answer(("text", ["Hi", " there"]), input_tokens=17, output_tokens=4, cache_read=2))
    r = bedrock(ctx).converse_stream(modelId=MODEL_ID, messages=[{"role": "user", "content": [{"text": "hello"}]}],
                                     system=[{"text": "Be terse"}], inferenceConfig={"maxTokens": 128, "temperature": 0.1, "stopSequences": ["STOP"]})
    events = list(r["stream"])
    names = [next(iter(e)) for e in events]
    assert names == ["messageStart", "contentBlockDelta", "contentBlockDelta", "contentBlockStop", "messageStop", "metadata"], names
    assert [e["contentBlockDelta"]["delta"]["text"] for e in events if "contentBlockDelta" in e] == ["Hi", " there"]
    assert events[4]["messageStop"]["stopReason"] == "end_turn"
    usage = events[5]["metadata"]["usage"]
    assert usage == {"inputTokens": 17, "outputTokens": 4, "totalTokens": 23, "cacheReadInputTokens": 2}, usage
    assert r["ResponseMetadata"]["HTTPHeaders"]["content-type"] == "application/vnd.amazon.eventstream"
    up = ctx.up.last()["body"]
    assert up["model"] == "claude-3-5-sonnet-20240620" and up["system"] == "Be terse" and up["max_tokens"] == 128 and up["stop_sequences"] == ["STOP"], up
    rec = ctx.fake.requests("bedrock")[-1]
    assert rec["path"] == "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse-stream" and rec["auth_ok"], rec["path"]
    assert rec["headers"]["x-amz-security-token"] == AWS_TOKEN
    return f"events {names}; usage {usage}"


@check
def bedrock_converse_and_profile(ctx):
    ctx.up.sse(anthropic_answer(("text", ["Whole"]), stop="max_tokens"))
    r = bedrock(ctx).converse(modelId="us." + MODEL_ID, messages=[{"role": "user", "content": [{"text": "hi"}]}])
    assert r["output"]["message"] == {"role": "assistant", "content": [{"text": "Whole"}]} and r["stopReason"] == "max_tokens", r
    assert r["usage"]["totalTokens"] == 20 and "latencyMs" in r["metrics"]
    assert ctx.up.last()["body"]["model"] == "claude-3-5-sonnet-20240620"
    return "converse (non-streamed) with an inference profile id"


@check
def bedrock_tool_round_trip(ctx):
    ctx.up.sse(anthropic_answer(("tool", "toolu_B1", "get_weather", {"city": "Lima"}), stop="tool_use"))
    client = bedrock(ctx)
    tool_config = {"tools": [{"toolSpec": {"name": "get_weather", "description": "w", "inputSchema": {"json": {"type": "object", "properties": {"city": {"type": "string"}}}}}}]}
    user = {"role": "user", "content": [{"text": "Lima?"}]}
    events = list(client.converse_stream(modelId=MODEL_ID, messages=[user], toolConfig=tool_config)["stream"])
    start = next(e["contentBlockStart"] for e in events if "contentBlockStart" in e)
    assert start == {"contentBlockIndex": 0, "start": {"toolUse": {"toolUseId": "toolu_B1", "name": "get_weather"}}}, start
    args = "".join(e["contentBlockDelta"]["delta"]["toolUse"]["input"] for e in events if "contentBlockDelta" in e)
    assert json.loads(args) == {"city": "Lima"} and events[-2]["messageStop"]["stopReason"] == "tool_use"
    ctx.up.sse(anthropic_answer(("text", ["Mild."])))
    r = client.converse(modelId=MODEL_ID, toolConfig=tool_config, messages=[
        user, {"role": "assistant", "content": [{"toolUse": {"toolUseId": "toolu_B1", "name": "get_weather", "input": {"city": "Lima"}}}]},
        {"role": "user", "content": [{"toolResult": {"toolUseId": "toolu_B1", "content": [{"json": {"temp": 19}}], "status": "success"}}]}])
    assert r["output"]["message"]["content"] == [{"text": "Mild."}]
    msgs = ctx.up.last()["body"]["messages"]
    assert msgs[1]["content"][0] == {"type": "tool_use", "id": "toolu_B1", "name": "get_weather", "input": {"city": "Lima"}}
    assert msgs[2]["content"][0] == {"type": "tool_result", "tool_use_id": "toolu_B1", "content": [{"type": "text", "text": '{"temp": 19}'}]}, msgs[2]
    assert ctx.up.last()["body"]["tools"][0]["input_schema"]["properties"]["city"] == {"type": "string"}
    return "contentBlockStart toolUse, toolUse.input deltas, stopReason tool_use; toolResult -> tool_result with id"


@check
def bedrock_reasoning(ctx):
    ctx.up.sse(anthropic_answer(("thinking", ["Step ", "one"], "sigB"), ("text", ["Done"])))
    client = bedrock(ctx)
    extra = {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    events = list(client.converse_stream(modelId=MODEL_ID, messages=[{"role": "user", "content": [{"text": "think"}]}],
                                         inferenceConfig={"maxTokens": 4000}, additionalModelRequestFields=extra)["stream"])
    deltas = [e["contentBlockDelta"]["delta"] for e in events if "contentBlockDelta" in e]
    assert deltas == [{"reasoningContent": {"text": "Step "}}, {"reasoningContent": {"text": "one"}},
                      {"reasoningContent": {"signature": "sigB"}}, {"text": "Done"}], deltas
    assert ctx.up.last()["body"]["thinking"] == extra["thinking"]
    ctx.up.sse(anthropic_answer(("thinking", ["Again"], "sigC"), ("text", ["Yes"])))
    r = client.converse(modelId=MODEL_ID, additionalModelRequestFields=extra, messages=[
        {"role": "user", "content": [{"text": "think"}]},
        {"role": "assistant", "content": [{"reasoningContent": {"reasoningText": {"text": "Step one", "signature": "sigB"}}}, {"text": "Done"}]},
        {"role": "user", "content": [{"text": "sure?"}]}])
    assert r["output"]["message"]["content"][0] == {"reasoningContent": {"reasoningText": {"text": "Again", "signature": "sigC"}}}, r["output"]
    assert ctx.up.last()["body"]["messages"][1]["content"][0] == {"type": "thinking", "thinking": "Step one", "signature": "sigB"}
    return "reasoningContent text/signature deltas; reasoningText round trip to a signed thinking block"


@check
def bedrock_image(ctx):
    ctx.up.sse(anthropic_answer(("text", ["pixel"])))
    bedrock(ctx).converse(modelId=MODEL_ID, messages=[{"role": "user", "content": [
        {"image": {"format": "png", "source": {"bytes": PNG}}}, {"text": "what?"}]}])
    block = ctx.up.last()["body"]["messages"][0]["content"][0]
    assert block == {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}}, block
    return "image bytes -> Anthropic base64 image block"


@check
def bedrock_throttled(ctx):
    for op in ("converse", "converse_stream"):
        ctx.up.status(429, "rate_limit_error", "slow down", {"retry-after": "5"})
        e = expect_raises(botocore.exceptions.ClientError, lambda: getattr(bedrock(ctx), op)(modelId=MODEL_ID, messages=[{"role": "user", "content": [{"text": "x"}]}]))
        err = e.response["Error"]
        assert err["Code"] == "ThrottlingException" and err["Message"] == "Too many requests, please wait before trying again.", err
        assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 429 and e.response["ResponseMetadata"]["HTTPHeaders"]["retry-after"] == "5"
    ctx.up.status(529, "overloaded_error", "Overloaded")
    e = expect_raises(botocore.exceptions.ClientError, lambda: bedrock(ctx).converse(modelId=MODEL_ID, messages=[{"role": "user", "content": [{"text": "x"}]}]))
    assert e.response["Error"]["Code"] == "ServiceUnavailableException" and e.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    return "429 -> ThrottlingException (both ops, retry-after kept); 529 -> ServiceUnavailableException 503"


@check
def bedrock_stream_exception(ctx):
    events = anthropic_answer(("text", ["part", "never"]))
    ctx.up.sse(events[:4] + [ev("error", error={"type": "rate_limit_error", "message": "Too many tokens"})])
    got = []

    def run():
        for e in bedrock(ctx).converse_stream(modelId=MODEL_ID, messages=[{"role": "user", "content": [{"text": "x"}]}])["stream"]:
            got.append(next(iter(e)))
    e = expect_raises(botocore.exceptions.EventStreamError, run)
    assert got == ["messageStart", "contentBlockDelta"] and e.response["Error"]["Code"] == "throttlingException", (got, e.response)
    return "mid-stream error -> exception message (:exception-type throttlingException) -> EventStreamError"


@check
def bedrock_auth_failures(ctx):
    msgs = [{"role": "user", "content": [{"text": "x"}]}]
    cases = [("wrong secret", dict(secret="wrong/secret"), "InvalidSignatureException", "The request signature we calculated does not match"),
             ("unknown key id", dict(key_id="AKIAUNKNOWN000000000"), "UnrecognizedClientException", "The security token included in the request is invalid."),
             ("no session token", dict(token=None), "UnrecognizedClientException", "The security token included in the request is invalid."),
             ("another region", dict(region="eu-west-1"), "InvalidSignatureException", "Credential should be scoped to a valid region.")]
    for label, kw, code, message in cases:
        e = expect_raises(botocore.exceptions.ClientError, lambda: bedrock(ctx, **kw).converse(modelId=MODEL_ID, messages=msgs))
        err = e.response["Error"]
        assert err["Code"] == code and err["Message"].startswith(message) and e.response["ResponseMetadata"]["HTTPStatusCode"] == 403, (label, err)
    assert ctx.fake.requests("bedrock")[-1]["upstream"] is None
    return "wrong secret/another region -> InvalidSignatureException; unknown key id/missing token -> UnrecognizedClientException (403)"


# --- Azure OpenAI (openai) ---------------------------------------------------------------------

AZ_TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "w", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def azure(ctx, **kw):
    kw.setdefault("api_key", AZ_KEY)
    return openai.AzureOpenAI(azure_endpoint=ctx.fake.base, api_version=kw.pop("api_version", AZ_API_VERSION), max_retries=0, **kw)


@check
def azure_stream_tools(ctx):
    ctx.up.sse(anthropic_answer(("thinking", ["hidden"], "sigZ"), ("text", ["Let me ", "check."]), ("tool", "toolu_Z1", "get_weather", {"city": "Bern"}),
                                stop="tool_use", input_tokens=30, output_tokens=12))
    chunks = list(azure(ctx).chat.completions.create(model=AZ_DEPLOYMENT, messages=[{"role": "system", "content": "sys"}, {"role": "user", "content": "Bern?"}],
                                                     tools=AZ_TOOLS, stream=True, stream_options={"include_usage": True}, max_tokens=256))
    first = chunks[0]
    assert first.choices == [] and first.prompt_filter_results[0]["prompt_index"] == 0, first
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Let me check.", text
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert calls[0].id == "toolu_Z1" and calls[0].function.name == "get_weather" and calls[0].index == 0
    assert json.loads("".join(tc.function.arguments or "" for tc in calls)) == {"city": "Bern"}
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["tool_calls"], finish
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (30, 12, 42), usage
    assert not any(getattr(c.choices[0].delta, "reasoning_content", None) for c in chunks if c.choices)
    up = ctx.up.last()["body"]
    assert up["system"] == "sys" and up["max_tokens"] == 256 and up["tools"][0]["name"] == "get_weather", up
    rec = ctx.fake.requests("azure")[-1]
    assert rec["path"] == f"/openai/deployments/{AZ_DEPLOYMENT}/chat/completions?api-version={AZ_API_VERSION}" and rec["headers"]["api-key"] == AZ_KEY
    return "first chunk choices=[] + prompt_filter_results; content deltas; tool_calls deltas (id=toolu_Z1); finish tool_calls; usage chunk; thinking dropped"


@check
def azure_tool_round_trip_and_image(ctx):
    ctx.up.sse(anthropic_answer(("text", ["Nice."])))
    r = azure(ctx).chat.completions.create(model=AZ_DEPLOYMENT, tools=AZ_TOOLS, messages=[
        {"role": "user", "content": [{"type": "text", "text": "Bern?"}, {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "toolu_Z1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Bern"}'}}]},
        {"role": "tool", "tool_call_id": "toolu_Z1", "content": "12C"}])
    assert r.choices[0].message.content == "Nice." and r.choices[0].finish_reason == "stop" and r.usage.total_tokens == 20, r
    msgs = ctx.up.last()["body"]["messages"]
    assert msgs[0]["content"][1] == {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}}, msgs[0]
    assert msgs[1]["content"] == [{"type": "tool_use", "id": "toolu_Z1", "name": "get_weather", "input": {"city": "Bern"}}]
    assert msgs[2]["content"] == [{"type": "tool_result", "tool_use_id": "toolu_Z1", "content": "12C"}], msgs[2]
    return "tool message -> tool_result with tool_call_id; image_url data URL -> image block"


@check
def azure_errors(ctx):
    e = expect_raises(openai.NotFoundError, lambda: azure(ctx).chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}]))
    assert e.code == "DeploymentNotFound", e.body
    e = expect_raises(openai.AuthenticationError, lambda: azure(ctx, api_key="wrong").chat.completions.create(model=AZ_DEPLOYMENT, messages=[{"role": "user", "content": "x"}]))
    assert e.status_code == 401 and e.body["message"].startswith("Access denied due to invalid subscription key"), e.body
    e = expect_raises(openai.BadRequestError, lambda: azure(ctx, api_version="2099-01-01").chat.completions.create(model=AZ_DEPLOYMENT, messages=[{"role": "user", "content": "x"}]))
    assert e.body["message"] == "API version not supported", e.body
    status, _, body = ctx.fake.raw("POST", f"/openai/deployments/{AZ_DEPLOYMENT}/chat/completions", {"messages": []}, {"api-key": AZ_KEY})
    assert status == 404 and body == {"error": {"code": "404", "message": "Resource not found"}}, body
    ctx.up.status(429, "rate_limit_error", "slow down", {"retry-after": "7"})
    e = expect_raises(openai.RateLimitError, lambda: azure(ctx).chat.completions.create(model=AZ_DEPLOYMENT, messages=[{"role": "user", "content": "x"}], stream=True))
    assert e.response.headers["retry-after"] == "7" and e.response.headers["retry-after-ms"] == "7000" and "retry after 7 seconds" in e.body["message"], e.body
    return "DeploymentNotFound 404, 401 invalid key, 400 API version not supported, 404 without api-version, 429 RateLimitError retry-after 7"


@check
def azure_mid_stream_error_and_cut(ctx):
    events = anthropic_answer(("text", ["part", "never"]))
    ctx.up.sse(events[:4] + [ev("error", error={"type": "overloaded_error", "message": "Overloaded"})])
    got = []

    def run():
        for c in azure(ctx).chat.completions.create(model=AZ_DEPLOYMENT, messages=[{"role": "user", "content": "x"}], stream=True):
            got.append(c.choices[0].delta.content if c.choices else None)
    expect_raises(openai.APIError, run)
    assert got == [None, "", "part"], got
    ctx.up.sse(anthropic_answer(("text", ["a", "b", "c"])), cut_after=5)
    got.clear()
    e = expect_raises(Exception, run)
    assert got == [None, "", "a", "b"], got
    return f"data: {{\"error\":...}} -> APIError; upstream cut -> {type(e).__name__}"


def entra_token(ctx, secret=AZ_SECRET):
    form = urllib.parse.urlencode({"client_id": AZ_CLIENT, "client_secret": secret, "scope": "https://cognitiveservices.azure.com/.default",
                                   "grant_type": "client_credentials"}).encode()
    with urllib.request.urlopen(urllib.request.Request(f"{ctx.fake.base}/{AZ_TENANT}/oauth2/v2.0/token", data=form), timeout=10) as r:
        return json.loads(r.read())


@check
def azure_entra_token(ctx):
    before = ctx.fake.stats()["tokens_issued"]["entra"]
    ctx.up.sse(anthropic_answer(("text", ["via Entra"])))
    r = azure(ctx, api_key=None, azure_ad_token_provider=lambda: entra_token(ctx)["access_token"]).chat.completions.create(
        model=AZ_DEPLOYMENT, messages=[{"role": "user", "content": "x"}])
    assert r.choices[0].message.content == "via Entra"
    assert ctx.fake.stats()["tokens_issued"]["entra"] == before + 1
    rec = ctx.fake.requests("azure")[-1]
    assert rec["headers"]["authorization"].startswith("Bearer ") and "api-key" not in rec["headers"] and rec["auth_ok"]
    try:
        entra_token(ctx, secret="wrong")
        raise AssertionError("wrong secret accepted")
    except urllib.error.HTTPError as e:
        body = json.loads(e.read())
        assert e.code == 401 and body["error"] == "invalid_client" and body["error_codes"] == [7000215], body
    e = expect_raises(openai.AuthenticationError, lambda: azure(ctx, api_key=None, azure_ad_token="forged").chat.completions.create(
        model=AZ_DEPLOYMENT, messages=[{"role": "user", "content": "x"}]))
    assert e.body["message"].startswith("Unauthorized. Access token is missing, invalid"), e.body
    return "azure_ad_token_provider fed by /{tenant}/oauth2/v2.0/token; bad secret -> 401 invalid_client AADSTS7000215; forged token -> 401"


@check
def azure_v1_api(ctx):
    client = openai.OpenAI(base_url=ctx.fake.base + "/openai/v1", api_key=AZ_KEY, max_retries=0)
    ctx.up.sse(anthropic_answer(("text", ["v1 ", "stream"])))
    chunks = list(client.chat.completions.create(model=AZ_DEPLOYMENT, messages=[{"role": "user", "content": "x"}], stream=True,
                                                 stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "v1 stream" and chunks[-1].usage.total_tokens == 20
    ctx.up.sse(anthropic_answer(("text", ["v1 whole"])))
    r = client.chat.completions.create(model=AZ_DEPLOYMENT, messages=[{"role": "user", "content": "x"}], max_completion_tokens=99)
    assert r.choices[0].message.content == "v1 whole" and ctx.up.last()["body"]["max_tokens"] == 99
    rec = ctx.fake.requests("azure")[-1]
    assert rec["path"] == "/openai/v1/chat/completions" and rec["headers"]["authorization"] == f"Bearer {AZ_KEY}", rec
    e = expect_raises(openai.NotFoundError, lambda: client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}]))
    assert e.code == "DeploymentNotFound"
    return "OpenAI(base_url=.../openai/v1): model = deployment, key as Bearer, stream + non-stream"


# --- the fake's own surface ----------------------------------------------------------------------

@check
def streams_are_not_buffered(ctx):
    """The upstream sends one event every 0.15 s: the first text must reach the SDK long before
    the answer ends (no buffering of the whole answer in any streaming route)."""
    delay, timings = 0.15, []
    msgs = [{"role": "user", "content": [{"text": "x"}]}]

    def vertex_anthropic_texts():
        with anthropic_vertex(ctx).messages.stream(model=CLAUDE, max_tokens=5, messages=[{"role": "user", "content": "x"}]) as s:
            yield from s.text_stream
    runs = {
        "gemini": lambda: (c.text for c in gemini_client(ctx).models.generate_content_stream(model="gemini-2.5-flash", contents="x")),
        "vertex": lambda: (c.text for c in vertex_client(ctx).models.generate_content_stream(model="gemini-2.5-flash", contents="x")),
        "vertex-anthropic": vertex_anthropic_texts,
        "bedrock": lambda: ("contentBlockDelta" in e for e in bedrock(ctx).converse_stream(modelId=MODEL_ID, messages=msgs)["stream"]),
        "azure": lambda: (c.choices[0].delta.content if c.choices else None for c in azure(ctx).chat.completions.create(
            model=AZ_DEPLOYMENT, messages=[{"role": "user", "content": "x"}], stream=True)),
    }
    for label, run in runs.items():
        ctx.up.sse(anthropic_answer(("text", ["first", "second", "third"])), delay=delay)
        t0, first = time.monotonic(), None
        for got in run():
            if got and first is None:
                first = time.monotonic() - t0
        total = time.monotonic() - t0
        assert first is not None and first < total - 3 * delay, (label, first, total)
        timings.append(f"{label} {first:.2f}s/{total:.2f}s")
    return "first text / end: " + ", ".join(timings)


@check
def client_gone_closes_upstream(ctx):
    ctx.up.sse(anthropic_answer(("text", ["x"] * 40)), delay=0.05)
    before = ctx.up.abandoned
    conn = __import__("http.client").client.HTTPConnection("127.0.0.1", ctx.fake.port, timeout=10)
    conn.request("POST", "/v1beta/models/m:streamGenerateContent?alt=sse", json.dumps({"contents": [{"parts": [{"text": "x"}]}]}),
                 {"x-goog-api-key": GEMINI_KEY, "content-type": "application/json"})
    r = conn.getresponse()
    assert r.read1(1024).startswith(b"data: ")
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    deadline = time.monotonic() + 5
    while ctx.up.abandoned == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ctx.up.abandoned == before + 1, "the upstream never saw the client go away"
    return "a client leaving mid-stream makes fake_cloud drop its upstream connection"


@check
def gemini_json_array_stream(ctx):
    ctx.up.sse(anthropic_answer(("text", ["arr", "ay"])))
    status, headers, body = ctx.fake.raw("POST", "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
                                         {"contents": [{"role": "user", "parts": [{"text": "x"}]}]},
                                         {"x-goog-api-key": GEMINI_KEY, "content-type": "application/json"})
    chunks = json.loads(body)
    assert status == 200 and [p["text"] for c in chunks for p in c["candidates"][0]["content"]["parts"]] == ["arr", "ay", ""], chunks
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP" and "usageMetadata" in chunks[-1]
    return "streamGenerateContent without alt=sse: one JSON array, element by element"


@check
def fake_stdout_and_stats(ctx):
    assert ctx.fake.line == f"listening 127.0.0.1:{ctx.fake.port}\n", ctx.fake.line
    stats = ctx.fake.stats()
    assert set(stats) == {"tokens_issued", "requests"} and stats["tokens_issued"]["google"] >= 1 and stats["requests"]["bedrock"] >= 1, stats
    rec = ctx.fake.requests("azure")[-1]
    assert {"provider", "method", "path", "headers", "body", "auth_ok", "upstream", "status"} <= set(rec)
    return f"stdout {ctx.fake.line.strip()!r}; stats {stats}"


class Ctx:
    pass


def main():
    ctx = Ctx()
    ctx.tmp = tempfile.mkdtemp(prefix="oracle-")
    ctx.notes = {}
    ctx.up = UpstreamFake()
    ctx.sa_file = os.path.join(ctx.tmp, "service-account.json")
    ctx.fake = FakeCloud(ctx.up.port, ctx.sa_file)
    # The key file is written after the fake started: its token_uri needs the fake's port.
    make_service_account(ctx.sa_file, f"{ctx.fake.base}/token", PROJECT)
    passed = failed = 0
    try:
        for fn in CHECKS:
            ctx.up.reset()
            try:
                detail = fn(ctx)
                passed += 1
                print(f"PASS {fn.__name__}: {detail}", flush=True)
            except Exception as e:
                failed += 1
                print(f"FAIL {fn.__name__}: {type(e).__name__}: {e}", flush=True)
                if os.environ.get("ORACLE_TRACEBACK"):
                    traceback.print_exc()
    finally:
        ctx.fake.stop()
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
