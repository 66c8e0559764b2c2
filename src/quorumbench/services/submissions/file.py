"""A submission file: the YAML a pull request adds to a leaderboard repository.

```yaml
model:
  hf_repo: HuggingFaceTB/SmolLM2-135M-Instruct  # a Hub repo id; or ref: (below)
  revision: 12fd25f77366fa6b3b4b768ec3050bf629380bac  # optional; default: main
  name: SmolLM2 135M Instruct                   # optional; default: detected
  family: llama                                 # optional; default: detected
notes: anything the reviewers should know (never sent to the server)
```

``model.ref`` takes a whole ref instead of ``hf_repo`` (``hf:owner/name@<commit>``,
``gguf:owner/name/file.gguf@<commit>``, ``openai:<url>#<model>``;
``evaluation/refs.py``); exactly one of the two. A branch or tag (or no revision) is
resolved to its commit when the file is validated, and again when it is registered:
pin the commit so that what was reviewed is what is registered.

:func:`read_submission_file` reads a file's text into a :class:`Submission` or into
findings (errors) with stable codes and plain sentences; it never raises for what the
file holds. The file is data: it is parsed with ``yaml.safe_load`` (no tags that build
objects) into a pydantic model that forbids any other key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from quorumbench.errors import InvalidRefError, RegistrationError
from quorumbench.evaluation.refs import parse_ref
from quorumbench.services.submissions.checks import Submission
from quorumbench.services.submissions.report import Findings, SubmissionReport

MAX_FILE_BYTES = 64 * 1024
"""A submission file is a few lines; anything larger is refused unread."""
REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")
"""A Hub repo id, as ``evaluation/refs.py`` reads one (``owner/name``)."""
KEYS = "model (hf_repo or ref; revision, name, family) and notes"


class ModelEntry(BaseModel):
    """The ``model`` mapping of a submission file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hf_repo: str | None = Field(None, max_length=200, description="A Hub repo id.")
    revision: str | None = Field(
        None, max_length=200, description="With hf_repo: a commit (or a branch or tag)."
    )
    ref: str | None = Field(None, max_length=512, description="A whole model ref.")
    name: str | None = Field(None, min_length=1, max_length=256, description="Display name.")
    family: str | None = Field(None, min_length=1, max_length=64, description="Model family.")


class SubmissionFile(BaseModel):
    """A whole submission file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: ModelEntry
    notes: str | None = Field(None, max_length=10_000, description="For the reviewers.")


@dataclass(frozen=True)
class FileReading:
    """A file read: its submission, or the errors that refuse it."""

    submission: Submission | None
    findings: Findings
    ref: str
    """The ref the file names ("" when none could be read)."""

    def refusal_report(self) -> SubmissionReport:
        """The report of a refused file: its errors; nothing was looked up."""
        return SubmissionReport(
            ok=False,
            ref=self.ref,
            pinned_ref=None,
            findings=self.findings.ordered(),
            metadata=None,
            quota=None,
            estimate=None,
            existing=None,
        )


def _refused(code: str, message: str, field: str | None = None, ref: str = "") -> FileReading:
    found = Findings()
    found.error(code, RegistrationError(message, check=code), field)
    return FileReading(None, found, ref)


class _DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping key given twice."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice (it would keep the last)."""


def _unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise _DuplicateKeyError(
                None, None, f"the key {key!r} is given twice", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{problem}{where}"


def _path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc)


def _schema_findings(exc: ValidationError) -> Findings:
    found = Findings()
    for err in exc.errors():
        path = _path(err["loc"])
        kind = err["type"]
        if kind == "extra_forbidden":
            code, text = "unknown-key", f"unknown key {path}: a submission file has {KEYS}"
        elif kind == "missing" and path == "model":
            code = "model-missing"
            text = (
                "the file names no model: add model.hf_repo (a Hub repo id, owner/name) "
                "or model.ref (a model ref)"
            )
        else:
            read = err.get("input")
            scalar = isinstance(read, int | float | bool)
            quote = f" (YAML read {read!r}: quote the value)" if scalar else ""
            message = str(err["msg"])
            code, text = "schema-invalid", f"{path}: {message[:1].lower()}{message[1:]}{quote}"
        found.error(code, RegistrationError(text, check=code), path)
    return found


