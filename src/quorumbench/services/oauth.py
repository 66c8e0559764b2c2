"""Login with an OAuth 2 provider (GitHub and providers like it; configuration, not code).

GitHub's OAuth is not OpenID Connect: it issues no ID token, so the identity is
whatever its user API (``/user``) says for the access token, keyed on a field that
never changes (GitHub: ``id``, not ``login``). Two flows, both through Authlib:

* the code flow for the site: a random ``state`` and a PKCE S256 challenge go to
  the provider's authorize URL; the state's hash and the verifier are kept here,
  single use, for ``LOGIN_MINUTES``; the callback spends the state and exchanges the
  code with the verifier;
* the device flow (RFC 8628) for the CLI, proxied so the client secret never leaves
  the server: the client gets an opaque handle and polls this server, which polls
  the provider at most once per ``interval`` and maps ``authorization_pending``,
  ``slow_down`` (interval + 5 s), ``expired_token`` and ``access_denied`` to errors
  of their own.

Either way the provider's (name, user id) is linked to an account through
``federated_identities`` (made on first login, as for OIDC) and a session opens. A
code login started by the site's sign-in page (``for_site``) is kept as such, and its
callback gives the account to the site (``services/web_sessions.py`` opens a browser
session) instead of API tokens.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, NamedTuple, TypeVar

import httpx2
from authlib.integrations.httpx_client import OAuth2Client, OAuthError
from sqlalchemy import delete, or_, select, update

from quorumbench.db.models import Account
from quorumbench.db.session_models import OAuthLogin
from quorumbench.errors import (
    AuthenticationError,
    AuthorizationPendingError,
    InvalidStateError,
    LoginDeniedError,
    LoginExpiredError,
    NotFoundError,
    ProviderError,
    SlowDownError,
)
from quorumbench.services.accounts import token_hash
from quorumbench.services.context import ServerContext
from quorumbench.services.sessions import identity_account, login_with_identity
from quorumbench.settings import OAuthProvider

LOGIN_MINUTES = 10
"""How long a code-flow login may take between the redirect and the callback."""
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
DEFAULT_INTERVAL_S = 5
DEFAULT_DEVICE_EXPIRY_S = 900
TIMEOUT_S = 10.0
CODE = "code"
SITE = "site"
"""``oauth_logins.kind`` of a code login started by the site's sign-in page."""
T = TypeVar("T")


class CodeLogin(NamedTuple):
    authorize_url: str
    state: str
    redirect_uri: str


class _Spent(NamedTuple):
    secret: str
    redirect_uri: str | None
    interval: int


class _User(NamedTuple):
    """Who the provider's user API says logged in."""

    subject: str
    username: str | None


class SiteLogin(NamedTuple):
    """A code login started on the site, finished: its account and how it signed in."""

    account: Account
    via: str


def provider_for(ctx: ServerContext, name: str) -> OAuthProvider:
    provider = ctx.settings.oauth_provider(name)
    if provider is None:
        known = ", ".join(p.name for p in ctx.settings.oauth_providers) or "none"
        raise NotFoundError(f"no login provider {name!r} here (configured: {known})")
    return provider


def identity_issuer(provider: OAuthProvider) -> str:
    """What ``federated_identities.issuer`` holds for this provider's users."""
    return f"oauth:{provider.name}"


def _client(
    provider: OAuthProvider, redirect_uri: str | None = None, *, auth: str | None = None
) -> Any:
    return OAuth2Client(
        client_id=provider.client_id,
        client_secret=provider.client_secret.get_secret_value(),
        token_endpoint_auth_method=auth or provider.token_auth_method,
        scope=" ".join(provider.scopes) or None,
        redirect_uri=redirect_uri,
        code_challenge_method="S256",
        timeout=TIMEOUT_S,
    )


def _call(provider: OAuthProvider, work: Callable[[], T]) -> T:
    """``work()`` with network failures and nonsense answers as ProviderError."""
    try:
        return work()
    except httpx2.HTTPError as exc:
        raise ProviderError(f"{provider.name} could not be reached: {exc}") from None
    except ValueError as exc:  # a body that is not JSON
        raise ProviderError(f"{provider.name} answered with something unreadable: {exc}") from None


