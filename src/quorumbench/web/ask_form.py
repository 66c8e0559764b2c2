"""The ``/ask`` plan form: a plan (``core/plans.py``) as plain HTML controls, and back.

The form shows each label key, the pillars, the benchmarks and the model selection as
checkboxes ("chips", ticked: in the plan; untick one to remove it) with a select or a
text field beside them to add a value; submitting it posts every ticked value and
every added one, and :meth:`FormState.plan_json` turns those fields into the plan's JSON
form, which :func:`quorumbench.core.plans.parse_plan` then validates. No JavaScript
is needed.

Fields: ``<key>`` (ticked chips, repeated) and ``add_<key>`` (added values, several
separated by commas) for every key of :data:`CHIP_KEYS`; ``select`` (ranked, filter,
named), ``kind`` (repeated), ``min_params``, ``max_params`` (``500M``, ``7B``);
``budget``; ``versions`` (the plan's versions as JSON, carried unchanged).

The planner's account of the query (which words matched which chip, the words it could
not map) travels in the hidden field ``how`` as JSON, so the chips keep their notes
while the plan is edited; it is only ever shown back to the person who posted it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from quorumbench.core.plans import DEFAULT_BUDGET, MODEL_KINDS, MODEL_SELECTS, Plan, PlanError
from quorumbench.core.taxonomy import FORMATS, LABEL_KEYS, PILLARS, SKILLS, SUBJECT_COARSE
from quorumbench.planner import Match, PlannerReport
from quorumbench.web.session import Form

CHIP_KEYS = (*LABEL_KEYS, "pillar", "benchmark", "name")
"""Form keys of chip lists: the five labels, ``pillar``, ``benchmark`` and ``name``
(a named model)."""
TITLES = {
    "skill": "Skill",
    "subject": "Subject",
    "target": "Target",
    "format": "Format",
    "language": "Language",
    "pillar": "Pillars",
    "benchmark": "Benchmarks",
    "name": "Named models",
}
HINTS = {
    "skill": "What ability the samples test.",
    "subject": "A coarse subject (science) includes its fine ones (science/math).",
    "target": "general, or local/<country code> for one country's knowledge (local/kr).",
    "format": "How the samples are asked and answered.",
    "language": "The samples' language, an ISO 639-1 code (en, ko).",
    "pillar": "The five pillars of the aggregate board.",
    "benchmark": "Only samples of these benchmarks.",
    "name": "Model names or refs, when the models are named.",
}
TYPED = ("subject", "target", "language", "name")
"""Keys whose values are typed (open vocabularies); the others are picked from a list."""
MATCH_KEYS = {"pillar": "pillar", "benchmark": "benchmark", "name": "models"}
"""The planner's ``Match.key`` of a form key (a label key is its own)."""
KINDS = MODEL_KINDS
SELECT_LABELS = {
    "ranked": "Every ranked model",
    "filter": "Models of some types and sizes",
    "named": "Only named models",
}
MAX_QUERY = 500
_SPLIT = re.compile(r"[,\n]")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmbt]?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}


@dataclass(frozen=True)
class Chip:
    """One value in the plan, and the words of the query that chose it."""

    value: str
    matches: tuple[Match, ...] = ()


@dataclass(frozen=True)
class ChipGroup:
    """A fieldset of the form: the chips of one key and the values it may add."""

    key: str
    title: str
    hint: str
    chips: tuple[Chip, ...]
    typed: bool
    """Values are typed in a text field (open vocabularies), else picked in a select."""
    choices: tuple[str, ...] = ()
    """Values the select offers to add (those not chosen yet)."""
    suggestions: tuple[str, ...] = ()
    """Values the text field suggests (a datalist); any valid value may be typed."""


