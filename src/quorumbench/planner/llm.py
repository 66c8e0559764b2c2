"""The optional LLM planner: an OpenAI-compatible ``/chat/completions`` endpoint the
operator configures, asked for one JSON object and checked like a person's plan.

The model sees the allowed values (taxonomy v1's labels, the fine subjects the lexicon
knows, the pillars, this server's benchmarks, the model kinds) and answers with
``labels``, ``pillars``, ``benchmarks``, ``models``, ``matches`` and ``unmapped``. The
answer is refused when it is not that (malformed JSON, unknown keys, a value outside
the lists, a match whose text is not in the query). On any failure (connection,
timeout, HTTP error, refusal) the offline planner makes the plan and
:attr:`~quorumbench.planner.PlannerReport.fallback` says why, in one plain sentence
that never holds the API key (nor does the log line).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import httpx

from quorumbench.core.plans import MODEL_KINDS, PlanError, parse_plan
from quorumbench.core.taxonomy import FORMATS, LABEL_KEYS, PILLARS, SKILLS, SUBJECT_COARSE
from quorumbench.planner import CatalogEntry, Match, PlannerReport, PlannerSettings, lexicon
from quorumbench.planner.offline import finish_plan, identify_language
from quorumbench.planner.offline import plan as offline_plan

LLM_PLANNER = "llm/1"
log = logging.getLogger("quorumbench.planner")
MAX_ANSWER_BYTES = 64_000
SUBJECTS = tuple(sorted({*SUBJECT_COARSE, *lexicon.SUBJECT_WORDS}))
"""The subjects the LLM may use: the coarse ones and the fine ones the lexicon knows
(every fine subject of the built-in benchmarks)."""
_ANSWER_KEYS = ("labels", "pillars", "benchmarks", "models", "matches", "unmapped")
_MATCH_KEYS = (*LABEL_KEYS, "pillar", "benchmark", "models")


class LlmPlanError(Exception):
    """Why the LLM planner's answer was not used (a plain sentence, no secrets)."""


def system_prompt(catalog: Sequence[CatalogEntry]) -> str:
    """The instructions, with every allowed value listed."""
    return "\n".join(
        [
            "You turn a person's question about language models into a benchmark plan.",
            "Answer with one JSON object and nothing else, with exactly these keys:",
            '  "labels": {"skill": [...], "subject": [...], "target": [...], '
            '"format": [...], "language": [...]} (empty list: any value),',
            '  "pillars": [...], "benchmarks": [...],',
            '  "models": {"select": "ranked"} or {"select": "filter", "kinds": [...], '
            '"min_params": int|null, "max_params": int|null},',
            '  "matches": [{"text": words copied from the question, "key": one of '
            f"{', '.join(_MATCH_KEYS)}, " + '"value": the value set, "confidence": 0..1}],',
            '  "unmapped": [words of the question that carry meaning but fit no value].',
            "Use only these values; never invent one, put the words in unmapped instead.",
            f"skill: {', '.join(SKILLS)}",
            f"subject: {', '.join(SUBJECTS)}",
            f"format: {', '.join(FORMATS)}",
            "target: general, or local/<ISO 3166 alpha-2 code, lowercase> (local/kr)",
            "language: an ISO 639-1 code (ko, en); only when the question names a language",
            f"pillars: {', '.join(PILLARS)}",
            f"benchmarks: {', '.join(e.name for e in catalog) or '(none)'}",
            f"models.kinds: {', '.join(MODEL_KINDS)}",
        ]
    )


def _scrub(text: str, secret: str | None) -> str:
    return text.replace(secret, "[redacted]") if secret else text