def _store(
    ctx: ServerContext,
    provider: OAuthProvider,
    kind: str,
    handle: str,
    secret: str,
    *,
    lifetime: timedelta,
    redirect_uri: str | None = None,
    interval: int | None = None,
) -> None:
    now = ctx.now()
    with ctx.db.write() as session:
        # logins abandoned more than a day ago are of no use to anyone
        session.execute(delete(OAuthLogin).where(OAuthLogin.expires_at < now - timedelta(days=1)))
        session.add(
            OAuthLogin(
                provider=provider.name,
                kind=kind,
                handle_hash=token_hash(handle),
                secret=secret,
                redirect_uri=redirect_uri,
                interval=interval,
                polled_at=None,
                created_at=now,
                expires_at=now + lifetime,
                used_at=None,
            )
        )


def _find(conn: Any, provider: OAuthProvider, kind: str, handle: str) -> Any:
    row = conn.execute(
        select(OAuthLogin).where(OAuthLogin.handle_hash == token_hash(handle))
    ).first()
    if row is None or row.provider != provider.name or row.kind != kind:
        what = "device login" if kind == "device" else "login state"
        raise InvalidStateError(f"unknown {what}: start the login again")
    return row


def _end(conn: Any, login_id: int, now: datetime) -> bool:
    """Mark the login used; False when someone else ended it first."""
    done = conn.execute(
        update(OAuthLogin)
        .where(OAuthLogin.id == login_id, OAuthLogin.used_at.is_(None))
        .values(used_at=now)
    )
    return bool(done.rowcount)


# --- the code flow (the site) ---------------------------------------------------------


def start_code_login(
    ctx: ServerContext, name: str, callback_url: str, *, for_site: bool = False
) -> CodeLogin:
    """The provider's authorize URL with a fresh state and PKCE challenge, remembered
    (``for_site``: as a login of the site's, whose callback signs the browser in)."""
    provider = provider_for(ctx, name)
    redirect_uri = provider.redirect_uri or callback_url
    state = secrets.token_urlsafe(32)
    verifier = secrets.token_urlsafe(64)  # 86 characters: RFC 7636 wants 43-128
    with _client(provider, redirect_uri) as client:
        url, _ = client.create_authorization_url(
            provider.authorize_url, state=state, code_verifier=verifier
        )
    _store(
        ctx,
        provider,
        SITE if for_site else CODE,
        state,
        verifier,
        lifetime=timedelta(minutes=LOGIN_MINUTES),
        redirect_uri=redirect_uri,
    )
    return CodeLogin(str(url), state, redirect_uri)


def started_on_site(ctx: ServerContext, name: str, state: str) -> bool:
    """Whether ``state`` is that of a code login the site's sign-in page started (the
    callback then answers the browser with a page, not with API tokens)."""
    with ctx.db.read_connection() as conn:
        kind = conn.execute(
            select(OAuthLogin.kind).where(
                OAuthLogin.handle_hash == token_hash(state), OAuthLogin.provider == name
            )
        ).scalar()
    return kind == SITE


def _spend_state(ctx: ServerContext, provider: OAuthProvider, kind: str, state: str) -> _Spent:
    now = ctx.now()
    with ctx.db.write_connection() as conn:
        row = _find(conn, provider, kind, state)
        if row.used_at is not None:
            raise InvalidStateError("this login state was used already: start the login again")
        if row.expires_at <= now:
            raise InvalidStateError(
                f"this login took longer than {LOGIN_MINUTES} minutes: start it again"
            )
        if not _end(conn, row.id, now):
            raise InvalidStateError("this login state was used already: start the login again")
    return _Spent(row.secret, row.redirect_uri, 0)


