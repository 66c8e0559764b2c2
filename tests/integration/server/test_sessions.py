"""Access JWTs: issued for an API token or an OIDC ID token; every forgery refused.

A local OIDC issuer (an RSA key, its JWKS served over HTTP on 127.0.0.1) stands in
for a provider. Every attack is tried on every protected endpoint.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi.testclient import TestClient

from quorumbench.api.app import create_app
from quorumbench.services.accounts import create_account, issue_token
from quorumbench.services.sessions import auth_signer_for
from quorumbench.settings import OidcIssuer

from .conftest import fake_metadata
from .test_api import auth

ISSUER = "https://issuer.test"
OIDC_AUDIENCE = "quorumbench-test"

PROTECTED = [
    ("POST", "/v0/models", {"ref": "hf:org/x@" + "1" * 40}),
    ("POST", "/v0/leases", {"runner": "box"}),
    ("POST", "/v0/leases/1/heartbeat", {"attempt": 1}),
    ("DELETE", "/v0/leases/1?attempt=1", None),
    ("POST", "/v0/runners/box/keys", {"public_key": "00" * 32}),
    ("GET", "/v0/runners/box/keys", None),
    ("GET", "/v0/me/quota", None),
]


@pytest.fixture(scope="module")
def issuer():
    """A local OIDC issuer: an RSA key and its JWKS over HTTP."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    body = json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]}).encode()

    class JWKS(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), JWKS)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    yield key, f"http://127.0.0.1:{server.server_address[1]}/jwks"
    server.shutdown()
    server.server_close()


def id_token(key, **overrides) -> str:
    now = int(time.time())
    claims = {
        "iss": ISSUER,
        "aud": OIDC_AUDIENCE,
        "sub": "user-42",
        "preferred_username": "Octo.Cat",
        "iat": now,
        "exp": now + 300,
        **overrides,
    }
    return jwt.encode(
        {k: v for k, v in claims.items() if v is not None},
        key,
        algorithm="RS256",
        headers={"kid": "k1"},
    )


@pytest.fixture
def app(make_ctx, tmp_path, issuer):
    _, jwks_url = issuer
    ctx = make_ctx(
        f"sqlite:///{tmp_path / 'auth.db'}",
        oidc_issuers=[OidcIssuer(issuer=ISSUER, audience=OIDC_AUDIENCE, jwks_url=jwks_url)],
    )
    ctx.inspector = fake_metadata
    create_account(ctx, "alice")
    api_token = issue_token(ctx, "alice", scopes=("task:pull", "task:submit")).token
    with TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False)) as client:
        yield client, ctx, api_token


def login(client, **body):
    return client.post("/v0/auth/token", json=body)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def test_an_api_token_opens_a_session_with_at_most_its_scopes(app):
    client, _, api_token = app
    session = login(client, api_token=api_token).json()
    assert session["token_type"] == "Bearer" and session["expires_in"] == 900
    assert session["scope"] == "task:pull task:submit"
    assert client.get("/v0/me/quota", headers=auth(session["access_token"])).status_code == 200
    narrower = login(client, api_token=api_token, scopes=["task:pull"]).json()
    answer = client.post(
        "/v0/runners/box/keys",
        json={"public_key": "00" * 32},
        headers=auth(narrower["access_token"]),
    )
    assert answer.status_code == 403 and "task:submit" in answer.json()["detail"]
    wider = login(client, api_token=api_token, scopes=["model:register"])
    assert wider.status_code == 403 and "model:register" in wider.json()["detail"]
    admin = login(client, api_token=api_token, scopes=["admin"])
    assert admin.status_code == 403


def test_refresh_rotates_and_revoke_ends_every_token_of_the_session(app):
    client, _, api_token = app
    first = login(client, api_token=api_token).json()
    second = client.post("/v0/auth/refresh", json={"refresh_token": first["refresh_token"]}).json()
    assert second["refresh_token"] != first["refresh_token"]
    spent = client.post("/v0/auth/refresh", json={"refresh_token": first["refresh_token"]})
    assert spent.status_code == 401
    for token in (first["access_token"], second["access_token"]):
        assert client.get("/v0/me/quota", headers=auth(token)).status_code == 200
    revoked = client.post("/v0/auth/revoke", json={"refresh_token": second["refresh_token"]})
    assert revoked.status_code == 204
    for token in (first["access_token"], second["access_token"]):
        answer = client.get("/v0/me/quota", headers=auth(token))
        assert answer.status_code == 401 and "revoked" in answer.json()["detail"]
    again = client.post("/v0/auth/refresh", json={"refresh_token": second["refresh_token"]})
    assert again.status_code == 401


def test_an_oidc_id_token_opens_a_session_for_a_linked_account(app, issuer):
    client, ctx, _ = app
    key, _ = issuer
    first = login(client, id_token=id_token(key))
    assert first.status_code == 200, first.text
    me = client.get("/v0/me/quota", headers=auth(first.json()["access_token"]))
    assert me.status_code == 200
    again = login(client, id_token=id_token(key)).json()  # the same identity, one account
    claims = jwt.decode(again["access_token"], options={"verify_signature": False})
    first_claims = jwt.decode(first.json()["access_token"], options={"verify_signature": False})
    assert claims["sub"] == first_claims["sub"] and claims["name"] == "octo.cat"
    other = Ed25519PrivateKey.generate()
    refused = {
        "expired": id_token(key, exp=int(time.time()) - 10),
        "missing exp": id_token(key, exp=None),
        "wrong audience": id_token(key, aud="someone-else"),
        "unknown issuer": id_token(key, iss="https://elsewhere.test"),
        "alg none": jwt.encode(
            {
                "iss": ISSUER,
                "aud": OIDC_AUDIENCE,
                "sub": "x",
                "iat": int(time.time()),
                "exp": int(time.time()) + 60,
            },
            None,
            algorithm="none",
        ),
        "wrong key": jwt.encode(
            {
                "iss": ISSUER,
                "aud": OIDC_AUDIENCE,
                "sub": "x",
                "iat": int(time.time()),
                "exp": int(time.time()) + 60,
            },
            other,
            algorithm="EdDSA",
            headers={"kid": "k1"},
        ),
    }
    for why, token in refused.items():
        answer = login(client, id_token=token)
        assert answer.status_code == 401, (why, answer.text)


