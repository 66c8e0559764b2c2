"""The deterministic offline planner: a query's words → label filters, saying how.

Reading order: sizes written as numbers (:mod:`~quorumbench.planner.sizes`), then the
tokens left, left to right, longest lexicon phrase first (up to :data:`MAX_PHRASE`
tokens); a token no phrase starts with is a stop word (skipped), a Korean compound cut
into lexicon words (``한국어수학``), a misspelling within :data:`FUZZY_CUTOFF` of one
lexicon phrase (Latin script only), or else *unmapped*: reported, never guessed.

Nothing is fetched at run time: the lexicon is in :mod:`~quorumbench.planner.lexicon`,
language identification uses ``py3langid``'s model from its wheel, fuzzy matching is
``rapidfuzz``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from rapidfuzz import process
from rapidfuzz.distance import OSA

from quorumbench.core.canonical import sha256_hex
from quorumbench.core.plans import DEFAULT_BUDGET, Plan, parse_plan
from quorumbench.core.taxonomy import LABEL_KEYS, TAXONOMY_VERSION
from quorumbench.planner import CatalogEntry, Match, PlannerReport, lexicon
from quorumbench.planner.sizes import SizeHit, find_sizes
from quorumbench.planner.text import (
    EN_STOP,
    KO_STOP,
    Token,
    has_hangul,
    is_stop,
    key_of,
    only_suffixes,
    stem,
    tokens,
)

OFFLINE_PLANNER = "offline/1"
MAX_PHRASE = 5
FUZZY_MIN_LENGTH = 5
"""Shorter words are never matched fuzzily (``save`` is not ``safe``)."""
FUZZY_TWO_EDITS_LENGTH = 9


def fuzzy_edits(length: int) -> int:
    """How many edits (insert, delete, substitute, swap two neighbours: OSA distance) a
    misspelling of ``length`` characters may have: 0 below 5, 1 from 5, 2 from 9."""
    if length < FUZZY_MIN_LENGTH:
        return 0
    return 2 if length >= FUZZY_TWO_EDITS_LENGTH else 1


LANGUAGE_MIN_PROBABILITY = 0.3
"""Below this, py3langid's normalised probability is too unsure to report."""


@dataclass(frozen=True)
class Hit:
    """One mapped span: the query's text, the senses, and how it was found."""

    text: str
    senses: tuple[lexicon.Sense, ...]
    confidence: float
    how: str
    start: int = 0


@dataclass(frozen=True)
class Reading:
    hits: tuple[Hit, ...]
    unmapped: tuple[str, ...]


@cache
def base_phrases() -> Mapping[str, tuple[lexicon.Sense, ...]]:
    """Lookup key → senses, for every phrase of the lexicon (English and Korean)."""
    out: dict[str, list[lexicon.Sense]] = {}
    for senses, words in lexicon.entries():
        for phrase in (*words.en, *words.ko):
            bucket = out.setdefault(key_of(phrase), [])
            bucket += [s for s in senses if s not in bucket]
    return {k: tuple(v) for k, v in out.items()}


class _Index:
    """The lexicon for one catalog: its phrases, known words, and fuzzy choices."""

    def __init__(self, catalog_names: frozenset[str]) -> None:
        phrases = dict(base_phrases())
        for name in sorted(catalog_names):
            key = key_of(name)
            if ("benchmark", name) not in phrases.get(key, ()):
                phrases[key] = (*phrases.get(key, ()), ("benchmark", name))
        self.catalog = catalog_names
        self.phrases = phrases
        self.known = frozenset(w for k in phrases for w in k.split()) | EN_STOP | KO_STOP
        self.fuzzy_choices = sorted(
            k for k in {*phrases, *EN_STOP} if not has_hangul(k) and len(k) >= 4
        )

    def senses(self, key: str) -> tuple[lexicon.Sense, ...] | None:
        """The senses of ``key``, less benchmarks this server does not run (None: not
        a phrase, or only such benchmarks)."""
        found = self.phrases.get(key)
        if found is None:
            return None
        kept = tuple(s for s in found if s[0] != "benchmark" or s[1] in self.catalog)
        return kept or None


@lru_cache(maxsize=16)
def _index(catalog_names: frozenset[str]) -> _Index:
    return _Index(catalog_names)


