"""Read-only views for the web pages and the static export (``web/``).

The leaderboard page filters by model type, size, licence and benchmark, which the
indexed ``leaderboard()`` reads do not offer: :func:`board` reads every model that
has a score (one Core query per table), ranks them, and keeps that ranking for
``web_cache_s`` seconds (per process, per benchmark); each request then filters,
sorts and pages it in Python. Ranks are those of ``core/ranking.py``, over every
ranked model of the board before filtering, so a model keeps its rank in any filtered
or sorted view, and it is the rank the API, the export and the CLI show.
``benchmarks/web_pages.py`` measures both paths.

A model's size, wherever it is shown, sorted or filtered by, is its effective size
(:func:`~quorumbench.services.model_metadata.model_size`): for a LoRA adapter its
base's parameters plus its own, with the adapter's own beside it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

from sqlalchemy import and_, func, select

from quorumbench.core.intervals import score_interval
from quorumbench.core.ranking import standings
from quorumbench.db.models import (
    Account,
    Benchmark,
    ConsensusOutcome,
    LeaderboardAggregate,
    LeaderboardEntry,
    Model,
    Result,
    Runner,
    Task,
)
from quorumbench.errors import ConfigError, NotFoundError, QuorumError
from quorumbench.services.benchmarks import loaded
from quorumbench.services.context import ServerContext, TtlMemo
from quorumbench.services.failures import Failure, recent_failures
from quorumbench.services.leaderboard import AGGREGATE
from quorumbench.services.model_metadata import ModelSize, model_size
from quorumbench.services.scheduler import Depth, model_depths
from quorumbench.services.tasks import get_task
from quorumbench.services.wiring import admin_context
from quorumbench.settings import ServerSettings

T = TypeVar("T")
FAILURES_SHOWN = 10
"""Failure reports a model or task page shows (the newest)."""
ModelType = Literal["base", "lora", "gguf", "endpoint"]
MODEL_TYPES: tuple[ModelType, ...] = ("base", "lora", "gguf", "endpoint")


@dataclass(frozen=True)
class Score:
    score: float
    ci_low: float
    ci_high: float
    n_samples: int
    n_tasks: int
    updated_at: datetime


@dataclass(frozen=True)
class BoardRow:
    rank: int | None
    """Position by score on the chosen benchmark (or the complete aggregate); equal
    scores share it (``core/ranking.py``)."""
    model_id: int
    model: str
    ref: str
    type: ModelType
    params: int | None
    license: str | None
    score: Score | None
    """The score the row is ranked by: the chosen benchmark's, or the aggregate."""
    scores: dict[str, Score]
    disputed: int
    """DISPUTED tasks of this model."""
    rank_range: tuple[int, int] | None = None
    """The best and worst rank the 95% intervals allow (``core/ranking.py``)."""
    size: ModelSize = ModelSize(None)
    """The size shown, sorted and filtered by: base + adapter for a LoRA adapter
    (``params`` is the adapter's own then)."""

    @property
    def n_samples(self) -> int:
        return sum(s.n_samples for s in self.scores.values())

    @property
    def updated_at(self) -> datetime | None:
        return max((s.updated_at for s in self.scores.values()), default=None)


@dataclass(frozen=True)
class BoardQuery:
    benchmark: str | None = None
    sort: str = "rank"
    descending: bool = False
    q: str | None = None
    type: str | None = None
    min_params: int | None = None
    max_params: int | None = None
    license: str | None = None
    page: int = 1
    per_page: int = 50


@dataclass(frozen=True)
class BoardPage:
    rows: list[BoardRow]
    total: int
    """Rows that pass the filters (over all pages)."""
    benchmarks: list[str]
    licenses: list[str]
    query: BoardQuery
    pages: int


def model_type(ref: str, details: dict[str, Any]) -> ModelType:
    """The kind of model a canonical ref names (registration marks adapters' details)."""
    if ref.startswith("gguf:"):
        return "gguf"
    if ref.startswith("openai:"):
        return "endpoint"
    return "lora" if details.get("kind") == "adapter" else "base"


