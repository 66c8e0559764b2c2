"""Errors on the web pages: a bad query or path value, or an unknown path, gets an
HTML page for people; the JSON API and machine formats keep their problem+json."""

from __future__ import annotations

import html

import pytest

from quorumbench.api.problems import plain_error

BROWSER = {"accept": "text/html,application/xhtml+xml,*/*;q=0.8"}


def assert_html_error(response, status, title, *texts):
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("text/html")
    text = html.unescape(response.text)
    assert f"<h1>{title}</h1>" in text
    assert 'href="/static/site.css' in text  # the site's own layout, not a bare message
    for expected in texts:
        assert expected in text, expected
    return text


def assert_problem(response, status, code, text=""):
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["type"] == f"/problems/{code}" and body["status"] == status
    assert text in body["detail"]
    return body


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("/?page=0", "page: must be 1 or more"),
        ("/?order=sideways", "order: must be 'asc' or 'desc'"),
        ("/?per_page=5000", "per_page: must be 1000 or less"),
        ("/tasks?before=abc", "before: must be a whole number"),
        ("/tasks?limit=501", "limit: must be 500 or less"),
        ("/models/abc", "model_id: must be a whole number"),
        ("/?q=" + "x" * 101, "q: must be at most 100 characters"),
        ("/runners?format=xml", "format: must be 'html', 'json' or 'csv'"),
    ],
)
@pytest.mark.parametrize("headers", [BROWSER, {}], ids=["browser", "no-accept"])
def test_a_bad_value_on_a_page_names_the_parameter(client, url, says, headers):
    assert_html_error(client.get(url, headers=headers), 400, "Cannot show this page", says)


def test_every_bad_value_is_named(client):
    response = client.get("/?page=0&per_page=0&order=up")
    text = assert_html_error(response, 400, "Cannot show this page", "page: must be 1 or more")
    assert "per_page: must be 1 or more" in text and "order: must be 'asc' or 'desc'" in text


def test_an_unknown_path_asked_for_by_a_browser_is_the_not_found_page(client):
    assert_html_error(client.get("/nope", headers=BROWSER), 404, "Not found", "/nope")
    assert_html_error(client.get("/models/1/nope", headers=BROWSER), 404, "Not found")


def test_an_unknown_path_asked_for_by_a_program_stays_problem_json(client):
    assert_problem(client.get("/nope"), 404, "not-found")
    assert_problem(client.get("/nope", headers={"accept": "application/json"}), 404, "not-found")
    assert_problem(client.get("/nope?format=json", headers=BROWSER), 404, "not-found")


@pytest.mark.parametrize("path", ["/v0/nope", "/v0", "/docs/nope", "/openapi.json/nope"])
def test_unknown_paths_of_the_api_stay_problem_json(client, path):
    assert_problem(client.get(path, headers=BROWSER), 404, "not-found", "Not Found")


@pytest.mark.parametrize("headers", [BROWSER, {}], ids=["browser", "no-accept"])
def test_bad_values_in_the_api_stay_problem_json(client, headers):
    body = assert_problem(
        client.get("/v0/models/abc", headers=headers), 422, "invalid-request", "path.model_id"
    )
    assert body["instance"] == "/v0/models/abc"
    assert body["errors"][0]["loc"] == ["path", "model_id"]
    body = assert_problem(client.get("/v0/tasks?limit=0", headers=headers), 422, "invalid-request")
    assert body["detail"] == "query.limit: Input should be greater than or equal to 1"
    assert body["errors"] == [
        {
            "loc": ["query", "limit"],
            "msg": "Input should be greater than or equal to 1",
            "type": "greater_than_equal",
        }
    ]


@pytest.mark.parametrize(
    ("url", "param"),
    [
        ("/?page=0&format=json", "query.page"),
        ("/?order=sideways&format=csv", "query.order"),
        ("/tasks?before=abc&format=json", "query.before"),
        ("/models/abc?format=csv", "path.model_id"),
    ],
)
def test_a_machine_format_on_a_page_gets_problem_json(client, url, param):
    body = assert_problem(client.get(url, headers=BROWSER), 422, "invalid-request", param)
    assert body["errors"][0]["loc"] == param.split(".")


def test_errors_from_the_services_keep_their_pages(client):
    assert_html_error(client.get("/models/4242"), 404, "Not found", "no model 4242")
    assert_html_error(client.get("/?min_params=huge"), 400, "Cannot show this page", "huge")


@pytest.mark.parametrize(
    ("error", "text"),
    [
        (
            {"loc": ("query", "page"), "msg": "m", "type": "greater_than", "ctx": {"gt": 0}},
            "page: must be more than 0",
        ),
        ({"loc": ("query", "x"), "msg": "Odd input", "type": "something_new"}, "x: Odd input"),
        ({"loc": ("query", "x"), "msg": "Odd input", "type": "greater_than"}, "x: Odd input"),
        ({"loc": ("path",), "msg": "m", "type": "missing"}, "is required"),
    ],
)
def test_plain_words_fall_back_to_the_message(error, text):
    assert plain_error(error) == text
