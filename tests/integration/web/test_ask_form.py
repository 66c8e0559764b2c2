"""``/ask`` without JavaScript, the parts that need no planner or cache, on SQLite and
PostgreSQL: the query box, the plan form posted and shown back (``action=update``),
refused plans shown in place with the values kept (422, as the API answers them), an
endpoint or deepening refused signed out (401) or without the session's CSRF token
(403), and an API key that never comes back in a page. ``test_ask_pages.py`` asks for
real."""

from __future__ import annotations

import html as html_lib
import json
import re
from datetime import UTC, datetime, timedelta

import pytest

from quorumbench.core.plans import Plan, parse_plan
from quorumbench.web.ask_form import FormState, fmt_size, parse_size
from quorumbench.web.ask_view import ago

from .browser import Browser, forms_of

KEY = "sk-never-shown-5f1d0c"


def plan_form(html: str):
    return next(f for f in forms_of(html) if f.id == "plan-form")


def problem(html: str) -> str:
    found = re.search(r'<p class="warning" role="alert" id="plan-problem">(.*?)</p>', html, re.S)
    assert found, html
    return html_lib.unescape(found[1])


def update(browser: Browser, fields: list[tuple[str, str]]):
    """Post a plan form with ``action=update``: the plan shown back, nothing asked."""
    return browser.post("/ask", data=[*fields, ("action", "update")])


BASE = [("versions", '{"taxonomy":1}'), ("select", "ranked"), ("budget", "100")]


def test_the_query_box_is_a_labelled_get_form_and_the_nav_links_to_it(site):
    with Browser(site.app) as browser:
        page = browser.get("/ask")
        assert page.status_code == 200
        assert '<label for="ask-q">Your question</label>' in page.text
        assert 'aria-describedby="ask-q-hint"' in page.text
        (query,) = [f for f in forms_of(page.text) if f.id == "ask-form"]
        assert (query.action, query.method) == ("/ask", "get")
        home = browser.get("/")
        assert re.search(r'<a href="/ask"[^>]*>Ask</a>', home.text)
        assert 'href="/ask" aria-current="page"' in page.text


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/ask?q=", "Type a question first."),
        ("/ask?q=%20%20", "Type a question first."),
        ("/ask?q=" + "a" * 501, "A question is at most 500 characters; this one has 501."),
    ],
)
def test_an_empty_or_long_question_is_refused_on_the_page(site, path, message):
    with Browser(site.app) as browser:
        page = browser.get(path)
    assert page.status_code == 400
    assert message in page.text and 'role="alert"' in page.text


def test_a_malformed_plan_id_is_a_400_page(site):
    with Browser(site.app) as browser:
        page = browser.get("/ask?plan=not-a-plan")
        assert page.status_code == 400
        assert "a plan id is 64 lowercase hex digits" in page.text
        machine = browser.client.get("/ask?plan=xyz&format=json", headers={"Accept": "*/*"})
        assert machine.status_code == 400
        assert machine.headers["content-type"].startswith("application/problem+json")


def test_an_edited_form_is_shown_back_as_the_plan_it_now_is(site):
    fields = [
        *BASE,
        ("skill", "reasoning"),
        ("skill", "knowledge"),  # ticked chips
        ("add_subject", "science/math, hass"),  # typed, two at once
        ("add_format", "mcqa"),  # picked
        ("language", "ko"),
    ]
    with Browser(site.app) as browser:
        page = update(browser, fields)
    assert page.status_code == 200, page.text
    expected = parse_plan(
        {
            "labels": {
                "skill": ["knowledge", "reasoning"],
                "subject": ["hass", "science/math"],
                "format": ["mcqa"],
                "language": ["ko"],
            }
        }
    )
    assert f'<code id="plan-id">{expected.id}</code>' in page.text
    shown = plan_form(page.text)
    ticked = {(k, v) for k, v in shown.fields if k in ("skill", "subject", "format", "language")}
    assert ticked == {
        ("skill", "knowledge"),
        ("skill", "reasoning"),
        ("subject", "hass"),
        ("subject", "science/math"),
        ("format", "mcqa"),
        ("language", "ko"),
    }
    # what is chosen is not offered again; what is not, is
    add_skill = re.search(r'<select id="add-skill".*?</select>', page.text, re.S)
    assert add_skill and "reasoning" not in add_skill[0] and "alignment" in add_skill[0]
    # the plan document, both ways, and no shareable link before it is asked
    assert '"science/math"' in page.text and "- science/math" in page.text
    assert "once asked" in page.text


