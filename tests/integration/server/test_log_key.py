"""One log key across replicas and restores; key rotation that ``verify`` follows.

A second replica (or a restored server) with another key, or with none, must refuse
to start instead of signing a second history; changing the key on purpose is an
explicit rotation that both keys sign and the verifier follows from its pinned key.
"""

from __future__ import annotations

import json

import httpx
import pytest
from rich.console import Console
from sqlalchemy import select
from typer.testing import CliRunner

from quorumbench.api.app import create_app
from quorumbench.api.embedded import EmbeddedServer
from quorumbench.cli.app import app as cli
from quorumbench.cli.verify_cmd import verify
from quorumbench.db.models import LogState, TreeHead
from quorumbench.errors import ConfigError, ServiceUnavailableError
from quorumbench.services import keys, publiclog
from quorumbench.services.wiring import build_context

from .conftest import _settings, fake_metadata
from .test_public_log import finalize


def _replica(url, data_dir, **overrides):
    return build_context(_settings(url, data_dir, **overrides))


def test_a_replica_without_the_key_refuses_to_start(db_url, tmp_path):
    first = _replica(db_url, tmp_path / "a")
    try:
        key_id = publiclog.signer_for(first).key_id
        with pytest.raises(ConfigError) as refused:
            _replica(db_url, tmp_path / "b")
        message = refused.value.message
        assert f"there is no log signing key at {tmp_path / 'b' / 'log-signing-key.pem'}" in message
        assert f"signed by key {key_id}" in message and "every replica" in message
        assert not (tmp_path / "b" / "log-signing-key.pem").exists()  # none was made
    finally:
        first.close()


def test_a_replica_with_another_key_refuses_to_start(db_url, tmp_path):
    first = _replica(db_url, tmp_path / "a")
    first.close()
    other = tmp_path / "other.pem"
    keys.make_key_file(other)
    with pytest.raises(ConfigError) as refused:
        _replica(db_url, tmp_path / "b", log_key_file=other)
    assert "quorumbench log rotate-key" in refused.value.message
    assert publiclog.load_signer(other).key_id in refused.value.message


def test_replicas_share_one_key_by_file_or_by_secret(db_url, tmp_path):
    first = _replica(db_url, tmp_path / "a")
    pem = (tmp_path / "a" / "log-signing-key.pem").read_text()
    by_file = _replica(db_url, tmp_path / "b", log_key_file=tmp_path / "a" / "log-signing-key.pem")
    by_secret = _replica(db_url, tmp_path / "c", log_key=pem)
    try:
        ids = {publiclog.signer_for(c).key_id for c in (first, by_file, by_secret)}
        assert len(ids) == 1
        assert publiclog.key_location(by_secret.settings).startswith("QB_LOG_KEY")
    finally:
        for c in (first, by_file, by_secret):
            c.close()


def test_a_moved_key_file_refuses_the_restart(tmp_path):
    url = f"sqlite:///{tmp_path / 'qb.db'}"
    _replica(url, tmp_path).close()
    (tmp_path / "log-signing-key.pem").rename(tmp_path / "elsewhere.pem")
    with pytest.raises(ConfigError, match="there is no log signing key"):
        _replica(url, tmp_path)
    restarted = _replica(url, tmp_path, log_key_file=tmp_path / "elsewhere.pem")
    restarted.close()


def test_qb_log_key_and_qb_log_key_file_together_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="not both"):
        _settings("sqlite://", tmp_path, log_key="x", log_key_file=tmp_path / "k.pem")


def test_rotation_hands_the_log_to_the_new_key(db_url, tmp_path):
    old = _replica(db_url, tmp_path / "a")
    try:
        new_file = tmp_path / "new.pem"
        keys.make_key_file(new_file)
        new = publiclog.load_signer(new_file)
        rotation = publiclog.rotate_key(old, new)
        assert (rotation.size, rotation.new_key_id) == (0, new.key_id)
        with old.db.read_connection() as conn:
            assert conn.execute(select(LogState.key_id)).scalar() == new.key_id
        # the replica still holding the old key may not sign (a 503 for the runner)
        with (
            pytest.raises(ServiceUnavailableError, match="rotated"),
            old.db.write_connection() as conn,
        ):
            publiclog.append(old, conn, 1, {"x": 1}, old.now())
        with pytest.raises(ConfigError, match="has id"):
            _replica(db_url, tmp_path / "a")  # a restart with the old key is refused
        rotated = _replica(db_url, tmp_path / "b", log_key_file=new_file)
        try:
            with pytest.raises(ConfigError, match="nothing to rotate"):
                publiclog.rotate_key(rotated, new)
        finally:
            rotated.close()
    finally:
        old.close()


def test_verify_follows_a_rotation_from_the_pinned_key(ctx, people, tmp_path):
    ctx.inspector = lambda ref: fake_metadata(ref)
    state = tmp_path / "verify.json"
    new_file = tmp_path / "new.pem"
    with EmbeddedServer(create_app(ctx.settings, context=ctx, run_scheduler=False)) as server:
        finalize(server, people, 1)
        first = verify(server.url, state, Console())
        assert first.problems == []
        pinned = json.loads(state.read_text())["public_key"]

        result = CliRunner().invoke(
            cli,
            [
                "log",
                "rotate-key",
                "--new-key-file",
                str(new_file),
                "--database-url",
                ctx.settings.sqlalchemy_url,
                "--data-dir",
                str(ctx.settings.data_dir),
            ],
        )
        assert result.exit_code == 0, result.output
        assert "rotated after tree size 1" in " ".join(result.output.split())
        ctx.log_signer = publiclog.load_signer(new_file)  # the operator restarts with it
        finalize(server, people, 2)

        keys = httpx.get(server.url + "/v0/log/keys").json()
        assert [r["size"] for r in keys["rotations"]] == [1]
        assert keys["current"]["public_key"] == ctx.log_signer.public_hex
        assert keys["rotations"][0]["old_public_key"] == pinned
        with ctx.db.read_connection() as conn:
            signed = dict(conn.execute(select(TreeHead.size, TreeHead.key_id)).all())
        assert signed[1] != signed[2] == ctx.log_signer.key_id

        after = verify(server.url, state, Console())
        assert after.problems == [] and after.key_rotations == 1 and after.size == 2
        assert json.loads(state.read_text())["public_key"] == ctx.log_signer.public_hex

        # A key swapped without a rotation signed by the pinned key is reported.
        with ctx.db.write_connection() as conn:
            conn.execute(publiclog.LogKeyRotation.__table__.delete())
        fresh = verify(server.url, tmp_path / "fresh.json", Console()).problems
        assert fresh == []  # a verifier that never saw the old key cannot tell
        state.write_text(json.dumps({"public_key": pinned, "heads": []}))
        found = [str(p) for p in verify(server.url, state, Console()).problems]
        assert any("no rotation signed by the pinned key" in p for p in found)
