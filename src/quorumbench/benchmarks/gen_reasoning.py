"""gen-reasoning: generated ordering puzzles and syllogisms over nonsense words.

Three item types, one third each (the ``source_category`` label):

* ``ordering``: 3 to 5 people and the adjacent links of a hidden order ("Ada is
  taller than Bruno.", some phrased in reverse: "Chen is shorter than Bruno."), in
  shuffled order; "Who is the tallest?" or "...the shortest?". The options are the
  people's names (chance 1/k).
* ``syllogism``: two categorical premises over three nonsense plurals (blickets,
  wugs, daxes) and a statement about the outer two; is it true, false or unknown
  (chance 1/3)?
* ``possibility``: the same premises; "can a blicket be a dax?", yes or no
  (chance 1/2).

Syllogism answers come from a model-theoretic check: a model is the set of occupied
regions of the three terms' Venn diagram; the statement is true when it holds in
every model of the premises, false when it holds in none, unknown otherwise. An item
is kept only when the answer is the same whether or not every term is assumed to be
non-empty, so the gold does not hinge on existential import. Each answer (true,
false, unknown; yes, no) is equally likely, and options are shuffled.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Literal, NamedTuple

from quorumbench.benchmarks._generated import (
    ChoiceItem,
    Draw,
    GeneratedChoiceBenchmark,
    article,
    with_gold_at,
)
from quorumbench.evaluation.benchmark import Labels

GENERATOR = "quorumbench-gen-reasoning-v1"
NAMES = (
    "Ada", "Bruno", "Chen", "Dalia", "Emeka", "Farah", "Goran", "Hana", "Ivan", "Jun",
    "Kofi", "Lena", "Mateo", "Nia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tariq",
)  # fmt: skip
RELATIONS = (
    # (more, less, most, least)
    ("taller", "shorter", "tallest", "shortest"),
    ("older", "younger", "oldest", "youngest"),
    ("faster", "slower", "fastest", "slowest"),
    ("stronger", "weaker", "strongest", "weakest"),
)
NONSENSE = (
    "blicket", "wug", "dax", "fep", "tove", "zorp", "glim", "mib", "lorp", "nerk",
    "quib", "yarb", "plim", "snib", "vork", "tepa",
)  # fmt: skip

Form = Literal["A", "E", "I", "O"]
Answer = Literal["true", "false", "unknown"]
X, Y, Z = 1, 2, 4
"""The three terms as bits of a Venn region (subject, middle, predicate)."""


class Statement(NamedTuple):
    """A categorical statement: A all s are p, E no s are p, I some s are p, O some s
    are not p (``s``, ``p`` term bits)."""

    form: Form
    s: int
    p: int


def holds(statement: Statement, model: frozenset[int]) -> bool:
    """Whether ``statement`` is true in a model (the set of occupied regions)."""
    form, s, p = statement
    if form == "A":
        return not any(r & s and not r & p for r in model)
    if form == "E":
        return not any(r & s and r & p for r in model)
    if form == "I":
        return any(r & s and r & p for r in model)
    return any(r & s and not r & p for r in model)


_MODELS = tuple(frozenset(r for r in range(8) if mask >> r & 1) for mask in range(256))
"""Every model: model ``i`` occupies region ``r`` when bit ``r`` of ``i`` is set."""


@functools.cache
def _truth(statement: Statement) -> int:
    """The models in which ``statement`` holds, as a 256-bit set."""
    return sum(1 << i for i, model in enumerate(_MODELS) if holds(statement, model))


@functools.cache
def _domain(nonempty: bool) -> int:
    """All models, or those in which every term is non-empty, as a 256-bit set."""
    return sum(
        1 << i
        for i, model in enumerate(_MODELS)
        if not nonempty or all(any(r & t for r in model) for t in (X, Y, Z))
    )


def judgement(premises: tuple[Statement, Statement], claim: Statement, nonempty: bool) -> Answer:
    """Whether the premises make ``claim`` true, false or leave it unknown."""
    models = _domain(nonempty) & _truth(premises[0]) & _truth(premises[1])
    if models and not models & ~_truth(claim):
        return "true"
    return "false" if models and not models & _truth(claim) else "unknown"


def _statements(a: int, b: int) -> list[Statement]:
    forms: tuple[Form, ...] = ("A", "E", "I", "O")
    return [Statement(f, s, p) for f in forms for s, p in ((a, b), (b, a))]


def _consistent(premises: tuple[Statement, Statement]) -> bool:
    return bool(_domain(True) & _truth(premises[0]) & _truth(premises[1]))


@functools.cache
def _syllogisms() -> dict[Answer, list[tuple[Statement, Statement, Statement]]]:
    """Premise pairs (X–Y, Y–Z) and X–Z claims whose answer does not depend on
    existential import, by answer."""
    out: dict[Answer, list[tuple[Statement, Statement, Statement]]] = {
        "true": [],
        "false": [],
        "unknown": [],
    }
    for first in _statements(X, Y):
        for second in _statements(Y, Z):
            if not _consistent((first, second)):
                continue
            for claim in _statements(X, Z):
                answer = judgement((first, second), claim, nonempty=True)
                if answer == judgement((first, second), claim, nonempty=False):
                    out[answer].append((first, second, claim))
    return out


@functools.cache
def _possibilities() -> dict[bool, list[tuple[Statement, Statement]]]:
    """Premise pairs by whether an X can be a Z (same under either reading)."""
    out: dict[bool, list[tuple[Statement, Statement]]] = {True: [], False: []}
    for first in _statements(X, Y):
        for second in _statements(Y, Z):
            if not _consistent((first, second)):
                continue
            some = Statement("I", X, Z)
            can = [judgement((first, second), some, ne) != "false" for ne in (True, False)]
            if can[0] == can[1]:
                out[can[0]].append((first, second))
    return out


def _plural(word: str) -> str:
    return word + ("es" if word.endswith("x") else "s")


def sentence(statement: Statement, words: dict[int, str]) -> str:
    """A statement in English, e.g. ``All blickets are wugs.``"""
    s, p = _plural(words[statement.s]), _plural(words[statement.p])
    text = {
        "A": f"All {s} are {p}.",
        "E": f"No {s} are {p}.",
        "I": f"Some {s} are {p}.",
        "O": f"Some {s} are not {p}.",
    }
    return text[statement.form]


def _premise_text(d: Draw, premises: tuple[Statement, Statement], words: dict[int, str]) -> str:
    return " ".join(sentence(p, words) for p in d.shuffled(premises))


def _item(facts: str, question: str, options: tuple[str, ...], gold: int, kind: str) -> ChoiceItem:
    labels = Labels(
        skill="reasoning",
        subject="science/logic",
        format="binary" if len(options) == 2 else "mcqa",
        source_category=kind,
    )
    context = f"{facts}\nQuestion: {question}\nAnswer:"
    return ChoiceItem(context, f"{facts} {question}", options, gold, labels)


def _ordering(d: Draw) -> ChoiceItem:
    k = d.between(3, 5)
    people = d.distinct(NAMES, k)  # people[0] has the most of the quality
    more, less, most, least = d.pick(RELATIONS)
    links = []
    for high, low in zip(people, people[1:], strict=False):
        links.append(
            f"{high} is {more} than {low}." if d.below(2) else f"{low} is {less} than {high}."
        )
    facts = " ".join(d.shuffled(links))
    top = d.below(2) == 0
    answer = people[0] if top else people[-1]
    options, gold = with_gold_at(d, answer, [p for p in people if p != answer])
    return _item(facts, f"Who is the {most if top else least}?", options, gold, "ordering")


def _terms(d: Draw) -> dict[int, str]:
    return dict(zip((X, Y, Z), d.distinct(NONSENSE, 3), strict=True))


def _syllogism(d: Draw) -> ChoiceItem:
    answers: tuple[Answer, ...] = ("true", "false", "unknown")
    answer = d.pick(answers)
    first, second, claim = d.pick(_syllogisms()[answer])
    words = _terms(d)
    facts = _premise_text(d, (first, second), words)
    claim_text = sentence(claim, words)
    question = (
        f"Statement: {claim_text[0].lower()}{claim_text[1:]} Based only on these facts, "
        "is the statement true, false or unknown?"
    )
    options, gold = with_gold_at(d, answer, [a for a in answers if a != answer])
    return _item(facts, question, options, gold, "syllogism")


def _possibility(d: Draw) -> ChoiceItem:
    can = d.below(2) == 0
    premises = d.pick(_possibilities()[can])
    words = _terms(d)
    facts = _premise_text(d, premises, words)
    x, z = words[X], words[Z]
    question = f"Based only on these facts, can {article(x)} {x} be {article(z)} {z}?"
    options, gold = with_gold_at(d, "yes" if can else "no", ["no" if can else "yes"])
    return _item(facts, question, options, gold, "possibility")


_KINDS: tuple[Callable[[Draw], ChoiceItem], ...] = (_ordering, _syllogism, _possibility)


def generate_item(item_id: str) -> ChoiceItem:
    """The item with this id; a pure function."""
    d = Draw(GENERATOR, item_id)
    return _KINDS[d.below(len(_KINDS))](d)


class GenReasoningBenchmark(GeneratedChoiceBenchmark):
    """Generated ordering puzzles and syllogisms (reasoning pillar)."""

    name = "gen-reasoning"
    generator = GENERATOR

    def item(self, item_id: str) -> ChoiceItem:
        return generate_item(item_id)
