"""A live ask against the OpenAI-compatible test server running SmolLM2 (the one the
backend tests use), with an API key it checks: the ask's result is exactly a direct
evaluation of the plan's samples through the backend, and the key is nowhere."""

from __future__ import annotations

import logging

import pytest
from pydantic import SecretStr

from quorumbench.backends import BackendOptions
from quorumbench.backends.openai_compat import OpenAICompatBackend
from quorumbench.core.intervals import score_interval
from quorumbench.core.plans import parse_plan
from quorumbench.evaluation.engine import EvalConfig, evaluate
from quorumbench.evaluation.refs import parse_ref
from quorumbench.evaluation.slices import draw_slice
from quorumbench.services import asks
from quorumbench.services.accounts import create_account
from quorumbench.services.asks import AskStatus, EndpointRequest
from quorumbench.services.live import active_benchmarks, stop_pool

from ..openai_server import LoadedModel, serve
from .test_asks_live import assert_key_nowhere, wait_until_done

pytestmark = [pytest.mark.model]
MODEL_KEY = "sk-live-ask-SECRET-0xC0FFEE-91"
PLAN = {"benchmarks": ["gen-reasoning"], "budget": 4, "versions": {"seed": "a5c"}}


def test_a_live_ask_equals_a_direct_evaluation_of_its_samples(make_ctx, smollm2_dir, caplog):
    caplog.set_level(logging.DEBUG)
    ctx = make_ctx(
        benchmarks=["gen-reasoning"],
        pillars={},
        pillar_weights={"reasoning": 1.0, "math": 0, "coding": 0, "language": 0, "safety": 0},
        ask_allow_private_endpoints=True,
    )
    alice = create_account(ctx, "alice").id
    lm = LoadedModel.load(smollm2_dir)
    with serve(lm, api_key=MODEL_KEY) as server:
        made = asks.create(
            ctx,
            owner_id=alice,
            plan=PLAN,
            endpoints=[EndpointRequest(server.base_url, "smollm2", SecretStr(MODEL_KEY))],
        )
        done = wait_until_done(ctx, made.id, alice, timeout=600)
        assert done.status is AskStatus.SUCCESS, done.error
        # the same samples, straight through the backend
        benchmarks, pillars = active_benchmarks(ctx)
        drawn = draw_slice(parse_plan(PLAN), benchmarks, pillars, 4, "a5c")  # its versions.seed
        backend = OpenAICompatBackend(
            parse_ref(f"openai:{server.base_url}#smollm2"),
            BackendOptions(api_key=SecretStr(MODEL_KEY), max_retries=0),
        )
        bench = benchmarks["gen-reasoning"]
        direct = evaluate(bench, backend, EvalConfig(4), samples=[d.sample for d in drawn])
    [row] = asks.live_rows(ctx, made.id, alice)
    total = sum(r.score for r in direct.samples)
    assert (row.n_samples, row.benchmarks) == (4, {"gen-reasoning": 4})
    assert row.score == pytest.approx(total / 4)
    assert (row.ci_low, row.ci_high) == pytest.approx(score_interval(total, 4))
    assert (done.progress_done, done.progress_total) == (4, 4)
    stop_pool(ctx)
    ctx.db.dispose()
    assert_key_nowhere(ctx, caplog.text, MODEL_KEY)
