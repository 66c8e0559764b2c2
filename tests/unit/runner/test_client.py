"""The runner's HTTP client against scripted servers (httpx.MockTransport)."""

from __future__ import annotations

import copy
import json
import time
import traceback
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from quorumbench.errors import (
    AuthenticationError,
    ConfigError,
    ConflictError,
    InvalidSubmissionError,
    LeaseExpiredError,
    NotFoundError,
    PermissionDeniedError,
    QuorumError,
    RateLimitedError,
    ServerUnavailableError,
    UnsupportedProtocolError,
)
from quorumbench.protocol import PROTOCOL_VERSION, ResultPayload, Task
from quorumbench.runner.client import MIN_ATTEMPT_S, Lease, ServerClient
from quorumbench.runner.keys import new_key

TOKEN = "qb_SECRET-token-0123456789abcdefghijklmnopqrstuv"
BASE = "http://server.test"
TASK = {
    "id": 7,
    "epoch": 1,
    "round": 1,
    "model": {"id": 1, "ref": "hf:o/m@" + "0" * 40, "revision": "0" * 40},
    "benchmark": {
        "name": "arith",
        "version": 1,
        "prompt_version": 1,
        "dataset_sha256": "d" * 64,
        "config": {"shots": 0},
    },
    "n_samples": 2,
    "seed_commitment": "c" * 64,
    "sample_ids": ["a", "b"],
}
KEY = new_key(Path("never-written.key"))


def a_payload(**fields) -> ResultPayload:
    """A result for TASK, as a runner builds it."""
    return ResultPayload(
        **{
            "task_id": 7,
            "score": 0.5,
            "n": 2,
            "sample_ids": ["a", "b"],
            "sample_scores": [1.0, 0.0],
            "sample_output_hashes": ["0" * 64, "1" * 64],
            "outputs_sha256": "a" * 64,
            "runtime_s": 0.1,
            "model_revision": None,
            **fields,
        }
    )


def a_receipt(**fields) -> dict:
    return {"result_id": 1, "task_id": 7, "task_status": "PENDING", "round": 1, **fields}


def problem(status: int, code: str, detail: str) -> httpx.Response:
    body = {"type": f"/problems/{code}", "title": code, "status": status, "detail": detail}
    return httpx.Response(
        status, content=json.dumps(body), headers={"content-type": "application/problem+json"}
    )


def lease_body(expires_at: datetime) -> dict:
    """A lease grant's body; its task is a copy of TASK, which a test may change."""
    task = copy.deepcopy(TASK)
    return {"lease_id": 3, "attempt": 1, "expires_at": expires_at.isoformat(), "task": task}


def make_client(
    handler, *, attempts: int = 4, waits: list[float] | None = None, reached: bool = True
) -> ServerClient:
    """A client; ``reached`` (the default here): as if the server had answered it before."""
    recorded = waits if waits is not None else []
    return ServerClient(
        BASE,
        SecretStr(TOKEN),
        "box-1",
        max_attempts=attempts,
        transport=httpx.MockTransport(handler),
        sleep=recorded.append,
        reached=reached,
        key=KEY,
    )


def a_lease() -> Lease:
    return Lease(3, 1, datetime.now(UTC) + timedelta(seconds=60), Task.model_validate(TASK), 60.0)


def test_pull_sends_the_token_and_runner_and_parses_the_lease():
    seen: list[httpx.Request] = []
    expires = datetime.now(UTC) + timedelta(seconds=90)

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(201, json=lease_body(expires))

    lease = make_client(handler).pull()
    assert lease is not None
    assert (lease.lease_id, lease.attempt, lease.task_id) == (3, 1, 7)
    assert lease.expires_at == expires
    assert 80 < lease.ttl_s <= 90
    request = seen[0]
    assert request.method == "POST" and request.url.path == "/v0/leases"
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    body = json.loads(request.content)
    assert body["runner"] == "box-1"
    assert len(body["pull_key"]) == 32


def test_a_pull_that_got_no_answer_keeps_its_key_for_the_next_pull():
    keys: list[str] = []
    answers: list[object] = [httpx.ConnectError("reset")] * 2 + [httpx.Response(204)] * 2

    def handler(request: httpx.Request) -> httpx.Response:
        keys.append(json.loads(request.content)["pull_key"])
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        assert isinstance(answer, httpx.Response)
        return answer

    client = make_client(handler, attempts=2)
    with pytest.raises(ServerUnavailableError):
        client.pull()  # the server may have made a lease; its answer was lost
    assert client.pull() is None  # asked again under the same key
    assert client.pull() is None  # that pull was answered: a new key
    assert keys[0] == keys[1] == keys[2] != keys[3]


