"""The declarative custom-benchmark spec (YAML or JSON), validated with pydantic.

A spec holds data, never code: a data file pinned by SHA-256 (a local ``path``, or a
``url``: HTTPS, or a Hub dataset file at a pinned commit), a format
(``multiple-choice`` or ``exact-match``), a prompt template with ``{field}``
placeholders, how to extract and compare answers, its pillar and labels in taxonomy
v1 (``core/taxonomy.py``). See docs/custom-benchmarks.md for the full reference and an
example.
"""

from __future__ import annotations

import re
import string
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from quorumbench.core.taxonomy import label_problems, pillar_problem
from quorumbench.errors import InvalidSpecError
from quorumbench.protocol import BENCHMARK_NAME_PATTERN

_NAME = BENCHMARK_NAME_PATTERN
_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HUB_URL = re.compile(
    r"^hf://datasets/(?P<repo>[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*)"
    r"@(?P<revision>[0-9a-f]{40})/(?P<path>[A-Za-z0-9_.\-/]+)$"
)
DATA_SUFFIXES = (".jsonl", ".json")


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


def download_url(url: str) -> str:
    """The HTTPS URL to fetch a data ``url`` from: an ``hf://datasets/<repo>@<commit>/<path>``
    ref becomes the Hub's resolve URL at that commit; an HTTPS URL is itself."""
    hub = _HUB_URL.match(url)
    if hub is None:
        return url
    return f"https://huggingface.co/datasets/{hub['repo']}/resolve/{hub['revision']}/{hub['path']}"


def _url_problem(url: str) -> str | None:
    if url.startswith("hf://"):
        if _HUB_URL.match(url) is None:
            return (
                "data.url: a Hub file is hf://datasets/<owner>/<repo>@<40-hex commit>/<path> "
                "(a pinned commit, not a branch)"
            )
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        return (
            "data.url must be an https:// URL with a host, or hf://datasets/<repo>@<commit>/<path>"
        )
    if parts.username or parts.password:
        return "data.url must not carry a user name or password"
    return None


class DataSpec(_Strict):
    path: str | None = Field(
        None, description="Data file (.jsonl or .json array), relative to the spec"
    )
    url: str | None = Field(
        None,
        max_length=2000,
        description="Data file at an https:// URL or hf://datasets/<repo>@<commit>/<path>",
    )
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    id_field: str | None = Field(None, description="Field holding a unique id; else row index")

    @model_validator(mode="after")
    def _one_source(self) -> DataSpec:
        if (self.path is None) == (self.url is None):
            raise ValueError("data needs exactly one of path (a local file) and url")
        if self.url is not None:
            problem = _url_problem(self.url)
            if problem:
                raise ValueError(problem)
        if not self.file_name.endswith(DATA_SUFFIXES):
            raise ValueError("the data file must end in .jsonl (one object a line) or .json")
        return self

    @property
    def file_name(self) -> str:
        """The data file's name (its suffix says how to read it)."""
        where = self.path if self.path is not None else urlsplit(self.url or "").path
        return where.rsplit("/", 1)[-1]


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
    """Labels in taxonomy v1: literal values or ``{field}`` placeholders (rendered per
    row, and every row's rendered labels are checked when the data is loaded). The
    ``format`` label comes from the spec's format (mcqa or short-form)."""

    skill: str
    subject: str
    target: str = "general"
    language: str = "en"
    source_category: str | None = None

    @field_validator("skill", "subject", "target", "language", "source_category")
    @classmethod
    def _plain_placeholders(cls, value: str | None) -> str | None:
        if value is not None:
            template_fields(value)
        return value

    @model_validator(mode="after")
    def _literal_values_in_taxonomy(self) -> LabelsSpec:
        literal = {
            key: value
            for key, value in self.templates().items()
            if key != "source_category" and not template_fields(value)
        }
        problems = [p for p in label_problems(literal) if not p.startswith("missing label")]
        if problems:
            raise ValueError("labels: " + "; ".join(problems))
        return self

    def templates(self) -> dict[str, str]:
        """Each label's template (literal or with placeholders), ``format`` aside."""
        out = {
            "skill": self.skill,
            "subject": self.subject,
            "target": self.target,
            "language": self.language,
        }
        if self.source_category is not None:
            out["source_category"] = self.source_category
        return out


class BenchmarkSpec(_Strict):
    """A custom benchmark. Field names match the YAML keys."""

    name: Annotated[str, Field(pattern=_NAME)]
    version: int = Field(ge=1)
    description: str = Field("", max_length=2000)
    pillar: str | None = Field(
        None, description="The pillar it counts for: reasoning, coding, math, language, safety"
    )
    format: Literal["multiple-choice", "exact-match"]
    data: DataSpec
    prompt: PromptSpec
    choices_field: str | None = None
    answer_field: str
    extract: ExtractSpec = ExtractSpec()
    compare: Literal["number", "text", "exact"] = "text"
    stop: list[str] = Field(default_factory=lambda: ["\n\n"])
    max_new_tokens: int = Field(64, ge=1, le=4096)
    labels: LabelsSpec

    @field_validator("pillar")
    @classmethod
    def _known_pillar(cls, value: str | None) -> str | None:
        if value is not None:
            problem = pillar_problem(value)
            if problem:
                raise ValueError(problem)
        return value

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
        for value in self.labels.templates().values():
            used |= set(template_fields(value))
        return used

    @property
    def label_format(self) -> str:
        """The taxonomy ``format`` label of every row: mcqa or short-form."""
        return "mcqa" if self.format == "multiple-choice" else "short-form"


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
