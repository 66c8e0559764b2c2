"""The parts of asks that need no server: endpoint rows, pacing, the plan with the
request's endpoints, and the CLI's option parsing."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from quorumbench.cli.ask_cmd import _compact, endpoint_bodies, read_plan
from quorumbench.core.plans import parse_plan
from quorumbench.errors import ConfigError, InvalidPlanError
from quorumbench.services.asks import _keyed, _with_endpoints
from quorumbench.services.live import (
    AskStatus,
    EndpointRequest,
    EndpointRow,
    LiveJob,
    Pace,
    _PacedTransport,
    _scrub,
)

KEY = "sk-unit-SECRET-123456"


def test_an_endpoint_row_survives_its_json():
    row = EndpointRow(
        "https://e.example/v1",
        "m",
        AskStatus.SUCCESS,
        3,
        2 / 3,
        0.1,
        0.99,
        {"a": 3},
        None,
        {"c": 1},
    )
    assert EndpointRow.from_json(row.as_json()) == row
    assert row.as_json()["note"] == "one evaluation, not cross-checked"


def test_a_job_and_a_request_never_show_their_key():
    request = EndpointRequest("https://e.example/v1", "m", SecretStr(KEY))
    job = LiveJob("ask1", parse_plan({}), (request,), 10)
    assert KEY not in repr(job) and KEY not in repr(request) and KEY not in str(request)


def test_scrub_masks_the_keys_and_bearer_tokens():
    text = f"failed with {KEY} and Authorization: Bearer abc.def\nnext line"
    scrubbed = _scrub(text, [KEY])
    assert KEY not in scrubbed and "abc.def" not in scrubbed and "\n" not in scrubbed


def test_pace_spaces_requests_and_zero_means_no_limit():
    pace = Pace(4.0)
    waits = [pace.reserve() for _ in range(4)]
    assert waits[0] == pytest.approx(0, abs=0.01)
    assert waits[3] == pytest.approx(0.75, abs=0.05)
    assert Pace(0).reserve() == 0.0


def test_the_paced_transport_waits_and_closes_each_inner_transport():
    made, closed = [], []

    class Inner(httpx.AsyncBaseTransport):
        """Answers as a network transport does: a stream not read yet."""

        async def handle_async_request(self, request):
            body = httpx.ByteStream(b'{"ok": true}')
            return httpx.Response(200, headers={"content-type": "application/json"}, stream=body)

        async def aclose(self) -> None:
            closed.append(1)

    def make():
        made.append(1)
        return Inner()

    transport = _PacedTransport(make, Pace(10.0))

    async def three() -> float:
        started = time.monotonic()
        async with httpx.AsyncClient(transport=transport) as client:
            for _ in range(3):
                answer = await client.get("http://e.example/")
                assert answer.json() == {"ok": True}
        return time.monotonic() - started

    assert asyncio.run(three()) >= 0.18  # 10 per second: the 3rd waits 0.2 s
    assert len(made) == len(closed) == 3  # one per request, each closed


def test_the_request_endpoints_join_the_plans_with_their_keys():
    plan = parse_plan({"endpoints": [{"url": "https://a.example/v1", "model": "x"}]})
    given = [
        EndpointRequest("https://b.example/v1", "y", SecretStr(KEY)),
        EndpointRequest("https://a.example/v1", "x", SecretStr("other")),
    ]
    full = _with_endpoints(plan, given)
    assert [(e.url, e.model) for e in full.endpoints] == [
        ("https://a.example/v1", "x"),
        ("https://b.example/v1", "y"),
    ]
    keyed = _keyed(full, given)
    assert [k.api_key.get_secret_value() for k in keyed if k.api_key] == ["other", KEY]
    assert full.public().endpoints == () and KEY not in full.canonical().decode()


@pytest.mark.parametrize(
    "url",
    ["https://a.example/v1?api_key=1", "https://a.example/v1#frag", "ftp://a.example/v1"],
)
def test_endpoint_urls_with_a_query_fragment_or_odd_scheme_are_refused(url):
    with pytest.raises(InvalidPlanError):
        _with_endpoints(parse_plan({}), [EndpointRequest(url, "m")])


def test_endpoint_options_and_their_key_variables(monkeypatch):
    monkeypatch.setenv("K1", "one")
    monkeypatch.setenv("K2", "two")
    two = ["http://a/v1#m", "http://b/v1#my#model"]
    assert endpoint_bodies(two, ["K1"]) == [
        {"url": "http://a/v1", "model": "m", "api_key": "one"},
        {"url": "http://b/v1#my", "model": "model", "api_key": "one"},
    ]
    assert [b["api_key"] for b in endpoint_bodies(two, ["K1", "K2"])] == ["one", "two"]
    assert endpoint_bodies(["http://a/v1#m"], []) == [{"url": "http://a/v1", "model": "m"}]
    with pytest.raises(ConfigError, match="URL#MODEL"):
        endpoint_bodies(["http://a/v1"], [])
    with pytest.raises(ConfigError, match="one per endpoint"):
        endpoint_bodies(["http://a/v1#m"] * 3, ["K1", "K2"])
    monkeypatch.delenv("K2")
    with pytest.raises(ConfigError, match="K2"):
        endpoint_bodies(two, ["K1", "K2"])


def test_plan_files_are_json_or_yaml(tmp_path: Path):
    (tmp_path / "p.json").write_text('{"budget": 5}')
    (tmp_path / "p.yaml").write_text("budget: 5\nbenchmarks: [arith]\n")
    (tmp_path / "list.yaml").write_text("- 1\n")
    assert read_plan(tmp_path / "p.json") == {"budget": 5}
    assert read_plan(tmp_path / "p.yaml")["benchmarks"] == ["arith"]
    with pytest.raises(ConfigError, match="not an object"):
        read_plan(tmp_path / "list.yaml")
    with pytest.raises(ConfigError, match="cannot read"):
        read_plan(tmp_path / "missing.yaml")


def test_the_printed_plan_leaves_out_what_means_any():
    printed = _compact(parse_plan({"benchmarks": ["arith"], "budget": 7}).as_json())
    assert printed == {
        "version": 1,
        "benchmarks": ["arith"],
        "models": {"select": "ranked"},
        "budget": 7,
        "versions": {"taxonomy": 1},
    }
