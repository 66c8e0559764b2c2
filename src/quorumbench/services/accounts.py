"""Accounts and scoped API tokens.

A token is ``qb_`` plus 43 random URL-safe characters; only its SHA-256 is stored.
Scopes: ``task:pull`` and ``task:submit`` (runners), ``model:register``,
``benchmark:create`` (creating benchmarks: also needs the account to hold that
permission, ``services/grants.py``; never a default), ``admin``.
Login sessions and their access JWTs build on this module (``services/sessions.py``,
which also authenticates a request's bearer of either kind); this module never
imports them (an import-linter contract).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from quorumbench.db.models import Account, ApiToken
from quorumbench.db.session_models import AuthSession
from quorumbench.errors import (
    AuthenticationError,
    ConfigError,
    ConflictError,
    NotFoundError,
    PermissionDeniedError,
)
from quorumbench.services.context import IdentityKey, ServerContext, forget_identities
from quorumbench.services.grants import grant_status

SCOPES = ("task:pull", "task:submit", "model:register", "benchmark:create", "admin")
DEFAULT_SCOPES = ("task:pull", "task:submit", "model:register")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{1,62}$")
_TOUCH_EVERY = timedelta(minutes=1)


@dataclass(frozen=True)
class Principal:
    """The account behind a request's token."""

    account_id: int
    name: str
    is_admin: bool
    scopes: frozenset[str]

    def require(self, scope: str) -> None:
        if scope not in self.scopes and "admin" not in self.scopes:
            raise PermissionDeniedError(f"this token lacks the {scope!r} scope")

    @property
    def acts_as_admin(self) -> bool:
        """Whether this request has admin powers: an admin account's token (or session)
        that carries the ``admin`` scope. A narrower token of an admin account has only
        its scopes."""
        return self.is_admin and "admin" in self.scopes


class KnownToken(NamedTuple):
    principal: Principal
    expires_at: datetime | None


@dataclass(frozen=True)
class TokenDigest(IdentityKey[KnownToken]):
    """The identity cache's key for an API token: its SHA-256 (the plain token is never
    kept)."""

    digest: str


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def opened_with(token_id: int) -> str:
    """``auth_sessions.via`` of the sessions opened with API token ``token_id``: revoking
    the token ends them too."""
    return f"api-token:{token_id}"


def create_account(ctx: ServerContext, name: str, *, is_admin: bool = False) -> Account:
    try:
        with ctx.db.write() as session:
            return add_account(ctx, session, name, is_admin=is_admin)
    except IntegrityError as exc:
        raise ConflictError(f"account {name!r} exists already") from exc


def add_account(
    ctx: ServerContext, session: Session, name: str, *, is_admin: bool = False
) -> Account:
    """A new account in the caller's transaction (IntegrityError if the name is taken)."""
    if not _NAME.match(name):
        raise ConfigError(
            f"account name {name!r}: use 2–63 lowercase letters, digits, '_', '.', '-'"
        )
    account = Account(name=name, is_admin=is_admin, created_at=ctx.now())
    session.add(account)
    session.flush()
    return account


def get_account(ctx: ServerContext, name: str) -> Account:
    with ctx.db.read() as session:
        account = session.scalars(select(Account).where(Account.name == name)).first()
        if account is None:
            raise NotFoundError(f"no account named {name!r}")
        return account


@dataclass(frozen=True)
class IssuedToken:
    token: str
    record: ApiToken


def issue_token(
    ctx: ServerContext,
    account_name: str,
    *,
    scopes: tuple[str, ...] = DEFAULT_SCOPES,
    name: str = "default",
    expires_in: timedelta | None = None,
) -> IssuedToken:
    """A new token for ``account_name``; the plain text is shown only here."""
    _check_known(scopes)
    account = get_account(ctx, account_name)
    if "admin" in scopes and not account.is_admin:
        raise PermissionDeniedError(f"{account_name!r} is not an admin account")
    with ctx.db.write() as session:
        return add_token(ctx, session, account.id, scopes, name=name, expires_in=expires_in)


