"""``Idempotency-Key`` on ``POST /v0/pools`` and ``POST /v0/ledger/mint`` (SQLite and
PostgreSQL): a retry does nothing again and answers the first result; the key with
another body is 422 and changes nothing; concurrent twins make one pool; keys are per
account; a refused request records nothing; a malformed key is refused."""

from __future__ import annotations

import threading

from sqlalchemy import func, select

from quorumbench.db.idempotency_models import IdempotencyKey

from .test_api import assert_problem, auth
from .test_pools_api import MINTED, pool_body, world  # noqa: F401 (a fixture)


def _post(world, path, body, who, key):  # noqa: F811
    headers = auth(world.tokens[who]) | ({"Idempotency-Key": key} if key else {})
    return world.client.post(path, json=body, headers=headers)


def _keys(world) -> int:  # noqa: F811
    with world.ctx.db.read() as session:
        return session.scalar(select(func.count()).select_from(IdempotencyKey)) or 0


def test_a_retried_pool_creation_funds_one_pool(world):  # noqa: F811
    body = pool_body(world)
    first = _post(world, "/v0/pools", body, "alice", "k-1")
    assert first.status_code == 201, first.text
    assert "Idempotent-Replayed" not in first.headers
    again = _post(world, "/v0/pools", body, "alice", "k-1")
    assert again.status_code == 201 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["Location"] == first.headers["Location"]
    assert world.balance("alice") == MINTED - body["funds"]
    assert world.counts()[0] == 1
    # the same key with another request: refused, nothing done
    before = world.counts()
    other = _post(world, "/v0/pools", pool_body(world, funds=5), "alice", "k-1")
    assert_problem(other, 422, "idempotency-key-reused", "another request")
    assert world.counts() == before and world.balance("alice") == MINTED - body["funds"]
    # without a key, or with a new one, it is a new pool
    assert _post(world, "/v0/pools", body, "alice", None).status_code == 201
    assert _post(world, "/v0/pools", body, "alice", "k-2").status_code == 201
    assert world.counts()[0] == 3 and _keys(world) == 2


def test_a_refusal_records_nothing_and_keys_are_per_account(world):  # noqa: F811
    too_much = pool_body(world, funds=MINTED + 1)
    assert_problem(_post(world, "/v0/pools", too_much, "alice", "k"), 409, "insufficient-funds")
    assert _keys(world) == 0
    fixed = pool_body(world)
    assert _post(world, "/v0/pools", fixed, "alice", "k").status_code == 201  # the key is free
    # bob's "k" is his own: refused for his own reason (no funds), not as a replay
    assert_problem(_post(world, "/v0/pools", fixed, "bob", "k"), 409, "insufficient-funds")
    bad = _post(world, "/v0/pools", fixed, "alice", "not a key!")
    assert_problem(bad, 422, "invalid-request")
    assert world.counts()[0] == 1


def test_concurrent_twins_make_one_pool(world):  # noqa: F811
    body = pool_body(world)
    start = threading.Barrier(4)
    answers = []

    def send() -> None:
        start.wait()
        answers.append(_post(world, "/v0/pools", body, "alice", "twin"))

    threads = [threading.Thread(target=send) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [a.status_code for a in answers] == [201] * 4, [a.text for a in answers]
    assert len({a.json()["id"] for a in answers}) == 1
    assert sum(a.headers.get("Idempotent-Replayed") == "true" for a in answers) == 3
    assert world.counts()[0] == 1 and world.balance("alice") == MINTED - body["funds"]


def test_a_retried_mint_mints_once(world):  # noqa: F811
    body = {"account": "bob", "amount": 500, "memo": "payment 42"}
    first = _post(world, "/v0/ledger/mint", body, "admin", "pay-42")
    assert first.status_code == 201, first.text
    again = _post(world, "/v0/ledger/mint", body, "admin", "pay-42")
    assert again.status_code == 201 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json() and world.balance("bob") == 500
    other = _post(world, "/v0/ledger/mint", body | {"amount": 501}, "admin", "pay-42")
    assert_problem(other, 422, "idempotency-key-reused")
    assert world.balance("bob") == 500
