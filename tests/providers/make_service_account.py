#!/usr/bin/env python3
"""Writes a Google service-account JSON key file with a fresh RSA 2048 key whose token_uri
points at fake_cloud.py's OAuth2 endpoint, so google-auth (or any client) exchanges its JWT
there and never at oauth2.googleapis.com.

  python3 make_service_account.py --out key.json --token-uri http://127.0.0.1:PORT/token [--project P]

fake_cloud.py reads the file at each /token request, so it can be written after the fake
started (it needs the fake's port for token_uri). Needs `cryptography` (see README.md).
"""

import argparse
import json
import os
import secrets

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa


def make_service_account(path, token_uri, project_id="baaaht-test-project", client_email=None):
    """Writes the key file at `path` and returns its contents as a dict."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    client_email = client_email or f"baaaht-test@{project_id}.iam.gserviceaccount.com"
    info = {
        "type": "service_account",
        "project_id": project_id,
        "private_key_id": secrets.token_hex(20),
        "private_key": pem,
        "client_email": client_email,
        "client_id": str(100000000000000000000 + secrets.randbelow(10**20)),
        # Only token_uri is ever used by google-auth for a service account's access token;
        # the other URLs are what a real key file carries and are never requested.
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": token_uri,
        "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
        "client_x509_cert_url": f"https://www.googleapis.com/robot/v1/metadata/x509/{client_email.replace('@', '%40')}",
        "universe_domain": "googleapis.com",
    }
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(info, f, indent=2)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)  # atomic: the fake never reads half a file
    return info


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--token-uri", required=True, help="e.g. http://127.0.0.1:PORT/token")
    ap.add_argument("--project", default="baaaht-test-project")
    ap.add_argument("--client-email")
    args = ap.parse_args()
    make_service_account(args.out, args.token_uri, args.project, args.client_email)


if __name__ == "__main__":
    main()
