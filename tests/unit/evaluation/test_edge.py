"""The edge benchmark's workload and repeat rule, with a fake backend whose timings are
scripted (evaluation/edge.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from quorumbench.core.efficiency import mean_sd
from quorumbench.errors import BackendError, ConfigError
from quorumbench.evaluation.backend import GenerateRequest, GenerateResult, ModelInfo
from quorumbench.evaluation.edge import (
    EDGE_TEXT,
    EdgeSettings,
    edge_prompt,
    needs_another_run,
    run_edge,
)
from quorumbench.evaluation.usage import current_usage


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class ScriptedBackend:
    """One word = one token. Each generate call takes ``durations[i]`` seconds on the
    fake clock and reports ``ttfts[i]`` and ``decodes[i]`` (None: reports nothing)."""

    def __init__(
        self,
        clock: FakeClock,
        durations: Sequence[float],
        ttfts: Sequence[float | None] | None = None,
        decodes: Sequence[float | None] | None = None,
        stop_at: int | None = None,
    ) -> None:
        self.clock = clock
        self.durations = list(durations)
        self.ttfts = list(ttfts) if ttfts is not None else [0.5] * len(durations)
        self.decodes = list(decodes) if decodes is not None else [1.5] * len(durations)
        self.stop_at = stop_at
        self.seen: list[GenerateRequest] = []

    @property
    def info(self) -> ModelInfo:
        return ModelInfo("fake:m", "fake", "r1", is_chat=False)

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def generate(self, requests, *, batch_size, progress=lambda _: None):
        assert batch_size == 1 and len(requests) == 1
        (request,) = requests
        i = len(self.seen)
        self.seen.append(request)
        usage = current_usage()
        if usage is not None:
            usage.add_prompt_tokens(self.count_tokens(request.prompt.text or ""))
            if self.ttfts[i] is not None:
                usage.add_first_token(self.ttfts[i])
            if self.decodes[i] is not None:
                usage.add_decode(self.decodes[i])
        self.clock.now += self.durations[i]
        n = request.max_new_tokens if self.stop_at is None else self.stop_at
        return [GenerateResult("x " * n, n, "length" if self.stop_at is None else "eos")]

    def choose(self, requests, *, batch_size, progress=lambda _: None):
        raise NotImplementedError

    def close(self) -> None:
        pass


def settings(**kw) -> EdgeSettings:
    base = {"prompt_tokens": 8, "gen_tokens": 4, "warmup": 1, "min_runs": 3}
    return EdgeSettings(**(base | {"min_time_s": 0.0, "max_runs": 10} | kw))


@pytest.mark.parametrize(
    ("runs", "elapsed", "expected"),
    [
        (0, 0.0, True),
        (2, 100.0, True),  # too few runs, however long
        (3, 9.9, True),  # enough runs, not enough time
        (3, 10.0, False),  # both reached
        (5, 0.0, False),  # the maximum count ends it even short of the time
    ],
)
def test_repeat_rule_needs_both_minimums_and_stops_at_the_maximum(runs, elapsed, expected):
    rule = EdgeSettings(min_runs=3, min_time_s=10.0, max_runs=5)
    assert needs_another_run(runs, elapsed, rule) is expected


def test_runs_continue_past_the_minimum_count_until_the_minimum_time():
    clock = FakeClock()
    backend = ScriptedBackend(clock, [100.0] + [2.0] * 20)  # the warm-up is slow
    result = run_edge(backend, settings(min_time_s=9.0), clock=clock)
    # the warm-up's 100 s are not counted: 5 runs of 2 s reach 9 s
    assert len(result.runs) == 5 and len(result.warmup_runs) == 1
    assert len(backend.seen) == 6


def test_the_maximum_count_ends_runs_short_of_the_minimum_time():
    clock = FakeClock()
    backend = ScriptedBackend(clock, [1.0] * 20)
    result = run_edge(backend, settings(warmup=2, min_time_s=1000.0, max_runs=4), clock=clock)
    assert len(result.runs) == 4 and len(result.warmup_runs) == 2


def test_min_time_zero_gives_exactly_the_minimum_count():
    clock = FakeClock()
    backend = ScriptedBackend(clock, [1.0] * 20)
    result = run_edge(backend, settings(warmup=0), clock=clock)
    assert len(result.runs) == 3 and result.warmup_runs == ()


def test_mean_and_sd_come_from_the_measured_runs_only():
    clock = FakeClock()
    ttfts = [9.0, 0.5, 1.0, 2.0]  # the warm-up's 9 s is left out
    decodes = [9.0, 1.5, 3.0, 0.75]
    backend = ScriptedBackend(clock, [1.0] * 4, ttfts, decodes)
    result = run_edge(backend, settings(), clock=clock)
    assert result.ttft_s == mean_sd([0.5, 1.0, 2.0])
    # prefill: 8 prompt tokens / TTFT; decode: tokens after the first / decode time
    assert result.prefill_tokens_per_s == mean_sd([16.0, 8.0, 4.0])
    assert result.decode_tokens_per_s == mean_sd([2.0, 1.0, 4.0])
    assert result.generated_tokens == mean_sd([4.0, 4.0, 4.0]) and result.forced_length
    assert result.ttft_s is not None and result.ttft_s.sd == pytest.approx(0.7637626158)
    data = json.loads(json.dumps(result.to_json()))
    assert data["ttft_s"] == {"mean": pytest.approx(7 / 6), "sd": pytest.approx(0.7637626), "n": 3}
    assert data["settings"]["prompt_tokens"] == 8 and len(data["runs"]) == 3
    assert data["hardware_class"] == result.hardware_class != ""
    assert data["notes"] == []


def test_the_request_forces_the_length_and_reuses_no_prefix():
    clock = FakeClock()
    backend = ScriptedBackend(clock, [1.0] * 4)
    run_edge(backend, settings(), clock=clock)
    first = backend.seen[0]
    assert all(r == first for r in backend.seen)  # the same prompt every run
    assert first.ignore_eos and not first.cache_prefix and first.max_new_tokens == 4
    assert first.stop == () and backend.count_tokens(first.prompt.text or "") == 8


def test_a_backend_without_ttft_or_decode_time_says_so():
    clock = FakeClock()
    backend = ScriptedBackend(clock, [1.0] * 4, [None] * 4, [None] * 4)
    result = run_edge(backend, settings(), clock=clock)
    assert result.ttft_s is None and result.prefill_tokens_per_s is None
    assert result.decode_tokens_per_s is None
    assert result.wall_s.n == 3  # what can be timed still is
    data = result.to_json()
    assert data["ttft_s"] is None and data["prefill_tokens_per_s"] is None
    assert any("no time to first token" in note for note in result.notes)
    assert any("no decode tokens/s" in note for note in result.notes)


def test_a_backend_that_stops_at_eos_anyway_is_reported():
    clock = FakeClock()
    backend = ScriptedBackend(clock, [1.0] * 4, stop_at=2)
    result = run_edge(backend, settings(), clock=clock)
    assert not result.forced_length and result.generated_tokens.mean == 2
    assert any("could not be held to 4" in note for note in result.notes)


def test_the_prompt_is_the_fixed_text_cut_to_exactly_n_tokens():
    backend = ScriptedBackend(FakeClock(), [])
    for n in (1, 7, 300):
        text = edge_prompt(backend, n)
        assert backend.count_tokens(text) == n
        assert (EDGE_TEXT * 5).startswith(text)


def test_a_tokenizer_that_jumps_over_the_count_is_an_error():
    class Pairs(ScriptedBackend):
        def count_tokens(self, text: str) -> int:
            return 2 * len(text.split())  # only even counts exist

    with pytest.raises(BackendError, match="exactly 7 tokens"):
        edge_prompt(Pairs(FakeClock(), []), 7)


def test_a_prompt_the_model_truncates_is_an_error():
    class Short(ScriptedBackend):
        def count_tokens(self, text: str) -> int:
            return len(text.split())

        def generate(self, requests, *, batch_size, progress=lambda _: None):
            usage = current_usage()
            assert usage is not None
            usage.add_prompt_tokens(0)  # reads none of it
            return [GenerateResult("x", 4, "length")]

    with pytest.raises(BackendError, match="read 0 prompt tokens, not 8"):
        run_edge(Short(FakeClock(), [1.0]), settings(), clock=FakeClock())


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"prompt_tokens": 0}, "prompt_tokens must be at least 1"),
        ({"gen_tokens": 0}, "gen_tokens must be at least 1"),
        ({"warmup": -1}, "warmup must be 0 or more"),
        ({"min_runs": 0}, "min_runs must be at least 1"),
        ({"min_time_s": -1.0}, "min_time_s must be between"),
        ({"min_runs": 5, "max_runs": 4}, r"max_runs \(4\) must be at least min_runs \(5\)"),
    ],
)
def test_bad_settings_are_config_errors(kw, message):
    with pytest.raises(ConfigError, match=message):
        EdgeSettings(**kw)
