"""The web pages over HTTP in process (no browser): content, query parameters,
downloads, errors and the static export. The browser tests are in tests/e2e/."""

from __future__ import annotations

import csv
import io
import re

import pytest
from fastapi.testclient import TestClient

from quorumbench.api.app import create_app
from quorumbench.services.wiring import reader_context
from quorumbench.web.export import export_site
from quorumbench.web.routes import parse_size

from .seed import MODELS, Seed


def names(client, query: str = "") -> list[str]:
    return [r["model"] for r in client.get(f"/?format=json&{query}").json()["rows"]]


def test_the_leaderboard_page_lists_every_scored_model(client):
    response = client.get("/")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    for name, *_ in MODELS:
        assert f">{name}</a>" in response.text
    assert response.text.count("DISPUTED</span>") == 1
    head = response.text.split("<body>")[0]
    assert 'href="/static/site.css' in head and "//" not in head  # nothing from elsewhere


def test_ranks_follow_the_score_and_survive_filters(client):
    rows = client.get("/?format=json").json()["rows"]
    ranked = [r for r in rows if r["rank"] is not None]
    # equal scores share a rank: alpha-1b and its LoRA, delta-360m and smol-q4
    assert [r["rank"] for r in ranked] == [1, 2, 2, 4, 4, 6]
    assert [r["score"] for r in ranked] == sorted((r["score"] for r in ranked), reverse=True)
    assert rows[-1]["model"] == "chat-endpoint" and rows[-1]["rank"] is None
    assert all(r["rank_best"] <= r["rank"] <= r["rank_worst"] for r in ranked)
    assert rows[0]["rank_best"] == 1 and rows[-1]["rank_best"] is None
    lora = next(r for r in ranked if r["model"] == "alpha-1b-lora")  # tied with alpha-1b
    assert lora["rank_best"] < lora["rank"]
    assert f"{lora['rank_best']}–{lora['rank_worst']}</div>" in client.get("/").text
    only = client.get("/?format=json&q=gamma").json()["rows"]
    assert only[0]["rank"] == next(r["rank"] for r in rows if r["model"] == "gamma-135m")


def test_the_aggregate_shows_pillars_and_what_an_unranked_model_misses(client):
    """The seed's servers weight reasoning (sums) and math (arith) equally."""
    page = client.get("/").text
    header = page.split("<thead>")[1].split("</thead>")[0]
    assert 'Reasoning <span class="weight">(50.0%)</span>' in header
    assert 'Coding <span class="weight">(0.0%)</span>' in header
    endpoint = page.split('data-name="chat-endpoint"')[1].split("</tr>")[0]
    assert "not ranked" in endpoint and "missing: reasoning" in endpoint
    body = client.get("/?format=json").json()
    assert body["pillar_weights"]["math"] == 0.5
    rows = {r["model"]: r for r in body["rows"]}
    assert rows["chat-endpoint"]["missing_pillars"] == ["reasoning"]
    alpha = rows["alpha-1b"]
    assert alpha["missing_pillars"] == [] and set(alpha["pillars"]) == {"reasoning", "math"}
    # generative benchmarks (chance level 0): a pillar of one benchmark is its score
    assert alpha["pillars"]["math"]["score"] == alpha["benchmarks"]["arith"]["score"]
    mean = (alpha["pillars"]["math"]["score"] + alpha["pillars"]["reasoning"]["score"]) / 2
    assert alpha["score"] == pytest.approx(mean)
    flat = list(csv.DictReader(io.StringIO(client.get("/?format=csv").text)))
    endpoint_row = next(r for r in flat if r["model"] == "chat-endpoint")
    assert endpoint_row["missing_pillars"] == "reasoning"
    assert endpoint_row["pillar_reasoning_score"] == ""
    # the model pages: pillar rows, and what keeps a model off the aggregate
    endpoint_id = rows["chat-endpoint"]["model_id"]
    assert "not ranked: no score yet on reasoning" in client.get(f"/models/{endpoint_id}").text
    model = client.get(f"/models/{alpha['model_id']}?format=json").json()
    assert model["pillars"] == alpha["pillars"] and model["missing_pillars"] == []
    assert "pillar: math" in client.get(f"/models/{alpha['model_id']}").text


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("type=lora", ["alpha-1b-lora"]),
        ("type=endpoint", ["chat-endpoint"]),
        ("license=mit", ["delta-360m"]),
        ("q=ALPHA", ["alpha-1b", "alpha-1b-lora"]),
        ("q=smol-gguf", ["smol-q4"]),  # the ref matches too
        ("min_params=5B", ["beta-7b"]),
        ("max_params=200M", ["gamma-135m", "smol-q4"]),  # a LoRA's size includes its base
    ],
)
def test_filters(client, query, expected):
    assert sorted(names(client, query)) == expected


