"""The runner ↔ worker protocol: round trips, and what a hostile worker may not send."""

from __future__ import annotations

import math

import pytest

from quorumbench.errors import SandboxError
from quorumbench.evaluation.backend import (
    ChatMessage,
    ChoiceRequest,
    ChoiceResult,
    GenerateRequest,
    GenerateResult,
    ModelInfo,
    Prompt,
)
from quorumbench.runner import protocol


def test_requests_round_trip():
    chat = GenerateRequest(Prompt(messages=(ChatMessage("user", "2+2?"),)), ("\n",), 16)
    plain = GenerateRequest(Prompt(text="Q: 2+2\nA:"), (), 8)
    for request in (chat, plain):
        assert protocol.decode_generate(protocol.encode_generate(request)) == request
    choice = ChoiceRequest("ctx", (" a", " b"), "q?", ("a", "b"), (1, 0))
    assert protocol.decode_choice(protocol.encode_choice(choice)) == choice


def test_results_and_info_round_trip():
    generated = [GenerateResult("4", 1, "eos"), GenerateResult("", 0, "length")]
    sent = [protocol.encode_generate_result(r) for r in generated]
    assert protocol.decode_generate_results(sent, 2) == generated
    chosen = [
        ChoiceResult("loglikelihood", (-1.5, -0.25), n_tokens=3),
        ChoiceResult("letter", chosen=1, raw_text="B"),
    ]
    sent = [protocol.encode_choice_result(r) for r in chosen]
    assert protocol.decode_choice_results(sent, 2) == chosen
    info = ModelInfo("hf:a/b@" + "0" * 40, "hf", "0" * 40, True, "cpu", "float32", {"path": "/m"})
    assert protocol.decode_info(protocol.encode_info(info)) == info


@pytest.mark.parametrize(
    "value",
    [
        None,
        [{"text": "4", "n_tokens": 1, "finish": "eos"}],  # one result for two requests
        [
            {"text": "4", "n_tokens": 1, "finish": "eos"},
            {"text": 4, "n_tokens": 1, "finish": "eos"},
        ],
        [{"text": "4", "n_tokens": True, "finish": "eos"}] * 2,
        [{"text": "4", "n_tokens": 1, "finish": "rm -rf"}] * 2,
        ["not a dict", "either"],
    ],
)
def test_malformed_generation_results_are_refused(value):
    with pytest.raises(SandboxError):
        protocol.decode_generate_results(value, 2)


@pytest.mark.parametrize(
    "item",
    [
        {"method": "guess", "loglikelihoods": [], "chosen": None, "raw_text": "", "n_tokens": 0},
        {
            "method": "loglikelihood",
            "loglikelihoods": ["1"],
            "chosen": None,
            "raw_text": "",
            "n_tokens": 0,
        },
        {
            "method": "loglikelihood",
            "loglikelihoods": [math.nan],
            "chosen": None,
            "raw_text": "",
            "n_tokens": 0,
        },
        {"method": "letter", "loglikelihoods": [], "chosen": "A", "raw_text": "", "n_tokens": 0},
    ],
)
def test_malformed_choice_results_are_refused(item):
    with pytest.raises(SandboxError):
        protocol.decode_choice_results([item], 1)


def test_malformed_info_is_refused():
    info = protocol.encode_info(ModelInfo("r", "hf", "x", False))
    for key, bad in (("is_chat", "yes"), ("details", {"path": 1}), ("ref", None)):
        with pytest.raises(SandboxError):
            protocol.decode_info({**info, key: bad})