@dataclass(frozen=True)
class How:
    """What the planner said about the query (:class:`PlannerReport` less the plan)."""

    query: str = ""
    language: str | None = None
    matches: tuple[Match, ...] = ()
    unmapped: tuple[str, ...] = ()
    planner: str | None = None
    fallback: str | None = None

    @classmethod
    def of(cls, report: PlannerReport) -> How:
        return cls(
            report.query,
            report.language,
            report.matches,
            report.unmapped,
            report.planner,
            report.fallback,
        )

    def as_json(self) -> str:
        data = {
            "query": self.query,
            "language": self.language,
            "matches": [[m.text, m.key, m.value, m.confidence, m.how] for m in self.matches[:200]],
            "unmapped": list(self.unmapped[:200]),
            "planner": self.planner,
            "fallback": self.fallback,
        }
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def parse(cls, text: str | None) -> How:
        """The hidden field back; an unreadable one is no account at all (it only
        annotates the chips, it never changes the plan)."""
        try:
            data = json.loads(text or "{}")
            matches = tuple(
                Match(str(t), str(k), str(v), float(c), str(h))
                for t, k, v, c, h in data.get("matches", [])
            )
            return cls(
                str(data.get("query") or ""),
                _text_or_none(data.get("language")),
                matches,
                tuple(str(w) for w in data.get("unmapped", [])),
                _text_or_none(data.get("planner")),
                _text_or_none(data.get("fallback")),
            )
        except (ValueError, TypeError, AttributeError):
            return cls()

    def for_chip(self, key: str, value: str) -> tuple[Match, ...]:
        wanted = MATCH_KEYS.get(key, key)
        return tuple(m for m in self.matches if m.key == wanted and m.value == value)

    def about_models(self) -> tuple[Match, ...]:
        """Size and type words (``small``, ``gguf``): they set the model filter."""
        return tuple(m for m in self.matches if m.key == "models")


