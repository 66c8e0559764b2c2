"""The declarative custom-benchmark spec (YAML or JSON), validated with pydantic.

A spec holds data, never code: a data file pinned by SHA-256, a format
(``multiple-choice`` or ``exact-match``), a prompt template with ``{field}``
placeholders, how to extract and compare answers, and labels. See
docs/custom-benchmarks.md for the full reference and an example.
"""

from __future__ import annotations

import re
import string
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from quorumbench.errors import InvalidSpecError
from quorumbench.protocol import BENCHMARK_NAME_PATTERN

_NAME = BENCHMARK_NAME_PATTERN
_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def template_fields(template: str) -> list[str]:
    """The ``{field}`` names a template uses; rejects anything but plain names."""
    names = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"bad template: {exc}") from exc
    for _, field_name, format_spec, conversion in parsed:
        if field_name is None:
            continue
        if not _FIELD.match(field_name) or format_spec or conversion:
            raise ValueError(
                f"placeholder {{{field_name}}} is not a plain field name "
                "(use {name}; no attributes, indexes, conversions or format specs)"
            )
        names.append(field_name)
    return names


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DataSpec(_Strict):
    path: str = Field(description="Data file (.jsonl or .json array), relative to the spec")
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    id_field: str | None = Field(None, description="Field holding a unique id; else row index")


class PromptSpec(_Strict):
    version: int = Field(ge=1)
    template: str = Field(min_length=1)
    system: str | None = None
    target_delimiter: str = " "

    @field_validator("template", "system")
    @classmethod
    def _plain_placeholders(cls, value: str | None) -> str | None:
        if value is not None:
            template_fields(value)
        return value


class ExtractSpec(_Strict):
    kind: Literal["number", "first-line", "regex", "full"] = "first-line"
    pattern: str | None = None

    @model_validator(mode="after")
    def _pattern_for_regex(self) -> ExtractSpec:
        if self.kind == "regex":
            if not self.pattern:
                raise ValueError("extract.kind 'regex' needs extract.pattern")
            try:
                compiled = re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(f"extract.pattern is not a valid regex: {exc}") from exc
            if compiled.groups < 1:
                raise ValueError("extract.pattern needs one capturing group for the answer")
        elif self.pattern is not None:
            raise ValueError("extract.pattern is only used with extract.kind 'regex'")
        return self


class LabelsSpec(_Strict):
    skill: str = "custom"
    subject: str = "general"
    language: str = "en"

    @field_validator("skill", "subject", "language")
    @classmethod
    def _plain_placeholders(cls, value: str) -> str:
        template_fields(value)
        return value


class BenchmarkSpec(_Strict):
    """A custom benchmark. Field names match the YAML keys."""

    name: Annotated[str, Field(pattern=_NAME)]
    version: int = Field(ge=1)
    description: str = ""
    format: Literal["multiple-choice", "exact-match"]
    data: DataSpec
    prompt: PromptSpec
    choices_field: str | None = None
    answer_field: str
    extract: ExtractSpec = ExtractSpec()
    compare: Literal["number", "text", "exact"] = "text"
    stop: list[str] = Field(default_factory=lambda: ["\n\n"])
    max_new_tokens: int = Field(64, ge=1, le=4096)
    labels: LabelsSpec = LabelsSpec()

    @model_validator(mode="after")
    def _format_rules(self) -> BenchmarkSpec:
        if self.format == "multiple-choice":
            if not self.choices_field:
                raise ValueError("format 'multiple-choice' needs choices_field")
        elif self.choices_field:
            raise ValueError("choices_field is only used with format 'multiple-choice'")
        return self

    def placeholders(self) -> set[str]:
        used = set(template_fields(self.prompt.template))
        if self.prompt.system:
            used |= set(template_fields(self.prompt.system))
        for value in (self.labels.skill, self.labels.subject, self.labels.language):
            used |= set(template_fields(value))
        return used


def _location(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(top level)"


def parse_spec(raw: object, origin: str) -> BenchmarkSpec:
    """Validate a decoded spec; errors name the file and the key path."""
    if not isinstance(raw, dict):
        raise InvalidSpecError(f"{origin}: a benchmark spec is a mapping of keys to values")
    try:
        return BenchmarkSpec.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{_location(err['loc'])}: {err['msg'].removeprefix('Value error, ')}"
            for err in exc.errors()
        )
        raise InvalidSpecError(f"{origin}: invalid benchmark spec: {problems}") from exc
