"""The OpenAPI document is the truth: schemathesis runs every check against the app.

In process (ASGI, no socket), as a caller without credentials and as an admin with
every scope whose runner holds a live lease, on SQLite and on PostgreSQL, with a fixed
seed and a bounded number of examples per operation: what the API answers must be
what ``/openapi.json`` says (statuses, media types, bodies, headers), nothing the
schema allows may be refused, and nothing it forbids accepted. Every phase runs:
the schema's examples, its boundaries (coverage), random data (fuzzing) and chains
of calls along the links schemathesis infers (stateful: a lease pulled, then
heartbeat, released, failed or submitted by its id).
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import strategies as st
from nacl.signing import SigningKey
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import events, from_schema
from schemathesis.python.asgi import shutdown_lifespans
from schemathesis.specs.openapi import unregister_string_format

from quorumbench.api.app import create_app
from quorumbench.services.accounts import create_account, issue_token
from quorumbench.services.models import register_model
from quorumbench.services.scheduler import ensure_epoch, schedule_epoch
from quorumbench.services.sessions import authenticate

from .conftest import fake_metadata, hub_ref
from .test_api import auth

SEED = 20261126
EXAMPLES = 30
"""Examples per operation in each generating phase (the issue's run used 30)."""

CONFIG: dict[str, Any] = {
    "seed": SEED,
    "cache": {"enabled": False},
    "workers": 1,
    "checks": {"enabled": True},  # every check (`st run --checks all`)
    "generation": {"max-examples": EXAMPLES, "deterministic": True},
    "operations": [
        {
            # A result counts only when it is the leased task's result (its task id,
            # sample ids and counts) signed by the runner's registered key over the
            # server's copy of the task: no schema can say which bodies those are, so a
            # schema-valid body is refused (422 invalid-submission or invalid-signature)
            # by design. Every other check still runs here.
            "include-method": "POST",
            "include-path": "/v0/leases/{lease_id}/result",
            "checks": {"positive_data_acceptance": {"enabled": False}},
        },
        {
            # Whether a ref can be registered depends on what it names (the Hub repo and
            # commit exist, the weights fit the size limit, an endpoint is public), not
            # only on its grammar: 422 invalid-ref or registration-refused by design.
            "include-method": "POST",
            "include-path": "/v0/models",
            "checks": {"positive_data_acceptance": {"enabled": False}},
        },
        {
            # A plan is refused for what it means, not only its grammar (422
            # invalid-plan: a budget out of range, labels outside the taxonomy, a models
            # filter that contradicts itself), and endpoints need a live pool (this run
            # has none: 400) and an account: refused by design.
            "include-method": "POST",
            "include-path": "/v0/asks",
            "checks": {"positive_data_acceptance": {"enabled": False}},
        },
        *(
            {
                # A pool is refused for what it asks of the server's state, not its form:
                # funds above the caller's balance (409; this run's admin holds none), a
                # benchmark the server does not run, times already past (4xx); a join,
                # cancellation or reveal depends on the pool, the model and who asks.
                "include-method": "POST",
                "include-path": path,
                "checks": {"positive_data_acceptance": {"enabled": False}},
            }
            for path in (
                "/v0/pools",
                "/v0/pools/{pool_id}/entries",
                "/v0/pools/{pool_id}/cancel",
                "/v0/pools/{pool_id}/reveal",
            )
        ),
    ],
}
"""What a ``schemathesis.toml`` would hold for this run."""
MODELS = 48
"""Models of another account registered before the run, one task each: enough that the
admin's runners still find work when the stateful phase follows a new lease's links."""


def ed25519_public_keys() -> st.SearchStrategy[str]:
    """Usable Ed25519 public keys, hex: what the ``ed25519-public-key`` format names."""
    return st.binary(min_size=32, max_size=32).map(
        lambda seed: bytes(SigningKey(seed).verify_key).hex()
    )


@dataclass
class Found:
    """What a run reported: its failures (one line each, with a way to reproduce them)."""

    documented: set[str]
    failures: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    operations: set[str] = field(default_factory=set)
    cases: int = 0

    def add(self, text: str) -> None:
        self.failures.append(text)

    def report(self) -> str:
        return "\n\n".join([*self.errors, *self.failures])


def run(app: Any, headers: dict[str, str]) -> Found:
    """Every phase and check of schemathesis against ``app`` (``st run``, in process)."""
    config = SchemathesisConfig.from_dict({**CONFIG, "headers": headers})
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, config=config)
    found = Found(documented={result.ok().label for result in schema.get_all_operations()})
    with _generators_untraced():
        _collect(found, schema)
    return found


