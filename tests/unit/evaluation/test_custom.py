import json
from pathlib import Path

import pytest
import yaml

from quorumbench.backends.mock import MockBackend
from quorumbench.benchmarks import load_benchmark
from quorumbench.benchmarks.custom import read_spec
from quorumbench.errors import (
    ChecksumMismatchError,
    DataError,
    InvalidLabelsError,
    InvalidSpecError,
)
from quorumbench.evaluation.backend import ChoiceResult
from quorumbench.evaluation.benchmark import BenchmarkContext
from quorumbench.evaluation.engine import EvalConfig, evaluate

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "custom"


def test_multiple_choice_spec_runs_end_to_end():
    bench = load_benchmark(str(FIXTURES / "capitals.yaml"), BenchmarkContext())
    assert (bench.name, bench.version, bench.kind) == ("world-capitals", 1, "choice")
    assert sorted(bench.sample_ids()) == ["au", "ca", "fr", "jp"]

    capitals = {"Paris", "Tokyo", "Ottawa", "Canberra"}

    def score(request):
        return [0.0 if c.strip() in capitals else -5.0 for c in request.continuations]

    result = evaluate(bench, MockBackend(score=score), EvalConfig(n=4, seed="s"))
    assert result.score == 1.0
    assert {s.labels["subject"] for s in result.samples} == {
        "hass/europe",
        "hass/asia",
        "hass/americas",
        "hass/oceania",
    }
    samples = bench.samples(list(bench.sample_ids()))
    assert all(s.chance == pytest.approx(1 / 3) for s in samples)
    assert bench.pillar == "language"
    assert all(s.labels["format"] == "mcqa" for s in result.samples)


def test_letter_choice_scoring():
    bench = load_benchmark(str(FIXTURES / "capitals.yaml"), BenchmarkContext())
    (sample,) = bench.samples(["jp"])
    assert bench.score(sample, ChoiceResult("letter", chosen=1)).correct
    assert not bench.score(sample, ChoiceResult("letter", chosen=0)).correct
    assert bench.score(sample, ChoiceResult("letter", chosen=None)).prediction is None


def test_exact_match_spec():
    bench = load_benchmark(str(FIXTURES / "sums.yaml"), BenchmarkContext())
    answers = {"2 + 3": "5", "10 - 4": "6.0", "7 * 6": "41"}

    def answer(prompt):
        return next(v for k, v in answers.items() if k in prompt) + "\nmore text"

    result = evaluate(bench, MockBackend(answer, is_chat=False), EvalConfig(n=3, seed="x"))
    assert sorted(s.correct for s in result.samples) == [False, True, True]
    request = bench.request(bench.samples(["0000"])[0], "plain")
    assert request.prompt.text == "Answer with a number.\n\nQ: What is 2 + 3?\nA:"
    chat = bench.request(bench.samples(["0000"])[0], "chat")
    assert [m.role for m in chat.prompt.messages] == ["system", "user"]


def _write_spec(tmp_path, spec, rows=None):
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows or [{"q": "x", "a": "1"}]))
    import hashlib

    spec.setdefault("data", {"path": "data.jsonl"})
    spec["data"].setdefault("sha256", hashlib.sha256(data.read_bytes()).hexdigest())
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


