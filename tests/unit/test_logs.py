"""The server's log lines: one per event, key=value or JSON, tracebacks kept on the line."""

from __future__ import annotations

import io
import json
import logging

from quorumbench.logs import JsonFormatter, KeyValueFormatter, configured, event


def _record(logger: logging.Logger, emit) -> logging.LogRecord:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep()
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        emit()
    finally:
        logger.removeHandler(handler)
    (record,) = records
    return record


def test_an_event_is_one_key_value_line_with_quoted_values():
    log = logging.getLogger("quorumbench.test.kv")
    record = _record(
        log,
        lambda: event(
            log,
            "request.refused",
            status=409,
            detail='lease 9 is "expired"',
            ok=True,
            ids=[1, 2],
            nothing=None,
        ),
    )
    line = KeyValueFormatter().format(record)
    assert "\n" not in line
    assert line.startswith("ts=") and "level=info logger=quorumbench.test.kv" in line
    assert 'event=request.refused status=409 detail="lease 9 is \\"expired\\"" ok=true' in line
    assert "ids=1,2" in line and "nothing" not in line


def test_a_plain_log_call_and_a_traceback_stay_on_one_line():
    log = logging.getLogger("quorumbench.test.plain")
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        record = _record(log, lambda: log.exception("it failed: %s", "why"))
    line = KeyValueFormatter().format(record)
    assert "\n" not in line
    assert 'event=log msg="it failed: why"' in line
    assert 'error="ValueError: boom\\nsecond line"' in line and "traceback=" in line
    doc = json.loads(JsonFormatter().format(record))
    assert doc["event"] == "log" and doc["msg"] == "it failed: why"
    assert doc["traceback"].startswith("Traceback")


def test_json_lines_carry_the_fields():
    log = logging.getLogger("quorumbench.test.json")
    record = _record(log, lambda: event(log, "lease.granted", lease=7, task=3))
    doc = json.loads(JsonFormatter().format(record))
    assert doc["event"] == "lease.granted" and doc["lease"] == 7 and doc["task"] == 3
    assert doc["level"] == "info" and doc["ts"].endswith("Z")


def test_configured_sets_the_level_and_restores_the_loggers_afterwards():
    logger = logging.getLogger("quorumbench")
    before = (list(logger.handlers), logger.level, logger.propagate)
    out = io.StringIO()
    with configured("warning", "json", stream=out):
        event(logging.getLogger("quorumbench.x"), "quiet.info")
        event(logging.getLogger("quorumbench.x"), "loud.warning", level=logging.WARNING)
        assert logging.getLogger("uvicorn.error").level == logging.WARNING
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [doc["event"] for doc in lines] == ["loud.warning"]
    assert (list(logger.handlers), logger.level, logger.propagate) == before
