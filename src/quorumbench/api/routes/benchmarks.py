"""Benchmarks created through the API: create (``benchmark:create``), show, retire."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, status

from quorumbench.api.deps import Context, Writer
from quorumbench.api.schemas import CreatedBenchmarkOut
from quorumbench.protocol import BENCHMARK_NAME_PATTERN
from quorumbench.services import created_benchmarks
from quorumbench.services.ratelimit import count_submission

router = APIRouter(prefix="/v0/benchmarks", tags=["benchmarks"])
BenchmarkName = Annotated[str, Path(pattern=BENCHMARK_NAME_PATTERN, max_length=64)]
SPEC_EXAMPLE = {
    "name": "world-capitals",
    "version": 1,
    "pillar": "language",
    "format": "multiple-choice",
    "data": {"url": "https://example.org/capitals.jsonl", "sha256": "5258d644" + "0" * 56},
    "prompt": {"version": 1, "template": "Question: {question}\nAnswer:"},
    "choices_field": "choices",
    "answer_field": "answer",
    "labels": {"skill": "knowledge", "subject": "hass/{region}"},
}


@router.post("", status_code=status.HTTP_201_CREATED, response_model=CreatedBenchmarkOut)
def create(
    spec: Annotated[
        dict[str, Any],
        Body(
            description="A custom benchmark spec (docs/custom-benchmarks.md) naming its "
            "pillar, labels in taxonomy v1 and its data by url and sha256.",
            examples=[SPEC_EXAMPLE],
        ),
    ],
    ctx: Context,
    principal: Writer,
) -> CreatedBenchmarkOut:
    """Create a benchmark (needs the ``benchmark:create`` scope, and the account must
    hold that permission). The server fetches the data once (public addresses only,
    size-limited, checked against the SHA-256), checks every row, stores the spec, URL
    and hash (not the data) and schedules it for the active models from the next epoch.
    Every refusal is a 4xx problem and stores nothing."""
    principal.require("benchmark:create")
    count_submission(ctx, principal)  # each creation fetches a URL, as a submission reads the Hub
    info = created_benchmarks.create_benchmark(ctx, principal, spec)
    return CreatedBenchmarkOut.model_validate(info)


@router.get("/{name}", response_model=CreatedBenchmarkOut)
def show(name: BenchmarkName, ctx: Context) -> CreatedBenchmarkOut:
    """A benchmark by name: its active version, else its newest; for one created
    through the API its spec and data URL too (runners fetch the data from there)."""
    return CreatedBenchmarkOut.model_validate(created_benchmarks.benchmark_info(ctx, name))


@router.post("/{name}/retire", response_model=CreatedBenchmarkOut)
def retire(name: BenchmarkName, ctx: Context, principal: Writer) -> CreatedBenchmarkOut:
    """Retire a benchmark created through the API (needs ``benchmark:create``; its owner
    or an admin, anyone else gets 404): off the schedule and the board, its tasks and
    results kept. A benchmark of the server's settings is its operator's (409)."""
    principal.require("benchmark:create")
    info = created_benchmarks.retire_benchmark(ctx, principal, name)
    return CreatedBenchmarkOut.model_validate(info)
