"""A live ask against a real third-party server: llama-cpp-python's OpenAI-compatible
server (``python -m llama_cpp.server``) serving the bundled SmolLM2 GGUF, with an API
key it checks; the key is nowhere afterwards (data directory, every table, logs)."""

from __future__ import annotations

import logging

import pytest
from pydantic import SecretStr

from quorumbench.services import asks
from quorumbench.services.accounts import create_account
from quorumbench.services.asks import AskStatus, EndpointRequest
from quorumbench.services.live import stop_pool

from ..llamacpp import LLAMACPP_KEY, require_llamacpp, serve_llamacpp
from .test_asks_live import assert_key_nowhere, wait_until_done

pytestmark = [pytest.mark.model]
PLAN = {"benchmarks": ["gen-reasoning"], "budget": 2, "versions": {"seed": "11a0a"}}


def test_a_live_ask_against_llama_cpp_with_its_key(
    make_ctx, smollm2_gguf, tmp_path_factory, caplog
):
    require_llamacpp()
    caplog.set_level(logging.DEBUG)
    ctx = make_ctx(
        benchmarks=["gen-reasoning"],
        pillars={},
        pillar_weights={"reasoning": 1.0, "math": 0, "coding": 0, "language": 0, "safety": 0},
        ask_allow_private_endpoints=True,
        ask_timeout_s=120.0,
        ask_endpoint_concurrency=1,
    )
    alice = create_account(ctx, "alice").id
    logs = tmp_path_factory.mktemp("llamacpp")  # the server's own log: not our data dir
    with serve_llamacpp(smollm2_gguf, log_dir=logs) as server:
        made = asks.create(
            ctx,
            owner_id=alice,
            plan=PLAN,
            endpoints=[EndpointRequest(server.base_url, server.model, SecretStr(LLAMACPP_KEY))],
        )
        done = wait_until_done(ctx, made.id, alice, timeout=900)
    assert done.status is AskStatus.SUCCESS, done.error
    [row] = asks.live_rows(ctx, made.id, alice)
    assert (row.n_samples, row.benchmarks) == (2, {"gen-reasoning": 2})
    assert row.score is not None and row.ci_low is not None and row.ci_high is not None
    assert row.ci_low <= row.score <= row.ci_high
    stop_pool(ctx)
    ctx.db.dispose()
    assert_key_nowhere(ctx, caplog.text, LLAMACPP_KEY)
