"""A plan: what a personalized leaderboard asks, as a small versioned document.

A person's question ("best small model for Korean high-school math") becomes a plan
(``planner/``), which they can read and edit before anything runs. The plan alone
decides the answer: label filters over taxonomy v1 (``core/taxonomy.py``), which
benchmarks and pillars, which models, the person's own endpoints (URL and model name,
never a key), a sample budget, and the versions it was made with. Its id is the
SHA-256 of its canonical JSON, so the same plan has the same id and URL everywhere.

Filter semantics (:meth:`Plan.matches`): within one label the listed values are
alternatives (any may match), across labels all must match, an empty list means any
value. A ``subject`` value without ``/`` (``science``) matches the coarse subject and
all its fine ones (``science/math``); one with ``/`` matches exactly. ``pillars`` and
``benchmarks`` filter by the benchmark a sample comes from.

The JSON form (version 1)::

    {"version": 1,
     "labels": {"skill": [...], "subject": [...], "target": [...],
                "format": [...], "language": [...]},
     "pillars": [...], "benchmarks": [...],
     "models": {"select": "ranked" | "filter" | "named",
                "names": [...], "kinds": [...], "max_params": int | null,
                "min_params": int | null},
     "endpoints": [{"url": "https://...", "model": "name"}],
     "budget": 100,
     "versions": {"taxonomy": 1, "planner": "offline/1",
                  "benchmarks": {"gsm8k": 3}, "seed": "..."}}

Missing keys take their defaults; unknown keys are refused (a typo must not widen a
plan silently). Lists are kept sorted and without duplicates, so equal plans have
equal bytes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard
from urllib.parse import urlsplit

from quorumbench.core.canonical import canonical_json, sha256_hex
from quorumbench.core.taxonomy import (
    FORMATS,
    LABEL_KEYS,
    PILLARS,
    SKILLS,
    SUBJECT_COARSE,
    TAXONOMY_VERSION,
)

PLAN_VERSION = 1
MODEL_SELECTS = ("ranked", "filter", "named")
"""``ranked``: every model on the public board; ``filter``: those of ``kinds`` and
within the parameter bounds; ``named``: exactly ``names`` (model names or refs)."""
MODEL_KINDS = ("hf", "lora", "gguf", "openai")
DEFAULT_BUDGET = 100
"""Samples per model the answer wants before it calls a slice thick enough."""
MAX_BUDGET = 5_000
MAX_ENDPOINTS = 3
MAX_LIST = 200
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@#+-]{0,511}$")
_BENCHMARK = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_SUBJECT = re.compile(r"^[a-z-]+(?:/[a-z0-9]+(?:-[a-z0-9]+)*)?$")
_TARGET = re.compile(r"^(?:general|local/[a-z]{2})$")
_LANGUAGE = re.compile(r"^[a-z]{2}$")


class PlanError(ValueError):
    """A plan document that is not valid; the message says what and where."""


@dataclass(frozen=True)
class ModelSelection:
    select: str = "ranked"
    names: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    min_params: int | None = None
    max_params: int | None = None


@dataclass(frozen=True)
class Endpoint:
    """A person's own OpenAI-compatible endpoint: where and which model, never a key."""

    url: str
    model: str


