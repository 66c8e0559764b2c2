"""Benchmarks created through the API (``POST /v0/benchmarks``), shown and retired.

A creation is a custom spec (``evaluation/spec.py``) that names its pillar and its
labels in taxonomy v1 and references its data by URL (HTTPS, or a Hub dataset file
at a pinned commit) pinned by SHA-256. The server fetches the data once
(``evaluation/remote_data.py``: SSRF guard, size limit, the hash), checks every row,
and stores the spec, the URL and the hash, never the data, which it keeps in a cache
under its data directory. The new benchmark is scheduled for the active models from
the next epoch on. Every refusal happens before anything is written.

Its owner (or an admin) retires it: off the schedule and the board, its tasks and
results kept. A new version of a name is its owner's to create; the older version
then stops being scheduled.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from quorumbench.benchmarks import registry
from quorumbench.benchmarks.custom import CustomBenchmark
from quorumbench.db.models import Account
from quorumbench.db.models import Benchmark as BenchmarkRow
from quorumbench.errors import (
    ConflictError,
    DuplicateBenchmarkError,
    InvalidSpecError,
    LocalDataPathError,
    NotFoundError,
)
from quorumbench.evaluation.benchmark import BenchmarkContext
from quorumbench.evaluation.remote_data import fetch_verified, keep_in_cache
from quorumbench.evaluation.spec import BenchmarkSpec, parse_spec
from quorumbench.services.accounts import Principal
from quorumbench.services.benchmarks import data_cache_dir, fetch_policy, pillar_of
from quorumbench.services.context import ServerContext
from quorumbench.services.grants import require_benchmark_create
from quorumbench.services.leaderboard import sync_aggregates
from quorumbench.services.pool_final import RESERVED_NAME
from quorumbench.services.scheduler import epoch_index


@dataclass(frozen=True)
class BenchmarkInfo:
    """One benchmark version as ``GET /v0/benchmarks/{name}`` shows it."""

    name: str
    version: int
    prompt_version: int
    kind: str
    pillar: str | None
    dataset_sha256: str
    samples_per_task: int
    active: bool
    created_at: datetime
    origin: str
    """``settings`` (the server's configuration) or ``api`` (created by an account)."""
    owner: str | None
    source_url: str | None
    first_epoch: int | None
    retired_at: datetime | None
    spec: dict[str, Any] | None


def _checked_spec(raw: object) -> BenchmarkSpec:
    spec = parse_spec(raw, "spec")
    if spec.data.url is None:
        raise LocalDataPathError(
            f"spec: data.path {spec.data.path!r} is a file on your machine, which the server "
            "cannot read: host the data at an https:// URL (or a Hub dataset file at a "
            "pinned commit, hf://datasets/<repo>@<commit>/<path>) and give it as data.url"
        )
    if spec.pillar is None:
        raise InvalidSpecError(
            "spec: pillar: a benchmark on the server names its pillar "
            "(reasoning, coding, math, language or safety)"
        )
    return spec


def _check_name(ctx: ServerContext, principal: Principal, spec: BenchmarkSpec) -> None:
    """Refuse a name that the server's settings or registry use, another account's
    name, or a version that exists."""
    if spec.name in registry() or spec.name in ctx.settings.benchmarks:
        raise DuplicateBenchmarkError(
            f"benchmark {spec.name!r} is one of the server's own: choose another name"
        )
    if RESERVED_NAME.match(spec.name):
        raise DuplicateBenchmarkError(
            f"benchmark names like {spec.name!r} (pool-<id>-final) are reserved for prize "
            "pools' held-out data: choose another name"
        )
    with ctx.db.read() as session:
        rows = list(session.scalars(select(BenchmarkRow).where(BenchmarkRow.name == spec.name)))
    for row in rows:
        if row.spec is None:
            raise DuplicateBenchmarkError(
                f"benchmark {spec.name!r} is one of the server's own: choose another name"
            )
        if row.owner_id != principal.account_id:
            raise DuplicateBenchmarkError(
                f"benchmark {spec.name!r} belongs to another account: choose another name"
            )
        if row.version == spec.version:
            raise DuplicateBenchmarkError(
                f"benchmark {spec.name!r} v{spec.version} exists already: a changed spec is "
                "a new version"
            )
        if row.version > spec.version:
            raise DuplicateBenchmarkError(
                f"benchmark {spec.name!r} is at v{row.version} already: a new version must "
                "be higher"
            )


def create_benchmark(ctx: ServerContext, principal: Principal, raw: object) -> BenchmarkInfo:
    """Validate ``raw`` (a spec as decoded JSON), fetch and check its data, store it and
    schedule it from the next epoch on. ``principal`` holds the ``benchmark:create``
    scope (the route checked); its account must hold the permission too."""
    require_benchmark_create(ctx, principal.account_id, principal.acts_as_admin)
    spec = _checked_spec(raw)
    _check_name(ctx, principal, spec)
    url = spec.data.url or ""
    data = fetch_verified(url, spec.data.sha256, fetch_policy(ctx.settings))
    bench = CustomBenchmark(spec, data, url, BenchmarkContext(ctx.datasets_dir))
    keep_in_cache(data_cache_dir(ctx.settings), spec.data.sha256, data)
    now = ctx.now()
    try:
        with ctx.db.write() as session:
            for older in session.scalars(
                select(BenchmarkRow).where(BenchmarkRow.name == spec.name, BenchmarkRow.active)
            ):
                older.active = False
            row = BenchmarkRow(
                name=spec.name,
                version=spec.version,
                prompt_version=bench.prompt_version,
                kind=bench.kind,
                dataset_sha256=spec.data.sha256,
                config=dict(bench.config),
                samples_per_task=min(ctx.settings.samples_per_task, len(bench.sample_ids())),
                weight=1.0,
                active=True,
                created_at=now,
                spec=spec.model_dump(mode="json"),
                source_url=url,
                owner_id=principal.account_id,
                first_epoch=epoch_index(ctx, now) + 1,
                retired_at=None,
                pillar=pillar_of(ctx, bench),
            )
            session.add(row)
            session.flush()
            sync_aggregates(ctx, session)
            info = _info(session, row)
    except IntegrityError as exc:
        raise DuplicateBenchmarkError(
            f"benchmark {spec.name!r} v{spec.version} exists already"
        ) from exc
    ctx.loaded_benchmarks[spec.name] = bench
    return info


def _info(session: Any, row: BenchmarkRow) -> BenchmarkInfo:
    owner = session.get(Account, row.owner_id) if row.owner_id is not None else None
    spec = row.spec
    pillar = row.pillar or (spec.get("pillar") if spec is not None else None)
    return BenchmarkInfo(
        name=row.name,
        version=row.version,
        prompt_version=row.prompt_version,
        kind=row.kind,
        pillar=pillar,
        dataset_sha256=row.dataset_sha256,
        samples_per_task=row.samples_per_task,
        active=row.active,
        created_at=row.created_at,
        origin="settings" if spec is None else "api",
        owner=owner.name if owner is not None else None,
        source_url=row.source_url,
        first_epoch=row.first_epoch,
        retired_at=row.retired_at,
        spec=spec,
    )


def _rows(session: Any, name: str) -> list[BenchmarkRow]:
    rows = list(session.scalars(select(BenchmarkRow).where(BenchmarkRow.name == name)))
    if not rows:
        raise NotFoundError(f"no benchmark named {name!r}")
    rows.sort(key=lambda row: (row.active, row.version), reverse=True)
    return rows


def benchmark_info(ctx: ServerContext, name: str) -> BenchmarkInfo:
    """The benchmark ``name``: its active version, else its newest."""
    with ctx.db.read() as session:
        return _info(session, _rows(session, name)[0])


def retire_benchmark(ctx: ServerContext, principal: Principal, name: str) -> BenchmarkInfo:
    """Retire every version of ``name``: off the schedule and the board, its tasks and
    results kept. Its owner or an admin may (anyone else: NotFoundError); a benchmark
    of the server's settings is the operator's (ConflictError). Retiring twice
    changes nothing."""
    with ctx.db.write() as session:
        rows = _rows(session, name)
        if rows[0].spec is None:
            if not principal.acts_as_admin:
                raise NotFoundError(f"no benchmark named {name!r} of this account")
            raise ConflictError(
                f"benchmark {name!r} is one of the server's own: its operator removes it from "
                "the benchmarks setting"
            )
        if rows[0].owner_id != principal.account_id and not principal.acts_as_admin:
            raise NotFoundError(f"no benchmark named {name!r} of this account")
        now = ctx.now()
        for row in rows:
            row.active = False
            if row.retired_at is None:
                row.retired_at = now
        session.flush()
        sync_aggregates(ctx, session)
        return _info(session, rows[0])
