"""Measured efficiency per model and hardware class (GET /v0/efficiency, /efficiency,
the model page): medians over counted results, beside the ranking and never in it;
on SQLite and PostgreSQL."""

from __future__ import annotations

import csv
import io
import json

import pytest

from .conftest import hub_ref
from .test_api import auth, payload, pull, register, signed, submit

CPU = {"cpu_model": "Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz", "cpu_count": 2}
GPU = {"cpu_model": "AMD EPYC 7B13", "cpu_count": 16, "gpu_name": "NVIDIA H100 80GB HBM3"}
CPU_CLASS, GPU_CLASS = "cpu:intel-xeon-gold-6230:2c", "gpu:nvidia-h100-80gb-hbm3"
MACHINES = {"r1": CPU, "r2": CPU, "r3": GPU}
SCORES = {"A": 0.5, "B": 0.75}  # B ranks first
ENERGY = {  # kWh per result of 4 samples; None: method "none"
    ("A", "r1"): 4e-6,
    ("A", "r2"): 6e-6,
    ("A", "r3"): 2e-6,
    ("B", "r1"): 2e-5,
    ("B", "r2"): None,
    ("B", "r3"): 8e-6,
}
TTFT = {"r1": 0.1, "r2": 0.3, "r3": 0.05}


@pytest.fixture
def ctx(make_ctx, db_url):
    return make_ctx(db_url)


def _measurements(model, who):
    energy = ENERGY[(model, who)]
    measured = {
        "wall_s": 2.0,
        "energy_method": "estimate" if who != "r3" else "nvml",
        "prompt_tokens": 400,
        "generated_tokens": 80,
        "ttft_s": TTFT[who],
        "decode_tokens_per_s": 40.0 if who != "r3" else 400.0,
        "peak_rss_bytes": 2**30,
    }
    if who == "r3":
        measured["peak_gpu_bytes"] = 3 * 2**30
    if energy is None:
        return measured | {"energy_method": "none"}
    return measured | {
        "energy_kwh": energy,
        "carbon_intensity_g_per_kwh": 400.0,
        "carbon_intensity_source": "setting",
        "co2_g": energy * 400.0,
    }


@pytest.fixture
def measured(api, people):
    """Models A and B, each with one DONE task from r1, r2 (CPU) and r3 (GPU)."""
    ids = {}
    for name, n in (("A", 91), ("B", 92)):
        answer = register(api, people, hub_ref(n))
        assert answer.status_code == 201, answer.text
        ids[answer.json()["id"]] = name
    for who in MACHINES:
        for _ in ids:
            lease = pull(api, people, who).json()
            model = ids[lease["task"]["model"]["id"]]
            body = payload(lease, SCORES[model])
            body["result"]["hardware"] = {"hardware": MACHINES[who]}
            body["result"]["measurements"] = _measurements(model, who)
            answer = api.post(
                f"/v0/leases/{lease['lease_id']}/result",
                params={"runner": f"{who}-box"},
                json=signed(api, people, who, lease, body),
                headers=auth(people[who]),
            )
            assert answer.status_code == 201, answer.text
    return {name: model_id for model_id, name in ids.items()}