def forgeries(ctx, valid: str) -> dict[str, str]:
    """Access tokens an attacker could make, each of which must be refused."""
    now = ctx.now()  # the server's (fake) clock decides expiry, whatever today's date is
    public_pem = (
        auth_signer_for(ctx)
        .key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    claims = jwt.decode(valid, options={"verify_signature": False})
    own = auth_signer_for(ctx).key
    head, body, sig = valid.split(".")
    tampered_claims = {**claims, "scope": "task:pull task:submit model:register admin"}
    tampered = f"{head}.{b64(json.dumps(tampered_claims).encode())}.{sig}"
    flipped = sig[:-2] + ("A" if sig[-2] != "A" else "B") + sig[-1]
    # the classic confusion: HMAC keyed with the (public) verification key
    hs256_header = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    signing_input = f"{hs256_header}.{body}"
    mac = hmac.new(public_pem, signing_input.encode(), hashlib.sha256).digest()
    hmac_with_public = f"{signing_input}.{b64(mac)}"
    return {
        "alg none": jwt.encode(claims, None, algorithm="none"),
        "HS256 signed with the public key": hmac_with_public,
        "another key": jwt.encode(claims, Ed25519PrivateKey.generate(), algorithm="EdDSA"),
        "expired": jwt.encode(
            {**claims, "exp": int((now - timedelta(days=2)).timestamp())}, own, algorithm="EdDSA"
        ),
        "missing exp": jwt.encode(
            {k: v for k, v in claims.items() if k != "exp"}, own, algorithm="EdDSA"
        ),
        "wrong audience": jwt.encode({**claims, "aud": "elsewhere"}, own, algorithm="EdDSA"),
        "wrong issuer": jwt.encode({**claims, "iss": "someone"}, own, algorithm="EdDSA"),
        "tampered payload": tampered,
        "flipped signature": f"{head}.{body}.{flipped}",
        "unknown session": jwt.encode({**claims, "sid": 999999}, own, algorithm="EdDSA"),
    }


def test_every_forged_access_token_is_refused_on_every_protected_endpoint(app):
    client, ctx, api_token = app
    valid = login(client, api_token=api_token).json()["access_token"]
    # the server's own clock decides expiry: the tokens above use the test's fake clock
    for why, token in forgeries(ctx, valid).items():
        for method, path, body in PROTECTED:
            answer = client.request(method, path, json=body, headers=auth(token))
            assert answer.status_code == 401, (why, method, path, answer.text)
            assert answer.headers["content-type"].startswith("application/problem+json")


def test_a_missing_scope_is_a_403_naming_it_on_every_protected_endpoint(app):
    client, _, api_token = app
    pull_only = login(client, api_token=api_token, scopes=["task:pull"]).json()["access_token"]
    answer = client.post(
        "/v0/models", json={"ref": "hf:org/x@" + "1" * 40}, headers=auth(pull_only)
    )
    assert answer.status_code == 403 and "model:register" in answer.json()["detail"]
    answer = client.post(
        "/v0/runners/box/keys", json={"public_key": "00" * 32}, headers=auth(pull_only)
    )
    assert answer.status_code == 403 and "task:submit" in answer.json()["detail"]


def _accounts(ctx) -> list[str]:
    from sqlalchemy import select

    from quorumbench.db.models import Account

    with ctx.db.read() as session:
        return list(session.scalars(select(Account.name).order_by(Account.id)))


def test_a_first_login_that_loses_the_race_gets_the_winners_account(make_ctx, monkeypatch):
    """Two first logins of one identity at once: both find no link, both try to make
    one. Played in order here: the other login links the identity between this one's
    check and its write; this one's account and link roll back together."""
    from quorumbench.services import sessions

    ctx = make_ctx()
    winner = sessions.login_with_identity(ctx, "https://github.com", "42", "octocat").account
    real = sessions._linked
    calls = []

    def missed_once(*args):
        calls.append(args)
        return None if len(calls) == 1 else real(*args)

    monkeypatch.setattr(sessions, "_linked", missed_once)
    loser = sessions.login_with_identity(ctx, "https://github.com", "42", "octocat")
    assert loser.account.id == winner.id and len(calls) == 2
    assert _accounts(ctx) == ["octocat"]  # no orphan account left behind


def test_concurrent_first_logins_of_one_identity_share_one_account(make_ctx, db_url):
    from quorumbench.services.sessions import login_with_identity

    ctx = make_ctx(db_url)
    start = threading.Barrier(6)
    got: list[int] = []
    failed: list[BaseException] = []

    def log_in() -> None:
        start.wait(5)
        try:
            got.append(login_with_identity(ctx, "https://github.com", "7", "hubot").account.id)
        except BaseException as exc:  # the test reports it
            failed.append(exc)

    threads = [threading.Thread(target=log_in) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not failed, failed
    assert len(got) == 6 and len(set(got)) == 1
    assert _accounts(ctx) == ["hubot"]
