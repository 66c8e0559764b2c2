"""Two server replicas on one PostgreSQL and one Redis, as docs/server.md's "Running in
production" sets them up: one log key (a file both name), the Redis queue and shared
rate-limit windows. Runner processes of some accounts talk to one replica, the others
to the other, so every task reaches consensus across replicas. Then both serve one log
key and ``quorumbench verify`` passes against either; a third replica started without
the key refuses to start instead of signing a second history.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from dataclasses import replace

import httpx
import pytest
import redis
from rich.console import Console

from quorumbench.cli.verify_cmd import verify

from ..queue.conftest import REDIS_URL, unavailable
from .harness import (
    SERVER_ENV,
    Fleet,
    ServerProcess,
    check_invariants,
    check_leaderboard_api,
    database,
    describe,
    free_port,
    progress,
    seed,
    settings_for,
    wait_until,
)

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

N_MODELS = 30


@pytest.fixture
def stream():
    """A Redis stream of this test's own, deleted afterwards."""
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3)
    try:
        client.ping()
    except redis.RedisError as exc:
        unavailable(f"Redis is unreachable at {REDIS_URL}: {exc}")
    name = f"qb:replicas:{secrets.token_hex(4)}"
    yield name
    client.delete(name, f"{name}:outstanding")
    client.close()


def test_two_replicas_share_one_log_key_and_both_verify(tmp_path, pg_url, stream):
    shared = {
        "QB_QUEUE__BACKEND": "redis",
        "QB_QUEUE__REDIS_URL": REDIS_URL,
        "QB_QUEUE__STREAM": stream,
        "QB_RATE_LIMIT_STORAGE": REDIS_URL,
    }
    accounts = ["acct1", "acct2", "acct3", "acct4"]
    world = seed(settings_for(tmp_path / "a", pg_url), N_MODELS, accounts)
    key = tmp_path / "a" / "log-signing-key.pem"  # made by the first start (the seeding)
    replicas = []
    for name, extra in (("a", {}), ("b", {"QB_LOG_KEY_FILE": str(key)})):
        workdir = tmp_path / f"work-{name}"
        workdir.mkdir()
        own = replace(
            world, settings=world.settings.model_copy(update={"data_dir": tmp_path / name})
        )
        replicas.append(ServerProcess(workdir, own, free_port(), {**shared, **extra}))
    a, b = replicas
    fleets = [
        Fleet(a.workdir, a.url, {n: world.tokens[n] for n in accounts[:2]}, per_account=1),
        Fleet(b.workdir, b.url, {n: world.tokens[n] for n in accounts[2:]}, per_account=1),
    ]
    with database(pg_url) as db:
        try:
            for replica in replicas:
                replica.start()
            for fleet in fleets:
                fleet.start()
            wait_until(
                lambda: progress(db) == (N_MODELS, N_MODELS),
                240,
                "every task to be finalized across both replicas",
                lambda: describe(db, fleets[0], a) + "\n" + describe(db, fleets[1], b),
            )
        finally:
            for fleet in fleets:
                fleet.stop()
        stats = check_invariants(db, world, fleets[0].journal() + fleets[1].journal())
        assert stats["results"] == 3 * N_MODELS

        keys = [httpx.get(r.url + "/v0/log/key").json() for r in replicas]
        assert keys[0] == keys[1]
        for replica in replicas:
            check_leaderboard_api(replica.url, world)
            health = httpx.get(replica.url + "/v0/health").json()
            assert health["status"] == "ok", health
            assert health["checks"]["queue"]["detail"].startswith("redis ")
        # one verifier state, pinned on replica a, holds on replica b too
        state = tmp_path / "verify.json"
        for replica in (a, b, a):
            report = verify(replica.url, state, Console(), None)
            assert report.problems == [], report.problems
            assert report.size == N_MODELS and report.signatures_checked == 3 * N_MODELS

        # a third replica that was not given the key refuses to start
        env = {k: v for k, v in os.environ.items() if not k.startswith("QB_")}
        env.update({**SERVER_ENV, **shared})
        refused = subprocess.run(
            [sys.executable, "-m", "quorumbench.cli.app", "serve", "--port", str(free_port())]
            + ["--database-url", pg_url, "--data-dir", str(tmp_path / "c")],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        for replica in replicas:
            replica.stop()
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert f"there is no log signing key at {tmp_path / 'c' / 'log-signing-key.pem'}" in (
        " ".join(refused.stderr.split())
    )
    assert "Traceback" not in refused.stderr
    assert not (tmp_path / "c" / "log-signing-key.pem").exists()
    for replica in replicas:
        log = (replica.workdir / "server-1.log").read_text()
        assert "event=lease.granted" in log and "event=result.accepted" in log
