"""Benchmarks created through the API: creation and scheduling (SQLite and PostgreSQL),
refusals that store nothing, SSRF refusals, and role escalation (``benchmark:create``)."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from quorumbench import protocol
from quorumbench.api.app import create_app
from quorumbench.backends.mock import MockBackend
from quorumbench.db.models import AccountGrant, Benchmark, Task
from quorumbench.errors import ConfigError
from quorumbench.evaluation.engine import evaluate
from quorumbench.runner.evaluator import TaskEvaluator
from quorumbench.services.accounts import create_account, issue_token
from quorumbench.services.benchmarks import data_cache_dir, ensure_benchmarks, loaded
from quorumbench.services.scheduler import tick
from quorumbench.services.wiring import build_context

from .conftest import _settings, fake_metadata, hub_ref
from .test_api import assert_problem, auth, pull, register, submit

ROWS = [
    {
        "id": f"q{i}",
        "question": f"{i} + {i} = ?",
        "choices": [str(2 * i), str(2 * i + 1)],
        "answer": 0,
        "topic": "math",
    }
    for i in range(6)
]
DATA = "".join(json.dumps(row) + "\n" for row in ROWS).encode()
SHA = hashlib.sha256(DATA).hexdigest()
EPOCH_S = 3600


class _Files(http.server.BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}

    def do_GET(self) -> None:
        if self.path.startswith("/redirect/"):
            self.send_response(302)
            self.send_header("Location", "/" + self.path.removeprefix("/redirect/"))
            self.end_headers()
            return
        body = self.files.get(self.path)
        if body is None:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def files() -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 serving the data (the SSRF guard refuses it
    unless the server allows private URLs)."""
    _Files.files = {"/data.jsonl": DATA, "/big.jsonl": DATA * 50}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Files)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def spec(url: str, **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "tiny-sums",
        "version": 1,
        "description": "Doubling, six items.",
        "pillar": "math",
        "format": "multiple-choice",
        "data": {"url": url, "sha256": SHA, "id_field": "id"},
        "prompt": {"version": 1, "template": "Q: {question}\nA:"},
        "choices_field": "choices",
        "answer_field": "answer",
        "labels": {"skill": "reasoning", "subject": "science/{topic}"},
    }
    body.update(changes)
    return body


@pytest.fixture
def world(make_ctx, db_url, clock):
    """A server (private data URLs allowed: the data server is on 127.0.0.1) with an
    admin, a model owner and runners; ``maker`` holds benchmark:create by an admin."""

    def make(**overrides: Any):
        settings = {"allow_private_data_urls": True, "epoch_seconds": EPOCH_S, **overrides}
        ctx = make_ctx(db_url, **settings)
        ctx.inspector = lambda ref: fake_metadata(ref)
        create_account(ctx, "admin", is_admin=True)
        tokens = {"admin": issue_token(ctx, "admin", scopes=("admin",)).token}
        for name in ("owner", "maker", "r1", "r2", "r3"):
            create_account(ctx, name)
            tokens[name] = issue_token(ctx, name).token
        client = TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False))
        return ctx, client, tokens

    return make