def active_benchmarks(ctx: ServerContext) -> list[str]:
    with ctx.db.read() as session:
        names = session.scalars(
            select(Benchmark.name).where(Benchmark.active).distinct().order_by(Benchmark.name)
        )
        return list(names)


def _benchmark_names(session: Any) -> dict[int, str]:
    """Every benchmark version's name by id (inactive ones too, for old tasks)."""
    return {
        bench_id: name for bench_id, name in session.execute(select(Benchmark.id, Benchmark.name))
    }


def _score(row: Any) -> Score:
    return Score(row.score, row.ci_low, row.ci_high, row.n_samples, row.n_tasks, row.updated_at)


def _all_rows(ctx: ServerContext) -> tuple[list[str], list[BoardRow], dict[int, Score]]:
    """Every model with a score on an active benchmark (unranked), and the aggregates.

    Plain Core reads on the session's connection: tens of thousands of rows, for which
    the ORM's row handling would cost more than the database.
    """
    with ctx.db.read() as session:
        conn = session.connection()
        benches = {
            b.id: b.name
            for b in conn.execute(select(Benchmark.id, Benchmark.name).where(Benchmark.active))
        }
        score_columns = (
            LeaderboardEntry.score,
            LeaderboardEntry.ci_low,
            LeaderboardEntry.ci_high,
            LeaderboardEntry.n_samples,
            LeaderboardEntry.n_tasks,
            LeaderboardEntry.updated_at,
        )
        scores: dict[int, dict[str, Score]] = {}
        for row in conn.execute(
            select(LeaderboardEntry.model_id, LeaderboardEntry.benchmark_id, *score_columns).where(
                LeaderboardEntry.benchmark_id.in_(benches)
            )
        ):
            scores.setdefault(row.model_id, {})[benches[row.benchmark_id]] = _score(row)
        agg = LeaderboardAggregate
        aggregates = {
            row.model_id: _score(row)
            for row in conn.execute(
                select(
                    agg.model_id,
                    agg.score,
                    agg.ci_low,
                    agg.ci_high,
                    agg.n_samples,
                    agg.n_tasks,
                    agg.updated_at,
                ).where(agg.complete)
            )
        }
        disputed: dict[int, int] = {
            model_id: n
            for model_id, n in conn.execute(
                select(Task.model_id, func.count())
                .where(Task.status == "DISPUTED")
                .group_by(Task.model_id)
            )
        }
        models = conn.execute(
            select(
                Model.id, Model.name, Model.ref, Model.params, Model.license, Model.details
            ).order_by(Model.id)
        )
        rows = [
            BoardRow(
                None,
                m.id,
                m.name,
                m.ref,
                model_type(m.ref, m.details or {}),
                m.params,
                m.license,
                None,
                scores[m.id],
                disputed.get(m.id, 0),
                size=model_size(m.params, m.details),
            )
            for m in models
            if m.id in scores
        ]
    return sorted(set(benches.values())), rows, aggregates


@dataclass(frozen=True)
class _Ranked:
    """Every listed row of one ranking, ranked rows first in rank order."""

    benchmarks: list[str]
    rows: list[BoardRow]
    licenses: list[str]


def _rank(ctx: ServerContext, bench: str | None) -> _Ranked:
    """Read and rank every row by ``bench``'s score (None: the complete aggregate)."""
    benchmarks, rows, aggregates = _all_rows(ctx)
    if bench is not None and bench not in benchmarks:
        raise ConfigError(f"no active benchmark named {bench!r}")

    def basis(row: BoardRow) -> Score | None:
        return row.scores.get(bench) if bench else aggregates.get(row.model_id)

    scored = [(basis(r), r) for r in rows]
    on_board = [(s, r) for s, r in scored if s is not None]
    places = standings((s.score, s.ci_low, s.ci_high) for s, _ in on_board)
    ranked = []
    for s, r in on_board:
        place = places.rank(s.score, s.ci_low, s.ci_high)
        ranked.append(replace(r, rank=place.rank, score=s, rank_range=(place.best, place.worst)))
    ranked.sort(key=lambda r: (r.rank, r.model_id))
    if bench is None:  # the incomplete ones are listed too, unranked, by model id
        ranked += [replace(r, score=None) for s, r in scored if s is None]
    licenses = sorted({r.license for r in ranked if r.license})
    return _Ranked(benchmarks, ranked, licenses)