def test_sorting_keeps_models_without_a_value_last(client):
    ascending = names(client, "sort=params&order=asc")
    descending = names(client, "sort=params")
    assert ascending[0] == "gamma-135m" and descending[0] == "beta-7b"
    assert ascending[-1] == descending[-1] == "chat-endpoint"
    assert names(client, "sort=model") == sorted(names(client), key=str.lower)
    assert names(client, "sort=disputed")[0] == "delta-360m"


def test_a_benchmark_ranks_models_measured_on_it(client):
    body = client.get("/?format=json&benchmark=arith").json()
    assert body["benchmark"] == "arith" and body["total"] == 7
    assert all(r["rank"] is not None for r in body["rows"])
    assert client.get("/?benchmark=nope").status_code == 400


def test_paging(client):
    pages = [client.get(f"/?format=json&per_page=3&page={n}").json() for n in (1, 2, 3)]
    assert [p["pages"] for p in pages] == [3, 3, 3]
    seen = [r["model"] for p in pages for r in p["rows"]]
    assert len(seen) == len(set(seen)) == 7
    assert client.get("/?format=json&per_page=3&page=99").json()["page"] == 3
    html = client.get("/?per_page=3&page=2").text
    assert 'rel="prev" href="/?per_page=3"' in html
    assert 'rel="next" href="/?per_page=3&amp;page=3"' in html


def test_urls_carry_the_state_of_the_view(client):
    html = client.get("/?type=base&sort=params").text
    # the column headers keep the filter and flip or set the order
    assert 'href="/?type=base&amp;sort=params&amp;order=asc"' in html
    assert 'href="/?type=base&amp;sort=model"' in html
    assert 'data-refresh="/?type=base&amp;sort=params&amp;fragment=1"' in html
    assert 'href="/?type=base&amp;sort=params&amp;format=csv"' in html


def test_the_refresh_fragment_is_the_table_body(client):
    body = client.get("/?fragment=1&type=gguf").json()
    assert body["count"] == "1 model" and body["html"].count("<tr ") == 1
    assert "smol-q4" in body["html"]


def test_csv_downloads(client, seed):
    rows = list(csv.DictReader(io.StringIO(client.get("/?format=csv").text)))
    assert len(rows) == 7 and rows[0]["model"] == "beta-7b" and rows[0]["arith_score"]
    model = client.get(f"/models/{seed.ids['beta-7b']}?format=csv")
    assert f'filename="model-{seed.ids["beta-7b"]}.csv"' in model.headers["content-disposition"]
    lines = [(r["benchmark"], r["subject"]) for r in csv.DictReader(io.StringIO(model.text))]
    assert lines == [
        ("arith", ""),
        ("sums", ""),
        ("aggregate", ""),
        ("sums", "science/even"),
        ("sums", "science/odd"),
    ]
    tasks = list(csv.DictReader(io.StringIO(client.get("/tasks?format=csv&limit=5").text)))
    assert len(tasks) == 5 and tasks[0]["runners"] == "1 2 3 4" and tasks[0]["outliers"] == "4"
    assert tasks[1]["runner_names"] == "volunteer0/box-0 volunteer1/box-1 volunteer2/box-2"
    runners = list(csv.DictReader(io.StringIO(client.get("/runners?format=csv").text)))
    assert [r["agreement_rate"] for r in runners] == ["1.0", "1.0", "1.0", "0.0"]


