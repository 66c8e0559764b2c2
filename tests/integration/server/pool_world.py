"""A server with a funder, trainers and runners for the prize pool tests.

Epochs last a day here (``epoch_seconds``), so each daily board period holds one
epoch; the ``sums`` benchmark (20 items, 4 per task) is the pool's benchmark.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient
from sqlalchemy import func, select

from quorumbench.api.app import create_app
from quorumbench.db.models import Account
from quorumbench.db.pool_models import LedgerEntry, Pool, PoolEntry, PoolSnapshot
from quorumbench.services import ledger
from quorumbench.services.accounts import authenticate_api_token, create_account, issue_token
from quorumbench.services.pools import PoolSpec

from .conftest import fake_metadata
from .test_api import pull, register, submit

RUNNERS = ("r1", "r2", "r3", "r4", "r5")
DAY = 86_400
DAY1 = datetime(2026, 11, 23, tzinfo=UTC)
"""The first whole epoch after the fake clock's start (2026-11-22 12:00:05)."""


class World:
    def __init__(self, make_ctx, spec, url=None, **overrides):
        # no finalize grace unless a test asks for one: these worlds finalize every task
        # of a day before the next (test_pools.py's whole pool uses the default grace)
        settings = {
            "benchmarks": [spec],
            "samples_per_task": 4,
            "epoch_seconds": DAY,
            "pool_finalize_grace_s": 0,
        }
        self.ctx = make_ctx(url, **(settings | overrides))
        self.ctx.inspector = fake_metadata
        self.tokens: dict[str, str] = {}
        create_account(self.ctx, "admin", is_admin=True)
        self.tokens["admin"] = issue_token(self.ctx, "admin", scopes=("admin",)).token
        for name in ("funder", "ana", "ben", *RUNNERS):
            create_account(self.ctx, name)
            self.tokens[name] = issue_token(self.ctx, name).token
        self.api = TestClient(create_app(self.ctx.settings, context=self.ctx, run_scheduler=False))
        self.api.__enter__()

    def close(self):
        self.api.__exit__(None, None, None)

    def who(self, name):
        return authenticate_api_token(self.ctx, self.tokens[name])

    def account_id(self, name):
        with self.ctx.db.read() as session:
            return session.scalars(select(Account.id).where(Account.name == name)).one()

    def balance(self, name):
        return ledger.balance(self.ctx, ledger.account_holder(self.account_id(name)))

    def escrow(self, pool_id):
        return ledger.balance(self.ctx, ledger.pool_holder(pool_id))

    def mint(self, name, amount):
        ledger.mint(
            self.ctx, admin_id=self.account_id("admin"), account_name=name, amount=amount, memo=""
        )

    def register(self, ref, who):
        answer = register(self.api, self.tokens, ref, who)
        assert answer.status_code == 201, answer.text
        return answer.json()["id"]

    def run_all(self, score_of):
        """Runners lease and answer every open task (``score_of[model id]`` on every
        sample) until none is left."""
        while True:
            leases = {}
            for who in RUNNERS:
                got = pull(self.api, self.tokens, who)
                if got.status_code == 201:
                    leases[who] = got.json()
            if not leases:
                return
            for who, lease in leases.items():
                score = score_of[lease["task"]["model"]["id"]]
                answer = submit(self.api, self.tokens, who, lease, score)
                assert answer.status_code == 201, answer.text

    def counts(self):
        """Rows that bad input must leave alone."""
        with self.ctx.db.read() as session:
            return tuple(
                session.scalar(select(func.count()).select_from(table))
                for table in (Pool, PoolEntry, PoolSnapshot, LedgerEntry)
            )


def spec(**changes):
    """A three-day pool from now (the fake clock's start) on ``sums``."""
    start = datetime(2026, 11, 22, 12, 0, 5, tzinfo=UTC)
    base = {
        "title": "Sums, three days",
        "funds": 1000,
        "rule": "ArithmeticDecrease",
        "starts_at": start,
        "ends_at": DAY1 + timedelta(days=3),
        "join_deadline": DAY1 + timedelta(days=1),
        "benchmarks": ["sums"],
        "entries_per_account": 2,
    }
    return PoolSpec(**(base | changes))