def _text_or_none(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def plan_values(plan: Plan, key: str) -> tuple[str, ...]:
    """The plan's values for a form key of :data:`CHIP_KEYS`."""
    if key == "pillar":
        return plan.pillars
    if key == "benchmark":
        return plan.benchmarks
    if key == "name":
        return plan.models.names
    return plan.label_values(key)


@dataclass(frozen=True)
class FormState:
    """What the plan form shows: a plan's values, or a posted form's as typed (so a
    plan that is refused is shown back as it was posted, to be corrected)."""

    values: Mapping[str, tuple[str, ...]]
    """Per key of :data:`CHIP_KEYS`: the chosen values."""
    select: str = "ranked"
    kinds: tuple[str, ...] = ()
    min_params: str = ""
    max_params: str = ""
    budget: str = str(DEFAULT_BUDGET)
    versions: str = "{}"
    """The plan's versions as JSON, carried unchanged in a hidden field."""
    named_added: bool = False
    """A model name was typed in this post (it needs ``select`` 'named')."""

    @classmethod
    def of_plan(cls, plan: Plan) -> FormState:
        return cls(
            {key: plan_values(plan, key) for key in CHIP_KEYS},
            plan.models.select,
            plan.models.kinds,
            fmt_size(plan.models.min_params),
            fmt_size(plan.models.max_params),
            str(plan.budget),
            json.dumps(dict(plan.versions), sort_keys=True, separators=(",", ":")),
        )

    @classmethod
    def of_form(cls, form: Form) -> FormState:
        return cls(
            {key: tuple(_values(form, key)) for key in CHIP_KEYS},
            (form.one("select") or "ranked").strip(),
            tuple(k for k in form.all("kind") if k),
            (form.one("min_params") or "").strip(),
            (form.one("max_params") or "").strip(),
            (form.one("budget") or "").strip(),
            form.one("versions") or "{}",
            bool((form.one("add_name") or "").strip()),
        )

    def plan_json(self) -> dict[str, Any]:
        """The plan JSON the form describes (not validated: ``parse_plan`` does that);
        :class:`PlanError` for fields that are not even readable. The model selection
        decides which model fields count: names for 'named', types and sizes for
        'filter'."""
        if self.select not in MODEL_SELECTS:
            raise PlanError(f"models: choose one of {', '.join(MODEL_SELECTS)}")
        if self.select != "named" and self.named_added:
            raise PlanError("models: to name models, choose 'Only named models'")
        models: dict[str, Any] = {"select": self.select}
        if self.select == "named":
            models["names"] = list(self.values["name"])
        elif self.select == "filter":
            models["kinds"] = list(self.kinds)
            models["min_params"] = parse_size(self.min_params, "models.min_params")
            models["max_params"] = parse_size(self.max_params, "models.max_params")
        try:
            versions = json.loads(self.versions)
        except ValueError:
            raise PlanError("versions: the plan's versions are not readable JSON") from None
        plan: dict[str, Any] = {
            "labels": {key: list(self.values[key]) for key in LABEL_KEYS},
            "pillars": list(self.values["pillar"]),
            "benchmarks": list(self.values["benchmark"]),
            "models": models,
            "versions": versions,
        }
        if self.budget:
            try:
                plan["budget"] = int(self.budget)
            except ValueError:
                raise PlanError(
                    f"budget: {self.budget!r} is not a whole number of samples"
                ) from None
        return plan


def chip_groups(state: FormState, how: How, benchmarks: Sequence[str]) -> list[ChipGroup]:
    """Every chip list of the form, with what can be added to each."""
    vocab: dict[str, tuple[str, ...]] = {
        "skill": SKILLS,
        "format": FORMATS,
        "pillar": PILLARS,
        "benchmark": tuple(benchmarks),
    }
    suggest: dict[str, tuple[str, ...]] = {
        "subject": SUBJECT_COARSE,
        "target": ("general", "local/kr", "local/us", "local/cn", "local/jp"),
        "language": ("en", "ko", "zh", "ja", "de", "fr", "es"),
    }
    groups = []
    for key in CHIP_KEYS:
        chosen = state.values.get(key, ())
        chips = tuple(Chip(v, how.for_chip(key, v)) for v in chosen)
        choices = tuple(v for v in vocab.get(key, ()) if v not in chosen)
        hint = HINTS[key]
        if key == "benchmark" and not benchmarks:
            hint += " (This server runs none yet.)"
        typed = key in TYPED
        groups.append(
            ChipGroup(key, TITLES[key], hint, chips, typed, choices, suggest.get(key, ()))
        )
    return groups


def parse_size(text: str | None, where: str) -> int | None:
    """``"135M"``, ``"7B"``, ``"1.5b"`` or a plain count; None for empty."""
    if text is None or not text.strip():
        return None
    match = _SIZE.match(text)
    if match is None:
        raise PlanError(f"{where}: cannot read {text!r} as a size; write e.g. 500M or 7B")
    return int(float(match[1]) * _UNITS[match[2].lower()])


def fmt_size(params: int | None) -> str:
    """A size as the form shows it back (``135M``, ``7B``); empty for None."""
    if params is None:
        return ""
    for unit, size in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        text = f"{params / size:g}{unit}"
        if params >= size and parse_size(text, "") == params:
            return text
    return str(params)


def _values(form: Form, key: str) -> list[str]:
    """Ticked chips and added values of ``key``, stripped, in order, without repeats."""
    out: list[str] = []
    for raw in [*form.all(key), *_SPLIT.split(form.one(f"add_{key}") or "")]:
        value = raw.strip()
        if key in ("subject", "target", "language", "skill", "format", "pillar"):
            value = value.lower()
        if value and value not in out:
            out.append(value)
    return out


@dataclass
class EndpointFields:
    """The endpoint part of the form as posted (the key is never kept here)."""

    url: str = ""
    model: str = ""
    given: bool = False

    @classmethod
    def of(cls, form: Form) -> EndpointFields:
        url = (form.one("endpoint_url") or "").strip()
        model = (form.one("endpoint_model") or "").strip()
        return cls(url, model, bool(url or model))

    def problem(self) -> str | None:
        if not self.given:
            return None
        if not self.url:
            return "Your endpoint: give its base URL (e.g. https://host/v1) as well."
        if not self.model:
            return "Your endpoint: give the model name it serves as well."
        return None
