#!/usr/bin/env python3
"""A git smart-HTTP server over TLS on loopback, for the skill install tests: Python's
http.server in front of `git http-backend` (as a web server runs it, by CGI).

Usage: git-https-server.py ROOT CERT KEY PORTFILE [REDIRECT]

Serves the repositories under ROOT over https://127.0.0.1:PORT (PORT written to PORTFILE once
listening). A path under /moved/ answers 301 to REDIRECT followed by the rest of the path.
Each request is printed, so a test can tell whether anything reached the server at all.

With BIND in the environment it listens on that address instead. With AUTH ("user:password"),
every request must carry it as HTTP Basic (else 401 asks for it, as a forge does), and each
request's Authorization header is printed as the server received it. /echo answers "ok" with
the Authorization header echoed in X-Echo; /echo-all echoes it in every form it may travel in;
/echo-edges in its status line and a trailer, compressed under chunked when the request asks
for it with TE (or with ?gzip, whatever the request asks).
With STATIC (a folder), paths under /simple/ and /files/ are its files (a folder's
index.html for a folder), as a Python package index serves them.
"""
import base64
import gzip
import http.server
import json
import urllib.parse
import os
import ssl
import subprocess
import sys

root, cert, key, portfile = sys.argv[1:5]
redirect = sys.argv[5] if len(sys.argv) > 5 else None


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.serve()

    def do_POST(self):
        self.serve()

    def serve(self):
        print(f"request {self.command} {self.path}", flush=True)
        received = self.headers.get("Authorization")
        if received:
            print(f"authorization {received}", flush=True)
            if received.startswith("Basic "):
                print(f"basic {base64.b64decode(received[6:]).decode(errors='replace')}", flush=True)
        if self.path == "/echo":
            self.send_response(200)
            # As some servers do: the request's credential echoed back.
            self.send_header("X-Echo", received or "")
            self.send_header("Content-Length", "3")
            self.end_headers()
            self.wfile.write(b"ok\n")
            return
        if self.path == "/echo-all":
            # As an echoing API or an error page might: the credential in every form, in the
            # headers (one with a byte that is not UTF-8 before it) and the body, and the body
            # sent in chunks of three bytes, so each form is cut across chunks.
            value = (received or "").encode()
            body = json.dumps({
                "authorization": received or "",
                "base64": base64.b64encode(value).decode(),
                "base64url": base64.urlsafe_b64encode(b"x" + value).decode(),
                "hex": value.hex(),
                "percent": urllib.parse.quote(received or "", safe=""),
                "every-byte": "".join("%%%02X" % b for b in value),
                "reversed": (received or "")[::-1],
                "base32": base64.b32encode(value).decode(),
                "html": "".join("&#%d;" % b for b in value),
                "cut": (received or "")[:-2] + "...",
                "mime": base64.encodebytes(b"Authorization: " + value).decode(),
            })
            # And as JSON may hold it: every character a \\u escape.
            body = (body[:-1] + ', "json-u": "' + "".join("\\u%04x" % b for b in value) + '"}').encode()
            self.send_response(200)
            self.send_header("X-Echo-B64", base64.b64encode(value).decode())
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self._headers_buffer.append(b"X-Echo-Bin: \xff" + value + b"\r\n")
            self.end_headers()
            for at in range(0, len(body), 3):
                piece = body[at:at + 3]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
            return
        if self.path.startswith("/echo-edges"):
            te = self.headers.get("TE", "")
            print(f"te {te}", flush=True)
            body = b"body: " + (received or "").encode() + b"\n"
            compressed = "gzip" in te or self.path.endswith("?gzip")
            self.send_response(200, "OK " + (received or ""))
            self.send_header("Trailer", "X-Echo-Trailer")
            self.send_header("Transfer-Encoding", "gzip, chunked" if compressed else "chunked")
            self.end_headers()
            if compressed:
                body = gzip.compress(body)
            self.wfile.write(b"%x\r\n%s\r\n0\r\n" % (len(body), body))
            self.wfile.write(b"X-Echo-Trailer: " + (received or "").encode() + b"\r\n\r\n")
            return
        static = os.environ.get("STATIC")
        if static and self.path.startswith(("/simple/", "/files/")):
            path = os.path.join(static, self.path.lstrip("/").split("?")[0])
            if os.path.isdir(path):
                path = os.path.join(path, "index.html")
            if not os.path.isfile(path):
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            with open(path, "rb") as f:
                content = f.read()
            self.send_response(200)
            kind = "text/html" if path.endswith(".html") else "application/octet-stream"
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)
            return
        wanted = os.environ.get("AUTH")
        if wanted and received != "Basic " + base64.b64encode(wanted.encode()).decode():
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if redirect and self.path.startswith("/moved/"):
            self.send_response(301)
            self.send_header("Location", redirect + self.path[len("/moved"):])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        path, _, query = self.path.partition("?")
        length = int(self.headers.get("Content-Length") or 0)
        # git sends small request bodies with a length (chunked only past http.postBuffer).
        body = self.rfile.read(length) if length else b""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": root,
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "REQUEST_METHOD": self.command,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
            "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
            "REMOTE_ADDR": "127.0.0.1",
        }
        out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True).stdout
        ends = [(out.find(sep), sep) for sep in (b"\r\n\r\n", b"\n\n") if out.find(sep) >= 0]
        at, sep = min(ends)
        head, content = out[:at], out[at + len(sep):]
        status, headers = 200, []
        for line in head.decode().replace("\r", "").split("\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer((os.environ.get("BIND", "127.0.0.1"), 0), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
server.socket = context.wrap_socket(server.socket, server_side=True)
with open(portfile + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(portfile + ".tmp", portfile)
server.serve_forever()
