"""Subject labels of samples, and a model's score per subject (the model page's table).

A benchmark's data may label each sample with a subject (TruthfulQA's categories, a
custom spec's ``subject`` field). The database keeps sample ids only; the labels come
from the benchmark data this process has loaded, remembered per (name, version, data
SHA-256) on the context as pages ask for them.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import and_, select
from sqlalchemy.orm import Session

from quorumbench.core.comparison import SubjectScore, subject_scores
from quorumbench.db.models import TASK_EPOCH, Benchmark, ConsensusOutcome, Task
from quorumbench.errors import QuorumError
from quorumbench.protocol import TaskStatus
from quorumbench.services.benchmarks import loaded
from quorumbench.services.board import active_benchmarks
from quorumbench.services.context import ServerContext


def by_subject(
    ctx: ServerContext, session: Session, model_id: int
) -> dict[str, list[SubjectScore]]:
    """Per active benchmark whose samples carry two or more subject labels: the model's
    mean per-sample consensus score per subject over its DONE tasks, most samples first.

    The intervals are the leaderboard's (``core/comparison.py``). Benchmarks whose data
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
            Task.status == TaskStatus.DONE,
            Task.purpose == TASK_EPOCH,  # the board's draws, not deepen tasks' labelled picks
            Task.benchmark_id.in_(active),
            ConsensusOutcome.status == TaskStatus.DONE,
        )
        .order_by(Task.id)
    ):
        if len(ids) == len(consensus):
            samples.setdefault(bench_id, []).extend(zip(ids, consensus, strict=True))
    out = {}
    for bench_id, pairs in samples.items():
        row = active[bench_id]
        subjects = subject_labels(
            ctx, row.name, row.version, row.dataset_sha256, [i for i, _ in pairs]
        )
        values: dict[str, list[float]] = {}
        for sample_id, value in pairs:
            subject = subjects.get(sample_id)
            if subject is not None:
                values.setdefault(subject, []).append(float(value))
        if len(values) >= 2:
            out[row.name] = subject_scores(values)
    return dict(sorted(out.items()))


def subject_labels(
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
