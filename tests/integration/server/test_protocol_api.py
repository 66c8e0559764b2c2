"""The runner endpoints speak the typed protocol, and /docs describes it fully."""

from __future__ import annotations

from typing import Any

import pytest

from quorumbench import protocol

from .conftest import hub_ref
from .test_api import assert_problem, auth, payload, pull, register, signed

RUNNER_OPERATIONS = [
    ("/v0/leases", "post"),
    ("/v0/leases/{lease_id}/heartbeat", "post"),
    ("/v0/leases/{lease_id}/failure", "post"),
    ("/v0/leases/{lease_id}/result", "post"),
]


def _resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = spec["components"]["schemas"][name]
    return schema


def _objects(spec: dict[str, Any], schema: dict[str, Any], path: str, seen: set[str]):
    """Every object schema reachable from ``schema``, with where it was met."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        if name in seen:
            return
        seen.add(name)
        yield from _objects(spec, _resolve(spec, schema), f"{path}<{name}>", seen)
        return
    for key in ("anyOf", "oneOf", "allOf"):
        for i, part in enumerate(schema.get(key, [])):
            yield from _objects(spec, part, f"{path}|{i}", seen)
    if "items" in schema:
        yield from _objects(spec, schema["items"], f"{path}[]", seen)
    if schema.get("type") == "object" or "properties" in schema:
        yield path, schema
        for name, field in schema.get("properties", {}).items():
            yield from _objects(spec, field, f"{path}.{name}", seen)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            yield from _objects(spec, extra, f"{path}{{*}}", seen)


def test_the_runner_bodies_are_described_fully(api):
    """No object with free keys: every object lists its fields; the one map (a
    benchmark's prompt options) has typed scalar values."""
    spec = api.get("/openapi.json").json()
    checked = []
    for route, method in RUNNER_OPERATIONS:
        operation = spec["paths"][route][method]
        schemas = [operation["requestBody"]["content"]["application/json"]["schema"]]
        for status, answer in operation["responses"].items():
            if status.startswith("2") and "content" in answer:
                schemas.append(answer["content"]["application/json"]["schema"])
        for schema in schemas:
            for where, obj in _objects(spec, schema, f"{method} {route}", set()):
                extra = obj.get("additionalProperties")
                checked.append(where)
                if obj.get("properties"):
                    assert extra in (None, False), where
                else:  # a map: only the benchmark's prompt options
                    assert where.endswith(".config"), where
                    assert {t.get("type") for t in extra["anyOf"]} == {
                        "integer",
                        "number",
                        "string",
                        "boolean",
                    }
    names = " ".join(checked)
    for part in ("<Task>", "<TaskModel>", "<TaskBenchmark>", "<ResultPayload", "<Hardware"):
        assert part in names, part
    grant = spec["components"]["schemas"]["LeaseGrant"]
    assert set(grant["required"]) == {"lease_id", "attempt", "expires_at", "task"}


def test_a_lease_grants_the_typed_task(api, people):
    assert register(api, people, hub_ref(1)).status_code == 201
    answer = pull(api, people, "r1")
    assert answer.status_code == 201, answer.text
    grant = protocol.LeaseGrant.model_validate(answer.json())
    assert grant.protocol_version == protocol.PROTOCOL_VERSION
    task = grant.task
    assert task.model.revision is not None and task.model.ref.endswith(task.model.revision)
    assert len(task.sample_ids) == task.n_samples and len(task.seed_commitment) == 64
    assert set(answer.json()["task"]) == set(protocol.Task.model_fields)


@pytest.mark.parametrize("version", ["0.9", "1.5", "2.0"])
def test_a_pull_or_submission_in_another_protocol_is_refused_with_426(api, people, version):
    assert register(api, people, hub_ref(1)).status_code == 201
    refused = api.post(
        "/v0/leases",
        json={"runner": "r1-box", "protocol_version": version},
        headers=auth(people["r1"]),
    )
    problem = assert_problem(refused, 426, "unsupported-protocol", f"this runner speaks {version}")
    assert refused.headers["upgrade"] == f"quorumbench-runner/{protocol.PROTOCOL_VERSION}"
    assert (problem["protocol_version"], problem["accepted_versions"]) == (version, "1.0 to 1.4")
    lease = pull(api, people, "r1").json()
    body = signed(api, people, "r1", lease, payload(lease, 1.0))
    submission = api.post(
        f"/v0/leases/{lease['lease_id']}/result",
        params={"runner": "r1-box"},
        json={**body, "protocol_version": version},
        headers=auth(people["r1"]),
    )
    assert_problem(submission, 426, "unsupported-protocol", f"this runner speaks {version}")
    task = api.get(f"/v0/tasks/{lease['task']['id']}").json()
    assert task["status"] == "PENDING" and task["results"] == []
    accepted = api.post(
        f"/v0/leases/{lease['lease_id']}/result",
        params={"runner": "r1-box"},
        json={**body, "protocol_version": "1.0"},
        headers=auth(people["r1"]),
    )
    assert accepted.status_code == 201, accepted.text


def test_a_malformed_version_is_a_422(api, people):
    answer = api.post(
        "/v0/leases",
        json={"runner": "r1-box", "protocol_version": "one"},
        headers=auth(people["r1"]),
    )
    assert_problem(answer, 422, "invalid-request", "protocol_version")