def test_a_retried_pull_resends_its_key_and_the_next_pull_sends_a_new_one():
    keys: list[str] = []
    answers = [httpx.ReadTimeout("lost"), httpx.Response(503), httpx.Response(204)]

    def handler(request: httpx.Request) -> httpx.Response:
        keys.append(json.loads(request.content)["pull_key"])
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    client = make_client(handler, waits=[])
    assert client.pull() is None
    assert len(keys) == 3 and len(set(keys)) == 1
    answers.append(httpx.Response(204))
    assert client.pull() is None
    assert keys[3] != keys[0]


def test_lease_time_is_measured_on_the_servers_clock():
    server_now = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)
    expires = server_now + timedelta(seconds=30)

    def handler(request: httpx.Request) -> httpx.Response:
        date = "Tue, 01 Jan 2030 12:00:00 GMT"
        return httpx.Response(201, json=lease_body(expires), headers={"date": date})

    lease = make_client(handler).pull()
    assert lease is not None and lease.ttl_s == pytest.approx(30)


def test_no_work_is_none():
    assert make_client(lambda r: httpx.Response(204)).pull() is None


@pytest.mark.parametrize(
    ("status", "code", "error"),
    [
        (401, "unauthenticated", AuthenticationError),
        (403, "forbidden", PermissionDeniedError),
        (404, "not-found", NotFoundError),
        (409, "lease-expired", LeaseExpiredError),
        (409, "conflict", ConflictError),
        (422, "invalid-submission", InvalidSubmissionError),
        (422, "invalid-request", InvalidSubmissionError),
        (409, "something-new", LeaseExpiredError),
    ],
)
def test_problem_documents_become_error_classes(status, code, error):
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return problem(status, code, f"the server says {code}")

    with pytest.raises(error) as caught:
        make_client(handler).heartbeat(a_lease())
    assert type(caught.value) is error
    assert caught.value.message == f"the server says {code}"
    assert len(calls) == 1, "4xx answers are not retried"


def test_a_409_conflict_is_not_mistaken_for_an_expired_lease():
    client = make_client(lambda r: problem(409, "conflict", "a different result"))
    with pytest.raises(ConflictError) as caught:
        client.submit(a_lease(), a_payload())
    assert not isinstance(caught.value, LeaseExpiredError)


def test_an_unknown_4xx_without_a_problem_body_still_raises_a_quorum_error():
    with pytest.raises(QuorumError, match="server answered 418"):
        make_client(lambda r: httpx.Response(418, text="teapot")).pull()


def test_503_then_success_is_retried_with_backoff():
    answers = [httpx.Response(503), httpx.Response(502), httpx.Response(204)]
    waits: list[float] = []
    client = make_client(lambda r: answers.pop(0), waits=waits)
    assert client.pull() is None
    assert len(waits) == 2
    assert waits[1] >= waits[0] > 0


def test_connection_errors_are_retried_then_succeed():
    failures = [httpx.ConnectError("refused"), httpx.ReadTimeout("slow")]

    def handler(request: httpx.Request) -> httpx.Response:
        if failures:
            raise failures.pop(0)
        return httpx.Response(200, json={"lease_id": 3, "expires_at": "2030-01-01T00:00:00+00:00"})

    lease = make_client(handler).heartbeat(a_lease())
    assert lease.expires_at == datetime(2030, 1, 1, tzinfo=UTC)


def test_retries_are_bounded():
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        raise httpx.ConnectError("refused")

    with pytest.raises(ServerUnavailableError, match="cannot reach http://server.test"):
        make_client(handler, attempts=3).pull()
    assert len(calls) == 3


def test_persistent_5xx_is_server_unavailable_and_429_is_rate_limited():
    with pytest.raises(ServerUnavailableError) as caught:
        make_client(lambda r: httpx.Response(500), attempts=2).pull()
    assert caught.value.status == 500
    with pytest.raises(RateLimitedError, match="slow down"):
        make_client(lambda r: problem(429, "rate-limited", "slow down"), attempts=2).pull()


def test_submit_retries_resend_identical_bytes():
    bodies: list[bytes] = []
    answers = [httpx.ReadTimeout("lost"), httpx.Response(503)]

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(request.content)
        if answers:
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer
        return httpx.Response(200, json=a_receipt(duplicate=True))

    payload = a_payload()
    answer = make_client(handler).submit(a_lease(), payload)
    assert answer.duplicate is True
    assert len(bodies) == 3
    assert bodies[0] == bodies[1] == bodies[2]
    body = json.loads(bodies[0])
    assert body["attempt"] == 1 and body["protocol_version"] == PROTOCOL_VERSION == "1.4"
    assert body["result"] == payload.model_dump(mode="json")
    assert body["signature"]["key_id"] == KEY.key_id


