"""The server's log: one line per event, as ``key=value`` text or as a JSON object.

Code logs an event with :func:`event` (a name like ``lease.granted`` and its fields);
:func:`configured` (used by ``quorumbench serve``) sends the ``quorumbench`` and
``uvicorn`` loggers to stderr through one of the formatters below, at the level of
``--log-level`` / ``QB_LOG_LEVEL``. A line from any other log call (a library's, a
plain ``log.warning("…")``) becomes ``event=log msg="…"``; an exception's traceback
goes into one ``traceback`` field, so every event stays one line.

``ts=2026-11-24T12:00:00.123Z level=info logger=quorumbench.api event=lease.granted lease=7``
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TextIO

FIELDS = "qb_fields"
"""The ``extra`` key :func:`event` stores its fields under."""

LOGGERS = ("quorumbench", "uvicorn", "uvicorn.error")


def event(
    logger: logging.Logger, name: str, /, *, level: int = logging.INFO, **fields: Any
) -> None:
    """Log the event ``name`` with ``fields`` (None values are left out)."""
    if logger.isEnabledFor(level):
        kept = {key: value for key, value in fields.items() if value is not None}
        logger.log(level, name, extra={FIELDS: kept})


def _record_fields(record: logging.LogRecord) -> dict[str, Any]:
    stamp = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
    out: dict[str, Any] = {
        "ts": stamp.replace("+00:00", "Z"),
        "level": record.levelname.lower(),
        "logger": record.name,
    }
    fields = getattr(record, FIELDS, None)
    if isinstance(fields, dict):
        out["event"] = record.msg
        out.update(fields)
    else:
        out["event"] = "log"
        out["msg"] = record.getMessage()
    if record.exc_info and record.exc_info[0] is not None:
        out["error"] = f"{record.exc_info[0].__name__}: {record.exc_info[1]}"
        out["traceback"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
    return out


def _kv_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list | tuple):
        value = ",".join(str(item) for item in value)
    text = str(value)
    if text and not any(c in text for c in ' ="\\\n\t') and text.isprintable():
        return text
    return json.dumps(text, ensure_ascii=False)


class KeyValueFormatter(logging.Formatter):
    """``key=value`` pairs on one line; values with spaces or quotes are JSON strings."""

    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={_kv_value(v)}" for k, v in _record_fields(record).items())


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_record_fields(record), default=str, ensure_ascii=False)


@contextmanager
def configured(
    level: str = "info", fmt: str = "kv", stream: TextIO | None = None
) -> Iterator[None]:
    """Meanwhile, send the server's loggers to ``stream`` (stderr), one line per event;
    their previous handlers, levels and propagation come back afterwards."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else KeyValueFormatter())
    saved = []
    for name in LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.handlers, logger.level, logger.propagate))
        logger.handlers = [handler]
        # uvicorn's own info lines repeat what the server.start event says
        quiet = name.startswith("uvicorn") and level != "debug"
        logger.setLevel("WARNING" if quiet else level.upper())
        logger.propagate = False
    try:
        yield
    finally:
        for logger, handlers, old_level, propagate in saved:
            logger.handlers, logger.propagate = handlers, propagate
            logger.setLevel(old_level)