def _redeem_code(
    ctx: ServerContext,
    provider: OAuthProvider,
    kind: str,
    state: str,
    code: str | None,
    error: str | None,
) -> _User:
    """Spend ``state``, exchange ``code`` with its PKCE verifier; who logged in."""
    spent = _spend_state(ctx, provider, kind, state)
    if error == "access_denied":
        raise LoginDeniedError(f"the login was declined at {provider.name}")
    if error:
        raise ProviderError(f"{provider.name} refused the login: {error}")
    if not code:
        raise AuthenticationError(f"{provider.name} sent the browser back without a code")
    with _client(provider, spent.redirect_uri) as client:
        try:
            _call(
                provider,
                lambda: client.fetch_token(
                    provider.token_url,
                    grant_type="authorization_code",
                    code=code,
                    code_verifier=spent.secret,
                ),
            )
        except OAuthError as exc:
            raise _refusal(provider, exc, "the login code") from None
        return _user(provider, client)


def finish_code_login(
    ctx: ServerContext, name: str, state: str, code: str | None, error: str | None
) -> dict[str, Any]:
    """Spend ``state``, exchange ``code`` with its PKCE verifier, open a session."""
    provider = provider_for(ctx, name)
    return _login(ctx, provider, _redeem_code(ctx, provider, CODE, state, code, error))


def finish_site_login(
    ctx: ServerContext, name: str, state: str, code: str | None, error: str | None
) -> SiteLogin:
    """As :func:`finish_code_login` for a login the site started: its account (linked,
    or made on first login), for the site to open a browser session for."""
    provider = provider_for(ctx, name)
    user = _redeem_code(ctx, provider, SITE, state, code, error)
    issuer = identity_issuer(provider)
    return SiteLogin(identity_account(ctx, issuer, user.subject, user.username), issuer)


CODE_REFUSALS = frozenset({"bad_verification_code", "invalid_grant", "invalid_request"})
"""Token-endpoint errors that are the login's fault (a wrong, spent or stolen code,
a verifier that does not match); any other error is the server's configuration."""


def _refusal(provider: OAuthProvider, exc: Any, what: str) -> Exception:
    detail = f"{provider.name} refused {what}: {exc.error}"
    if exc.description:
        detail += f" ({exc.description})"
    if exc.error in CODE_REFUSALS:
        return AuthenticationError(detail)
    return ProviderError(detail + "; check the provider's settings (client id and secret)")


def _user(provider: OAuthProvider, client: Any) -> _User:
    """The user behind the client's access token, from the provider's user API."""
    try:
        response = _call(
            provider,
            lambda: client.get(provider.user_url, headers={"Accept": "application/json"}),
        )
    except OAuthError as exc:  # the token answer held no access token
        raise ProviderError(f"{provider.name} gave no usable access token ({exc.error})") from None
    if response.status_code != 200:
        raise ProviderError(f"{provider.name}'s user API answered {response.status_code}")
    user = _call(provider, response.json)
    subject = user.get(provider.subject_field) if isinstance(user, dict) else None
    if isinstance(subject, bool) or not isinstance(subject, int | str) or subject == "":
        raise ProviderError(
            f"{provider.name}'s user API gave no {provider.subject_field!r} to know the user by"
        )
    username = user.get(provider.name_field)
    return _User(str(subject), username if isinstance(username, str) else None)


def _login(ctx: ServerContext, provider: OAuthProvider, user: _User) -> dict[str, Any]:
    """The user linked to an account; a new session (API tokens)."""
    tokens, account = login_with_identity(
        ctx, identity_issuer(provider), user.subject, user.username
    )
    return {**tokens, "account": account.name, "provider": provider.name}


# --- the device flow (the CLI) --------------------------------------------------------


