"""What a context holds from the moment it is built, and what it forgets at once.

The server's context (``build_context``, which ``create_app`` calls) holds the log
key, the auth key and the write limiter from its start; admin and reader contexts
hold none and make no key file. Every revocation forgets the remembered identities
in the same call.
"""

from __future__ import annotations

import stat

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi.testclient import TestClient
from sqlalchemy import select

from quorumbench.api.app import create_app
from quorumbench.db.models import LogState
from quorumbench.errors import AuthenticationError, ConfigError
from quorumbench.services import sessions
from quorumbench.services.accounts import (
    Principal,
    TokenDigest,
    create_account,
    issue_token,
    revoke_token,
    token_hash,
)
from quorumbench.services.publiclog import signer_for
from quorumbench.services.ratelimit import WriteLimiter, count_write
from quorumbench.services.runner_keys import register_key, revoke_key
from quorumbench.services.runners import RunnerName, runner_for
from quorumbench.services.wiring import admin_context, build_context, reader_context

from .conftest import _settings


def test_the_server_context_holds_its_keys_and_limiter_from_its_start(db_url, tmp_path):
    ctx = build_context(_settings(db_url, tmp_path))
    try:
        assert ctx.log_signer is not None and ctx.auth_signer is not None
        assert ctx.log_signer.key_id != ctx.auth_signer.key_id  # one key, one job
        with ctx.db.read() as session:
            assert session.scalars(select(LogState.key_id)).one() == ctx.log_signer.key_id
        auth_file = tmp_path / "auth-signing-key.pem"  # made at the start, before any login
        assert stat.S_IMODE(auth_file.stat().st_mode) == 0o600
        assert sessions.load_auth_key(ctx.settings).key_id == ctx.auth_signer.key_id
        assert isinstance(ctx.rate_limiter, WriteLimiter)
    finally:
        ctx.close()
    again = build_context(_settings(db_url, tmp_path))  # a restart reads the same keys
    try:
        assert again.auth_signer is not None and again.log_signer is not None
        assert (again.auth_signer.key_id, again.log_signer.key_id) == (
            ctx.auth_signer.key_id,
            ctx.log_signer.key_id,
        )
    finally:
        again.close()


def test_without_a_write_limit_there_is_no_limiter_and_writes_are_not_counted(make_ctx):
    ctx = make_ctx(write_rate_limit="")
    assert ctx.rate_limiter is None
    for _ in range(3):
        count_write(ctx, Principal(1, "alice", False, frozenset()))


def test_unusable_rate_limit_settings_refuse_the_start(tmp_path):
    with pytest.raises(ConfigError, match="invalid rate limit settings 'lots'"):
        build_context(
            _settings(f"sqlite:///{tmp_path / 'qb.db'}", tmp_path, write_rate_limit="lots")
        )
    assert list(tmp_path.iterdir()) == []  # refused before the database or a key was made


def test_admin_and_reader_contexts_hold_no_key_and_make_none(tmp_path):
    url = f"sqlite:///{tmp_path / 'server' / 'qb.db'}"
    (tmp_path / "server").mkdir()
    build_context(_settings(url, tmp_path / "server")).close()
    settings = _settings(url, tmp_path / "admin")  # the admin's data dir has no key
    principal = Principal(1, "alice", False, frozenset({"task:pull"}))
    for ctx in (admin_context(settings), reader_context(settings)):
        try:
            assert (ctx.log_signer, ctx.auth_signer, ctx.rate_limiter) == (None, None, None)
            with pytest.raises(ConfigError, match="holds no log signing key.*never sign"):
                signer_for(ctx)
            with pytest.raises(ConfigError, match="holds no auth signing key"):
                sessions.auth_signer_for(ctx)
            with pytest.raises(ConfigError, match="holds no rate limiter"):
                count_write(ctx, principal)
            app = create_app(settings, context=ctx, run_scheduler=False)
            with pytest.raises(ConfigError, match="cannot serve"), TestClient(app):
                pass
        finally:
            ctx.close()
    assert not (tmp_path / "admin").exists()  # no key file, nor the folder for one


def _public_hex() -> str:
    public = Ed25519PrivateKey.generate().public_key()
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def test_every_revocation_forgets_the_remembered_identities_at_once(make_ctx):
    ctx = make_ctx()
    create_account(ctx, "alice")
    token = issue_token(ctx, "alice").token
    principal = sessions.authenticate(ctx, token)
    remembered = TokenDigest(token_hash(token))
    runner = RunnerName(principal.account_id, "box")

    def remember_runner() -> None:
        runner_for(ctx, principal, "box")
        assert ctx.identities.get(runner) is not None

    login = sessions.login_with_api_token(ctx, token, None)
    access = login["access_token"]
    assert sessions.authenticate(ctx, access).name == "alice"
    session_key = sessions.SessionId(jwt.decode(access, options={"verify_signature": False})["sid"])
    assert ctx.identities.get(session_key) is not None
    sessions.revoke(ctx, login["refresh_token"])
    assert ctx.identities.get(session_key) is None
    with pytest.raises(AuthenticationError, match="revoked"):
        sessions.authenticate(ctx, access)

    remember_runner()
    first = register_key(ctx, principal, "box", _public_hex())  # a new key revokes older ones
    assert ctx.identities.get(runner) is None
    remember_runner()
    revoke_key(ctx, principal, "box", first["key_id"])
    assert ctx.identities.get(runner) is None

    sessions.authenticate(ctx, token)
    assert ctx.identities.get(remembered) is not None
    revoke_token(ctx, token[:10])
    assert ctx.identities.get(remembered) is None
    with pytest.raises(AuthenticationError, match="revoked"):
        sessions.authenticate(ctx, token)
