"""Engine pinning (protocol 1.3) on every queue backend: a model's tasks go only to
runners that have its engine, the task names it, and a result must come from it, so
results of two engines never meet in one consensus."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sqlalchemy import update

from quorumbench.db.models import Model
from quorumbench.errors import InvalidSubmissionError
from quorumbench.protocol import ResultPayload
from quorumbench.queue.base import Claimant
from quorumbench.services.results import submit_result

from .conftest import N_SAMPLES, World

ALL = ("transformers", "llamacpp", "endpoint")


def _on(world: World, task_id: int, engine: str | None) -> None:
    """The task's model on ``engine``: a GGUF file for llamacpp (an ``hf:`` ref there
    is a LoRA adapter, see the last test)."""
    model_id = world.task(task_id).model_id
    values: dict[str, object] = {"engine": engine}
    if engine == "llamacpp":
        values["ref"] = f"gguf:/models/m{model_id}.gguf@{'b' * 64}"
    with world.db.write() as session:
        session.execute(update(Model).where(Model.id == model_id).values(**values))


def _with(claimant: Claimant, *engines: str) -> Claimant:
    return replace(claimant, engines=engines)  # type: ignore[arg-type]


def test_a_runner_without_the_models_engine_is_not_offered_its_task(world: World) -> None:
    owner, legacy, lean = world.account(), world.account(), world.account()
    llama_task, hf_task = world.tasks(owner, count=2)
    _on(world, llama_task, "llamacpp")
    _on(world, hf_task, "transformers")

    # a runner before 1.3 (transformers and endpoints) gets the transformers task only
    first = world.claim(legacy)
    assert first is not None and first.task_id == hf_task
    assert first.task.model.engine == "transformers"
    assert world.claim(legacy) is None
    assert world.task(llama_task).open_slots == world.task(llama_task).quorum

    # a runner with llama.cpp and no transformers gets the llama.cpp one only
    lean = _with(lean, "llamacpp", "endpoint")
    claim = world.claim(lean)
    assert claim is not None and claim.task_id == llama_task
    assert claim.task.model.engine == "llamacpp"
    assert world.claim(lean) is None


def test_a_model_with_no_engine_goes_to_any_runner(world: World) -> None:
    owner, runner = world.account(), world.account()
    [task_id] = world.tasks(owner)
    _on(world, task_id, None)  # a plugin's scheme: the runner's own backend
    claim = world.claim(_with(runner, "endpoint"))
    assert claim is not None and claim.task.model.engine is None


def _payload(world: World, task_id: int, engine: str | None) -> ResultPayload:
    return world.payload(task_id, [1.0] * N_SAMPLES).model_copy(update={"engine": engine})


@pytest.mark.parametrize(
    ("model_engine", "result_engine", "accepted"),
    [
        ("llamacpp", "llamacpp", True),
        ("llamacpp", "transformers", False),
        ("llamacpp", None, False),  # a runner before 1.3 would have de-quantized it
        ("transformers", None, True),  # what a runner before 1.3 did
        ("transformers", "llamacpp", False),
        ("endpoint", None, True),
        (None, "transformers", True),
    ],
)
def test_a_result_must_come_from_the_engine_its_task_names(
    world: World, model_engine: str | None, result_engine: str | None, accepted: bool
) -> None:
    owner, runner = world.account(), world.account()
    [task_id] = world.tasks(owner)
    _on(world, task_id, model_engine)
    claim = world.claim(_with(runner, *ALL))
    assert claim is not None
    payload = _payload(world, task_id, result_engine)
    if accepted:
        submit_result(world.ctx, runner, claim.lease_id, claim.attempt, payload)
        [stored] = world.results(task_id)
        assert stored.engine == result_engine
        return
    with pytest.raises(InvalidSubmissionError) as refused:
        submit_result(world.ctx, runner, claim.lease_id, claim.attempt, payload)
    assert f"this task's model is evaluated by {model_engine}" in refused.value.message
    assert world.results(task_id) == []


def test_an_adapter_on_llama_cpp_goes_only_to_runners_that_run_them(world: World) -> None:
    """An ``hf:`` LoRA adapter on a GGUF base names the llamacpp engine (protocol 1.4):
    a 1.3 runner's llama.cpp engine runs GGUF files alone and is not offered it."""
    owner, older, newer = world.account(), world.account(), world.account()
    [task_id] = world.tasks(owner)
    with world.db.write() as session:
        session.execute(
            update(Model)
            .where(Model.id == world.task(task_id).model_id)
            .values(engine="llamacpp", ref=f"hf:/models/lora@{'a' * 64}")
        )
    assert world.claim(_with(older, *ALL)) is None
    claim = world.claim(replace(_with(newer, *ALL), gguf_adapters=True))
    assert claim is not None and claim.task_id == task_id
    assert claim.task.model.engine == "llamacpp" and claim.task.model.ref.startswith("hf:")
    # a GGUF file's task still goes to a 1.3 runner with llama.cpp
    [gguf_task] = world.tasks(owner)
    _on(world, gguf_task, "llamacpp")
    offered = world.claim(_with(older, "llamacpp"))
    assert offered is not None and offered.task_id == gguf_task
