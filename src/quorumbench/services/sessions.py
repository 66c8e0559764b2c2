"""Login sessions: short-lived access JWTs with scopes, refresh tokens, revocation.

A session is opened with an API token (for scripts and CI) or an ID token from a
configured OIDC issuer (``QB_OIDC_ISSUERS``), and yields an access token (a JWT,
``QB_ACCESS_TOKEN_MINUTES``) plus a refresh token (opaque, stored hashed, rotated at
every refresh). JWTs are made and checked with PyJWT: the algorithm is fixed in code
(EdDSA with the server's Ed25519 key; an issuer's ID tokens with the algorithms its
configuration lists), never read from the token; ``exp``, ``iat``, ``sub`` and the
session id are required, and audience and issuer are checked. Revoking the session
refuses its refresh token and every access token issued under it.

:func:`authenticate` turns a request's bearer, an API token (``services/accounts.py``)
or an access JWT, into its principal.
"""

from __future__ import annotations

import re
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import jwt
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from quorumbench.db.models import Account, ApiToken
from quorumbench.db.session_models import AuthSession, FederatedIdentity
from quorumbench.errors import (
    AuthenticationError,
    ConfigError,
    ConflictError,
    NotFoundError,
    PermissionDeniedError,
)
from quorumbench.services.accounts import (
    DEFAULT_SCOPES,
    SCOPES,
    Principal,
    add_account,
    authenticate_api_token,
    create_account,
    get_account,
    opened_with,
    token_hash,
)
from quorumbench.services.context import IdentityKey, ServerContext, forget_identities
from quorumbench.services.keys import SigningKey, load_key_file
from quorumbench.settings import OidcIssuer, ServerSettings

ACCESS_ALGORITHM = "EdDSA"
AUDIENCE = "quorumbench"
KEY_FILE_NAME = "auth-signing-key.pem"
KEY_NAME = "auth signing key"
"""What errors about the key that signs access JWTs call it."""
REFRESH_PREFIX = "qbr_"
_JWKS: dict[str, jwt.PyJWKClient] = {}


def key_path(settings: ServerSettings) -> Path:
    """The file of the key that signs access JWTs (made on the server's first start)."""
    return settings.auth_key_file or settings.data_dir / KEY_FILE_NAME


def load_auth_key(settings: ServerSettings) -> SigningKey:
    """The key that signs access JWTs (not the log's: each key has one job), made if
    missing; read once, when the server's context is built (``services/wiring.py``)."""
    return load_key_file(key_path(settings), KEY_NAME, create=True)


def auth_signer_for(ctx: ServerContext) -> SigningKey:
    """The key that signs and checks access JWTs, which the server's context holds from
    its start; admin and reader contexts hold none (they issue and check no JWT)."""
    if ctx.auth_signer is None:
        raise ConfigError(
            "this context holds no auth signing key: only the server's context "
            "(build_context) loads it; admin and reader contexts issue and check no JWT"
        )
    return ctx.auth_signer


class KnownSession(NamedTuple):
    """What an access JWT's check needs of its session (and the session's account)."""

    revoked_at: datetime | None
    expires_at: datetime
    name: str
    is_admin: bool


@dataclass(frozen=True)
class SessionId(IdentityKey[KnownSession]):
    """The identity cache's key for a login session (an access JWT's ``sid``)."""

    session_id: int


def looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2 and not token.startswith(("qb_", REFRESH_PREFIX))


def _scopes(requested: list[str] | None, allowed: frozenset[str], is_admin: bool) -> list[str]:
    wanted = set(allowed if requested is None else requested)  # [] asks for no scope
    unknown = sorted(wanted - set(SCOPES))
    if unknown:
        raise ConfigError(f"unknown scope(s) {', '.join(unknown)}; known: {', '.join(SCOPES)}")
    if "admin" in wanted and not is_admin:
        raise PermissionDeniedError("only an admin account can have the 'admin' scope")
    beyond = sorted(wanted - allowed) if "admin" not in allowed else []
    if beyond:
        raise PermissionDeniedError(f"the credential does not grant {', '.join(beyond)}")
    return sorted(wanted)


