"""A pull request's submission file (services/submissions/file.py): one schema, and
each bad input is one error with a stable code, a plain sentence and its field."""

from __future__ import annotations

import pytest

from quorumbench.services.submissions import Submission, read_submission_file
from quorumbench.services.submissions.file import MAX_FILE_BYTES

SHA = "0123456789abcdef0123456789abcdef01234567"


def errors(text: str | bytes) -> list[tuple[str, str | None]]:
    data = text.encode() if isinstance(text, str) else text
    reading = read_submission_file(data)
    assert reading.submission is None
    report = reading.refusal_report()
    assert report.ok is False and report.metadata is None and report.quota is None
    assert all(f.level == "error" and f.message for f in report.findings)
    return [(f.code, f.field) for f in report.findings]


def message(text: str) -> str:
    return read_submission_file(text.encode()).findings.items[0].message


def test_hf_repo_with_a_revision_name_and_family_is_a_submission():
    text = f"""
model:
  hf_repo: HuggingFaceTB/SmolLM2-135M-Instruct
  revision: {SHA}
  name: SmolLM2 135M
  family: llama
notes: |
  for the reviewers
"""
    reading = read_submission_file(text.encode())
    assert reading.submission == Submission(
        f"hf:HuggingFaceTB/SmolLM2-135M-Instruct@{SHA}", "SmolLM2 135M", "llama"
    )
    assert reading.findings.items == [] and reading.ref == reading.submission.ref


@pytest.mark.parametrize(
    ("model", "ref"),
    [
        ("hf_repo: org/name", "hf:org/name"),  # the branch main, resolved when validated
        ("hf_repo: org/name\n  revision: main", "hf:org/name@main"),
        (f"ref: gguf:org/name/m.gguf@{SHA}", f"gguf:org/name/m.gguf@{SHA}"),
        ("ref: openai:https://api.example.org/v1#m", "openai:https://api.example.org/v1#m"),
    ],
)
def test_a_ref_or_a_repo_names_the_model(model, ref):
    reading = read_submission_file(f"model:\n  {model}\n".encode())
    assert reading.submission is not None and reading.submission.ref == ref
    assert reading.submission.name is None and reading.submission.family is None


def test_malformed_yaml_is_yaml_malformed_with_where():
    assert errors("model:\n  hf_repo: [org/name\n") == [("yaml-malformed", None)]
    assert "at line 3, column 1" in message("model:\n  hf_repo: [org/name\n")
    assert errors(b"model:\n  name: \xff\n") == [("yaml-malformed", None)]
    assert errors("---\nmodel: {}\n---\nmodel: {}\n") == [("yaml-malformed", None)]


def test_yaml_that_builds_objects_is_refused_not_run():
    text = "model: !!python/object/apply:os.system ['true']\n"
    assert errors(text) == [("yaml-malformed", None)]
    assert "constructor" in message(text)


def test_a_key_given_twice_is_refused():
    text = "model:\n  hf_repo: org/a\n  hf_repo: org/b\n"
    assert errors(text) == [("duplicate-key", None)]
    assert "'hf_repo' is given twice" in message(text)


def test_unknown_keys_are_refused_each_with_its_path():
    text = "model:\n  hf_repo: org/name\n  paramters: 1B\nlicense: mit\n"
    assert errors(text) == [("unknown-key", "model.paramters"), ("unknown-key", "license")]
    assert message(text).startswith("unknown key model.paramters: a submission file has model")


@pytest.mark.parametrize(
    "text", ["", "# nothing\n", "notes: hello\n", "model: {}\n", "model:\n  name: x\n"]
)
def test_a_file_without_a_model_is_model_missing(text):
    assert [code for code, _ in errors(text)] == ["model-missing"]


def test_both_hf_repo_and_ref_is_model_conflict():
    text = f"model:\n  hf_repo: org/name\n  ref: hf:org/name@{SHA}\n"
    assert errors(text) == [("model-conflict", "model")]
    assert "give one" in message(text)
    assert errors(f"model:\n  ref: hf:org/name@{SHA}\n  revision: {SHA}\n") == [
        ("model-conflict", "model.revision")
    ]


@pytest.mark.parametrize(
    ("model", "field", "words"),
    [
        ("ref: hf:org/name@bad..branch", "model.ref", "the revision after '@'"),
        ("ref: org/name", "model.ref", "expected one of hf:"),
        ("ref: gguf:org/name/model.bin@main", "model.ref", "gguf:<owner>/<name>/<file>.gguf"),
        ("hf_repo: not-a-repo", "model.hf_repo", "not a Hub repo id"),
        ("hf_repo: org/name@main", "model.hf_repo", "goes in model.revision"),
        ("hf_repo: org/name\n  revision: '..'", "model.hf_repo", "the revision after '@'"),
    ],
)
def test_bad_ref_syntax_is_ref_invalid(model, field, words):
    text = f"model:\n  {model}\n"
    reading = read_submission_file(text.encode())
    assert errors(text) == [("ref-invalid", field)]
    assert words in reading.findings.items[0].message


def test_wrong_types_and_sizes_are_schema_invalid():
    assert errors("- model\n") == [("schema-invalid", None)]
    assert errors("model: org/name\n") == [("schema-invalid", "model")]
    text = "model:\n  hf_repo: org/name\n  name: 2024\n"
    assert errors(text) == [("schema-invalid", "model.name")]
    assert "YAML read 2024: quote the value" in message(text)
    assert errors(f"model:\n  hf_repo: org/name\n  family: {'x' * 65}\n") == [
        ("schema-invalid", "model.family")
    ]


def test_a_large_file_is_refused_unread():
    assert errors(b"#" * (MAX_FILE_BYTES + 1)) == [("file-too-large", None)]


def test_the_report_of_a_refused_file_names_the_ref_it_seems_to_name():
    reading = read_submission_file(b"model:\n  hf_repo: org/name\n  extra: 1\n")
    assert reading.refusal_report().ref == "hf:org/name"
    assert read_submission_file(b"- x\n").refusal_report().ref == ""
