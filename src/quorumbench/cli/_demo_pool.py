"""The demo's prize pool: funded credits on the demo's benchmarks, both demo models
entered, its page printed (docs/pools.md).

The admin mints the credits to itself (the only way credits enter, see the ledger),
funds a week-long pool with the ``ArithmeticDecrease`` rule and enters the two models
it registered. Their pool scores start with the next epoch (an entry counts epochs
that start after it joined), so the page shows them unscored at first; the server's
scheduler snapshots the board daily and settles the pool when it ends. A demo run
again on the same data directory finds its pool (by title) instead of funding another.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from rich.console import Console

from quorumbench.cli._console import escape

DEMO_POOL_TITLE = "Demo pool: best small model this week"
DEMO_POOL_FUNDS = 100_000
"""Minor units (1,000.00 credits shown as 100000): ArithmeticDecrease over two entries
pays 66,667 and 33,333."""


def _existing(api: httpx.Client) -> dict[str, Any] | None:
    listed = api.get("/v0/pools")
    if listed.status_code != 200:
        return None
    pools: list[dict[str, Any]] = listed.json()
    return next(
        (p for p in pools if p["title"] == DEMO_POOL_TITLE and p["status"] == "active"), None
    )


def print_demo_pool(
    api: httpx.Client,
    url: str,
    token: str,
    admin: str,
    benchmarks: list[str],
    model_ids: list[int],
    console: Console,
) -> None:
    """Create (or find) the demo's pool, enter the models and print the pool's URL."""
    auth = {"Authorization": f"Bearer {token}"}
    pool = _existing(api)
    if pool is None:
        minted = api.post(
            "/v0/ledger/mint",
            json={"account": admin, "amount": DEMO_POOL_FUNDS, "memo": "demo pool funds"},
            headers=auth,
        )
        now = datetime.now(UTC)
        made = api.post(
            "/v0/pools",
            json={
                "title": DEMO_POOL_TITLE,
                "description": "Made by `quorumbench demo` over its own benchmarks.",
                "funds": DEMO_POOL_FUNDS,
                "rule": "ArithmeticDecrease",
                "benchmarks": benchmarks,
                "ends_at": (now + timedelta(days=7)).isoformat(),
                "join_deadline": (now + timedelta(days=6)).isoformat(),
                "entries_per_account": len(model_ids),
            },
            headers=auth,
        )
        if minted.status_code != 201 or made.status_code != 201:
            refused = minted if minted.status_code != 201 else made
            console.print(escape(f"pool: the demo's pool was refused: {refused.text}"))
            return
        pool = made.json()
        for model_id in model_ids:
            joined = api.post(
                f"/v0/pools/{pool['id']}/entries", json={"model": model_id}, headers=auth
            )
            if joined.status_code != 201:
                console.print(escape(f"pool: entering model {model_id} was refused: {joined.text}"))
    console.print(
        escape(
            f"prize pool {pool['title']!r}: {DEMO_POOL_FUNDS} credits (minor units), rule "
            f"{pool['rule']}, ends {pool['ends_at']}: {url}/pools/{pool['id']}"
        ),
        highlight=False,
    )
