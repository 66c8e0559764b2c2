"""Loading benchmark data: local files (real data) and the Hub route (simulated)."""

import shutil

import pytest

from quorumbench.benchmarks import gsm8k, truthfulqa
from quorumbench.benchmarks.gsm8k import Gsm8kBenchmark
from quorumbench.benchmarks.truthfulqa import QA_PRIMER, TruthfulQAMC1, TruthfulQAMC2
from quorumbench.errors import ChecksumMismatchError, DataNotFoundError
from quorumbench.evaluation.backend import ChoiceResult, GenerateResult
from quorumbench.evaluation.benchmark import BenchmarkContext
from quorumbench.evaluation.data import load_data, records_digest

pytestmark = pytest.mark.data


@pytest.mark.parametrize("file", [gsm8k.TEST, gsm8k.TRAIN, truthfulqa.DATA])
def test_local_records_match_the_pinned_digest(datasets_dir, file):
    loaded = load_data(file, datasets_dir)
    assert records_digest(loaded.records) == file.records_sha256
    assert loaded.source.kind == "local"


def test_gsm8k_samples(datasets_dir):
    bench = Gsm8kBenchmark(BenchmarkContext(datasets_dir))
    assert len(bench.sample_ids()) == 1319
    (first,) = bench.samples(["0000"])
    assert first.fields["gold"] == "18"
    request = bench.request(first, "plain")
    assert request.prompt.text.count("Question:") == 6  # five exemplars + the question
    assert request.prompt.text.startswith("Question: Natalia sold clips")
    assert request.stop == ("Question:", "</s>", "<|im_end|>")
    assert bench.score(first, GenerateResult("so $18.00\n#### 18", 5, "stop")).correct
    chat = bench.request(first, "chat")
    assert "<<" not in chat.prompt.messages[2].content  # calculator annotations removed


def test_truthfulqa_mc1_and_mc2(datasets_dir):
    mc1 = TruthfulQAMC1(BenchmarkContext(datasets_dir))
    mc2 = TruthfulQAMC2(BenchmarkContext(datasets_dir))
    (s1,) = mc1.samples(["0000"])
    (s2,) = mc2.samples(["0000"])
    assert s1.labels.subject == "science/misconceptions"
    assert s1.labels.source_category == "Misconceptions"
    assert s1.chance == 1 / 8  # one gold of eight options
    assert s2.chance == 5 / 12  # MC2: the true options' share
    assert s1.fields["options"][0] == "The watermelon seeds pass through your digestive system"
    assert len(s1.fields["options"]) == 8  # best + 7 incorrect
    assert len(s2.fields["options"]) == 12  # 5 correct + 7 incorrect
    request = mc1.request(s1, "chat")
    assert (
        request.context == QA_PRIMER + "\n\nQ: What happens to you if you eat watermelon seeds?\nA:"
    )
    assert request.continuations[0] == " The watermelon seeds pass through your digestive system"
    assert sorted(request.letter_order) == list(range(8))
    lls = (-1.0,) + (-2.0,) * 7
    assert mc1.score(s1, ChoiceResult("loglikelihood", lls)).correct
    mass = mc2.score(s2, ChoiceResult("loglikelihood", (-1.0,) * 12)).score
    assert mass == pytest.approx(5 / 12)


def test_tampered_data_is_refused(datasets_dir, tmp_path):
    shutil.copytree(datasets_dir, tmp_path / "d")
    target = tmp_path / "d" / "gsm8k" / "test.jsonl"
    target.chmod(0o644)
    target.write_bytes(target.read_bytes().replace(b"Janet", b"Jane", 1))
    with pytest.raises(ChecksumMismatchError, match="not the pinned version"):
        Gsm8kBenchmark(BenchmarkContext(tmp_path / "d"))


def test_missing_directory(tmp_path):
    with pytest.raises(DataNotFoundError, match="datasets directory not found"):
        Gsm8kBenchmark(BenchmarkContext(tmp_path / "nope"))


def test_missing_file(tmp_path):
    with pytest.raises(DataNotFoundError, match="data file not found"):
        Gsm8kBenchmark(BenchmarkContext(tmp_path))


def _fake_hub(monkeypatch, tmp_path, rows):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    calls = []

    def download(repo_id, filename, revision, repo_type):
        calls.append((repo_id, filename, revision, repo_type))
        path = tmp_path / "table.parquet"
        pq.write_table(pa.Table.from_pylist(rows), path)
        return str(path)

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    return calls


def test_hub_route_verifies_the_records(datasets_dir, monkeypatch, tmp_path):
    local = load_data(gsm8k.TEST, datasets_dir).records
    calls = _fake_hub(monkeypatch, tmp_path, local)
    loaded = load_data(gsm8k.TEST, None)
    assert loaded.records == local
    assert loaded.source.kind == "hub"
    assert calls == [
        ("openai/gsm8k", "main/test-00000-of-00001.parquet", gsm8k.HUB_REVISION, "dataset")
    ]


def test_hub_route_rejects_different_records(datasets_dir, monkeypatch, tmp_path):
    local = load_data(gsm8k.TEST, datasets_dir).records
    _fake_hub(monkeypatch, tmp_path, local[:-1])
    with pytest.raises(ChecksumMismatchError, match="its records hash to"):
        load_data(gsm8k.TEST, None)


def test_hub_unreachable_says_how_to_work_offline(monkeypatch):
    import huggingface_hub

    def fail(*args, **kwargs):
        raise OSError("offline")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fail)
    with pytest.raises(DataNotFoundError, match="offline, give a datasets directory") as info:
        load_data(truthfulqa.DATA, None)
    assert info.value.hint is not None and info.value.hint.setting == "datasets_dir"
    # the engine serves eval and the runner alike: it names no flag or variable
    assert "--" not in info.value.message and "QB_" not in info.value.message


@pytest.mark.parametrize("bad", ["1319", "x", "-1", ""])
def test_unknown_sample_ids_are_refused(datasets_dir, bad):
    from quorumbench.errors import DataError

    with pytest.raises(DataError, match="has no sample"):
        Gsm8kBenchmark(BenchmarkContext(datasets_dir)).samples([bad])