def _check_known(scopes: tuple[str, ...] | list[str]) -> None:
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown:
        raise ConfigError(f"unknown scope(s) {', '.join(unknown)}; known: {', '.join(SCOPES)}")


def add_token(
    ctx: ServerContext,
    session: Session,
    account_id: int,
    scopes: tuple[str, ...] | list[str],
    *,
    name: str,
    expires_in: timedelta | None = None,
) -> IssuedToken:
    """A new token of ``account_id`` in the caller's transaction (scopes checked by the
    caller); the plain text is in the answer only."""
    token = "qb_" + secrets.token_urlsafe(32)
    now = ctx.now()
    record = ApiToken(
        account_id=account_id,
        name=name,
        token_hash=token_hash(token),
        prefix=token[:10],
        scopes=" ".join(sorted(set(scopes))),
        created_at=now,
        expires_at=now + expires_in if expires_in else None,
        revoked_at=None,
        last_used_at=None,
    )
    session.add(record)
    session.flush()
    return IssuedToken(token, record)


def authenticate_api_token(ctx: ServerContext, token: str) -> Principal:
    """The principal behind an API token (``qb_…``); raises AuthenticationError."""
    now = ctx.now()
    digest = token_hash(token)
    cached = ctx.identities.get(TokenDigest(digest))
    if cached is not None and (cached.expires_at is None or cached.expires_at > now):
        return cached.principal
    with ctx.db.read() as session:
        row = session.execute(
            select(ApiToken, Account)
            .join(Account, Account.id == ApiToken.account_id)
            .where(ApiToken.token_hash == digest)
        ).first()
    if row is None:
        raise AuthenticationError("unknown API token")
    record, account = row
    if record.revoked_at is not None:
        raise AuthenticationError("this API token was revoked")
    if record.expires_at is not None and record.expires_at <= now:
        raise AuthenticationError("this API token has expired")
    if record.last_used_at is None or now - record.last_used_at > _TOUCH_EVERY:
        with ctx.db.write() as session:
            session.get_one(ApiToken, record.id).last_used_at = now
    principal = Principal(
        account.id, account.name, account.is_admin, frozenset(record.scopes.split())
    )
    ctx.identities.put(TokenDigest(digest), KnownToken(principal, record.expires_at))
    return principal


def revoke_token(ctx: ServerContext, prefix: str) -> None:
    """Revoke the token, and the login sessions opened with it."""
    with ctx.db.write() as session:
        record = session.scalars(select(ApiToken).where(ApiToken.prefix == prefix)).first()
        if record is None:
            raise NotFoundError(f"no token starting with {prefix!r}")
        _revoke(ctx, session, record)
    forget_identities(ctx)


def _revoke(ctx: ServerContext, session: Session, record: ApiToken) -> None:
    now = ctx.now()
    record.revoked_at = now
    session.execute(
        update(AuthSession)
        .where(AuthSession.via == opened_with(record.id), AuthSession.revoked_at.is_(None))
        .values(revoked_at=now)
    )


# --- an account's own tokens (the site's /account page) -------------------------------

TOKEN_NAME_MAX = 64


@dataclass(frozen=True)
class TokenInfo:
    """One of an account's API tokens as its owner sees it (never the token itself)."""

    id: int
    name: str
    prefix: str
    scopes: tuple[str, ...]
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    revoked_at: datetime | None

    @classmethod
    def of(cls, record: ApiToken) -> TokenInfo:
        return cls(
            record.id,
            record.name,
            record.prefix,
            tuple(record.scopes.split()),
            record.created_at,
            record.expires_at,
            record.last_used_at,
            record.revoked_at,
        )


