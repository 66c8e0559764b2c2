"""gen-language: generated grammaticality minimal pairs, scored as BLiMP is.

Each item is two sentences that differ in one word or only in word order; the model
should give the grammatical one the higher total log-likelihood (chance 1/2). Seven
item types, one seventh each (the ``source_category`` label):

* ``agreement``: subject–verb agreement across a prepositional attractor of the
  other number ("The keys near the cabinet are / is very old.");
* ``agreement-relative``: across an object relative clause whose subject has the
  other number ("The lamp that the guards moved has / have been sold.");
* ``agreement-quantifier``: a quantified subject over a plural noun ("One of the
  doors is / are on the table.");
* ``npi``: "Nobody / Somebody has ever seen the film.";
* ``npi-scope``: "yet" needs a negation that scopes over it ("The guards who have
  met Ada have not seen the film yet." / "The guards who have not met Ada have seen
  the film yet.");
* ``determiner-noun``: this/these, that/those must agree with the noun after an
  adjective ("Ada is cleaning these old chairs." / "... this old chairs.");
* ``word-order``: two adjacent words swapped ("Ada found the large map." / "Ada
  found large the map.", "Ada will visit the museum." / "Ada visit will the
  museum.").

The context every sentence continues is the fixed word ``Sentence:``: it is the same
for both options, so the comparison is BLiMP's, and it keeps the first word of a
sentence scoreable on endpoints that echo log-probabilities. The letter-choice
prompt asks which sentence is grammatically correct. The grammatical sentence is
first or second with equal probability.
"""

from __future__ import annotations

from collections.abc import Callable

from quorumbench.benchmarks._generated import (
    ChoiceItem,
    Draw,
    GeneratedChoiceBenchmark,
    with_gold_at,
)
from quorumbench.benchmarks.gen_reasoning import NAMES
from quorumbench.evaluation.benchmark import Labels

GENERATOR = "quorumbench-gen-language-v1"
CONTEXT = "Sentence:"
QUESTION = "Which sentence is grammatically correct?"
NOUNS = (
    "key", "book", "chair", "lamp", "window", "door", "picture", "bottle", "letter",
    "cup", "plate", "drawer", "cabinet", "desk", "painting", "mirror", "basket",
    "blanket", "jar", "bag", "ticket", "sign", "card", "map",
)  # fmt: skip
PREPOSITIONS = ("near", "behind", "beside", "under", "next to", "above")
BE_PREDICATES = ("on the table", "in the hall", "very old", "still missing", "quite heavy")
HAVE_PREDICATES = ("been cleaned", "been moved", "been painted", "been sold")
VERBS = ("cleaning", "moving", "painting", "selling", "buying", "fixing")
OBJECTS = (("bought", "lamp"), ("found", "map"), ("sold", "desk"), ("moved", "chair"))
ADJECTIVES = ("old", "new", "small", "large", "red", "blue", "heavy", "cheap")
QUANTIFIERS = (
    ("One of the {}", False),
    ("Each of the {}", False),
    ("Every one of the {}", False),
    ("Several of the {}", True),
    ("Both of the {}", True),
    ("Many of the {}", True),
)
"""Quantified subjects over a plural noun, and whether the subject is plural."""
PEOPLE = ("teacher", "guard", "student", "painter", "driver", "visitor", "neighbour")
PAST_VERBS = ("found", "moved", "cleaned", "sold", "painted", "bought", "fixed")
PARTICIPLES = (
    ("seen", "film"), ("visited", "museum"), ("read", "letter"), ("opened", "door"),
    ("cleaned", "kitchen"), ("painted", "fence"),
)  # fmt: skip
MODALS = ("will", "can", "should", "might", "must", "could")
PLACES = (
    ("visit", "museum"), ("paint", "fence"), ("clean", "kitchen"), ("fix", "bicycle"),
    ("open", "window"), ("read", "letter"), ("call", "bakery"), ("sell", "piano"),
)  # fmt: skip


def _number(noun: str, plural: bool) -> str:
    return noun + "s" if plural else noun


def _item(good: str, bad: str, kind: str, d: Draw) -> ChoiceItem:
    options, gold = with_gold_at(d, good, [bad])
    labels = Labels(
        skill="knowledge",
        subject="hass/linguistics",
        format="binary",
        source_category=kind,
    )
    return ChoiceItem(CONTEXT, QUESTION, options, gold, labels)


