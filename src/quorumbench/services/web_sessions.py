"""The site's sign-in: server-side sessions behind an opaque cookie, and CSRF tokens.

A browser that signs in (with an OAuth provider's code flow, ``services/oauth.py``,
or the development login) gets a random id, 256 bits, in an HttpOnly cookie
(``web/session.py`` sets it); the server keeps only its SHA-256 in ``web_sessions``,
with the account, the scopes the site acts with, an expiry
(``QB_REFRESH_TOKEN_DAYS``, the lifetime of every login session) and the session's
CSRF token. Nothing long-lived ever reaches JavaScript. Signing in again in the same
browser ends the session it held and mints a new id (no fixation); signing out ends
it server-side, so the old cookie is worth nothing anywhere.

Every form that changes state carries the session's CSRF token (a synchronizer
token, compared in constant time: :func:`check_csrf`), and a form that makes
something also carries a one-time nonce (:func:`new_nonce`): the first post is
recorded in ``web_form_uses`` in the same transaction as what it makes, so a form
posted twice acts once. What the result page must show once (a new API token) is
kept there sealed with a key derived from the cookie, which the server does not
store, until the page shows it (:func:`created_token`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, NamedTuple

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy import delete, or_, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session

from quorumbench.db.models import Account, ApiToken
from quorumbench.db.session_models import WebFormUse, WebSession
from quorumbench.errors import (
    ConfigError,
    ConflictError,
    CsrfError,
    DatabaseUnavailableError,
    NotFoundError,
)
from quorumbench.services.accounts import (
    DEFAULT_SCOPES,
    Principal,
    TokenInfo,
    add_token,
    checked_token_request,
    token_hash,
)
from quorumbench.services.context import ServerContext
from quorumbench.services.grants import grant_status
from quorumbench.services.sessions import (
    DEV_LOGIN,
    development_account,
    development_scopes,
)

FORM_RESULT_MINUTES = 10
"""How long a created token waits, sealed, for its result page to show it."""
TOKEN_CREATE = "token:create"
"""``web_form_uses.action`` of the form that creates an API token."""
_NONCE = re.compile(r"^[A-Za-z0-9_-]{16,64}$")
_COOKIE_MAX = 100
"""A cookie longer than this is not one of ours (ours are 43 characters)."""


@dataclass(frozen=True)
class SignedIn:
    """A live site session: who is signed in, how, until when, and its CSRF token."""

    id: int
    account_id: int
    account: str
    is_admin: bool
    scopes: frozenset[str]
    csrf_token: str
    via: str
    created_at: datetime
    expires_at: datetime

    @property
    def principal(self) -> Principal:
        """The account as the services see a request's caller."""
        return Principal(self.account_id, self.account, self.is_admin, self.scopes)


class Ended(NamedTuple):
    """Why a browser's session cookie no longer signs it in."""

    reason: Literal["expired", "signed-out", "unknown"]
    at: datetime | None


class Lookup(NamedTuple):
    """The session a cookie names: live, ended (and why), or no cookie at all."""

    session: SignedIn | None
    ended: Ended | None


class Opened(NamedTuple):
    """A new session: the cookie's value (shown to the browser only) and the session."""

    cookie: str
    session: SignedIn


class CreatedToken(NamedTuple):
    """The token a token form made; ``token`` is the plain text the first time only."""

    info: TokenInfo
    token: str | None


def _signed_in(record: WebSession, account: Account) -> SignedIn:
    return SignedIn(
        record.id,
        account.id,
        account.name,
        account.is_admin,
        frozenset(record.scopes.split()),
        record.csrf_token,
        record.via,
        record.created_at,
        record.expires_at,
    )


