"""A server database seeded through the services, for the web tests.

Models of every type (base, a LoRA with its base, GGUF, endpoint) registered with
``register_model`` and fake metadata, two benchmarks (``arith`` and a custom ``sums``
whose samples carry an even/odd subject), five epochs of tasks finalized DONE by three
runners' ``submit_result``, the endpoint measured on one benchmark only (no
aggregate), one task left DISPUTED, and one DONE by three of four runners (the
fourth, volunteer3, an outlier). The tasks use sums' ids ``s0``..``s3``, which are
not arith ids: arith has no subject table here.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select

from quorumbench.core.canonical import predictions_digest
from quorumbench.db.measurement_models import TaskMeasurement
from quorumbench.db.models import Benchmark, Epoch, Lease, Model, Result, Runner, Task
from quorumbench.evaluation.refs import parse_ref
from quorumbench.queue.base import Claimant
from quorumbench.services.accounts import Principal, create_account
from quorumbench.services.board import active_benchmarks
from quorumbench.services.model_metadata import ModelMetadata
from quorumbench.services.models import register_model
from quorumbench.services.results import ResultPayload, submit_result
from quorumbench.services.wiring import build_context
from quorumbench.settings import ServerSettings

from ..sums import write_sums_spec
from ..templates import migrated_sqlite


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def _sums_spec(tmp: Path) -> str:
    return write_sums_spec(tmp, "science/{topic}", lambda i: {"topic": ("even", "odd")[i % 2]})


# name, ref, params, license, adapter of
MODELS = [
    ("alpha-1b", f"hf:org/alpha-1b@{'1' * 40}", 1_100_000_000, "apache-2.0", None),
    ("beta-7b", f"hf:org/beta-7b@{'2' * 40}", 7_000_000_000, "llama3", None),
    ("gamma-135m", f"hf:org/gamma-135m@{'3' * 40}", 135_000_000, "apache-2.0", None),
    ("delta-360m", f"hf:org/delta-360m@{'4' * 40}", 360_000_000, "mit", None),
    ("alpha-1b-lora", f"hf:org/alpha-1b-lora@{'5' * 40}", 4_000_000, "apache-2.0", "alpha-1b"),
    ("smol-q4", f"gguf:org/smol-gguf/smol.Q4_1.gguf@{'6' * 40}", 135_000_000, "apache-2.0", None),
    ("chat-endpoint", "openai:http://llm.example.invalid/v1#chat-endpoint", None, None, None),
]
BASE_PARAMS = 1_100_000_000
"""alpha-1b-lora's base (alpha-1b): its effective size is 1.104B, its own 4M."""
# per model: sample pattern (one epoch's 4 samples are these, rotated)
QUALITY = {
    "alpha-1b": 3,
    "beta-7b": 4,
    "gamma-135m": 1,
    "delta-360m": 2,
    "alpha-1b-lora": 3,
    "smol-q4": 2,
    "chat-endpoint": 4,
}


def _metadata(ref: str) -> ModelMetadata:
    name, _, params, license_, adapter_of = next(m for m in MODELS if m[1] == ref)
    base = next((m[1] for m in MODELS if m[0] == adapter_of), None)
    return ModelMetadata(
        ref=parse_ref(ref),
        name=name,
        params=params,
        architecture="lora" if base else "LlamaForCausalLM",
        context_length=None if base else 2048,
        dtype="float16",
        quantization="Q4_1" if ref.startswith("gguf:") else None,
        license=license_,
        base_ref=base,
        weights_sha256=None if ref.startswith("openai:") else uuid.uuid4().hex * 2,
        # an adapter's base size, as registration reads it from the base's headers
        details={"kind": "adapter", "base_params": BASE_PARAMS} if base else {},
    )