def read(query: str, catalog_names: frozenset[str]) -> Reading:
    """The query's mapped spans and its unmapped words."""
    index = _index(catalog_names)
    hits: list[Hit] = []
    sized = find_sizes(query)
    for size in sized:
        senses: list[lexicon.Sense] = []
        if size.min_params is not None:
            senses.append(("models", f"min_params:{size.min_params}"))
        if size.max_params is not None:
            senses.append(("models", f"max_params:{size.max_params}"))
        hits.append(Hit(size.text, tuple(senses), 1.0, "lexicon", size.start))
    unmapped: list[str] = []
    for toks in _segments(tokens(query), sized):
        stems = [stem(t.norm, index.known) for t in toks]
        missed: list[int] = []
        i = 0
        while i < len(toks):
            step, hit, unknown = _read_at(query, toks, stems, i, index)
            if hit is not None:
                hits.append(Hit(hit.text, hit.senses, hit.confidence, hit.how, toks[i].start))
            if unknown:
                missed.append(i)
            i += step
        unmapped += [w for w in _unmapped(query, toks, missed) if w not in unmapped]
    hits.sort(key=lambda h: h.start)
    return Reading(tuple(hits), tuple(unmapped))


def _segments(toks: Sequence[Token], sized: Sequence[SizeHit]) -> list[list[Token]]:
    """The tokens outside the sizes, in runs a size does not interrupt (a phrase or an
    unmapped run never spans a size)."""
    runs: list[list[Token]] = [[]]
    for t in toks:
        if any(s.start < t.end and t.start < s.end for s in sized):
            runs.append([])
        else:
            runs[-1].append(t)
    return [r for r in runs if r]


def _unmapped(query: str, toks: Sequence[Token], missed: Sequence[int]) -> tuple[str, ...]:
    """The unmapped tokens, neighbours joined (``high-school`` stays one), once each."""
    runs: list[list[int]] = []
    for i in missed:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    out: list[str] = []
    for run in runs:
        text = _span(query, toks, run[0], len(run))
        if text not in out:
            out.append(text)
    return tuple(out)


def _span(query: str, toks: Sequence[Token], i: int, n: int) -> str:
    return query[toks[i].start : toks[i + n - 1].end]


def _read_at(
    query: str, toks: Sequence[Token], stems: Sequence[str], i: int, index: _Index
) -> tuple[int, Hit | None, str | None]:
    """What the tokens from ``i`` are: (tokens read, the hit if any, an unmapped word)."""
    for n in range(min(MAX_PHRASE, len(toks) - i), 0, -1):
        senses = index.senses(" ".join(stems[i : i + n]))
        if senses:
            return n, Hit(_span(query, toks, i, n), senses, 1.0, "lexicon"), None
    word = stems[i]
    if index.phrases.get(word):  # a benchmark this server does not run
        return 1, None, toks[i].text
    if is_stop(word) or is_stop(toks[i].norm):
        return 1, None, None
    if has_hangul(word):
        return 1, *_compound(toks[i], index)
    for n in range(min(3, len(toks) - i), 0, -1):
        if n > 1 and any(is_stop(s) for s in stems[i : i + n]):
            continue
        joined = " ".join(t.norm for t in toks[i : i + n])
        edits = fuzzy_edits(len(joined))
        if not edits or any(c.isdigit() for c in joined):
            continue
        best = process.extractOne(
            joined, index.fuzzy_choices, scorer=OSA.distance, score_cutoff=edits
        )
        if best is None or len(best[0].split()) != n:
            continue
        if is_stop(best[0]):
            return n, None, None
        senses = index.senses(best[0])
        if senses:
            confidence = min(round(1 - best[1] / max(len(joined), len(best[0])), 2), 0.99)
            return n, Hit(_span(query, toks, i, n), senses, confidence, "fuzzy"), None
    return 1, None, toks[i].text


def _compound(token: Token, index: _Index) -> tuple[Hit | None, str | None]:
    """A Korean token no phrase matched: lexicon words written together (``한국어수학``),
    each longest first, then particles/endings only. A part that is none of these makes
    the token unmapped too (what was found before it still maps)."""
    word, pos = token.norm, 0
    senses: list[lexicon.Sense] = []
    rest = False
    while pos < len(word) and not only_suffixes(word[pos:]):
        for end in range(len(word), pos, -1):
            piece = word[pos:end]
            found = index.senses(piece)
            if found or (is_stop(piece) and end - pos > 1):
                senses += [s for s in found or () if s not in senses]
                pos = end
                break
        else:
            rest = True
            break
    hit = Hit(token.text, tuple(senses), 1.0, "lexicon") if senses else None
    return hit, token.text if rest else None


