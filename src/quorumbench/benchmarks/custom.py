"""Custom benchmarks from a declarative spec (see evaluation/spec.py).

A spec from a file reads its data from a local ``path`` (relative to the spec) or a
``url``; a spec the server stores (created through ``POST /v0/benchmarks``) always
has a ``url``, which the server and every runner fetch, check against the SHA-256 and
cache (``evaluation/remote_data.py``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from quorumbench.benchmarks.truthfulqa import letter_order
from quorumbench.core.scoring import argmax_first
from quorumbench.core.taxonomy import label_problems
from quorumbench.errors import DataError, DataNotFoundError, InvalidLabelsError, InvalidSpecError
from quorumbench.evaluation.backend import (
    ChatMessage,
    ChoiceRequest,
    ChoiceResult,
    GenerateRequest,
    GenerateResult,
    Prompt,
)
from quorumbench.evaluation.benchmark import (
    BenchmarkContext,
    BenchmarkKind,
    DataSourceInfo,
    Labels,
    PromptStyle,
    Sample,
    Scored,
)
from quorumbench.evaluation.data import read_verified
from quorumbench.evaluation.extract import extract_final_number, normalize_number
from quorumbench.evaluation.remote_data import FetchPolicy, fetch_verified
from quorumbench.evaluation.spec import BenchmarkSpec, parse_spec


def read_spec(path: Path) -> BenchmarkSpec:
    """Read and validate a spec file (.yaml, .yml or .json)."""
    if not path.is_file():
        raise InvalidSpecError(f"benchmark spec not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidSpecError(f"{path}: not UTF-8 text (byte {exc.start})") from exc
    except OSError as exc:
        raise InvalidSpecError(f"{path}: cannot read it: {exc.strerror or exc}") from exc
    try:
        raw = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise InvalidSpecError(f"{path}: not valid {path.suffix[1:].upper()}: {exc}") from exc
    return parse_spec(raw, str(path))


def decode_rows(data: bytes, path: Path | str) -> list[dict[str, Any]]:
    """The rows of a .jsonl (one object a line) or .json (an array) data file."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text (byte {exc.start})") from exc
    try:
        if str(path).endswith(".jsonl"):
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            rows = json.loads(text)
    except ValueError as exc:
        raise DataError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise DataError(f"{path}: expected a list of JSON objects")
    if not rows:
        raise DataError(f"{path}: no rows")
    return rows


def _check_rows(spec: BenchmarkSpec, rows: list[dict[str, Any]], path: Path | str) -> list[str]:
    needed = spec.placeholders() | {spec.answer_field}
    if spec.choices_field:
        needed.add(spec.choices_field)
    if spec.data.id_field:
        needed.add(spec.data.id_field)
    for number, row in enumerate(rows, start=1):
        missing = sorted(needed - row.keys())
        if missing:
            raise DataError(f"{path}: row {number} lacks the field(s) {', '.join(missing)}")
        if spec.choices_field:
            _gold_index(spec, row, number, path)
        problems = label_problems(_labels(spec, row).as_dict())
        if problems:
            raise InvalidLabelsError(
                f"{path}: row {number}: its labels are not in taxonomy v1: {'; '.join(problems)}"
            )
    if spec.data.id_field:
        ids = [str(row[spec.data.id_field]) for row in rows]
        if len(set(ids)) != len(ids):
            raise DataError(f"{path}: the values of {spec.data.id_field!r} are not unique")
        return ids
    width = max(4, len(str(len(rows) - 1)))
    return [f"{i:0{width}d}" for i in range(len(rows))]


def _gold_index(spec: BenchmarkSpec, row: Mapping[str, Any], number: int, path: Path | str) -> int:
    choices = row[spec.choices_field or ""]
    if (
        not isinstance(choices, list)
        or len(choices) < 2
        or not all(isinstance(c, str) for c in choices)
    ):
        raise DataError(f"{path}: row {number}: {spec.choices_field} must list 2+ strings")
    answer = row[spec.answer_field]
    if isinstance(answer, int) and not isinstance(answer, bool) and 0 <= answer < len(choices):
        return answer
    if isinstance(answer, str) and answer in choices:
        return choices.index(answer)
    raise DataError(
        f"{path}: row {number}: {spec.answer_field} must be a choice index or one of the choices"
    )


def _render(template: str, row: Mapping[str, Any]) -> str:
    return template.format_map({k: str(v) for k, v in row.items()})


def _labels(spec: BenchmarkSpec, row: Mapping[str, Any]) -> Labels:
    labels = spec.labels
    return Labels(
        skill=_render(labels.skill, row),
        subject=_render(labels.subject, row),
        language=_render(labels.language, row),
        format=spec.label_format,
        target=_render(labels.target, row),
        source_category=(
            _render(labels.source_category, row) if labels.source_category is not None else None
        ),
    )