def _open(
    ctx: ServerContext,
    account: Account,
    scopes: list[str],
    via: str,
    until: datetime | None = None,
) -> dict[str, Any]:
    """A new session; it ends by ``until`` too (the expiry of the credential behind it)."""
    refresh = REFRESH_PREFIX + secrets.token_urlsafe(32)
    now = ctx.now()
    expires_at = now + timedelta(days=ctx.settings.refresh_token_days)
    if until is not None:
        expires_at = min(expires_at, until)
    with ctx.db.write() as session:
        record = AuthSession(
            account_id=account.id,
            refresh_hash=token_hash(refresh),
            scopes=" ".join(scopes),
            via=via,
            created_at=now,
            expires_at=expires_at,
            revoked_at=None,
        )
        session.add(record)
        session.flush()
        session_id = record.id
    return _tokens(ctx, account, session_id, scopes, refresh)


def _tokens(
    ctx: ServerContext, account: Account, session_id: int, scopes: list[str], refresh: str
) -> dict[str, Any]:
    now = ctx.now()
    lifetime = timedelta(minutes=ctx.settings.access_token_minutes)
    claims = {
        "iss": ctx.settings.jwt_issuer,
        "aud": AUDIENCE,
        "sub": str(account.id),
        "name": account.name,
        "scope": " ".join(scopes),
        "sid": session_id,
        "jti": uuid.uuid4().hex,
        "iat": now,
        "nbf": now,
        "exp": now + lifetime,
    }
    access = jwt.encode(claims, auth_signer_for(ctx).key, algorithm=ACCESS_ALGORITHM)
    return {
        "access_token": access,
        "token_type": "Bearer",
        "expires_in": int(lifetime.total_seconds()),
        "refresh_token": refresh,
        "scope": " ".join(scopes),
    }


def login_with_api_token(
    ctx: ServerContext, api_token: str, scopes: list[str] | None
) -> dict[str, Any]:
    """A session for the API token's account, with at most the token's scopes; it ends
    when the token expires or is revoked (accounts.revoke_token)."""
    principal = authenticate_api_token(ctx, api_token)
    account = _account(ctx, principal.account_id)
    granted = _scopes(scopes, principal.scopes, account.is_admin)
    with ctx.db.read() as session:
        record = session.scalars(
            select(ApiToken).where(ApiToken.token_hash == token_hash(api_token))
        ).one()
    return _open(ctx, account, granted, opened_with(record.id), until=record.expires_at)


def _account(ctx: ServerContext, account_id: int) -> Account:
    with ctx.db.read() as session:
        account = session.get(Account, account_id)
    if account is None:
        raise AuthenticationError("the account is gone")
    return account


def _issuer(ctx: ServerContext, token: str) -> OidcIssuer:
    try:
        claimed = jwt.decode(token, options={"verify_signature": False}).get("iss")
    except jwt.PyJWTError as exc:
        raise AuthenticationError(f"not a readable ID token: {exc}") from None
    for issuer in ctx.settings.oidc_issuers:
        if issuer.issuer == claimed:
            return issuer
    raise AuthenticationError(f"ID tokens from {claimed!r} are not accepted here")


def login_with_oidc(ctx: ServerContext, id_token: str, scopes: list[str] | None) -> dict[str, Any]:
    """A session for the account linked to the ID token's (issuer, subject).

    The first login of an identity makes its account (named after the token's
    ``preferred_username``, else its subject), with the default scopes.
    """
    issuer = _issuer(ctx, id_token)
    jwks = _JWKS.get(issuer.jwks_url)
    if jwks is None:
        jwks = _JWKS.setdefault(
            issuer.jwks_url, jwt.PyJWKClient(issuer.jwks_url, cache_keys=True, lifespan=300)
        )
    try:
        key = jwks.get_signing_key_from_jwt(id_token)
        claims = jwt.decode(
            id_token,
            key.key,
            algorithms=list(issuer.algorithms),
            audience=issuer.audience,
            issuer=issuer.issuer,
            options={"require": ["exp", "iat", "sub", "iss", "aud"]},
        )
    except jwt.PyJWTError as exc:
        raise AuthenticationError(f"ID token refused: {exc}") from None
    account = _federated_account(ctx, issuer.issuer, str(claims["sub"]), claims)
    granted = _scopes(scopes, frozenset(DEFAULT_SCOPES), account.is_admin)
    return _open(ctx, account, granted, issuer.issuer)


