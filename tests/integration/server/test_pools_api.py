"""The prize-pool API (``/v0/pools``) on SQLite and PostgreSQL: create (funds into
escrow), list, show, join; every bad input a clear 4xx that changes nothing (funds
above the balance, fractional, negative or boolean amounts, an end before the start,
an unknown rule or bad parameters, someone else's model, a join after the deadline,
the same weights twice); cancel by an admin only, which refunds; the OpenAPI document."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update

from quorumbench.api.app import create_app
from quorumbench.db.models import Model
from quorumbench.db.pool_models import LedgerEntry, Pool, PoolEntry
from quorumbench.services import ledger
from quorumbench.services.accounts import create_account, issue_token

from .conftest import fake_metadata, hub_ref
from .test_api import assert_problem, auth

MINTED = 1_000_000
DAY = 86_400


class World:
    def __init__(self, ctx: Any, client: TestClient, tokens: dict[str, str], ids: dict[str, int]):
        self.ctx = ctx
        self.client = client
        self.tokens = tokens
        self.ids = ids

    def post(self, path: str, body: Any, who: str | None) -> Any:
        return self.client.post(path, json=body, headers=auth(self.tokens[who]) if who else {})

    def balance(self, who: str) -> int:
        return ledger.balance(self.ctx, ledger.account_holder(self.ids[who]))

    def register(self, who: str, n: int) -> int:
        answer = self.post("/v0/models", {"ref": hub_ref(n)}, who)
        assert answer.status_code == 201, answer.text
        model_id: int = answer.json()["id"]
        return model_id

    def counts(self) -> tuple[int, int, int]:
        """Pools, entries and ledger lines: what a refusal must leave as it was."""
        with self.ctx.db.read() as session:
            return (
                session.scalar(select(func.count()).select_from(Pool)) or 0,
                session.scalar(select(func.count()).select_from(PoolEntry)) or 0,
                session.scalar(select(func.count()).select_from(LedgerEntry)) or 0,
            )


@pytest.fixture
def world(make_ctx, db_url):
    ctx = make_ctx(db_url, registrations_per_week=10)
    ctx.inspector = lambda ref: fake_metadata(ref, weights=ref.encode().hex()[-64:])
    ids = {"admin": create_account(ctx, "admin", is_admin=True).id}
    tokens = {"admin": issue_token(ctx, "admin", scopes=("admin",)).token}
    for name in ("alice", "bob", "carol"):
        ids[name] = create_account(ctx, name).id
        tokens[name] = issue_token(ctx, name).token
    tokens["pull-only"] = issue_token(ctx, "alice", scopes=("task:pull",), name="pull").token
    ledger.mint(ctx, admin_id=ids["admin"], account_name="alice", amount=MINTED, memo="test")
    with TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False)) as client:
        yield World(ctx, client, tokens, ids)


def pool_body(world: World, **changes: Any) -> dict[str, Any]:
    now = world.ctx.now()
    body: dict[str, Any] = {
        "title": "Sums for small models",
        "description": "A test pool.",
        "funds": 100_000,
        "rule": "ArithmeticDecrease",
        "rule_params": {"k": 3},
        "ties": "exact",
        "benchmarks": ["arith"],
        "starts_at": now.isoformat(),
        "join_deadline": (now + timedelta(days=7)).isoformat(),
        "ends_at": (now + timedelta(days=14)).isoformat(),
    }
    body.update(changes)
    return body


def create(world: World, who: str = "alice", **changes: Any) -> dict[str, Any]:
    answer = world.post("/v0/pools", pool_body(world, **changes), who)
    assert answer.status_code == 201, answer.text
    made: dict[str, Any] = answer.json()
    return made


def test_create_list_show_and_join(world):
    answer = world.post("/v0/pools", pool_body(world), "alice")
    assert answer.status_code == 201, answer.text
    pool = answer.json()
    assert answer.headers["location"] == f"/v0/pools/{pool['id']}"
    assert pool["funds"] == 100_000 and pool["funder"] == "alice"
    assert pool["rule"] == "ArithmeticDecrease" and pool["rule_params"]["k"] == 3
    assert pool["phase"] == "open" and pool["status"] == "active" and pool["n_entries"] == 0
    assert pool["url"] == f"/pools/{pool['id']}"
    # the escrow holds the funds; the funder's balance lost them
    assert world.balance("alice") == MINTED - 100_000
    assert ledger.balance(world.ctx, ledger.pool_holder(pool["id"])) == 100_000
    mine = world.client.get("/v0/ledger/me", headers=auth(world.tokens["alice"])).json()
    assert mine["balance"] == MINTED - 100_000
    fund = mine["entries"][0]
    assert (fund["reason"], fund["amount"], fund["pool_id"]) == ("fund", -100_000, pool["id"])

    listed = world.client.get("/v0/pools").json()
    assert [p["id"] for p in listed] == [pool["id"]]
    assert [p["id"] for p in world.client.get("/v0/pools?phase=open").json()] == [pool["id"]]
    assert world.client.get("/v0/pools?phase=settled").json() == []
    assert_problem(world.client.get("/v0/pools?phase=soon"), 422, "invalid-request")

    model = world.register("bob", 1)
    joined = world.post(f"/v0/pools/{pool['id']}/entries", {"model": model}, "bob")
    assert joined.status_code == 201, joined.text
    entry = joined.json()
    assert entry["model_id"] == model and entry["account"] == "bob"
    # by ref too (a second model of bob's: one entry per account is the default)
    second = create(world, title="Second pool", funds=1_000)
    by_ref = world.post(f"/v0/pools/{second['id']}/entries", {"model": hub_ref(1)}, "bob")
    assert by_ref.status_code == 201, by_ref.text

    detail = world.client.get(f"/v0/pools/{pool['id']}").json()
    assert detail["pool"]["n_entries"] == 1
    assert [e["id"] for e in detail["entries"]] == [entry["id"]]
    assert detail["payout_record"] is None
    assert isinstance(detail["board"], list) and isinstance(detail["payouts"], list)
    assert "quorumbench verify" in detail["verify"]
    for row in detail["board"]:
        assert row["ci_low"] <= row["score"] <= row["ci_high"]
        assert row["rank_best"] <= row["rank"] <= row["rank_worst"]
    if detail["payouts"]:
        assert sum(p["amount"] for p in detail["payouts"]) in (0, 100_000)
    assert_problem(world.client.get("/v0/pools/9999"), 404, "not-found")


@pytest.mark.parametrize(
    "funds",
    [12.5, "12", True, -5, 0, 1e3, None, 2**63],
    ids=["fraction", "string", "bool", "negative", "zero", "float", "null", "huge"],
)
def test_funds_that_are_not_a_positive_integer_are_refused(world, funds):
    before = world.counts()
    answer = world.post("/v0/pools", pool_body(world, funds=funds), "alice")
    body = assert_problem(answer, 422, "invalid-request")
    assert any(issue["loc"][-1] == "funds" for issue in body["errors"]), body
    assert world.counts() == before and world.balance("alice") == MINTED


def test_funds_above_the_balance_move_nothing(world):
    before = world.counts()
    answer = world.post("/v0/pools", pool_body(world, funds=MINTED + 1), "alice")
    assert_problem(answer, 409, "insufficient-funds")
    # carol has no credits at all
    assert_problem(
        world.post("/v0/pools", pool_body(world, funds=1), "carol"), 409, "insufficient-funds"
    )
    assert world.counts() == before and world.balance("alice") == MINTED
    assert world.client.get("/v0/pools").json() == []


def _bad_bodies(world: World) -> dict[str, dict[str, Any]]:
    now = world.ctx.now()
    return {
        "end before start": pool_body(
            world,
            starts_at=(now + timedelta(days=2)).isoformat(),
            ends_at=(now + timedelta(days=1)).isoformat(),
            join_deadline=(now + timedelta(days=1)).isoformat(),
        ),
        "end equals start": pool_body(world, ends_at=now.isoformat(), join_deadline=None),
        "deadline after end": pool_body(
            world, join_deadline=(now + timedelta(days=30)).isoformat()
        ),
        "naive time": pool_body(
            world, ends_at=(now + timedelta(days=3)).replace(tzinfo=None).isoformat()
        ),
        "unknown rule": pool_body(world, rule="EarliestWins"),
        "unknown tie policy": pool_body(world, ties="first-come"),
        "k zero": pool_body(world, rule_params={"k": 0}),
        "q above one": pool_body(world, rule="Geometric", rule_params={"q": 2}),
        "unknown parameter": pool_body(world, rule_params={"z": 1}),
        "boolean parameter": pool_body(world, rule_params={"k": True}),
        "no benchmark": pool_body(world, benchmarks=[]),
        "unknown field": pool_body(world, prize="all of it"),
        "bad sha256": pool_body(world, final_sha256="abc"),
        "period too short": pool_body(world, period_s=1),
        "fractional period": pool_body(world, period_s=3600.5),
        "kind": pool_body(world, kinds=["pickle"]),
    }


def test_bad_pools_are_refused_and_change_nothing(world):
    before = world.counts()
    for name, body in _bad_bodies(world).items():
        answer = world.post("/v0/pools", body, "alice")
        assert answer.status_code == 422, (name, answer.text)
        assert answer.headers["content-type"].startswith("application/problem+json"), name
    # a benchmark the server does not run: a 4xx too
    unknown = world.post("/v0/pools", pool_body(world, benchmarks=["no-such-bench"]), "alice")
    assert 400 <= unknown.status_code < 500, unknown.text
    assert world.counts() == before and world.balance("alice") == MINTED


def test_creating_needs_a_credential_with_the_register_scope(world):
    assert_problem(world.post("/v0/pools", pool_body(world), None), 401, "unauthenticated")
    answer = world.post("/v0/pools", pool_body(world), "pull-only")
    assert_problem(answer, 403, "forbidden", "model:register")
    assert world.balance("alice") == MINTED


def test_join_refusals_change_nothing(world):
    pool = create(world)
    path = f"/v0/pools/{pool['id']}/entries"
    bobs = world.register("bob", 1)
    carols = world.register("carol", 2)
    assert world.post(path, {"model": bobs}, "bob").status_code == 201
    before = world.counts()
    # someone else's model
    assert_problem(world.post(path, {"model": carols}, "bob"), 403, "forbidden")
    # the same model again
    assert_problem(world.post(path, {"model": bobs}, "bob"), 409, "duplicate-entry")
    # another model with the weights bob entered, under another account (the registry
    # holds each weights hash once, so bob's row is given another hash first: the entry
    # keeps the hash it entered with)
    with world.ctx.db.write() as session:
        weights = session.get(Model, bobs).weights_sha256
        session.execute(update(Model).where(Model.id == bobs).values(weights_sha256="f" * 64))
        session.execute(update(Model).where(Model.id == carols).values(weights_sha256=weights))
    assert_problem(world.post(path, {"model": carols}, "carol"), 409, "duplicate-entry")
    # no such model, no such pool, a bad body
    assert_problem(world.post(path, {"model": 9999}, "bob"), 404, "not-found")
    assert_problem(world.post("/v0/pools/9999/entries", {"model": bobs}, "bob"), 404, "not-found")
    assert_problem(world.post(path, {"model": bobs, "x": 1}, "bob"), 422, "invalid-request")
    assert_problem(world.post(path, {"model": True}, "bob"), 422, "invalid-request")
    assert_problem(world.post(path, {"model": bobs}, None), 401, "unauthenticated")
    assert world.counts() == before


def test_a_join_after_the_deadline_is_refused(world, clock):
    pool = create(world)
    model = world.register("bob", 1)
    clock.advance(8 * DAY)  # past the join deadline, before the end
    before = world.counts()
    answer = world.post(f"/v0/pools/{pool['id']}/entries", {"model": model}, "bob")
    assert answer.status_code in (409, 422), answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert world.counts() == before


def test_only_an_admin_cancels_and_the_escrow_goes_back(world):
    pool = create(world)
    path = f"/v0/pools/{pool['id']}/cancel"
    before = world.counts()
    for who in ("bob", "alice"):  # a trainer; the funder herself
        assert_problem(world.post(path, {"reason": "no"}, who), 403, "forbidden", "admin")
    assert_problem(world.post(path, {"reason": "no"}, None), 401, "unauthenticated")
    assert_problem(world.post(path, {}, "admin"), 422, "invalid-request")
    assert world.counts() == before and world.balance("alice") == MINTED - 100_000
    answer = world.post(path, {"reason": "wrong benchmark"}, "admin")
    assert answer.status_code == 200, answer.text
    cancelled = answer.json()
    assert cancelled["phase"] == "cancelled" and cancelled["cancel_reason"] == "wrong benchmark"
    assert world.balance("alice") == MINTED
    assert ledger.balance(world.ctx, ledger.pool_holder(pool["id"])) == 0
    refund = world.client.get("/v0/ledger/me", headers=auth(world.tokens["alice"])).json()
    assert refund["entries"][0]["reason"] == "refund" and refund["balance"] == MINTED
    assert ledger.check_ledger(world.ctx) == []
    assert [p["id"] for p in world.client.get("/v0/pools?phase=cancelled").json()] == [pool["id"]]
    # twice: a conflict, no second refund
    assert_problem(world.post(path, {"reason": "again"}, "admin"), 409, "conflict")
    assert world.balance("alice") == MINTED
    # a cancelled pool takes no entries
    model = world.register("bob", 1)
    joined = world.post(f"/v0/pools/{pool['id']}/entries", {"model": model}, "bob")
    assert joined.status_code in (409, 422), joined.text


def test_only_the_funder_reveals(world):
    pool = create(world, final_sha256="a" * 64)
    path = f"/v0/pools/{pool['id']}/reveal"
    final = {
        "spec": {
            "format": "exact-match",
            "data": {"url": "https://example.org/final.jsonl", "sha256": "a" * 64},
            "prompt": {"version": 1, "template": "{q}"},
            "answer_field": "a",
            "labels": {"skill": "reasoning", "subject": "science/math"},
        }
    }
    assert_problem(world.post(path, final, "bob"), 403, "forbidden")
    assert_problem(  # the old body (a URL alone) is refused
        world.post(path, {"url": "https://example.org/x"}, "alice"), 422, "invalid-request"
    )
    assert_problem(world.post(path, final, "alice"), 409, "conflict", "at the end")
    detail = world.client.get(f"/v0/pools/{pool['id']}").json()
    assert detail["pool"]["final_url"] is None and detail["pool"]["final_sha256"] == "a" * 64


def test_the_openapi_document_describes_the_pool_routes(world):
    document = world.client.get("/openapi.json").json()
    paths = document["paths"]
    expected = {
        ("/v0/pools", "get"): "200",
        ("/v0/pools", "post"): "201",
        ("/v0/pools/{pool_id}", "get"): "200",
        ("/v0/pools/{pool_id}/entries", "post"): "201",
        ("/v0/pools/{pool_id}/cancel", "post"): "200",
        ("/v0/pools/{pool_id}/reveal", "post"): "200",
    }
    for (path, method), ok in expected.items():
        operation = paths[path][method]
        assert operation["summary"] and operation["description"], (path, method)
        assert "$ref" in str(operation["responses"][ok]["content"]["application/json"]["schema"])
        assert "500" in operation["responses"]
        if method == "post":
            assert {"401", "422", "429"} <= set(operation["responses"]), (path, method)
    create_op = paths["/v0/pools"]["post"]
    assert "Location" in create_op["responses"]["201"]["headers"]
    assert "insufficient-funds" in create_op["responses"]["409"]["description"]
    assert (
        "duplicate-entry"
        in paths["/v0/pools/{pool_id}/entries"]["post"]["responses"]["409"]["description"]
    )
    schemas = document["components"]["schemas"]
    funds = schemas["PoolIn"]["properties"]["funds"]
    assert funds["type"] == "integer" and funds["exclusiveMinimum"] == 0
    assert set(schemas["PoolIn"]["properties"]["rule"]["enum"]) == {
        "ArithmeticDecrease",
        "Geometric",
        "Proportional",
        "WinnerTakesAll",
        "TopKEqual",
    }
    assert schemas["PoolIn"]["properties"]["ends_at"]["format"] == "date-time"
    assert {"PoolOut", "PoolDetailOut", "StandingRowOut", "PayoutOut"} <= set(schemas)


def test_a_scored_pool_through_the_api_and_the_cli(make_ctx, sums_spec, db_url, clock):
    """The board with intervals, the payout preview, then the settled payouts and the
    payout record, as the API and ``quorumbench pool show`` give them."""
    from typer.testing import CliRunner

    from quorumbench.api.embedded import EmbeddedServer
    from quorumbench.cli.app import app as cli_app
    from quorumbench.services.scheduler import tick

    from .pool_world import DAY1, World

    made = World(make_ctx, sums_spec, db_url)
    try:
        made.mint("funder", 5000)
        one, two = made.register(hub_ref(1), "ana"), made.register(hub_ref(2), "ben")
        score_of = {one: 1.0, two: 0.5}
        made.run_all(score_of)
        body = {
            "title": "Sums, three days",
            "funds": 1000,
            "rule": "ArithmeticDecrease",
            "benchmarks": ["sums"],
            "starts_at": clock.now.isoformat(),
            "join_deadline": (DAY1 + timedelta(days=1)).isoformat(),
            "ends_at": (DAY1 + timedelta(days=3)).isoformat(),
        }
        answer = made.api.post("/v0/pools", json=body, headers=auth(made.tokens["funder"]))
        assert answer.status_code == 201, answer.text
        pool_id = answer.json()["id"]
        for who, model in (("ana", one), ("ben", two)):
            joined = made.api.post(
                f"/v0/pools/{pool_id}/entries",
                json={"model": model},
                headers=auth(made.tokens[who]),
            )
            assert joined.status_code == 201, joined.text
        for day in range(3):
            clock.now = DAY1 + timedelta(days=day, seconds=5)
            tick(made.ctx)
            made.run_all(score_of)
            tick(made.ctx)
        detail = made.api.get(f"/v0/pools/{pool_id}").json()
        assert detail["pool"]["phase"] == "running"
        board = detail["board"]
        assert [r["entry"]["model_id"] for r in board] == [one, two]
        assert [r["score"] for r in board] == [1.0, 0.5] and board[0]["n_samples"] == 12
        assert all(r["ci_low"] <= r["score"] <= r["ci_high"] for r in board)
        assert [(r["rank"], r["rank_best"] <= r["rank"] <= r["rank_worst"]) for r in board] == [
            (1, True),
            (2, True),
        ]
        assert [p["amount"] for p in detail["payouts"]] == [667, 333]  # the preview
        assert len(detail["history"]) == 3 and detail["payout_record"] is None

        clock.now = DAY1 + timedelta(days=3, seconds=5)
        tick(made.ctx)  # the end: frozen and settled (no dispute window)
        settled = made.api.get(f"/v0/pools/{pool_id}").json()
        assert settled["pool"]["phase"] == "settled"
        assert [p["amount"] for p in settled["payouts"]] == [667, 333]
        record = settled["payout_record"]
        assert record is not None and isinstance(record["log_index"], int)
        assert f"entry {record['log_index']} of the public log" in settled["verify"]
        assert made.balance("ana") == 667 and made.balance("ben") == 333

        app = create_app(made.ctx.settings, context=made.ctx, run_scheduler=False)
        with EmbeddedServer(app) as server:
            shown = CliRunner().invoke(
                cli_app,
                ["pool", "show", str(pool_id), "--server", server.url],
                env={"COLUMNS": "250", "QB_TOKEN": None},
            )
        assert shown.exit_code == 0, shown.output
        out = " ".join(shown.stdout.replace("│", " ").replace("┃", " ").split())
        for part in ("payouts", "1.000 [", "0.500 [", "667", "333", "66.7%", "settled"):
            assert part in out, (part, out)
    finally:
        made.close()