class CustomBenchmark:
    """A benchmark defined by a spec and its pinned data (the bytes, already verified)."""

    def __init__(
        self,
        spec: BenchmarkSpec,
        data: bytes,
        location: str,
        context: BenchmarkContext,
    ) -> None:
        self.spec = spec
        rows = decode_rows(data, spec.data.file_name)
        ids = _check_rows(spec, rows, location)
        self._rows = dict(zip(ids, rows, strict=True))
        self._ids = ids
        self._path = location
        self._source = DataSourceInfo("url" if spec.data.url else "file", location)
        self._max_new_tokens = context.max_new_tokens or spec.max_new_tokens

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def version(self) -> int:
        return self.spec.version

    @property
    def prompt_version(self) -> int:
        return self.spec.prompt.version

    @property
    def pillar(self) -> str | None:
        """The pillar the spec names (None: a local spec that names none)."""
        return self.spec.pillar

    @property
    def kind(self) -> BenchmarkKind:
        return "choice" if self.spec.format == "multiple-choice" else "generate"

    @property
    def dataset_sha256(self) -> str:
        return self.spec.data.sha256

    @property
    def source(self) -> DataSourceInfo:
        return self._source

    @property
    def config(self) -> Mapping[str, Any]:
        return {"max_new_tokens": self._max_new_tokens} if self.kind == "generate" else {}

    def sample_ids(self) -> Sequence[str]:
        return self._ids

    def samples(self, ids: Sequence[str]) -> list[Sample]:
        out = []
        for sample_id in ids:
            if sample_id not in self._rows:
                raise DataError(f"{self.name} has no sample {sample_id!r}")
            row = self._rows[sample_id]
            chance = 0.0
            if self.spec.choices_field:
                chance = 1.0 / len(row[self.spec.choices_field])
            out.append(Sample(sample_id, _labels(self.spec, row), row, chance))
        return out

    def _text(self, row: Mapping[str, Any]) -> str:
        body = _render(self.spec.prompt.template, row)
        if self.spec.prompt.system:
            return _render(self.spec.prompt.system, row) + "\n\n" + body
        return body

    def request(self, sample: Sample, style: PromptStyle) -> GenerateRequest | ChoiceRequest:
        row = sample.fields
        if self.kind == "choice":
            choices = tuple(row[self.spec.choices_field or ""])
            delimiter = self.spec.prompt.target_delimiter
            return ChoiceRequest(
                context=self._text(row),
                continuations=tuple(delimiter + c for c in choices),
                question=_render(self.spec.prompt.template, row).strip(),
                options=choices,
                letter_order=letter_order(self.name, sample.id, len(choices)),
            )
        stop = tuple(self.spec.stop)
        if style == "plain":
            return GenerateRequest(Prompt(text=self._text(row)), stop, self._max_new_tokens)
        messages = []
        if self.spec.prompt.system:
            messages.append(ChatMessage("system", _render(self.spec.prompt.system, row)))
        messages.append(ChatMessage("user", _render(self.spec.prompt.template, row)))
        return GenerateRequest(Prompt(messages=tuple(messages)), stop, self._max_new_tokens)

    def _extract(self, text: str) -> str | None:
        kind = self.spec.extract.kind
        if kind == "number":
            return extract_final_number(text)
        if kind == "regex":
            match = re.search(self.spec.extract.pattern or "", text)
            return match.group(1) if match else None
        if kind == "first-line":
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            return lines[0] if lines else None
        return text.strip()

    def _normal(self, value: str) -> str:
        if self.spec.compare == "number":
            return normalize_number(value)
        if self.spec.compare == "text":
            return " ".join(value.casefold().split()).rstrip(".")
        return value

    def score(self, sample: Sample, result: GenerateResult | ChoiceResult) -> Scored:
        row = sample.fields
        if isinstance(result, ChoiceResult):
            gold = _gold_index(self.spec, row, 0, self._path)
            if result.method == "letter":
                chosen = result.chosen
            else:
                chosen = argmax_first(result.loglikelihoods)
            if chosen is None:
                return Scored(None, False, 0.0)
            return Scored(str(chosen), chosen == gold, 1.0 if chosen == gold else 0.0)
        prediction = self._extract(result.text)
        correct = prediction is not None and self._normal(prediction) == self._normal(
            str(row[self.spec.answer_field])
        )
        return Scored(prediction, correct, 1.0 if correct else 0.0)


def default_data_cache() -> Path:
    """Where ``quorumbench eval`` and runners keep data fetched by URL (by SHA-256)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / (
        "quorumbench/benchmark-data"
    )


def benchmark_from_spec(
    spec: BenchmarkSpec,
    context: BenchmarkContext,
    *,
    policy: FetchPolicy | None = None,
    cache_dir: Path | None = None,
    spec_dir: Path | None = None,
) -> CustomBenchmark:
    """Load ``spec``'s data (a local ``path`` under ``spec_dir``, or its ``url``, fetched
    with ``policy`` and cached in ``cache_dir``), check every row and make the benchmark."""
    if spec.data.url is not None:
        data = fetch_verified(spec.data.url, spec.data.sha256, policy or FetchPolicy(), cache_dir)
        return CustomBenchmark(spec, data, spec.data.url, context)
    if spec_dir is None:
        raise InvalidSpecError(f"{spec.name}: data.path needs the spec's directory")
    data_path = (spec_dir / (spec.data.path or "")).resolve()
    if not data_path.is_file():
        raise DataNotFoundError(f"{spec.name}: data file not found: {data_path}")
    data = read_verified(data_path, spec.data.sha256)
    return CustomBenchmark(spec, data, str(data_path), context)


def load_custom_benchmark(path: Path, context: BenchmarkContext) -> CustomBenchmark:
    """Read, validate and load a custom benchmark spec and its data."""
    return benchmark_from_spec(
        read_spec(path), context, cache_dir=default_data_cache(), spec_dir=path.parent
    )
