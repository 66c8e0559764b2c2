"""The authorization matrix: every endpoint × every caller, no unauthorized answer.

The world: two accounts, alice (who owns every targeted resource) and bob, each with
models, a runner with a registered signing key, leases (one submitted, one active),
results and API tokens; carol owns two more models (one finalized, so the public log
has an entry; one open to pull); dave is a third runner; an admin. It is built once,
and the app serves a copy of it that is put back (SQLite's backup API, in place)
after every case that changed it.

Callers: anonymous; alice and bob with every set of the default scopes (none, each
one, all but one, all), each as an API token issued with those scopes and as a
session JWT from ``POST /v0/auth/token`` (a full API token and a ``scopes`` list);
the admin (``admin`` scope, token and JWT); the admin account with a token narrowed
to ``model:register``. Public endpoints are called by one caller of each kind.

Every case: no 2xx (or redirect) unless the caller holds the declared scope and owns
the target (or the endpoint is public, or the caller acts as admin); anonymous gets
401, a missing scope 403 naming it, someone else on alice's lease, runner or keys
403 or 404; a refused request changes no row, and no request by anyone but alice
changes alice's rows (but an admin's moderation: retiring her model). Every route
of the app must have a row in :data:`VARIANTS` (``test_every_route_is_in_the_matrix``):
a new endpoint cannot slip past.
"""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import fastapi.routing
import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from nacl.signing import SigningKey
from pydantic import SecretStr

from quorumbench.api.app import create_app
from quorumbench.core.canonical import sha256_hex
from quorumbench.db.pool_models import Pool
from quorumbench.services import asks, ledger, pools
from quorumbench.services import models as registry
from quorumbench.services.accounts import (
    DEFAULT_SCOPES,
    Principal,
    create_account,
    issue_token,
    revoke_token,
)
from quorumbench.services.context import ServerContext, forget_identities
from quorumbench.services.pools import PoolSpec
from quorumbench.services.scheduler import ensure_epoch, schedule_epoch
from quorumbench.services.wiring import build_context
from quorumbench.settings import OAuthProvider, ServerSettings

from ..signing import signature
from .conftest import FakeClock, _settings, fake_metadata, hub_ref
from .test_api import payload

OWNER = "alice"
PUBLIC = "public"
"""No credential needed (or the credential is in the body)."""
ANY = "any"
"""Any valid credential, whatever its scopes."""
VOLATILE = {("api_tokens", "last_used_at"), ("runners", "last_seen_at")}
"""Columns a read may touch (bookkeeping, not state): left out of every comparison."""
LOCAL_REF = "gguf:/srv/models/x.gguf@" + "a" * 64
TASKS = 6
"""Tasks the setup schedules; also the epoch's task budget (see _build_world)."""
UNREACHABLE = "http://127.0.0.1:9"
FAILURE_REASON = "the checkpoint does not load: missing tensor lm_head.weight"
"""What dave's runner reported about alice's first model."""
PROVIDER = OAuthProvider(
    name="example",
    client_id="client",
    client_secret=SecretStr("secret"),
    authorize_url=f"{UNREACHABLE}/authorize",
    token_url=f"{UNREACHABLE}/token",
    device_code_url=f"{UNREACHABLE}/device",
    user_url=f"{UNREACHABLE}/user",
)
"""An OAuth login provider that cannot be reached: the flows start, and go no further."""


# --- callers ----------------------------------------------------------------------


@dataclass(frozen=True)
class Caller:
    label: str
    account: str | None  # None: anonymous
    scopes: frozenset[str] = frozenset()
    kind: str = "none"  # "token" (an API token) or "jwt" (a session's access token)

    def holds(self, scope: str) -> bool:
        return scope in self.scopes or "admin" in self.scopes

    @property
    def runner(self) -> str:
        return f"{self.account or OWNER}-box"


def _scope_sets() -> list[frozenset[str]]:
    """Every subset of the default scopes: none, each one, all but one, all."""
    return [
        frozenset(combo)
        for size in range(len(DEFAULT_SCOPES) + 1)
        for combo in itertools.combinations(DEFAULT_SCOPES, size)
    ]


def _label(scopes: frozenset[str]) -> str:
    return "+".join(sorted(s.split(":")[-1] for s in scopes)) or "none"


CALLERS = [
    Caller("anonymous", None),
    *(
        Caller(f"{who}-{kind}-{_label(scopes)}", who, scopes, kind)
        for who in (OWNER, "bob")
        for scopes in _scope_sets()
        for kind in ("token", "jwt")
    ),
    *(Caller(f"admin-{kind}", "admin", frozenset({"admin"}), kind) for kind in ("token", "jwt")),
    *(
        Caller(f"admin-account-{kind}-register", "admin", frozenset({"model:register"}), kind)
        for kind in ("token", "jwt")
    ),
]


REPRESENTATIVES = [
    caller
    for caller in CALLERS
    if caller.label
    in {
        "anonymous",
        "alice-token-none",
        "alice-jwt-pull+register+submit",
        "bob-token-pull+register+submit",
        "bob-jwt-none",
        "admin-token",
        "admin-account-jwt-register",
    }
]
"""Every kind of caller once: who calls public endpoints (the header must not matter)."""


# --- the world --------------------------------------------------------------------


@dataclass
class Facts:
    """What the setup made: ids, credentials, keys and request bodies (the same in every
    copy of the database)."""

    accounts: dict[str, int] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)  # caller label (or account) -> bearer
    models: dict[str, int] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)
    keys: dict[str, SigningKey] = field(default_factory=dict)  # account -> current key
    leases: dict[str, dict[str, Any]] = field(default_factory=dict)
    bodies: dict[str, dict[str, Any]] = field(default_factory=dict)
    alice_runner: int = 0
    done_task: int = 0
    epoch: int = 0
    pull_key: str = "alice-pull-0001"
    refresh_token: str = ""
    spare_token: int = 0
    """An API token of alice's with ``task:pull`` only (revoked by the matrix)."""
    fresh_key: SigningKey = field(default_factory=SigningKey.generate)
    ask: str = ""
    """A cache-only ask (no endpoints): anyone with its id may read it."""
    plan: str = ""
    """Its public plan's id."""
    pools: dict[str, int] = field(default_factory=dict)
    """alice's pools: ``open`` (joins open), ``ended`` (a held-out split, ended)."""
    pool_times: dict[str, str] = field(default_factory=dict)

    def alice_key_id(self) -> str:
        return sha256_hex(bytes(self.keys[OWNER].verify_key))


