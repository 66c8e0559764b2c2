"""Runner identities: a named runner belongs to one account."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from quorumbench.db.models import Runner
from quorumbench.errors import ConfigError, NotFoundError, PermissionDeniedError
from quorumbench.protocol import RUNNER_NAME_PATTERN
from quorumbench.queue.base import Claimant
from quorumbench.services.accounts import Principal
from quorumbench.services.context import IdentityKey, ServerContext

NAME_PATTERN = RUNNER_NAME_PATTERN
"""A runner's name within its account: 1-64 letters, digits, '_', '.', '-'."""
_NAME = re.compile(NAME_PATTERN)
_TOUCH_EVERY = timedelta(minutes=1)


@dataclass(frozen=True)
class RunnerName(IdentityKey[int]):
    """The identity cache's key for a runner that may pull: its account and name (the
    value is its id). A suspended runner is never remembered."""

    account_id: int
    name: str


def runner_for(
    ctx: ServerContext,
    principal: Principal,
    name: str,
    *,
    allow_suspended: bool = False,
    create: bool = True,
) -> Claimant:
    """The runner ``name`` of this account, created on first use (with ``create``; else
    NotFoundError: a runner that never pulled holds no lease to renew or submit).

    A suspended runner may not pull (PermissionDeniedError); with ``allow_suspended``
    it may still finish what it holds: its results are stored, but not counted.
    """
    if not _NAME.match(name):
        raise ConfigError(f"runner name {name!r}: 1–64 letters, digits, '_', '.', '-'")
    key = RunnerName(principal.account_id, name)
    cached = ctx.identities.get(key)
    if cached is not None:
        return Claimant(principal.account_id, cached)
    now = ctx.now()
    with ctx.db.read() as session:
        known = session.scalars(
            select(Runner).where(Runner.account_id == principal.account_id, Runner.name == name)
        ).first()
    if known is None and not create:
        raise NotFoundError(f"this account has no runner {name!r}")
    if (
        known is not None
        and not known.suspended
        and known.last_seen_at is not None
        and now - known.last_seen_at < _TOUCH_EVERY
    ):
        ctx.identities.put(key, known.id)
        return Claimant(principal.account_id, known.id)
    for _ in range(2):  # a concurrent first use may win the insert; then read it back
        try:
            with ctx.db.write() as session:
                runner = session.scalars(
                    select(Runner).where(
                        Runner.account_id == principal.account_id, Runner.name == name
                    )
                ).first()
                if runner is None:
                    runner = Runner(
                        account_id=principal.account_id,
                        name=name,
                        public_key=None,
                        created_at=now,
                        last_seen_at=now,
                        agreements=0,
                        outliers=0,
                        suspended=False,
                    )
                    session.add(runner)
                    session.flush()
                else:
                    runner.last_seen_at = now
                if runner.suspended and allow_suspended:
                    return Claimant(principal.account_id, runner.id)  # not remembered
                if runner.suspended:
                    raise PermissionDeniedError(
                        f"runner {name!r} is suspended after {runner.outliers} results that "
                        "disagreed with consensus"
                    )
                claimant = Claimant(principal.account_id, runner.id)
            ctx.identities.put(key, runner.id)
            return claimant
        except IntegrityError:
            continue
    raise ConfigError(f"could not register runner {name!r}")