@contextmanager
def _generators_untraced() -> Iterator[None]:
    """Coverage, when it measures the run, traces the app but not schemathesis's threads.

    schemathesis generates and checks the cases in its own threads (``schemathesis_*``)
    and sends each request to the app's event loop in another thread (and from there
    to anyio's worker threads for the sync routes). Under Python 3.11's tracing every
    line of every traced thread runs the slow way, even in files coverage does not
    measure: the generation, none of it ours, took twice as long (115 s for one case
    instead of 60). The threads that run the app are traced as before, so the app's
    covered lines are the same (compared line by line on 2026-12-07).
    """
    install = threading.gettrace()  # coverage's hook for new threads; None unmeasured
    if install is None:
        yield
        return

    def hook(frame: Any, event: str, arg: Any) -> Any:
        if threading.current_thread().name.startswith("schemathesis_"):
            sys.settrace(None)
            return None
        return install(frame, event, arg)

    threading.settrace(hook)
    try:
        yield
    finally:
        threading.settrace(install)


def _collect(found: Found, schema: Any) -> None:
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            _record(found, event)
        elif isinstance(event, events.NonFatalError):  # the app raised: a 500, with a traceback
            found.errors.append(f"{event.label}: {_traceback(event.value)}")
        elif isinstance(event, events.FatalError):
            found.errors.append(f"schemathesis stopped: {_traceback(event.exception)}")
        elif isinstance(event, events.EngineFinished):
            for failure in event.failures:
                found.add(f"{failure.operation} {failure.code} {failure.title}: {failure.message}")


def _traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


def _record(found: Found, event: events.ScenarioFinished) -> None:
    recorder = event.recorder
    found.cases += len(recorder.cases)
    for node in recorder.cases.values():
        found.operations.add(node.value.operation.label)
    for case_id, checks in recorder.checks.items():
        for check in checks:
            info = check.failure_info
            if info is None:
                continue
            failure = info.failure
            operation = recorder.cases[case_id].value.operation.label
            response = recorder.find_response(case_id=case_id)
            status, body = (response.status_code, response.text) if response else (0, "")
            found.add(
                f"{operation} [{event.phase.value}] {failure.code} {failure.title}: "
                f"{failure.message}\n    {info.code_sample}\n    -> {status} {body[:300]}"
            )


@pytest.fixture
def world(make_ctx, db_url) -> Iterator[dict[str, Any]]:
    """An app with an admin (every scope), models of another account, and a live lease
    of the admin's runner ``default``."""
    # No DNS lookups of generated hosts; models enough that a pull finds work all along;
    # no write limit, whose windows run on the wall clock (the run would vary with speed).
    ctx = make_ctx(
        db_url,
        allow_private_endpoints=True,
        registrations_per_week=MODELS,
        write_rate_limit="",
        ask_workers=0,  # asks with endpoints are refused: no generated host is called
    )
    ctx.inspector = fake_metadata
    create_account(ctx, "admin", is_admin=True)
    create_account(ctx, "owner")
    tokens = {
        "admin": issue_token(ctx, "admin", scopes=("admin",)).token,
        "owner": issue_token(ctx, "owner").token,
    }
    owner = authenticate(ctx, tokens["owner"])
    for n in range(1, MODELS + 1):
        register_model(ctx, owner, hub_ref(n))
    schedule_epoch(ctx, ensure_epoch(ctx, ctx.now()))  # one task per model
    with TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False)) as client:
        lease = client.post("/v0/leases", json={"runner": "default"}, headers=auth(tokens["admin"]))
        assert lease.status_code == 201, lease.text
    schemathesis.openapi.format("ed25519-public-key", ed25519_public_keys())
    yield {"app": create_app(ctx.settings, context=ctx, run_scheduler=False), **tokens}
    unregister_string_format("ed25519-public-key")
    shutdown_lifespans()


@pytest.mark.slow
# Hypothesis warns when a generated case's repr is large (a big body): noise, not a finding.
@pytest.mark.filterwarnings(
    "ignore:Generating overly large repr:hypothesis.errors.HypothesisWarning"
)
@pytest.mark.parametrize("who", ["anonymous", "admin"])
def test_the_api_answers_as_its_openapi_document_says(world, who):
    headers = {} if who == "anonymous" else auth(world["admin"])
    found = run(world["app"], headers)
    assert len(found.documented) >= 37 and found.operations == found.documented  # each ran
    assert not found.failures and not found.errors, found.report()
