"""``quorumbench pool create | list | show | join | cancel | reveal`` against a real
server (uvicorn in a thread, SQLite, fake model metadata), in process through
CliRunner and once as a subprocess; every refusal one line and exit status 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from quorumbench.cli.pool_cmd import duration_s, moment, rule_params
from quorumbench.errors import ConfigError
from quorumbench.services import ledger
from quorumbench.services.accounts import create_account, issue_token

from ..server.conftest import hub_ref
from .test_model_cmds import World, flat, make_world  # noqa: F401 (a fixture)

MINTED = 50_000


@pytest.fixture
def world(make_world) -> World:  # noqa: F811
    made: World = make_world()
    ctx = made.ctx
    admin = create_account(ctx, "admin", is_admin=True)
    made.tokens["admin"] = issue_token(ctx, "admin", scopes=("admin",)).token
    ledger.mint(ctx, admin_id=admin.id, account_name="owner", amount=MINTED, memo="test")
    return made


def _create(world: World, *extra: str) -> dict:
    made = world.cli(
        *("pool", "create", "--title", "Sums [small]", "--funds", "20000"),
        *("--benchmark", "arith", "--rule", "Geometric", "--param", "q=0.5", "--param", "k=3"),
        *("--ends", "+14d", "--join-deadline", "+7d", "--ties", "statistical"),
        *("--period", "12h", "--description", "A pool for the tests.", "--json"),
        *extra,
    )
    assert made.exit_code == 0, made.output
    pool: dict = json.loads(made.stdout)
    return pool


def test_create_list_show_join_cancel(world):
    pool = _create(world)
    assert pool["funds"] == 20_000 and pool["rule"] == "Geometric"
    assert pool["rule_params"]["q"] == 0.5 and pool["rule_params"]["k"] == 3
    assert pool["ties"] == "statistical" and pool["period_s"] == 12 * 3600
    holder = ledger.account_holder(pool_owner_id(world))
    assert ledger.balance(world.ctx, holder) == MINTED - 20_000

    listed = world.cli("pool", "list", who=None)
    assert listed.exit_code == 0, listed.output
    out = flat(listed.stdout)
    assert "Sums [small]" in out and "20,000" in out and "Geometric(k=3, q=0.5)" in out
    assert "joins close in 6 d 23 h" in out or "joins close in 7 d 0 h" in out
    assert "no pools" in flat(world.cli("pool", "list", "--phase", "settled", who=None).stdout)

    registered = httpx.post(
        f"{world.url}/v0/models",
        json={"ref": hub_ref(7)},
        headers={"Authorization": f"Bearer {world.tokens['other']}"},
    )
    assert registered.status_code == 201, registered.text
    joined = world.cli("pool", "join", str(pool["id"]), hub_ref(7), who="other")
    assert joined.exit_code == 0, joined.output
    assert "joined: model-7@" in flat(joined.stdout)

    shown = world.cli("pool", "show", str(pool["id"]), who=None)
    assert shown.exit_code == 0, shown.output
    out = flat(shown.stdout)
    for part in (
        f"pool {pool['id']}: Sums [small]",
        "Geometric(k=3, q=0.5), ties statistical",
        "20,000 units",
        "board (95% intervals)",
        "payout preview",
        "verify:",
        f"quorumbench verify --server {world.url}",
        f"{world.url}/pools/{pool['id']}",
    ):
        assert part in out, part
    detail = json.loads(world.cli("pool", "show", str(pool["id"]), "--json", who=None).stdout)
    assert [e["ref"] for e in detail["entries"]] == [hub_ref(7)]

    refused = world.cli("pool", "cancel", str(pool["id"]), "--reason", "mine", who="owner")
    assert refused.exit_code == 1 and "admin" in refused.output
    cancelled = world.cli("pool", "cancel", str(pool["id"]), "--reason", "test over", who="admin")
    assert cancelled.exit_code == 0, cancelled.output
    assert "cancelled: pool" in flat(cancelled.stdout) and "20,000 units refunded to owner" in flat(
        cancelled.stdout
    )
    assert ledger.balance(world.ctx, holder) == MINTED


def pool_owner_id(world: World) -> int:
    with world.ctx.db.read_connection() as conn:
        found: int = conn.exec_driver_sql("SELECT id FROM accounts WHERE name = 'owner'").scalar()
    return found


def test_refusals_are_one_line_and_exit_1(world, tmp_path):
    too_much = world.cli(
        *("pool", "create", "--title", "t", "--funds", str(MINTED + 1), "-b", "arith"),
        *("--ends", "+2d"),
    )
    assert too_much.exit_code == 1
    assert too_much.output.startswith("error:") and "HTTP 409" in too_much.output
    assert len(too_much.output.strip().splitlines()) == 1

    bad_rule = world.cli(
        *("pool", "create", "--title", "t", "--funds", "10", "-b", "arith", "--ends", "+2d"),
        *("--rule", "EarliestWins"),
    )
    assert bad_rule.exit_code == 1 and "HTTP 422" in bad_rule.output

    naive = world.cli(
        *("pool", "create", "--title", "t", "--funds", "10", "-b", "arith"),
        *("--ends", "2030-01-01T00:00:00"),
    )
    assert naive.exit_code == 1 and "has no time zone" in naive.output

    fraction = world.cli(
        *("pool", "create", "--title", "t", "--funds", "12.5", "-b", "arith", "--ends", "+2d")
    )
    assert fraction.exit_code == 2  # the command line refuses it before any request

    missing = world.cli("pool", "show", "999", who=None)
    assert missing.exit_code == 1 and "no pool 999" in missing.output

    pool = _create(world)
    not_mine = world.cli("pool", "join", str(pool["id"]), "nothing-here", who="other")
    assert not_mine.exit_code == 1 and "error:" in not_mine.output
    final = tmp_path / "final.yaml"
    final.write_text(
        "format: exact-match\n"
        "data: {url: 'https://example.org/f.jsonl', sha256: '" + "a" * 64 + "'}\n"
        "prompt: {version: 1, template: '{q}'}\n"
        "answer_field: a\n"
        "labels: {skill: reasoning, subject: science/math}\n"
    )
    reveal = world.cli("pool", "reveal", str(pool["id"]), str(final), who="other")
    assert reveal.exit_code == 1 and "does not allow it" in reveal.output
    local = tmp_path / "local.yaml"
    local.write_text(
        final.read_text().replace("url: 'https://example.org/f.jsonl'", "path: f.jsonl")
    )
    refused = world.cli("pool", "reveal", str(pool["id"]), str(local), who="other")
    assert refused.exit_code == 1 and "data.url" in refused.output
    assert world.cli("pool", "reveal", str(pool["id"]), "nope.yaml", who="other").exit_code == 1
    assert ledger.balance(world.ctx, ledger.account_holder(pool_owner_id(world))) == (
        MINTED - 20_000
    )


def test_pool_list_as_a_person_runs_it(world):
    _create(world)
    done = subprocess.run(
        [sys.executable, "-m", "quorumbench.cli.app", "pool", "list", "--json"]
        + ["--server", world.url],
        env={**os.environ, "XDG_CONFIG_HOME": str(world.config)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    [pool] = json.loads(done.stdout)
    assert pool["title"] == "Sums [small]" and pool["phase"] == "open"


def test_the_option_parsers():
    now = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
    assert moment("+7d", "--ends", now) == (now + timedelta(days=7)).isoformat()
    assert moment("2026-12-01T00:00:00Z", "--ends", now) == "2026-12-01T00:00:00+00:00"
    assert moment("2026-12-01T02:00:00+02:00", "--ends", now) == "2026-12-01T02:00:00+02:00"
    for bad in ("tomorrow", "2026-12-01", "+7 days"):
        with pytest.raises(ConfigError):
            moment(bad, "--ends", now)
    assert duration_s("24h", "--period") == 86_400 and duration_s("90", "--period") == 90
    assert duration_s("2w", "--period") == 14 * 86_400
    assert rule_params(["k=3", "q=0.3", "floor=0"]) == {"k": 3, "q": 0.3, "floor": 0}
    for bad in (["k"], ["=3"], ["k=three"]):
        with pytest.raises(ConfigError):
            rule_params(bad)