def test_submit_refuses_nan():
    with pytest.raises(ValueError):
        make_client(lambda r: httpx.Response(201)).submit(
            a_lease(), a_payload(sample_scores=[float("nan"), 0.0])
        )


def test_release_and_heartbeat_name_the_runner_and_attempt():
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.method == "DELETE":
            return httpx.Response(204)
        return httpx.Response(200, json={"lease_id": 3, "expires_at": "2030-01-01T00:00:00Z"})

    client = make_client(handler)
    client.heartbeat(a_lease())
    client.release(a_lease())
    beat, release = seen
    assert beat.url.path == "/v0/leases/3/heartbeat"
    assert beat.url.params["runner"] == "box-1"
    assert json.loads(beat.content) == {"attempt": 1}
    assert release.method == "DELETE" and release.url.path == "/v0/leases/3"
    assert dict(release.url.params) == {"attempt": "1", "runner": "box-1"}


def test_a_heartbeat_is_retried_until_its_lease_deadline_not_a_number_of_times():
    """A slow server (each answer later than the client waits) costs attempts, not the
    lease: the heartbeat goes on until the deadline it was given, and no attempt waits
    past it (the client's usual 30 s would outlive a 60 s lease's last third)."""
    waited: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        waited.append(request.extensions["timeout"]["read"])
        if len(waited) < 4:
            raise httpx.ReadTimeout("no answer yet", request=request)
        return httpx.Response(200, json={"lease_id": 3, "expires_at": "2030-01-01T00:00:00Z"})

    client = make_client(handler, attempts=1)  # as a plain request: one attempt only
    lease = client.heartbeat(a_lease(), within_s=20.0)
    assert lease.expires_at == datetime(2030, 1, 1, tzinfo=UTC)
    assert len(waited) == 4 and all(t <= 20.0 for t in waited)


def test_a_heartbeat_gives_up_at_its_deadline_and_says_for_how_long():
    waited: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        waited.append(request.extensions["timeout"]["read"])
        time.sleep(0.02)
        raise httpx.ReadTimeout("no answer", request=request)

    pauses: list[float] = []
    with pytest.raises(ServerUnavailableError, match=r"\(ReadTimeout\) for 0 s"):
        make_client(handler, attempts=1, waits=pauses).heartbeat(a_lease(), within_s=0.2)
    assert pauses and all(p <= 0.2 for p in pauses)  # no pause runs past the deadline
    # every attempt within the deadline, each waiting at most MIN_ATTEMPT_S near it
    assert 2 <= len(waited) <= 20 and all(t <= MIN_ATTEMPT_S for t in waited)


def test_leaderboard_returns_rows():
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.params["benchmark"] == "arith"
        return httpx.Response(200, json={"total": 1, "limit": 50, "offset": 0, "rows": [{"x": 1}]})

    assert make_client(handler).leaderboard("arith") == [{"x": 1}]


def test_the_token_never_shows_in_reprs_or_errors():
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"refused {request.headers['authorization']}")

    client = make_client(handler, attempts=2)
    assert TOKEN not in repr(client)
    with pytest.raises(ServerUnavailableError) as caught:
        client.pull()
    rendered = "".join(traceback.format_exception(caught.value))
    assert TOKEN not in rendered
    assert TOKEN not in str(caught.value)

    client = make_client(lambda r: problem(401, "unauthenticated", "unknown token"))
    with pytest.raises(AuthenticationError) as auth:
        client.pull()
    assert TOKEN not in "".join(traceback.format_exception(auth.value))


def test_retry_warnings_do_not_log_the_token(caplog):
    answers = [httpx.Response(503), httpx.Response(204)]
    with caplog.at_level("DEBUG"):
        make_client(lambda r: answers.pop(0)).pull()
    assert "retrying" in caplog.text
    assert TOKEN not in caplog.text


def test_the_first_contact_is_one_attempt_that_names_the_url_and_the_cause():
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        raise httpx.ConnectError(f"[Errno 111] Connection refused {TOKEN}")

    waits: list[float] = []
    client = make_client(handler, attempts=5, waits=waits, reached=False)
    with pytest.raises(ServerUnavailableError) as caught:
        client.me()
    assert len(calls) == 1 and waits == [], "no retries, no backoff"
    message = caught.value.message
    assert message.startswith("cannot reach http://server.test (ConnectError: [Errno 111]")
    assert TOKEN not in message and "***" in message
    assert not client.reached

    answers = [httpx.Response(503)]
    client = make_client(lambda r: answers.pop(0), reached=False)
    with pytest.raises(ServerUnavailableError, match="answered 503 to GET /v0/me$"):
        client.me()


