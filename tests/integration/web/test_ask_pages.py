"""``/ask`` and ``/asks/{id}`` without JavaScript, asked for real (the planner, the ask
cache, the asks service, deepening) on the web tests' seeded database, SQLite and
PostgreSQL: a question becomes chips, the edited plan a board with the cache's very
numbers (page, JSON and CSV), thin slices are marked against the budget, a signed-in
person deepens them and sees the counts, an endpoint on a private address fails on its
page with the reason and stays its owner's, unknown plans and asks are 404 pages."""

from __future__ import annotations

import csv
import html as html_lib
import io
import re
import time
from urllib.parse import parse_qsl, urlsplit

import pytest

from quorumbench.api.app import create_app
from quorumbench.services import asks
from quorumbench.services.accounts import create_account
from quorumbench.services.web_sessions import sign_in
from quorumbench.web.session import SESSION_COOKIE

from .browser import Browser, forms_of

QUERY = "which model is best at science reasoning?"
KEY = "sk-pages-1c0ffee9"


@pytest.fixture(scope="module")
def app(seed):
    return create_app(seed.ctx.settings, context=seed.ctx, run_scheduler=False)


@pytest.fixture(scope="module")
def cookie(seed):
    """A signed-in session's cookie, as the site's sign-in sets it."""
    return sign_in(seed.ctx, create_account(seed.ctx, "dana"), "test").cookie


def plan_form(text: str):
    return next(f for f in forms_of(text) if f.id == "plan-form")


def board_names(text: str) -> list[str]:
    return re.findall(r'<td class="name"><a href="/models/\d+">([^<]+)</a>', text)


def plan_id_of(location: str) -> str:
    (value,) = [v for k, v in parse_qsl(urlsplit(location).query) if k == "plan"]
    return value


def test_a_question_becomes_chips_and_the_edited_plan_a_board_of_the_cache(seed, app):
    with Browser(app) as browser:
        page = browser.get("/ask", params={"q": QUERY})
        assert page.status_code == 200, page.text
        form = plan_form(page.text)
        assert ("skill", "reasoning") in form.fields and ("subject", "science") in form.fields
        assert re.search(r"“science” → subject: <strong>science</strong>", page.text)
        assert 'id="how-planner">offline/' in page.text
        # untick subject "science", add "science/even"
        asked = browser.submit(form, subject=None, add_subject="science/even")
        assert asked.status_code == 303, asked.text
        location = asked.headers["location"]
        plan_id = plan_id_of(location)
        board = browser.get(location)
        csv_text = browser.get(location + "&format=csv").text
        data = browser.get(location + "&format=json").json()
        api = browser.client.get(f"/v0/plans/{plan_id}", headers={"Accept": "application/json"})
    plan, answer = asks.plan_board(seed.ctx, plan_id)
    assert plan.label_values("subject") == ("science/even",)
    assert plan.label_values("skill") == ("reasoning",)
    assert plan.id == plan_id and answer.rows
    # the page shows the cache's rows, in its order, with its numbers
    assert board_names(board.text) == [r.name for r in answer.rows]
    for row in answer.rows:
        assert f"{row.score:.3f}" in board.text and f"{row.ci_low:.3f}" in board.text
    ranks = re.findall(r'<td class="num rank">(\d+)', board.text)
    assert ranks == [str(r.rank) for r in answer.rows]
    assert [
        (r["model"], r["n_samples"], r["score"], r["best"], r["worst"]) for r in data["rows"]
    ] == [(r.name, r.n_samples, r.score, r.best, r.worst) for r in answer.rows]
    assert data["plan_id"] == plan_id and all(r["cross_checked"] for r in data["rows"])
    rows = list(csv.DictReader(io.StringIO(csv_text)))
    assert [r["model"] for r in rows] == [r.name for r in answer.rows]
    assert all(r["benchmarks"].startswith("sums:") for r in rows)
    # the plan document and its shareable link
    assert f'<code id="plan-id">{plan_id}</code>' in board.text
    assert f'href="http://testserver/ask?plan={plan_id}"' in board.text
    assert "- science/even" in html_lib.unescape(board.text)  # the YAML
    # and the API's board of the plan, linked
    assert f'<a href="/v0/plans/{plan_id}?format=csv">CSV</a>' in board.text
    assert api.status_code == 200, api.text