def _kept(ctx: ServerContext, key: Hashable, make: Callable[[], Any]) -> Any:
    """``make()``, reused for ``web_cache_s`` seconds (per process, per key)."""
    ttl = ctx.settings.web_cache_s
    if ttl <= 0:
        return make()
    if ctx.boards is None:
        ctx.boards = TtlMemo(ttl, maxsize=64)
    return ctx.boards.get_or_make(key, make)


def _ranked(ctx: ServerContext, bench: str | None) -> _Ranked:
    """:func:`_rank`, kept per benchmark (:func:`_kept`)."""
    found: _Ranked = _kept(ctx, ("board", bench), lambda: _rank(ctx, bench))
    return found


_SORT_VALUES: dict[str, Callable[[BoardRow], Any]] = {
    "rank": lambda r: r.rank,
    "model": lambda r: r.model.lower(),
    "type": lambda r: r.type,
    "params": lambda r: r.size.effective_params,
    "score": lambda r: r.score.score if r.score else None,
    "n_samples": lambda r: r.n_samples,
    "updated_at": lambda r: r.updated_at,
    "disputed": lambda r: r.disputed,
}
BOARD_SORTS = tuple(_SORT_VALUES)


def _sorted(rows: list[BoardRow], sort: str, descending: bool) -> list[BoardRow]:
    """``rows`` by a column (ties by model id); rows without a value last either way."""
    value = _SORT_VALUES[sort]
    keyed = [(value(r), r) for r in rows]
    present = [p for p in keyed if p[0] is not None]
    present.sort(key=lambda p: (p[0], p[1].model_id), reverse=descending)
    return [r for _, r in present] + [r for v, r in keyed if v is None]


def board(ctx: ServerContext, query: BoardQuery) -> BoardPage:
    """One page of the leaderboard for ``query``; see the module docstring."""
    if query.sort not in BOARD_SORTS:
        raise ConfigError(f"cannot sort by {query.sort!r}; use one of {', '.join(BOARD_SORTS)}")
    if query.type and query.type not in MODEL_TYPES:
        raise ConfigError(f"unknown model type {query.type!r}; use one of {MODEL_TYPES}")
    bench = None if query.benchmark in (None, "", AGGREGATE) else query.benchmark
    ranked = _ranked(ctx, bench)
    kept = [r for r in ranked.rows if _passes(r, query)]
    if query.sort != "rank" or query.descending:  # else: in rank order already
        kept = _sorted(kept, query.sort, query.descending)
    per_page = max(1, min(query.per_page, 1000))
    shown, page, pages = paged(kept, query.page, per_page)
    return BoardPage(
        shown,
        len(kept),
        ranked.benchmarks,
        ranked.licenses,
        BoardQuery(**{**query.__dict__, "page": page, "per_page": per_page}),
        pages,
    )


