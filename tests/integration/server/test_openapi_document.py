"""What ``/openapi.json`` declares, and the answers it promises (api/openapi.py).

Schemathesis (test_openapi_contract.py) checks the document against what the API
does with generated requests; these tests pin the mechanism and the cases a
generator may or may not reach: the declared problem responses, the unknown-
parameter check agreeing with the declared parameters, ``Allow`` on 405, the bounds
of integer parameters, and requests the schema allows that used to be refused.
"""

from __future__ import annotations

from typing import get_args

import pytest
from fastapi.testclient import TestClient

from quorumbench.api import params
from quorumbench.api.app import create_app
from quorumbench.api.openapi import RAISES
from quorumbench.api.routes.auth import Scope
from quorumbench.services.accounts import SCOPES
from quorumbench.services.runners import NAME_PATTERN

from .conftest import hub_ref
from .test_api import assert_problem, auth, pull, register

PROBLEM = "application/problem+json"
METHODS = ("get", "post", "put", "patch", "delete")


def operations(document):
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method in METHODS:
                yield method.upper(), path, operation


@pytest.fixture
def document(api):
    return api.get("/openapi.json").json()


def test_every_error_an_operation_can_give_is_declared_as_a_problem(document):
    assert "HTTPValidationError" not in document["components"]["schemas"]
    problem = document["components"]["schemas"]["Problem"]
    assert problem["required"] == ["type", "title", "status", "detail", "instance"]
    assert problem["additionalProperties"] is False
    for method, path, operation in operations(document):
        responses = operation["responses"]
        for status, response in responses.items():
            if int(status) >= 400 and (method, path) != ("GET", "/v0/health"):
                assert set(response["content"]) == {PROBLEM}, (method, path, status)
        assert "500" in responses, (method, path)
        if path != "/v0/auth/{provider}/callback":  # it takes what the provider adds
            assert "/problems/unknown-parameter" in responses["400"]["description"]
    login = document["paths"]["/v0/auth/token"]["post"]["responses"]
    assert "/problems/unauthenticated" in login["401"]["description"]
    pull_ = document["paths"]["/v0/leases"]["post"]["responses"]
    assert {"201", "204", "401", "403", "404", "409", "411", "413", "422", "429", "503"} <= set(
        pull_
    )
    assert pull_["401"]["headers"]["WWW-Authenticate"]["required"] is True
    assert pull_["503"]["headers"]["Retry-After"]["required"] is True
    board = document["paths"]["/v0/leaderboard"]["get"]["responses"]["200"]["content"]
    assert set(board) == {"application/json", "text/csv"}


def test_a_new_lease_links_to_what_can_be_done_with_it(document):
    links = document["paths"]["/v0/leases"]["post"]["responses"]["201"]["links"]
    targets = {link["operationId"]: link["parameters"] for link in links.values()}
    ids = {
        f"{method} {path}": operation["operationId"]
        for method, path, operation in operations(document)
    }
    release = targets[ids["DELETE /v0/leases/{lease_id}"]]
    assert release == {"lease_id": "$response.body#/lease_id", "attempt": "$response.body#/attempt"}
    assert targets[ids["POST /v0/leases/{lease_id}/heartbeat"]] == {
        "lease_id": "$response.body#/lease_id"
    }
    key = document["paths"]["/v0/runners/{runner}/keys"]["post"]["responses"]["201"]["links"]
    assert {"runner": "$request.path.runner", "key_id": "$response.body#/key_id"} in [
        link["parameters"] for link in key.values()
    ]


def test_operations_that_need_a_credential_declare_the_bearer_scheme(document):
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    secured = {
        (method, path)
        for method, path, operation in operations(document)
        if operation.get("security") == [{"bearer": []}]
    }
    assert ("POST", "/v0/leases") in secured and ("GET", "/v0/me") in secured
    assert ("POST", "/v0/models") in secured and ("GET", "/v0/models") not in secured
    for method, path in secured:
        assert "401" in document["paths"][path][method.lower()]["responses"]


def test_each_declared_error_names_an_operation_that_exists(make_ctx, people):
    ctx = make_ctx(insecure_dev_login=True)  # /v0/auth/dev-login is in the table too
    with TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False)) as client:
        document = client.get("/openapi.json").json()
    named = {f"{method} {path}" for method, path, _ in operations(document)}
    assert set(RAISES) <= named, set(RAISES) - named


def test_the_unknown_parameter_check_takes_exactly_the_declared_parameters(api, document):
    routes = params.api_routes(api.app)
    assert routes
    for route in routes:
        for method in route.methods:
            operation = document["paths"][route.path][method.lower()]
            declared = [p["name"] for p in operation.get("parameters", []) if p["in"] == "query"]
            assert sorted(declared) == sorted(route.allowed), (method, route.path)