def open_session(
    ctx: ServerContext,
    account: Account,
    via: str,
    scopes: Iterable[str],
    *,
    replacing: str | None = None,
) -> Opened:
    """A new session for ``account``; the session of cookie ``replacing`` (the one the
    browser held, if any) ends, so an id planted in a browser never becomes signed in."""
    cookie = secrets.token_urlsafe(32)
    now = ctx.now()
    stale = now - timedelta(days=1)
    with ctx.db.write() as session:
        # sessions that ended more than a day ago are of no use to anyone
        gone = select(WebSession.id).where(
            or_(WebSession.expires_at < stale, WebSession.revoked_at < stale)
        )
        session.execute(delete(WebFormUse).where(WebFormUse.session_id.in_(gone)))
        session.execute(delete(WebSession).where(WebSession.id.in_(gone)))
        if replacing:
            _end(session, token_hash(replacing), now)
        record = WebSession(
            account_id=account.id,
            token_hash=token_hash(cookie),
            csrf_token=secrets.token_urlsafe(32),
            scopes=" ".join(sorted(set(scopes))),
            via=via,
            created_at=now,
            expires_at=now + timedelta(days=ctx.settings.refresh_token_days),
            revoked_at=None,
        )
        session.add(record)
        session.flush()
        return Opened(cookie, _signed_in(record, account))


def sign_in(
    ctx: ServerContext, account: Account, via: str, *, replacing: str | None = None
) -> Opened:
    """A session for an account whose identity a provider vouched for (``via``: its
    issuer), with the default scopes, as the API's identity logins get."""
    return open_session(ctx, account, via, DEFAULT_SCOPES, replacing=replacing)


def sign_in_for_development(
    ctx: ServerContext, name: str, *, replacing: str | None = None
) -> Opened:
    """INSECURE, development only (``QB_INSECURE_DEV_LOGIN``, else NotFoundError): a
    session for account ``name`` (made if missing) without any credential."""
    account = development_account(ctx, name)
    scopes = development_scopes(account)
    return open_session(ctx, account, DEV_LOGIN, scopes, replacing=replacing)


def find_session(ctx: ServerContext, cookie: str | None) -> Lookup:
    """The live session of ``cookie``; else why there is none (no cookie: neither)."""
    if not cookie:
        return Lookup(None, None)
    if len(cookie) > _COOKIE_MAX:
        return Lookup(None, Ended("unknown", None))
    try:
        with ctx.db.read() as session:
            row = session.execute(
                select(WebSession, Account)
                .join(Account, Account.id == WebSession.account_id)
                .where(WebSession.token_hash == token_hash(cookie))
            ).first()
    except SQLAlchemyError as exc:  # every page asks: say what failed, in one line
        raise DatabaseUnavailableError(f"cannot read the browser's session: {exc}") from exc
    if row is None:
        return Lookup(None, Ended("unknown", None))
    record, account = row
    if record.revoked_at is not None:
        return Lookup(None, Ended("signed-out", record.revoked_at))
    if record.expires_at <= ctx.now():
        return Lookup(None, Ended("expired", record.expires_at))
    return Lookup(_signed_in(record, account), None)


def _end(session: Session, digest: str, now: datetime) -> None:
    ended = session.scalars(
        select(WebSession.id).where(
            WebSession.token_hash == digest, WebSession.revoked_at.is_(None)
        )
    ).all()
    if ended:
        session.execute(update(WebSession).where(WebSession.id.in_(ended)).values(revoked_at=now))
        session.execute(delete(WebFormUse).where(WebFormUse.session_id.in_(ended)))


def sign_out(ctx: ServerContext, cookie: str) -> None:
    """End the session of ``cookie`` (if it is live): the cookie signs nothing in from
    now on, on every replica (sessions are read from the database on every request)."""
    with ctx.db.write() as session:
        _end(session, token_hash(cookie), ctx.now())


def check_csrf(signed_in: SignedIn, submitted: str | None) -> None:
    """Refuse (CsrfError) a form that lacks the session's CSRF token or carries another."""
    expected = signed_in.csrf_token.encode()
    if not submitted or not hmac.compare_digest(submitted.encode(), expected):
        raise CsrfError(
            "this form's security token is missing or is not this session's (a form "
            "from another site, or a page from before you signed in again): nothing was "
            "changed; reload the page and submit it again"
        )


