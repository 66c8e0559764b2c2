"""Signing in on the site in process: a server per test (SQLite, then PostgreSQL), and
browsers (Starlette TestClients that ask for HTML, each with its own cookie jar) that
read the forms the pages show and post them as a browser would."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from quorumbench.api.app import create_app
from quorumbench.db.models import ApiToken
from quorumbench.db.session_models import WebSession
from quorumbench.services.context import ServerContext
from quorumbench.services.wiring import build_context
from quorumbench.settings import ServerSettings

from ..templates import migrated_sqlite


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 12, 10, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@dataclass
class SeenForm:
    """A ``<form>`` of a page: where it posts, and the values it would send as it is."""

    action: str
    method: str
    id: str | None
    fields: list[tuple[str, str]] = field(default_factory=list)

    def value(self, name: str) -> str:
        return next(v for k, v in self.fields if k == name)


class _Forms(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.forms: list[SeenForm] = []
        self.open: SeenForm | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.open = SeenForm(a.get("action", ""), a.get("method", "get"), a.get("id"))
            self.forms.append(self.open)
        elif tag == "input" and self.open is not None and "name" in a:
            kind = a.get("type", "text")
            if kind in ("checkbox", "radio") and "checked" not in a:
                return
            self.open.fields.append((a["name"], a.get("value", "")))

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.open = None


def forms_of(html: str) -> list[SeenForm]:
    parser = _Forms()
    parser.feed(html)
    return parser.forms


class Browser:
    """One browser on the site: its own cookies, ``Accept: text/html``."""

    def __init__(self, app: FastAPI, base_url: str = "http://testserver") -> None:
        self.client = TestClient(app, base_url=base_url, headers={"Accept": "text/html"})

    def __enter__(self) -> Browser:
        self.client.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.__exit__(*exc)

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.client.get(path, follow_redirects=False, **kwargs)

    def post(self, path: str, data: Any = None, **kwargs: Any) -> httpx.Response:
        """POST a form: ``data`` as a dict, or as (name, value) pairs in order."""
        if isinstance(data, list):
            headers = {"Content-Type": "application/x-www-form-urlencoded"}
            return self.client.post(
                path, content=urlencode(data), headers=headers, follow_redirects=False, **kwargs
            )
        return self.client.post(path, data=data, follow_redirects=False, **kwargs)

    def form(self, path: str, action: str) -> SeenForm:
        """The form posting to ``action`` on page ``path``."""
        page = self.get(path)
        assert page.status_code == 200, page.text
        return next(f for f in forms_of(page.text) if f.action == action)

    def submit(self, seen: SeenForm, /, **changes: Any) -> httpx.Response:
        """Post a form as shown, with fields replaced (a list: repeated, None: left out)."""
        fields = [(k, v) for k, v in seen.fields if k not in changes]
        for name, value in changes.items():
            if value is None:
                continue
            for one in value if isinstance(value, list) else [value]:
                fields.append((name, one))
        return self.post(seen.action, data=fields)

    def dev_signin(self, account: str) -> httpx.Response:
        answer = self.submit(self.form("/signin", "/signin/dev"), account=account)
        assert answer.status_code == 303, answer.text
        return answer

    def cookie(self, name: str) -> str | None:
        return self.client.cookies.get(name)

    def plant(self, name: str, value: str) -> None:
        """Put a cookie in this browser as if the site had set it (a kept or planted one)."""
        self.client.cookies.set(name, value, domain="testserver.local", path="/")


@dataclass
class Site:
    ctx: ServerContext
    app: FastAPI
    clock: Clock

    @contextmanager
    def browser(self, base_url: str = "http://testserver") -> Iterator[Browser]:
        with Browser(self.app, base_url) as browser:
            yield browser

    def count(self, table: Any, *where: Any) -> int:
        with self.ctx.db.read() as session:
            return int(session.scalar(select(func.count()).select_from(table).where(*where)) or 0)

    def tokens(self, account_id: int | None = None) -> int:
        where = [] if account_id is None else [ApiToken.account_id == account_id]
        return self.count(ApiToken, *where)

    def live_sessions(self) -> int:
        return self.count(WebSession, WebSession.revoked_at.is_(None))


@contextmanager
def serve_site(tmp: Path, url: str | None = None, **settings: Any) -> Iterator[Site]:
    """A server with the development sign-in on (unless ``settings`` say otherwise)."""
    clock = Clock()
    base: dict[str, Any] = {
        "data_dir": tmp,
        "database_url": url or migrated_sqlite(tmp / "site.db"),
        "benchmarks": ["arith"],
        "insecure_dev_login": True,
        "quota_evaluations": 3,
        "canary_rate": 0.0,
    }
    ctx = build_context(ServerSettings(**{**base, **settings}))
    ctx.clock = clock
    try:
        yield Site(ctx, create_app(ctx.settings, context=ctx, run_scheduler=False), clock)
    finally:
        ctx.close()