def _grant(client: TestClient, tokens: dict[str, str], who: str, action: str = "grant") -> Any:
    answer = client.post(
        f"/v0/accounts/{who}/grants",
        json={"action": action, "reason": "trusted maintainer"},
        headers=auth(tokens["admin"]),
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


def _creator_token(client: TestClient, tokens: dict[str, str], who: str) -> str:
    answer = client.post(
        "/v0/tokens",
        json={"scopes": ["benchmark:create", "model:register"], "name": "benchmarks"},
        headers=auth(tokens[who]),
    )
    assert answer.status_code == 201, answer.text
    return str(answer.json()["token"])


def _count(ctx, model: Any = Benchmark) -> int:
    with ctx.db.read() as session:
        return int(session.scalar(select(func.count()).select_from(model)) or 0)


def _tasks_of(ctx, name: str) -> list[Task]:
    with ctx.db.read() as session:
        return list(session.scalars(select(Task).join(Benchmark).where(Benchmark.name == name)))


def test_a_benchmark_is_created_scheduled_from_the_next_epoch_and_survives_restarts(
    world, files, clock, db_url, tmp_path
):
    ctx, client, tokens = world()
    with client:
        assert register(client, tokens, hub_ref(1)).status_code == 201
        tick(ctx)
        _grant(client, tokens, "maker")
        token = _creator_token(client, tokens, "maker")
        made = client.post("/v0/benchmarks", json=spec(f"{files}/data.jsonl"), headers=auth(token))
        assert made.status_code == 201, made.text
        body = made.json()
        assert body["origin"] == "api" and body["owner"] == "maker" and body["pillar"] == "math"
        with ctx.db.read() as session:
            made_row = session.scalars(select(Benchmark).where(Benchmark.name == "tiny-sums"))
            assert made_row.one().pillar == "math"  # counts in the aggregate at once
        assert body["dataset_sha256"] == SHA and body["source_url"] == f"{files}/data.jsonl"
        shown = client.get("/v0/benchmarks/tiny-sums").json()
        assert shown["spec"]["labels"]["subject"] == "science/{topic}"
        assert shown["first_epoch"] == body["first_epoch"]
        assert (data_cache_dir(ctx.settings) / f"{SHA}.data").read_bytes() == DATA
        # not in this epoch: from the next one on
        tick(ctx)
        assert _tasks_of(ctx, "tiny-sums") == []
        clock.advance(EPOCH_S)
        tick(ctx)
        (task,) = _tasks_of(ctx, "tiny-sums")
        assert task.epoch_id == body["first_epoch"] and task.n_samples == 4
        # a runner gets the spec with the task, and fetches the data by its URL
        leases = [pull(client, tokens, "r1").json() for _ in range(3)]
        (granted,) = [
            lease for lease in leases if lease["task"]["benchmark"]["name"] == "tiny-sums"
        ]
        sent = granted["task"]["benchmark"]
        assert json.loads(sent["spec_json"])["data"] == {
            "url": f"{files}/data.jsonl",
            "sha256": SHA,
            "id_field": "id",
            "path": None,
        }
        assert client.get("/v0/benchmarks/arith").json()["spec"] is None
        # a runner (its own cache) fetches the data by the URL, checks it and evaluates
        evaluator = TaskEvaluator(
            allow_private_data_urls=True, data_cache_dir=tmp_path / "runner-cache"
        )
        prepared = evaluator.prepare(protocol.Task.model_validate(granted["task"]))
        assert [s.fields["id"] for s in prepared.samples] == granted["task"]["sample_ids"]
        assert all(s.labels.subject == "science/math" for s in prepared.samples)
        run = evaluate(
            prepared.benchmark,
            MockBackend(score=lambda request: [0.0] + [-9.0] * (len(request.continuations) - 1)),
            prepared.config,
            samples=prepared.samples,
        )
        assert run.score == 1.0
        assert (tmp_path / "runner-cache" / f"{SHA}.data").read_bytes() == DATA
    # a restart registers the settings' benchmarks and leaves this one active; its data
    # is fetched again when the cache lost it
    (data_cache_dir(ctx.settings) / f"{SHA}.data").unlink()
    again = build_context(
        _settings(db_url, tmp_path, allow_private_data_urls=True, epoch_seconds=EPOCH_S)
    )
    try:
        ensure_benchmarks(again, ["arith"])
        with again.db.read() as session:
            row = session.scalars(select(Benchmark).where(Benchmark.name == "tiny-sums")).one()
            assert row.active and row.retired_at is None
            # its pillar counts in the aggregate, and it is loaded at startup so that its
            # tasks' chance levels are known when they are finalized
            assert row.pillar == "math"
        assert "tiny-sums" in again.loaded_benchmarks
        assert loaded(again, "tiny-sums").sample_ids() == [f"q{i}" for i in range(6)]
        assert (data_cache_dir(again.settings) / f"{SHA}.data").exists()
    finally:
        again.close()


def test_a_restart_without_the_data_starts_and_keeps_the_benchmarks_pillar(
    world, files, db_url, tmp_path
):
    ctx, client, tokens = world()
    with client:
        _grant(client, tokens, "maker")
        token = _creator_token(client, tokens, "maker")
        made = client.post("/v0/benchmarks", json=spec(f"{files}/data.jsonl"), headers=auth(token))
        assert made.status_code == 201, made.text
    # the cache is gone and the URL is refused now (private addresses not allowed):
    # the server still starts, the benchmark keeps its spec's pillar, the gap is logged
    (data_cache_dir(ctx.settings) / f"{SHA}.data").unlink()
    again = build_context(_settings(db_url, tmp_path, epoch_seconds=EPOCH_S))
    try:
        ensure_benchmarks(again, ["arith"])
        with again.db.read() as session:
            row = session.scalars(select(Benchmark).where(Benchmark.name == "tiny-sums")).one()
            assert row.active and row.pillar == "math"
        assert "tiny-sums" not in again.loaded_benchmarks
    finally:
        again.close()


def test_owner_or_admin_retires_and_others_cannot(world, files):
    ctx, client, tokens = world()
    with client:
        _grant(client, tokens, "maker")
        _grant(client, tokens, "r1")
        maker, other = _creator_token(client, tokens, "maker"), _creator_token(client, tokens, "r1")
        assert (
            client.post(
                "/v0/benchmarks", json=spec(f"{files}/data.jsonl"), headers=auth(maker)
            ).status_code
            == 201
        )
        assert_problem(
            client.post("/v0/benchmarks/tiny-sums/retire", headers=auth(other)), 404, "not-found"
        )
        assert_problem(  # another account's name
            client.post(
                "/v0/benchmarks", json=spec(f"{files}/data.jsonl", version=2), headers=auth(other)
            ),
            409,
            "duplicate-benchmark",
            "another account",
        )
        assert_problem(  # the server's own benchmark
            client.post("/v0/benchmarks/arith/retire", headers=auth(tokens["admin"])),
            409,
            "conflict",
        )
        retired = client.post("/v0/benchmarks/tiny-sums/retire", headers=auth(maker))
        assert retired.status_code == 200 and retired.json()["active"] is False
        assert retired.json()["retired_at"] is not None
    ensure_benchmarks(ctx, ["arith"])  # a restart does not bring it back
    assert client.get("/v0/benchmarks/tiny-sums").json()["active"] is False


def test_a_new_version_replaces_the_old_in_the_schedule(world, files):
    ctx, client, tokens = world()
    with client:
        _grant(client, tokens, "maker")
        token = _creator_token(client, tokens, "maker")
        for version in (1, 2):
            made = client.post(
                "/v0/benchmarks",
                json=spec(f"{files}/data.jsonl", version=version),
                headers=auth(token),
            )
            assert made.status_code == 201, made.text
        assert_problem(
            client.post(
                "/v0/benchmarks", json=spec(f"{files}/data.jsonl", version=1), headers=auth(token)
            ),
            409,
            "duplicate-benchmark",
        )
        with ctx.db.read() as session:
            rows = session.scalars(select(Benchmark).where(Benchmark.name == "tiny-sums"))
            assert {(r.version, r.active) for r in rows} == {(1, False), (2, True)}
        assert loaded(ctx, "tiny-sums", 2).version == 2


BAD = [
    (
        "code",
        lambda u: spec(f"{u}/data.jsonl", scorer="!function utils.score"),
        422,
        "invalid-spec",
        "scorer",
    ),
    (
        "template code",
        lambda u: spec(
            f"{u}/data.jsonl", prompt={"version": 1, "template": "{question.__class__}"}
        ),
        422,
        "invalid-spec",
        "not a plain field name",
    ),
    (
        "unknown pillar",
        lambda u: spec(f"{u}/data.jsonl", pillar="vibes"),
        422,
        "invalid-spec",
        "pillar 'vibes'",
    ),
    (
        "no pillar",
        lambda u: spec(f"{u}/data.jsonl", pillar=None),
        422,
        "invalid-spec",
        "names its pillar",
    ),
    (
        "unknown label",
        lambda u: spec(f"{u}/data.jsonl", labels={"skill": "geography", "subject": "science"}),
        422,
        "invalid-spec",
        "skill 'geography'",
    ),
    (
        "a rendered label",
        lambda u: spec(f"{u}/data.jsonl", labels={"skill": "reasoning", "subject": "{topic}"}),
        422,
        "invalid-labels",
        "row 1",
    ),
    (
        "local path",
        lambda u: spec(f"{u}/data.jsonl", data={"path": "data.jsonl", "sha256": SHA}),
        422,
        "local-data-path",
        "https:// URL",
    ),
    (
        "hash mismatch",
        lambda u: spec(f"{u}/data.jsonl", data={"url": f"{u}/data.jsonl", "sha256": "0" * 64}),
        422,
        "checksum-mismatch",
        SHA,
    ),
    ("unreachable", lambda u: spec(f"{u}/missing.jsonl"), 422, "data-unreachable", "HTTP 404"),
    ("too large", lambda u: spec(f"{u}/big.jsonl"), 422, "data-too-large", "limit"),
    ("no server", lambda u: spec("http://127.0.0.1:9/d.jsonl"), 422, "data-unreachable", ""),
    (
        "built-in name",
        lambda u: spec(f"{u}/data.jsonl", name="arith"),
        409,
        "duplicate-benchmark",
        "server's own",
    ),
]


@pytest.mark.parametrize(
    ("make_spec", "status", "code", "text"), [pytest.param(*case[1:], id=case[0]) for case in BAD]
)
def test_bad_input_is_a_clear_problem_and_stores_nothing(
    world, files, make_spec, status, code, text
):
    ctx, client, tokens = world(benchmark_data_max_bytes=len(DATA) * 2)
    with client:
        _grant(client, tokens, "maker")
        token = _creator_token(client, tokens, "maker")
        before = _count(ctx)
        answer = client.post("/v0/benchmarks", json=make_spec(files), headers=auth(token))
        assert_problem(answer, status, code, text)
        assert _count(ctx) == before
        assert not (data_cache_dir(ctx.settings) / f"{SHA}.data").exists()


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{port}/data.jsonl",
        "https://127.0.0.1/data.jsonl",
        "https://localhost/data.jsonl",
        "https://10.1.2.3/data.jsonl",
        "https://192.168.0.1/data.jsonl",
        "https://169.254.169.254/latest/meta-data.json",
        "https://[::1]/data.jsonl",
        "https://[::ffff:127.0.0.1]/data.jsonl",
        "https://[fe80::1]/data.jsonl",
        "https://0.0.0.0/data.jsonl",
        "https://224.0.0.1/data.jsonl",
        "https://100.64.0.1/data.jsonl",
    ],
)
def test_private_urls_are_refused_without_the_operator_setting(world, files, url):
    ctx, client, tokens = world(allow_private_data_urls=False)
    port = files.rsplit(":", 1)[-1]
    with client:
        _grant(client, tokens, "maker")
        token = _creator_token(client, tokens, "maker")
        answer = client.post(
            "/v0/benchmarks", json=spec(url.format(port=port)), headers=auth(token)
        )
        assert_problem(answer, 422, "url-not-allowed")
        assert _count(ctx) == 1  # arith only