def new_nonce() -> str:
    """A one-time id for a form that makes something (see the module docstring)."""
    return secrets.token_urlsafe(24)


def _checked_nonce(nonce: str | None) -> str:
    if not nonce or not _NONCE.match(nonce):
        raise ConfigError("this form lacks its one-time id: reload the page and submit it again")
    return nonce


def _key(cookie: str, nonce: str) -> bytes:
    return hmac.new(cookie.encode(), f"qb-web-form:{nonce}".encode(), hashlib.sha256).digest()


def _seal(cookie: str, nonce: str, secret: str) -> str:
    iv = os.urandom(12)
    sealed = AESGCM(_key(cookie, nonce)).encrypt(iv, secret.encode(), nonce.encode())
    return base64.urlsafe_b64encode(iv + sealed).decode()


def _unseal(cookie: str, nonce: str, sealed: str) -> str | None:
    raw = base64.urlsafe_b64decode(sealed.encode())
    try:
        return AESGCM(_key(cookie, nonce)).decrypt(raw[:12], raw[12:], nonce.encode()).decode()
    except InvalidTag:  # not this cookie's: nothing to show
        return None


def create_token_once(
    ctx: ServerContext,
    signed_in: SignedIn,
    cookie: str,
    nonce: str | None,
    scopes: list[str],
    name: str | None,
) -> bool:
    """Make the API token a token form asks for, once per form (``nonce``); False when
    this form was posted before (nothing is made again). The token waits, sealed, for
    :func:`created_token`. Refusals (scopes beyond the session's, no scope, a bad name
    or nonce) change nothing and leave the form usable."""
    form = _checked_nonce(nonce)
    principal = signed_in.principal
    creates = "benchmark:create" in scopes and grant_status(ctx, principal.account_id).held
    wanted, label = checked_token_request(principal, scopes, name, creates)
    try:
        with ctx.db.write() as session:
            use = WebFormUse(
                session_id=signed_in.id, nonce=form, action=TOKEN_CREATE, created_at=ctx.now()
            )
            session.add(use)
            session.flush()  # a second post of this form stops here (unique key)
            issued = add_token(ctx, session, principal.account_id, wanted, name=label)
            use.result_id = issued.record.id
            use.sealed = _seal(cookie, form, issued.token)
        return True
    except IntegrityError:
        with ctx.db.read() as session:
            earlier = session.scalars(
                select(WebFormUse).where(
                    WebFormUse.session_id == signed_in.id, WebFormUse.nonce == form
                )
            ).first()
        if earlier is None:
            raise
        if earlier.action != TOKEN_CREATE:
            raise ConflictError("this form was used for something else already") from None
        return False


def created_token(
    ctx: ServerContext, signed_in: SignedIn, cookie: str, nonce: str | None
) -> CreatedToken:
    """The token that form ``nonce`` made in this session: its plain text the first
    time this is asked, within ``FORM_RESULT_MINUTES`` of its making; never again."""
    form = _checked_nonce(nonce)
    now = ctx.now()
    with ctx.db.write() as session:
        use = session.scalars(
            select(WebFormUse)
            .where(WebFormUse.session_id == signed_in.id, WebFormUse.nonce == form)
            .with_for_update()
        ).first()
        if use is None or use.action != TOKEN_CREATE or use.result_id is None:
            raise NotFoundError("no token was made by this form in this session")
        sealed, use.sealed = use.sealed, None
        record = session.get(ApiToken, use.result_id)
        if record is None:
            raise NotFoundError("the token this form made is gone")
        info = TokenInfo.of(record)
        fresh = use.created_at > now - timedelta(minutes=FORM_RESULT_MINUTES)
    token = _unseal(cookie, form, sealed) if sealed and fresh else None
    return CreatedToken(info, token)