def auth(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def _submit_body(
    facts: Facts, who: str, lease: dict[str, Any], score: float, now: datetime
) -> dict[str, Any]:
    body: dict[str, Any] = payload(lease, score)  # type: ignore[no-untyped-call]
    body["signature"] = signature(facts.keys[who], lease, body["result"], now.isoformat())
    return body


def _build_world(client: TestClient, ctx: ServerContext, facts: Facts) -> None:
    """Accounts, tokens, keys, models, leases, results and sessions."""

    def post(path: str, token: str, expect: int, **kwargs: Any) -> Any:
        answer = client.post(path, headers=auth(token), **kwargs)
        assert answer.status_code == expect, (path, answer.text)
        return answer.json() if answer.content else None

    def pull(who: str, model: str, **extra: Any) -> dict[str, Any]:
        body = {"runner": f"{who}-box", **extra}
        lease: dict[str, Any] = post("/v0/leases", facts.tokens[who], 201, json=body)
        assert lease["task"]["model"]["id"] == facts.models[model], (who, model, lease)
        return lease

    def submit(who: str, lease: dict[str, Any], score: float) -> dict[str, Any]:
        body = _submit_body(facts, who, lease, score, ctx.now())
        path = f"/v0/leases/{lease['lease_id']}/result"
        post(path, facts.tokens[who], 201, params={"runner": f"{who}-box"}, json=body)
        return body

    create_account(ctx, "admin", is_admin=True)
    for name in (OWNER, "bob", "carol", "dave"):
        create_account(ctx, name)
        facts.tokens[name] = issue_token(ctx, name, name="full").token
    facts.tokens["admin"] = issue_token(ctx, "admin", scopes=("admin",)).token
    facts.spare_token = issue_token(ctx, OWNER, scopes=("task:pull",), name="spare").record.id
    with ctx.db.read_connection() as conn:
        facts.accounts = dict(conn.exec_driver_sql("SELECT name, id FROM accounts").all())
    for who in (OWNER, "bob", "carol", "dave", "admin"):
        facts.keys[who] = SigningKey.generate()
        public = bytes(facts.keys[who].verify_key).hex()
        key = post(
            f"/v0/runners/{who}-box/keys", facts.tokens[who], 201, json={"public_key": public}
        )
        if who == OWNER:
            facts.alice_runner = key["runner_id"]
    # Six models, scheduled at once (one sample draw); the epoch's task budget is six,
    # so a model registered by the matrix gets no task (and costs no draw). Claims go
    # in model order, so each pull below knows which task it gets.
    for n, (label, who) in enumerate(
        [("C1", "carol"), ("A1", OWNER), ("B1", "bob"), ("A2", OWNER), ("B2", "bob")]
        + [("C2", "carol")],
        start=1,
    ):
        facts.refs[label] = hub_ref(n)
        owner = Principal(facts.accounts[who], who, False, frozenset(DEFAULT_SCOPES))
        facts.models[label] = registry.register_model(ctx, owner, facts.refs[label]).id
    assert schedule_epoch(ctx, ensure_epoch(ctx, ctx.now())) == TASKS
    asked = asks.create(ctx, owner_id=None, plan={"budget": 10})
    facts.ask, facts.plan = asked.id, asked.plan_id
    _build_pools(ctx, facts)
    # carol's first model is finalized by three other accounts: the log gets an entry
    for who in (OWNER, "bob", "dave"):
        submit(who, pull(who, "C1"), 0.5)
    facts.done_task = client.get("/v0/tasks", params={"status": "DONE"}).json()[0]["id"]
    # alice and bob each evaluate a model of the other (submitted) and hold a lease on
    # the other's second one (active); carol's second model stays open to pull
    facts.leases["alice-submitted"] = pull(OWNER, "B1")
    facts.bodies["alice-submitted"] = submit(OWNER, facts.leases["alice-submitted"], 0.25)
    submit("bob", pull("bob", "A1"), 0.75)
    facts.leases["alice-active"] = pull(OWNER, "B2", pull_key=facts.pull_key)
    facts.leases["bob-active"] = pull("bob", "A2")
    # dave cannot evaluate alice's first model: its page and API show why, never who
    failed = pull("dave", "A1")
    failure = {"attempt": failed["attempt"], "reason": FAILURE_REASON}
    path = f"/v0/leases/{failed['lease_id']}/failure"
    post(path, facts.tokens["dave"], 204, params={"runner": "dave-box"}, json=failure)
    facts.epoch = client.get("/v0/epochs/current").json()["id"]
    # the bodies of the matrix's submissions (signed once, at the server's fixed time)
    active = facts.leases["alice-active"]
    facts.bodies["alice-active"] = _submit_body(facts, OWNER, active, 0.5, ctx.now())
    facts.bodies["bob-on-alice"] = _submit_body(facts, "bob", active, 0.5, ctx.now())
    facts.bodies["admin-on-alice"] = _submit_body(facts, "admin", active, 0.5, ctx.now())
    # the callers: API tokens issued with each scope set, and session JWTs asked for it
    for caller in CALLERS:
        if caller.account is None:
            continue
        if caller.kind == "token":
            scopes = tuple(sorted(caller.scopes))
            token = issue_token(ctx, caller.account, scopes=scopes, name=caller.label).token
        else:
            source = facts.tokens[caller.account]
            session = client.post(
                "/v0/auth/token", json={"api_token": source, "scopes": sorted(caller.scopes)}
            )
            assert session.status_code == 200, (caller, session.text)
            assert session.json()["scope"] == " ".join(sorted(caller.scopes)), caller
            token = session.json()["access_token"]
        facts.tokens[caller.label] = token
        # used once here, so that no case's first use writes last_used_at
        assert client.get("/v0/me/quota", headers=auth(token)).status_code == 200
    spare = client.post("/v0/auth/token", json={"api_token": facts.tokens[OWNER]})
    facts.refresh_token = spare.json()["refresh_token"]


def _build_pools(ctx: ServerContext, facts: Facts) -> None:
    """Credits for alice and bob; two pools of alice's: one open for joins, one ended
    (its times moved into the past) that committed to a held-out final split."""
    now = ctx.now()
    for who in (OWNER, "bob"):
        ledger.mint(
            ctx, admin_id=facts.accounts["admin"], account_name=who, amount=10**6, memo="matrix"
        )
    alice = Principal(facts.accounts[OWNER], OWNER, False, frozenset(DEFAULT_SCOPES))
    facts.pool_times = {
        "join_deadline": (now + timedelta(days=7)).isoformat(),
        "ends_at": (now + timedelta(days=14)).isoformat(),
    }
    for label, sha in (("open", None), ("ended", "e" * 64)):
        spec = PoolSpec(
            title=f"alice's {label} pool",
            funds=1000,
            rule="WinnerTakesAll",
            starts_at=now,
            ends_at=now + timedelta(days=14),
            join_deadline=now + timedelta(days=7),
            benchmarks=["arith"],
            final_sha256=sha,
        )
        facts.pools[label] = pools.create_pool(ctx, alice, spec).id
    with ctx.db.write() as session:
        ended = session.get(Pool, facts.pools["ended"])
        assert ended is not None
        ended.starts_at = now - timedelta(days=3)
        ended.join_deadline = now - timedelta(days=2)
        ended.ends_at = now - timedelta(days=1)


# --- snapshots of the database -----------------------------------------------------

Snapshot = dict[str, tuple[tuple[str, ...], frozenset[tuple[Any, ...]]]]
ALICE_ROWS = {  # table -> the column that says a row is alice's
    "accounts": "id",
    "api_tokens": "account_id",
    "auth_sessions": "account_id",
    "federated_identities": "account_id",
    "leases": "account_id",
    "models": "owner_id",
    "pools": "funder_id",
    "pool_entries": "account_id",
    "results": "account_id",
    "runners": "account_id",
    "runner_keys": "runner_id",  # alice's runner
}


def snapshot(conn: sqlite3.Connection) -> Snapshot:
    tables = [
        name
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    ]
    shot: Snapshot = {}
    for table in tables:
        cursor = conn.execute(f'SELECT * FROM "{table}"')
        columns = tuple(d[0] for d in cursor.description)
        keep = [i for i, c in enumerate(columns) if (table, c) not in VOLATILE]
        rows = frozenset(tuple(row[i] for i in keep) for row in cursor)
        shot[table] = (tuple(columns[i] for i in keep), rows)
    return shot


def alice_rows(shot: Snapshot, facts: Facts) -> Snapshot:
    ids = {
        "runner_id": facts.alice_runner,
        "id": facts.accounts[OWNER],
        "account_id": facts.accounts[OWNER],
        "owner_id": facts.accounts[OWNER],
        "funder_id": facts.accounts[OWNER],
    }
    mine: Snapshot = {}
    for table, column in ALICE_ROWS.items():
        if table not in shot:
            continue
        columns, rows = shot[table]
        at = columns.index(column)
        mine[table] = (columns, frozenset(r for r in rows if r[at] == ids[column]))
    return mine


def diff(before: Snapshot, after: Snapshot) -> str:
    lines = []
    for table in sorted(set(before) | set(after)):
        old = before.get(table, ((), frozenset()))[1]
        new = after.get(table, ((), frozenset()))[1]
        if old != new:
            lines.append(f"{table}: -{sorted(old - new, key=repr)} +{sorted(new - old, key=repr)}")
    return "; ".join(lines)


def _backup(source: Path, target: Path) -> None:
    """Copy one SQLite database onto another (the target may be open elsewhere)."""
    src, dst = sqlite3.connect(source), sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()


class Matrix:
    """The app, the facts, and the world (database) the next case runs on.

    The world is built once in ``template.db`` and copied to ``pristine.db``; the app
    serves ``world.db``, which is copied back from ``pristine.db`` (in place, under
    the same context) after any case that changed it.
    """

    def __init__(self, tmp: Path, clock: FakeClock) -> None:
        self.tmp = tmp
        overrides = {
            "registrations_per_week": 1000,
            "write_rate_limit": "",
            "submission_rate_limit": "",
            "epoch_task_budget": TASKS,
            "oauth_providers": [PROVIDER],
        }
        self.settings: ServerSettings = _settings(
            f"sqlite:///{tmp / 'template.db'}", tmp, **overrides
        )
        template = build_context(self.settings)
        template.clock = clock
        template.inspector = fake_metadata
        self.facts = Facts()
        self.app: FastAPI = create_app(self.settings, context=template, run_scheduler=False)
        self._client = TestClient(self.app, follow_redirects=False)
        self.client = self._client.__enter__()
        try:
            _build_world(self.client, template, self.facts)
        except BaseException:
            self._client.__exit__(None, None, None)
            raise
        finally:
            template.close()
        _backup(tmp / "template.db", tmp / "pristine.db")
        _backup(tmp / "pristine.db", tmp / "world.db")
        world_url = f"sqlite:///{tmp / 'world.db'}"
        self.ctx = build_context(
            self.settings.model_copy(update={"database_url": world_url}), migrate=False
        )
        self.ctx.clock = clock
        self.ctx.inspector = fake_metadata
        self.app.state.context = self.ctx
        self.conn = sqlite3.connect(f"file:{tmp / 'world.db'}?mode=ro", uri=True)
        self.pristine = snapshot(self.conn)
        self.resets = 0
        self.version = self._data_version()

    def _data_version(self) -> int:
        """Changes whenever another connection commits to the world."""
        return int(self.conn.execute("PRAGMA data_version").fetchone()[0])

    def after(self) -> Snapshot:
        """The world now (no commit since the last look: still pristine)."""
        return self.pristine if self._data_version() == self.version else snapshot(self.conn)

    def settle(self, after: Snapshot) -> None:
        """Put the pristine world back if the last case changed it."""
        if after != self.pristine:
            _backup(self.tmp / "pristine.db", self.tmp / "world.db")
            forget_identities(self.ctx)  # runners made by the case are gone
            self.resets += 1
        self.version = self._data_version()

    def close(self) -> None:
        self._client.__exit__(None, None, None)
        self.conn.close()
        self.ctx.close()


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    built = Matrix(tmp_path_factory.mktemp("authz"), FakeClock())
    assert snapshot(built.conn) == built.pristine
    yield built
    built.close()


# --- the endpoints ----------------------------------------------------------------


def new_pool(facts: Facts, caller: Caller) -> Request:
    body = {
        "title": "a matrix pool",
        "funds": 500,
        "rule": "TopKEqual",
        "benchmarks": ["arith"],
        **facts.pool_times,
    }
    return Request("/v0/pools", None, body)


def funded_only(caller: Caller) -> tuple[bool, Expect] | None:
    """A pool from a credential with ``model:register`` whose account holds the funds
    (alice and bob were minted credits; the admin account holds none: 409)."""
    if caller.account is None or not caller.holds("model:register"):
        return None  # 401, or 403 naming model:register
    if caller.account in (OWNER, "bob"):
        return True, Expect(frozenset({201}))
    return False, Expect(frozenset({409}), ("less than",))


def funder_only(caller: Caller) -> tuple[bool, Expect] | None:
    """alice (the funder, ``model:register``) reveals her ended pool's final data (as
    far as the SSRF guard: it is on a private address); anyone else (an admin too) 403."""
    if caller.account is None or not caller.holds("model:register"):
        return None
    if caller.account == OWNER:
        return True, Expect(frozenset({422}))
    return False, Expect(frozenset({403}), ("funder",))


@dataclass(frozen=True)
class Request:
    url: str
    params: dict[str, Any] | None = None
    json: Any = None


@dataclass(frozen=True)
class Expect:
    statuses: frozenset[int]
    names: tuple[str, ...] = ()  # the problem's detail names one of these


Rule = Callable[[Caller], tuple[bool, Expect] | None]


@dataclass(frozen=True)
class Variant:
    """One way to call one route, with who may and what each caller gets.

    ``scopes``: PUBLIC, ANY or the scopes the route declares. ``owned``: the request
    targets alice's resource (her lease, runner, keys), so only alice (or an admin)
    may get a 2xx. ``ok``: the answer to a caller that may; ``cross``: to another
    account that holds the scopes. ``in_body``: the credential that acts is in the
    body (login, refresh, revoke), not the header. ``rule``: an override.
    """

    method: str
    path: str
    name: str
    scopes: str | tuple[str, ...]
    build: Callable[[Facts, Caller], Request]
    owned: bool = False
    ok: frozenset[int] = frozenset({200})
    cross: frozenset[int] = frozenset({403, 404})
    in_body: bool = False
    rule: Rule | None = None
    check: Callable[[Facts, Caller, httpx.Response], None] | None = None
    mounted: bool = True  # False: a route the app must not serve with these settings
    moderated: bool = False
    """An admin may change alice's rows through it (moderation: retiring her model)."""

    @property
    def id(self) -> str:
        return f"{self.method} {self.path} [{self.name}]"


def fixed(url: str, **params: Any) -> Callable[[Facts, Caller], Request]:
    return lambda facts, caller: Request(url, params or None)


def _alice_lease(facts: Facts) -> dict[str, Any]:
    return facts.leases["alice-active"]


def heartbeat(facts: Facts, caller: Caller) -> Request:
    lease = _alice_lease(facts)
    return Request(
        f"/v0/leases/{lease['lease_id']}/heartbeat",
        {"runner": caller.runner},
        {"attempt": lease["attempt"]},
    )


def release(facts: Facts, caller: Caller) -> Request:
    lease = _alice_lease(facts)
    params = {"runner": caller.runner, "attempt": lease["attempt"]}
    return Request(f"/v0/leases/{lease['lease_id']}", params)


def fail(facts: Facts, caller: Caller) -> Request:
    lease = _alice_lease(facts)
    body = {"attempt": lease["attempt"], "reason": "the sandbox stopped the evaluation"}
    return Request(f"/v0/leases/{lease['lease_id']}/failure", {"runner": caller.runner}, body)


def submit(next_pull: bool = False) -> Callable[[Facts, Caller], Request]:
    def build(facts: Facts, caller: Caller) -> Request:
        who = caller.account if caller.account in ("bob", "admin") else OWNER
        body = dict(facts.bodies["alice-active" if who == OWNER else f"{who}-on-alice"])
        if next_pull:
            body["next_pull_key"] = "next-pull-0001"
        lease = _alice_lease(facts)
        return Request(f"/v0/leases/{lease['lease_id']}/result", {"runner": caller.runner}, body)

    return build


EDGE_REPORT = {
    "task_id": 1,
    "edge_version": 1,
    "settings": {
        "prompt_tokens": 24,
        "gen_tokens": 6,
        "warmup": 0,
        "min_runs": 1,
        "min_time_s": 0.0,
        "max_runs": 1,
    },
    "wall_s": {"mean": 0.5, "sd": 0.0, "n": 1},
    "generated_tokens": {"mean": 6.0, "sd": 0.0, "n": 1},
    "forced_length": True,
    "runs": [{"wall_s": 0.5, "generated_tokens": 6, "finish_reason": "length"}],
}
"""A well-formed edge report (``protocol.EdgeReport``): a malformed body would be
refused (422) before the caller is known."""


def submit_edge(facts: Facts, caller: Caller) -> Request:
    """An edge report on alice's active lease: a scored task's, so alice herself is
    refused (422, "for a scored task"); anyone else must not learn even that."""
    lease = _alice_lease(facts)
    body = {
        "protocol_version": "1.2",
        "attempt": lease["attempt"],
        "result": EDGE_REPORT | {"task_id": lease["task"]["id"]},
        "signature": {
            "key_id": facts.alice_key_id(),
            "signed_at": "2026-11-22T12:00:05+00:00",
            "value": "0" * 128,
        },
    }
    return Request(f"/v0/leases/{lease['lease_id']}/edge", {"runner": caller.runner}, body)


def refused_as_scored(facts: Facts, caller: Caller, answer: httpx.Response) -> None:
    if answer.status_code == 422:
        assert "for a scored task" in answer.json()["detail"], answer.text


def resubmit(facts: Facts, caller: Caller) -> Request:
    lease = facts.leases["alice-submitted"]
    body = facts.bodies["alice-submitted"]
    return Request(f"/v0/leases/{lease['lease_id']}/result", {"runner": caller.runner}, body)


def pull(same_key: bool) -> Callable[[Facts, Caller], Request]:
    def build(facts: Facts, caller: Caller) -> Request:
        body: dict[str, Any] = {"runner": caller.runner}
        if same_key:
            body["pull_key"] = facts.pull_key
        return Request("/v0/leases", None, body)

    return build


def not_alices_lease(facts: Facts, caller: Caller, answer: httpx.Response) -> None:
    if caller.account != OWNER and answer.status_code == 201:
        assert answer.json()["lease_id"] != _alice_lease(facts)["lease_id"], "alice's lease leaked"


def no_open_results(facts: Facts, caller: Caller, answer: httpx.Response) -> None:
    """Nobody sees the results of a task before it is final (they could be copied)."""
    body = answer.json()
    for task in body if isinstance(body, list) else [body]:
        if not task["final"]:
            assert not task["results"] and not task["n_results"], f"open task shown: {task}"


def no_open_results_page(facts: Facts, caller: Caller, answer: httpx.Response) -> None:
    """The task page of an open task shows no results, runners or samples either."""
    assert 'id="open-task"' in answer.text, answer.text[:2000]
    for hidden in ('id="results"', 'id="samples"', "alice-box"):
        assert hidden not in answer.text, f"open task page shows {hidden}"


def failure_without_who(facts: Facts, caller: Caller, answer: httpx.Response) -> None:
    """Failure reports say what and when, never which runner or account."""
    if answer.status_code == 200:
        assert FAILURE_REASON in answer.text, "the failure reason is missing"
        assert "dave" not in answer.text, "the reporting account is named"


def register_key(facts: Facts, caller: Caller) -> Request:
    # alice rotates in a new key; anyone else tries to take hers for "alice-box"
    key = facts.fresh_key if caller.account == OWNER else facts.keys[OWNER]
    return Request("/v0/runners/alice-box/keys", None, {"public_key": bytes(key.verify_key).hex()})


def fresh_key_same_name(facts: Facts, caller: Caller) -> Request:
    public = bytes(facts.fresh_key.verify_key).hex()
    return Request("/v0/runners/alice-box/keys", None, {"public_key": public})


def own_runner_only(facts: Facts, caller: Caller, answer: httpx.Response) -> None:
    """A runner name belongs to an account: bob's "alice-box" is bob's, not alice's."""
    if answer.status_code == 201 and caller.account != OWNER:
        assert answer.json()["runner_id"] != facts.alice_runner


def list_keys_check(facts: Facts, caller: Caller, answer: httpx.Response) -> None:
    if caller.account != OWNER and answer.is_success:
        assert facts.alice_key_id() not in answer.text, "alice's keys leaked"


def who_am_i(facts: Facts, caller: Caller, answer: httpx.Response) -> None:
    """``/v0/me`` names the caller's own account and exactly its credential's scopes."""
    if answer.is_success:
        body = answer.json()
        assert body["name"] == caller.account, body
        assert body["scopes"] == sorted(caller.scopes), body


def revoke_key(facts: Facts, caller: Caller) -> Request:
    return Request(f"/v0/runners/alice-box/keys/{facts.alice_key_id()}")


def register_model(ref: str | None) -> Callable[[Facts, Caller], Request]:
    def build(facts: Facts, caller: Caller) -> Request:
        return Request("/v0/models", None, {"ref": ref or facts.refs["A1"]})

    return build


def local_path_rule(caller: Caller) -> tuple[bool, Expect] | None:
    """A path on the server's disk: the route's scope, then the admin scope."""
    if caller.account is None or not caller.holds("model:register"):
        return None  # 401, or 403 naming model:register, as for any scoped route
    if caller.holds("admin"):
        return True, Expect(frozenset({201}))
    return False, Expect(frozenset({422}), ("admin",))


def own_account_only(facts: Facts, caller: Caller, answer: httpx.Response) -> None:
    """The account's own page data: its name, and nothing of alice's for anyone else."""
    if answer.is_success:
        assert answer.json()["name"] == caller.account, answer.text[:300]
        if caller.account != OWNER:
            for ref in (facts.refs["A1"], facts.refs["A2"], "alice-box", "spare"):
                assert ref not in answer.text, f"alice's {ref} leaked"


def own_models_only(facts: Facts, caller: Caller, answer: httpx.Response) -> None:
    if answer.is_success:
        owner = facts.accounts[caller.account or OWNER]
        assert all(m["model"]["owner_id"] == owner for m in answer.json()), answer.text[:300]


def own_tokens_only(facts: Facts, caller: Caller, answer: httpx.Response) -> None:
    if answer.is_success and caller.account != OWNER:
        assert all(t["name"] != "spare" for t in answer.json()), "alice's tokens leaked"
        assert "qb_" not in answer.text.replace('"prefix":"qb_', ""), "a token leaked"


def new_token_rule(caller: Caller) -> tuple[bool, Expect] | None:
    """A new token with ``task:pull``: only for a credential that holds it."""
    if caller.account is None:
        return None
    if caller.holds("task:pull"):
        return True, Expect(frozenset({201}))
    return False, Expect(frozenset({403}), ("task:pull",))


def revoke_token_rule(caller: Caller) -> tuple[bool, Expect] | None:
    """alice's ``task:pull`` token: alice with that scope; anyone else (an admin too) 404."""
    if caller.account is None:
        return None
    if caller.account != OWNER:
        return False, Expect(frozenset({404}))
    if caller.holds("task:pull"):
        return True, Expect(frozenset({204}))
    return False, Expect(frozenset({403}), ("task:pull",))


def login(scopes: list[str] | None, token: str = OWNER) -> Callable[[Facts, Caller], Request]:
    def build(facts: Facts, caller: Caller) -> Request:
        body: dict[str, Any] = {"api_token": facts.tokens[token]}
        if scopes is not None:
            body["scopes"] = scopes
        return Request("/v0/auth/token", None, body)

    return build


def refused_for_all(*names: str, status: int = 403) -> Rule:
    """Nobody gets a 2xx, whatever the header says."""
    return lambda caller: (False, Expect(frozenset({status}), names))


def refresh_body(path: str) -> Callable[[Facts, Caller], Request]:
    return lambda facts, caller: Request(path, None, {"refresh_token": facts.refresh_token})


def refused_as(code: str) -> Callable[[Facts, Caller, httpx.Response], None]:
    def check(facts: Facts, caller: Caller, answer: httpx.Response) -> None:
        if answer.status_code == 422:
            assert answer.json()["type"] == f"/problems/{code}", answer.text[:300]

    return check


def admin_only(caller: Caller, ok: int = 200) -> tuple[bool, Expect] | None:
    """Admins (the ``admin`` scope) only; any other credential 403 naming it."""
    if caller.account is None:
        return None
    if caller.holds("admin"):
        return True, Expect(frozenset({ok}))
    return False, Expect(frozenset({403}), ("admin",))


PRIVATE_SPEC = {
    "name": "matrix-bench",
    "version": 1,
    "pillar": "math",
    "format": "exact-match",
    "data": {"url": "https://127.0.0.1/data.jsonl", "sha256": "0" * 64},
    "prompt": {"version": 1, "template": "{q}"},
    "answer_field": "a",
    "labels": {"skill": "reasoning", "subject": "science/math"},
}
FINAL_SPEC = {k: v for k, v in PRIVATE_SPEC.items() if k not in ("name", "version")} | {
    "data": {"url": "https://127.0.0.1/final.jsonl", "sha256": "e" * 64}
}
"""The ended pool's held-out data, on a private address (its commitment is ``e`` × 64)."""
CREATE = ("benchmark:create",)
SUBMIT = ("task:submit",)
PULL = ("task:pull",)
REGISTER = ("model:register",)

VARIANTS: list[Variant] = [
    # meta and documentation
    Variant("GET", "/v0/health", "readiness", PUBLIC, fixed("/v0/health")),
    Variant("GET", "/v0/health/live", "liveness", PUBLIC, fixed("/v0/health/live")),
    Variant("GET", "/openapi.json", "schema", PUBLIC, fixed("/openapi.json")),
    Variant("GET", "/docs", "swagger", PUBLIC, fixed("/docs")),
    Variant("GET", "/docs/oauth2-redirect", "swagger", PUBLIC, fixed("/docs/oauth2-redirect")),
    Variant("GET", "/redoc", "redoc", PUBLIC, fixed("/redoc")),
    # sessions: the credential that acts is in the body
    Variant("POST", "/v0/auth/token", "alice's token", PUBLIC, login(None), in_body=True),
    Variant(
        "POST",
        "/v0/auth/token",
        "wider than the token",
        PUBLIC,
        login(["task:pull", "task:submit"], token="alice-token-pull"),
        rule=refused_for_all("task:submit"),
    ),
    Variant(
        "POST",
        "/v0/auth/token",
        "admin for a non-admin",
        PUBLIC,
        login(["admin"]),
        rule=refused_for_all("admin"),
    ),
    Variant(
        "POST",
        "/v0/auth/refresh",
        "alice's refresh token",
        PUBLIC,
        refresh_body("/v0/auth/refresh"),
        in_body=True,
    ),
    Variant(
        "POST",
        "/v0/auth/revoke",
        "alice's refresh token",
        PUBLIC,
        refresh_body("/v0/auth/revoke"),
        ok=frozenset({204}),
        in_body=True,
    ),
    Variant(
        "POST",
        "/v0/auth/dev-login",
        "off unless QB_INSECURE_DEV_LOGIN",
        PUBLIC,
        lambda facts, caller: Request("/v0/auth/dev-login", None, {"account": OWNER}),
        rule=refused_for_all(status=404),
        mounted=False,
    ),
    # login with an OAuth provider (it cannot be reached here)
    Variant(
        "GET",
        "/v0/auth/{provider}/login",
        "code flow starts",
        PUBLIC,
        fixed(f"/v0/auth/{PROVIDER.name}/login"),
        ok=frozenset({302}),
    ),
    Variant(
        "GET",
        "/v0/auth/{provider}/callback",
        "no state cookie",
        PUBLIC,
        fixed(f"/v0/auth/{PROVIDER.name}/callback", state="s" * 20, code="c"),
        rule=refused_for_all("state", status=400),
    ),
    Variant(
        "POST",
        "/v0/auth/{provider}/device",
        "provider unreachable",
        PUBLIC,
        fixed(f"/v0/auth/{PROVIDER.name}/device"),
        rule=refused_for_all(status=502),
    ),
    Variant(
        "POST",
        "/v0/auth/{provider}/device/token",
        "unknown handle",
        PUBLIC,
        lambda facts, caller: Request(
            f"/v0/auth/{PROVIDER.name}/device/token", None, {"device": "d" * 20}
        ),
        rule=refused_for_all(status=400),
    ),
    # the model registry
    Variant(
        "POST",
        "/v0/models",
        "a new ref",
        REGISTER,
        register_model(hub_ref(99)),
        ok=frozenset({201}),
    ),
    Variant(
        "POST",
        "/v0/models",
        "alice's ref again",
        REGISTER,
        register_model(None),
        ok=frozenset({200}),  # alice's own repeat: her model, unchanged
        owned=True,
        cross=frozenset({409}),
    ),
    Variant(
        "POST",
        "/v0/models",
        "a path on the server's disk",
        REGISTER,
        register_model(LOCAL_REF),
        ok=frozenset({201}),
        rule=local_path_rule,
    ),
    Variant(
        "POST",
        "/v0/submissions/validate",
        "a new ref",
        REGISTER,
        lambda facts, caller: Request("/v0/submissions/validate", None, {"ref": hub_ref(98)}),
    ),
    Variant(
        "POST",
        "/v0/models/{model_id}/retire",
        "alice's",
        REGISTER,
        lambda facts, caller: Request(f"/v0/models/{facts.models['A1']}/retire"),
        owned=True,
        cross=frozenset({200, 404}),  # an admin may retire it; anyone else gets 404
        moderated=True,
    ),
    Variant("GET", "/v0/models", "all", PUBLIC, fixed("/v0/models")),
    Variant(
        "GET",
        "/v0/models/{model_id}/failures",
        "alice's",
        ANY,
        lambda facts, caller: Request(f"/v0/models/{facts.models['A1']}/failures"),
        owned=True,
        cross=frozenset({200, 403}),  # an admin reads them; anyone else gets 403
        check=failure_without_who,
    ),
    Variant(
        "POST",
        "/v0/models/{model_id}/resume",
        "alice's (not paused: unchanged)",
        REGISTER,
        lambda facts, caller: Request(f"/v0/models/{facts.models['A1']}/resume"),
        owned=True,
        cross=frozenset({200, 403}),  # an admin may resume it; anyone else gets 403
    ),
    Variant(
        "GET",
        "/v0/models/{model_id}",
        "alice's",
        PUBLIC,
        lambda facts, caller: Request(f"/v0/models/{facts.models['A1']}"),
    ),
    # leases
    Variant(
        "POST",
        "/v0/leases",
        "pull",
        PULL,
        pull(same_key=False),
        ok=frozenset({201, 204}),
        check=not_alices_lease,
    ),
    Variant(
        "POST",
        "/v0/leases",
        "pull with alice's pull key",
        PULL,
        pull(same_key=True),
        ok=frozenset({201, 204}),
        check=not_alices_lease,
    ),
    Variant(
        "POST", "/v0/leases/{lease_id}/heartbeat", "alice's lease", PULL, heartbeat, owned=True
    ),
    Variant(
        "DELETE",
        "/v0/leases/{lease_id}",
        "alice's lease",
        PULL,
        release,
        owned=True,
        ok=frozenset({204}),
    ),
    Variant(
        "POST",
        "/v0/leases/{lease_id}/failure",
        "alice's lease",
        PULL,
        fail,
        owned=True,
        ok=frozenset({204}),
    ),
    Variant(
        "POST",
        "/v0/leases/{lease_id}/result",
        "alice's lease",
        SUBMIT,
        submit(),
        owned=True,
        ok=frozenset({201}),
    ),
    Variant(
        "POST",
        "/v0/leases/{lease_id}/result",
        "alice's lease, and the next pull",
        (*SUBMIT, *PULL),
        submit(next_pull=True),
        owned=True,
        ok=frozenset({201}),
    ),
    Variant(
        "POST",
        "/v0/leases/{lease_id}/result",
        "alice's submitted lease, repeated",
        SUBMIT,
        resubmit,
        owned=True,
    ),
    Variant(
        "POST",
        "/v0/leases/{lease_id}/edge",
        "alice's (scored) lease",
        SUBMIT,
        submit_edge,
        owned=True,
        ok=frozenset({422}),  # her lease is a scored task's: refused, nothing stored
        check=refused_as_scored,
    ),
    # tasks, leaderboard, epochs, benchmarks
    Variant("GET", "/v0/leaderboard", "json", PUBLIC, fixed("/v0/leaderboard")),
    Variant("GET", "/v0/leaderboard", "csv", PUBLIC, fixed("/v0/leaderboard", format="csv")),
    Variant("GET", "/v0/tasks", "all", PUBLIC, fixed("/v0/tasks"), check=no_open_results),
    Variant(
        "GET",
        "/v0/tasks/{task_id}",
        "a final one",
        PUBLIC,
        lambda facts, caller: Request(f"/v0/tasks/{facts.done_task}"),
    ),
    Variant(
        "GET",
        "/v0/tasks/{task_id}",
        "an open one, with alice's result",
        PUBLIC,
        lambda facts, caller: Request(f"/v0/tasks/{facts.leases['alice-submitted']['task']['id']}"),
        check=no_open_results,
    ),
    Variant("GET", "/v0/benchmarks", "all", PUBLIC, fixed("/v0/benchmarks")),
    Variant("GET", "/v0/benchmarks/{name}", "arith", PUBLIC, fixed("/v0/benchmarks/arith")),
    Variant(
        "POST",
        "/v0/benchmarks",
        "data on a private address",
        CREATE,
        lambda facts, caller: Request("/v0/benchmarks", None, PRIVATE_SPEC),
        ok=frozenset({422}),  # an admin gets as far as the SSRF guard
        check=refused_as("url-not-allowed"),
    ),
    Variant(
        "POST",
        "/v0/benchmarks/{name}/retire",
        "a benchmark of the settings",
        CREATE,
        fixed("/v0/benchmarks/arith/retire"),
        ok=frozenset({409}),  # an admin is told it is the operator's
    ),
    Variant(
        "POST",
        "/v0/accounts/{account}/grants",
        "benchmark:create to bob",
        ANY,
        lambda facts, caller: Request(
            "/v0/accounts/bob/grants", None, {"action": "grant", "reason": "matrix"}
        ),
        rule=admin_only,
    ),
    # credits: your own ledger; minting and the invariant check are the admin's
    Variant("GET", "/v0/ledger/me", "own", ANY, fixed("/v0/ledger/me", limit=5)),
    Variant(
        "POST",
        "/v0/ledger/mint",
        "to bob",
        ANY,
        lambda facts, caller: Request(
            "/v0/ledger/mint", None, {"account": "bob", "amount": 10, "memo": "matrix"}
        ),
        rule=lambda caller: admin_only(caller, ok=201),
    ),
    Variant(
        "GET", "/v0/ledger/check", "invariants", ANY, fixed("/v0/ledger/check"), rule=admin_only
    ),
    # asks (personalized boards): a cache-only ask is anyone's who has its id
    Variant(
        "POST",
        "/v0/asks",
        "a cache-only plan",
        PUBLIC,
        lambda facts, caller: Request("/v0/asks", None, {"plan": {"budget": 5}}),
        ok=frozenset({201}),
    ),
    Variant(
        "GET",
        "/v0/asks/{ask_id}",
        "a cache-only ask",
        PUBLIC,
        lambda facts, caller: Request(f"/v0/asks/{facts.ask}"),
    ),
    Variant(
        "GET",
        "/v0/asks/{ask_id}/board",
        "a cache-only ask",
        PUBLIC,
        lambda facts, caller: Request(f"/v0/asks/{facts.ask}/board"),
    ),
    Variant(
        "GET",
        "/v0/plans/{plan_id}",
        "its plan",
        PUBLIC,
        lambda facts, caller: Request(f"/v0/plans/{facts.plan}"),
    ),
    # prize pools: public reads; creating and joining need model:register (and credits,
    # and one's own model); cancelling is an admin's, revealing the funder's
    Variant("GET", "/v0/pools", "all", PUBLIC, fixed("/v0/pools")),
    Variant("GET", "/v0/pools", "open ones", PUBLIC, fixed("/v0/pools", phase="open")),
    Variant(
        "GET",
        "/v0/pools/{pool_id}",
        "alice's",
        PUBLIC,
        lambda facts, caller: Request(f"/v0/pools/{facts.pools['open']}"),
    ),
    Variant("POST", "/v0/pools", "funds from the caller", REGISTER, new_pool, rule=funded_only),
    Variant(
        "POST",
        "/v0/pools/{pool_id}/entries",
        "alice's model",
        REGISTER,
        lambda facts, caller: Request(
            f"/v0/pools/{facts.pools['open']}/entries", None, {"model": facts.models["A1"]}
        ),
        owned=True,
        ok=frozenset({201}),
        cross=frozenset({403}),  # only its owner enters a model, an admin neither
    ),
    Variant(
        "POST",
        "/v0/pools/{pool_id}/cancel",
        "alice's",
        ANY,
        lambda facts, caller: Request(
            f"/v0/pools/{facts.pools['open']}/cancel", None, {"reason": "matrix"}
        ),
        rule=admin_only,
        moderated=True,
    ),
    Variant(
        "POST",
        "/v0/pools/{pool_id}/reveal",
        "alice's ended pool",
        REGISTER,
        lambda facts, caller: Request(
            f"/v0/pools/{facts.pools['ended']}/reveal", None, {"spec": FINAL_SPEC}
        ),
        rule=funder_only,
        check=refused_as("url-not-allowed"),
    ),
    Variant("GET", "/v0/epochs/current", "current", PUBLIC, fixed("/v0/epochs/current")),
    Variant(
        "GET",
        "/v0/epochs/{epoch_id}",
        "current",
        PUBLIC,
        lambda facts, caller: Request(f"/v0/epochs/{facts.epoch}"),
    ),
    # the public log
    Variant("GET", "/v0/log/key", "key", PUBLIC, fixed("/v0/log/key")),
    Variant("GET", "/v0/log/keys", "keys and rotations", PUBLIC, fixed("/v0/log/keys")),
    Variant("GET", "/v0/log/head", "latest", PUBLIC, fixed("/v0/log/head")),
    Variant("GET", "/v0/log/head", "size 1", PUBLIC, fixed("/v0/log/head", size=1)),
    Variant("GET", "/v0/log/entries", "all", PUBLIC, fixed("/v0/log/entries")),
    Variant(
        "GET",
        "/v0/log/proof/inclusion",
        "entry 0",
        PUBLIC,
        fixed("/v0/log/proof/inclusion", index=0, size=1),
    ),
    Variant(
        "GET",
        "/v0/log/proof/consistency",
        "1 to 1",
        PUBLIC,
        fixed("/v0/log/proof/consistency", first=1, second=1),
    ),
    # runners' keys and the caller's standing
    Variant(
        "POST",
        "/v0/runners/{runner}/keys",
        "alice-box: rotate / take alice's key",
        SUBMIT,
        register_key,
        owned=True,
        ok=frozenset({201}),
        cross=frozenset({403, 404, 409}),
    ),
    Variant(
        "POST",
        "/v0/runners/{runner}/keys",
        "a new key under the name alice-box",
        SUBMIT,
        fresh_key_same_name,
        ok=frozenset({201}),
        check=own_runner_only,
    ),
    Variant(
        "GET",
        "/v0/runners/{runner}/keys",
        "alice-box",
        SUBMIT,
        fixed("/v0/runners/alice-box/keys"),
        owned=True,
        check=list_keys_check,
    ),
    Variant(
        "DELETE",
        "/v0/runners/{runner}/keys/{key_id}",
        "alice's key",
        SUBMIT,
        revoke_key,
        owned=True,
        ok=frozenset({204}),
    ),
    Variant(
        "GET",
        "/v0/runner-keys/{key_id}",
        "alice's key",
        PUBLIC,
        lambda facts, caller: Request(f"/v0/runner-keys/{facts.alice_key_id()}"),
    ),
    Variant("GET", "/v0/me", "own", ANY, fixed("/v0/me"), check=who_am_i),
    Variant("GET", "/v0/me/quota", "own", ANY, fixed("/v0/me/quota")),
    Variant("GET", "/v0/me/account", "own", ANY, fixed("/v0/me/account"), check=own_account_only),
    Variant("GET", "/v0/me/models", "own", ANY, fixed("/v0/me/models"), check=own_models_only),
    # the account's API tokens
    Variant("GET", "/v0/tokens", "own", ANY, fixed("/v0/tokens"), check=own_tokens_only),
    Variant(
        "POST",
        "/v0/tokens",
        "a task:pull token",
        ANY,
        lambda facts, caller: Request("/v0/tokens", None, {"name": "new", "scopes": ["task:pull"]}),
        ok=frozenset({201}),
        rule=new_token_rule,
    ),
    Variant(
        "DELETE",
        "/v0/tokens/{token_id}",
        "alice's task:pull token",
        ANY,
        lambda facts, caller: Request(f"/v0/tokens/{facts.spare_token}"),
        rule=revoke_token_rule,
    ),
    # the site's pages (server-rendered, public)
    Variant("GET", "/", "leaderboard", PUBLIC, fixed("/")),
    Variant(
        "GET",
        "/models/{model_id}",
        "alice's",
        PUBLIC,
        lambda facts, caller: Request(f"/models/{facts.models['A1']}"),
        check=failure_without_who,
    ),
    Variant(
        "GET",
        "/compare",
        "alice's and bob's",
        PUBLIC,
        lambda facts, caller: Request(
            "/compare", {"models": f"{facts.models['A1']},{facts.models['B1']}"}
        ),
    ),
    Variant("GET", "/tasks", "all", PUBLIC, fixed("/tasks")),
    Variant("GET", "/ask", "the query box", PUBLIC, fixed("/ask")),
    Variant(
        "POST",
        "/ask",
        "signed out: the default plan",
        PUBLIC,
        fixed("/ask"),
        # a bearer token is no site session: everyone asks signed out, a cache-only ask
        # (no session to forge a request for, so no form token), sent to its board
        ok=frozenset({303}),
    ),
    Variant(
        "GET",
        "/asks/{ask_id}",
        "a cache-only ask",
        PUBLIC,
        lambda facts, caller: Request(f"/asks/{facts.ask}"),
    ),
    Variant(
        "GET",
        "/asks/{ask_id}/progress",
        "a cache-only ask",
        PUBLIC,
        lambda facts, caller: Request(f"/asks/{facts.ask}/progress"),
    ),
    Variant(
        "GET",
        "/tasks/{task_id}",
        "a final one",
        PUBLIC,
        lambda facts, caller: Request(f"/tasks/{facts.done_task}"),
    ),
    Variant(
        "GET",
        "/tasks/{task_id}",
        "an open one, with alice's result",
        PUBLIC,
        lambda facts, caller: Request(f"/tasks/{facts.leases['alice-submitted']['task']['id']}"),
        check=no_open_results_page,
    ),
    Variant(
        "GET",
        "/tasks/{task_id}",
        "an open one, as JSON",
        PUBLIC,
        lambda facts, caller: Request(
            f"/tasks/{facts.leases['alice-submitted']['task']['id']}", {"format": "json"}
        ),
        check=no_open_results,
    ),
    Variant("GET", "/runners", "all", PUBLIC, fixed("/runners")),
    Variant(
        "GET",
        "/runners/{runner_id}",
        "alice's runner",
        PUBLIC,
        lambda facts, caller: Request(f"/runners/{facts.alice_runner}"),
    ),
    Variant("GET", "/efficiency", "page", PUBLIC, fixed("/efficiency")),
    Variant("GET", "/v0/efficiency", "the most common class", PUBLIC, fixed("/v0/efficiency")),
    Variant("GET", "/v0/edge", "every model and class", PUBLIC, fixed("/v0/edge")),
    Variant("GET", "/methodology", "page", PUBLIC, fixed("/methodology")),
    Variant("GET", "/submit", "page", PUBLIC, fixed("/submit")),
    Variant("GET", "/static", "a stylesheet", PUBLIC, fixed("/static/site.css")),
    # signing in on the site: a session cookie, never a bearer; bearers are signed out
    Variant("GET", "/signin", "page", PUBLIC, fixed("/signin")),
    Variant(
        "GET",
        "/signin/{provider}",
        "to the provider",
        PUBLIC,
        fixed(f"/signin/{PROVIDER.name}"),
        ok=frozenset({302}),
    ),
    Variant(
        "POST",
        "/signin/dev",
        "the development sign-in, off",
        PUBLIC,
        lambda facts, caller: Request("/signin/dev", None, {"account": OWNER}),
        rule=refused_for_all("QB_INSECURE_DEV_LOGIN", status=404),
    ),
    Variant("POST", "/signout", "no session", PUBLIC, fixed("/signout"), ok=frozenset({303})),
    Variant("GET", "/account", "signed out", PUBLIC, fixed("/account")),
    Variant(
        "POST",
        "/account/tokens",
        "without a session",
        PUBLIC,
        lambda facts, caller: Request("/account/tokens", None, {"scope": ["admin"]}),
        rule=refused_for_all("not signed in", status=401),
    ),
    Variant(
        "GET",
        "/account/tokens/created",
        "signed out",
        PUBLIC,
        fixed("/account/tokens/created", form="a" * 32),
    ),
    Variant(
        "POST",
        "/account/tokens/{token_id}/revoke",
        "without a session",
        PUBLIC,
        fixed("/account/tokens/1/revoke"),
        rule=refused_for_all("not signed in", status=401),
    ),
    # submitting and retiring on the site: a session only (a bearer is signed out)
    *(
        Variant(
            "POST",
            path,
            "without a session",
            PUBLIC,
            lambda facts, caller, path=path: Request(path, None, {"ref": "hf:org/x@main"}),
            rule=refused_for_all("not signed in", status=401),
        )
        for path in ("/submit/preview", "/submit/register")
    ),
    *(
        Variant(
            method,
            "/account/models/{model_id}/retire",
            "without a session",
            PUBLIC,
            fixed("/account/models/1/retire"),
            rule=refused_for_all("not signed in", status=401),
        )
        for method in ("GET", "POST")
    ),
    # the pool pages: public reads; the create and join forms need a site session (a
    # bearer is signed out)
    Variant("GET", "/pools", "all", PUBLIC, fixed("/pools")),
    Variant("GET", "/pools/new", "signed out", PUBLIC, fixed("/pools/new")),
    *(
        Variant(
            "GET",
            "/pools/{pool_id}",
            f"alice's {label} pool",
            PUBLIC,
            lambda facts, caller, label=label: Request(f"/pools/{facts.pools[label]}"),
        )
        for label in ("open", "ended")
    ),
    Variant(
        "POST",
        "/pools/new",
        "without a session",
        PUBLIC,
        lambda facts, caller: Request("/pools/new", None, {"title": "x", "funds": 1}),
        rule=refused_for_all("not signed in", status=401),
    ),
    Variant(
        "POST",
        "/pools/{pool_id}/join",
        "without a session",
        PUBLIC,
        lambda facts, caller: Request(
            f"/pools/{facts.pools['open']}/join", None, {"model": facts.models["A1"]}
        ),
        rule=refused_for_all("not signed in", status=401),
    ),
]

KNOWN_BUGS: dict[str, tuple[set[str], str]] = {}
"""variant id -> (the callers it fails for, why): bugs in files this test may not fix.
Those variants are marked xfail(strict=True, raises=KnownBugError); any other failure
in them still fails the test, and so does a listed case that passes (fixed: remove it)."""


class KnownBugError(AssertionError):
    """Only the listed cases of a variant failed."""


def decide(variant: Variant, caller: Caller) -> tuple[bool, Expect]:
    """Whether ``caller`` may get a 2xx from ``variant``, and what it should get."""
    if variant.rule is not None:
        ruled = variant.rule(caller)
        if ruled is not None:
            return ruled
    if variant.scopes == PUBLIC:
        return True, Expect(variant.ok)
    if caller.account is None:
        return False, Expect(frozenset({401}))
    if variant.scopes == ANY and not variant.owned:
        return True, Expect(variant.ok)
    missing = (
        tuple(s for s in variant.scopes if not caller.holds(s)) if variant.scopes != ANY else ()
    )
    if missing:
        return False, Expect(frozenset({403}), missing)
    if variant.owned and caller.account != OWNER:
        return caller.holds("admin"), Expect(variant.cross)
    return True, Expect(variant.ok)


def _app_routes(app: FastAPI) -> set[tuple[str, str]]:
    """Every (method, path) the app serves, through included routers too."""
    iterate = getattr(fastapi.routing, "iter_route_contexts", None)
    routes: Any = iterate(app.routes) if iterate else app.routes
    found = set()
    for route in routes:
        methods = set(getattr(route, "methods", None) or {"GET"})  # a mount: GET its files
        if "GET" in methods:
            methods.discard("HEAD")  # Starlette answers HEAD with the GET route
        found |= {(method, route.path) for method in methods}
    return found


def test_every_route_is_in_the_matrix(matrix: Matrix) -> None:
    served = _app_routes(matrix.app)
    known = {(v.method, v.path) for v in VARIANTS if v.mounted}
    assert not served & {(v.method, v.path) for v in VARIANTS if not v.mounted}
    assert not served - known, f"routes the matrix cannot call: {sorted(served - known)}"
    assert not known - served, f"rows for routes that do not exist: {sorted(known - served)}"


@pytest.mark.parametrize(
    "variant",
    [
        pytest.param(
            variant,
            id=variant.id,
            marks=[
                pytest.mark.xfail(
                    strict=True, raises=KnownBugError, reason=KNOWN_BUGS[variant.id][1]
                )
            ]
            if variant.id in KNOWN_BUGS
            else [],
        )
        for variant in VARIANTS
    ],
)
def test_authorization(matrix: Matrix, variant: Variant) -> None:
    """``variant`` called by every caller (one test per variant: a case costs a request)."""
    known, why = KNOWN_BUGS.get(variant.id, (set(), ""))
    failures = asyncio.run(run_variant(matrix, variant))
    unexpected = {label: text for label, text in failures.items() if label not in known}
    fixed = sorted(known - set(failures))
    assert not unexpected, "\n".join(f"{label}: {text}" for label, text in unexpected.items())
    assert not fixed, f"known bug no longer seen for {fixed}: update KNOWN_BUGS"
    if known:
        raise KnownBugError(f"{why}: {sorted(known)}")


async def run_variant(matrix: Matrix, variant: Variant) -> dict[str, str]:
    """Every caller's case, in turn, over the ASGI transport; the failures by caller."""
    failures: dict[str, str] = {}
    transport = httpx.ASGITransport(app=matrix.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        for caller in CALLERS if variant.scopes != PUBLIC else REPRESENTATIVES:
            try:
                await check_case(matrix, client, variant, caller)
            except AssertionError as exc:
                failures[caller.label] = str(exc).split("\n")[0][:500]
    return failures


async def check_case(
    matrix: Matrix, client: httpx.AsyncClient, variant: Variant, caller: Caller
) -> None:
    facts = matrix.facts
    request = variant.build(facts, caller)
    token = facts.tokens.get(caller.label) if caller.account else None
    answer = await client.request(
        variant.method, request.url, params=request.params, json=request.json, headers=auth(token)
    )
    after = matrix.after()
    try:
        may, expect = decide(variant, caller)
        where = f"HTTP {answer.status_code} {answer.text[:200]}"
        through = answer.status_code < 400  # a redirect (the OAuth login) counts too
        assert may or not through, f"UNAUTHORIZED {answer.status_code}: {where}"
        assert answer.status_code in expect.statuses, f"expected {sorted(expect.statuses)}: {where}"
        if answer.status_code >= 400:
            assert answer.headers["content-type"].startswith("application/problem+json"), where
        if expect.names:
            detail = answer.json()["detail"]
            assert any(name in detail for name in expect.names), (
                f"not naming {expect.names}: {where}"
            )
        if not through:
            assert after == matrix.pristine, (
                f"a refused request changed rows ({where}): {diff(matrix.pristine, after)}"
            )
        moderator = variant.moderated and caller.holds("admin")
        if caller.account != OWNER and not variant.in_body and not moderator:
            mine, now = alice_rows(matrix.pristine, facts), alice_rows(after, facts)
            assert mine == now, f"changed alice's rows ({where}): {diff(mine, now)}"
        if variant.check is not None:
            variant.check(facts, caller, answer)
    finally:
        matrix.settle(after)


# --- sessions and the API tokens they were opened with -----------------------------


def test_revoking_an_api_token_ends_the_sessions_opened_with_it(
    api: TestClient, ctx: ServerContext, people: dict[str, str]
) -> None:
    issued = issue_token(ctx, "r1", name="ci")
    session = api.post("/v0/auth/token", json={"api_token": issued.token}).json()
    other = api.post("/v0/auth/token", json={"api_token": people["r1"]}).json()
    revoke_token(ctx, issued.record.prefix)
    answer = api.get("/v0/me/quota", headers=auth(session["access_token"]))
    assert answer.status_code == 401 and "revoked" in answer.json()["detail"]
    refreshed = api.post("/v0/auth/refresh", json={"refresh_token": session["refresh_token"]})
    assert refreshed.status_code == 401
    # a session opened with another token of the account goes on
    assert api.get("/v0/me/quota", headers=auth(other["access_token"])).status_code == 200


def test_a_session_ends_when_its_api_token_expires(
    api: TestClient, ctx: ServerContext, clock: FakeClock
) -> None:
    issued = issue_token(ctx, "r1", name="short", expires_in=timedelta(minutes=5))
    session = api.post("/v0/auth/token", json={"api_token": issued.token}).json()
    assert api.get("/v0/me/quota", headers=auth(session["access_token"])).status_code == 200
    clock.advance(5 * 60 + 1)  # the access JWT would live 15 minutes; the token is gone
    answer = api.get("/v0/me/quota", headers=auth(session["access_token"]))
    assert answer.status_code == 401 and "expired" in answer.json()["detail"]
    refreshed = api.post("/v0/auth/refresh", json={"refresh_token": session["refresh_token"]})
    assert refreshed.status_code == 401


def test_a_session_asked_for_no_scopes_has_none(api: TestClient, people: dict[str, str]) -> None:
    session = api.post("/v0/auth/token", json={"api_token": people["r1"], "scopes": []}).json()
    assert session["scope"] == ""
    headers = auth(session["access_token"])
    assert api.get("/v0/me/quota", headers=headers).status_code == 200
    answer = api.post("/v0/leases", json={"runner": "r1-box"}, headers=headers)
    assert answer.status_code == 403 and "task:pull" in answer.json()["detail"]


def test_a_narrow_token_of_an_admin_account_is_write_limited(
    make_ctx: Callable[..., ServerContext],
) -> None:
    ctx = make_ctx(write_rate_limit="1/minute")
    create_account(ctx, "root", is_admin=True)
    token = issue_token(ctx, "root", scopes=("task:pull",)).token
    with TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False)) as client:
        answers = [
            client.post("/v0/leases", json={"runner": "box"}, headers=auth(token)) for _ in range(2)
        ]
    assert answers[0].status_code == 204
    assert answers[1].status_code == 429