def test_a_redirect_is_followed_hop_by_hop(world, files):
    """With private URLs allowed (the data server is on 127.0.0.1) a redirect is
    followed, one checked hop at a time; a redirect to a private host without the
    setting is refused (tests/unit/evaluation/test_remote_data.py)."""
    ctx, client, tokens = world()
    with client:
        _grant(client, tokens, "maker")
        token = _creator_token(client, tokens, "maker")
        made = client.post(
            "/v0/benchmarks", json=spec(f"{files}/redirect/data.jsonl"), headers=auth(token)
        )
        assert made.status_code == 201, made.text


# --- role escalation --------------------------------------------------------------


def _agree_once(client: TestClient, tokens: dict[str, str], n: int) -> None:
    """A task of owner's model n that r1, r2 and r3 settle DONE together."""
    assert register(client, tokens, hub_ref(n)).status_code == 201
    leases = {who: pull(client, tokens, who).json() for who in ("r1", "r2", "r3")}
    for who in ("r1", "r2", "r3"):
        assert submit(client, tokens, who, leases[who], 0.5).status_code == 201


def test_benchmark_create_comes_after_agreeing_evaluations_and_admins_can_revoke(world, files):
    ctx, client, tokens = world(benchmark_create_after=1)
    with client:
        refused = client.post(
            "/v0/tokens", json={"scopes": ["benchmark:create"]}, headers=auth(tokens["r1"])
        )
        assert_problem(refused, 403, "forbidden", "benchmark:create")
        # a token with the scope, but an account without the permission (an operator's)
        scoped = issue_token(ctx, "r1", scopes=("benchmark:create",), name="early").token
        answer = client.post(
            "/v0/benchmarks", json=spec(f"{files}/data.jsonl"), headers=auth(scoped)
        )
        assert_problem(answer, 403, "forbidden", "1 accepted evaluations")
        assert _count(ctx) == 1
        # a token without the scope is refused before anything else
        assert_problem(
            client.post(
                "/v0/benchmarks", json=spec(f"{files}/data.jsonl"), headers=auth(tokens["r1"])
            ),
            403,
            "forbidden",
            "benchmark:create",
        )
        _agree_once(client, tokens, 1)
        account = client.get("/v0/me/account", headers=auth(tokens["r1"])).json()
        grant = account["benchmark_create"]
        assert grant["held"] and grant["action"] == "grant" and grant["by"] is None
        assert "automatic" in grant["reason"] and grant["agreeing_evaluations"] == 1
        assert (
            client.post(
                "/v0/benchmarks", json=spec(f"{files}/data.jsonl"), headers=auth(scoped)
            ).status_code
            == 201
        )
        # an admin's revocation is recorded, shown, and stands
        revoked = _grant(client, tokens, "r1", "revoke")
        assert revoked["held"] is False and revoked["by"] == "admin"
        answer = client.post(
            "/v0/benchmarks", json=spec(f"{files}/data.jsonl", version=2), headers=auth(scoped)
        )
        assert_problem(answer, 403, "forbidden", "revoked")
        shown = client.get("/v0/me/account", headers=auth(tokens["r1"])).json()
        assert shown["benchmark_create"]["action"] == "revoke"
        assert _grant(client, tokens, "r1")["held"] is True
        with ctx.db.read() as session:
            actions = list(session.scalars(select(AccountGrant.action).order_by(AccountGrant.id)))
        assert actions == ["grant", "revoke", "grant"]
        # only an admin grants
        assert_problem(
            client.post(
                "/v0/accounts/r2/grants", json={"action": "grant"}, headers=auth(tokens["r1"])
            ),
            403,
            "forbidden",
            "admin",
        )


