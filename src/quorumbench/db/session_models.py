"""ORM models of sign-in: API logins (refresh sessions), federated identities, OAuth
logins in flight, the site's cookie sessions and its one-time form uses.

Kept out of ``db/models.py`` (which stays under 600 lines); imported by
``db/__init__.py``, so they are on ``Base.metadata`` with the rest.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from quorumbench.db.models import Base


class AuthSession(Base):
    """A login: the refresh token (hashed) behind short-lived access JWTs.

    Access tokens carry the session id (``sid``); revoking the session refuses its
    refresh token and every access token issued under it.
    """

    __tablename__ = "auth_sessions"

    id: Mapped[int] = mapped_column(primary_key=True)
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"))
    refresh_hash: Mapped[str] = mapped_column(String(64), unique=True)
    scopes: Mapped[str] = mapped_column(String(256))
    via: Mapped[str] = mapped_column(String(300))
    """How the session was opened: ``api-token`` or the OIDC issuer."""
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]


class FederatedIdentity(Base):
    """An account's identity at an OIDC issuer (``iss``, ``sub``)."""

    __tablename__ = "federated_identities"
    __table_args__ = (UniqueConstraint("issuer", "subject"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"))
    issuer: Mapped[str] = mapped_column(String(300))
    subject: Mapped[str] = mapped_column(String(300))
    created_at: Mapped[datetime]


class OAuthLogin(Base):
    """An OAuth login under way (services/oauth.py): single use, short-lived.

    A code-flow login keeps its PKCE verifier under the hash of its ``state``; a
    device-flow login keeps the provider's device code under the hash of the opaque
    handle the client polls with. ``used_at`` is set once, when it ends.
    """

    __tablename__ = "oauth_logins"

    id: Mapped[int] = mapped_column(primary_key=True)
    provider: Mapped[str] = mapped_column(String(32))
    kind: Mapped[str] = mapped_column(String(8))
    """``code`` or ``device``."""
    handle_hash: Mapped[str] = mapped_column(String(64), unique=True)
    secret: Mapped[str] = mapped_column(String(512))
    """The PKCE code verifier, or the provider's device code."""
    redirect_uri: Mapped[str | None] = mapped_column(String(1000))
    interval: Mapped[int | None] = mapped_column(Integer)
    """Device flow: the seconds the provider wants between polls."""
    polled_at: Mapped[datetime | None]
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime] = mapped_column(index=True)
    used_at: Mapped[datetime | None]


class WebSession(Base):
    """A browser signed in on the site (services/web_sessions.py).

    The browser holds only an opaque random id in an HttpOnly cookie; this row keeps
    its SHA-256, the account, the scopes the site may use for it and the session's
    CSRF token (the synchronizer token every state-changing form carries). Signing
    out sets ``revoked_at``; an expired or revoked session is signed out.
    """

    __tablename__ = "web_sessions"

    id: Mapped[int] = mapped_column(primary_key=True)
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    csrf_token: Mapped[str] = mapped_column(String(64))
    scopes: Mapped[str] = mapped_column(String(256))
    via: Mapped[str] = mapped_column(String(300))
    """How the browser signed in: ``oauth:<provider>`` or ``insecure-dev-login``."""
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]


class WebFormUse(Base):
    """A state-changing form of the site, posted once (its one-time ``nonce``).

    A second post of the same form finds this row and changes nothing. ``sealed``
    holds what the result page shows once (a new API token), encrypted with a key
    derived from the session's cookie, which the server does not keep: a reader of
    the database cannot open it. It is emptied when the page shows it.
    """

    __tablename__ = "web_form_uses"
    __table_args__ = (UniqueConstraint("session_id", "nonce"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("web_sessions.id", ondelete="CASCADE"))
    nonce: Mapped[str] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(32))
    result_id: Mapped[int | None] = mapped_column(Integer)
    """What the form made (``token:create``: the API token's id)."""
    sealed: Mapped[str | None] = mapped_column(String(512))
    created_at: Mapped[datetime]
