"""The create-a-pool form: its fields, their defaults, and reading a posted form into a
:class:`~quorumbench.services.pools.PoolSpec`.

Every field is checked here before anything is written, and the first problem is
shown back in the form (with the field it is about marked) together with what was
typed; the service checks again (``create_pool``), and its refusal is shown the same
way. Credits are whole numbers (integer minor units): ``10.5``, ``-3`` or ``1e3`` are
refused, never rounded. Times are UTC, as ``<input type="datetime-local">`` sends them
(``2026-12-10T09:00``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from quorumbench.core.allocation import RULES, TIE_POLICIES, parse_rule
from quorumbench.errors import ConfigError
from quorumbench.services.pool_spec import (
    MAX_DESCRIPTION,
    MAX_ENTRIES_PER_ACCOUNT,
    MAX_PERIOD_S,
    MAX_TITLE,
    MIN_PERIOD_S,
)
from quorumbench.services.pools import PoolSpec
from quorumbench.web.session import Form

TITLE_MAX, DESCRIPTION_MAX = MAX_TITLE, MAX_DESCRIPTION
KIND_TEXT = {
    "hf": "Hugging Face models (hf:)",
    "lora": "LoRA adapters",
    "gguf": "GGUF files",
    "openai": "OpenAI-compatible endpoints",
}
RULE_PARAMS: dict[str, tuple[str, ...]] = {
    "ArithmeticDecrease": ("k",),
    "Geometric": ("q", "k"),
    "Proportional": ("floor",),
    "WinnerTakesAll": (),
    "TopKEqual": ("k",),
}
"""The parameters each rule reads from the form (others are left out of its spec)."""
RULE_TEXT = {
    "ArithmeticDecrease": "place r of K paid gets (K + 1 − r) / (K (K + 1) / 2)",
    "Geometric": "shares fall by q per place (q^(r − 1)) over K paid places",
    "Proportional": "shares follow the chance-corrected score above the floor",
    "WinnerTakesAll": "the first place gets everything",
    "TopKEqual": "the first K places share equally",
}
TIE_TEXT = {
    "exact": "equal scores share their places' amounts equally",
    "statistical": "entries whose 95% intervals overlap across a paid place share equally",
}
TEXT_FIELDS = (
    "title",
    "description",
    "funds",
    "rule",
    "k",
    "q",
    "floor",
    "ties",
    "starts_at",
    "ends_at",
    "join_deadline",
    "max_params",
    "entries_per_account",
    "period_hours",
    "final_sha256",
)
PERIOD_HOURS_MIN, PERIOD_HOURS_MAX = MIN_PERIOD_S // 3600, MAX_PERIOD_S // 3600
LOCAL_TIME = "%Y-%m-%dT%H:%M"
_WHOLE = re.compile(r"^\d+$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2})?$")


class FormProblem(Exception):
    """What a field of the form lacks; ``field`` names it (for the page to mark)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass
class PoolForm:
    """The form's values as typed (text), and the chosen benchmarks and kinds."""

    values: dict[str, str] = field(default_factory=dict)
    benchmarks: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    nonce: str | None = None
    """The form's one-time nonce, kept when a refused form is shown again."""

    @classmethod
    def defaults(cls, now: datetime, benchmarks: list[str]) -> PoolForm:
        """Starting at the next full hour, one week long, entries open until the end."""
        start = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
        start += timedelta(hours=1)
        end = start + timedelta(days=7)
        values = {name: "" for name in TEXT_FIELDS}
        values.update(
            rule="ArithmeticDecrease",
            k="10",
            ties="exact",
            starts_at=start.strftime(LOCAL_TIME),
            ends_at=end.strftime(LOCAL_TIME),
            join_deadline=end.strftime(LOCAL_TIME),
            entries_per_account="1",
            period_hours="24",
        )
        return cls(values, benchmarks[:1], [])

    @classmethod
    def of(cls, form: Form) -> PoolForm:
        values = {name: (form.one(name) or "").strip() for name in TEXT_FIELDS}
        values["description"] = (form.one("description") or "").strip()
        return cls(values, form.all("benchmark"), form.all("kind"), form.one("nonce"))

    def spec(
        self,
        *,
        now: datetime,
        balance: int,
        active: list[str],
        kinds: tuple[str, ...],
        parse_size: Any,
    ) -> PoolSpec:
        """The pool the form asks for; :class:`FormProblem` for the first thing wrong."""
        v = self.values
        title = v["title"]
        if not title:
            raise FormProblem("title", "Give the pool a title.")
        if len(title) > TITLE_MAX:
            raise FormProblem("title", f"A title is at most {TITLE_MAX} characters.")
        if len(v["description"]) > DESCRIPTION_MAX:
            raise FormProblem(
                "description", f"A description is at most {DESCRIPTION_MAX} characters."
            )
        if not self.benchmarks:
            raise FormProblem("benchmark", "Choose at least one benchmark.")
        unknown = [b for b in self.benchmarks if b not in active]
        if unknown:
            raise FormProblem("benchmark", f"No active benchmark is named {unknown[0]!r}.")
        funds = _credits(v["funds"], balance)
        rule, params = _rule(v)
        if v["ties"] not in TIE_POLICIES:
            raise FormProblem("ties", "Choose how ties are paid: exact or statistical.")
        starts, ends, deadline = _times(v, now)
        bad_kinds = [k for k in self.kinds if k not in kinds]
        if bad_kinds:
            raise FormProblem("kind", f"{bad_kinds[0]!r} is not a model type.")
        try:
            max_params = parse_size(v["max_params"] or None)
        except ConfigError as exc:
            raise FormProblem("max_params", exc.message) from None
        if max_params is not None and max_params <= 0:
            raise FormProblem("max_params", "A parameter limit is a positive size, e.g. 7B.")
        entries = _whole(v["entries_per_account"], "entries_per_account", "Entries per account")
        if not 1 <= entries <= MAX_ENTRIES_PER_ACCOUNT:
            raise FormProblem(
                "entries_per_account",
                f"Entries per account: from 1 to {MAX_ENTRIES_PER_ACCOUNT}.",
            )
        period_s = _period(v["period_hours"])
        digest = v["final_sha256"].lower() or None
        if digest is not None and not _SHA256.match(digest):
            raise FormProblem(
                "final_sha256", "A SHA-256 is 64 hexadecimal digits (sha256sum prints it)."
            )
        return PoolSpec(
            title=title,
            funds=funds,
            rule=rule,
            starts_at=starts,
            ends_at=ends,
            join_deadline=deadline,
            benchmarks=list(dict.fromkeys(self.benchmarks)),
            description=v["description"],
            rule_params=params,
            ties=v["ties"],
            max_params=max_params,
            kinds=list(dict.fromkeys(self.kinds)),
            entries_per_account=entries,
            period_s=period_s,
            final_sha256=digest,
        )


