"""What a funder gives to create a pool, and its checks (``services/pools.py``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from quorumbench.core.allocation import TIE_POLICIES, Rule, parse_rule
from quorumbench.core.plans import MODEL_KINDS
from quorumbench.errors import InvalidSpecError

MIN_PERIOD_S = 3600
MAX_PERIOD_S = 30 * 86_400
START_TOLERANCE = timedelta(minutes=5)
"""How far in the past a pool's start may be (a form filled in a minute ago)."""
MAX_TITLE = 200
MAX_DESCRIPTION = 4000
MAX_ENTRIES_PER_ACCOUNT = 100
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class PoolSpec:
    """What a funder gives to create a pool (validated by :func:`create_pool`)."""

    title: str
    funds: int
    rule: str
    starts_at: datetime
    ends_at: datetime
    join_deadline: datetime
    benchmarks: list[str]
    description: str = ""
    rule_params: dict[str, Any] = field(default_factory=dict)
    ties: str = "exact"
    max_params: int | None = None
    kinds: list[str] = field(default_factory=list)
    entries_per_account: int = 1
    period_s: int = 86_400
    final_sha256: str | None = None


def _whole(value: object, what: str, low: int, high: int | None = None) -> int:
    """``value`` if it is an integer (not a bool) in [low, high]; InvalidSpecError else."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidSpecError(f"{what} must be a whole number, not {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"at least {low}" if high is None else f"between {low} and {high}"
        raise InvalidSpecError(f"{what} must be {bound}, not {value}")
    return value


def _aware(value: object, what: str) -> datetime:
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise InvalidSpecError(f"{what} must be a time with its time zone (UTC), not {value!r}")
    return value


def _check_times(spec: PoolSpec, now: datetime) -> None:
    starts = _aware(spec.starts_at, "starts_at")
    deadline = _aware(spec.join_deadline, "join_deadline")
    ends = _aware(spec.ends_at, "ends_at")
    if not starts < ends:
        raise InvalidSpecError(f"the pool ends ({ends.isoformat()}) before it starts")
    if not starts < deadline <= ends:
        raise InvalidSpecError(
            "the join deadline must be after the start and no later than the end "
            f"(start {starts.isoformat()}, deadline {deadline.isoformat()}, "
            f"end {ends.isoformat()})"
        )
    if ends <= now:
        raise InvalidSpecError(f"the pool's end ({ends.isoformat()}) is in the past")
    if starts < now - START_TOLERANCE:
        raise InvalidSpecError(f"the pool's start ({starts.isoformat()}) is in the past")


def checked(spec: PoolSpec, now: datetime) -> tuple[str, str, Rule, list[str], list[str]]:
    """(title, description, rule, benchmark names, kinds) of a valid spec; every
    other field checked too. InvalidSpecError naming the first bad field."""
    title = spec.title.strip() if isinstance(spec.title, str) else ""
    if not 1 <= len(title) <= MAX_TITLE:
        raise InvalidSpecError(f"a pool's title has 1 to {MAX_TITLE} characters")
    if not isinstance(spec.description, str) or len(spec.description) > MAX_DESCRIPTION:
        raise InvalidSpecError(f"a pool's description has at most {MAX_DESCRIPTION} characters")
    _whole(spec.funds, "funds (minor units)", 1)
    try:
        rule = parse_rule(spec.rule, spec.rule_params)
    except ValueError as exc:
        raise InvalidSpecError(f"rule: {exc}") from exc
    if spec.ties not in TIE_POLICIES:
        raise InvalidSpecError(f"ties must be one of {', '.join(TIE_POLICIES)}, not {spec.ties!r}")
    _check_times(spec, now)
    _whole(spec.period_s, "period_s (seconds)", MIN_PERIOD_S, MAX_PERIOD_S)
    _whole(spec.entries_per_account, "entries_per_account", 1, MAX_ENTRIES_PER_ACCOUNT)
    if spec.max_params is not None:
        _whole(spec.max_params, "max_params", 1)
    kinds = list(dict.fromkeys(spec.kinds))
    unknown = [k for k in kinds if k not in MODEL_KINDS]
    if unknown:
        raise InvalidSpecError(
            f"unknown model kind(s) {', '.join(map(repr, unknown))}; "
            f"known: {', '.join(MODEL_KINDS)}"
        )
    if spec.final_sha256 is not None and not (
        isinstance(spec.final_sha256, str) and _SHA256.fullmatch(spec.final_sha256)
    ):
        raise InvalidSpecError("final_sha256 is 64 lowercase hexadecimal digits (a SHA-256)")
    names = list(dict.fromkeys(spec.benchmarks)) if isinstance(spec.benchmarks, list) else []
    if not names or not all(isinstance(n, str) and n for n in names):
        raise InvalidSpecError("a pool names one or more benchmarks")
    return title, spec.description, rule, names, kinds
