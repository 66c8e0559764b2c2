"""``quorumbench benchmark create | show | retire`` and ``account grant | revoke``
against a real server (uvicorn in a thread, SQLite), with the data on a local HTTP
server (the server allows private data URLs for it)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import yaml

from quorumbench.services.accounts import create_account, issue_token

from ..server.test_benchmark_api import DATA, SHA, files, spec  # noqa: F401 (a fixture)
from .test_model_cmds import World, flat, make_world  # noqa: F401 (a fixture)


@pytest.fixture
def world(make_world) -> Iterator[World]:  # noqa: F811
    made: World = make_world(allow_private_data_urls=True)
    yield made


def test_create_show_retire_from_the_cli(make_world, files, tmp_path):  # noqa: F811
    world = make_world(allow_private_data_urls=True)
    ctx = world.ctx
    create_account(ctx, "admin", is_admin=True)
    world.tokens["admin"] = issue_token(ctx, "admin", scopes=("admin",)).token
    world.tokens["maker"] = issue_token(
        ctx, "owner", scopes=("benchmark:create", "model:register"), name="bench"
    ).token
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(spec(f"{files}/data.jsonl")))

    refused = world.cli("benchmark", "create", str(path), who="maker")
    assert refused.exit_code == 1 and "does not hold benchmark:create" in flat(refused.output)

    granted = world.cli("account", "grant", "owner", "--reason", "maintainer", who="admin")
    assert granted.exit_code == 0, granted.output
    assert "owner holds benchmark:create (maintainer)" in flat(granted.stdout)

    shown = world.cli("account", "show")
    assert shown.exit_code == 0, shown.output
    assert "by the admin admin: maintainer" in flat(shown.stdout)

    made = world.cli("benchmark", "create", str(path), who="maker")
    assert made.exit_code == 0, made.output
    out = flat(made.stdout)
    assert "created: tiny-sums v1, scheduled from epoch" in out and SHA in out

    shown = world.cli("benchmark", "show", "tiny-sums", "--json", who=None)
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["pillar"] == "math"

    retired = world.cli("benchmark", "retire", "tiny-sums", who="maker")
    assert retired.exit_code == 0 and "retired: tiny-sums" in flat(retired.stdout)

    revoked = world.cli("account", "revoke", "owner", who="admin")
    assert revoked.exit_code == 0 and "owner does not hold" in flat(revoked.stdout)


def test_a_local_data_path_is_refused_with_what_to_do(world, tmp_path):
    path = tmp_path / "local.json"
    body = spec("https://example.org/data.jsonl")
    body["data"] = {"path": "data.jsonl", "sha256": SHA}
    path.write_text(json.dumps(body))
    (tmp_path / "data.jsonl").write_bytes(DATA)
    result = world.cli("benchmark", "create", str(path))
    assert result.exit_code == 1
    assert "which the server cannot read: publish the file at an https:// URL" in flat(
        result.output
    )
