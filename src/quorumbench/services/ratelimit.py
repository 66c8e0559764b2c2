"""Rate limits on write endpoints, per authenticated account (the ``limits`` library).

Every write (registering a model or a runner key, pulling, heartbeating, releasing,
submitting) counts against the caller's account, never against an IP address: a
client cannot escape its limit by rotating ``X-Forwarded-For``, and unauthenticated
requests are refused before they count. Windows are fixed windows kept in this
process by default, or in Redis (``QB_RATE_LIMIT_STORAGE=redis://…``) so that
several replicas share them. The limiter is built with the server's context
(``services/wiring.py``), so settings it cannot use refuse the start.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from limits import RateLimitItem, parse_many
from limits.storage import storage_from_string
from limits.strategies import FixedWindowRateLimiter

from quorumbench.errors import ConfigError, RateLimitedError
from quorumbench.services.accounts import Principal
from quorumbench.services.context import ServerContext


@dataclass(frozen=True)
class WriteLimiter:
    limiter: FixedWindowRateLimiter
    items: tuple[RateLimitItem, ...]
    namespace: str = "writes"
    """Whose windows these are (each limiter counts apart)."""
    what: str = "writes"
    """What is counted, as the 429's detail names it."""

    def hit(self, account_id: int) -> None:
        """Count one write for the account; RateLimitedError (429) when over a limit."""
        for item in self.items:
            if not self.limiter.hit(item, self.namespace, str(account_id)):
                stats = self.limiter.get_window_stats(item, self.namespace, str(account_id))
                wait = max(1, math.ceil(stats.reset_time - time.time()))
                raise RateLimitedError(
                    f"too many {self.what} from this account: the limit is {item}; "
                    f"retry in {wait} s",
                    retry_after=wait,
                )


def build_limiter(
    spec: str, storage_uri: str, *, namespace: str = "writes", what: str = "writes"
) -> WriteLimiter:
    try:
        items = tuple(parse_many(spec))
        storage = storage_from_string(storage_uri)
    except (ValueError, ConfigError) as exc:
        raise ConfigError(f"invalid rate limit settings {spec!r} / {storage_uri!r}: {exc}") from exc
    return WriteLimiter(FixedWindowRateLimiter(storage), items, namespace, what)


def count_write(ctx: ServerContext, principal: Principal) -> None:
    """Count a write by ``principal`` against its account's limits (admin requests, made
    with the ``admin`` scope, are exempt)."""
    if principal.acts_as_admin or not ctx.settings.write_rate_limit:
        return
    if ctx.rate_limiter is None:
        raise ConfigError(
            "this context holds no rate limiter although QB_WRITE_RATE_LIMIT is set: "
            "only the server's context (build_context) builds it"
        )
    ctx.rate_limiter.hit(principal.account_id)


def count_submission(ctx: ServerContext, principal: Principal) -> None:
    """Count a validation or registration by ``principal`` against
    ``QB_SUBMISSION_RATE_LIMIT`` (each one reads the Hub); admin requests are exempt."""
    if principal.acts_as_admin or not ctx.settings.submission_rate_limit:
        return
    if ctx.submission_limiter is None:
        raise ConfigError(
            "this context holds no submission limiter although QB_SUBMISSION_RATE_LIMIT "
            "is set: only the server's context (build_context) builds it"
        )
    ctx.submission_limiter.hit(principal.account_id)
