"""The command line's HTTP client for the account commands (``model``, ``token``,
``account show``, ``submission validate --server`` and ``submission apply``): a
credential, one request, one clear error.

The credential is ``QB_TOKEN`` (an API token) when it is set; otherwise the session
``quorumbench login`` kept for the server, exchanged at ``POST /v0/auth/refresh`` for
a short-lived access token. The server spends the refresh token it is sent and
answers a new one, which is written back to the sessions file at once (a command
that finds its refresh token spent by another one meanwhile takes the one saved).

Every failure is one :class:`~quorumbench.errors.QuorumError`, printed as one line by
the command line's ``handle_errors``: the server cannot be reached, the credential is
refused (401), not allowed (403), not found (404), too many requests (429, with
``Retry-After``) or the server failed (5xx). A problem document whose ``report``
member holds a submission report keeps it (:attr:`ApiError.problem`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx

from quorumbench import errors
from quorumbench.cli.login_cmd import default_session_file, save_session

TOKEN_ENV = "QB_TOKEN"
"""The environment variable whose API token takes precedence over a saved session."""
TIMEOUT_S = 60.0
"""Validating a ref reads the Hub: allow it time."""


class ApiError(errors.QuorumError):
    """A 4xx answer other than 401, 403, 404 and 429, with its problem document."""

    code = "api-error"

    def __init__(self, message: str, status: int, problem: dict[str, Any]) -> None:
        super().__init__(message)
        self.status = status
        self.problem = problem


def _problem(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = None
    return body if isinstance(body, dict) else {}


def _detail(response: httpx.Response, problem: dict[str, Any]) -> str:
    detail = problem.get("detail") or problem.get("title") or response.reason_phrase
    return str(detail or f"HTTP {response.status_code}")


def answer_error(server: str, response: httpx.Response, credential: str) -> errors.QuorumError:
    """The error a 4xx or 5xx answer stands for, in one line."""
    status = response.status_code
    problem = _problem(response)
    detail = _detail(response, problem)
    if status == 401:
        return errors.AuthenticationError(f"{server} refused {credential}: {detail}")
    if status == 403:
        return errors.PermissionDeniedError(f"{server} does not allow it: {detail}")
    if status == 404:
        return errors.NotFoundError(f"{server}: {detail}")
    if status == 429:
        header = response.headers.get("retry-after", "")
        retry = int(header) if header.isdigit() else None
        wait = f"; retry after {retry} s" if retry is not None else ""
        return errors.RateLimitedError(f"{server}: too many requests: {detail}{wait}", retry)
    if status >= 500:
        return errors.ServerUnavailableError(
            f"{server} failed (HTTP {status}): {detail}; try again later", status
        )
    return ApiError(f"{server} answered HTTP {status}: {detail}", status, problem)


def _json(server: str, response: httpx.Response) -> Any:
    """A successful answer's JSON body (a proxy's HTML page is one clear error)."""
    try:
        return response.json()
    except ValueError:
        raise errors.ServerUnavailableError(
            f"{server} answered HTTP {response.status_code} with something that is not JSON "
            f"({response.headers.get('content-type', 'no content type')}): is --server the "
            "QuorumBench server's URL?"
        ) from None


def _send(client: httpx.Client, method: str, path: str, **kwargs: Any) -> httpx.Response:
    try:
        return client.request(method, path, **kwargs)
    except httpx.HTTPError as exc:
        reason = str(exc) or type(exc).__name__
        raise errors.ServerUnavailableError(f"cannot reach {client.base_url}: {reason}") from None


def _saved_session(path: Path, server: str) -> dict[str, Any]:
    try:
        sessions = json.loads(path.read_text())
    except FileNotFoundError:
        sessions = {"servers": {}}
    except (OSError, ValueError) as exc:
        raise errors.ConfigError(f"cannot read the sessions file {path}: {exc}") from None
    servers = sessions.get("servers") if isinstance(sessions, dict) else None
    entry = servers.get(server) if isinstance(servers, dict) else None
    if not isinstance(entry, dict) or not isinstance(entry.get("refresh_token"), str):
        raise errors.AuthenticationError(
            f"not logged in to {server}: run `quorumbench login --server {server}`, or set "
            f"{TOKEN_ENV} to an API token"
        )
    return entry


def _refresh(client: httpx.Client, entry: dict[str, Any]) -> httpx.Response:
    return _send(client, "POST", "/v0/auth/refresh", json={"refresh_token": entry["refresh_token"]})


def session_token(client: httpx.Client, server: str, path: Path) -> str:
    """An access token from the session kept for ``server``; the rotated refresh token
    is saved back to ``path``. A refresh token another command spent and replaced in the
    meantime is followed to the one it saved."""
    entry = _saved_session(path, server)
    response = _refresh(client, entry)
    if response.status_code == 401:
        # Another command may have spent it meanwhile and saved the next one: try that.
        latest = _saved_session(path, server)
        if latest["refresh_token"] != entry["refresh_token"]:
            entry, response = latest, _refresh(client, latest)
    if response.status_code == 401:
        raise errors.AuthenticationError(
            f"the session kept for {server} has ended ({_detail(response, _problem(response))})"
            f": run `quorumbench login --server {server}` again"
        )
    if response.status_code != 200:
        raise answer_error(server, response, "the saved session")
    fresh = _problem(response)
    if not isinstance(fresh.get("access_token"), str) or "refresh_token" not in fresh:
        raise errors.ServerUnavailableError(f"{server} answered the refresh without a token")
    session = {"account": entry.get("account"), **fresh}
    try:
        save_session(path, server, str(entry.get("provider", "")), session)
    except OSError as exc:
        raise errors.ConfigError(
            f"cannot keep the refreshed session in {path}: {exc.strerror or exc}"
        ) from exc
    token: str = fresh["access_token"]
    return token


class Api:
    """Authenticated calls to one server; a context manager around an httpx client."""

    def __init__(self, server: str, *, session_file: Path | None = None) -> None:
        self.server = server.strip().rstrip("/")
        if not self.server.startswith(("http://", "https://")):
            raise errors.ConfigError(f"--server {server!r} is not an http:// or https:// URL")
        self._client = httpx.Client(base_url=self.server, timeout=TIMEOUT_S)
        self._session_file = session_file or default_session_file()
        self._token: str | None = None
        env = os.environ.get(TOKEN_ENV, "").strip()
        self._env_token = env or None
        self.credential = f"the API token in {TOKEN_ENV}" if env else "the saved session"

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *exc: object) -> None:
        self._client.close()

    def _authorization(self) -> dict[str, str]:
        if self._token is None:
            self._token = self._env_token or session_token(
                self._client, self.server, self._session_file
            )
        return {"Authorization": f"Bearer {self._token}"}

    def request(self, method: str, path: str, *, json: Any = None) -> httpx.Response:
        """The answer to an authenticated request, or the error it stands for."""
        response = _send(self._client, method, path, json=json, headers=self._authorization())
        if response.status_code >= 400:
            raise answer_error(self.server, response, self.credential)
        return response

    def get(self, path: str) -> Any:
        return _json(self.server, self.request("GET", path))

    def post(self, path: str, body: Any = None) -> Any:
        return _json(self.server, self.request("POST", path, json=body))

    def delete(self, path: str) -> None:
        self.request("DELETE", path)

    def public(self, path: str, params: dict[str, Any] | None = None) -> Any:
        """A request that needs no credential (the public model list)."""
        response = _send(self._client, "GET", path, params=params)
        if response.status_code >= 400:
            raise answer_error(self.server, response, "the request")
        return _json(self.server, response)

    def public_post(self, path: str, body: Any = None) -> Any:
        """A POST without a credential (an ask without endpoints)."""
        response = _send(self._client, "POST", path, json=body)
        if response.status_code >= 400:
            raise answer_error(self.server, response, "the request")
        return _json(self.server, response)