def test_once_the_server_answered_later_outages_are_retried():
    answers: list[object] = [
        httpx.Response(200, json={"account_id": 1, "name": "a", "is_admin": False, "scopes": []}),
        httpx.ConnectError("restarting"),
        httpx.Response(503),
        httpx.Response(204),
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        assert isinstance(answer, httpx.Response)
        return answer

    waits: list[float] = []
    client = make_client(handler, waits=waits, reached=False)
    client.me()
    assert client.reached
    assert client.pull() is None
    assert len(waits) == 2


def test_a_4xx_counts_as_reaching_the_server():
    client = make_client(lambda r: problem(401, "unauthenticated", "unknown token"), reached=False)
    with pytest.raises(AuthenticationError):
        client.me()
    assert client.reached


def test_me_and_runner_keys():
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/v0/me":
            body = {"account_id": 4, "name": "alice", "is_admin": False, "scopes": ["task:pull"]}
            return httpx.Response(200, json=body)
        return httpx.Response(200, json=[{"key_id": "ab", "revoked_at": None}])

    client = make_client(handler)
    me = client.me()
    assert (me.account_id, me.account, me.is_admin) == (4, "alice", False)
    assert me.grants("task:pull") and not me.grants("task:submit")
    assert client.runner_keys() == [{"key_id": "ab", "revoked_at": None}]
    assert seen[1].url.path == "/v0/runners/box-1/keys"


def test_a_refused_signature_is_a_signature_error():
    from quorumbench.errors import SignatureError

    client = make_client(lambda r: problem(422, "invalid-signature", "key … was revoked"))
    with pytest.raises(SignatureError):
        client.submit(a_lease(), a_payload())


def test_a_submission_carries_predictions_the_server_reads_back_to_the_same_digests():
    from quorumbench.core.canonical import predictions_digest
    from quorumbench.core.signing import result_digest
    from quorumbench.protocol import Submission
    from quorumbench.runner.client import encode_submission
    from quorumbench.services.results import _prediction_problems

    predictions = ["café", None, "-3", "1e5"]
    payload = a_payload(
        score=0.25,
        n=4,
        sample_ids=["a", "b", "c", "d"],
        sample_scores=[1.0, 0.0, 0.0, 0.0],
        sample_output_hashes=["0" * 64] * 4,
        sample_predictions=predictions,
        predictions_sha256=predictions_digest(predictions),
        runtime_s=1.0,
    )
    lease = a_lease()
    signature = KEY.sign_result(lease.task, lease.lease_id, lease.attempt, payload)
    parsed = Submission.model_validate_json(encode_submission(lease, payload, signature)).result
    assert parsed.sample_predictions == predictions
    assert result_digest(parsed) == result_digest(payload)
    assert _prediction_problems(parsed) == []


def test_a_protocol_the_server_refuses_is_one_error_never_retried():
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(json.loads(request.content))
        body = {
            "type": "/problems/unsupported-protocol",
            "title": "Unsupported protocol",
            "status": 426,
            "detail": "this server accepts runner protocol 2.0; this runner speaks 1.1: upgrade",
            "protocol_version": PROTOCOL_VERSION,
            "accepted_versions": "2.0",
        }
        return httpx.Response(426, json=body, headers={"content-type": "application/problem+json"})

    with pytest.raises(UnsupportedProtocolError) as caught:
        make_client(handler).pull()
    assert (caught.value.version, caught.value.accepted) == (PROTOCOL_VERSION, "2.0")
    assert caught.value.message.startswith("this server accepts runner protocol 2.0")
    assert len(calls) == 1 and calls[0]["protocol_version"] == PROTOCOL_VERSION


def test_an_answer_that_is_not_the_protocols_names_the_endpoint():
    grant = lease_body(datetime.now(UTC) + timedelta(seconds=60))
    del grant["task"]["seed_commitment"]
    with pytest.raises(ConfigError) as caught:
        make_client(lambda r: httpx.Response(201, json=grant)).pull()
    message = caught.value.message
    assert f"answer to POST /v0/leases is not protocol {PROTOCOL_VERSION}'s LeaseGrant" in message
    assert "task.seed_commitment: Field required" in message