def test_unticking_a_chip_removes_it_and_the_model_choice_decides_which_fields_count(site):
    fields = [
        ("versions", '{"taxonomy":1}'),
        ("budget", "50"),
        ("select", "filter"),
        ("kind", "gguf"),
        ("max_params", "1.5B"),
        ("name", "leftover-name"),  # a chip left from 'named': not read under 'filter'
    ]
    with Browser(site.app) as browser:
        page = update(browser, fields)
    assert page.status_code == 200, page.text
    models = {"select": "filter", "kinds": ["gguf"], "max_params": 1_500_000_000}
    expected = parse_plan({"budget": 50, "models": models})
    assert f'<code id="plan-id">{expected.id}</code>' in page.text
    assert 'value="1.5B"' in page.text


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ([("budget", "0")], "budget must be an integer from 1 to 5000"),
        ([("budget", "lots")], "budget: 'lots' is not a whole number of samples"),
        ([("add_skill", "wisdom")], "labels.skill: 'wisdom' not one of"),
        ([("add_language", "korean")], "labels.language: 'korean' is not an ISO 639-1 code"),
        ([("add_subject", "cooking")], "labels.subject: 'cooking' does not start with one of"),
        ([("select", "filter"), ("max_params", "huge")], "cannot read 'huge' as a size"),
        (
            [("select", "filter"), ("min_params", "2B"), ("max_params", "1B")],
            "models.min_params is above models.max_params",
        ),
        ([("select", "named")], "models.select 'named' needs at least one name"),
        ([("add_name", "org/model")], "to name models, choose 'Only named models'"),
        ([("select", "everything")], "models: choose one of ranked, filter, named"),
    ],
)
def test_a_refused_plan_is_shown_in_place_with_its_values(site, change, message):
    keys = {k for k, _ in change}
    fields = [(k, v) for k, v in BASE if k not in keys] + [("skill", "reasoning"), *change]
    with Browser(site.app) as browser:
        page = browser.post("/ask", data=fields)  # asking, not only updating
    assert page.status_code == 422
    assert message in problem(page.text)
    assert ("skill", "reasoning") in plan_form(page.text).fields  # kept to be corrected


def test_unreadable_versions_and_plan_json_are_refused_in_place(site):
    with Browser(site.app) as browser:
        page = browser.post("/ask", data=[("versions", "{not json"), ("select", "ranked")])
        assert page.status_code == 422
        assert "versions: the plan's versions are not readable JSON" in problem(page.text)
        page = browser.post("/ask", data=[("plan_json", "[1, 2"), ("deepen", "1")])
        assert page.status_code == 422
        assert "the plan is not readable JSON" in problem(page.text)
        page = browser.post("/ask", data=[("plan_json", '{"labels": {"skil": []}}')])
        assert page.status_code == 422
        assert "labels: unknown key(s) 'skil'" in problem(page.text)
        page = browser.post("/ask", data=[("versions", '{"taxonomy": 9}'), ("select", "ranked")])
        assert "this server knows taxonomy 1" in problem(page.text)


def test_signed_out_the_form_offers_no_endpoint_and_an_endpoint_or_deepening_is_401(site):
    endpoint = [
        ("endpoint_url", "https://llm.example.org/v1"),
        ("endpoint_model", "mine"),
        ("endpoint_key", KEY),
    ]
    with Browser(site.app) as browser:
        page = update(browser, BASE)
        assert 'id="endpoint-signin"' in page.text and 'name="endpoint_url"' not in page.text
        asked = browser.post("/ask", data=[*BASE, *endpoint])
        assert asked.status_code == 401
        assert "Sign in first to ask with your own endpoint" in asked.text
        plan = json.dumps(Plan().as_json())
        deepen = browser.post("/ask", data=[("plan_json", plan), ("deepen", "1")])
        assert deepen.status_code == 401
        assert "Sign in first to deepen" in deepen.text
    assert KEY not in asked.text