def test_the_model_page(client, seed):
    lora, base = seed.ids["alpha-1b-lora"], seed.ids["alpha-1b"]
    body = client.get(f"/models/{lora}?format=json").json()
    assert body["type"] == "lora" and body["base"]["id"] == base
    assert body["revision_url"] == f"https://huggingface.co/org/alpha-1b-lora/tree/{'5' * 40}"
    assert [len(v) for v in body["history"].values()] == [5, 5]
    assert body["aggregate"]["n_tasks"] == 10
    assert client.get(f"/models/{base}?format=json").json()["adapters"][0]["id"] == lora
    endpoint = client.get(f"/models/{seed.ids['chat-endpoint']}?format=json").json()
    assert endpoint["type"] == "endpoint" and endpoint["aggregate"] is None
    assert endpoint["revision_url"] is None
    gguf = client.get(f"/models/{seed.ids['smol-q4']}?format=json").json()
    assert gguf["revision_url"] == f"https://huggingface.co/org/smol-gguf/tree/{'6' * 40}"
    # the engine each is evaluated with, fixed at registration
    assert (body["engine"], endpoint["engine"], gguf["engine"]) == (
        "transformers",
        "endpoint",
        "llamacpp",
    )
    gguf_page = client.get(f"/models/{seed.ids['smol-q4']}").text
    assert '<dd id="engine">llama.cpp, the GGUF file as it is</dd>' in gguf_page
    html = client.get(f"/models/{lora}").text
    assert '<svg class="history"' in html and f'href="/models/{base}"' in html
    depths = body["depths"]
    assert set(depths) == set(body["scores"])  # every active benchmark it is measured on
    for depth in depths.values():
        assert depth["samples"] <= depth["tier_samples"] and depth["why"]
    assert '<table id="depths">' in html and "samples</td>" in html
    missing = client.get("/models/4242")
    assert missing.status_code == 404 and "no model 4242" in missing.text


def test_compare(client, seed):
    a, b, c = seed.ids["alpha-1b"], seed.ids["alpha-1b-lora"], seed.ids["gamma-135m"]
    same = client.get(f"/compare?models={a},{b}&format=json").json()["rows"]
    assert not any(r["intervals_separate"] for r in same)  # identical scores
    html = client.get(f"/compare?models={a},{b},{c}").text
    assert html.count('class="separated"') >= 1 and html.count('href="/models/') == 3
    assert client.get("/compare").status_code == 200  # the empty form
    started = client.get(f"/compare?models={a},")  # the model page's link
    assert started.status_code == 200 and "Add one to three more" in started.text
    for bad in (f"{a},{b},{a}", "1,2,3,4,5", "x,y"):
        assert client.get(f"/compare?models={bad}").status_code == 400
    assert client.get("/compare?models=1,4242").status_code == 404


def test_tasks_and_runners(client):
    disputed = client.get("/tasks?format=json&status=DISPUTED").json()["tasks"]
    assert len(disputed) == 1 and disputed[0]["spread"] == 1.0
    first = client.get("/tasks?format=json&limit=4").json()["tasks"]
    older = client.get(f"/tasks?format=json&limit=4&before={first[-1]['id']}").json()["tasks"]
    assert older[0]["id"] == first[-1]["id"] - 1
    assert 'href="/tasks?status=DONE&amp;before=' in client.get("/tasks?status=DONE&limit=2").text
    assert client.get("/tasks?status=LOST").status_code == 400
    runners = client.get("/runners?format=json").json()["runners"]
    assert [(r["account"], r["results"], r["outliers"]) for r in runners] == [
        ("volunteer0", 67, 0),
        ("volunteer1", 67, 0),
        ("volunteer2", 67, 0),
        ("volunteer3", 1, 1),
    ]


def test_an_outlier_is_marked_on_its_task(client, seed):
    tasks = client.get("/tasks?format=json&limit=1").json()["tasks"]
    (task,) = tasks
    assert task["model"] == "gamma-135m" and task["status"] == "DONE"
    assert len(task["runners"]) == 4 and task["outliers"] == [task["runners"][-1]]
    assert task["runner_names"][-1] == "volunteer3/box-3"
    html = client.get(f"/models/{seed.ids['gamma-135m']}").text
    assert html.count('title="its result was an outlier">outlier</span>') == 1


def test_static_files_prose_pages_and_the_openapi(client):
    css = client.get("/static/site.css")
    assert css.status_code == 200 and "prefers-color-scheme" in css.text
    assert "localStorage" in client.get("/static/site.js").text
    assert "quorumbench runner start --server http://testserver" in client.get("/submit").text
    assert "DISPUTED" in client.get("/methodology").text
    paths = client.get("/openapi.json").json()["paths"]
    assert "/" not in paths and "/models/{model_id}" not in paths