def start_device_login(ctx: ServerContext, name: str) -> dict[str, Any]:
    """Ask the provider for a user code; the client polls with the returned handle."""
    provider = provider_for(ctx, name)
    if not provider.device_code_url:
        raise NotFoundError(f"{provider.name} has no device flow here (no device_code_url)")
    url = provider.device_code_url
    form = {"client_id": provider.client_id}
    if provider.scopes:
        form["scope"] = " ".join(provider.scopes)
    with _client(provider) as client:
        response = _call(
            provider,
            lambda: client.request(
                "POST",
                url,
                data=form,
                headers={"Accept": "application/json"},
                withhold_token=True,
            ),
        )
        answer = _call(provider, response.json)
    if not isinstance(answer, dict) or "error" in answer or response.status_code != 200:
        error = answer.get("error") if isinstance(answer, dict) else None
        raise ProviderError(
            f"{provider.name} would not start a device login "
            f"({error or f'status {response.status_code}'})"
        )
    missing = [k for k in ("device_code", "user_code", "verification_uri") if not answer.get(k)]
    if missing:
        raise ProviderError(f"{provider.name}'s device code answer lacks {', '.join(missing)}")
    expires_in = int(answer.get("expires_in") or DEFAULT_DEVICE_EXPIRY_S)
    interval = int(answer.get("interval") or DEFAULT_INTERVAL_S)
    handle = secrets.token_urlsafe(32)
    _store(
        ctx,
        provider,
        "device",
        handle,
        str(answer["device_code"]),
        lifetime=timedelta(seconds=expires_in),
        interval=interval,
    )
    started = {
        "device": handle,
        "user_code": str(answer["user_code"]),
        "verification_uri": str(answer["verification_uri"]),
        "expires_in": expires_in,
        "interval": interval,
    }
    if answer.get("verification_uri_complete"):
        started["verification_uri_complete"] = str(answer["verification_uri_complete"])
    return started


def _claim_poll(ctx: ServerContext, provider: OAuthProvider, handle: str) -> _Spent:
    """Record a poll of ``handle``; SlowDownError when it comes before its interval."""
    now = ctx.now()
    with ctx.db.write_connection() as conn:
        row = _find(conn, provider, "device", handle)
        if row.used_at is not None:
            raise InvalidStateError("this device login has ended: start a new one")
        if row.expires_at <= now:
            raise LoginExpiredError("the code expired before it was approved: log in again")
        interval = row.interval or DEFAULT_INTERVAL_S
        done = conn.execute(
            update(OAuthLogin)
            .where(OAuthLogin.id == row.id, OAuthLogin.used_at.is_(None))
            .where(
                or_(
                    OAuthLogin.polled_at.is_(None),
                    OAuthLogin.polled_at <= now - timedelta(seconds=interval),
                )
            )
            .values(polled_at=now)
        )
        if not done.rowcount:
            raise SlowDownError(f"poll at most every {interval} s", interval)
    return _Spent(row.secret, None, interval)


def poll_device_login(ctx: ServerContext, name: str, handle: str) -> dict[str, Any]:
    """One poll: a session once the person approved, else the error that says why not."""
    provider = provider_for(ctx, name)
    claim = _claim_poll(ctx, provider, handle)
    auth = None if provider.device_client_auth else "none"
    with _client(provider, auth=auth) as client:
        try:
            _call(
                provider,
                lambda: client.fetch_token(
                    provider.token_url, grant_type=DEVICE_GRANT, device_code=claim.secret
                ),
            )
        except OAuthError as exc:
            raise _device_error(ctx, provider, handle, claim.interval, exc) from None
        with ctx.db.write_connection() as conn:
            row = _find(conn, provider, "device", handle)
            if not _end(conn, row.id, ctx.now()):
                raise InvalidStateError("this device login has ended: start a new one")
        return _login(ctx, provider, _user(provider, client))


def _device_error(
    ctx: ServerContext, provider: OAuthProvider, handle: str, interval: int, exc: Any
) -> Exception:
    if exc.error == "authorization_pending":
        return AuthorizationPendingError("waiting for the code to be approved", interval)
    if exc.error == "slow_down":  # RFC 8628 3.5: five more seconds, from now on
        slower = interval + 5
        with ctx.db.write_connection() as conn:
            conn.execute(
                update(OAuthLogin)
                .where(OAuthLogin.handle_hash == token_hash(handle))
                .values(interval=slower)
            )
        return SlowDownError(f"polling too fast: poll at most every {slower} s", slower)
    if exc.error in ("expired_token", "access_denied"):
        with ctx.db.write_connection() as conn:
            _end(conn, _find(conn, provider, "device", handle).id, ctx.now())
        if exc.error == "access_denied":
            return LoginDeniedError(f"the login was declined at {provider.name}")
        return LoginExpiredError("the code expired before it was approved: log in again")
    return ProviderError(
        f"{provider.name} refused the device login: {exc.error}"
        + (f" ({exc.description})" if exc.description else "")
    )