@pytest.mark.parametrize("budget", [5, 5000])
def test_thin_slices_are_marked_against_the_budget(seed, app, cookie, budget):
    with Browser(app) as browser:
        form = plan_form(browser.get("/ask", params={"q": QUERY}).text)
        location = browser.submit(form, budget=str(budget)).headers["location"]
        signed_out = browser.get(location).text
        browser.plant(SESSION_COOKIE, cookie)
        signed_in = browser.get(location)
    _, answer = asks.plan_board(seed.ctx, plan_id_of(location))
    thin = [r.name for r in answer.rows if r.thin]
    assert thin == ([] if budget == 5 else [r.name for r in answer.rows])
    assert signed_out.count('<span class="badge thin">thin</span>') == len(thin)
    assert ('id="thin-notice"' in signed_out) == bool(thin)
    assert ('id="deepen-form"' in signed_in.text) == bool(thin)
    assert signed_in.headers["cache-control"] == "no-store"
    if thin:
        assert f"{len(thin)} of {len(answer.rows)} models have fewer samples" in signed_out
        assert "to deepen the thin slices" in signed_out  # sign in


def test_a_signed_in_person_deepens_thin_slices_and_sees_the_counts(seed, app, cookie):
    with Browser(app) as browser:
        browser.plant(SESSION_COOKIE, cookie)
        form = plan_form(browser.get("/ask", params={"q": QUERY}).text)
        board = browser.get(browser.submit(form, budget="40").headers["location"])
        deepen = next(f for f in forms_of(board.text) if f.id == "deepen-form")
        asked = browser.submit(deepen)
        assert asked.status_code == 303, asked.text
        assert re.fullmatch(r"/asks/[A-Za-z0-9_-]+", asked.headers["location"])
        page = browser.get(asked.headers["location"])
        progress = browser.get(asked.headers["location"] + "/progress").json()
    assert page.status_code == 200
    assert "Deepening the thin slices" in page.text
    assert progress["status"] == "SUCCESS" and progress["deepen"]["tasks"] > 0
    tasks = re.search(r"Scheduled (\d+) tasks? \((\d+) samples?\)", page.text)
    assert tasks and int(tasks[1]) == progress["deepen"]["tasks"]
    assert f'<dd data-key="pending">{progress["deepen"]["pending"]}</dd>' in page.text
    assert 'id="ask-watch"' in page.text  # the deepening is followed while it runs


def test_an_endpoint_on_a_private_address_fails_on_its_page_and_stays_its_owners(seed, app, cookie):
    with Browser(app) as browser:
        browser.plant(SESSION_COOKIE, cookie)
        form = plan_form(browser.get("/ask", params={"q": QUERY}).text)
        asked = browser.submit(
            form,
            budget="2",
            endpoint_url="http://10.0.0.1/v1",
            endpoint_model="mine",
            endpoint_key=KEY,
        )
        assert asked.status_code == 303, asked.text
        where = asked.headers["location"]
        assert KEY not in where
        running = browser.get(where)
        assert running.status_code == 200 and running.headers["cache-control"] == "no-store"
        deadline = time.monotonic() + 30
        while not (progress := browser.get(where + "/progress").json())["done"]:
            assert time.monotonic() < deadline, progress
            time.sleep(0.2)
        page = browser.get(where)
    assert progress["status"] == "FAILURE" and progress["error"]
    assert 'id="ask-status-badge">FAILURE</span>' in page.text
    assert html_lib.escape(progress["error"], quote=False) in page.text
    assert 'id="ask-watch"' not in page.text and 'href="' + where + '">Refresh' not in page.text
    assert "not cross-checked" in page.text and "10.0.0.1" in page.text
    assert KEY not in running.text + page.text
    with Browser(app) as stranger:
        assert stranger.get(where).status_code == 404
        assert stranger.get(where + "/progress").status_code == 404
        with Browser(app) as other:
            other.plant(
                SESSION_COOKIE, sign_in(seed.ctx, create_account(seed.ctx, "erin"), "t").cookie
            )
            assert other.get(where).status_code == 404


def test_an_endpoint_url_with_credentials_is_refused_in_place(app, cookie):
    with Browser(app) as browser:
        browser.plant(SESSION_COOKIE, cookie)
        form = plan_form(browser.get("/ask", params={"q": QUERY}).text)
        page = browser.submit(
            form,
            endpoint_url="https://user:pw@llm.example.org/v1",
            endpoint_model="mine",
            endpoint_key=KEY,
        )
    assert page.status_code == 422
    assert 'role="alert" id="plan-problem"' in page.text and "credentials" in page.text
    assert KEY not in page.text


@pytest.mark.parametrize(
    ("path", "status", "text"),
    [
        ("/ask?plan=" + "0" * 64, 404, "no plan"),
        ("/asks/no-such-ask", 404, "no ask"),
        ("/asks/no-such-ask/progress", 404, "no ask"),
        ("/asks/" + "x" * 65, 400, ""),
    ],
)
def test_unknown_plans_and_asks_are_not_found(app, path, status, text):
    with Browser(app) as browser:
        page = browser.get(path)
    assert page.status_code == status
    assert text in page.text