def test_size_parsing():
    assert parse_size("135M") == 135_000_000 and parse_size(" 1.5b ") == 1_500_000_000
    assert parse_size("2000") == 2000 and parse_size("") is None and parse_size(None) is None
    with pytest.raises(Exception, match="cannot read"):
        parse_size("huge")


def test_the_export_has_only_relative_links(seed, tmp_path):
    ctx = reader_context(seed.ctx.settings)
    try:
        summary = export_site(ctx, tmp_path / "site", server_url="https://qb.example.org")
    finally:
        ctx.close()
    assert summary.models == 7 and summary.files == 3 + 2 + 3 * 7
    assert summary.unlabelled == ["sums"]  # a custom spec: its path is not in the database
    out = tmp_path / "site"
    for page in [out / "index.html", *(out / "models").glob("*.html")]:
        links = re.findall(r'(?:href|src)="([^"]+)"', page.read_text())
        local = [x for x in links if not x.startswith(("https://huggingface.co/", "#"))]
        assert local and not [x for x in local if x.startswith(("/", "http"))], page
        for link in local:
            assert (page.parent / link).resolve().is_file(), (page, link)
    assert "https://qb.example.org/v0/models" in (out / "submit.html").read_text()


def test_the_export_command_refuses_a_missing_database(tmp_path):
    from typer.testing import CliRunner

    from quorumbench.cli.app import app

    missing = f"sqlite:///{tmp_path / 'none.db'}"
    result = CliRunner().invoke(
        app, ["export-site", str(tmp_path / "out"), "--database-url", missing]
    )
    assert result.exit_code == 1 and "there is no QuorumBench database at" in result.output
    assert "--create" not in result.output
    assert not (tmp_path / "none.db").exists() and not (tmp_path / "out").exists()
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    result = CliRunner().invoke(
        app, ["export-site", str(tmp_path / "out"), "--database-url", f"sqlite:///{empty}"]
    )
    assert result.exit_code == 1 and "holds no QuorumBench schema" in result.output


def test_scores_by_subject(client, seed):
    beta = client.get(f"/models/{seed.ids['beta-7b']}?format=json").json()["subjects"]
    assert list(beta) == ["sums"]  # the seed's ids are not arith's: no labels there
    even, odd = beta["sums"]
    assert (even["subject"], even["score"], even["n_samples"]) == ("science/even", 1.0, 10)
    assert (odd["subject"], odd["score"], odd["n_samples"]) == ("science/odd", 0.8, 10)
    # exact intervals: ten right answers of ten do not give a point
    assert even["ci_high"] == 1.0 and even["ci_low"] == pytest.approx(0.025**0.1)
    assert (odd["ci_low"], odd["ci_high"]) == pytest.approx((0.4439, 0.9748), abs=1e-4)
    html = client.get(f"/models/{seed.ids['beta-7b']}").text
    assert 'id="by-subject"' in html and html.count("<caption>sums</caption>") == 1
    # the endpoint has no sums tasks and arith has no labels: no section
    endpoint = client.get(f"/models/{seed.ids['chat-endpoint']}")
    assert 'id="by-subject"' not in endpoint.text


def test_compare_by_subject(client, seed):
    a, b = seed.ids["beta-7b"], seed.ids["gamma-135m"]
    rows = client.get(f"/compare?models={a},{b}&format=json").json()["rows"]
    subjects = [r for r in rows if r["subject"]]
    assert [(r["subject"], r["model"]) for r in subjects] == [
        ("science/even", "beta-7b"),
        ("science/even", "gamma-135m"),
        ("science/odd", "beta-7b"),
        ("science/odd", "gamma-135m"),
    ]
    assert all(r["intervals_separate"] for r in subjects)  # 1.0 vs 0.3, 0.8 vs 0.0
    lora = seed.ids["alpha-1b-lora"]
    same = client.get(f"/compare?models={seed.ids['alpha-1b']},{lora}&format=json").json()
    assert not any(r["intervals_separate"] for r in same["rows"] if r["subject"])
    text = client.get(f"/compare?models={a},{b}&format=csv").text
    header = text.splitlines()[0]
    assert header.startswith("benchmark,subject,model_id") and text.count(",science/even,") == 2