def _ask(query: str, catalog: Sequence[CatalogEntry], settings: PlannerSettings) -> str:
    """The model's answer text (``choices[0].message.content``)."""
    url = f"{(settings.llm_url or '').rstrip('/')}/chat/completions"
    headers = {"Authorization": f"Bearer {settings.llm_api_key}"} if settings.llm_api_key else {}
    body = {
        "model": settings.llm_model,
        "messages": [
            {"role": "system", "content": system_prompt(catalog)},
            {"role": "user", "content": query},
        ],
        "response_format": {"type": "json_object"},
        "temperature": 0,
    }
    try:
        with httpx.Client(timeout=settings.timeout_s, follow_redirects=False) as client:
            response = client.post(url, json=body, headers=headers)
    except httpx.TimeoutException as exc:
        raise LlmPlanError(
            f"the LLM endpoint did not answer within {settings.timeout_s:g} s"
        ) from exc
    except httpx.HTTPError as exc:
        raise LlmPlanError(f"the LLM endpoint could not be reached ({type(exc).__name__})") from exc
    if response.status_code != 200:
        raise LlmPlanError(f"the LLM endpoint answered HTTP {response.status_code}")
    if len(response.content) > MAX_ANSWER_BYTES:
        raise LlmPlanError(f"the LLM endpoint's answer is over {MAX_ANSWER_BYTES} bytes")
    try:
        content = response.json()["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise LlmPlanError("the LLM endpoint's answer is not a chat completion") from exc
    if not isinstance(content, str):
        raise LlmPlanError("the LLM endpoint's answer has no text content")
    return content


def _answer(content: str) -> dict[str, Any]:
    try:
        answer = json.loads(content)
    except ValueError as exc:
        raise LlmPlanError("the LLM's answer is not valid JSON") from exc
    if not isinstance(answer, dict):
        raise LlmPlanError("the LLM's answer is not a JSON object")
    unknown = sorted(set(answer) - set(_ANSWER_KEYS))
    if unknown:
        raise LlmPlanError(f"the LLM's answer has unknown keys: {', '.join(unknown)}")
    return answer


def _check_values(doc: Mapping[str, Any], catalog: Sequence[CatalogEntry]) -> None:
    """Refuse what :func:`parse_plan` allows but the lists do not: subjects the
    taxonomy's lists do not have, benchmarks this server does not run."""
    labels = doc.get("labels")
    subjects = labels.get("subject", []) if isinstance(labels, Mapping) else []
    bad = [s for s in subjects if s not in SUBJECTS] if isinstance(subjects, list) else []
    if bad:
        raise LlmPlanError(
            f"the LLM's plan uses subjects outside taxonomy v1: {', '.join(map(str, bad))}"
        )
    names = {e.name for e in catalog}
    benches = doc.get("benchmarks", [])
    unknown = [b for b in benches if b not in names] if isinstance(benches, list) else []
    if unknown:
        listed = ", ".join(map(str, unknown))
        raise LlmPlanError(f"the LLM's plan names benchmarks this server does not run: {listed}")


def _matches(query: str, raw: Any) -> tuple[Match, ...]:
    if not isinstance(raw, list):
        raise LlmPlanError("the LLM's matches are not a list")
    out = []
    folded = query.casefold()
    for item in raw:
        if not isinstance(item, Mapping) or set(item) - {"text", "key", "value", "confidence"}:
            raise LlmPlanError("an LLM match is not {text, key, value, confidence}")
        text, key, value = item.get("text"), item.get("key"), item.get("value")
        confidence = item.get("confidence", 1.0)
        if not isinstance(text, str) or not text or text.casefold() not in folded:
            raise LlmPlanError("an LLM match quotes words that are not in the question")
        if key not in _MATCH_KEYS or not isinstance(value, str | int):
            raise LlmPlanError(f"an LLM match has key {key!r}, not one of {', '.join(_MATCH_KEYS)}")
        if isinstance(confidence, bool) or not isinstance(confidence, int | float):
            raise LlmPlanError("an LLM match's confidence is not a number")
        if not 0 <= confidence <= 1:
            raise LlmPlanError("an LLM match's confidence is not between 0 and 1")
        out.append(Match(text, str(key), str(value), float(confidence), "llm"))
    return tuple(out)


def _unmapped(query: str, raw: Any) -> tuple[str, ...]:
    folded = query.casefold()
    if not isinstance(raw, list) or not all(
        isinstance(w, str) and w and w.casefold() in folded for w in raw
    ):
        raise LlmPlanError("the LLM's unmapped words are not words of the question")
    return tuple(dict.fromkeys(raw))


def _report(
    query: str,
    content: str,
    catalog: Sequence[CatalogEntry],
    settings: PlannerSettings,
    budget: int | None,
    seed: str | None,
) -> PlannerReport:
    answer = _answer(content)
    doc: dict[str, Any] = {
        k: answer[k] for k in ("labels", "pillars", "benchmarks", "models") if k in answer
    }
    _check_values(doc, catalog)
    planner = f"{LLM_PLANNER}:{settings.llm_model}"
    doc["versions"] = {"planner": planner if len(planner) <= 64 else LLM_PLANNER}
    if budget is not None:
        doc["budget"] = budget
    try:
        made = finish_plan(doc, [(e.name, e.version, e.pillar) for e in catalog], seed)
    except PlanError as exc:
        raise LlmPlanError(f"the LLM's plan is not valid: {exc}") from exc
    matches = _matches(query, answer.get("matches", []))
    for m in matches:
        listed = {
            "pillar": made.pillars,
            "benchmark": made.benchmarks,
            "models": (m.value,),  # a size or kind phrase, shown as the model wrote it
        }.get(m.key, made.label_values(m.key))
        if m.value not in listed:
            raise LlmPlanError(
                f"an LLM match sets {m.key} {m.value!r}, which the LLM's plan does not have"
            )
    return PlannerReport(
        plan=made,
        query=query,
        language=identify_language(query),
        matches=matches,
        unmapped=_unmapped(query, answer.get("unmapped", [])),
        planner=LLM_PLANNER,
    )


def plan(
    query: str,
    catalog: Sequence[CatalogEntry],
    settings: PlannerSettings,
    *,
    budget: int | None = None,
    seed: str | None = None,
) -> PlannerReport:
    """The LLM planner's report, or the offline planner's with the reason it fell back.

    A bad ``budget`` or ``seed`` is the caller's :class:`PlanError`, checked first.
    """
    parse_plan(
        {
            "budget": 1 if budget is None else budget,
            "versions": {} if seed is None else {"seed": seed},
        }
    )
    try:
        return _report(query, _ask(query, catalog, settings), catalog, settings, budget, seed)
    except LlmPlanError as exc:
        reason = _scrub(str(exc), settings.llm_api_key)
    log.warning("LLM planner not used: %s", reason)
    report = offline_plan(query, catalog, budget=budget, seed=seed)
    return replace(
        report,
        fallback=f"The LLM planner was not used: {reason}; this plan is the offline planner's.",
    )