def _model_ref(entry: ModelEntry) -> FileReading:
    """The ref a valid ``model`` mapping names, checked for its syntax."""
    if entry.hf_repo is not None and entry.ref is not None:
        return _refused(
            "model-conflict",
            "model has both hf_repo and ref: give one (hf_repo with an optional revision, "
            "or a whole ref)",
            "model",
        )
    if entry.hf_repo is None and entry.ref is None:
        return _refused(
            "model-missing",
            "model names no model: add model.hf_repo (a Hub repo id, owner/name) or "
            "model.ref (a model ref)",
            "model",
        )
    if entry.ref is not None:
        if entry.revision is not None:
            return _refused(
                "model-conflict",
                "model.revision goes with model.hf_repo; a ref carries its revision after '@'",
                "model.revision",
                entry.ref,
            )
        text, field = entry.ref.strip(), "model.ref"
    else:
        assert entry.hf_repo is not None
        repo = entry.hf_repo.strip()
        revision = f"@{entry.revision.strip()}" if entry.revision is not None else ""
        text, field = f"hf:{repo}{revision}", "model.hf_repo"
        if not REPO_ID.match(repo):
            return _refused(
                "ref-invalid",
                f"model.hf_repo {repo!r} is not a Hub repo id (owner/name; a branch, tag or "
                "commit goes in model.revision)",
                field,
                text,
            )
    try:
        parse_ref(text, allow_moving=True)
    except InvalidRefError as exc:
        return _refused("ref-invalid", exc.message, field, text)
    submission = Submission(text, entry.name, entry.family)
    return FileReading(submission, Findings(), text)


def read_submission_file(data: bytes) -> FileReading:
    """Read a submission file's bytes (see the module docstring)."""
    if len(data) > MAX_FILE_BYTES:
        return _refused(
            "file-too-large",
            f"the file has {len(data):,} bytes; a submission file is a few lines "
            f"(at most {MAX_FILE_BYTES:,} bytes)",
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _refused("yaml-malformed", f"the file is not UTF-8 text ({exc.reason})")
    try:
        loaded = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: data only
    except _DuplicateKeyError as exc:
        return _refused("duplicate-key", f"{_yaml_problem(exc)}: give each key once")
    except yaml.YAMLError as exc:
        return _refused("yaml-malformed", f"the file is not valid YAML: {_yaml_problem(exc)}")
    if loaded is None:
        return _refused(
            "model-missing",
            "the file is empty: a submission file has model.hf_repo (a Hub repo id) or "
            "model.ref (a model ref)",
        )
    if not isinstance(loaded, dict):
        return _refused(
            "schema-invalid",
            f"the file holds a YAML {type(loaded).__name__}, not a mapping: a submission "
            f"file has {KEYS}",
        )
    try:
        parsed = SubmissionFile.model_validate(loaded)
    except ValidationError as exc:
        return FileReading(None, _schema_findings(exc), _named_ref(loaded))
    return _model_ref(parsed.model)


def _named_ref(loaded: dict[Any, Any]) -> str:
    """The ref a refused file seems to name, for its report ("" when none)."""
    model = loaded.get("model")
    if not isinstance(model, dict):
        return ""
    ref, repo, revision = model.get("ref"), model.get("hf_repo"), model.get("revision")
    if isinstance(ref, str):
        return ref.strip()
    if isinstance(repo, str):
        return f"hf:{repo.strip()}" + (f"@{revision.strip()}" if isinstance(revision, str) else "")
    return ""
