"""What the pages and the JSON API read through the same services code: the task
list's window, and lineage on parsed refs."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi.testclient import TestClient

from quorumbench.api.app import create_app
from quorumbench.db.models import Model

from .seed import Seed


def test_the_api_and_the_pages_list_the_same_tasks_in_id_order(client):
    for status in (None, "DONE", "DISPUTED"):
        query = f"&status={status}" if status else ""
        api = [t["id"] for t in client.get(f"/v0/tasks?limit=500{query}").json()]
        page = [t["id"] for t in client.get(f"/tasks?format=json&limit=500{query}").json()["tasks"]]
        assert api and api == sorted(api)  # oldest first
        assert page == api[::-1]  # newest first: the same tasks
    # keyset pages meet without a gap or an overlap on either surface
    api = [t["id"] for t in client.get("/v0/tasks?limit=500").json()]
    middle = api[len(api) // 2]
    later = [t["id"] for t in client.get(f"/v0/tasks?limit=500&after_id={middle}").json()]
    earlier = client.get(f"/tasks?format=json&limit=500&before={middle + 1}").json()["tasks"]
    assert [t["id"] for t in earlier][::-1] + later == api


def test_lineage_compares_parsed_refs_not_a_prefix(tmp_path):
    """A local path may hold an ``@``: ``/models/a@b`` is not ``/models/a``."""
    made = Seed(tmp_path)
    try:
        owner_of = made.ids["alpha-1b"]
        with made.ctx.db.write() as session:
            owner = session.get(Model, owner_of).owner_id

            def add(name: str, ref: str, base: str | None) -> int:
                row = Model(
                    ref=ref,
                    name=name,
                    owner_id=owner,
                    revision=ref.rsplit("@", 1)[-1],
                    base_ref=base,
                    details={"kind": "adapter"} if base else {},
                    created_at=datetime(2026, 11, 20, tzinfo=UTC),
                )
                session.add(row)
                session.flush()
                return row.id

            plain = add("plain", f"hf:/models/a@{'1' * 64}", None)
            # made on /models/a@b (not registered here), never on /models/a
            on_other = add("on-other", f"hf:/adapters/x@{'2' * 64}", f"hf:/models/a@b@{'3' * 64}")
            # made on /models/a at a revision this server does not have
            on_plain = add("on-plain", f"hf:/adapters/y@{'4' * 64}", f"hf:/models/a@{'5' * 64}")
        app = create_app(made.ctx.settings, context=made.ctx, run_scheduler=False)
        with TestClient(app) as client:
            base = client.get(f"/models/{on_other}?format=json").json()["base"]
            assert base == {
                "id": None,
                "name": "",
                "ref": f"hf:/models/a@b@{'3' * 64}",
                "exact": True,
            }
            base = client.get(f"/models/{on_plain}?format=json").json()["base"]
            assert (base["id"], base["exact"]) == (plain, False)
            adapters = client.get(f"/models/{plain}?format=json").json()["adapters"]
            assert [(a["id"], a["exact"]) for a in adapters] == [(on_plain, False)]
    finally:
        made.ctx.close()
