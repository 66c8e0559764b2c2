"""Pure helpers of the web pages' reads: services/board.py, lineage.py, subjects.py."""

from __future__ import annotations

import pytest

from quorumbench.services.board import model_type
from quorumbench.services.lineage import revision_url


@pytest.mark.parametrize(
    ("ref", "details", "expected"),
    [
        ("hf:org/m@" + "1" * 40, {}, "base"),
        ("hf:org/adapter@" + "1" * 40, {"kind": "adapter"}, "lora"),
        ("gguf:org/repo/m.gguf@" + "1" * 40, {}, "gguf"),
        ("openai:http://x/v1#m", {}, "endpoint"),
    ],
)
def test_model_type(ref, details, expected):
    assert model_type(ref, details) == expected


def test_revision_url():
    sha = "1" * 40
    assert revision_url(f"hf:org/m@{sha}", sha) == f"https://huggingface.co/org/m/tree/{sha}"
    assert (
        revision_url(f"gguf:org/r/f.gguf@{sha}", sha) == f"https://huggingface.co/org/r/tree/{sha}"
    )
    assert revision_url(f"gguf:./local/f.gguf@{sha}", sha) is None
    assert revision_url("openai:http://x/v1#m", "") is None


class _Labelled:
    """A benchmark stand-in that labels ids ``<subject>-<n>`` and counts its calls."""

    name, version, dataset_sha256 = "quiz", 2, "ab" * 32

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def samples(self, ids):
        from quorumbench.errors import DataError
        from quorumbench.evaluation.benchmark import Labels, Sample

        self.calls.append(list(ids))
        for sample_id in ids:
            if "-" not in sample_id:
                raise DataError(f"quiz has no sample {sample_id!r}")
        return [Sample(i, Labels("skill", i.split("-")[0]), {}) for i in ids]


def test_subject_labels_are_cached_and_unknown_ids_are_none():
    from types import SimpleNamespace

    from quorumbench.services.subjects import subject_labels

    bench = _Labelled()
    ctx = SimpleNamespace(loaded_benchmarks={"quiz": bench}, sample_subjects={})
    got = subject_labels(ctx, "quiz", 2, "ab" * 32, ["law-1", "law-1", "health-2"])
    assert got == {"law-1": "law", "health-2": "health"}
    assert bench.calls == [["law-1", "health-2"]]  # each id once
    got = subject_labels(ctx, "quiz", 2, "ab" * 32, ["law-1", "bogus", "art-3"])
    assert got["bogus"] is None and got["art-3"] == "art"
    assert bench.calls[1:] == [["bogus", "art-3"], ["bogus"], ["art-3"]]  # then one by one
    subject_labels(ctx, "quiz", 2, "ab" * 32, ["bogus"])
    assert len(bench.calls) == 4  # a missing id is remembered too
    # another version or data than the one loaded, or not loaded at all: no labels
    assert subject_labels(ctx, "quiz", 3, "ab" * 32, ["law-1"]) == {}
    assert subject_labels(ctx, "quiz", 2, "cd" * 32, ["law-1"]) == {}
    assert subject_labels(ctx, "other", 1, "ab" * 32, ["law-1"]) == {}