def _agreeing(d: Draw, subject: str, plural: bool, kind: str) -> ChoiceItem:
    """The pair ``<subject> <verb> <predicate>.`` with a verb that does and one that
    does not agree with a subject of this number."""
    tense = d.below(3)
    if tense == 2:
        verbs, predicate = ("have", "has"), d.pick(HAVE_PREDICATES)
    else:
        verbs, predicate = (("are", "is"), ("were", "was"))[tense], d.pick(BE_PREDICATES)
    right, wrong = verbs if plural else verbs[::-1]
    return _item(f"{subject} {right} {predicate}.", f"{subject} {wrong} {predicate}.", kind, d)


def _agreement(d: Draw) -> ChoiceItem:
    head, attractor = d.distinct(NOUNS, 2)
    plural = d.below(2) == 0  # the head's number; the attractor has the other one
    subject = (
        f"The {_number(head, plural)} {d.pick(PREPOSITIONS)} the {_number(attractor, not plural)}"
    )
    return _agreeing(d, subject, plural, "agreement")


def _agreement_relative(d: Draw) -> ChoiceItem:
    head, person = d.pick(NOUNS), d.pick(PEOPLE)
    plural = d.below(2) == 0  # the head's number; the relative clause's subject has the other
    subject = (
        f"The {_number(head, plural)} that the {_number(person, not plural)} {d.pick(PAST_VERBS)}"
    )
    return _agreeing(d, subject, plural, "agreement-relative")


def _agreement_quantifier(d: Draw) -> ChoiceItem:
    plural_noun = _number(d.pick(NOUNS), True)
    quantifier, plural = d.pick(QUANTIFIERS)
    return _agreeing(d, quantifier.format(plural_noun), plural, "agreement-quantifier")


def _npi(d: Draw) -> ChoiceItem:
    participle, noun = d.pick(PARTICIPLES)
    rest = f"has ever {participle} the {noun}."
    return _item(f"Nobody {rest}", f"Somebody {rest}", "npi", d)


def _npi_scope(d: Draw) -> ChoiceItem:
    """``yet`` needs a negation that scopes over it, not one inside a relative clause;
    both sentences have the same words."""
    people, name = _number(d.pick(PEOPLE), True), d.pick(NAMES)
    met = d.pick(("met", "helped", "called", "liked"))
    participle, noun = d.pick(PARTICIPLES)
    tail = f"{participle} the {noun} yet."
    good = f"The {people} who have {met} {name} have not {tail}"
    bad = f"The {people} who have not {met} {name} have {tail}"
    return _item(good, bad, "npi-scope", d)


def _determiner_noun(d: Draw) -> ChoiceItem:
    name, verb, noun = d.pick(NAMES), d.pick(VERBS), d.pick(NOUNS)
    plural = d.below(2) == 0
    singular, plural_form = d.pick((("this", "these"), ("that", "those")))
    right, wrong = (plural_form, singular) if plural else (singular, plural_form)
    rest = f"{d.pick(ADJECTIVES)} {_number(noun, plural)}"
    return _item(
        f"{name} is {verb} {right} {rest}.",
        f"{name} is {verb} {wrong} {rest}.",
        "determiner-noun",
        d,
    )


def _word_order(d: Draw) -> ChoiceItem:
    name = d.pick(NAMES)
    if d.below(2) == 0:
        verb, noun = d.pick(OBJECTS)
        adjective = d.pick(ADJECTIVES)
        good = f"{name} {verb} the {adjective} {noun}."
        bad = f"{name} {verb} {adjective} the {noun}."
    else:
        modal = d.pick(MODALS)
        verb, place = d.pick(PLACES)
        good = f"{name} {modal} {verb} the {place}."
        bad = f"{name} {verb} {modal} the {place}."
    return _item(good, bad, "word-order", d)


_KINDS: tuple[Callable[[Draw], ChoiceItem], ...] = (
    _agreement,
    _agreement_relative,
    _agreement_quantifier,
    _determiner_noun,
    _word_order,
    _npi,
    _npi_scope,
)


def generate_item(item_id: str) -> ChoiceItem:
    """The item with this id; a pure function."""
    d = Draw(GENERATOR, item_id)
    return _KINDS[d.below(len(_KINDS))](d)


class GenLanguageBenchmark(GeneratedChoiceBenchmark):
    """Generated grammaticality minimal pairs (language pillar)."""

    name = "gen-language"
    generator = GENERATOR

    def item(self, item_id: str) -> ChoiceItem:
        return generate_item(item_id)