class IdentityLogin(NamedTuple):
    tokens: dict[str, Any]
    account: Account


def identity_account(
    ctx: ServerContext, issuer: str, subject: str, username: str | None
) -> Account:
    """The account linked to ``(issuer, subject)``, made on first login.

    For identities another module has checked (an OAuth provider's user API): the
    account is named after ``username`` (else the subject).
    """
    return _federated_account(ctx, issuer, subject, {"preferred_username": username})


def login_with_identity(
    ctx: ServerContext, issuer: str, subject: str, username: str | None
) -> IdentityLogin:
    """A session for the account linked to ``(issuer, subject)`` (:func:`identity_account`),
    with the default scopes."""
    account = identity_account(ctx, issuer, subject, username)
    granted = _scopes(None, frozenset(DEFAULT_SCOPES), account.is_admin)
    return IdentityLogin(_open(ctx, account, granted, issuer), account)


DEV_LOGIN = "insecure-dev-login"
"""How a development login's session says it was opened."""


def development_account(ctx: ServerContext, name: str) -> Account:
    """Account ``name`` (made if missing), for the development login only.

    Only with ``QB_INSECURE_DEV_LOGIN`` (never on by default): anyone who can reach
    the server can then act as anyone.
    """
    if not ctx.settings.insecure_dev_login:
        raise NotFoundError("the development login is off (QB_INSECURE_DEV_LOGIN)")
    try:
        return get_account(ctx, name)
    except NotFoundError:
        try:
            return create_account(ctx, name)
        except ConflictError:  # made at the same moment by another login
            return get_account(ctx, name)


def development_scopes(account: Account) -> frozenset[str]:
    """What a development login may grant: every scope for an admin account."""
    return frozenset(SCOPES if account.is_admin else DEFAULT_SCOPES)


def login_for_development(
    ctx: ServerContext, name: str, scopes: list[str] | None
) -> dict[str, Any]:
    """A session for account ``name`` (made if missing) without any credential
    (:func:`development_account`)."""
    account = development_account(ctx, name)
    granted = _scopes(scopes, development_scopes(account), account.is_admin)
    return _open(ctx, account, granted, DEV_LOGIN)


def _federated_account(
    ctx: ServerContext, issuer: str, subject: str, claims: dict[str, Any]
) -> Account:
    """The account linked to ``(issuer, subject)``, made and linked on first login.

    The account and its link are written in one transaction, so two first logins of
    one identity at once cannot both link it: the loser's transaction (account
    included) rolls back on the link's unique key, and it returns the winner's account.
    """
    linked = _linked(ctx, issuer, subject)
    if linked is not None:
        return linked
    base = re.sub(r"[^a-z0-9_.-]+", "-", str(claims.get("preferred_username") or subject).lower())
    base = base.strip("-.")[:40] or "user"
    name = base if len(base) >= 2 else f"{base}-user"
    for _ in range(5):
        try:
            with ctx.db.write() as session:
                account = add_account(ctx, session, name)
                session.add(
                    FederatedIdentity(
                        account_id=account.id, issuer=issuer, subject=subject, created_at=ctx.now()
                    )
                )
                session.flush()
                return account
        except (ConfigError, IntegrityError):  # the name is taken, or the identity linked
            linked = _linked(ctx, issuer, subject)
            if linked is not None:
                return linked
            name = f"{base}-{secrets.token_hex(3)}"
    raise ConfigError(f"cannot make an account for {issuer} {subject}")


