"""One rank everywhere: each model's (rank, rank_best, rank_worst) is the same in
``/v0/leaderboard`` (JSON and CSV), the page's JSON (``/?format=json``, also per
benchmark), the static export (``quorumbench export-site``) and ``quorumbench
leaderboard``, under every sort key and order, on every page, and with filters that
hide some models (core/ranking.py)."""

from __future__ import annotations

import csv
import io
import json
import re

from rich.console import Console
from typer.testing import CliRunner

from quorumbench.api.app import create_app
from quorumbench.api.embedded import EmbeddedServer
from quorumbench.cli.app import app as cli
from quorumbench.cli.server_cmd import leaderboard as cli_leaderboard
from quorumbench.services.board import BOARD_SORTS
from quorumbench.services.leaderboard import SORT_KEYS

Triples = dict[int, tuple[int, int, int]]


def triples(rows) -> Triples:
    return {
        int(r["model_id"]): (int(r["rank"]), int(r["rank_best"]), int(r["rank_worst"]))
        for r in rows
        if r["rank"] not in (None, "")
    }


def api_rows(client, benchmark: str | None, fmt: str = "json", **params) -> list[dict]:
    """Every row of the API's board for ``params``, two per request."""
    rows: list[dict] = []
    query = {**params, "limit": 2, "format": fmt, **({"benchmark": benchmark} if benchmark else {})}
    while True:
        response = client.get("/v0/leaderboard", params={**query, "offset": len(rows)})
        assert response.status_code == 200, response.text
        if fmt == "csv":
            page = list(csv.DictReader(io.StringIO(response.text)))
        else:
            page = response.json()["rows"]
        if not page:
            return rows
        rows += page


def page_rows(client, benchmark: str | None, **params) -> list[dict]:
    """Every row of the page's board for ``params``, two per page."""
    rows: list[dict] = []
    number = 1
    while True:
        query = {**params, "format": "json", "per_page": 2, "page": number}
        if benchmark:
            query["benchmark"] = benchmark
        body = client.get("/", params=query).json()
        rows += body["rows"]
        if number >= body["pages"]:
            return rows
        number += 1


def test_every_surface_gives_a_model_the_same_rank(client, seed, tmp_path):
    boards: dict[str | None, Triples] = {}
    for bench in (None, *seed.benchmarks):
        everyone = triples(api_rows(client, bench))
        boards[bench] = everyone
        assert len(everyone) == (6 if bench is None else 7 if bench == "arith" else 6)
        assert all(best <= rank <= worst for rank, best, worst in everyone.values())
        for sort in SORT_KEYS:
            for order in ("asc", "desc"):
                assert triples(api_rows(client, bench, sort=sort, order=order)) == everyone
                csv_rows = api_rows(client, bench, "csv", sort=sort, order=order)
                assert triples(csv_rows) == everyone, (bench, sort, order)
        for sort in BOARD_SORTS:
            for order in ("asc", "desc"):
                assert triples(page_rows(client, bench, sort=sort, order=order)) == everyone
        # filters that hide models leave the others' ranks alone
        alpha = {i: everyone[i] for i in (seed.ids["alpha-1b"], seed.ids["alpha-1b-lora"])}
        assert triples(api_rows(client, bench, q="alpha")) == alpha
        assert triples(page_rows(client, bench, q="alpha", sort="score")) == alpha
        most = max(int(r["n_samples"]) for r in api_rows(client, bench))
        many = triples(api_rows(client, bench, min_samples=most, sort="model"))
        assert len(many) > 0 and many.items() <= everyone.items()
        if bench != "sums":  # (on sums every model has 20 samples)
            assert len(many) < len(everyone)
        lora = triples(page_rows(client, bench, type="lora"))
        assert lora == {seed.ids["alpha-1b-lora"]: everyone[seed.ids["alpha-1b-lora"]]}
    # ties share a rank on the aggregate board: the LoRA scores as its base
    aggregate = boards[None]
    assert aggregate[seed.ids["alpha-1b"]][0] == aggregate[seed.ids["alpha-1b-lora"]][0]

    out = tmp_path / "site"
    done = CliRunner().invoke(
        cli, ["export-site", str(out), "--database-url", seed.ctx.settings.database_url]
    )
    assert done.exit_code == 0, done.output
    exported = json.loads((out / "leaderboard.json").read_text(encoding="utf-8"))["rows"]
    assert triples(exported) == aggregate
    exported_csv = list(csv.DictReader(io.StringIO((out / "leaderboard.csv").read_text())))
    assert triples(exported_csv) == aggregate
    html = (out / "index.html").read_text(encoding="utf-8")
    for model_id, (rank, best, worst) in aggregate.items():
        row = re.search(rf'<tr data-model="{model_id}" data-rank="(\d+)"', html)
        assert row is not None and int(row.group(1)) == rank
        if best != worst:
            assert f"{best}–{worst}</div>" in html

    # quorumbench leaderboard prints the rank and its range
    with EmbeddedServer(create_app(seed.ctx.settings, context=seed.ctx, run_scheduler=False)) as s:
        for bench in (None, "arith"):
            console = Console(record=True, width=200)
            cli_leaderboard(s.url, bench, 50, console)
            printed = console.export_text()
            names = {model_id: name for name, model_id in seed.ids.items()}
            for model_id, (rank, best, worst) in boards[bench].items():
                line = next(x for x in printed.splitlines() if f" {names[model_id]} " in x)
                assert re.match(rf"\W*{rank}\W+{best}–{worst}\W+{names[model_id]} ", line), line