BASE = {
    "name": "tiny",
    "version": 1,
    "format": "exact-match",
    "prompt": {"version": 1, "template": "{q}"},
    "answer_field": "a",
    "labels": {"skill": "reasoning", "subject": "science/math"},
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": "Bad Name"}, "name: String should match pattern"),
        ({"version": 0}, "version: Input should be greater than or equal to 1"),
        ({"format": "essay"}, "format: Input should be 'multiple-choice' or 'exact-match'"),
        ({"prompt": {"version": 1, "template": "{q.__class__}"}}, "prompt.template: placeholder"),
        ({"prompt": {"version": 1, "template": "{q!r}"}}, "not a plain field name"),
        ({"prompt": {"version": 1, "template": "{"}}, "bad template"),
        ({"format": "multiple-choice"}, "needs choices_field"),
        ({"choices_field": "c"}, "only used with format 'multiple-choice'"),
        ({"extract": {"kind": "regex"}}, "needs extract.pattern"),
        ({"extract": {"kind": "regex", "pattern": "("}}, "not a valid regex"),
        ({"extract": {"kind": "regex", "pattern": "\\d+"}}, "one capturing group"),
        ({"extra_key": 1}, "extra_key: Extra inputs are not permitted"),
        ({"data": {"path": "data.jsonl", "sha256": "xyz"}}, "data.sha256: String should match"),
        ({"pillar": "vibes"}, "pillar 'vibes' is not one of reasoning"),
        ({"labels": {"skill": "geography", "subject": "hass"}}, "skill 'geography' is not one"),
        ({"labels": {"skill": "knowledge", "subject": "misc"}}, "subject 'misc' does not start"),
        ({"labels": {"skill": "knowledge", "subject": "hass", "shape": "x"}}, "labels.shape"),
        ({"labels": {"skill": "knowledge"}}, "labels.subject: Field required"),
        ({"data": {"url": "ftp://x.org/d.jsonl", "sha256": "0" * 64}}, "data.url must be"),
        ({"data": {"url": "hf://datasets/o/r@main/d.jsonl", "sha256": "0" * 64}}, "pinned commit"),
        ({"data": {"url": "https://x.org/d.csv", "sha256": "0" * 64}}, "must end in .jsonl"),
        (
            {"data": {"path": "d.jsonl", "url": "https://x.org/d.jsonl", "sha256": "0" * 64}},
            "exactly one of path",
        ),
        ({"scorer": "!function utils.score"}, "scorer: Extra inputs are not permitted"),
    ],
)
def test_malformed_specs_are_rejected_precisely(tmp_path, change, message):
    spec = {**BASE, **change}
    path = _write_spec(tmp_path, spec)
    with pytest.raises(InvalidSpecError) as info:
        read_spec(path)
    assert str(path) in str(info.value)
    assert message in str(info.value)


def test_missing_answer_field_is_reported(tmp_path):
    spec = {k: v for k, v in BASE.items() if k != "answer_field"}
    with pytest.raises(InvalidSpecError, match="answer_field: Field required"):
        read_spec(_write_spec(tmp_path, spec))


def test_not_a_mapping(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("- just\n- a list\n")
    with pytest.raises(InvalidSpecError, match="mapping"):
        read_spec(path)


def test_bad_yaml(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(InvalidSpecError, match="not valid YAML"):
        read_spec(path)


def test_data_checksum_is_verified(tmp_path):
    path = _write_spec(tmp_path, {**BASE, "data": {"path": "data.jsonl", "sha256": "0" * 64}})
    with pytest.raises(ChecksumMismatchError, match="expected sha256 0000"):
        load_benchmark(str(path), BenchmarkContext())


def test_rows_must_have_the_template_fields(tmp_path):
    path = _write_spec(tmp_path, dict(BASE), rows=[{"q": "x", "a": "1"}, {"a": "2"}])
    with pytest.raises(DataError, match="row 2 lacks the field"):
        load_benchmark(str(path), BenchmarkContext())


def test_multiple_choice_answers_must_be_valid(tmp_path):
    spec = {
        **BASE,
        "format": "multiple-choice",
        "choices_field": "c",
    }
    path = _write_spec(tmp_path, spec, rows=[{"q": "x", "c": ["a", "b"], "a": 5}])
    with pytest.raises(DataError, match="choice index or one of the choices"):
        load_benchmark(str(path), BenchmarkContext())


def test_duplicate_ids_are_rejected(tmp_path):
    spec = {**BASE, "data": {"path": "data.jsonl", "id_field": "q"}}
    path = _write_spec(tmp_path, spec, rows=[{"q": "x", "a": "1"}, {"q": "x", "a": "2"}])
    with pytest.raises(DataError, match="not unique"):
        load_benchmark(str(path), BenchmarkContext())


def test_rendered_labels_of_every_row_are_checked(tmp_path):
    spec = {**BASE, "labels": {"skill": "reasoning", "subject": "science/{topic}"}}
    rows = [{"q": "1+1", "a": "2", "topic": "math"}, {"q": "x", "a": "y", "topic": "Not Kebab"}]
    path = _write_spec(tmp_path, spec, rows=rows)
    with pytest.raises(InvalidLabelsError, match="row 2: its labels are not in taxonomy v1"):
        load_benchmark(str(path), BenchmarkContext())


def test_exact_match_rows_have_no_chance_level():
    bench = load_benchmark(str(FIXTURES / "sums.yaml"), BenchmarkContext())
    assert {s.chance for s in bench.samples(list(bench.sample_ids()))} == {0.0}
    assert bench.pillar == "math"