def _linked(ctx: ServerContext, issuer: str, subject: str) -> Account | None:
    with ctx.db.read() as session:
        found: Account | None = session.scalars(
            select(Account)
            .join(FederatedIdentity, FederatedIdentity.account_id == Account.id)
            .where(FederatedIdentity.issuer == issuer, FederatedIdentity.subject == subject)
        ).first()
        return found


def refresh(ctx: ServerContext, refresh_token: str) -> dict[str, Any]:
    """New access and refresh tokens; the refresh token used is spent."""
    now = ctx.now()
    new = REFRESH_PREFIX + secrets.token_urlsafe(32)
    with ctx.db.write() as session:
        record = session.scalars(
            select(AuthSession).where(AuthSession.refresh_hash == token_hash(refresh_token))
        ).first()
        if record is None:
            raise AuthenticationError("unknown or already used refresh token")
        if record.revoked_at is not None or record.expires_at <= now:
            raise AuthenticationError("this session was revoked or has expired")
        record.refresh_hash = token_hash(new)
        session_id, account_id, scopes = record.id, record.account_id, record.scopes.split()
    return _tokens(ctx, _account(ctx, account_id), session_id, scopes, new)


def revoke(ctx: ServerContext, refresh_token: str) -> None:
    """End the session of ``refresh_token``: it and every access token under it stop."""
    with ctx.db.write() as session:
        record = session.scalars(
            select(AuthSession).where(AuthSession.refresh_hash == token_hash(refresh_token))
        ).first()
        if record is None:
            raise AuthenticationError("unknown or already used refresh token")
        if record.revoked_at is None:
            record.revoked_at = ctx.now()
    forget_identities(ctx)


def authenticate(ctx: ServerContext, token: str | None) -> Principal:
    """The principal behind a bearer token (an API token or an access JWT)."""
    if not token:
        raise AuthenticationError("missing API token (Authorization: Bearer qb_…)")
    if token.count(".") == 2 and not token.startswith("qb_"):
        return authenticate_jwt(ctx, token)
    return authenticate_api_token(ctx, token)


def authenticate_jwt(ctx: ServerContext, token: str) -> Principal:
    """The principal of an access JWT; AuthenticationError saying why it is refused."""
    try:
        claims = jwt.decode(
            token,
            auth_signer_for(ctx).key.public_key(),
            algorithms=[ACCESS_ALGORITHM],
            audience=AUDIENCE,
            issuer=ctx.settings.jwt_issuer,
            # times are checked below against the server's clock (tests move it)
            options={
                "require": ["exp", "iat", "sub", "sid", "jti"],
                "verify_exp": False,
                "verify_iat": False,
                "verify_nbf": False,
            },
        )
    except jwt.PyJWTError as exc:
        raise AuthenticationError(f"access token refused: {exc}") from None
    now = ctx.now().timestamp()
    if not isinstance(claims["exp"], int | float) or claims["exp"] <= now:
        raise AuthenticationError("access token refused: it has expired")
    if claims.get("nbf", 0) > now + 30 or claims["iat"] > now + 30:
        raise AuthenticationError("access token refused: it is not valid yet")
    session_id = int(claims["sid"])
    cached = ctx.identities.get(SessionId(session_id))
    if cached is None:
        with ctx.db.read() as session:
            row = session.execute(
                select(AuthSession.revoked_at, AuthSession.expires_at, Account)
                .join(Account, Account.id == AuthSession.account_id)
                .where(AuthSession.id == session_id)
            ).first()
        if row is None:
            raise AuthenticationError("access token refused: unknown session")
        cached = KnownSession(
            row.revoked_at, row.expires_at, row.Account.name, row.Account.is_admin
        )
        ctx.identities.put(SessionId(session_id), cached)
    if cached.revoked_at is not None:
        raise AuthenticationError("access token refused: its session was revoked")
    if cached.expires_at <= ctx.now():
        raise AuthenticationError("access token refused: its session has expired")
    scopes = frozenset(str(claims.get("scope", "")).split())
    return Principal(int(claims["sub"]), cached.name, cached.is_admin, scopes)