def grantable_scopes(principal: Principal, creates_benchmarks: bool = False) -> tuple[str, ...]:
    """The scopes ``principal`` may put on a new token: at most what it holds itself
    (``admin`` only when it acts as admin, and then every scope), in SCOPES order.

    ``benchmark:create`` also when the account holds that permission
    (``creates_benchmarks``, ``services/grants.py``) and the credential is its owner's
    (it holds ``model:register``, or ``benchmark:create`` itself): that is how an
    account that earned the permission gets a token to use it."""
    if principal.acts_as_admin:
        return SCOPES
    held = [s for s in DEFAULT_SCOPES if s in principal.scopes]
    if creates_benchmarks and ({"model:register", "benchmark:create"} & principal.scopes):
        held.append("benchmark:create")
    return tuple(s for s in SCOPES if s in held)


def checked_token_request(
    principal: Principal, scopes: list[str], name: str | None, creates_benchmarks: bool = False
) -> tuple[tuple[str, ...], str]:
    """The scopes (sorted, each once) and name of a new token ``principal`` asks for,
    or the error that says why it may not have it."""
    _check_known(scopes)
    wanted = tuple(s for s in SCOPES if s in scopes)
    if not wanted:
        raise ConfigError("choose at least one scope for the token")
    grantable = grantable_scopes(principal, creates_benchmarks)
    beyond = [s for s in wanted if s not in grantable]
    if beyond:
        raise PermissionDeniedError(
            f"this account may not grant {', '.join(beyond)}; it may grant "
            f"{', '.join(grantable) or 'no scope'}"
        )
    label = " ".join((name or "").split()) or "web"
    if len(label) > TOKEN_NAME_MAX or not label.isprintable():
        raise ConfigError(f"a token's name is at most {TOKEN_NAME_MAX} printable characters")
    return wanted, label


def _holds_benchmark_create(ctx: ServerContext, principal: Principal) -> bool:
    return grant_status(ctx, principal.account_id).held


def list_tokens(ctx: ServerContext, principal: Principal) -> list[TokenInfo]:
    """The account's API tokens, newest first, revoked ones included."""
    with ctx.db.read() as session:
        records = session.scalars(
            select(ApiToken)
            .where(ApiToken.account_id == principal.account_id)
            .order_by(ApiToken.id.desc())
        )
        return [TokenInfo.of(r) for r in records]


def create_token(
    ctx: ServerContext,
    principal: Principal,
    scopes: list[str],
    name: str | None = None,
    expires_in: timedelta | None = None,
) -> IssuedToken:
    """A new token of ``principal``'s account with ``scopes`` (at most what it may grant,
    :func:`grantable_scopes`), the site's form and ``POST /v0/tokens`` alike; the plain
    text is in the answer only."""
    creates = "benchmark:create" in scopes and _holds_benchmark_create(ctx, principal)
    wanted, label = checked_token_request(principal, scopes, name, creates)
    with ctx.db.write() as session:
        return add_token(
            ctx, session, principal.account_id, wanted, name=label, expires_in=expires_in
        )


def revoke_own_token(ctx: ServerContext, principal: Principal, token_id: int) -> TokenInfo:
    """Revoke token ``token_id`` of ``principal``'s account (and the login sessions
    opened with it). Another account's token is NotFoundError, as is an unknown one,
    for admins too (an operator revokes anyone's on the server machine: ``quorumbench
    token revoke``). A credential may revoke only a token whose scopes it holds itself
    (a runner's ``task:*`` token cannot revoke the ``model:register`` one). Revoking a
    revoked token changes nothing."""
    with ctx.db.write() as session:
        record = session.scalars(
            select(ApiToken).where(
                ApiToken.id == token_id, ApiToken.account_id == principal.account_id
            )
        ).first()
        if record is None:
            raise NotFoundError(f"this account has no API token {token_id}")
        beyond = sorted(set(record.scopes.split()) - principal.scopes)
        if beyond and not principal.acts_as_admin:
            raise PermissionDeniedError(
                f"token {token_id} has {', '.join(beyond)}, which this credential does not: "
                "revoke it with a credential that has them"
            )
        if record.revoked_at is None:
            _revoke(ctx, session, record)
        info = TokenInfo.of(record)
    forget_identities(ctx)
    return info