def test_the_account_page_shows_the_grant(world, files):
    ctx, client, tokens = world()
    with client:
        _grant(client, tokens, "maker")
        from quorumbench.services.accounts import Principal
        from quorumbench.services.views.account import account_view

        with ctx.db.read() as session:
            from quorumbench.db.models import Account

            maker = session.scalars(select(Account).where(Account.name == "maker")).one()
        view = account_view(ctx, Principal(maker.id, "maker", False, frozenset({"model:register"})))
        assert view.benchmark_create.held and view.benchmark_create.by == "admin"
        assert "benchmark:create" in view.grantable


def test_a_benchmark_whose_data_is_gone_does_not_stop_the_others(world, files, clock):
    ctx, client, tokens = world()
    with client:
        assert register(client, tokens, hub_ref(1)).status_code == 201
        _grant(client, tokens, "maker")
        token = _creator_token(client, tokens, "maker")
        made = client.post("/v0/benchmarks", json=spec(f"{files}/data.jsonl"), headers=auth(token))
        assert made.status_code == 201
    # the data left its URL and this process's cache: the next epoch still gets arith
    _Files.files = {k: v for k, v in _Files.files.items() if k != "/data.jsonl"}
    try:
        (data_cache_dir(ctx.settings) / f"{SHA}.data").unlink()
        ctx.loaded_benchmarks.pop("tiny-sums")
        clock.advance(EPOCH_S)
        tick(ctx)
        assert _tasks_of(ctx, "tiny-sums") == []
        epoch = made.json()["first_epoch"]
        assert any(t.epoch_id == epoch for t in _tasks_of(ctx, "arith"))
    finally:
        _Files.files["/data.jsonl"] = DATA


def test_settings_may_not_take_the_name_of_a_created_benchmark(world, files, tmp_path):
    ctx, client, tokens = world()
    with client:
        _grant(client, tokens, "maker")
        token = _creator_token(client, tokens, "maker")
        made = client.post("/v0/benchmarks", json=spec(f"{files}/data.jsonl"), headers=auth(token))
        assert made.status_code == 201
    local = spec("https://example.org/data.jsonl", version=7)
    local["data"] = {"path": "data.jsonl", "sha256": SHA, "id_field": "id"}
    (tmp_path / "data.jsonl").write_bytes(DATA)
    (tmp_path / "same.json").write_text(json.dumps(local))
    with pytest.raises(ConfigError, match="created through the API"):
        ensure_benchmarks(ctx, ["arith", str(tmp_path / "same.json")])