def test_models_to_compare_come_as_a_list_or_repeated(client, seed):
    a, b, c = (seed.ids[n] for n in ("beta-7b", "gamma-135m", "delta-360m"))
    repeated = client.get(f"/compare?models={a}&models={b}&models={c}&format=json").json()
    listed = client.get(f"/compare?models={a},{b},{c}&format=json").json()
    assert repeated == listed and {r["model_id"] for r in listed["rows"]} == {a, b, c}
    html = client.get(f"/compare?models={a}&models={b}").text
    assert f'value="{a},{b}"' in html  # the form shows the list it compares
    too_many = "&".join(f"models={i}" for i in seed.ids.values())
    assert client.get(f"/compare?{too_many}").status_code == 400
    assert client.get("/compare?models=" + "1," * 60).status_code == 400
    board = client.get("/").text
    assert board.count('form="compare-form"') == 7 and 'id="compare-form"' in board


def test_the_export_has_subject_tables_for_benchmarks_it_can_load(seed, tmp_path):
    ctx = reader_context(seed.ctx.settings)
    ctx.loaded_benchmarks.update(seed.ctx.loaded_benchmarks)  # as if sums could be loaded
    try:
        export_site(ctx, tmp_path / "site", server_url="https://qb.example.org")
    finally:
        ctx.close()
    page = (tmp_path / "site" / "models" / f"{seed.ids['beta-7b']}.html").read_text()
    assert "<caption>sums</caption>" in page
    rows = (tmp_path / "site" / "models" / f"{seed.ids['beta-7b']}.csv").read_text()
    assert ",science/even," in rows and (tmp_path / "site" / "leaderboard.csv").is_file()


def test_a_task_page_shows_who_said_what(client, seed):
    (task,) = client.get("/tasks?format=json&limit=1").json()["tasks"]  # the outlier one
    page = client.get(f"/tasks/{task['id']}")
    assert page.status_code == 200 and "gamma-135m" in page.text
    assert page.text.count('<tr class="outlier">') == 1 and "volunteer3/box-3" in page.text
    assert page.text.count("<td>agrees</td>") == 3
    assert page.text.count('<td class="num off"') == 4  # its four samples, all 1 against 0
    body = client.get(f"/tasks/{task['id']}?format=json").json()
    assert [r["runner"] for r in body["results"]][-1] == "volunteer3/box-3"
    assert [s["id"] for s in body["samples"]] == ["s0", "s1", "s2", "s3"]
    assert body["samples"][0] == {
        "id": "s0",
        "subject": None,  # arith cannot label the seed's ids
        "consensus": 0.0,
        "scores": [0.0, 0.0, 0.0, 1.0],
    }
    rows = list(csv.DictReader(io.StringIO(client.get(f"/tasks/{task['id']}?format=csv").text)))
    column = f"volunteer3/box-3 (result {body['results'][-1]['id']})"
    assert len(rows) == 4 and rows[0][column] == "1.0" and rows[0]["consensus"] == "0.0"
    (disputed,) = client.get("/tasks?format=json&status=DISPUTED").json()["tasks"]
    html = client.get(f"/tasks/{disputed['id']}").text
    assert "status-disputed" in html and 'id="samples"' in html
    sums = client.get(f"/models/{seed.ids['beta-7b']}?format=json").json()["tasks"][0]
    labelled = client.get(f"/tasks/{sums['id']}?format=json").json()["samples"]
    assert [s["subject"] for s in labelled] == [
        "science/even",
        "science/odd",
        "science/even",
        "science/odd",
    ]
    assert f'href="/tasks/{task["id"]}"' in client.get("/tasks").text
    assert client.get("/tasks/99999").status_code == 404
    fragment = client.get("/tasks?status=DISPUTED&fragment=1").json()["html"]
    assert fragment.count("<tr>") == 1 and "delta-360m" in fragment
    assert (
        'data-refresh="/tasks?status=DISPUTED&amp;fragment=1"'
        in client.get("/tasks?status=DISPUTED").text
    )


def test_an_open_task_hides_its_results_and_samples(tmp_path):
    made = Seed(tmp_path)
    try:
        assert made.task("beta-7b", "arith", 1, [[1.0] * 4], quorum=3) == "PENDING"
        app = create_app(made.ctx.settings, context=made.ctx, run_scheduler=False)
        with TestClient(app) as client:
            (task,) = client.get("/tasks?format=json").json()["tasks"]
            body = client.get(f"/tasks/{task['id']}?format=json").json()
            assert body["results"] == [] and body["samples"] == []
            assert body["n_results"] is None and body["final"] is False
            html = client.get(f"/tasks/{task['id']}").text
            assert 'id="open-task"' in html and "box-0" not in html and "s0" not in html
    finally:
        made.ctx.close()


