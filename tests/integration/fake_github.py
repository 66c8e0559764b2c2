"""A local stand-in for GitHub's OAuth endpoints, over real HTTP on 127.0.0.1.

* ``GET /login/oauth/authorize``: "logs in" ``user`` at once (or declines, with
  ``decline``) and redirects back with ``code`` and ``state``; the PKCE challenge
  must be S256.
* ``POST /login/oauth/access_token``: checks the client id and secret, the code
  (single use, for the redirect URI it was issued to) and that the ``code_verifier``
  hashes (SHA-256, base64url) to the code's challenge; the device grant answers from
  the device code's script: ``authorization_pending``, ``slow_down``, ``access_denied``,
  ``expired_token`` or ``ok``. Errors come with status 200, as GitHub sends them, and
  a body in JSON only when the request accepts it.
* ``POST /login/device/code``: a device code, a user code and ``interval``.
* ``GET /user``: the user of a bearer access token.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from quorumbench.settings import OAuthProvider

CLIENT_ID = "Iv1.fakeclientid"
CLIENT_SECRET = "fake-client-secret"
USER_CODE = "WDJB-MJHT"


def s256(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


class FakeGitHub:
    """State of the fake: who logs in, what was asked, what each device code answers."""

    def __init__(self) -> None:
        self.user: dict[str, Any] = {"id": 4242, "login": "octocat", "name": "Mona"}
        self.decline = False
        self.device_script = ["authorization_pending", "ok"]
        self.device_interval = 5
        self.codes: dict[str, dict[str, Any]] = {}
        self.devices: dict[str, dict[str, Any]] = {}
        self.tokens: dict[str, dict[str, Any]] = {}
        self.authorize_requests: list[dict[str, str]] = []
        self.token_requests: list[dict[str, str]] = []
        self.device_polls: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeGitHub:
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def provider(self, **overrides: Any) -> OAuthProvider:
        """The ``github`` preset with every URL pointed here."""
        settings = {
            "name": "github",
            "client_id": CLIENT_ID,
            "client_secret": CLIENT_SECRET,
            "authorize_url": f"{self.url}/login/oauth/authorize",
            "token_url": f"{self.url}/login/oauth/access_token",
            "device_code_url": f"{self.url}/login/device/code",
            "user_url": f"{self.url}/user",
            **overrides,
        }
        return OAuthProvider(**settings)

    # --- the endpoints ---------------------------------------------------------------

    def authorize(self, query: dict[str, str]) -> str:
        """Where the browser is redirected (the person logs in at once)."""
        self.authorize_requests.append(query)
        redirect = query["redirect_uri"]
        if query.get("client_id") != CLIENT_ID:
            raise ValueError("unknown client_id")
        if query.get("code_challenge_method") != "S256" or not query.get("code_challenge"):
            raise ValueError("PKCE S256 required")
        if self.decline:
            reply = {"error": "access_denied", "state": query["state"]}
        else:
            code = secrets.token_hex(10)
            self.codes[code] = {
                "challenge": query["code_challenge"],
                "redirect_uri": redirect,
                "user": dict(self.user),
            }
            reply = {"code": code, "state": query["state"]}
        return f"{redirect}?{urlencode(reply)}"

    def access_token(self, form: dict[str, str]) -> dict[str, Any]:
        self.token_requests.append(form)
        if form.get("client_id") != CLIENT_ID:
            return {"error": "incorrect_client_credentials"}
        if form.get("grant_type") == "urn:ietf:params:oauth:grant-type:device_code":
            return self._device_token(form)
        if form.get("client_secret") != CLIENT_SECRET:
            return {
                "error": "incorrect_client_credentials",
                "error_description": "The client_id and/or client_secret passed are incorrect.",
            }
        issued = self.codes.pop(form.get("code", ""), None)
        if issued is None:
            return {"error": "bad_verification_code", "error_description": "unknown code"}
        if form.get("redirect_uri") != issued["redirect_uri"]:
            return {"error": "redirect_uri_mismatch"}
        if s256(form.get("code_verifier", "")) != issued["challenge"]:
            return {
                "error": "bad_verification_code",
                "error_description": "the code_verifier does not match the code_challenge",
            }
        return self._token(issued["user"])

    def _token(self, user: dict[str, Any]) -> dict[str, Any]:
        token = "gho_" + secrets.token_hex(18)
        self.tokens[token] = user
        return {"access_token": token, "token_type": "bearer", "scope": ""}

    def _device_token(self, form: dict[str, str]) -> dict[str, Any]:
        device = self.devices.get(form.get("device_code", ""))
        if device is None:
            return {"error": "incorrect_device_code"}
        outcome = device["script"].pop(0) if device["script"] else "incorrect_device_code"
        self.device_polls.append((form["device_code"], outcome))
        if outcome == "ok":
            return self._token(device["user"])
        if outcome == "slow_down":
            device["interval"] += 5
            return {"error": "slow_down", "interval": device["interval"]}
        return {"error": outcome}

    def device_code(self, form: dict[str, str]) -> dict[str, Any]:
        if form.get("client_id") != CLIENT_ID:
            return {"error": "incorrect_client_credentials"}
        code = secrets.token_hex(20)
        self.devices[code] = {
            "script": list(self.device_script),
            "user": dict(self.user),
            "interval": self.device_interval,
        }
        return {
            "device_code": code,
            "user_code": USER_CODE,
            "verification_uri": f"{self.url}/login/device",
            "expires_in": 900,
            "interval": self.device_interval,
        }

    def who(self, authorization: str) -> dict[str, Any] | None:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() not in ("bearer", "token"):
            return None
        return self.tokens.get(token)


def _handler(fake: FakeGitHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
            wants_json = "application/json" in self.headers.get("Accept", "")
            data = (json.dumps(body) if wants_json else urlencode(body)).encode()
            self.send_response(status)
            self.send_header(
                "Content-Type",
                "application/json" if wants_json else "application/x-www-form-urlencoded",
            )
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            with fake.lock:
                if parts.path == "/login/oauth/authorize":
                    try:
                        location = fake.authorize(query)
                    except (KeyError, ValueError) as exc:
                        self._send(400, {"error": str(exc)}, {})
                        return
                    self.send_response(302)
                    self.send_header("Location", location)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif parts.path == "/user":
                    user = fake.who(self.headers.get("Authorization", ""))
                    if user is None:
                        self._send(401, {"message": "Bad credentials"}, {})
                    else:
                        self._send(200, user, {})
                else:
                    self._send(404, {"message": "Not Found"}, {})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length).decode()
            form = {k: v[0] for k, v in parse_qs(raw).items()}
            with fake.lock:
                if self.path == "/login/oauth/access_token":
                    self._send(200, fake.access_token(form), {})
                elif self.path == "/login/device/code":
                    self._send(200, fake.device_code(form), {})
                else:
                    self._send(404, {"message": "Not Found"}, {})

        def log_message(self, *_: object) -> None:
            pass

    return Handler
