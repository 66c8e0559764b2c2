"""HTTP bodies of prize pools (``/v0/pools``).

Amounts are integers in minor units (``StrictInt``): ``12.5``, ``"12"``, ``true`` and
``-5`` are refused (422), never rounded or coerced. Times are timezone-aware.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    model_validator,
)

from quorumbench.core.allocation import RULES, TIE_POLICIES, parse_rule
from quorumbench.core.plans import MODEL_KINDS
from quorumbench.protocol import BENCHMARK_NAME_PATTERN

MAX_FUNDS = 2**53 - 1
"""The largest amount a pool can hold (minor units): an integer every JSON reader keeps
exactly (a double's 53 bits)."""
MIN_PERIOD_S = 3600
MAX_PERIOD_S = 30 * 86_400
PHASES = ("upcoming", "open", "running", "ended", "settled", "cancelled")
Rule = Literal["ArithmeticDecrease", "Geometric", "Proportional", "WinnerTakesAll", "TopKEqual"]
Ties = Literal["exact", "statistical"]
Kind = Literal["hf", "lora", "gguf", "openai"]
Phase = Literal["upcoming", "open", "running", "ended", "settled", "cancelled"]
# the Literals (enums in the OpenAPI document) mirror the core's tuples
assert set(get_args(Rule)) == set(RULES)
assert set(get_args(Ties)) == set(TIE_POLICIES)
assert set(get_args(Kind)) == set(MODEL_KINDS)
PlainText = Annotated[str, Field(pattern=r"^[^\x00-\x08\x0b-\x1f\x7f]*$")]
Amount = Annotated[StrictInt, Field(gt=0, le=MAX_FUNDS)]
ParamValue = StrictInt | Annotated[StrictFloat, Field(allow_inf_nan=False)]

POOL_EXAMPLE: dict[str, Any] = {
    "title": "Small models, grade-school math",
    "description": "Open to models of at most 3B parameters.",
    "funds": 100_000,
    "rule": "ArithmeticDecrease",
    "rule_params": {"k": 3},
    "ties": "statistical",
    "benchmarks": ["gsm8k"],
    "starts_at": "2026-12-01T00:00:00Z",
    "ends_at": "2026-12-29T00:00:00Z",
    "join_deadline": "2026-12-15T00:00:00Z",
    "max_params": 3_000_000_000,
    "kinds": ["hf"],
    "entries_per_account": 1,
    "period_s": 86_400,
}


class PoolIn(BaseModel):
    """A new pool: its funds move from the caller's balance into the pool's escrow."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [POOL_EXAMPLE]})

    title: PlainText = Field(min_length=1, max_length=200)
    description: str = Field("", max_length=4000, description="Plain text, shown as it is.")
    funds: Amount = Field(
        description="Credits put up, in minor units (an integer > 0, at most the "
        "caller's balance: 409 ``insufficient-funds`` otherwise, and nothing moves)."
    )
    rule: Rule = Field(description="The allocation rule (docs/pools.md).")
    rule_params: dict[str, ParamValue] = Field(
        default_factory=dict,
        max_length=8,
        description="The rule's parameters (``k`` for ArithmeticDecrease, Geometric and "
        "TopKEqual; ``q`` for Geometric; ``floor`` for Proportional); defaults filled in.",
    )
    ties: Ties = Field("exact", description="How tied entries share their places' shares.")
    benchmarks: list[Annotated[str, Field(pattern=BENCHMARK_NAME_PATTERN, max_length=64)]] = Field(
        min_length=1, max_length=20, description="Names of active benchmarks of the server."
    )
    starts_at: AwareDatetime | None = Field(
        None, description="Default: now (at most a few minutes in the past)."
    )
    ends_at: AwareDatetime = Field(description="After ``starts_at``.")
    join_deadline: AwareDatetime | None = Field(
        None,
        description="Entries close then (default: ``ends_at``): after ``starts_at``, at "
        "most ``ends_at``.",
    )
    max_params: Annotated[StrictInt, Field(gt=0, le=10**15)] | None = Field(
        None, description="Eligibility: models of at most this many parameters."
    )
    kinds: list[Kind] = Field(
        default_factory=list, max_length=4, description="Eligibility: model kinds (empty: any)."
    )
    entries_per_account: Annotated[StrictInt, Field(ge=1, le=100)] = 1
    period_s: Annotated[StrictInt, Field(ge=MIN_PERIOD_S, le=MAX_PERIOD_S)] = Field(
        86_400, description="Seconds between board snapshots (the seed's 24 h)."
    )
    final_sha256: str | None = Field(
        None,
        pattern=r"^[0-9a-f]{64}$",
        description="SHA-256 of a held-out final dataset, revealed at the end "
        "(``POST /v0/pools/{pool_id}/reveal``).",
    )

    @model_validator(mode="after")
    def _consistent(self) -> PoolIn:
        if self.starts_at is not None and self.ends_at <= self.starts_at:
            raise ValueError("ends_at must be after starts_at")
        if self.join_deadline is not None:
            if self.join_deadline > self.ends_at:
                raise ValueError("join_deadline must not be after ends_at")
            if self.starts_at is not None and self.join_deadline <= self.starts_at:
                raise ValueError("join_deadline must be after starts_at")
        if len(set(self.benchmarks)) != len(self.benchmarks):
            raise ValueError("benchmarks must not repeat")
        try:
            parse_rule(self.rule, self.rule_params)
        except ValueError as exc:
            raise ValueError(f"rule_params: {exc}") from None
        return self


class JoinIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: StrictInt | Annotated[str, Field(min_length=1, max_length=600)] = Field(
        description="A model you own: its id, name or ref.", examples=["hf:org/model@" + "0" * 40]
    )


class CancelIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: PlainText = Field(min_length=1, max_length=500, description="Shown on the pool.")


class RevealIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    spec: dict[str, Any] = Field(
        description="The held-out final dataset as a benchmark spec (the format of "
        "``POST /v0/benchmarks``, docs/custom-benchmarks.md): ``data.url`` where it is "
        "(https, or a Hub file at a pinned commit) and ``data.sha256`` the pool's "
        "``final_sha256``. Its ``name`` and ``version`` are set by the server "
        "(``pool-<id>-final``, 1); the rest is as for a created benchmark (``labels`` "
        "included), but ``pillar`` is optional.",
        examples=[
            {
                "format": "jsonl",
                "kind": "multiple_choice",
                "data": {"url": "https://example.org/final.jsonl", "sha256": "ab" * 32},
                "prompt": "{question}",
                "choices_field": "choices",
                "answer_field": "answer",
                "labels": {"skill": "reasoning", "subject": "science/math"},
            }
        ],
    )


class FinalProgressOut(BaseModel):
    """The held-out final split's progress."""

    state: Literal[
        "none", "awaiting_reveal", "evaluating", "frozen", "not_revealed", "cancelled"
    ] = Field(
        description="``none`` (no split), ``awaiting_reveal``, ``evaluating`` (revealed; "
        "the runners evaluate every entry on it), ``frozen`` (the final standing is the "
        "held-out one), ``not_revealed`` (the reveal deadline passed: the pool board "
        "decides) or ``cancelled``."
    )
    reveal_by: datetime | None = Field(description="The reveal deadline.")
    benchmark: str | None = Field(description="The hidden benchmark once revealed.")
    tasks: int = Field(description="Held-out tasks (one per entry and part).")
    final: int = Field(description="Those final (DONE, or final without agreement).")
    done: int = Field(description="Those DONE (three runners agreed).")
    deadline: datetime | None = Field(
        description="The standing is taken when every task is final, or at this time."
    )


class PoolOut(BaseModel):
    id: int
    title: str
    description: str
    funder: str
    benchmarks: list[str]
    funds: int = Field(description="Minor units held in escrow at creation.")
    rule: str
    rule_params: dict[str, Any] = Field(description="With defaults filled in.")
    ties: str
    starts_at: datetime
    ends_at: datetime
    join_deadline: datetime
    max_params: int | None
    kinds: list[str]
    entries_per_account: int
    period_s: int
    final_sha256: str | None
    final_url: str | None
    final_state: Literal[
        "none", "awaiting_reveal", "evaluating", "frozen", "not_revealed", "cancelled"
    ] = Field(description="Where the held-out final split stands (see ``final`` of a pool).")
    status: Literal["active", "settled", "cancelled"]
    phase: Phase = Field(
        description="``upcoming``, ``open`` (joins open), ``running`` (joins closed), "
        "``ended`` (awaiting settlement), ``settled`` or ``cancelled``."
    )
    created_at: datetime
    settled_at: datetime | None
    cancelled_at: datetime | None
    cancel_reason: str | None
    n_entries: int
    url: str = Field(description="The pool's page.")


class PoolEntryOut(BaseModel):
    id: int
    model_id: int
    model: str
    ref: str
    account: str
    joined_at: datetime


class StandingRowOut(BaseModel):
    """One entry on the pool board: its pool score with a 95% interval, and its rank
    with the range of ranks the intervals allow."""

    entry: PoolEntryOut
    rank: int
    rank_best: int
    rank_worst: int
    score: float
    ci_low: float
    ci_high: float
    n_samples: int
    chance: float


class PayoutOut(BaseModel):
    entry_id: int
    place: int = Field(description="1-based; tied entries get their group's best place.")
    group: int = Field(description="Tie group (entries of one group share equally).")
    amount: int = Field(description="Minor units.")


class PoolDetailOut(BaseModel):
    pool: PoolOut
    entries: list[PoolEntryOut]
    board: list[StandingRowOut] = Field(
        description="The current standing, best first (the frozen final one once ended)."
    )
    payouts: list[PayoutOut] = Field(
        description="What the rule pays for ``board``: a preview before settlement, the "
        "amounts paid after."
    )
    history: list[dict[str, Any]] = Field(
        description="Board snapshots, oldest first: ``period``, ``taken_at``, ``standing``."
    )
    payout_record: dict[str, Any] | None = Field(
        description="The settlement as the public log holds it, with its ``log_index`` "
        "(null before settlement)."
    )
    final: FinalProgressOut = Field(description="The held-out final split's progress.")
    verify: str = Field(description="How to recompute the payouts from the public log.")
