"""GSM8K: grade-school maths word problems, greedy chain-of-thought, exact match.

The answer is the number after ``####`` in the generation, else its last number,
normalised (commas, ``$``, trailing ``.0``) before comparison with the gold number
after ``####`` in the reference solution. Exemplars are the first ``shots`` rows of
the train split, as lm-eval's ``first_n`` sampler picks them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

from quorumbench.benchmarks._math import Exemplar, math_request, score_number
from quorumbench.errors import ConfigError, DataError
from quorumbench.evaluation.backend import ChoiceResult, GenerateRequest, GenerateResult
from quorumbench.evaluation.benchmark import (
    BenchmarkContext,
    BenchmarkKind,
    DataSourceInfo,
    Labels,
    PromptStyle,
    Sample,
    Scored,
)
from quorumbench.evaluation.data import DataFile, HubTable, Records, load_data, record_at
from quorumbench.evaluation.extract import hashes_number

HUB_REPO = "openai/gsm8k"
HUB_REVISION = "740312add88f781978c0658806c59bc2815b9866"
DEFAULT_SHOTS = 5
DEFAULT_MAX_NEW_TOKENS = 256
LABELS = Labels(skill="reasoning", subject="science/math", format="short-form")


def _parse_jsonl(data: bytes) -> Records:
    records = []
    for number, line in enumerate(data.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            records.append({"question": row["question"], "answer": row["answer"]})
        except (ValueError, KeyError, TypeError) as exc:
            raise DataError(f"gsm8k line {number}: not a question/answer object ({exc})") from exc
    return records


def _parse_hub(rows: Records) -> Records:
    return [{"question": r["question"], "answer": r["answer"]} for r in rows]


TEST = DataFile(
    relpath="gsm8k/test.jsonl",
    sha256="3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14",
    records_sha256="b6c9d9547ec974d3c064a2f101ebf67e74257536d8c5e22a9758f2893a9e03a4",
    parse_local=_parse_jsonl,
    hub=HubTable(HUB_REPO, HUB_REVISION, "main/test-00000-of-00001.parquet"),
    parse_hub=_parse_hub,
)
TRAIN = DataFile(
    relpath="gsm8k/train.jsonl",
    sha256="17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465",
    records_sha256="419386f7702aae71e33d2ce12db2170fc893004227b082354443fa5873b378bb",
    parse_local=_parse_jsonl,
    hub=HubTable(HUB_REPO, HUB_REVISION, "main/train-00000-of-00001.parquet"),
    parse_hub=_parse_hub,
)


class Gsm8kBenchmark:
    """GSM8K test split (1,319 problems)."""

    name = "gsm8k"
    version = 1
    prompt_version = 1
    kind: BenchmarkKind = "generate"

    def __init__(self, context: BenchmarkContext) -> None:
        self._context = context
        self._shots = DEFAULT_SHOTS if context.shots is None else context.shots
        self._max_new_tokens = context.max_new_tokens or DEFAULT_MAX_NEW_TOKENS
        if not 0 <= self._shots <= 16:
            raise ConfigError("gsm8k takes 0 to 16 shots")
        loaded = load_data(TEST, context.datasets_dir)
        self._records = loaded.records
        self._source = loaded.source

    @property
    def dataset_sha256(self) -> str:
        return TEST.sha256

    @property
    def source(self) -> DataSourceInfo:
        return self._source

    @property
    def config(self) -> Mapping[str, Any]:
        return {"shots": self._shots, "max_new_tokens": self._max_new_tokens}

    @cached_property
    def _exemplars(self) -> list[Exemplar]:
        if self._shots == 0:
            return []
        rows = load_data(TRAIN, self._context.datasets_dir).records[: self._shots]
        return [Exemplar(r["question"], r["answer"]) for r in rows]

    def sample_ids(self) -> Sequence[str]:
        return [f"{i:04d}" for i in range(len(self._records))]

    def samples(self, ids: Sequence[str]) -> list[Sample]:
        out = []
        for sample_id in ids:
            row = record_at(self._records, sample_id, self.name)
            gold = hashes_number(row["answer"])
            if gold is None:
                raise DataError(f"gsm8k sample {sample_id} has no '#### <number>' answer")
            out.append(Sample(sample_id, LABELS, {"question": row["question"], "gold": gold}))
        return out

    def request(self, sample: Sample, style: PromptStyle) -> GenerateRequest:
        return math_request(sample.fields["question"], self._exemplars, style, self._max_new_tokens)

    def score(self, sample: Sample, result: GenerateResult | ChoiceResult) -> Scored:
        return score_number(sample.fields["gold"], result)
