"""The submission report (services/submissions): one validation behind every door.

Each finding code is produced here through the API, on SQLite and PostgreSQL: from a
local Hub (test_header_only_metadata's, read through the real Hub client: ranged
requests, no network) or from fake metadata. ``POST /v0/submissions/validate``
answers the report and registers nothing; ``POST /v0/models`` refuses exactly when
the report has an error, with the first error's problem and the whole report as its
``report`` member.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from quorumbench.api.app import create_app
from quorumbench.services.accounts import create_account, issue_token
from quorumbench.services.context import ServerContext
from quorumbench.services.model_metadata import HfHubClient, inspect_model
from quorumbench.services.submissions.estimate import MEASURED, REFERENCE_PARAMS

from .conftest import fake_metadata, hub_ref
from .test_api import assert_problem, auth
from .test_header_only_metadata import (  # noqa: F401 (fixtures)
    BASE_SHA,
    SHA,
    LocalHub,
    _safetensors,
    hub_dir,
    local_hub,
)

WEIGHTS = {"embed": (64, 32), "layer.0": (32, 32)}
"""3,072 parameters of float32."""
PARAMS = 64 * 32 + 32 * 32


@dataclass
class World:
    ctx: ServerContext
    client: TestClient
    tokens: dict[str, str]
    hub: LocalHub
    hub_dir: Path

    def validate(self, ref: str, who: str = "owner", **body: Any) -> dict[str, Any]:
        answer = self.client.post(
            "/v0/submissions/validate", json={"ref": ref, **body}, headers=auth(self.tokens[who])
        )
        assert answer.status_code == 200, answer.text
        report: dict[str, Any] = answer.json()
        return report

    def register(self, ref: str, who: str = "owner", **body: Any) -> Any:
        return self.client.post(
            "/v0/models", json={"ref": ref, **body}, headers=auth(self.tokens[who])
        )

    def models(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.client.get("/v0/models").json()
        return found

    def repo(
        self,
        repo_id: str,
        *,
        sha: str = SHA,
        config: dict[str, Any] | None = None,
        card: str | None = "---\nlicense: mit\n---\n# a model\n",
        weights: dict[str, tuple[int, ...]] | None = WEIGHTS,
        files: dict[str, bytes] | None = None,
    ) -> None:
        """A checkpoint on the local Hub: config.json, model.safetensors, a card."""
        where = self.hub_dir / repo_id.replace("/", "--") / sha[:8]
        where.mkdir(parents=True, exist_ok=True)
        made: dict[str, Path] = {}
        if config is not None:
            made["config.json"] = where / "config.json"
            made["config.json"].write_text(json.dumps(config), encoding="utf-8")
        if weights is not None:
            made["model.safetensors"] = _safetensors(where / "model.safetensors", weights)
        if card is not None:
            made["README.md"] = where / "README.md"
            made["README.md"].write_text(card, encoding="utf-8")
        for name, data in (files or {}).items():
            made[name] = where / name
            made[name].write_bytes(data)
        self.hub.add(repo_id, sha, made)


LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "max_position_embeddings": 2048,
    "torch_dtype": "float32",
}


@pytest.fixture
def make_world(make_ctx, db_url, local_hub, hub_dir) -> Iterator[Any]:  # noqa: F811
    clients: list[TestClient] = []

    def make(**overrides: Any) -> World:
        ctx = make_ctx(db_url, **overrides)

        def inspect(ref: str) -> Any:
            with HfHubClient(local_hub.url, token="hf_test") as client:
                return inspect_model(ref, hub=client)

        ctx.inspector = inspect
        create_account(ctx, "admin", is_admin=True)
        tokens = {"admin": issue_token(ctx, "admin", scopes=("admin",)).token}
        for name in ("owner", "other"):
            create_account(ctx, name)
            tokens[name] = issue_token(ctx, name).token
        client = TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False))
        clients.append(client)
        return World(ctx, client.__enter__(), tokens, local_hub, hub_dir)

    yield make
    for client in clients:
        client.__exit__(None, None, None)


def codes(report: dict[str, Any], level: str | None = None) -> list[str]:
    return [f["code"] for f in report["findings"] if level is None or f["level"] == level]


def finding(report: dict[str, Any], code: str) -> dict[str, Any]:
    found = [f for f in report["findings"] if f["code"] == code]
    assert len(found) == 1, report["findings"]
    return found[0]


def test_a_clean_model_is_reported_with_its_metadata_and_validating_registers_nothing(
    make_world,
):
    world = make_world()
    world.repo("org/clean", config=LLAMA)
    report = world.validate("hf:org/clean@main", name="Clean 3k")
    assert report["ok"] is True and codes(report, "error") == []
    assert report["ref"] == "hf:org/clean@main"
    assert report["pinned_ref"] == f"hf:org/clean@{SHA}"
    assert codes(report) == ["limits-ok", "ref-pinned", "cost-estimate"]  # in check order
    assert SHA in finding(report, "ref-pinned")["message"]
    assert finding(report, "ref-pinned")["field"] == "ref"
    meta = report["metadata"]
    assert meta == {
        "ref": f"hf:org/clean@{SHA}",
        "revision": SHA,
        "name": "Clean 3k",
        "family": "llama",
        "kind": "checkpoint",
        "params": PARAMS,
        "effective_params": PARAMS,
        "params_estimated": False,
        "architecture": "LlamaForCausalLM",
        "context_length": 2048,
        "dtype": "float32",
        "quantization": None,
        "license": "mit",
        "base_model": None,
        "weights_sha256": meta["weights_sha256"],
    }
    quota = report["quota"]
    assert quota["can_register"] and quota["evaluations_needed"] == 0
    assert report["existing"] is None
    assert world.models() == []  # a dry run
    registered = world.register("hf:org/clean@main", name="Clean 3k")
    assert registered.status_code == 201, registered.text
    body = registered.json()
    assert (body["ref"], body["name"], body["family"]) == (meta["ref"], "Clean 3k", "llama")


def test_the_estimate_says_how_it_is_computed_and_scales_with_the_size(make_world):
    world = make_world()
    world.repo("org/small", config=LLAMA, weights={"w": (64, 64)})
    world.repo("org/large", config=LLAMA, weights={"w": (128, 128)}, sha=BASE_SHA)
    small = world.validate("hf:org/small@main")["estimate"]
    large = world.validate(f"hf:org/large@{BASE_SHA}")["estimate"]
    assert small["params"] == 64 * 64 and large["params"] == 4 * small["params"]
    assert [b["name"] for b in small["benchmarks"]] == ["arith"]  # the active ones
    arith = small["benchmarks"][0]
    assert arith["kind"] == "generate" and arith["samples"] == 4  # samples_per_task
    expected_cpu = 4 * MEASURED["arith"].cpu_s * small["params"] / REFERENCE_PARAMS
    assert arith["cpu_seconds"] == round(expected_cpu, 1)
    assert large["cpu_seconds"] >= small["cpu_seconds"]
    assert large["gpu_seconds"] >= small["gpu_seconds"] > 0
    assert small["quorum"] == 3 and "estimate" in small["method"]
    assert (
        "reference CPU" in finding(world.validate("hf:org/small@main"), "cost-estimate")["message"]
    )


def _adapter(world: World, repo_id: str, config: dict[str, Any]) -> None:
    lora = {"a.lora_A.weight": (4, 32), "a.lora_B.weight": (32, 4)}
    world.repo(
        repo_id,
        weights=None,
        files={
            "adapter_config.json": json.dumps(
                {"peft_type": "LORA", "r": 4, "lora_alpha": 8, **config}
            ).encode()
        },
    )
    where = world.hub_dir / "adapters" / repo_id.replace("/", "--")
    where.mkdir(parents=True, exist_ok=True)
    sha, files = world.hub.repos[repo_id]
    world.hub.add(
        repo_id,
        sha,
        {
            **{n: b.path for n, b in files.items()},
            "adapter_model.safetensors": _safetensors(where / "adapter_model.safetensors", lora),
        },
    )


def _setup_refusal(world: World, case: str) -> str:
    """Make what the case needs on the local Hub; the ref to submit."""
    if case == "repo-unreachable":
        return "hf:org/missing@main"
    if case == "weights-missing":
        world.repo("org/empty", config=LLAMA, weights=None)
        return "hf:org/empty@main"
    if case == "config-missing":
        world.repo("org/noconfig")
        return "hf:org/noconfig@main"
    if case == "file-unreadable":
        world.repo("org/broken", config=LLAMA)
        world.hub.broken["model.safetensors"] = 500
        return "hf:org/broken@main"
    if case == "inspection-failed":
        world.repo("org/cut", config=LLAMA, weights=None, files={"model.safetensors": b"\x10" * 40})
        return "hf:org/cut@main"
    if case == "weights-pickle-only":
        world.repo(
            "org/pickled", config=LLAMA, weights=None, files={"pytorch_model.bin": b"x" * 64}
        )
        return "hf:org/pickled@main"
    if case == "remote-code":
        world.repo("org/custom", config={**LLAMA, "auto_map": {"AutoModel": "modeling.M"}})
        return "hf:org/custom@main"
    if case == "params-over-limit":
        world.repo("org/big", config=LLAMA, weights={"w": (512, 512)})
        return "hf:org/big@main"
    if case == "license-not-allowed":
        world.repo("org/gpl", config=LLAMA, card="---\nlicense: gpl-3.0\n---\n")
        return "hf:org/gpl@main"
    if case == "license-unknown":
        world.repo("org/nolicense", config=LLAMA, card=None)
        return "hf:org/nolicense@main"
    if case == "base-not-pinned":
        _adapter(world, "me/unpinned", {"base_model_name_or_path": "org/base"})
        return "hf:me/unpinned@main"
    if case == "base-unreachable":
        _adapter(world, "me/orphan", {"base_model_name_or_path": "org/gone", "revision": BASE_SHA})
        return "hf:me/orphan@main"
    if case == "base-is-adapter":
        _adapter(world, "org/lora-base", {"base_model_name_or_path": "x/y", "revision": SHA})
        world.hub.repos["org/lora-base"] = (BASE_SHA, world.hub.repos["org/lora-base"][1])
        _adapter(
            world, "me/stacked", {"base_model_name_or_path": "org/lora-base", "revision": BASE_SHA}
        )
        return "hf:me/stacked@main"
    if case == "ref-invalid":
        return "hf:org/x@not..a..ref"
    if case == "local-path":
        return "hf:./models/mine"
    if case == "endpoint-not-allowed":
        return "openai:http://127.0.0.1:9/v1#m"
    raise AssertionError(case)


REFUSALS = [
    # code, status, problem type, words in the detail
    ("repo-unreachable", 422, "registration-refused", "cannot resolve hf:org/missing@main"),
    ("weights-missing", 422, "registration-refused", "holds no model weights"),
    ("config-missing", 422, "registration-refused", "has no config.json"),
    ("file-unreadable", 422, "registration-refused", "500"),
    ("inspection-failed", 422, "registration-refused", "header"),
    ("weights-pickle-only", 422, "registration-refused", "pickled"),
    ("remote-code", 422, "registration-refused", "auto_map"),
    ("params-over-limit", 422, "registration-refused", "accepts at most 100,000"),
    ("license-not-allowed", 422, "registration-refused", "'gpl-3.0'"),
    ("license-unknown", 422, "registration-refused", "no licence was found"),
    ("base-not-pinned", 422, "registration-refused", "is not pinned"),
    ("base-unreachable", 422, "registration-refused", "base cannot be read"),
    ("base-is-adapter", 422, "registration-refused", "is itself an adapter"),
    ("ref-invalid", 422, "invalid-ref", ""),
    ("local-path", 422, "registration-refused", "only an admin"),
    ("endpoint-not-allowed", 422, "endpoint-not-allowed", "loopback"),
]


@pytest.mark.parametrize(
    ("code", "status", "problem", "says"), REFUSALS, ids=[r[0] for r in REFUSALS]
)
def test_each_refusal_is_one_error_in_the_report_and_the_same_problem_as_before(
    make_world, code, status, problem, says
):
    world = make_world(max_params=100_000, license_allowlist=["MIT", "apache-2.0"])
    ref = _setup_refusal(world, code)
    report = world.validate(ref)
    assert report["ok"] is False
    assert codes(report, "error") == [code], report["findings"]
    assert finding(report, code)["message"]
    refused = assert_problem(world.register(ref), status, problem, says)
    assert refused["detail"] == finding(report, code)["message"]
    assert refused["report"]["findings"] == report["findings"]
    assert refused["report"]["ok"] is False
    assert world.models() == []


@pytest.mark.parametrize("case", ["branch", "private"])
def test_an_unresolvable_branch_or_a_private_repo_is_refused_and_changes_nothing(make_world, case):
    world = make_world()
    world.repo("org/real", config=LLAMA)
    if case == "private":
        world.repo("org/secret", config=LLAMA)
        world.hub.private.add("org/secret")
    ref = "hf:org/real@no-such-branch" if case == "branch" else "hf:org/secret@main"
    report = world.validate(ref)
    assert report["ok"] is False and report["metadata"] is None
    assert codes(report, "error") == ["repo-unreachable"], report["findings"]
    message = finding(report, "repo-unreachable")["message"]
    assert f"cannot resolve {ref}" in message, message
    assert ("no branch, tag or commit" if case == "branch" else "it is private") in message
    refused = assert_problem(world.register(ref), 422, "registration-refused", message)
    assert refused["report"]["findings"] == report["findings"]
    assert world.models() == []
    assert world.validate("hf:org/real@main")["ok"] is True  # the repo itself is fine


def test_every_error_is_reported_at_once_and_the_first_one_is_the_problem(make_world):
    world = make_world(max_params=1000, license_allowlist=["apache-2.0"], quota_evaluations=2)
    world.repo(
        "org/bad",
        config={**LLAMA, "auto_map": {"AutoModelForCausalLM": "m.M"}},
        card="---\nlicense: other\n---\n",
    )
    report = world.validate("hf:org/bad@main")
    assert codes(report, "error") == [
        "quota-not-earned",
        "remote-code",
        "params-over-limit",
        "license-not-allowed",
    ]
    assert codes(report)[:4] == codes(report, "error")  # errors first
    refused = assert_problem(world.register("hf:org/bad@main"), 403, "quota-not-earned", "2 more")
    assert refused["evaluations_needed"] == 2
    assert [f["code"] for f in refused["report"]["findings"] if f["level"] == "error"] == codes(
        report, "error"
    )
    assert refused["report"]["quota"]["evaluations_needed"] == 2


def test_the_limits_are_findings_with_what_is_owed(make_world):
    world = make_world(quota_evaluations=3, registrations_per_week=1)
    world.repo("org/one", config=LLAMA)
    report = world.validate("hf:org/one@main")
    owed = finding(report, "quota-not-earned")
    assert owed["level"] == "error" and "3 more are still needed" in owed["message"]
    assert report["quota"]["evaluations_needed"] == 3
    assert report["quota"]["accepted_evaluations"] == 0
    assert report["quota"]["window_hours"] == 24
    admin = world.validate("hf:org/one@main", who="admin")
    assert admin["ok"] and "limits-exempt" in codes(admin, "info")
    assert world.register("hf:org/one@main", who="admin").status_code == 201
    world.ctx.settings = world.ctx.settings.model_copy(update={"quota_evaluations": 0})
    world.repo("org/two", config=LLAMA, sha=BASE_SHA, weights={"w": (8, 8)})
    assert world.register(f"hf:org/two@{BASE_SHA}").status_code == 201
    world.repo("org/three", config=LLAMA, weights={"w": (9, 9)})
    weekly = world.validate("hf:org/three@main")
    assert codes(weekly, "error") == ["weekly-limit"]
    assert "1 per week" in finding(weekly, "weekly-limit")["message"]
    assert weekly["quota"]["next_registration_in_s"] == 7 * 24 * 3600
    refused = world.register("hf:org/three@main")
    assert_problem(refused, 429, "rate-limited", "the limit is 1 per week")
    assert refused.headers["Retry-After"] == str(7 * 24 * 3600)


def test_duplicates_point_at_the_model_and_an_owners_repeat_is_that_model(make_world):
    world = make_world(registrations_per_week=1)
    world.repo("org/dup", config=LLAMA)
    first = world.register("hf:org/dup@main").json()
    # the owner's repeat (a form posted twice): 200, the same model, nothing registered,
    # and the weekly limit (1, spent) does not refuse it
    repeat = world.validate("hf:org/dup@main")
    assert repeat["ok"] and codes(repeat, "error") == []
    assert "already-registered" in codes(repeat, "info")
    assert repeat["existing"] == {
        "id": first["id"],
        "ref": first["ref"],
        "name": first["name"],
        "url": f"/models/{first['id']}",
        "yours": True,
        "retired": False,
    }
    again = world.register("hf:org/dup@main")
    assert again.status_code == 200 and again.json() == first
    assert len(world.models()) == 1
    # another account: the same ref is a duplicate
    other = world.validate("hf:org/dup@main", who="other")
    assert codes(other, "error") == ["duplicate-ref"]
    assert f"/models/{first['id']}" in finding(other, "duplicate-ref")["message"]
    refused = assert_problem(world.register("hf:org/dup@main", who="other"), 409, "duplicate-model")
    assert refused["existing_model_id"] == first["id"]
    assert refused["report"]["existing"]["yours"] is False
    # the same weights under another ref, even the owner's
    sha, files = world.hub.repos["org/dup"]
    world.hub.add("org/copy", sha, {n: b.path for n, b in files.items()})
    copy = world.validate("hf:org/copy@main", who="other")
    assert codes(copy, "error") == ["duplicate-weights"]
    assert first["ref"] in finding(copy, "duplicate-weights")["message"]


def test_pickled_weights_are_refused_unless_the_operator_allows_them(make_world):
    world = make_world(allow_pickle=True)
    world.repo("org/pickled", config=LLAMA, weights=None, files={"pytorch_model.bin": b"x" * 4000})
    report = world.validate("hf:org/pickled@main")
    assert report["ok"] and codes(report, "warning") == ["weights-pickle-only"]
    meta = report["metadata"]
    assert meta["params"] is None and meta["params_estimated"] is True
    assert meta["effective_params"] == 1000  # 4,000 bytes of float32
    registered = world.register("hf:org/pickled@main")
    assert registered.status_code == 201, registered.text


def test_an_unknown_size_refuses_owners_and_warns_admins(make_world):
    world = make_world()
    world.repo(
        "org/pickled-base",
        sha=BASE_SHA,
        config=LLAMA,
        weights=None,
        files={"pytorch_model.bin": b"not read"},
    )
    _adapter(
        world, "me/lora", {"base_model_name_or_path": "org/pickled-base", "revision": BASE_SHA}
    )
    report = world.validate("hf:me/lora@main")
    assert codes(report, "error") == ["params-unknown"]
    assert "base-pinned" in codes(report, "info")
    assert report["estimate"] is None
    admin = world.validate("hf:me/lora@main", who="admin")
    assert admin["ok"] and "params-unknown" in codes(admin, "warning")
    assert world.register("hf:me/lora@main", who="admin").status_code == 201


def test_an_adapters_base_is_named_with_whether_it_is_registered_here(make_world):
    world = make_world()
    world.repo("org/base", sha=BASE_SHA, config=LLAMA)
    _adapter(world, "me/lora", {"base_model_name_or_path": "org/base", "revision": BASE_SHA})
    report = world.validate("hf:me/lora@main")
    assert report["ok"] and report["metadata"]["kind"] == "adapter"
    assert report["metadata"]["base_model"] == f"hf:org/base@{BASE_SHA}"
    assert report["metadata"]["effective_params"] == PARAMS + 256
    assert "not registered on this server" in finding(report, "base-pinned")["message"]
    base = world.register(f"hf:org/base@{BASE_SHA}").json()
    again = world.validate("hf:me/lora@main")
    assert f"registered here as model {base['id']}" in finding(again, "base-pinned")["message"]


def test_an_adapter_on_a_gguf_file_is_pinned_to_it_and_runs_on_llama_cpp(make_world, smollm2_gguf):
    from quorumbench.backends._files import file_sha256

    world = make_world()
    _adapter(world, "me/lora", {"base_model_name_or_path": "bundled:smollm2-135m-instruct"})
    report = world.validate("hf:me/lora@main")
    assert report["ok"], report
    pinned = f"bundled:smollm2-135m-instruct@{file_sha256(smollm2_gguf)}"
    assert report["metadata"]["base_model"] == pinned
    assert pinned in finding(report, "base-pinned")["message"]
    made = world.register("hf:me/lora@main")
    assert made.status_code == 201, made.text
    assert made.json()["engine"] == "llamacpp" and made.json()["base_ref"] == pinned
    # a Hub GGUF base needs its commit, as any Hub base does
    _adapter(world, "me/lora3", {"base_model_name_or_path": "gguf:org/base/model.gguf"})
    unpinned = world.validate("hf:me/lora3@main")
    assert not unpinned["ok"] and codes(unpinned, "error") == ["base-not-pinned"]


def test_the_licence_is_a_warning_without_an_allow_list(make_world):
    world = make_world()
    world.repo("org/nolicense", config=LLAMA, card=None)
    report = world.validate("hf:org/nolicense@main")
    assert report["ok"] and codes(report, "warning") == ["license-unknown"]
    world.ctx.settings = world.ctx.settings.model_copy(update={"license_allowlist": ["mit"]})
    assert codes(world.validate("hf:org/nolicense@main"), "error") == ["license-unknown"]
    admin = world.validate("hf:org/nolicense@main", who="admin")
    assert admin["ok"] and codes(admin, "warning") == ["license-unknown"]


def test_an_endpoint_is_reported_as_unpinned_and_unchecked(make_world):
    world = make_world()
    report = world.validate("openai:https://93.184.216.34/v1#tiny")
    assert report["ok"] and codes(report, "warning") == ["endpoint-unpinned"]
    assert report["metadata"]["kind"] == "endpoint" and report["estimate"] is None


def test_a_scope_is_needed_and_the_submission_limit_answers_429(make_world):
    world = make_world(submission_rate_limit="3/minute")
    pull_only = issue_token(world.ctx, "owner", scopes=("task:pull",)).token
    denied = world.client.post(
        "/v0/submissions/validate", json={"ref": hub_ref(1)}, headers=auth(pull_only)
    )
    assert_problem(denied, 403, "forbidden", "model:register")
    world.ctx.inspector = fake_metadata
    for n in range(3):
        world.validate(hub_ref(n))
    refused = world.client.post(
        "/v0/models", json={"ref": hub_ref(9)}, headers=auth(world.tokens["owner"])
    )
    assert_problem(refused, 429, "rate-limited", "validations and registrations")
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert world.models() == []
    assert world.validate(hub_ref(9), who="admin")["ok"]  # admin requests are exempt


def test_a_hundred_registrations_in_a_minute_get_429_with_retry_after(make_world):
    world = make_world(registrations_per_week=3, submission_rate_limit="30/minute")
    world.ctx.inspector = fake_metadata
    answers = [world.register(hub_ref(n)) for n in range(100)]
    assert [a.status_code for a in answers[:3]] == [201, 201, 201]
    assert {a.status_code for a in answers[3:]} == {429}
    assert all(int(a.headers["Retry-After"]) >= 1 for a in answers[3:])
    assert len(world.models()) == 3


def _gguf(path: Path, **fields: int) -> Path:
    """A tiny GGUF file: one tensor, and ``fields`` as uint16 key/values."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "llama")
    for key, value in fields.items():
        writer.add_uint16(key.replace("_", "."), value)
    writer.add_tensor("w", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_an_admins_local_refs_are_checked_too(make_world, tmp_path):
    world = make_world()
    split = _gguf(tmp_path / "part-1.gguf", split_count=2)
    report = world.validate(f"gguf:{split}", who="admin")
    assert codes(report, "error") == ["gguf-split"]
    assert_problem(world.register(f"gguf:{split}", who="admin"), 422, "registration-refused")
    whole = _gguf(tmp_path / "whole.gguf")
    moved = world.validate(f"gguf:{whole}@{'0' * 64}", who="admin")
    assert codes(moved, "error") == ["ref-mismatch"]
    fine = world.validate(f"gguf:{whole}", who="admin")
    assert fine["ok"] and fine["metadata"]["kind"] == "gguf" and fine["metadata"]["params"] == 16
    assert "ref-pinned" in codes(fine, "info")  # pinned to the file's SHA-256
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    config = {"peft_type": "LORA", "base_model_name_or_path": str(tmp_path / "gone")}
    (adapter / "adapter_config.json").write_text(json.dumps(config), encoding="utf-8")
    _safetensors(adapter / "adapter_model.safetensors", {"a": (4, 4)})
    orphan = world.validate(f"hf:{adapter}", who="admin")
    assert codes(orphan, "error") == ["base-missing"]
    # anyone else: refused before the path is looked at
    assert codes(world.validate(f"gguf:{whole}"), "error") == ["local-path"]


def test_a_scheme_the_server_cannot_read_is_reported(make_world):
    from quorumbench.services.sessions import authenticate
    from quorumbench.services.submissions import Submission, validate_submission

    world = make_world()
    world.ctx.inspector = None  # the real reader: it refuses before reading anything
    owner = authenticate(world.ctx, world.tokens["owner"])
    found = validate_submission(world.ctx, owner, Submission(f"mock:echo@{'a' * 40}"))
    assert [f.code for f in found.report.findings if f.level == "error"] == ["scheme-unsupported"]
    assert found.refusal is not None and found.report.metadata is None
