"""A local push service (RFC 8030) for the tests: it takes messages over HTTPS on loopback as
Chrome's, Firefox's or Safari's would, checks each one's VAPID token (RFC 8292: ES256, the
audience its own origin with the port, an expiry within 24 hours, a mailto:/https: subject)
and decrypts it (RFC 8291, aes128gcm) with the keys of the subscription it made, using
http_ece. Before it says it is ready it proves itself against pywebpush, the reference sender:
a message pywebpush sends must be taken and decrypted to what was sent.

A second port, plain HTTP on loopback, is the test's: POST /subscriptions/{id} makes a
subscription (its endpoint and keys, as a browser's PushSubscription has them), GET /received
lists what was taken (decrypted, with the headers that matter and when, in seconds since
1970), POST /gone/{id} makes every
later message for it answer 410 Gone.

Usage: push_service.py CERT KEY CA  — prints "ready PUSH_PORT CONTROL_PORT" once proved."""

import base64
import json
import os
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import http_ece
import pywebpush
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric import utils as ecutils
from py_vapid import Vapid02


def b64d(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def b64e(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def verify_vapid(authorization, origin):
    """The token's claims and key, or ValueError saying what is wrong."""
    scheme, _, params = authorization.partition(" ")
    if scheme.lower() != "vapid":
        raise ValueError("not the vapid scheme: %r" % scheme)
    parts = dict(part.strip().split("=", 1) for part in params.split(","))
    head64, claims64, signature64 = parts["t"].split(".")
    head, claims = json.loads(b64d(head64)), json.loads(b64d(claims64))
    if head.get("alg") != "ES256":
        raise ValueError("alg %r" % head.get("alg"))
    signature = b64d(signature64)
    if len(signature) != 64:
        raise ValueError("an ES256 signature is r||s, 64 bytes")
    der = ecutils.encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
    key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), b64d(parts["k"]))
    try:
        key.verify(der, (head64 + "." + claims64).encode(), ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise ValueError("the signature does not verify")
    if claims.get("aud") != origin:
        raise ValueError("aud %r is not %r" % (claims.get("aud"), origin))
    now = time.time()
    if not now < int(claims.get("exp", 0)) <= now + 24 * 3600:
        raise ValueError("exp is not within 24 hours")
    if not str(claims.get("sub", "")).startswith(("mailto:", "https:")):
        raise ValueError("sub %r" % claims.get("sub"))
    return claims, parts["k"]


class Service:
    def __init__(self, cert, key):
        self.lock = threading.Lock()
        self.subscriptions, self.received, self.gone = {}, [], set()
        service = self

        class Push(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                code = service.take(self.path.rsplit("/", 1)[-1], self.headers, body)
                self.send_response(code)
                if code == 201:
                    self.send_header("Location", "/message/%d" % len(service.received))
                self.send_header("Content-Length", "0")
                self.end_headers()

        class Control(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def answer(self, value):
                data = json.dumps(value).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                with service.lock:
                    self.answer(service.received)

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                kind, _, name = self.path.strip("/").partition("/")
                if kind == "subscriptions":
                    self.answer(service.subscribe(name))
                elif kind == "gone":
                    with service.lock:
                        service.gone.add(name)
                    self.answer({})
                else:
                    self.send_response(404)
                    self.end_headers()

        self.push = ThreadingHTTPServer(("127.0.0.1", 0), Push)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.push.socket = context.wrap_socket(self.push.socket, server_side=True)
        self.origin = "https://127.0.0.1:%d" % self.push.server_address[1]
        self.control = ThreadingHTTPServer(("127.0.0.1", 0), Control)
        for server in (self.push, self.control):
            threading.Thread(target=server.serve_forever, daemon=True).start()

    def subscribe(self, name):
        private = ec.generate_private_key(ec.SECP256R1())
        public = private.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
        auth = os.urandom(16)
        with self.lock:
            self.subscriptions[name] = (private, auth)
        return {"endpoint": "%s/push/%s" % (self.origin, name), "keys": {"p256dh": b64e(public), "auth": b64e(auth)}}

    def take(self, name, headers, body):
        with self.lock:
            if name in self.gone:
                return 410
            found = self.subscriptions.get(name)
        if found is None:
            return 404
        if "TTL" not in headers:
            return 400
        if len(body) > 4096:
            return 413
        try:
            claims, key = verify_vapid(headers.get("Authorization", ""), self.origin)
        except (ValueError, KeyError) as error:
            print("VAPID refused:", error, flush=True)
            return 401
        if headers.get("Content-Encoding") != "aes128gcm":
            return 415
        private, auth = found
        try:
            plain = http_ece.decrypt(body, private_key=private, auth_secret=auth, version="aes128gcm")
        except Exception as error:  # what http_ece finds wrong is the test's finding
            print("cannot decrypt:", error, flush=True)
            return 400
        with self.lock:
            self.received.append({
                "subscription": name, "claims": claims, "key": key, "ttl": headers.get("TTL"),
                "urgency": headers.get("Urgency"), "topic": headers.get("Topic"), "data": plain.decode(),
                "length": len(body), "at": time.time(),
            })
        return 201


def prove(service, ca):
    """pywebpush's message is taken and decrypted to what it sent: the receiver reads RFC 8291
    and RFC 8292 as the reference sender writes them."""
    subscription = service.subscribe("pywebpush-oracle")
    vapid = Vapid02()
    vapid.generate_keys()
    session = pywebpush.requests.Session()
    session.trust_env = False
    session.verify = ca
    sent = "When I grow up, I want to be a watermelon"
    answer = pywebpush.webpush(subscription, sent, vapid_private_key=vapid, vapid_claims={"sub": "mailto:ops@example.org"},
                               ttl=60, headers={"Urgency": "high", "Topic": "oracle"}, requests_session=session)
    if answer.status_code != 201:
        sys.exit("the push service refused pywebpush's message: %d" % answer.status_code)
    taken = service.received.pop()
    if taken["data"] != sent or taken["urgency"] != "high" or taken["topic"] != "oracle":
        sys.exit("the push service read pywebpush's message wrong: %r" % taken)
    if taken["claims"]["aud"] != service.origin:
        sys.exit("pywebpush's audience %r is not %r" % (taken["claims"]["aud"], service.origin))


def main():
    cert, key, ca = sys.argv[1], sys.argv[2], sys.argv[3]
    service = Service(cert, key)
    prove(service, ca)
    print("ready %d %d" % (service.push.server_address[1], service.control.server_address[1]), flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
