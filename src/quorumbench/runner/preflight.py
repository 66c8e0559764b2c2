"""What the runner checks once, before its first pull: who it is, and that it can sign.

1. ``GET /v0/me``: the token is valid, and carries ``task:pull`` and ``task:submit``
   (a token that cannot submit would evaluate a task and then be refused).
2. The key file: ``--key-file`` / ``QB_RUNNER_KEY_FILE``, else the file of this server,
   account and runner (:func:`quorumbench.runner.keys.key_file_for`). A key from the
   time keys were kept per runner name (:func:`~quorumbench.runner.keys.legacy_key_file`)
   is copied there only when the server shows that very key registered and active for
   this account's runner; otherwise it is left alone.
3. ``GET /v0/runners/{name}/keys``: that key is registered to this account's runner,
   and not revoked (the server would refuse every result it signs).

Each failure is one :class:`~quorumbench.errors.ConfigError` line that says what to do:
which ``quorumbench runner init`` to run, or which token to ask for. ``runner init``
uses the same pieces (:func:`identify`, :func:`registered_keys`, :func:`default_key`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from quorumbench.errors import AuthenticationError, ConfigError, NotFoundError
from quorumbench.runner.client import Identity
from quorumbench.runner.keys import (
    RunnerKey,
    copy_key,
    key_file_for,
    legacy_key_file,
    load_key,
)
from quorumbench.settings import RunnerSettings

log = logging.getLogger("quorumbench.runner")

RUNNER_SCOPES = ("task:pull", "task:submit")
KeyStates = dict[str, bool]
"""key id → whether it is revoked, for this account's runner."""


class SetupClient(Protocol):
    """The part of :class:`~quorumbench.runner.client.ServerClient` the checks use."""

    def me(self) -> Identity: ...

    def runner_keys(self) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class Ready:
    """The pre-flight passed: who this runner is and the key it signs with."""

    identity: Identity
    key: RunnerKey


def init_hint(settings: RunnerSettings, *, key_file: bool = True, rotate: bool = False) -> str:
    """The ``quorumbench runner init`` command that sets this runner up."""
    words = [
        "quorumbench runner init",
        f"--server {settings.server_url}",
        f"--name {settings.name}",
    ]
    if key_file and settings.key_file is not None:
        words.append(f"--key-file {settings.key_file}")
    if rotate:
        words.append("--rotate")
    return f"`{' '.join(words)}`"


def identify(
    client: SetupClient, settings: RunnerSettings, needs: tuple[str, ...] = RUNNER_SCOPES
) -> Identity:
    """The token's account, once it is known to carry ``needs``."""
    url = settings.server_url
    try:
        identity = client.me()
    except NotFoundError:
        raise ConfigError(
            f"{url} answered 404 to GET /v0/me: it is not the root URL of a QuorumBench "
            "server (or the server is older than this runner)"
        ) from None
    except AuthenticationError as exc:
        raise AuthenticationError(
            f"{url} refused the token ({exc.message}): check --token / QB_RUNNER_TOKEN"
        ) from None
    missing = [scope for scope in needs if not identity.grants(scope)]
    if missing:
        raise ConfigError(
            f"this token of account {identity.account!r} lacks {' and '.join(missing)}: ask "
            "the server's admin for a token with --scope task:pull --scope task:submit "
            f"(`quorumbench token issue {identity.account} --scope task:pull --scope "
            "task:submit`)"
        )
    return identity


def registered_keys(client: SetupClient) -> KeyStates | None:
    """This runner's keys on the server; None when the account never used the name."""
    try:
        rows = client.runner_keys()
    except NotFoundError:
        return None
    return {str(row["key_id"]): row.get("revoked_at") is not None for row in rows}


class DefaultKey(NamedTuple):
    """The key at this runner's default path (adopted from a legacy file if need be)."""

    path: Path
    key: RunnerKey | None
    note: str
    """Why a legacy key file was not used ("" when there was none)."""


def default_key(settings: RunnerSettings, identity: Identity, keys: KeyStates | None) -> DefaultKey:
    """The key at the path of this server, account and runner, if there is one there.

    With none there, a legacy per-name key file is copied to that path when ``keys``
    shows that exact key registered and active for this runner; otherwise it is
    ignored, and ``note`` says so.
    """
    path = key_file_for(settings.server_url, identity.account, settings.name)
    if path.exists():
        return DefaultKey(path, load_key(path), "")
    legacy = legacy_key_file(settings.name)
    if not legacy.is_file():
        return DefaultKey(path, None, "")
    try:
        old = load_key(legacy)
    except ConfigError as exc:
        return DefaultKey(path, None, f" ({legacy} was not used: {exc.message})")
    if keys is None or keys.get(old.key_id) is not False:
        return DefaultKey(
            path,
            None,
            f" ({legacy}, an older key file for the name {settings.name!r}, was not used: it "
            f"is not an active key of this runner of account {identity.account!r})",
        )
    key = copy_key(old, path)
    log.info("adopted the key in %s (registered to this runner) as %s", legacy, path)
    return DefaultKey(path, key, "")


def check_key(
    key: RunnerKey, keys: KeyStates | None, settings: RunnerSettings, identity: Identity
) -> None:
    """Refuse a key the server would refuse results from, saying what to run."""
    who = f"runner {settings.name!r} of account {identity.account!r} on {settings.server_url}"
    if keys is None:
        raise ConfigError(f"{who} has no registered key: run {init_hint(settings)}")
    revoked = keys.get(key.key_id)
    if revoked is None:
        advice = f"run {init_hint(settings, key_file=False)}"
        if settings.key_file is not None:
            advice += " (without --key-file: it keeps a key per server, account and runner)"
        raise ConfigError(
            f"the key in {key.path} is not a key of {who} (another account's or runner's?): "
            f"{advice}"
        )
    if revoked:
        raise ConfigError(
            f"the key in {key.path} was revoked for {who} (a newer key was registered, or it "
            f"was revoked): run {init_hint(settings, rotate=True)}"
        )


def preflight(client: SetupClient, settings: RunnerSettings) -> Ready:
    """Check the token, find the key and check it is registered; see the module docstring."""
    identity = identify(client, settings)
    keys = registered_keys(client)
    if settings.key_file is not None:
        if not settings.key_file.exists():
            raise ConfigError(f"no signing key at {settings.key_file}: run {init_hint(settings)}")
        key = load_key(settings.key_file)
    else:
        found = default_key(settings, identity, keys)
        if found.key is None:
            raise ConfigError(
                f"no signing key for runner {settings.name!r} of account {identity.account!r} "
                f"at {found.path}{found.note}: run {init_hint(settings)}"
            )
        key = found.key
    check_key(key, keys, settings, identity)
    return Ready(identity, key)