class Seed:
    def __init__(self, tmp: Path, database_url: str | None = None, **extra: Any) -> None:
        """``extra``: more server settings (e.g. ``ask_allow_private_endpoints``)."""
        self.clock = Clock()
        settings = ServerSettings(
            **extra,
            data_dir=tmp,
            database_url=database_url or migrated_sqlite(tmp / "web.db"),
            quorum=3,
            max_rounds=1,
            samples_per_task=4,
            benchmarks=["arith", _sums_spec(tmp)],
            # two pillars, one benchmark each, weighted equally: the aggregate is the
            # mean of the two (generative: chance level 0, scores uncorrected)
            pillars={"sums": "reasoning"},
            pillar_weights={"reasoning": 1, "coding": 0, "math": 1, "language": 0, "safety": 0},
            quota_evaluations=0,
            canary_rate=0.0,
            allow_private_endpoints=True,  # chat-endpoint's host does not resolve
        )
        self.ctx = build_context(settings)
        self.ctx.clock = self.clock
        self.ctx.inspector = _metadata
        admin = create_account(self.ctx, "admin", is_admin=True)
        principal = Principal(admin.id, "admin", True, frozenset({"admin"}))
        self.ids = {name: register_model(self.ctx, principal, ref).id for name, ref, *_ in MODELS}
        self.voters = [self._voter(f"volunteer{i}", f"box-{i}") for i in range(4)]
        with self.ctx.db.write() as session:
            start = self.clock.now
            session.add_all(
                Epoch(
                    id=e,
                    starts_at=start + timedelta(hours=e),
                    ends_at=start + timedelta(hours=e + 1),
                    seed=str(e),
                    seed_commitment=str(e),
                    scheduled_at=None,
                )
                for e in range(1, 7)
            )
        self.benchmarks = active_benchmarks(self.ctx)

    def _voter(self, account: str, runner: str) -> Claimant:
        made = create_account(self.ctx, account)
        with self.ctx.db.write() as session:
            row = Runner(account_id=made.id, name=runner, created_at=self.clock.now)
            session.add(row)
            session.flush()
            return Claimant(made.id, row.id)

    def task(
        self, model: str, bench: str, epoch: int, votes: list[list[float]], quorum: int = 0
    ) -> str:
        """A task voted on by the first ``len(votes)`` runners; its status. Its quorum is
        ``quorum``, or the number of votes."""
        voters = self.voters[: len(votes)]
        now = self.clock.now
        ids = [f"s{i}" for i in range(len(votes[0]))]
        with self.ctx.db.write() as session:
            bench_id = session.scalars(select(Benchmark.id).where(Benchmark.name == bench)).one()
            engine = session.get_one(Model, self.ids[model]).engine  # as 1.3 runners name it
            task = Task(
                model_id=self.ids[model],
                benchmark_id=bench_id,
                epoch_id=epoch,
                n_samples=len(ids),
                quorum=quorum or len(votes),
                open_slots=max(0, quorum - len(votes)),
                sample_ids=ids,
                created_at=now,
            )
            session.add(task)
            session.flush()
            leases = [
                Lease(
                    task_id=task.id,
                    runner_id=v.runner_id,
                    account_id=v.account_id,
                    attempt=1,
                    round=1,
                    leased_at=now,
                    expires_at=now + timedelta(hours=1),
                )
                for v in voters
            ]
            session.add_all(leases)
            session.flush()
            pairs = [(v, lease.id, task.id) for v, lease in zip(voters, leases, strict=True)]
        status = ""
        for (voter, lease_id, task_id), samples in zip(pairs, votes, strict=True):
            payload = ResultPayload(
                task_id=task_id,
                score=sum(samples) / len(samples),
                n=len(samples),
                sample_ids=ids,
                sample_scores=samples,
                sample_output_hashes=["0" * 64] * len(samples),
                outputs_sha256="ab" * 32,
                sample_predictions=[str(x) for x in samples],
                predictions_sha256=predictions_digest(str(x) for x in samples),
                runtime_s=1.0,
                engine=engine,
            )
            status = submit_result(self.ctx, voter, lease_id, 1, payload).task_status
        self.clock.now += timedelta(minutes=7)
        return status

    def fill(self) -> None:
        for epoch in range(1, 6):
            for name, *_ in MODELS:
                good = QUALITY[name]
                for bench in self.benchmarks:
                    if name == "chat-endpoint" and bench != "arith":
                        continue  # measured on one benchmark: no aggregate
                    right = min(4, max(0, good + (epoch % 2 if bench == "sums" else 0) - 1))
                    samples = [1.0] * right + [0.0] * (4 - right)
                    assert self.task(name, bench, epoch, [samples] * 3) == "DONE"
        status = self.task("delta-360m", "arith", 6, [[0.0] * 4, [1.0] * 4, [1.0] * 4])
        assert status == "DISPUTED"
        # four results, three agree: DONE, and volunteer3's result is an outlier
        status = self.task("gamma-135m", "arith", 6, [[0.0] * 4] * 3 + [[1.0] * 4])
        assert status == "DONE"

    def fail_and_pause(self, model: str, reason: str) -> int:
        """A failure report (volunteer0's) on the model's newest task, and the model
        paused as services/failures.py leaves it; the task's id. Idempotent."""
        now = self.clock.now
        voter = self.voters[0]
        with self.ctx.db.write() as session:
            task = session.scalars(
                select(Task).where(Task.model_id == self.ids[model]).order_by(Task.id.desc())
            ).first()
            assert task is not None
            row = session.get_one(Model, self.ids[model])
            if row.paused_at is None:
                session.add(
                    Lease(
                        task_id=task.id,
                        runner_id=voter.runner_id,
                        account_id=voter.account_id,
                        attempt=task.attempts + 1,
                        round=task.round,
                        state="FAILED",
                        leased_at=now,
                        expires_at=now + timedelta(hours=1),
                        ended_at=now,
                        failure=reason,
                    )
                )
                row.paused_at = now
                row.paused_reason = f"3 consecutive tasks failed; last reason: {reason}"
            return task.id

    def flag_a_measurement(self) -> tuple[int, int]:
        """The first DONE task's first result marked as services/measurement_check.py
        marks an energy outlier, with its class's statistics; (its runner's id, another
        runner's id without flags). Idempotent."""
        cls = "cpu:amd-epyc-7b13:2c"
        with self.ctx.db.write() as session:
            result = session.scalars(
                select(Result).join(Task).where(Task.status == "DONE").order_by(Result.id)
            ).first()
            assert result is not None
            if not result.measurement_outlier:
                result.measurement_outlier = True
                result.hardware_class = cls
                result.measurements = {"energy_kwh": 1e-3, "energy_method": "rapl"}
                session.add(
                    TaskMeasurement(
                        task_id=result.task_id,
                        hardware_class=cls,
                        n=3,
                        energy_kwh_per_sample_median=1e-4 / result.n,
                        energy_kwh_per_sample_spread=0.0,
                        flagged=1,
                        created_at=self.clock.now,
                    )
                )
            other = session.scalars(
                select(Runner.id).where(Runner.id != result.runner_id).order_by(Runner.id)
            ).first()
            assert other is not None
            return result.runner_id, other
