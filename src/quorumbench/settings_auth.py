"""Login providers in the server's settings: OIDC issuers and OAuth 2 apps (configuration,
not code). ``quorumbench.settings`` re-exports them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

__all__ = ["OAUTH_PRESETS", "OAuthProvider", "OidcIssuer"]


class OidcIssuer(BaseModel):
    """One identity provider whose ID tokens the server accepts (configuration, not code)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    issuer: str = Field(description="The exact iss claim.")
    audience: str = Field(description="The aud claim the tokens must carry for this server.")
    jwks_url: str = Field(description="Where the issuer publishes its signing keys (JWKS).")
    algorithms: tuple[str, ...] = Field(
        ("RS256", "ES256", "EdDSA"), description="Signature algorithms accepted from it."
    )


OAUTH_PRESETS: dict[str, dict[str, Any]] = {
    "github": {
        "authorize_url": "https://github.com/login/oauth/authorize",
        "token_url": "https://github.com/login/oauth/access_token",
        "device_code_url": "https://github.com/login/device/code",
        "user_url": "https://api.github.com/user",
        "subject_field": "id",
        "name_field": "login",
        "scopes": (),
    },
}
"""Providers whose URLs are known: an operator sets only the client id and secret."""


class OAuthProvider(BaseModel):
    """An OAuth 2 login provider (configuration, not code): GitHub or one like it.

    ``preset`` (default: the provider's ``name`` when that is a known preset, e.g.
    ``github``) fills in the URLs and fields not given.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(
        pattern=r"^[a-z0-9][a-z0-9-]{0,31}$",
        description="The provider's name in URLs (/v0/auth/<name>/login) and in "
        "`quorumbench login --provider`.",
    )
    preset: str | None = Field(
        None, description="A known provider whose URLs are the defaults (github)."
    )
    client_id: str = Field(min_length=1, description="The OAuth app's client id.")
    client_secret: SecretStr = Field(description="The OAuth app's client secret.")
    authorize_url: str = Field(description="Where the browser is sent to log in (code flow).")
    token_url: str = Field(description="Where codes and device codes become access tokens.")
    device_code_url: str | None = Field(
        None, description="Where the device flow starts (RFC 8628); unset: no device flow."
    )
    user_url: str = Field(description="The API that describes the logged-in user (JSON).")
    subject_field: str = Field(
        "id", description="The field of the user document that never changes (GitHub: id)."
    )
    name_field: str = Field(
        "login", description="The field of the user document that names a new account."
    )
    scopes: tuple[str, ...] = Field((), description="OAuth scopes asked for.")
    redirect_uri: str | None = Field(
        None,
        description="The callback URL registered with the provider; unset: "
        "<this server>/v0/auth/<name>/callback as the request saw it.",
    )
    token_auth_method: Literal["client_secret_post", "client_secret_basic"] = Field(
        "client_secret_post", description="How the server authenticates at token_url."
    )
    device_client_auth: bool = Field(
        False,
        description="Also send the client secret when polling for a device-flow token "
        "(RFC 8628 3.4; GitHub needs none).",
    )

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        preset = data.get("preset") or data.get("name")
        if preset in OAUTH_PRESETS:
            return {**OAUTH_PRESETS[preset], **data, "preset": preset}
        if data.get("preset"):
            known = ", ".join(sorted(OAUTH_PRESETS))
            raise ValueError(f"unknown OAuth preset {data['preset']!r}; known: {known}")
        return data