@dataclass(frozen=True)
class Plan:
    labels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Per label key in :data:`LABEL_KEYS`, the allowed values (absent/empty: any)."""
    pillars: tuple[str, ...] = ()
    benchmarks: tuple[str, ...] = ()
    models: ModelSelection = ModelSelection()
    endpoints: tuple[Endpoint, ...] = ()
    budget: int = DEFAULT_BUDGET
    versions: Mapping[str, Any] = field(default_factory=dict)
    """What it was made with: ``taxonomy``, ``planner``, ``benchmarks`` (name →
    version), ``seed`` (picks samples for live work). Part of the id."""

    def label_values(self, key: str) -> tuple[str, ...]:
        return tuple(self.labels.get(key, ()))

    def matches(self, labels: Mapping[str, str | None]) -> bool:
        """Whether a sample with ``labels`` is in the plan's label filters (the benchmark
        and pillar filters are checked by :meth:`covers_benchmark`)."""
        for key in LABEL_KEYS:
            wanted = self.labels.get(key)
            if not wanted:
                continue
            value = labels.get(key)
            if value is None:
                return False
            if key == "subject":
                if not any(
                    value == w or ("/" not in w and value.startswith(w + "/")) for w in wanted
                ):
                    return False
            elif value not in wanted:
                return False
        return True

    def covers_benchmark(self, name: str, pillar: str | None) -> bool:
        """Whether samples of benchmark ``name`` (in ``pillar``) may be in the answer."""
        if self.benchmarks and name not in self.benchmarks:
            return False
        return not self.pillars or pillar in self.pillars

    def as_json(self) -> dict[str, Any]:
        return {
            "version": PLAN_VERSION,
            "labels": {k: list(self.labels.get(k, ())) for k in LABEL_KEYS},
            "pillars": list(self.pillars),
            "benchmarks": list(self.benchmarks),
            "models": {
                "select": self.models.select,
                "names": list(self.models.names),
                "kinds": list(self.models.kinds),
                "min_params": self.models.min_params,
                "max_params": self.models.max_params,
            },
            "endpoints": [{"url": e.url, "model": e.model} for e in self.endpoints],
            "budget": self.budget,
            "versions": dict(self.versions),
        }

    def canonical(self) -> bytes:
        return canonical_json(self.as_json())

    @property
    def id(self) -> str:
        """The SHA-256 of the canonical JSON: the same plan, the same id."""
        return sha256_hex(self.canonical())

    def public(self) -> Plan:
        """The plan without endpoints: what is shared and cached for everyone."""
        return Plan(
            self.labels, self.pillars, self.benchmarks, self.models, (), self.budget, self.versions
        )


def _strings(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PlanError(f"{where} must be a list of strings")
    if len(value) > MAX_LIST:
        raise PlanError(f"{where} has {len(value)} entries; at most {MAX_LIST}")
    return value


def _choices(value: Any, where: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    items = _strings(value, where)
    bad = [v for v in items if v not in allowed]
    if bad:
        raise PlanError(f"{where}: {', '.join(map(repr, bad))} not one of {', '.join(allowed)}")
    return tuple(sorted(set(items)))


def _patterned(value: Any, where: str, pattern: re.Pattern[str], what: str) -> tuple[str, ...]:
    items = _strings(value, where)
    bad = [v for v in items if not pattern.fullmatch(v)]
    if bad:
        raise PlanError(f"{where}: {', '.join(map(repr, bad))} is not {what}")
    return tuple(sorted(set(items)))


def _keys(data: Mapping[str, Any], where: str, allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise PlanError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}")


def _labels(data: Any) -> dict[str, tuple[str, ...]]:
    if not isinstance(data, Mapping):
        raise PlanError("labels must be an object")
    _keys(data, "labels", LABEL_KEYS)
    out: dict[str, tuple[str, ...]] = {}
    for key in LABEL_KEYS:
        raw = data.get(key, [])
        where = f"labels.{key}"
        if key == "skill":
            values = _choices(raw, where, SKILLS)
        elif key == "format":
            values = _choices(raw, where, FORMATS)
        elif key == "subject":
            values = _patterned(raw, where, _SUBJECT, "a subject such as 'science/math'")
            bad = [v for v in values if v.partition("/")[0] not in SUBJECT_COARSE]
            if bad:
                raise PlanError(
                    f"{where}: {', '.join(map(repr, bad))} does not start with one of "
                    f"{', '.join(SUBJECT_COARSE)}"
                )
        elif key == "target":
            values = _patterned(raw, where, _TARGET, "'general' or 'local/<country code>'")
        else:
            values = _patterned(raw, where, _LANGUAGE, "an ISO 639-1 code such as 'ko'")
        if values:
            out[key] = values
    return out


def _optional_int(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise PlanError(f"{where} must be a non-negative integer or null")
    return value


def _models(data: Any) -> ModelSelection:
    if not isinstance(data, Mapping):
        raise PlanError("models must be an object")
    _keys(data, "models", ("select", "names", "kinds", "min_params", "max_params"))
    select = data.get("select", "ranked")
    if select not in MODEL_SELECTS:
        raise PlanError(f"models.select must be one of {', '.join(MODEL_SELECTS)}")
    names = _patterned(data.get("names", []), "models.names", _NAME, "a model name or ref")
    kinds = _choices(data.get("kinds", []), "models.kinds", MODEL_KINDS)
    low = _optional_int(data.get("min_params"), "models.min_params")
    high = _optional_int(data.get("max_params"), "models.max_params")
    if low is not None and high is not None and low > high:
        raise PlanError("models.min_params is above models.max_params")
    if select == "named" and not names:
        raise PlanError("models.select 'named' needs at least one name in models.names")
    if select != "named" and names:
        raise PlanError("models.names is only read when models.select is 'named'")
    if select != "filter" and (kinds or low is not None or high is not None):
        raise PlanError("models.kinds, min_params and max_params need models.select 'filter'")
    return ModelSelection(select, names, kinds, low, high)


def _endpoints(data: Any) -> tuple[Endpoint, ...]:
    if not isinstance(data, list):
        raise PlanError("endpoints must be a list")
    if len(data) > MAX_ENDPOINTS:
        raise PlanError(f"at most {MAX_ENDPOINTS} endpoints per plan")
    out = []
    for i, item in enumerate(data):
        where = f"endpoints[{i}]"
        if not isinstance(item, Mapping):
            raise PlanError(f"{where} must be an object with url and model")
        _keys(item, where, ("url", "model"))
        url, model = item.get("url"), item.get("model")
        if not _plain_url(url):
            raise PlanError(f"{where}.url must be an http(s) URL without credentials")
        if not isinstance(model, str) or not 0 < len(model) <= 200 or not model.isprintable():
            raise PlanError(f"{where}.model must be a model name of 1 to 200 characters")
        out.append(Endpoint(url, model))
    if len({(e.url, e.model) for e in out}) != len(out):
        raise PlanError("endpoints lists the same endpoint twice")
    return tuple(sorted(out, key=lambda e: (e.url, e.model)))


def _plain_url(url: Any) -> TypeGuard[str]:
    """An http(s) URL with a host, no user or password, no whitespace, at most 2000
    characters."""
    if not isinstance(url, str) or len(url) > 2000 or any(c.isspace() for c in url):
        return False
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:  # a malformed IPv6 literal
        return False
    return parts.scheme in ("http", "https") and bool(host) and "@" not in parts.netloc


def _version_is(value: Any, expected: int) -> bool:
    """``value`` is the integer ``expected`` (not ``True``, not ``1.0``)."""
    return isinstance(value, int) and not isinstance(value, bool) and value == expected


def _versions(data: Any) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise PlanError("versions must be an object")
    _keys(data, "versions", ("taxonomy", "planner", "benchmarks", "seed"))
    taxonomy = data.get("taxonomy", TAXONOMY_VERSION)
    if not _version_is(taxonomy, TAXONOMY_VERSION):
        raise PlanError(
            f"versions.taxonomy {taxonomy!r}: this server knows taxonomy {TAXONOMY_VERSION}"
        )
    out: dict[str, Any] = {"taxonomy": TAXONOMY_VERSION}
    if "planner" in data:
        if not isinstance(data["planner"], str) or len(data["planner"]) > 64:
            raise PlanError("versions.planner must be a short string")
        out["planner"] = data["planner"]
    if "benchmarks" in data:
        benches = data["benchmarks"]
        if not isinstance(benches, Mapping) or not all(
            isinstance(k, str)
            and _BENCHMARK.fullmatch(k)
            and isinstance(v, int)
            and not isinstance(v, bool)
            and v > 0
            for k, v in benches.items()
        ):
            raise PlanError("versions.benchmarks must map benchmark names to positive versions")
        out["benchmarks"] = dict(sorted(benches.items()))
    if "seed" in data:
        if not isinstance(data["seed"], str) or not re.fullmatch(r"[0-9a-f]{1,64}", data["seed"]):
            raise PlanError("versions.seed must be 1 to 64 lowercase hex digits")
        out["seed"] = data["seed"]
    return out


def parse_plan(data: Any) -> Plan:
    """A :class:`Plan` from its JSON form; :class:`PlanError` says what is wrong."""
    if not isinstance(data, Mapping):
        raise PlanError("a plan is a JSON object")
    _keys(
        data,
        "plan",
        ("version", "labels", "pillars", "benchmarks", "models", "endpoints", "budget", "versions"),
    )
    if not _version_is(data.get("version", PLAN_VERSION), PLAN_VERSION):
        raise PlanError(f"plan version {data.get('version')!r}: this server reads version 1")
    budget = data.get("budget", DEFAULT_BUDGET)
    if isinstance(budget, bool) or not isinstance(budget, int) or not 1 <= budget <= MAX_BUDGET:
        raise PlanError(f"budget must be an integer from 1 to {MAX_BUDGET}")
    return Plan(
        labels=_labels(data.get("labels", {})),
        pillars=_choices(data.get("pillars", []), "pillars", PILLARS),
        benchmarks=_patterned(
            data.get("benchmarks", []), "benchmarks", _BENCHMARK, "a benchmark name"
        ),
        models=_models(data.get("models", {})),
        endpoints=_endpoints(data.get("endpoints", [])),
        budget=budget,
        versions=_versions(data.get("versions", {})),
    )
