"""Pillars on a server (SQLite and PostgreSQL): five pillars from arith, TruthfulQA-MC1
(multiple choice, 2 to 13 options) and three custom benchmarks; per-item chance
correction, pillars a model misses, the API's fields, and basis changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select, update

from quorumbench.core.intervals import combined_interval, score_interval
from quorumbench.core.pillars import chance_corrected
from quorumbench.core.taxonomy import SEED_PILLAR_WEIGHTS, normalised_weights
from quorumbench.db.models import Benchmark, LeaderboardAggregate, LeaderboardEntry, Task
from quorumbench.errors import ConfigError
from quorumbench.services.benchmarks import ensure_benchmarks, loaded
from quorumbench.services.chance import fill_chance_sums
from quorumbench.services.leaderboard import leaderboard

from .test_leaderboard_aggregate import Scene

PILLARS = {"sums": "coding", "words": "language", "safe": "safety"}
SEED = normalised_weights(SEED_PILLAR_WEIGHTS)


def spec_named(sums_spec: str, name: str) -> str:
    spec = json.loads(Path(sums_spec).read_text(encoding="utf-8"))
    spec["name"] = name
    path = Path(sums_spec).with_name(f"{name}.json")
    path.write_text(json.dumps(spec), encoding="utf-8")
    return str(path)


@pytest.fixture
def benches(sums_spec) -> list[str]:
    return ["arith", "truthfulqa-mc1", sums_spec, spec_named(sums_spec, "words"),
            spec_named(sums_spec, "safe")]  # fmt: skip


@pytest.fixture
def five(make_ctx, clock, db_url, benches, datasets_dir) -> Scene:
    ctx = make_ctx(
        db_url,
        benchmarks=benches,
        datasets_dir=datasets_dir,
        pillars=PILLARS,
        pillar_weights=dict(SEED_PILLAR_WEIGHTS),
    )
    return Scene(ctx, clock)


MC1_IDS = ["0000", "0001", "0002", "0003", "0004"]
MC1 = [1.0, 0.0, 1.0, 1.0, 0.0]


def test_chance_is_corrected_per_item(five):
    a = five.model("alpha")
    five.finalize(a, "truthfulqa-mc1", MC1, ids=MC1_IDS)
    chances = [s.chance for s in loaded(five.ctx, "truthfulqa-mc1").samples(MC1_IDS)]
    assert len(set(chances)) > 1  # items with different numbers of options
    chance = sum(chances) / len(chances)
    (row,) = leaderboard(five.ctx, benchmark="truthfulqa-mc1").rows
    assert row.pillar == "reasoning" and row.chance == pytest.approx(chance)
    low, high = score_interval(3.0, 5)
    assert (row.score, row.ci_low, row.ci_high) == pytest.approx((0.6, low, high))
    assert row.normalised is not None
    assert row.normalised.score == pytest.approx((0.6 - chance) / (1 - chance))
    assert (row.normalised.ci_low, row.normalised.ci_high) == pytest.approx(
        (chance_corrected(low, chance), chance_corrected(high, chance))
    )
    with five.ctx.db.read() as session:
        (task_sum,) = session.scalars(select(Task.chance_sum).where(Task.status == "DONE"))
    assert task_sum == pytest.approx(sum(chances))


def test_a_model_is_ranked_only_with_every_pillar(five):
    a, b = five.model("alpha"), five.model("beta")
    for model in (a, b):
        five.finalize(model, "truthfulqa-mc1", MC1, ids=MC1_IDS)
        five.finalize(model, "arith", [1.0, 0.0, 1.0, 1.0])
        five.finalize(model, "sums", [1.0, 1.0, 0.0, 1.0])
        five.finalize(model, "words", [0.0, 1.0, 0.0, 1.0])
    five.finalize(a, "safe", [1.0, 1.0, 1.0, 0.0])  # b has no safety score

    (ranked,) = leaderboard(five.ctx).rows
    assert ranked.model_id == a and ranked.rank == 1 and ranked.missing_pillars == ()
    assert ranked.pillars is not None
    pillars = ranked.pillars
    assert list(pillars) == ["reasoning", "coding", "math", "language", "safety"]
    (mc1,) = leaderboard(five.ctx, benchmark="truthfulqa-mc1", model_query="alpha").rows
    assert mc1.normalised is not None
    assert pillars["reasoning"].score == pytest.approx(mc1.normalised.score)
    assert pillars["math"].score == pytest.approx(0.75)  # generative: raw = normalised
    assert ranked.score == pytest.approx(sum(SEED[p] * i.score for p, i in pillars.items()))
    expected = combined_interval(
        [(SEED[p], i.score, i.ci_low, i.ci_high) for p, i in pillars.items()]
    )
    assert (ranked.ci_low, ranked.ci_high) == pytest.approx(expected)

    page = leaderboard(five.ctx, unranked=True)
    assert page.total == 2
    other = next(r for r in page.rows if r.model_id == b)
    assert other.rank is None and other.missing_pillars == ("safety",)
    assert other.pillars is not None and "safety" not in other.pillars

    from fastapi.testclient import TestClient

    from quorumbench.api.app import create_app

    with TestClient(create_app(five.ctx.settings, context=five.ctx, run_scheduler=False)) as api:
        body = api.get("/v0/leaderboard", params={"unranked": "true"}).json()
        row = api.get("/v0/leaderboard", params={"benchmark": "truthfulqa-mc1"}).json()["rows"][0]
        (listed,) = [x for x in api.get("/v0/benchmarks").json() if x["name"] == "safe"]
    by_id = {r["model_id"]: r for r in body["rows"]}
    assert by_id[b]["rank"] is None and by_id[b]["missing_pillars"] == ["safety"]
    assert by_id[a]["pillars"]["reasoning"]["score"] == pytest.approx(mc1.normalised.score)
    assert row["score"] == pytest.approx(0.6) and row["chance"] == pytest.approx(mc1.chance)
    assert row["normalised"]["score"] == pytest.approx(mc1.normalised.score)
    assert listed["pillar"] == "safety"


def test_basis_changes_recompute_the_aggregates(
    five, make_ctx, db_url, benches, datasets_dir, sums_spec
):
    a = five.model("alpha")
    five.finalize(a, "truthfulqa-mc1", MC1, ids=MC1_IDS)
    five.finalize(a, "arith", [1.0, 0.0, 1.0, 1.0])
    five.finalize(a, "sums", [1.0, 1.0, 0.0, 1.0])
    five.finalize(a, "words", [0.0, 1.0, 0.0, 1.0])
    assert leaderboard(five.ctx).rows == []  # no safety score yet

    def restart(**settings):
        base = {"pillars": PILLARS, "pillar_weights": dict(SEED_PILLAR_WEIGHTS)}
        five.ctx = make_ctx(
            db_url, benchmarks=benches, datasets_dir=datasets_dir, **{**base, **settings}
        )
        with five.ctx.db.read() as session:
            (row,) = session.scalars(select(LeaderboardAggregate))
            return row

    # safety weighted 0: ranked on the four others, renormalised
    zero = {**SEED_PILLAR_WEIGHTS, "safety": 0.0}
    row = restart(pillar_weights=zero)
    assert row.complete and row.missing_pillars == []
    (ranked,) = leaderboard(five.ctx).rows
    weights = normalised_weights(zero)
    assert ranked.score == pytest.approx(
        sum(weights[p] * v["score"] for p, v in row.pillars.items())
    )
    # "words" and "safe" swap pillars: safety has a score, language (weighted) none
    row = restart(pillars={**PILLARS, "words": "safety", "safe": "language"})
    assert not row.complete and row.missing_pillars == ["language"]
    assert set(row.pillars) == {"reasoning", "coding", "math", "safety"}
    # two benchmarks in coding, equal; then one weighs 3 (changed in the database)
    both = {**PILLARS, "words": "coding"}
    row = restart(pillars=both)
    assert row.pillars["coding"]["score"] == pytest.approx((0.75 + 0.5) / 2)
    with five.ctx.db.write() as session:
        session.execute(update(Benchmark).where(Benchmark.name == "words").values(weight=3.0))
    row = restart(pillars=both)
    assert row.pillars["coding"]["score"] == pytest.approx((0.75 + 3 * 0.5) / 4)
    # chance sums lost (rows from before migration 0014): the start fills them in
    with five.ctx.db.write() as session:
        session.execute(update(LeaderboardEntry).values(chance_sum=None))
        session.execute(update(Task).values(chance_sum=None))
        session.execute(update(LeaderboardAggregate).values(basis=""))
    assert restart(pillars=both).pillars == row.pillars
    with five.ctx.db.read() as session:
        assert None not in set(session.scalars(select(LeaderboardEntry.chance_sum)))


def test_a_benchmark_without_a_pillar_stops_the_start(make_ctx, db_url, sums_spec):
    with pytest.raises(ConfigError, match="'other' has no pillar: name one in QB_PILLARS"):
        make_ctx(db_url, benchmarks=["arith", spec_named(sums_spec, "other")])


def test_pillar_settings_are_checked():
    from quorumbench.settings import ServerSettings

    with pytest.raises(ConfigError, match="QB_PILLAR_WEIGHTS .*no weight for pillars: coding"):
        ServerSettings(pillar_weights={"reasoning": 1, "math": 1, "language": 1, "safety": 1})
    with pytest.raises(ConfigError, match="QB_PILLARS gives benchmark 'x' a pillar 'maths'"):
        ServerSettings(pillars={"x": "maths"})
    assert ensure_benchmarks  # (the start: services.benchmarks.ensure_benchmarks)


def test_an_unknown_chance_level_leaves_the_pillar_without_a_score(five):
    """Sample ids the benchmark here does not have (another version's, say): the chance
    level is not known, and the row is not corrected rather than corrected wrongly."""
    a = five.model("alpha")
    five.finalize(a, "truthfulqa-mc1", [1.0, 0.0], ids=["x-1", "x-2"])
    (row,) = leaderboard(five.ctx, benchmark="truthfulqa-mc1").rows
    assert row.chance is None and row.normalised is None and row.score == 0.5
    (unranked,) = leaderboard(five.ctx, unranked=True).rows
    assert unranked.pillars == {} and "reasoning" in unranked.missing_pillars
    with five.ctx.db.write() as session:  # a start cannot fill it in either
        assert fill_chance_sums(five.ctx, session) == 0
