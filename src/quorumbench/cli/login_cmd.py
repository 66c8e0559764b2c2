"""``quorumbench login``: a session from an OAuth provider's device flow, kept on disk.

The server runs the flow (it holds the client secret): the CLI asks it for a user
code, shows the code and the provider's URL, polls the server every ``interval``
seconds (more slowly after a ``slow-down``) until the person approves, declines or
the code expires, and keeps the session's refresh token in a 0600 file.
"""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console

from quorumbench.cli._console import escape
from quorumbench.errors import (
    AuthenticationError,
    ConfigError,
    LoginDeniedError,
    LoginExpiredError,
    NotFoundError,
    QuorumError,
    ServerUnavailableError,
)

SLOW_DOWN_S = 5
"""RFC 8628 3.5: after ``slow_down`` without a new interval, wait five seconds more."""
_sleep = time.sleep  # tests replace it


def default_session_file() -> Path:
    """``$XDG_CONFIG_HOME/quorumbench/sessions.json`` (``~/.config`` by default)."""
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "quorumbench" / "sessions.json"


def _problem(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = None
    return body if isinstance(body, dict) else {"detail": f"HTTP {response.status_code}"}


def _error(response: httpx.Response, provider: str) -> QuorumError:
    problem = _problem(response)
    detail = str(problem.get("detail") or f"HTTP {response.status_code}")
    code = str(problem.get("type", "")).rsplit("/", 1)[-1]
    if code == "access-denied":
        return LoginDeniedError(f"the login was declined at {provider}")
    if code == "expired-token" or response.status_code == 410:
        return LoginExpiredError(
            "the code expired before it was approved; run `quorumbench login` again"
        )
    if response.status_code == 404:
        return NotFoundError(detail)
    if response.status_code >= 500:
        return ServerUnavailableError(f"the login failed: {detail}", response.status_code)
    return AuthenticationError(f"the login failed: {detail}")


def _post(client: httpx.Client, path: str, body: dict[str, Any] | None) -> httpx.Response:
    try:
        return client.post(path, json=body)
    except httpx.HTTPError as exc:
        raise ServerUnavailableError(f"cannot reach {client.base_url}: {exc}") from None


def device_login(server: str, provider: str, console: Console) -> dict[str, Any]:
    """Run the device flow through ``server``; the session once approved."""
    with httpx.Client(base_url=server, timeout=30.0) as client:
        answer = _post(client, f"/v0/auth/{provider}/device", None)
        if answer.status_code != 200:
            raise _error(answer, provider)
        started = _problem(answer)
        missing = {"device", "user_code", "verification_uri", "interval", "expires_in"}
        if missing - set(started):
            raise ServerUnavailableError(f"{server} did not start a device login: {answer.text}")
        try:
            interval, minutes = int(started["interval"]), int(started["expires_in"]) // 60
        except (TypeError, ValueError):
            raise ServerUnavailableError(
                f"{server} did not start a device login: {answer.text}"
            ) from None
        console.print(
            f"Open {escape(started['verification_uri'])} and enter the code "
            f"[bold]{escape(started['user_code'])}[/] (valid for {minutes} min).",
            highlight=False,
        )
        with console.status(f"Waiting for the login to be approved at {escape(provider)}…"):
            while True:
                _sleep(interval)
                answer = _post(
                    client, f"/v0/auth/{provider}/device/token", {"device": started["device"]}
                )
                if answer.status_code == 200:
                    session = _problem(answer)
                    if "refresh_token" not in session:
                        raise ServerUnavailableError(
                            f"{server} answered the login without a session: {answer.text}"
                        )
                    return session
                problem = _problem(answer)
                code = str(problem.get("type", "")).rsplit("/", 1)[-1]
                if answer.status_code != 428:
                    raise _error(answer, provider)
                if isinstance(problem.get("interval"), int):
                    interval = max(1, problem["interval"])
                elif code == "slow-down":
                    interval += SLOW_DOWN_S


def save_session(path: Path, server: str, provider: str, session: dict[str, Any]) -> None:
    """Keep the session's refresh token for ``server`` in ``path`` (mode 0600)."""
    sessions: Any = {"servers": {}}
    if path.exists():
        try:
            sessions = json.loads(path.read_text())
        except ValueError:
            sessions = None
        if not isinstance(sessions, dict) or not isinstance(sessions.get("servers"), dict):
            raise ConfigError(f"{path} is not a QuorumBench sessions file: move it away")
    sessions["servers"][server] = {
        "provider": provider,
        "account": session.get("account"),
        "scope": session.get("scope"),
        "refresh_token": session["refresh_token"],
        "saved_at": datetime.now(UTC).isoformat(),
    }
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".new")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # also when a stale .new file was there with another mode
    with os.fdopen(fd, "w") as out:
        json.dump(sessions, out, indent=2)
        out.write("\n")
    os.replace(tmp, path)


def login(server: str, provider: str, console: Console) -> None:
    base = server.rstrip("/")
    session = device_login(base, provider, console)
    path = default_session_file()
    try:
        save_session(path, base, provider, session)
    except OSError as exc:
        raise ConfigError(
            f"cannot keep the session in {path}: {exc.strerror or exc} (set XDG_CONFIG_HOME "
            "to a directory you can write)"
        ) from exc
    console.print(
        f"Logged in to {escape(base)} as [bold]{escape(session.get('account'))}[/] through "
        f"{escape(provider)}; the session is kept in {escape(path)}.",
        highlight=False,
    )
