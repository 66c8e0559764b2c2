"""The ask cache's pure parts: a task's label cells, model kinds and size bounds, SQLite's
stored times (the intervals: ``test_interval_batch.py``) (the database parts:
``tests/integration/db/test_ask_cache.py``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from quorumbench.benchmarks import load_benchmark
from quorumbench.core.plans import parse_plan
from quorumbench.evaluation.benchmark import BenchmarkContext
from quorumbench.services.ask_cache import _freshness, _kind, _selected
from quorumbench.services.label_cache import TOTAL_LABELS, sample_cells


@pytest.fixture(scope="module")
def safety():
    return load_benchmark("gen-safety", BenchmarkContext())


def test_cells_split_a_task_by_labels_and_add_its_total(safety):
    ids = list(safety.sample_ids())[:12]
    scores = [1.0, 0.0, 0.5] * 4
    cells = sample_cells(safety, ids, scores)
    assert cells is not None
    samples = safety.samples(ids)
    expected: dict[tuple[str, ...], list[float]] = {}
    for sample, score in zip(samples, scores, strict=True):
        labels = sample.labels.as_dict()
        key = tuple(labels[k] for k in ("skill", "subject", "target", "format", "language"))
        n, total, chance = expected.get(key, [0, 0.0, 0.0])
        expected[key] = [n + 1, total + score, chance + sample.chance]
    assert len(expected) == 2  # this benchmark's two label sets, both drawn
    for key, (n, total, chance) in expected.items():
        assert cells[key] == (n, pytest.approx(total), pytest.approx(chance))
    assert cells[TOTAL_LABELS] == (
        12,
        pytest.approx(sum(scores)),
        pytest.approx(sum(s.chance for s in samples)),
    )


def test_cells_of_a_task_that_cannot_be_labelled_are_none(safety):
    ids = list(safety.sample_ids())[:3]
    assert sample_cells(safety, ids, [1.0, 0.0]) is None  # ids and scores do not line up
    assert sample_cells(safety, ids, []) is None
    assert sample_cells(safety, ["no-such-item"], [1.0]) is None


def test_kinds_follow_the_ref_scheme_and_adapters_are_lora():
    assert _kind("hf:org/m@" + "0" * 40, {}) == "hf"
    assert _kind("hf:org/a@" + "0" * 40, {"kind": "adapter"}) == "lora"
    assert _kind("gguf:org/m/f.gguf@" + "0" * 40, None) == "gguf"
    assert _kind("openai:https://x.example/v1#m", {}) == "openai"
    assert _kind("mock:thing@" + "0" * 40, {}) == "mock"  # matches no plan kind


@pytest.mark.parametrize(
    ("models", "ref", "params", "details", "kept"),
    [
        ({"kinds": ["hf"]}, "hf:o/m@x", None, {}, True),
        ({"kinds": ["lora"]}, "hf:o/m@x", 10, {}, False),
        ({"max_params": 100}, "hf:o/m@x", None, {}, False),  # unknown size: out by a bound
        ({"min_params": 100}, "hf:o/m@x", None, {}, False),
        ({"max_params": 100}, "hf:o/m@x", 100, {}, True),
        ({"min_params": 100}, "hf:o/m@x", 99, {}, False),
        # an adapter's size is its base's plus its own, as the board shows it
        ({"max_params": 100}, "hf:o/a@x", 10, {"kind": "adapter", "base_params": 95}, False),
        ({"min_params": 100}, "hf:o/a@x", 10, {"kind": "adapter", "base_params": 95}, True),
        ({"max_params": 100}, "hf:o/a@x", 10, {"kind": "adapter"}, False),
    ],
)
def test_the_filter_selection(models, ref, params, details, kept):
    plan = parse_plan({"models": {"select": "filter", **models}})
    assert _selected(plan, ref, params, details) is kept


def test_sqlite_times_are_read_as_utc():
    assert _freshness("2026-11-26 12:00:05.250000") == datetime(
        2026, 11, 26, 12, 0, 5, 250000, tzinfo=UTC
    )
    assert _freshness("2026-11-26 12:00:05") == datetime(2026, 11, 26, 12, 0, 5, tzinfo=UTC)


def test_the_collector_is_paused_for_an_answer_and_restored_after() -> None:
    import gc

    from quorumbench.services.ask_cache import _collector_paused

    assert gc.isenabled()
    with _collector_paused():
        assert not gc.isenabled()
        with _collector_paused():  # an overlapping answer does not turn it back on early
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with _collector_paused():
            pass
        assert not gc.isenabled()  # off before: left off
    finally:
        gc.enable()
    with pytest.raises(RuntimeError), _collector_paused():
        raise RuntimeError("a failed answer")
    assert gc.isenabled()
