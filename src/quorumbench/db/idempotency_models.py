"""ORM model of the API's idempotency keys (``services/idempotency.py``).

Imported by ``db/__init__.py``, so it is on ``Base.metadata`` with the rest.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from quorumbench.db.models import Base


class IdempotencyKey(Base):
    """One ``Idempotency-Key`` an account sent with a request that did something: the
    request's hash and what it made. Written in the transaction that made it."""

    __tablename__ = "idempotency_keys"
    __table_args__ = (UniqueConstraint("account_id", "action", "key"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"))
    action: Mapped[str] = mapped_column(String(32))
    """``pool:create`` or ``ledger:mint``."""
    key: Mapped[str] = mapped_column(String(64))
    request_sha256: Mapped[str] = mapped_column(String(64))
    """SHA-256 of the canonical JSON of the request (its body)."""
    result_id: Mapped[int] = mapped_column(Integer)
    """What it made: the pool's id, the minted line's id."""
    created_at: Mapped[datetime]
