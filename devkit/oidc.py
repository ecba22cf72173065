"""A local OpenID Connect token endpoint for tests of SASL OAUTHBEARER: client credentials in, RS256 JWTs out.

``POST /token`` takes the OAuth 2 client credentials grant (client id and
secret in HTTP Basic authentication, or as form fields) and answers
``{"access_token": JWT, "token_type": "Bearer", "expires_in": N}``; the JWT's
``sub`` is the client id (Kafka's principal ``User:<client id>``) and its
``scope`` the requested scope. ``GET /jwks`` serves the public key as a JSON
Web Key Set, where a broker's ``OAuthBearerValidatorCallbackHandler`` checks
the signature. Unknown clients or wrong secrets get 401, as an identity
provider answers them.

Loopback only; a thread of the test process; stopped with :meth:`TokenIssuer.stop`.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.parse
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

KEY_ID = "kbackup-test-key"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _number(value: int) -> str:
    return _b64(value.to_bytes((value.bit_length() + 7) // 8, "big"))


class TokenIssuer:
    """An identity provider that knows the clients in ``clients`` (id -> secret)."""

    def __init__(self, clients: Mapping[str, str], *, lifetime: int = 3600) -> None:
        self.clients = dict(clients)
        self.lifetime = lifetime
        self.issued: list[str] = []  # the client ids tokens were issued to, in order
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != "/jwks":
                    self.send_error(404)
                    return
                self._json(200, issuer.jwks())

            def do_POST(self) -> None:
                if self.path != "/token":
                    self.send_error(404)
                    return
                length = int(self.headers.get("Content-Length") or 0)
                form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
                client, secret = form.get("client_id"), form.get("client_secret")
                basic = self.headers.get("Authorization", "")
                if basic.startswith("Basic "):
                    decoded = base64.b64decode(basic[6:]).decode()
                    client, _, secret = decoded.partition(":")
                client, secret = urllib.parse.unquote(client or ""), urllib.parse.unquote(secret or "")
                if form.get("grant_type") != "client_credentials" or issuer.clients.get(client) != secret:
                    self._json(401, {"error": "invalid_client"})
                    return
                issuer.issued.append(client)
                token = issuer.token(client, form.get("scope", ""))
                self._json(200, {"access_token": token, "token_type": "Bearer", "expires_in": issuer.lifetime})

            def _json(self, status: int, document: Any) -> None:
                body = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="kbackup-oidc", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def token_url(self) -> str:
        return f"{self.base_url}/token"

    @property
    def jwks_url(self) -> str:
        return f"{self.base_url}/jwks"

    def start(self) -> TokenIssuer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def jwks(self) -> dict[str, Any]:
        public = self._key.public_key().public_numbers()
        key = {
            "kty": "RSA",
            "use": "sig",
            "alg": "RS256",
            "kid": KEY_ID,
            "n": _number(public.n),
            "e": _number(public.e),
        }
        return {"keys": [key]}

    def token(self, subject: str, scope: str) -> str:
        now = int(time.time())
        header = {"alg": "RS256", "typ": "JWT", "kid": KEY_ID}
        claims = {"sub": subject, "iat": now, "exp": now + self.lifetime, "scope": scope, "iss": self.base_url}
        signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        signature = self._key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64(signature)}"
