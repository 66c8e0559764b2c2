"""The credits ledger (``services/ledger.py``) on SQLite and PostgreSQL: minting,
transfers, refusals that write nothing, and concurrent transfers that cannot overspend."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import func, select, text

from quorumbench.db.pool_models import ISSUANCE, LedgerBalance, LedgerEntry
from quorumbench.errors import InsufficientFundsError, NotFoundError, PermissionDeniedError
from quorumbench.services import ledger
from quorumbench.services.accounts import create_account
from quorumbench.services.context import ServerContext
from quorumbench.services.ledger import account_holder, pool_holder


@pytest.fixture
def lctx(make_ctx, db_url) -> ServerContext:
    ctx: ServerContext = make_ctx(db_url)
    create_account(ctx, "admin", is_admin=True)
    create_account(ctx, "alice")
    create_account(ctx, "bob")
    return ctx


def ids(ctx: ServerContext) -> dict[str, int]:
    with ctx.db.read_connection() as conn:
        return {name: id_ for name, id_ in conn.execute(text("SELECT name, id FROM accounts"))}


def rows(ctx: ServerContext) -> tuple[list[Any], list[Any]]:
    with ctx.db.read() as session:
        balances = [
            (b.holder, b.balance)
            for b in session.scalars(select(LedgerBalance).order_by(LedgerBalance.holder))
        ]
        entries = [
            (e.id, e.txn_id, e.holder, e.amount, e.balance_after)
            for e in session.scalars(select(LedgerEntry).order_by(LedgerEntry.id))
        ]
    return balances, entries


def move(ctx: ServerContext, source: str, target: str, amount: int, reason: str = "fund") -> str:
    with ctx.db.write_connection() as conn:
        return ledger.transfer(
            conn, source=source, target=target, amount=amount, reason=reason, now=ctx.now()
        )


def test_mint_then_balance_and_statement(lctx):
    who = ids(lctx)
    line = ledger.mint(
        lctx, admin_id=who["admin"], account_name="alice", amount=1_000, memo="invoice 7"
    )
    alice = account_holder(who["alice"])
    assert (line.holder, line.amount, line.balance_after, line.reason) == (
        alice,
        1000,
        1000,
        "mint",
    )
    assert (line.memo, line.created_by, line.pool_id) == ("invoice 7", who["admin"], None)
    assert ledger.balance(lctx, alice) == 1000
    assert ledger.balance(lctx, ISSUANCE) == -1000
    assert ledger.balance(lctx, account_holder(who["bob"])) == 0
    again = ledger.mint(lctx, admin_id=who["admin"], account_name="alice", amount=5, memo="")
    assert again.balance_after == 1005
    lines = ledger.statement(lctx, alice)
    assert [(x.amount, x.balance_after) for x in lines] == [(5, 1005), (1000, 1000)]
    assert lines[0].id > lines[1].id
    older = ledger.statement(lctx, alice, before_id=lines[0].id, limit=10)
    assert [x.id for x in older] == [lines[1].id]
    assert [x.id for x in ledger.statement(lctx, alice, limit=1)] == [lines[0].id]
    issuance = ledger.statement(lctx, ISSUANCE)
    assert [(x.amount, x.balance_after) for x in issuance] == [(-5, -1005), (-1000, -1000)]
    assert {x.txn_id for x in issuance} == {x.txn_id for x in lines}
    assert ledger.check_ledger(lctx) == []


def test_transfer_moves_credits_with_two_lines_of_one_transfer(lctx):
    who = ids(lctx)
    ledger.mint(lctx, admin_id=who["admin"], account_name="alice", amount=300, memo="")
    alice, pool = account_holder(who["alice"]), pool_holder(9)
    txn = move(lctx, alice, pool, 120)
    assert ledger.balance(lctx, alice) == 180
    assert ledger.balance(lctx, pool) == 120
    _, entries = rows(lctx)
    assert [(e[2], e[3], e[4]) for e in entries if e[1] == txn] == [
        (alice, -120, 180),
        (pool, 120, 120),
    ]
    move(lctx, pool, account_holder(who["bob"]), 120, reason="payout")
    assert ledger.balance(lctx, pool) == 0
    assert ledger.balance(lctx, account_holder(who["bob"])) == 120
    assert ledger.check_ledger(lctx) == []


def test_insufficient_funds_leaves_everything_unchanged(lctx):
    who = ids(lctx)
    ledger.mint(lctx, admin_id=who["admin"], account_name="alice", amount=50, memo="")
    alice, bob = account_holder(who["alice"]), account_holder(who["bob"])
    before = rows(lctx)
    with pytest.raises(InsufficientFundsError) as refused:
        move(lctx, alice, bob, 51)
    assert "holds 50" in refused.value.message and "51" in refused.value.message
    with pytest.raises(InsufficientFundsError, match="holds 0"):
        move(lctx, bob, alice, 1)  # bob never held credits: no row is made for him
    assert rows(lctx) == before
    # refused inside a larger transaction that goes on: still nothing of it is written
    with lctx.db.write_connection() as conn, pytest.raises(InsufficientFundsError):
        ledger.transfer(conn, source=alice, target=bob, amount=99, reason="fund", now=lctx.now())
    assert rows(lctx) == before
    assert ledger.check_ledger(lctx) == []


@pytest.mark.parametrize("amount", [0, -5, 12.5, "12", True, None, 10**16])
def test_bad_amounts_are_refused(lctx, amount):
    who = ids(lctx)
    with pytest.raises(ValueError, match="amount"):
        ledger.mint(lctx, admin_id=who["admin"], account_name="alice", amount=amount, memo="")
    with pytest.raises(ValueError, match="amount"):
        move(lctx, ISSUANCE, account_holder(who["alice"]), amount)
    assert rows(lctx) == ([], [])


def test_bad_transfers_are_refused(lctx):
    with pytest.raises(ValueError, match="reason"):
        move(lctx, ISSUANCE, "account:1", 1, reason="gift")
    with pytest.raises(ValueError, match="two holders"):
        move(lctx, "account:1", "account:1", 1)
    assert rows(lctx) == ([], [])


def test_only_an_admin_mints_and_only_to_an_account(lctx):
    who = ids(lctx)
    with pytest.raises(PermissionDeniedError):
        ledger.mint(lctx, admin_id=who["alice"], account_name="alice", amount=10, memo="")
    with pytest.raises(PermissionDeniedError):
        ledger.mint(lctx, admin_id=10_000, account_name="alice", amount=10, memo="")
    with pytest.raises(NotFoundError, match="nobody"):
        ledger.mint(lctx, admin_id=who["admin"], account_name="nobody", amount=10, memo="")
    assert rows(lctx) == ([], [])


def test_check_ledger_finds_tampering(lctx):
    who = ids(lctx)
    ledger.mint(lctx, admin_id=who["admin"], account_name="alice", amount=40, memo="")
    alice = account_holder(who["alice"])
    with lctx.db.write_connection() as conn:
        conn.execute(
            text("UPDATE ledger_balances SET balance = 41 WHERE holder = :h"), {"h": alice}
        )
        conn.execute(text("UPDATE ledger_entries SET amount = 39 WHERE holder = :h"), {"h": alice})
    problems = ledger.check_ledger(lctx)
    assert any("sum to -1, not 0" in p for p in problems), problems
    assert any(p.startswith(f"{alice}: balance 41 but its lines sum to 39") for p in problems)


def test_concurrent_transfers_cannot_overspend(lctx):
    """20 threads, each in its own transaction, move 10 out of an account of 100."""
    who = ids(lctx)
    ledger.mint(lctx, admin_id=who["admin"], account_name="alice", amount=100, memo="")
    alice = account_holder(who["alice"])
    start = threading.Barrier(20)
    outcomes: list[str] = []
    lock = threading.Lock()

    def spend(n: int) -> None:
        start.wait()
        try:
            move(lctx, alice, pool_holder(n), 10)
            result = "ok"
        except InsufficientFundsError:
            result = "refused"
        except Exception as exc:
            result = f"error: {exc!r}"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=spend, args=(n,)) for n in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert sorted(outcomes) == ["ok"] * 10 + ["refused"] * 10, outcomes
    assert ledger.balance(lctx, alice) == 0
    assert sum(ledger.balance(lctx, pool_holder(n)) for n in range(20)) == 100
    with lctx.db.read_connection() as conn:
        lines = conn.execute(select(func.count()).select_from(LedgerEntry)).scalar_one()
    assert lines == 2 + 2 * 10
    assert ledger.check_ledger(lctx) == []


def test_opposite_transfers_do_not_deadlock(lctx):
    """Transfers both ways between two holders at once: every one commits."""
    who = ids(lctx)
    for name in ("alice", "bob"):
        ledger.mint(lctx, admin_id=who["admin"], account_name=name, amount=1_000, memo="")
    alice, bob = account_holder(who["alice"]), account_holder(who["bob"])
    start = threading.Barrier(16)
    errors: list[BaseException] = []

    def back_and_forth(n: int) -> None:
        start.wait()
        try:
            for _ in range(5):
                move(lctx, alice, bob, 3) if n % 2 else move(lctx, bob, alice, 3)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=back_and_forth, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    assert ledger.balance(lctx, alice) == ledger.balance(lctx, bob) == 1_000
    assert ledger.check_ledger(lctx) == []


# --- over HTTP ------------------------------------------------------------------------


@pytest.fixture
def http(lctx):
    from fastapi.testclient import TestClient

    from quorumbench.api.app import create_app
    from quorumbench.services.accounts import issue_token

    tokens = {
        "admin": issue_token(lctx, "admin", scopes=("admin",)).token,
        "alice": issue_token(lctx, "alice").token,
    }
    with TestClient(create_app(lctx.settings, context=lctx, run_scheduler=False)) as client:
        client.headers_of = {n: {"Authorization": f"Bearer {t}"} for n, t in tokens.items()}
        yield client


def test_mint_and_my_ledger_over_http(http, lctx):
    as_admin, as_alice = http.headers_of["admin"], http.headers_of["alice"]
    empty = http.get("/v0/ledger/me", headers=as_alice)
    assert empty.status_code == 200, empty.text
    assert empty.json()["balance"] == 0 and empty.json()["entries"] == []
    for amount in (100, 20, 3):
        made = http.post(
            "/v0/ledger/mint",
            json={"account": "alice", "amount": amount, "memo": f"pay {amount}"},
            headers=as_admin,
        )
        assert made.status_code == 201, made.text
    line = made.json()
    assert (line["amount"], line["balance_after"], line["reason"], line["memo"]) == (
        3,
        123,
        "mint",
        "pay 3",
    )
    mine = http.get("/v0/ledger/me", params={"limit": 2}, headers=as_alice).json()
    assert mine["balance"] == 123 and mine["holder"] == line["holder"]
    assert [e["amount"] for e in mine["entries"]] == [3, 20]
    rest = http.get(
        "/v0/ledger/me", params={"limit": 2, "before": mine["next_before"]}, headers=as_alice
    ).json()
    assert [e["amount"] for e in rest["entries"]] == [100] and rest["next_before"] is None
    assert http.get("/v0/ledger/check", headers=as_admin).json() == {"problems": []}
    assert http.get("/v0/ledger/me").status_code == 401


def test_only_admins_mint_or_check_over_http(http):
    as_alice = http.headers_of["alice"]
    body = {"account": "alice", "amount": 10, "memo": ""}
    refused = http.post("/v0/ledger/mint", json=body, headers=as_alice)
    assert refused.status_code == 403, refused.text
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert "admin" in refused.json()["detail"]
    assert http.get("/v0/ledger/check", headers=as_alice).status_code == 403
    missing = http.post(
        "/v0/ledger/mint", json={**body, "account": "nobody"}, headers=http.headers_of["admin"]
    )
    assert missing.status_code == 404, missing.text
    assert http.get("/v0/ledger/me", headers=as_alice).json()["balance"] == 0


@pytest.mark.parametrize("amount", [12.5, "12", -3, 0, True, None, 10**16])
def test_bad_amounts_are_422_over_http(http, amount):
    answer = http.post(
        "/v0/ledger/mint",
        json={"account": "alice", "amount": amount, "memo": ""},
        headers=http.headers_of["admin"],
    )
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert "amount" in answer.text
    assert http.get("/v0/ledger/me", headers=http.headers_of["alice"]).json()["balance"] == 0