def test_figures_per_model_and_hardware_class(api, measured):
    before = [r["model_id"] for r in api.get("/v0/leaderboard").json()["rows"]]
    assert before == [measured["B"], measured["A"]]
    found = api.get("/v0/efficiency").json()  # the class with the most results: CPU
    assert found["hardware_class"] == CPU_CLASS and found["sort"] == "efficiency"
    assert found["classes"] == [
        {"hardware_class": CPU_CLASS, "n_results": 4, "n_models": 2},
        {"hardware_class": GPU_CLASS, "n_results": 2, "n_models": 2},
    ]
    a, b = found["rows"]  # by efficiency: A first, though B ranks first
    assert (a["model_id"], b["model_id"]) == (measured["A"], measured["B"])
    assert a["n_results"] == 2 and a["energy_methods"] == {"estimate": 2}
    assert a["energy_kwh_per_1k"] == pytest.approx(1.25e-3)  # median of 1e-3 and 1.5e-3
    assert a["co2_g_per_1k"] == pytest.approx(0.5)
    assert a["ttft_s"] == pytest.approx(0.2) and a["decode_tokens_per_s"] == 40.0
    assert a["peak_rss_bytes"] == 2**30 and a["peak_gpu_bytes"] is None
    assert a["aggregate"] == 0.5 and a["efficiency"] == pytest.approx(400.0)
    assert a["carbon_sources"] == {"setting": 2}
    # B's r2 measured no energy: its energy is r1's alone, its latency both
    assert b["energy_methods"] == {"estimate": 1, "none": 1}
    assert b["energy_kwh_per_1k"] == pytest.approx(5e-3) and b["n_results"] == 2
    assert b["efficiency"] == pytest.approx(150.0) and b["ttft_s"] == pytest.approx(0.2)

    gpu = api.get("/v0/efficiency", params={"class": GPU_CLASS}).json()
    assert gpu["hardware_class"] == GPU_CLASS
    by_model = {r["model_id"]: r for r in gpu["rows"]}
    assert by_model[measured["A"]]["energy_kwh_per_1k"] == pytest.approx(5e-4)
    assert by_model[measured["A"]]["efficiency"] == pytest.approx(1000.0)
    assert by_model[measured["B"]]["efficiency"] == pytest.approx(375.0)
    assert by_model[measured["B"]]["energy_methods"] == {"nvml": 1}
    assert by_model[measured["B"]]["peak_gpu_bytes"] == 3 * 2**30

    # sorting: energy smallest first, decode speed largest first, model by name
    energy = api.get("/v0/efficiency", params={"sort": "energy_kwh_per_1k"}).json()
    assert [r["model_id"] for r in energy["rows"]] == [measured["A"], measured["B"]]
    score = api.get("/v0/efficiency", params={"sort": "aggregate"}).json()
    assert [r["model_id"] for r in score["rows"]] == [measured["B"], measured["A"]]
    bad = api.get("/v0/efficiency", params={"sort": "rank"})
    assert bad.status_code == 422
    unknown = api.get("/v0/efficiency", params={"klass": CPU_CLASS})
    assert unknown.status_code == 400 and "unknown-parameter" in unknown.text

    # a class with no data: no rows, the classes still listed
    empty = api.get("/v0/efficiency", params={"class": "gpu:nvidia-a100"}).json()
    assert empty["rows"] == [] and empty["hardware_class"] == "gpu:nvidia-a100"
    assert len(empty["classes"]) == 2

    text = api.get("/v0/efficiency", params={"class": GPU_CLASS, "format": "csv"})
    assert text.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(text.text)))
    assert [int(r["model_id"]) for r in rows] == [measured["A"], measured["B"]]
    assert float(rows[0]["efficiency"]) == pytest.approx(1000.0)
    assert rows[0]["energy_methods"] == "nvml:1" and rows[0]["hardware_class"] == GPU_CLASS

    # nothing of it moves the ranking
    after = api.get("/v0/leaderboard").json()["rows"]
    assert [r["model_id"] for r in after] == before
    assert [r["rank"] for r in after] == [1, 2]


def test_pages_show_the_figures_beside_the_ranking(api, measured):
    page = api.get("/efficiency")
    assert page.status_code == 200
    html = page.text
    assert "never used for it" in html and CPU_CLASS in html and GPU_CLASS in html
    assert "estimate 1, none 1" in html  # each energy figure with its method
    assert html.index(f'data-model="{measured["A"]}"') < html.index(f'data-model="{measured["B"]}"')
    by_energy = api.get("/efficiency", params={"class": GPU_CLASS, "sort": "aggregate"}).text
    assert by_energy.index(f'data-model="{measured["B"]}"') < by_energy.index(
        f'data-model="{measured["A"]}"'
    )
    assert 'aria-sort="descending"' in by_energy
    as_json = api.get("/efficiency", params={"class": GPU_CLASS, "format": "json"}).json()
    assert as_json["hardware_class"] == GPU_CLASS and len(as_json["rows"]) == 2
    as_csv = api.get("/efficiency", params={"format": "csv"}).text
    assert as_csv.splitlines()[0].startswith("model_id,model,hardware_class")
    nothing = api.get("/efficiency", params={"class": "gpu:nvidia-a100"}).text
    assert "No measurements on this hardware class yet." in nothing
    assert api.get("/efficiency", params={"sort": "rank"}).status_code == 400

    model = api.get(f"/models/{measured['B']}").text
    assert "Efficiency and edge" in model and "never used for it" in model
    assert f'data-class="{CPU_CLASS}"' in model and f'data-class="{GPU_CLASS}"' in model
    assert "estimate 1, none 1" in model and "nvml 1" in model


def test_a_model_without_measurements_says_so(api, people):
    answer = register(api, people, hub_ref(93))
    assert answer.status_code == 201
    model = api.get(f"/models/{answer.json()['id']}").text
    assert "Efficiency and edge" in model and "Not measured yet." in model
    assert api.get("/v0/efficiency").json() == {
        "hardware_class": None,
        "sort": "efficiency",
        "classes": [],
        "rows": [],
    }
    assert "No measurements yet." in api.get("/efficiency").text


def test_the_leaderboard_shows_efficiency_columns_on_request_in_the_same_order(api, measured):
    plain = api.get("/").text
    assert "not used for ranking" not in plain
    shown = api.get("/", params={"efficiency": GPU_CLASS}).text
    assert shown.count("not used for ranking") == 3 and GPU_CLASS in shown

    def order(html):
        return [html.index(f'data-model="{measured[m]}"') for m in ("B", "A")]

    assert order(plain)[0] < order(plain)[1] and order(shown)[0] < order(shown)[1]
    assert "1e+03" in shown and "375" in shown  # A's and B's efficiency on the GPU
    assert "nvml 1" in shown
    # links keep the columns: sorting, the refresh fragment
    assert "efficiency=gpu%3Anvidia-h100-80gb-hbm3" in shown
    fragment = api.get("/", params={"efficiency": GPU_CLASS, "fragment": 1}).json()["html"]
    assert "375" in fragment
    none = api.get("/", params={"efficiency": "gpu:nvidia-a100"}).text
    assert none.count("not measured") >= 4  # two models, two columns each


