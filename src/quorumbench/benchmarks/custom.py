"""Custom benchmarks from a declarative spec file (see evaluation/spec.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from quorumbench.benchmarks.truthfulqa import letter_order
from quorumbench.core.scoring import argmax_first
from quorumbench.errors import DataError, DataNotFoundError, InvalidSpecError
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


def _decode_rows(data: bytes, path: Path) -> list[dict[str, Any]]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text (byte {exc.start})") from exc
    try:
        if path.suffix == ".jsonl":
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


def _check_rows(spec: BenchmarkSpec, rows: list[dict[str, Any]], path: Path) -> list[str]:
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
    if spec.data.id_field:
        ids = [str(row[spec.data.id_field]) for row in rows]
        if len(set(ids)) != len(ids):
            raise DataError(f"{path}: the values of {spec.data.id_field!r} are not unique")
        return ids
    width = max(4, len(str(len(rows) - 1)))
    return [f"{i:0{width}d}" for i in range(len(rows))]


def _gold_index(spec: BenchmarkSpec, row: Mapping[str, Any], number: int, path: Path) -> int:
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


class CustomBenchmark:
    """A benchmark defined by a spec file and its pinned data."""

    def __init__(self, spec: BenchmarkSpec, spec_path: Path, context: BenchmarkContext) -> None:
        self.spec = spec
        data_path = (spec_path.parent / spec.data.path).resolve()
        if not data_path.is_file():
            raise DataNotFoundError(f"{spec_path}: data file not found: {data_path}")
        rows = _decode_rows(read_verified(data_path, spec.data.sha256), data_path)
        ids = _check_rows(spec, rows, data_path)
        self._rows = dict(zip(ids, rows, strict=True))
        self._ids = ids
        self._path = data_path
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
    def kind(self) -> BenchmarkKind:
        return "choice" if self.spec.format == "multiple-choice" else "generate"

    @property
    def dataset_sha256(self) -> str:
        return self.spec.data.sha256

    @property
    def source(self) -> DataSourceInfo:
        return DataSourceInfo("file", str(self._path))

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
            labels = Labels(
                skill=_render(self.spec.labels.skill, row),
                subject=_render(self.spec.labels.subject, row),
                language=_render(self.spec.labels.language, row),
                format="mcqa" if self.spec.format == "multiple-choice" else "short-form",
            )
            out.append(Sample(sample_id, labels, row))
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


def load_custom_benchmark(path: Path, context: BenchmarkContext) -> CustomBenchmark:
    """Read, validate and load a custom benchmark spec and its data."""
    return CustomBenchmark(read_spec(path), path, context)
