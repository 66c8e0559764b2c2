"""A result's measurements (protocol 1.1) are stored as signed, shown with the final
task, logged with the result and verified from the log like every other signed field;
a result sent without them is stored and logged as before."""

from __future__ import annotations

from rich.console import Console
from sqlalchemy import select

from quorumbench.api.app import create_app
from quorumbench.api.embedded import EmbeddedServer
from quorumbench.cli.verify_cmd import verify
from quorumbench.db.models import Result

from .conftest import hub_ref
from .test_api import auth, payload, pull, register, signed

MEASURED = {
    "wall_s": 2.5,
    "energy_kwh": 6.9e-06,
    "energy_method": "estimate",
    "energy_scope": "cpu: 2 cores x 5 W x utilisation",
    "carbon_intensity_g_per_kwh": 471.08,
    "carbon_intensity_source": "world-average",
    "co2_g": 0.0033,
    "prompt_tokens": 1351,
    "generated_tokens": 101,
    "ttft_s": 0.12,
    "decode_tokens_per_s": 43.0,
    "peak_rss_bytes": 1_380_000_000,
}


def _submit(api, people, who, lease, measurements):
    body = payload(lease, 0.5)
    if measurements is not None:
        body["result"]["measurements"] = measurements
    return api.post(
        f"/v0/leases/{lease['lease_id']}/result",
        params={"runner": f"{who}-box"},
        json=signed(api, people, who, lease, body),
        headers=auth(people[who]),
    )


def test_measurements_are_stored_logged_and_verified(api, people, ctx, tmp_path):
    assert register(api, people, hub_ref(71)).status_code == 201
    leases = {who: pull(api, people, who).json() for who in ("r1", "r2", "r3")}
    sent = {"r1": MEASURED, "r2": MEASURED | {"energy_kwh": 7.2e-06}, "r3": None}
    for who, lease in leases.items():
        answer = _submit(api, people, who, lease, sent[who])
        assert answer.status_code == 201, answer.text
    task_id = leases["r1"]["task"]["id"]
    with ctx.db.read() as session:
        stored = {r.account_id: r.measurements for r in session.scalars(select(Result))}
    assert sorted(stored.values(), key=lambda m: m is None) == [
        MEASURED,
        MEASURED | {"energy_kwh": 7.2e-06},
        None,
    ]
    shown = api.get(f"/v0/tasks/{task_id}").json()
    assert shown["status"] == "DONE"
    assert sorted((r["measurements"] or {}).get("energy_kwh", 0.0) for r in shown["results"]) == [
        0.0,
        6.9e-06,
        7.2e-06,
    ]
    logged = api.get("/v0/log/entries", params={"start": 0, "limit": 10}).json()
    results = logged[0]["entry"]["results"]
    assert sum("measurements" in r for r in results) == 2  # absent where none was sent
    assert all(
        r["measurements"]["energy_method"] == "estimate" for r in results if "measurements" in r
    )
    # `quorumbench verify` rebuilds each signed payload from the log, measurements included
    with EmbeddedServer(create_app(ctx.settings, context=ctx, run_scheduler=False)) as server:
        report = verify(server.url, tmp_path / "verify-state.json", Console())
    assert report.problems == [] and report.signatures_checked == 3


def test_an_invented_method_is_refused(api, people):
    assert register(api, people, hub_ref(72)).status_code == 201
    lease = pull(api, people, "r1").json()
    answer = _submit(api, people, "r1", lease, MEASURED | {"energy_method": "guess"})
    assert answer.status_code == 422, answer.text