def test_lineage_across_revisions(tmp_path):
    from datetime import UTC, datetime

    from quorumbench.db.models import Model

    made = Seed(tmp_path)
    try:
        alpha = made.ids["alpha-1b"]
        with made.ctx.db.write() as session:
            owner = session.get(Model, alpha).owner_id

            def add(name: str, ref: str, base: str | None, **extra) -> int:
                details = {"kind": "adapter"} if base else {}
                row = Model(
                    ref=ref,
                    name=name,
                    owner_id=owner,
                    revision=ref.rsplit("@", 1)[-1],
                    base_ref=base,
                    details={**details, **extra.pop("details", {})},
                    created_at=datetime(2026, 11, 20, tzinfo=UTC),
                    **extra,
                )
                session.add(row)
                session.flush()
                return row.id

            # made on alpha-1b at a revision this server does not have
            late = add(
                "alpha-late-lora", f"hf:org/late-lora@{'a' * 40}", f"hf:org/alpha-1b@{'9' * 40}"
            )
            # "_" must not match any character: org/aXb is not org/a_b
            other = add("aXb", f"hf:org/aXb@{'b' * 40}", None)
            lonely = add("a_b-lora", f"hf:org/a_b-lora@{'c' * 40}", f"hf:org/a_b@{'d' * 40}")
            # made on our conversion of a GGUF file registered here (by its hash)
            gguf = add("q8", f"gguf:/models/q8.gguf@{'f' * 64}", None, weights_sha256="f" * 64)
            on_gguf = add(
                "q8-lora",
                f"hf:/adapters/q8-lora@{'0' * 64}",
                f"hf:/cache/gguf/{'f' * 64}@{'1' * 64}",
                details={"base_gguf_sha256": "f" * 64},
            )
        app = create_app(made.ctx.settings, context=made.ctx, run_scheduler=False)
        with TestClient(app) as client:
            body = client.get(f"/models/{late}?format=json").json()
            assert body["base"] == {
                "id": alpha,
                "name": "alpha-1b",
                "ref": f"hf:org/alpha-1b@{'1' * 40}",
                "exact": False,
            }
            assert body["base_ref"] == f"hf:org/alpha-1b@{'9' * 40}"
            assert "registered here at another revision" in client.get(f"/models/{late}").text
            adapters = client.get(f"/models/{alpha}?format=json").json()["adapters"]
            assert [(a["name"], a["exact"]) for a in adapters] == [
                ("alpha-1b-lora", True),
                ("alpha-late-lora", False),
            ]
            base = client.get(f"/models/{lonely}?format=json").json()["base"]
            assert base["id"] is None and base["ref"] == f"hf:org/a_b@{'d' * 40}"
            assert client.get(f"/models/{other}?format=json").json()["adapters"] == []
            base = client.get(f"/models/{on_gguf}?format=json").json()["base"]
            assert (base["id"], base["exact"]) == (gguf, True)
            adapters = client.get(f"/models/{gguf}?format=json").json()["adapters"]
            assert [(a["id"], a["exact"]) for a in adapters] == [(on_gguf, True)]
    finally:
        made.ctx.close()


def test_the_ranking_is_reused_for_web_cache_s_seconds(tmp_path):
    from quorumbench.services.context import TtlMemo

    class Timer:  # the memo's clock, moved by hand (a busy machine takes its own time)
        now = 1000.0

        def __call__(self) -> float:
            return self.now

    timer = Timer()
    made = Seed(tmp_path)
    try:
        made.ctx.settings = made.ctx.settings.model_copy(update={"web_cache_s": 30})
        made.ctx.boards = TtlMemo(30, maxsize=64, timer=timer)  # as board.kept makes it
        app = create_app(made.ctx.settings, context=made.ctx, run_scheduler=False)
        with TestClient(app) as client:
            assert made.task("beta-7b", "arith", 1, [[1.0] * 4] * 3) == "DONE"
            assert names(client, "benchmark=arith") == ["beta-7b"]
            assert made.task("gamma-135m", "arith", 1, [[1.0] * 4] * 3) == "DONE"
            assert names(client, "benchmark=arith") == ["beta-7b"]  # the cached ranking
            gamma = client.get(f"/models/{made.ids['gamma-135m']}?format=json").json()
            assert gamma["scores"]["arith"]["score"] == 1.0  # a model page reads live
            timer.now += 29.9
            assert names(client, "benchmark=arith") == ["beta-7b"]  # still kept
            timer.now += 0.2
            assert names(client, "benchmark=arith") == ["beta-7b", "gamma-135m"]
            made.ctx.settings = made.ctx.settings.model_copy(update={"web_cache_s": 0})  # no memo
            assert made.task("delta-360m", "arith", 1, [[1.0] * 4] * 3) == "DONE"
            assert len(names(client, "benchmark=arith")) == 3
    finally:
        made.ctx.close()


