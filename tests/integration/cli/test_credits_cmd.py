"""``quorumbench credits mint`` and ``credits show`` against a live server (uvicorn in a
thread, SQLite), as the model commands' tests run them."""

from __future__ import annotations

import json

from quorumbench.services.accounts import create_account, issue_token

from .test_model_cmds import flat, make_world, world  # noqa: F401 - fixtures


def test_credits_mint_and_show(world):  # noqa: F811 - the fixture
    create_account(world.ctx, "boss", is_admin=True)
    world.tokens["boss"] = issue_token(world.ctx, "boss", scopes=("admin",)).token
    minted = world.cli("credits", "mint", "owner", "250", "--memo", "invoice 9", who="boss")
    assert minted.exit_code == 0, minted.output
    assert "minted 250 to owner" in flat(minted.stdout) and "balance 250" in flat(minted.stdout)
    refused = world.cli("credits", "mint", "owner", "5", who="owner")
    assert refused.exit_code != 0 and "'admin' scope" in str(refused.exception)
    shown = world.cli("credits", "show", who="owner")
    assert shown.exit_code == 0, shown.output
    assert "balance 250" in flat(shown.stdout) and "invoice 9" in flat(shown.stdout)
    as_json = json.loads(world.cli("credits", "show", "--json", "--limit", "1").stdout)
    assert as_json["balance"] == 250 and [e["amount"] for e in as_json["entries"]] == [250]
    assert world.cli("credits", "mint", "owner", "0", who="boss").exit_code != 0
