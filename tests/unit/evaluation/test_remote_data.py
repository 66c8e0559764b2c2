"""Data by URL: the SSRF guard on every hop, the size limit, the hash, the cache."""

import hashlib
import json

import httpx
import pytest

from quorumbench.errors import (
    ChecksumMismatchError,
    DataTooLargeError,
    DataUnreachableError,
    DataUrlNotAllowedError,
)
from quorumbench.evaluation.remote_data import FetchPolicy, fetch_verified
from quorumbench.evaluation.spec import download_url, parse_spec
from quorumbench.protocol import Task
from quorumbench.runner.evaluator import TaskEvaluator

DATA = b'{"q": "1+1", "a": "2"}\n{"q": "2+2", "a": "4"}\n'
SHA = hashlib.sha256(DATA).hexdigest()
ADDRESSES = {
    "data.example": ["93.184.216.34"],
    "hub.example": ["2606:4700::6810:85e5"],
    "inside.example": ["10.0.0.5"],
    "rebind.example": ["93.184.216.35", "127.0.0.1"],
    "huggingface.co": ["18.164.174.17"],
}


def resolve(host, port):
    return ADDRESSES[host]


def serve(routes):
    seen = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        found = routes.get(str(request.url))
        if found is None:
            return httpx.Response(404)
        if isinstance(found, str):
            return httpx.Response(302, headers={"Location": found})
        return httpx.Response(200, content=found)

    return httpx.MockTransport(handle), seen


def policy(transport, **changes):
    return FetchPolicy(transport=transport, resolve=resolve, **changes)


def test_public_data_is_fetched_checked_and_cached(tmp_path):
    transport, seen = serve({"https://data.example/d.jsonl": DATA})
    assert fetch_verified("https://data.example/d.jsonl", SHA, policy(transport), tmp_path) == DATA
    assert (tmp_path / f"{SHA}.data").read_bytes() == DATA
    # the second read is the cache's; a damaged cache file is fetched again
    assert fetch_verified("https://data.example/d.jsonl", SHA, policy(transport), tmp_path) == DATA
    assert len(seen) == 1
    (tmp_path / f"{SHA}.data").write_bytes(b"tampered")
    assert fetch_verified("https://data.example/d.jsonl", SHA, policy(transport), tmp_path) == DATA
    assert len(seen) == 2


@pytest.mark.parametrize(
    "url",
    [
        "https://inside.example/d.jsonl",
        "https://rebind.example/d.jsonl",  # any private answer refuses the host
        "https://127.0.0.1/d.jsonl",
        "https://[::ffff:10.0.0.1]/d.jsonl",
        "https://169.254.169.254/d.jsonl",
        "http://data.example/d.jsonl",  # plain http
    ],
)
def test_private_hosts_and_plain_http_are_refused_before_any_request(url):
    transport, seen = serve({})
    with pytest.raises(DataUrlNotAllowedError):
        fetch_verified(url, SHA, policy(transport))
    assert seen == []


def test_a_redirect_to_a_private_host_is_refused():
    transport, seen = serve({"https://data.example/d.jsonl": "https://inside.example/secret"})
    with pytest.raises(DataUrlNotAllowedError, match="10.0.0.5"):
        fetch_verified("https://data.example/d.jsonl", SHA, policy(transport))
    assert seen == ["https://data.example/d.jsonl"]


def test_a_public_redirect_is_followed_and_too_many_are_refused():
    transport, _ = serve(
        {
            "https://data.example/d.jsonl": "https://hub.example/d.jsonl",
            "https://hub.example/d.jsonl": DATA,
        }
    )
    assert fetch_verified("https://data.example/d.jsonl", SHA, policy(transport)) == DATA
    loop, _ = serve({"https://data.example/a.jsonl": "https://data.example/a.jsonl"})
    with pytest.raises(DataUnreachableError, match="redirects"):
        fetch_verified("https://data.example/a.jsonl", SHA, policy(loop))


def test_size_limit_hash_and_status_are_checked():
    transport, _ = serve({"https://data.example/d.jsonl": DATA})
    with pytest.raises(DataTooLargeError, match="limit of 10 bytes"):
        fetch_verified("https://data.example/d.jsonl", SHA, policy(transport, max_bytes=10))
    with pytest.raises(ChecksumMismatchError, match=SHA):
        fetch_verified("https://data.example/d.jsonl", "0" * 64, policy(transport))
    with pytest.raises(DataUnreachableError, match="HTTP 404"):
        fetch_verified("https://data.example/other.jsonl", SHA, policy(transport))


def test_a_hub_file_is_fetched_at_its_pinned_commit():
    commit = "a" * 40
    url = f"hf://datasets/org/sums@{commit}/data/test.jsonl"
    assert download_url(url) == (
        f"https://huggingface.co/datasets/org/sums/resolve/{commit}/data/test.jsonl"
    )
    transport, _ = serve({download_url(url): DATA})
    assert fetch_verified(url, SHA, policy(transport)) == DATA


def _spec(url):
    return {
        "name": "api-sums",
        "version": 3,
        "pillar": "math",
        "format": "exact-match",
        "data": {"url": url, "sha256": SHA},
        "prompt": {"version": 1, "template": "{q}"},
        "answer_field": "a",
        "extract": {"kind": "number"},
        "compare": "number",
        "labels": {"skill": "reasoning", "subject": "science/math"},
    }


def _task(spec, sha=SHA):
    bench = parse_spec(spec, "t")
    return Task.model_validate(
        {
            "id": 1,
            "epoch": 1,
            "round": 1,
            "model": {"id": 1, "ref": "mock:echo"},
            "benchmark": {
                "name": bench.name,
                "version": bench.version,
                "prompt_version": 1,
                "dataset_sha256": sha,
                "config": {"max_new_tokens": 64},
                "spec_json": json.dumps(spec),
            },
            "n_samples": 2,
            "seed_commitment": "0" * 64,
            "sample_ids": ["0001", "0000"],
        }
    )


def test_a_runner_evaluates_a_task_of_a_benchmark_created_through_the_api(tmp_path):
    transport, seen = serve({"https://data.example/d.jsonl": DATA})
    evaluator = TaskEvaluator(data_cache_dir=tmp_path, fetch_policy=policy(transport))
    prepared = evaluator.prepare(_task(_spec("https://data.example/d.jsonl")))
    assert [s.fields["q"] for s in prepared.samples] == ["2+2", "1+1"]
    assert prepared.benchmark.pillar == "math"  # type: ignore[attr-defined]
    assert (tmp_path / f"{SHA}.data").exists() and len(seen) == 1
    # a spec whose data is not the task's is refused
    with pytest.raises(Exception, match="other data"):
        evaluator.prepare(_task(_spec("https://data.example/d.jsonl"), sha="1" * 64))


def test_a_runner_refuses_private_data_urls_by_default(tmp_path):
    transport, seen = serve({})
    evaluator = TaskEvaluator(data_cache_dir=tmp_path, fetch_policy=policy(transport))
    with pytest.raises(DataUrlNotAllowedError):
        evaluator.prepare(_task(_spec("https://inside.example/d.jsonl")))
    assert seen == []  # nothing was requested