def test_runners_are_searched_and_paged(client):
    first = client.get("/runners?format=json&per_page=3").json()
    assert (first["total"], first["pages"], len(first["runners"])) == (4, 2, 3)
    second = client.get("/runners?format=json&per_page=3&page=2").json()["runners"]
    assert [r["account"] for r in second] == ["volunteer3"]
    found = client.get("/runners?format=json&q=BOX-1").json()
    assert [r["name"] for r in found["runners"]] == ["box-1"] and found["total"] == 1
    html = client.get("/runners?per_page=3").text
    assert 'href="/runners?per_page=3&amp;page=2"' in html and "page 1 of 2" in html
    assert "No runner matches." in client.get("/runners?q=nobody").text
    assert client.get("/runners?per_page=0").status_code == 400


def test_a_paused_model_and_its_failures_on_the_live_pages_and_in_the_export(tmp_path):
    made = Seed(tmp_path)
    try:
        assert made.task("beta-7b", "arith", 1, [[1.0] * 4] * 3) == "DONE"
        task_id = made.fail_and_pause("beta-7b", "CUDA out of memory <oom>")
        model_id = made.ids["beta-7b"]
        app = create_app(made.ctx.settings, context=made.ctx, run_scheduler=False)
        with TestClient(app) as client:
            page = client.get(f"/models/{model_id}").text
            assert 'id="paused"' in page and "last reason: CUDA out of memory &lt;oom&gt;" in page
            assert f'<a href="/tasks/{task_id}">{task_id}</a>' in page
            assert "CUDA out of memory &lt;oom&gt;" in client.get(f"/tasks/{task_id}").text
            body = client.get(f"/models/{model_id}?format=json").json()
            assert body["paused_at"] and body["failures"][0]["task_id"] == task_id
            assert "volunteer0" not in str(body["failures"])
        ctx = reader_context(made.ctx.settings)
        try:
            export_site(ctx, tmp_path / "site", server_url="https://qb.example.org")
        finally:
            ctx.close()
        exported = (tmp_path / "site" / "models" / f"{model_id}.html").read_text()
        assert 'id="paused"' in exported and "CUDA out of memory &lt;oom&gt;" in exported
        assert "/tasks/" not in exported  # the export has no task pages: no link to one
    finally:
        made.ctx.close()


def test_a_runner_page_shows_its_measurement_flags(client, seed):
    flagged, calm = seed.flag_a_measurement()
    html = client.get(f"/runners/{flagged}").text
    assert '<dd id="measurement-flags">1</dd>' in html and '<table id="flagged">' in html
    assert "<code>cpu:amd-epyc-7b13:2c</code>" in html and ">10.00<" in html  # × median
    assert "they do not affect scores, consensus or reputation" in html
    assert "<script" not in html.split("<main", 1)[1]  # the page needs no JavaScript
    other = client.get(f"/runners/{calm}").text
    assert '<dd id="measurement-flags">0</dd>' in other and "No flagged results." in other
    method = client.get("/methodology").text
    assert "more than 3× above or below its class" in method
    assert "flags do not affect scores, consensus or reputation" in method
    # edge tasks are off in tests unless asked for; the page says so, and ranks on nothing
    assert (
        "schedules no edge tasks" in method and "<strong>never used for ranking</strong>" in method
    )
    shown = client.get(f"/runners/{flagged}?format=json").json()  # the list is kept a while
    assert shown["runner"]["measurement_flags"] == 1 and len(shown["flagged"]) == 1
    assert shown["flagged"][0]["ratio"] == pytest.approx(10.0)