def _without(row, key):
    return {k: v for k, v in row.items() if k != key}


def test_the_leaderboard_downloads_carry_the_columns_on_request(api, people, measured):
    late = register(api, people, hub_ref(94))  # scored by runners that sent no measurements
    assert late.status_code == 201, late.text
    c = late.json()["id"]
    for who in ("r4", "r5", "r1"):
        lease = pull(api, people, who).json()
        assert lease["task"]["model"]["id"] == c
        assert submit(api, people, who, lease, 0.6).status_code == 201
    plain = api.get("/", params={"format": "json"}).json()
    assert "efficiency" not in plain and all("measured" not in r for r in plain["rows"])
    assert c in [r["model_id"] for r in plain["rows"]]

    shown = api.get("/", params={"format": "json", "efficiency": GPU_CLASS}).json()
    assert shown["efficiency"]["hardware_class"] == GPU_CLASS
    assert shown["efficiency"]["used_for_ranking"] is False
    assert "never used for it" in shown["efficiency"]["note"]
    # the same rows in the same order with the same ranks, each with its figures or None
    assert [_without(r, "measured") for r in shown["rows"]] == plain["rows"]
    rows = {r["model_id"]: r["measured"] for r in shown["rows"]}
    assert rows[c] is None
    a = rows[measured["A"]]
    assert set(a) == {
        "n_results",
        "energy_kwh_per_1k",
        "energy_methods",
        "co2_g_per_1k",
        "carbon_sources",
        "efficiency",
    }
    assert a["n_results"] == 1 and a["energy_methods"] == {"nvml": 1}
    assert a["energy_kwh_per_1k"] == pytest.approx(5e-4)
    assert a["co2_g_per_1k"] == pytest.approx(0.2) and a["carbon_sources"] == {"setting": 1}
    assert a["efficiency"] == pytest.approx(1000.0)
    assert rows[measured["B"]]["efficiency"] == pytest.approx(375.0)

    plain_csv = list(csv.DictReader(io.StringIO(api.get("/", params={"format": "csv"}).text)))
    assert "efficiency_class" not in plain_csv[0]
    text = api.get("/", params={"format": "csv", "efficiency": GPU_CLASS}).text
    header = text.splitlines()[0].split(",")
    assert header[-7:] == [
        "efficiency_class",
        "n_results",
        "energy_kwh_per_1k",
        "energy_methods",
        "co2_g_per_1k",
        "carbon_sources",
        "efficiency",
    ]
    lines = list(csv.DictReader(io.StringIO(text)))
    assert [{k: r[k] for k in plain_csv[0]} for r in lines] == plain_csv
    by_id = {int(r["model_id"]): r for r in lines}
    assert all(r["efficiency_class"] == GPU_CLASS for r in lines)
    assert float(by_id[measured["A"]]["efficiency"]) == pytest.approx(1000.0)
    assert by_id[measured["A"]]["energy_methods"] == "nvml:1"
    assert by_id[measured["A"]]["carbon_sources"] == "setting:1"
    assert by_id[measured["B"]]["n_results"] == "1"
    assert [by_id[c][k] for k in header[-6:]] == [""] * 6

    nothing = api.get("/", params={"format": "json", "efficiency": "gpu:nvidia-a100"}).json()
    assert nothing["efficiency"]["hardware_class"] == "gpu:nvidia-a100"
    assert [r["measured"] for r in nothing["rows"]] == [None] * len(plain["rows"])


def test_the_model_json_carries_its_figures_per_class(api, people, ctx, measured, tmp_path):
    from quorumbench.web.export import export_site

    found = api.get(f"/models/{measured['B']}", params={"format": "json"}).json()
    cpu, gpu = found["efficiency"]  # by class name
    assert (cpu["hardware_class"], gpu["hardware_class"]) == (CPU_CLASS, GPU_CLASS)
    assert cpu["n_results"] == 2 and cpu["energy_methods"] == {"estimate": 1, "none": 1}
    assert cpu["energy_kwh_per_1k"] == pytest.approx(5e-3)
    assert cpu["efficiency"] == pytest.approx(150.0) and cpu["ttft_s"] == pytest.approx(0.2)
    assert cpu["decode_tokens_per_s"] == 40.0 and cpu["peak_gpu_bytes"] is None
    assert gpu["energy_methods"] == {"nvml": 1} and gpu["peak_gpu_bytes"] == 3 * 2**30
    assert gpu["carbon_sources"] == {"setting": 1} and gpu["peak_rss_bytes"] == 2**30
    assert "model_id" not in gpu and "aggregate" not in gpu

    late = register(api, people, hub_ref(95))
    assert late.status_code == 201, late.text
    none = api.get(f"/models/{late.json()['id']}", params={"format": "json"}).json()
    assert none["efficiency"] == []

    export_site(ctx, tmp_path / "site", server_url="https://qb.example.org")
    written = json.loads((tmp_path / "site" / "models" / f"{measured['B']}.json").read_text())
    assert written["efficiency"] == found["efficiency"]
