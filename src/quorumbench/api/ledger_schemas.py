"""HTTP bodies of the credits ledger (``/v0/ledger``)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from quorumbench.services.ledger import MAX_AMOUNT, MAX_MEMO


class LedgerLineOut(BaseModel):
    """One line of a transfer: what reached (positive) or left (negative) a holder."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    txn_id: str = Field(description="The transfer; its two lines sum to zero.")
    holder: str = Field(description="``account:<id>``, ``pool:<id>`` or ``issuance``.")
    amount: int = Field(description="Signed, in minor units.")
    balance_after: int = Field(description="The holder's balance after this line.")
    reason: str = Field(description="``mint``, ``fund``, ``payout`` or ``refund``.")
    pool_id: int | None
    memo: str
    created_by: int | None = Field(description="The account that made it happen.")
    created_at: datetime


class LedgerMeOut(BaseModel):
    holder: str
    balance: int = Field(description="In minor units.")
    entries: list[LedgerLineOut] = Field(description="Newest first.")
    next_before: int | None = Field(
        description="Pass as ``before`` for the next (older) page; null on the last page."
    )


class MintIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    account: str = Field(min_length=1, max_length=64, description="The account's name.")
    amount: int = Field(
        strict=True,
        gt=0,
        le=MAX_AMOUNT,
        description="Whole minor units (an integer above zero: no fractions, no strings).",
        examples=[1000],
    )
    memo: str = Field(
        "",
        max_length=MAX_MEMO,
        description="Why (e.g. the payment it settles).",
        examples=["invoice 2026-118"],
    )


class LedgerCheckOut(BaseModel):
    problems: list[str] = Field(description="Invariant violations; empty when the ledger holds.")