def paged(rows: list[T], page: int, per_page: int) -> tuple[list[T], int, int]:
    """Page ``page`` of ``rows`` (clamped to 1..pages), that page's number, and pages."""
    pages = max(1, -(-len(rows) // per_page))
    page = min(max(1, page), pages)
    return rows[(page - 1) * per_page : page * per_page], page, pages


def _passes(row: BoardRow, query: BoardQuery) -> bool:
    """Whether ``row`` passes the filters; the size range is on the effective size."""
    if query.q and query.q.lower() not in f"{row.model} {row.ref}".lower():
        return False
    if query.type and row.type != query.type:
        return False
    if query.license and row.license != query.license:
        return False
    size = row.size.effective_params
    if query.min_params is not None and (size is None or size < query.min_params):
        return False
    return not (query.max_params is not None and (size is None or size > query.max_params))


# --- one model --------------------------------------------------------------------


@dataclass(frozen=True)
class ModelLink:
    id: int | None
    """None when the ref is not registered here."""
    name: str
    ref: str
    exact: bool = True
    """False for lineage matched by repository at another revision than the one named."""


@dataclass(frozen=True)
class TaskSummary:
    id: int
    model_id: int
    model: str
    benchmark: str
    epoch: int
    status: str
    score: float | None
    spread: float | None
    round: int
    runners: list[int]
    """Runner ids of the results, once the task is final (hidden before)."""
    outliers: list[int]
    """Those of them whose result was an outlier."""
    finalized_at: datetime | None
    runner_names: list[str] = field(default_factory=list)
    """``account/runner`` for each of ``runners``."""


@dataclass(frozen=True)
class SubjectScore:
    """A model's score on the samples of one subject, with its 95% interval."""

    subject: str
    score: float
    ci_low: float
    ci_high: float
    n_samples: int


@dataclass(frozen=True)
class ModelView:
    id: int
    name: str
    ref: str
    type: ModelType
    revision: str
    revision_url: str | None
    params: int | None
    architecture: str | None
    context_length: int | None
    dtype: str | None
    quantization: str | None
    license: str | None
    created_at: datetime
    scores: dict[str, Score]
    aggregate: Score | None
    history: dict[str, list[tuple[int, float]]]
    """Per benchmark, (epoch, score) of each DONE task, in epoch order."""
    tasks: list[TaskSummary]
    base: ModelLink | None
    adapters: list[ModelLink] = field(default_factory=list)
    subjects: dict[str, list[SubjectScore]] = field(default_factory=dict)
    """Per benchmark with two or more subjects: scores per subject (:func:`by_subject`)."""
    base_ref: str | None = None
    """The pinned base an adapter was made on (``base`` may be another revision)."""
    paused_at: datetime | None = None
    """Set while the model is paused because its tasks kept failing (services/failures.py)."""
    paused_reason: str | None = None
    failures: list[Failure] = field(default_factory=list)
    """Its newest failure reports, shortened, without who reported them."""
    size: ModelSize = ModelSize(None)
    """Its size: base + adapter for a LoRA adapter (:func:`model_size`)."""
    depths: dict[str, Depth] = field(default_factory=dict)
    """Per active benchmark: its depth tier and how many samples its next task asks for."""


def revision_url(ref: str, revision: str) -> str | None:
    """A link to the exact revision of a Hub model, when the ref is one."""
    if not revision:
        return None
    body = ref.split(":", 1)[-1].split("@", 1)[0]
    if ref.startswith("hf:") or (ref.startswith("gguf:") and not body.startswith(("/", "."))):
        repo = "/".join(body.split("/")[:2])
        return f"https://huggingface.co/{repo}/tree/{revision}"
    return None


def model_view(ctx: ServerContext, model_id: int, *, recent: int = 20) -> ModelView:
    """Everything the model page shows."""
    with ctx.db.read() as session:
        model = session.get(Model, model_id)
        if model is None:
            raise NotFoundError(f"no model {model_id}")
        benches = _benchmark_names(session)
        active = set(session.scalars(select(Benchmark.id).where(Benchmark.active)))
        scores = {
            benches[e.benchmark_id]: _score(e)
            for e in session.scalars(
                select(LeaderboardEntry).where(LeaderboardEntry.model_id == model_id)
            )
            if e.benchmark_id in active
        }
        agg = session.get(LeaderboardAggregate, model_id)
        history: dict[str, list[tuple[int, float]]] = {}
        for bench_id, epoch, score in session.execute(
            select(Task.benchmark_id, Task.epoch_id, Task.score)
            .where(Task.model_id == model_id, Task.status == "DONE", Task.score.is_not(None))
            .order_by(Task.epoch_id, Task.id)
        ):
            history.setdefault(benches[bench_id], []).append((epoch, score or 0.0))
        tasks = _task_summaries(
            session,
            select(Task).where(Task.model_id == model_id).order_by(Task.id.desc()).limit(recent),
            {model.id: model.name},
            benches,
        )
        base, adapters = _lineage(session, model)
        return ModelView(
            model.id,
            model.name,
            model.ref,
            model_type(model.ref, model.details or {}),
            model.revision,
            revision_url(model.ref, model.revision),
            model.params,
            model.architecture,
            model.context_length,
            model.dtype,
            model.quantization,
            model.license,
            model.created_at,
            scores,
            _score(agg) if agg is not None and agg.complete else None,
            history,
            tasks,
            base,
            adapters,
            by_subject(ctx, session, model_id),
            model.base_ref,
            model.paused_at,
            model.paused_reason,
            recent_failures(session, model_id=model_id, limit=FAILURES_SHOWN),
            model_size(model.params, model.details),
            model_depths(ctx, model_id),
        )


def repository(ref: str) -> str:
    """A ref without its pinned revision (``hf:org/name@abc`` → ``hf:org/name``)."""
    return ref.split("@", 1)[0]


def _lineage(session: Any, model: Model) -> tuple[ModelLink | None, list[ModelLink]]:
    """An adapter's base model and a model's adapters, registered here.

    By the exact pinned ref first; then, for an adapter made on our conversion of a GGUF
    file (``details["base_gguf_sha256"]``, set at registration), by that file's hash;
    else by repository, at another revision (an adapter pins its base at the revision
    current when it was registered, which need not be the one registered here), marked
    ``exact=False``.
    """
    base = None
    if model.base_ref:
        found = session.scalars(select(Model).where(Model.ref == model.base_ref)).first()
        converted = (model.details or {}).get("base_gguf_sha256")
        if found is None and converted:  # made on our conversion of a registered GGUF
            found = session.scalars(select(Model).where(Model.weights_sha256 == converted)).first()
        exact = found is not None
        if found is None:
            found = session.scalars(
                select(Model)
                .where(Model.ref.startswith(repository(model.base_ref) + "@", autoescape=True))
                .order_by(Model.id.desc())
            ).first()
        if found is None:
            base = ModelLink(None, "", model.base_ref)
        else:
            base = ModelLink(found.id, found.name, found.ref, exact)
    same = (Model.base_ref == model.ref) | Model.base_ref.startswith(
        repository(model.ref) + "@", autoescape=True
    )
    gguf = model.weights_sha256 if model.ref.startswith(("gguf:", "bundled:")) else None
    if gguf:
        same |= Model.details["base_gguf_sha256"].as_string() == gguf
    adapters = [
        ModelLink(
            m.id,
            m.name,
            m.ref,
            m.base_ref == model.ref
            or (gguf is not None and (m.details or {}).get("base_gguf_sha256") == gguf),
        )
        for m in session.scalars(select(Model).where(same).order_by(Model.id))
    ]
    return base, adapters


def by_subject(ctx: ServerContext, session: Any, model_id: int) -> dict[str, list[SubjectScore]]:
    """Per active benchmark whose samples carry two or more subject labels: the model's
    mean per-sample consensus score per subject over its DONE tasks, most samples first.

    The intervals are the leaderboard's (:func:`score_interval`, exact for few
    samples): a subject often has few samples, where ``mean ± 1.96·se`` would shrink
    to a point. Benchmarks whose data
    this process has not loaded (or loaded at another version) are left out.
    """
    active = {
        row.id: row
        for row in session.execute(
            select(Benchmark.id, Benchmark.name, Benchmark.version, Benchmark.dataset_sha256).where(
                Benchmark.active
            )
        )
    }
    samples: dict[int, list[tuple[str, float]]] = {}
    for bench_id, ids, consensus in session.execute(
        select(Task.benchmark_id, Task.sample_ids, ConsensusOutcome.sample_consensus)
        .join(
            ConsensusOutcome,
            and_(ConsensusOutcome.task_id == Task.id, ConsensusOutcome.round == Task.round),
        )
        .where(
            Task.model_id == model_id,
            Task.status == "DONE",
            Task.benchmark_id.in_(active),
            ConsensusOutcome.status == "DONE",
        )
        .order_by(Task.id)
    ):
        if len(ids) == len(consensus):
            samples.setdefault(bench_id, []).extend(zip(ids, consensus, strict=True))
    out = {}
    for bench_id, pairs in samples.items():
        row = active[bench_id]
        subjects = _subjects(ctx, row.name, row.version, row.dataset_sha256, [i for i, _ in pairs])
        values: dict[str, list[float]] = {}
        for sample_id, value in pairs:
            subject = subjects.get(sample_id)
            if subject is not None:
                values.setdefault(subject, []).append(float(value))
        if len(values) < 2:
            continue
        scores = []
        for subject, group in values.items():
            mean = sum(group) / len(group)
            low, high = score_interval(math.fsum(group), len(group))
            scores.append(SubjectScore(subject, mean, low, high, len(group)))
        scores.sort(key=lambda s: (-s.n_samples, s.subject))
        out[row.name] = scores
    return dict(sorted(out.items()))


def _subjects(
    ctx: ServerContext, name: str, version: int, dataset_sha256: str, ids: Sequence[str]
) -> dict[str, str | None]:
    """Subject labels of sample ids (cached on the context); empty if the data is absent."""
    bench = ctx.loaded_benchmarks.get(name)
    if bench is None or (bench.version, bench.dataset_sha256) != (version, dataset_sha256):
        return {}
    known = ctx.sample_subjects.setdefault((name, version, dataset_sha256), {})
    missing = [i for i in dict.fromkeys(ids) if i not in known]
    if not missing:
        return known
    try:
        for sample in bench.samples(missing):
            known[sample.id] = sample.labels.subject
    except QuorumError:  # some id its data does not have: label them one by one
        for sample_id in missing:
            try:
                known[sample_id] = bench.samples([sample_id])[0].labels.subject
            except QuorumError:
                known[sample_id] = None
    return known


def _task_summaries(
    session: Any, query: Any, names: dict[int, str] | None, benches: dict[int, str]
) -> list[TaskSummary]:
    tasks: list[Task] = list(session.scalars(query))
    ids = [t.id for t in tasks]
    if names is None:
        model_ids = {t.model_id for t in tasks}
        query_names = select(Model.id, Model.name).where(Model.id.in_(model_ids))
        names = {model_id: name for model_id, name in session.execute(query_names)}
    runners: dict[int, list[int]] = {i: [] for i in ids}
    outliers: dict[int, list[int]] = {i: [] for i in ids}
    labels: dict[int, list[str]] = {i: [] for i in ids}
    final = {t.id for t in tasks if t.finalized_at is not None}
    for row in session.execute(
        select(Result.task_id, Result.runner_id, Result.outlier, Runner.name, Account.name)
        .join(Runner, Runner.id == Result.runner_id)
        .join(Account, Account.id == Runner.account_id)
        .where(Result.task_id.in_(final))
        .order_by(Result.id)
    ):
        task_id, runner_id, outlier, runner_name, account = row
        runners[task_id].append(runner_id)
        labels[task_id].append(f"{account}/{runner_name}")
        if outlier:
            outliers[task_id].append(runner_id)
    outcomes: dict[int, ConsensusOutcome] = {}
    for o in session.scalars(
        select(ConsensusOutcome)
        .where(ConsensusOutcome.task_id.in_(ids))
        .order_by(ConsensusOutcome.round)
    ):
        outcomes[o.task_id] = o  # the last round's
    out = []
    for t in tasks:
        outcome = outcomes.get(t.id)
        out.append(
            TaskSummary(
                t.id,
                t.model_id,
                names.get(t.model_id, str(t.model_id)),
                benches.get(t.benchmark_id, str(t.benchmark_id)),
                t.epoch_id,
                t.status,
                t.score,
                outcome.spread if outcome else None,
                t.round,
                runners[t.id],
                outliers[t.id],
                t.finalized_at,
                labels[t.id],
            )
        )
    return out


# --- tasks, runners, compare --------------------------------------------------------

TASK_STATUSES = ("PENDING", "DONE", "DISPUTED")


def task_list(
    ctx: ServerContext, *, status: str | None = None, limit: int = 50, before_id: int | None = None
) -> list[TaskSummary]:
    """Tasks, newest first (keyset pagination with ``before_id``)."""
    if status is not None and status not in TASK_STATUSES:
        raise ConfigError(f"unknown status {status!r}; use one of {', '.join(TASK_STATUSES)}")
    with ctx.db.read() as session:
        benches = _benchmark_names(session)
        query = select(Task).order_by(Task.id.desc()).limit(max(1, min(limit, 500)))
        if status:
            query = query.where(Task.status == status)
        if before_id is not None:
            query = query.where(Task.id < before_id)
        return _task_summaries(session, query, None, benches)


@dataclass(frozen=True)
class SampleRow:
    """One sample of a final task: its consensus value and each result's score."""

    id: str
    subject: str | None
    consensus: float | None
    scores: list[float | None]
    """Per result, in the order of the task's ``results``."""


@dataclass(frozen=True)
class TaskDetail:
    task: dict[str, Any]
    """The public view of the task (``services.tasks.get_task``): no results while open."""
    runner_names: dict[int, str]
    """``account/runner`` of each result's runner."""
    samples: list[SampleRow]
    """Empty while the task is open (its sample ids are not public before)."""
    failures: list[Failure] = field(default_factory=list)
    """Its newest failure reports (reason and time only; shown while open too)."""


def task_detail(ctx: ServerContext, task_id: int) -> TaskDetail:
    """One task with who said what, per sample, once it is final."""
    task = get_task(ctx, task_id)
    with ctx.db.read() as session:
        failures = recent_failures(session, task_id=task_id, limit=FAILURES_SHOWN)
    if not task["final"]:
        return TaskDetail(task, {}, [], failures)
    results = task["results"]
    with ctx.db.read() as session:
        runner_ids = {r["runner_id"] for r in results}
        names = {
            runner_id: f"{account}/{name}"
            for runner_id, name, account in session.execute(
                select(Runner.id, Runner.name, Account.name)
                .join(Account, Account.id == Runner.account_id)
                .where(Runner.id.in_(runner_ids))
            )
        }
        row = session.execute(
            select(Task.sample_ids, Benchmark.name, Benchmark.version, Benchmark.dataset_sha256)
            .join(Benchmark, Benchmark.id == Task.benchmark_id)
            .where(Task.id == task_id)
        ).one()
        last = session.scalars(
            select(ConsensusOutcome.sample_consensus)
            .where(ConsensusOutcome.task_id == task_id)
            .order_by(ConsensusOutcome.round.desc())
            .limit(1)
        ).first()
    ids: list[str] = list(row.sample_ids)
    subjects = _subjects(ctx, row.name, row.version, row.dataset_sha256, ids)
    consensus = list(last or [])
    samples = [
        SampleRow(
            sample_id,
            subjects.get(sample_id),
            consensus[i] if i < len(consensus) else None,
            [r["sample_scores"][i] if i < len(r["sample_scores"]) else None for r in results],
        )
        for i, sample_id in enumerate(ids)
    ]
    return TaskDetail(task, names, samples, failures)


@dataclass(frozen=True)
class RunnerRow:
    id: int
    name: str
    account: str
    results: int
    agreements: int
    outliers: int
    agreement_rate: float | None
    suspended: bool
    last_seen_at: datetime | None


def runner_list(ctx: ServerContext) -> list[RunnerRow]:
    """Every runner with its contributions, most results first (kept, :func:`_kept`:
    counting results scans the whole table)."""
    found: list[RunnerRow] = _kept(ctx, ("runners",), lambda: _runners(ctx))
    return found


def _runners(ctx: ServerContext) -> list[RunnerRow]:
    with ctx.db.read() as session:
        counts: dict[int, int] = {
            runner_id: n
            for runner_id, n in session.execute(
                select(Result.runner_id, func.count()).group_by(Result.runner_id)
            )
        }
        rows = session.execute(
            select(Runner, Account.name).join(Account, Account.id == Runner.account_id)
        )
        out = [
            RunnerRow(
                r.id,
                r.name,
                account,
                counts.get(r.id, 0),
                r.agreements,
                r.outliers,
                r.agreements / (r.agreements + r.outliers) if r.agreements + r.outliers else None,
                r.suspended,
                r.last_seen_at,
            )
            for r, account in rows
        ]
    out.sort(key=lambda r: (-r.results, r.id))
    return out


@dataclass(frozen=True)
class CompareView:
    models: list[ModelLink]
    benchmarks: list[str]
    scores: list[dict[str, Score]]
    """Per model (same order), per benchmark; ``aggregate`` when complete."""
    separated: dict[str, bool]
    """Per benchmark: whether some pair of the models' intervals does not overlap."""
    subjects: dict[str, list[str]] = field(default_factory=dict)
    """Per benchmark with a subject breakdown: its subjects, most samples first."""
    subject_scores: list[dict[tuple[str, str], SubjectScore]] = field(default_factory=list)
    """Per model (same order), per (benchmark, subject)."""
    subject_separated: dict[tuple[str, str], bool] = field(default_factory=dict)
    sizes: list[ModelSize] = field(default_factory=list)
    """Per model (same order): its size (base + adapter for a LoRA adapter)."""


def _separated(intervals: Sequence[Score | SubjectScore]) -> bool:
    """Whether some pair of these intervals does not overlap."""
    return any(
        a.ci_high < b.ci_low or b.ci_high < a.ci_low
        for i, a in enumerate(intervals)
        for b in intervals[i + 1 :]
    )


def compare(ctx: ServerContext, model_ids: list[int]) -> CompareView:
    """Two to four models side by side, per benchmark and per subject."""
    if not 2 <= len(model_ids) <= 4 or len(set(model_ids)) != len(model_ids):
        raise ConfigError("compare two to four different models (models=ID,ID,...)")
    benchmarks = active_benchmarks(ctx)
    views = [model_view(ctx, i, recent=0) for i in model_ids]
    scores = [{**v.scores, **({AGGREGATE: v.aggregate} if v.aggregate else {})} for v in views]
    separated = {
        name: _separated([s[name] for s in scores if name in s])
        for name in [*benchmarks, AGGREGATE]
    }
    by_model = [
        {(bench, s.subject): s for bench, rows in v.subjects.items() for s in rows} for v in views
    ]
    totals: dict[tuple[str, str], int] = {}
    for rows in by_model:
        for key, s in rows.items():
            totals[key] = totals.get(key, 0) + s.n_samples
    subjects: dict[str, list[str]] = {}
    for bench, subject in sorted(totals, key=lambda k: (k[0], -totals[k], k[1])):
        subjects.setdefault(bench, []).append(subject)
    return CompareView(
        [ModelLink(v.id, v.name, v.ref) for v in views],
        benchmarks,
        scores,
        separated,
        subjects,
        by_model,
        {key: _separated([m[key] for m in by_model if key in m]) for key in totals},
        [v.size for v in views],
    )


def all_model_ids(ctx: ServerContext) -> list[int]:
    """Models with a score (for the static export)."""
    with ctx.db.read() as session:
        return list(
            session.scalars(
                select(LeaderboardEntry.model_id).distinct().order_by(LeaderboardEntry.model_id)
            )
        )


def load_labels(ctx: ServerContext) -> list[str]:
    """Load the active benchmarks' data for the subject tables; the names that failed.

    (A server loads them at startup; a reader such as ``export-site`` does it here. A
    custom benchmark is registered by its spec's path, which the database does not keep,
    and a Hub benchmark needs the Hub or ``datasets_dir``: those get no subject tables.)
    """
    missing = []
    for name in active_benchmarks(ctx):
        try:
            loaded(ctx, name)
        except QuorumError:
            missing.append(name)
    return missing


def reader_context(settings: ServerSettings, datasets_dir: Path | None = None) -> ServerContext:
    """A context for reading an existing database (``export-site``): the admin
    commands' context, which changes nothing the server owns."""
    ctx = admin_context(settings, hint="")
    ctx.datasets_dir = datasets_dir
    return ctx