def test_signed_in_the_endpoint_fields_are_there_and_need_the_csrf_token(site):
    with Browser(site.app) as browser:
        browser.dev_signin("dana")
        page = update(browser, BASE)
        assert page.headers["cache-control"] == "no-store"
        form = plan_form(page.text)
        assert form.value("csrf")
        key_input = re.search(r'<input id="endpoint-key"[^>]*>', page.text)
        assert key_input and 'type="password"' in key_input[0]
        assert 'autocomplete="off"' in key_input[0] and 'value=""' in key_input[0]
        fields = [
            *form.fields,
            ("endpoint_url", "https://llm.example.org/v1"),
            ("endpoint_model", "mine"),
            ("endpoint_key", KEY),
        ]
        forged = browser.post("/ask", data=[(k, v) for k, v in fields if k != "csrf"])
        assert forged.status_code == 403
        assert "security token is missing" in forged.text
        other = [(k, "x" * 43 if k == "csrf" else v) for k, v in fields]
        assert browser.post("/ask", data=other).status_code == 403
    assert KEY not in forged.text


def test_a_half_given_endpoint_is_refused_in_place_and_the_key_is_not_shown_back(site):
    with Browser(site.app) as browser:
        browser.dev_signin("dana")
        form = plan_form(update(browser, BASE).text)
        page = browser.submit(
            form, endpoint_url="https://llm.example.org/v1", endpoint_model="", endpoint_key=KEY
        )
        assert page.status_code == 400
        assert "give the model name it serves as well" in problem(page.text)
        assert 'value="https://llm.example.org/v1"' in page.text  # kept
        assert KEY not in page.text
        assert "Type the key again" in page.text
        page = browser.submit(form, endpoint_model="mine", endpoint_key=KEY, budget="0")
        assert page.status_code == 422 and KEY not in page.text


@pytest.mark.parametrize(
    "plan",
    [
        {},
        {"labels": {"skill": ["value"], "target": ["local/kr"], "language": ["ko"]}},
        {"pillars": ["math", "safety"], "benchmarks": ["arith"], "budget": 7},
        {"models": {"select": "named", "names": ["hf:org/a@main", "b"]}},
        {"models": {"select": "filter", "kinds": ["hf", "lora"], "min_params": 135_000_000}},
        {"versions": {"planner": "offline/1", "seed": "00ff", "benchmarks": {"arith": 2}}},
    ],
)
def test_a_plan_survives_the_form_unchanged(plan):
    made = parse_plan(plan)
    assert parse_plan(FormState.of_plan(made).plan_json()) == made


@pytest.mark.parametrize(
    "size", [None, 7, 999, 1_000, 135_000_000, 1_104_000_000, 1_234_567, 7 * 10**9, 2 * 10**12]
)
def test_a_size_reads_back_as_the_same_number(size):
    assert parse_size(fmt_size(size), "x") == size


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "just now"),
        (59, "just now"),
        (60, "1 minute ago"),
        (7200, "2 hours ago"),
        (86400 * 3, "3 days ago"),
    ],
)
def test_freshness_reads_as_time_ago(seconds, text):
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert ago(now - timedelta(seconds=seconds), now) == text
    assert ago(None, now) == "—"


@pytest.mark.parametrize(
    "posted", ["", "{not json", "[1]", '{"matches": [[1, 2]]}', '{"matches": 5}']
)
def test_an_unreadable_planner_note_annotates_nothing_and_changes_no_plan(site, posted):
    with Browser(site.app) as browser:
        page = update(browser, [*BASE, ("skill", "value"), ("how", posted)])
    assert page.status_code == 200
    assert (
        f'<code id="plan-id">{parse_plan({"labels": {"skill": ["value"]}}).id}</code>' in page.text
    )
    assert 'id="how"' not in page.text
