"""The LLM planner against a local OpenAI-compatible ``/chat/completions`` server that
the test starts (standard library, scripted answers): a valid answer is used, anything
else falls back to the offline planner and the report says why, without the key."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from quorumbench.benchmarks import DEFAULT_PILLARS
from quorumbench.planner import CatalogEntry, PlannerSettings, plan_query
from quorumbench.planner.llm import LLM_PLANNER
from quorumbench.planner.offline import OFFLINE_PLANNER

CATALOG = [CatalogEntry(name, 1, pillar) for name, pillar in DEFAULT_PILLARS.items()]
KEY = "sk-test-9f8e7d6c5b4a"
QUERY = "best small model for Korean high-school math"
GOOD = {
    "labels": {"subject": ["science/math"], "language": ["ko"]},
    "pillars": [],
    "benchmarks": [],
    "models": {"select": "filter", "max_params": 4_000_000_000},
    "matches": [
        {"text": "math", "key": "subject", "value": "science/math", "confidence": 0.95},
        {"text": "Korean", "key": "language", "value": "ko", "confidence": 0.9},
        {"text": "small", "key": "models", "value": "max_params:4000000000", "confidence": 0.8},
    ],
    "unmapped": ["high-school"],
}


@dataclass
class Script:
    """What the server answers: a chat completion with ``content``, or ``status``."""

    content: str = json.dumps(GOOD)
    status: int = 200
    body: bytes | None = None
    delay_s: float = 0.0
    requests: list[dict[str, Any]] = field(default_factory=list)
    auth: list[str | None] = field(default_factory=list)


@contextmanager
def serve(script: Script) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            script.requests.append(json.loads(self.rfile.read(length)))
            script.auth.append(self.headers.get("Authorization"))
            time.sleep(script.delay_s)
            if self.path != "/v1/chat/completions":
                self._send(404, b'{"error": "not found"}')
            elif self.headers.get("Authorization") != f"Bearer {KEY}":
                self._send(
                    401,
                    json.dumps({"error": f"bad key {self.headers.get('Authorization')}"}).encode(),
                )
            elif script.body is not None:
                self._send(script.status, script.body)
            else:
                answer = {
                    "choices": [{"message": {"role": "assistant", "content": script.content}}]
                }
                self._send(script.status, json.dumps(answer).encode())

        def _send(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with suppress(OSError):  # the client gave up (timeout test)
                self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def settings(url: str, **changes: Any) -> PlannerSettings:
    return PlannerSettings(
        llm_url=url, llm_model="planner-model", llm_api_key=changes.pop("key", KEY), **changes
    )


def test_a_valid_answer_is_used_and_the_request_is_structured():
    script = Script()
    with serve(script) as url:
        report = plan_query(QUERY, CATALOG, settings(url), seed="ab12", budget=30)
    assert report.planner == LLM_PLANNER
    assert report.fallback is None
    assert report.plan.label_values("subject") == ("science/math",)
    assert report.plan.label_values("language") == ("ko",)
    assert report.plan.models.max_params == 4_000_000_000
    assert report.plan.versions["planner"] == "llm/1:planner-model"
    assert report.plan.versions["seed"] == "ab12"
    assert report.plan.budget == 30
    assert report.plan.versions["benchmarks"] == {e.name: 1 for e in CATALOG}
    assert [(m.text, m.value, m.confidence, m.how) for m in report.matches][0] == (
        "math",
        "science/math",
        0.95,
        "llm",
    )
    assert report.unmapped == ("high-school",)
    assert report.language == "en"
    (sent,) = script.requests
    assert sent["model"] == "planner-model"
    assert sent["response_format"] == {"type": "json_object"}
    assert sent["messages"][1] == {"role": "user", "content": QUERY}
    system = sent["messages"][0]["content"]
    for value in (
        "alignment",
        "social-intelligence/safety",
        "open-ended",
        "truthfulqa-mc2",
        "gguf",
    ):
        assert value in system
    assert script.auth == [f"Bearer {KEY}"]


def _fallback(script: Script, caplog: pytest.LogCaptureFixture, **changes: Any) -> Any:
    with caplog.at_level(logging.WARNING, logger="quorumbench.planner"), serve(script) as url:
        report = plan_query(QUERY, CATALOG, settings(url, **changes))
    offline = plan_query(QUERY, CATALOG)
    assert report.planner == OFFLINE_PLANNER
    assert report.plan == offline.plan  # exactly the offline planner's plan
    assert report.matches == offline.matches
    assert report.fallback is not None
    assert report.fallback.startswith("The LLM planner was not used: ")
    assert report.fallback.endswith("; this plan is the offline planner's.")
    assert KEY not in report.fallback and KEY not in caplog.text
    assert report.fallback.split(": ", 1)[1].split(";")[0] in caplog.text
    return report


BAD_ANSWERS = [
    ("{not json", "the LLM's answer is not valid JSON"),
    ("[1, 2]", "the LLM's answer is not a JSON object"),
    (json.dumps({**GOOD, "why": "x"}), "the LLM's answer has unknown keys: why"),
    (
        json.dumps({**GOOD, "labels": {"skill": ["wisdom"]}}),
        "the LLM's plan is not valid: labels.skill: 'wisdom' not one of",
    ),
    (
        json.dumps({**GOOD, "labels": {"subject": ["science/alchemy"]}}),
        "the LLM's plan uses subjects outside taxonomy v1: science/alchemy",
    ),
    (
        json.dumps({**GOOD, "labels": {"language": ["korean"]}}),
        "labels.language: 'korean' is not an ISO 639-1 code",
    ),
    (
        json.dumps({**GOOD, "labels": {"target": ["korea"]}}),
        "labels.target: 'korea' is not 'general' or 'local/<country code>'",
    ),
    (json.dumps({**GOOD, "pillars": ["vibes"]}), "pillars: 'vibes' not one of"),
    (
        json.dumps({**GOOD, "benchmarks": ["kmmlu"]}),
        "the LLM's plan names benchmarks this server does not run: kmmlu",
    ),
    (json.dumps({**GOOD, "models": {"select": "best"}}), "models.select must be one of"),
    (
        json.dumps({**GOOD, "matches": [{"text": "physics", "key": "subject", "value": "x"}]}),
        "an LLM match quotes words that are not in the question",
    ),
    (
        json.dumps({**GOOD, "matches": [{"text": "math", "key": "topic", "value": "x"}]}),
        "an LLM match has key 'topic'",
    ),
    (
        json.dumps(
            {**GOOD, "matches": [{"text": "math", "key": "skill", "value": "x", "confidence": 3}]}
        ),
        "confidence is not between 0 and 1",
    ),
    (
        json.dumps(
            {
                **GOOD,
                "matches": [{"text": "math", "key": "skill", "value": "x", "confidence": "hi"}],
            }
        ),
        "confidence is not a number",
    ),
    (
        json.dumps({**GOOD, "matches": [["math"]]}),
        "an LLM match is not {text, key, value, confidence}",
    ),
    (json.dumps({**GOOD, "matches": {}}), "the LLM's matches are not a list"),
    (
        json.dumps({**GOOD, "matches": [{"text": "math", "key": "skill", "value": "wisdom"}]}),
        "an LLM match sets skill 'wisdom', which the LLM's plan does not have",
    ),
    (
        json.dumps({**GOOD, "matches": [{"text": "math", "key": "pillar", "value": "math"}]}),
        "an LLM match sets pillar 'math', which the LLM's plan does not have",
    ),
    (json.dumps({**GOOD, "unmapped": ["quantum"]}), "the LLM's unmapped words are not words"),
]


@pytest.mark.parametrize(("content", "reason"), BAD_ANSWERS, ids=[r for _, r in BAD_ANSWERS])
def test_a_bad_answer_is_refused_and_the_fallback_says_why(content, reason, caplog):
    report = _fallback(Script(content=content), caplog)
    assert reason in report.fallback


@pytest.mark.parametrize(
    ("script", "reason"),
    [
        (Script(status=500, body=b'{"error": "boom"}'), "the LLM endpoint answered HTTP 500"),
        (
            Script(body=b"<html>not json</html>"),
            "the LLM endpoint's answer is not a chat completion",
        ),
        (Script(body=b'{"choices": []}'), "the LLM endpoint's answer is not a chat completion"),
        (
            Script(body=b'{"choices": [{"message": {"content": null}}]}'),
            "the LLM endpoint's answer has no text content",
        ),
        (Script(body=b" " * 70_000), "the LLM endpoint's answer is over 64000 bytes"),
    ],
)
def test_http_failures_fall_back_and_say_why(script, reason, caplog):
    assert reason in _fallback(script, caplog).fallback


def test_a_wrong_key_is_an_http_error_and_neither_key_is_repeated(caplog):
    wrong = "sk-wrong-0000"
    script = Script()
    with caplog.at_level(logging.WARNING, logger="quorumbench.planner"), serve(script) as url:
        report = plan_query(QUERY, CATALOG, settings(url, key=wrong))
    assert report.fallback is not None and "HTTP 401" in report.fallback
    assert wrong not in report.fallback and wrong not in caplog.text


def test_a_slow_endpoint_times_out_and_falls_back(caplog):
    report = _fallback(Script(delay_s=1.5), caplog, timeout_s=0.3)
    assert "the LLM endpoint did not answer within 0.3 s" in report.fallback


def test_a_server_that_is_down_falls_back(caplog):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with caplog.at_level(logging.WARNING, logger="quorumbench.planner"):
        report = plan_query(QUERY, CATALOG, settings(f"http://127.0.0.1:{port}/v1"))
    assert report.planner == OFFLINE_PLANNER
    assert report.fallback == (
        "The LLM planner was not used: the LLM endpoint could not be reached (ConnectError); "
        "this plan is the offline planner's."
    )
    assert KEY not in caplog.text


def test_without_url_or_model_the_offline_planner_runs_and_no_fallback_is_reported():
    for partial in (
        PlannerSettings(llm_url="http://127.0.0.1:9/v1"),
        PlannerSettings(llm_model="m"),
    ):
        report = plan_query(QUERY, CATALOG, partial)
        assert report.planner == OFFLINE_PLANNER and report.fallback is None


def test_a_bad_budget_is_the_callers_error_not_a_fallback():
    with pytest.raises(ValueError, match="budget must be an integer"):
        plan_query(QUERY, CATALOG, settings("http://127.0.0.1:9/v1"), budget=0)


def test_a_long_model_name_is_not_cut_into_the_plan():
    with serve(Script()) as url:
        long = PlannerSettings(llm_url=url, llm_model="m" * 70, llm_api_key=KEY)
        report = plan_query(QUERY, CATALOG, long)
    assert report.fallback is None
    assert report.plan.versions["planner"] == LLM_PLANNER


def test_the_settings_repr_leaves_the_key_out():
    shown = repr(settings("http://127.0.0.1:9/v1"))
    assert KEY not in shown and "planner-model" in shown
