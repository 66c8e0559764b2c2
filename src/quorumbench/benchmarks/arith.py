"""arith: procedurally generated arithmetic word problems, contamination-free.

No data file: item ``<id>`` is a pure function of its id, derived from SHA-256, so
every platform generates the same text and answer. The pool holds 100,000 ids and a
task's seed picks among them through the shared sampling function. Items mix one to
three operations over small whole numbers; every answer is a whole number.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from quorumbench.benchmarks._generated import Draw, generated_sha256, is_pool_id, pool_ids
from quorumbench.benchmarks._math import Exemplar, math_request, score_number
from quorumbench.errors import ConfigError, DataError
from quorumbench.evaluation.backend import ChoiceResult, GenerateRequest, GenerateResult
from quorumbench.evaluation.benchmark import (
    BenchmarkContext,
    BenchmarkKind,
    DataSourceInfo,
    Labels,
    PromptStyle,
    Sample,
    Scored,
)

GENERATOR = "quorumbench-arith-generator-v1"
POOL_SIZE = 100_000
DEFAULT_SHOTS = 3
DEFAULT_MAX_NEW_TOKENS = 128
_NAMES = (
    "Ada", "Bruno", "Chen", "Dalia", "Emeka", "Farah", "Goran", "Hana", "Ivan", "Jun",
    "Kofi", "Lena", "Mateo", "Nia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tariq",
)  # fmt: skip
_THINGS = (
    "apples", "marbles", "stickers", "books", "coins", "pencils", "stamps", "shells",
    "cards", "beads", "cookies", "tickets",
)  # fmt: skip


@dataclass(frozen=True)
class ArithItem:
    question: str
    worked: str
    answer: int
    subject: str


def _add_sub(d: Draw, name: str, thing: str) -> ArithItem:
    a, b = d.between(5, 99), d.between(2, 60)
    c = d.between(1, a + b - 1)
    total = a + b - c
    return ArithItem(
        f"{name} has {a} {thing}. {name} gets {b} more and then gives away {c}. "
        f"How many {thing} does {name} have now?",
        f"{name} starts with {a}. After getting {b} more: {a} + {b} = {a + b}. "
        f"After giving away {c}: {a + b} - {c} = {total}.",
        total,
        "addition-subtraction",
    )


def _multiply(d: Draw, name: str, thing: str) -> ArithItem:
    boxes, per = d.between(2, 12), d.between(2, 25)
    extra = d.between(0, 30)
    total = boxes * per + extra
    return ArithItem(
        f"{name} buys {boxes} boxes with {per} {thing} in each box, and already had "
        f"{extra} {thing}. How many {thing} does {name} have in total?",
        f"The boxes hold {boxes} * {per} = {boxes * per}. "
        f"Adding the {extra} already there: {boxes * per} + {extra} = {total}.",
        total,
        "multiplication",
    )


def _divide(d: Draw, name: str, thing: str) -> ArithItem:
    friends, share = d.between(2, 9), d.between(2, 20)
    kept = d.between(1, 15)
    total = friends * share + kept
    return ArithItem(
        f"{name} has {total} {thing}, keeps {kept} and shares the rest equally among "
        f"{friends} friends. How many {thing} does each friend get?",
        f"{name} shares {total} - {kept} = {total - kept}. "
        f"Each friend gets {total - kept} / {friends} = {share}.",
        share,
        "division",
    )


def _multi_step(d: Draw, name: str, thing: str) -> ArithItem:
    days, per_day = d.between(2, 7), d.between(3, 15)
    lost, bonus = d.between(1, days * per_day - 1), d.between(2, 4)
    kept = days * per_day - lost
    total = kept * bonus
    return ArithItem(
        f"{name} collects {per_day} {thing} a day for {days} days, then loses {lost}. "
        f"A friend then multiplies what is left by {bonus}. How many {thing} are there now?",
        f"Collected: {days} * {per_day} = {days * per_day}. After the loss: "
        f"{days * per_day} - {lost} = {kept}. Multiplied: {kept} * {bonus} = {total}.",
        total,
        "multi-step",
    )


_KINDS: tuple[Callable[[Draw, str, str], ArithItem], ...] = (
    _add_sub,
    _multiply,
    _divide,
    _multi_step,
)


def generate_item(item_id: str) -> ArithItem:
    """The item with this id; a pure function."""
    d = Draw(GENERATOR, item_id)
    kind = _KINDS[d.below(len(_KINDS))]
    return kind(d, d.pick(_NAMES), d.pick(_THINGS))


def _exemplar(item: ArithItem) -> Exemplar:
    return Exemplar(item.question, f"{item.worked}\n#### {item.answer}")


class ArithBenchmark:
    """Generated arithmetic word problems; the quick-start default."""

    name = "arith"
    version = 1
    prompt_version = 1
    kind: BenchmarkKind = "generate"

    def __init__(self, context: BenchmarkContext) -> None:
        self._shots = DEFAULT_SHOTS if context.shots is None else context.shots
        self._max_new_tokens = context.max_new_tokens or DEFAULT_MAX_NEW_TOKENS
        if not 0 <= self._shots <= 16:
            raise ConfigError("arith takes 0 to 16 shots")
        self._exemplars = [_exemplar(generate_item(f"shot-{i}")) for i in range(self._shots)]

    @property
    def dataset_sha256(self) -> str:
        return generated_sha256(GENERATOR, POOL_SIZE)

    @property
    def source(self) -> DataSourceInfo:
        return DataSourceInfo("generated", GENERATOR)

    @property
    def config(self) -> Mapping[str, Any]:
        return {"shots": self._shots, "max_new_tokens": self._max_new_tokens}

    def sample_ids(self) -> Sequence[str]:
        return pool_ids(POOL_SIZE)

    def samples(self, ids: Sequence[str]) -> list[Sample]:
        out = []
        for sample_id in ids:
            if not is_pool_id(sample_id, POOL_SIZE):
                raise DataError(f"arith has no sample {sample_id!r}")
            item = generate_item(sample_id)
            labels = Labels(
                skill="reasoning",
                subject="science/math",
                format="short-form",
                source_category=item.subject,
            )
            fields = {"question": item.question, "gold": str(item.answer)}
            out.append(Sample(sample_id, labels, fields))
        return out

    def request(self, sample: Sample, style: PromptStyle) -> GenerateRequest:
        return math_request(sample.fields["question"], self._exemplars, style, self._max_new_tokens)

    def score(self, sample: Sample, result: GenerateResult | ChoiceResult) -> Scored:
        return score_number(sample.fields["gold"], result)