def _whole(text: str, name: str, label: str) -> int:
    if not _WHOLE.match(text):
        raise FormProblem(name, f"{label}: a whole number, e.g. 1 (not {text[:20]!r}).")
    return int(text)


def _credits(text: str, balance: int) -> int:
    if not text:
        raise FormProblem("funds", "Say how many credits the pool pays out.")
    if not _WHOLE.match(text.replace(",", "").replace("_", "")):
        raise FormProblem(
            "funds",
            f"Funds are a positive whole number of credits (minor units): {text[:20]!r} is "
            "not one; amounts are never rounded.",
        )
    funds = int(text.replace(",", "").replace("_", ""))
    if funds <= 0:
        raise FormProblem("funds", "Funds are a positive whole number of credits.")
    if funds > balance:
        raise FormProblem(
            "funds",
            f"Funds of {funds:,} credits are more than your balance of {balance:,}: "
            "nothing was moved.",
        )
    return funds


def _rule(v: dict[str, str]) -> tuple[str, dict[str, Any]]:
    rule = v["rule"]
    if rule not in RULES:
        raise FormProblem("rule", f"Choose a rule: {', '.join(RULES)}.")
    params: dict[str, Any] = {}
    for name in RULE_PARAMS[rule]:
        text = v[name]
        if not text:
            continue  # the rule's default
        if name == "k":
            params[name] = _whole(text, "k", "Paid places (K)")
        else:
            try:
                params[name] = float(text)
            except ValueError:
                message = f"{name}: a number, e.g. 0.3 (not {text[:20]!r})."
                raise FormProblem(name, message) from None
    try:
        parsed = parse_rule(rule, params)
    except ValueError as exc:
        bad = next((n for n in RULE_PARAMS[rule] if n in str(exc)), "rule")
        raise FormProblem(bad, f"{rule}: {exc}") from None
    return parsed.name, parsed.as_dict()


def parse_time(text: str, name: str, label: str) -> datetime:
    """``2026-12-10T09:00`` (UTC) as an aware datetime."""
    if not _TIME.match(text):
        raise FormProblem(name, f"{label}: a date and time, e.g. 2026-12-10T09:00 (UTC).")
    try:
        return datetime.fromisoformat(text).replace(tzinfo=UTC)
    except ValueError:
        raise FormProblem(name, f"{label}: {text!r} is not a date and time.") from None


def _times(v: dict[str, str], now: datetime) -> tuple[datetime, datetime, datetime]:
    starts = parse_time(v["starts_at"], "starts_at", "Start")
    ends = parse_time(v["ends_at"], "ends_at", "End")
    deadline = parse_time(v["join_deadline"], "join_deadline", "Join deadline")
    if ends <= starts:
        raise FormProblem("ends_at", "The end must come after the start.")
    if ends <= now:
        raise FormProblem("ends_at", "The end must be in the future.")
    if deadline > ends:
        raise FormProblem("join_deadline", "Entries must close by the end (or at it).")
    if deadline <= starts:
        raise FormProblem("join_deadline", "Entries must close after the start.")
    return starts, ends, deadline


def _period(text: str) -> int:
    hours = _whole(text, "period_hours", "The board's update period (hours)")
    if not PERIOD_HOURS_MIN <= hours <= PERIOD_HOURS_MAX:
        raise FormProblem(
            "period_hours",
            f"The board's update period: from {PERIOD_HOURS_MIN} to {PERIOD_HOURS_MAX} hours.",
        )
    return hours * 3600