class _LangId:
    lock = threading.Lock()
    identifier: Any = None


def identify_language(query: str) -> str | None:
    """The query's language (ISO 639-1) by py3langid, or None when unsure."""
    with _LangId.lock:
        if _LangId.identifier is None:
            from py3langid import langid  # type: ignore[import-untyped]

            _LangId.identifier = langid.LanguageIdentifier.from_model_file(
                langid.MODEL_FILE, norm_probs=True
            )
        code, probability = _LangId.identifier.classify(query)
    if probability < LANGUAGE_MIN_PROBABILITY or len(code) != 2:
        return None
    return str(code)


def plan_from_hits(
    hits: Sequence[Hit],
    catalog: Sequence[tuple[str, int, str | None]],
    planner: str,
    budget: int | None,
    seed: str | None,
) -> Plan:
    """The plan the hits ask for, with its versions (``catalog``: name, version,
    pillar of each benchmark the server runs)."""
    labels: dict[str, set[str]] = {k: set() for k in LABEL_KEYS}
    pillars: set[str] = set()
    benchmarks: set[str] = set()
    kinds: set[str] = set()
    bounds: list[tuple[int | None, int | None]] = []
    for hit in hits:
        low: int | None = None
        high: int | None = None
        for key, value in hit.senses:
            if key in labels:
                labels[key].add(value)
            elif key == "pillar":
                pillars.add(value)
            elif key == "benchmark":
                benchmarks.add(value)
            elif value.startswith("kind:"):
                kinds.add(value.removeprefix("kind:"))
            elif value.startswith("min_params:"):
                low = int(value.removeprefix("min_params:"))
            else:
                high = int(value.removeprefix("max_params:"))
        if low is not None or high is not None:
            bounds.append((low, high))
    low, high = _bounds(bounds)
    models: dict[str, Any] = {"select": "ranked"}
    if kinds or low is not None or high is not None:
        models = {"select": "filter", "kinds": sorted(kinds), "min_params": low, "max_params": high}
    doc: dict[str, Any] = {
        "labels": {k: sorted(v) for k, v in labels.items() if v},
        "pillars": sorted(pillars),
        "benchmarks": sorted(benchmarks),
        "models": models,
        "budget": DEFAULT_BUDGET if budget is None else budget,
        "versions": {"taxonomy": TAXONOMY_VERSION, "planner": planner},
    }
    return finish_plan(doc, catalog, seed)


def _bounds(bounds: Sequence[tuple[int | None, int | None]]) -> tuple[int | None, int | None]:
    """All size bounds together (the tightest); when they contradict each other, the
    last one written."""
    lows = [b[0] for b in bounds if b[0] is not None]
    highs = [b[1] for b in bounds if b[1] is not None]
    low, high = max(lows, default=None), min(highs, default=None)
    if low is not None and high is not None and low > high:
        return bounds[-1]
    return low, high


def finish_plan(
    doc: dict[str, Any], catalog: Sequence[tuple[str, int, str | None]], seed: str | None
) -> Plan:
    """Parse ``doc`` (a plan without benchmark versions or seed) and add the versions of
    the catalog's benchmarks it covers and the seed (given, else from the plan)."""
    plan = parse_plan(doc)
    covered = {
        name: version for name, version, pillar in catalog if plan.covers_benchmark(name, pillar)
    }
    doc["versions"] = {**doc["versions"], "benchmarks": covered}
    doc["versions"]["seed"] = (
        seed if seed is not None else sha256_hex(parse_plan(doc).canonical())[:16]
    )
    return parse_plan(doc)


def plan(
    query: str,
    catalog: Sequence[CatalogEntry],
    *,
    budget: int | None = None,
    seed: str | None = None,
) -> PlannerReport:
    """The offline planner's report for ``query``."""
    reading = read(query, frozenset(e.name for e in catalog))
    made = plan_from_hits(
        reading.hits,
        [(e.name, e.version, e.pillar) for e in catalog],
        OFFLINE_PLANNER,
        budget,
        seed,
    )
    matches = tuple(
        Match(h.text, key, value, h.confidence, h.how)
        for h in reading.hits
        for key, value in h.senses
    )
    return PlannerReport(
        plan=made,
        query=query,
        language=identify_language(query),
        matches=matches,
        unmapped=reading.unmapped,
        planner=OFFLINE_PLANNER,
    )