def test_a_405_names_every_method_of_the_path(api):
    for method, path, allow in [
        ("TRACE", "/v0/models", "GET, POST"),
        ("PUT", "/v0/models/1", "GET"),
        ("OPTIONS", "/v0/leases/7", "DELETE"),
        ("GET", "/v0/leases/7/heartbeat", "POST"),
        ("DELETE", "/v0/runners/box/keys", "GET, POST"),
    ]:
        answer = api.request(method, path)
        body = assert_problem(answer, 405, "method-not-allowed", method)
        assert answer.headers["allow"] == allow, (method, path)
        assert body["detail"].endswith(f"use {allow}")


def test_integers_past_32_bits_are_refused_not_looked_up(api, people):
    for path in [
        "/v0/leaderboard?min_samples=58931576891637145600",
        "/v0/leaderboard?offset=2147483648",
        "/v0/models/2147483648",
        "/v0/models/-9223372036854775809",
        "/v0/tasks?model_id=2147483648",
        "/v0/tasks/0",
        "/v0/epochs/99999999999999999999",
        "/v0/log/entries?start=2147483648",
    ]:
        assert_problem(api.get(path), 422, "invalid-request")
    assert api.get("/v0/models/2147483647").status_code == 404  # the largest id there can be
    resume = api.post("/v0/models/2147483648/resume", headers=auth(people["owner"]))
    assert_problem(resume, 422, "invalid-request")


def test_what_the_schema_allows_is_not_refused_for_its_form(api, people):
    assert_problem(api.get("/v0/leaderboard?benchmark=nope"), 404, "not-found", "'nope'")
    # a benchmark name has a form (a NUL in it failed the request on PostgreSQL)
    assert_problem(api.get("/v0/leaderboard?benchmark="), 422, "invalid-request", "benchmark")
    assert_problem(api.get("/v0/leaderboard?benchmark=%00"), 422, "invalid-request")
    assert_problem(api.get("/v0/leaderboard?q=a%00b"), 422, "invalid-request", "q")
    assert_problem(api.get("/v0/tasks?status=LOST"), 422, "invalid-request", "status")
    assert api.get("/v0/tasks?status=DONE").json() == []
    register(api, people, hub_ref(1))
    assert_problem(api.get("/v0/log/proof/inclusion?index=0&size=1"), 404, "not-found")
    assert_problem(api.get("/v0/log/proof/consistency?first=2&second=1"), 404, "not-found")
    assert_problem(api.get("/v0/auth/github/callback"), 404, "not-found", "no login provider")


def test_a_login_gives_exactly_one_credential(api, people):
    for body in [{}, {"api_token": people["r1"], "id_token": "x"}, {"scopes": []}, []]:
        answer = api.post("/v0/auth/token", json=body)
        assert_problem(answer, 422, "invalid-request", "give exactly one of api_token and id_token")
    answer = api.post("/v0/auth/token", json={"api_token": people["r1"], "scopes": ["root"]})
    assert_problem(answer, 422, "invalid-request", "scopes")
    session = api.post("/v0/auth/token", json={"api_token": people["r1"], "scopes": ["task:pull"]})
    assert session.status_code == 200 and session.json()["scope"] == "task:pull"
    assert_problem(api.post("/v0/auth/token", json={"id_token": "x.y.z"}), 401, "unauthenticated")


def test_the_scopes_a_login_may_ask_for_are_the_accounts_scopes():
    assert get_args(Scope) == SCOPES


def test_a_ref_that_is_not_a_url_is_refused_not_a_server_error(api, people):
    answer = api.post(
        "/v0/models", json={"ref": "openai:http://[x#m"}, headers=auth(people["owner"])
    )
    assert_problem(answer, 422, "invalid-ref", "not a URL")
    no_scheme = api.post("/v0/models", json={"ref": "org/model"}, headers=auth(people["owner"]))
    assert_problem(no_scheme, 422, "invalid-request", "ref")


def test_the_lease_routes_declare_the_runner_name_they_accept(document):
    lease_in = document["components"]["schemas"]["LeaseRequest"]["properties"]["runner"]
    assert lease_in.get("pattern") == NAME_PATTERN
    for path in ["/v0/leases/{lease_id}/heartbeat", "/v0/leases/{lease_id}/failure"]:
        (runner,) = [
            p for p in document["paths"][path]["post"]["parameters"] if p["name"] == "runner"
        ]
        assert runner["schema"].get("pattern") == NAME_PATTERN


def test_lease_ids_and_attempts_no_row_can_have_are_refused(api, people):
    register(api, people, hub_ref(3))
    lease = pull(api, people, "r1").json()
    client = TestClient(api.app, raise_server_exceptions=False)  # a 500 is an answer here
    for method, path, body in [
        ("POST", "/v0/leases/99999999999999999999/heartbeat", {"attempt": 1}),
        ("POST", f"/v0/leases/{lease['lease_id']}/heartbeat", {"attempt": 99999999999999999999}),
        ("POST", "/v0/leases/99999999999999999999/failure", {"attempt": 1, "reason": "x"}),
        ("DELETE", f"/v0/leases/{lease['lease_id']}?attempt=99999999999999999999", None),
    ]:
        answer = client.request(
            method, path, params={"runner": "r1-box"}, json=body, headers=auth(people["r1"])
        )
        assert answer.status_code == 422, (path, answer.status_code)
