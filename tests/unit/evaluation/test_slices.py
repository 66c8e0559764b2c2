"""The plan's slice (``evaluation/slices.py``): the samples whose labels the plan
matches, in the order of ``SHA-256(seed, benchmark, sample id)``, the first ``limit``.
The draw builds samples only as far as it has to; what it returns is the definition."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st

from quorumbench.benchmarks import load_benchmark
from quorumbench.core.canonical import sha256_hex
from quorumbench.core.plans import parse_plan
from quorumbench.evaluation import slices
from quorumbench.evaluation.benchmark import BenchmarkContext, Labels, Sample
from quorumbench.evaluation.slices import SliceWalk, draw_slice

FORMATS = ("binary", "mcqa", "code")


class Listed:
    """A benchmark of given samples that counts the samples it builds."""

    def __init__(self, formats: Sequence[str]) -> None:
        self.formats = list(formats)
        self.built = 0

    def sample_ids(self) -> list[str]:
        return [f"s{i}" for i in range(len(self.formats))]

    def samples(self, ids: Sequence[str]) -> list[Sample]:
        self.built += len(ids)
        return [
            Sample(i, Labels("reasoning", "science/logic", format=self.formats[int(i[1:])]), {})
            for i in ids
        ]


def _definition(plan, benchmarks, pillars, limit, seed):
    """The module's definition, eagerly: every matching sample keyed, sorted, cut."""
    keyed = []
    for name in sorted(benchmarks):
        if not plan.covers_benchmark(name, pillars.get(name)):
            continue
        bench = benchmarks[name]
        for sample in bench.samples(bench.sample_ids()):
            if plan.matches(sample.labels.as_dict()):
                keyed.append((sha256_hex(f"{seed}\t{name}\t{sample.id}"), name, sample.id))
    keyed.sort()
    return [(name, sample_id) for _, name, sample_id in keyed[: max(0, limit)]]


@given(
    contents=st.dictionaries(
        st.sampled_from(["arith", "gen-math", "mmlu"]),
        st.lists(st.sampled_from(FORMATS), max_size=150),
        max_size=3,
    ),
    wanted=st.lists(st.sampled_from(FORMATS), unique=True, max_size=2),
    named=st.lists(st.sampled_from(["arith", "gen-math", "mmlu"]), unique=True, max_size=2),
    pillared=st.booleans(),
    limit=st.integers(-1, 200),
    seed=st.text(max_size=5),
)
def test_the_draw_is_the_definition(contents, wanted, named, pillared, limit, seed):
    plan = parse_plan(
        {
            "labels": {"format": wanted},
            "benchmarks": named,
            "pillars": ["math"] if pillared else [],
        }
    )
    pillars = {"arith": "math", "gen-math": "math", "mmlu": None}
    benches = {n: Listed(f) for n, f in contents.items()}
    names = {id(b): n for n, b in benches.items()}
    drawn = draw_slice(plan, benches, pillars, limit, seed)
    fresh = {n: Listed(f) for n, f in contents.items()}
    assert [(names[id(d.benchmark)], d.sample.id) for d in drawn] == _definition(
        plan, fresh, pillars, limit, seed
    )
    assert all(d.sample.labels.format in (wanted or FORMATS) for d in drawn)


def test_each_drawn_sample_comes_with_its_own_benchmark():
    one, two = Listed(["binary"] * 30), Listed(["code"] * 30)  # told apart by their labels
    drawn = draw_slice(parse_plan({}), {"a": one, "b": two}, {}, 60, "s")
    assert {id(d.benchmark) for d in drawn} == {id(one), id(two)}
    for d in drawn:
        assert (
            d.sample.labels == (one if d.benchmark is one else two).samples([d.sample.id])[0].labels
        )


def test_only_the_samples_the_draw_reaches_are_built():
    everything, rare = Listed(["mcqa"] * 5_000), Listed(["mcqa"] * 4_999 + ["code"])
    assert len(draw_slice(parse_plan({}), {"x": everything}, {}, 10, "seed")) == 10
    assert everything.built == slices.DRAW_CHUNK
    # a label only one sample has: the walk goes on until it is found
    (found,) = draw_slice(parse_plan({"labels": {"format": ["code"]}}), {"x": rare}, {}, 5, "s")
    assert found.sample.id == "s4999" and slices.DRAW_CHUNK <= rare.built <= 5_000


def test_a_generated_pool_is_drawn_without_building_it_whole():
    """gen-reasoning's 100,000 items: the draw of a few builds a chunk, not the pool, and
    a label filter holds (its two-option items are its ``possibility`` kind)."""
    bench = load_benchmark("gen-reasoning", BenchmarkContext())
    plan = parse_plan({"labels": {"format": ["binary"]}, "benchmarks": ["gen-reasoning"]})
    drawn = draw_slice(plan, {"gen-reasoning": bench}, {"gen-reasoning": "reasoning"}, 8, "x")
    assert len(drawn) == 8
    assert all(len(d.sample.fields["options"]) == 2 for d in drawn)
    assert all(d.sample.labels.source_category == "possibility" for d in drawn)
    keys = [sha256_hex(f"x\tgen-reasoning\t{d.sample.id}") for d in drawn]
    assert keys == sorted(keys)


@given(
    formats=st.lists(st.sampled_from(FORMATS), min_size=1, max_size=300),
    wanted=st.lists(st.sampled_from(FORMATS), unique=True, max_size=2),
    probe=st.integers(0, 320),
)
def test_membership_and_reading_again_agree_with_the_whole_slice(formats, wanted, probe):
    plan = parse_plan({"labels": {"format": wanted}, "benchmarks": ["a"]})
    walk = SliceWalk(plan, {"a": Listed(formats), "b": Listed(formats)}, {}, "seed")
    whole = {("a", d.sample.id) for d in walk}
    assert (("a", f"s{probe}") in walk) == (("a", f"s{probe}") in whole)
    assert ("b", "s0") not in walk  # a benchmark the plan does not cover
    assert [d.sample.id for d in walk] == [d.sample.id for d in walk.first(len(whole) + 5)]
    assert len(whole) == len(_definition(plan, {"a": Listed(formats)}, {}, 10**6, "seed"))


def test_a_walk_read_twice_and_in_parts_builds_each_sample_once():
    bench = Listed(["mcqa", "code"] * 200)
    walk = SliceWalk(parse_plan({"labels": {"format": ["code"]}}), {"x": bench}, {}, "s")
    first = walk.first(3)
    assert walk.first(3) == first and bench.built == slices.DRAW_CHUNK
    together = [(d.sample.id, other.sample.id) for d, other in zip(walk, walk, strict=False)]
    assert all(a == b for a, b in together) and len(together) == 200
    assert bench.built == 400
