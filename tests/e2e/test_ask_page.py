"""Asking on the site end to end: headless Chromium (Playwright) against a live server.

The web tests' seeded database (``integration/web/seed.py``: seven models, five epochs
of verified tasks on ``arith``, all ``science/math``, and ``sums``, whose samples are
``science/even`` or ``science/odd``). A person asks in words, sees the plan as chips
with the words that chose them, removes one chip and adds another, and gets a board
from the verified results; signed in, they ask with their own endpoint (the tests'
OpenAI-compatible server over SmolLM2, on loopback, which the seeded server allows,
checking an API key) and watch the ask's page reach SUCCESS by itself, its row marked
"not cross-checked"; the key is nowhere in what the browser saw. axe-core finds
nothing on the query box, the plan, the board and an ask's page, in light and dark.
Screenshots go to ``tests/artifacts/web/`` (``ask*.png``).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from integration.openai_server import LoadedModel, serve
from integration.web.seed import Seed
from quorumbench.api.app import create_app
from quorumbench.api.embedded import EmbeddedServer
from quorumbench.services.accounts import create_account
from quorumbench.services.web_sessions import sign_in
from quorumbench.web.session import SESSION_COOKIE

from .test_web import AxeFindings, browser, shot

__all__ = ["browser"]  # the module's Chromium, shared with test_web
KEY = "sk-e2e-ask-7a41c9d2e8"
QUERY = "which model is best at science reasoning?"
DEEPEN_MS = 0
"""How long the deepen button's POST may take: no limit of Playwright's (it schedules
tasks for 5,000 samples a model, 7-10 s measured under coverage, longer on a busy
machine); pytest's timeout is what stops a hang."""


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    made = Seed(tmp_path_factory.mktemp("ask"), ask_allow_private_endpoints=True)
    made.fill()
    made.ctx.clock = lambda: datetime.now(UTC)  # live work: real time
    yield made
    made.ctx.close()


@pytest.fixture(scope="module")
def server(seed):
    app = create_app(seed.ctx.settings, context=seed.ctx, run_scheduler=False)
    with EmbeddedServer(app) as running:
        yield running.url


@pytest.fixture(scope="module")
def dana(seed):
    """A signed-in session's cookie (what the site's sign-in sets)."""
    account = create_account(seed.ctx, "dana")
    return sign_in(seed.ctx, account, "e2e").cookie


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme="light")
    context.set_default_timeout(10_000)
    opened = context.new_page()
    yield opened
    context.close()


def signed_in(page, server, cookie: str) -> None:
    page.context.add_cookies([{"name": SESSION_COOKIE, "value": cookie, "url": server}])


def chips(page, key: str) -> list[str]:
    return page.locator(f"#chips-{key} li.chip input:checked").evaluate_all(
        "boxes => boxes.map(b => b.value)"
    )


def board_names(page) -> list[str]:
    return page.locator("#ask-board tbody:not(.endpoints) td.name > a").all_inner_texts()


def test_ask_edit_a_chip_and_get_a_board(page, server):
    page.goto(server + "/")
    page.get_by_role("link", name="Ask", exact=True).click()
    page.get_by_label("Your question").fill(QUERY)
    page.get_by_label("Your question").press("Enter")
    page.wait_for_url(re.compile(r"/ask\?q="))
    # the plan: chips with the words that chose them, before anything runs
    assert chips(page, "skill") == ["reasoning"]
    assert chips(page, "subject") == ["science"]
    why = page.locator("#chips-subject li.chip", has_text="science").locator(".matched")
    assert why.inner_text() == "from “science” (lexicon, 100%)"
    assert page.locator("#how-planner").inner_text().startswith("offline/")
    assert page.locator("#ask-board").count() == 0
    shot(page, "ask-plan")

    # remove science (every sample here), add science/even (half of sums')
    page.locator("#chips-subject").get_by_label("science", exact=True).uncheck()
    page.get_by_label("Add subject").fill("science/even")
    page.get_by_role("button", name="Show the answer").click()
    page.wait_for_url(re.compile(r"/ask\?plan=[0-9a-f]{64}$"))
    plan_id = page.url.rsplit("=", 1)[1]
    assert page.locator("#plan-id").inner_text() == plan_id
    assert page.locator("#share-link").get_attribute("href").endswith(f"/ask?plan={plan_id}")
    names = board_names(page)
    # the models verified on sums (the endpoint has arith only), the best first
    assert len(names) == 6 and names[0] == "beta-7b" and "chat-endpoint" not in names
    froms = page.locator("#ask-board tbody td.from").all_inner_texts()
    assert froms and all(re.fullmatch(r"sums \(\d+\)", text) for text in froms)
    assert page.locator("#ask-board tbody svg.ci").count() == 6
    assert chips(page, "subject") == ["science/even"]
    # the plan document, collapsed, both ways
    page.locator("#plan-yaml summary").click()
    assert "science/even" in page.locator("#plan-yaml pre").inner_text()
    shot(page, "ask-board")
    # the shared link shows the same board to anyone
    page.context.clear_cookies()
    page.goto(server + f"/ask?plan={plan_id}")
    assert board_names(page) == names


def test_thin_slices_are_marked_and_a_signed_in_person_may_deepen(page, server, dana):
    page.goto(server + "/ask?q=" + QUERY)
    page.get_by_label("Samples per model").fill("5000")
    page.get_by_role("button", name="Show the answer").click()
    page.wait_for_url(re.compile(r"plan="))
    assert page.locator("#ask-board tbody tr.thin").count() == len(board_names(page)) > 0
    assert page.locator("#thin-notice").get_by_role("link", name="Sign in").count() == 1
    signed_in(page, server, dana)
    page.reload()
    # scheduling the deepen tasks of 5,000 samples a model takes seconds (7-10 s measured
    # under coverage): a time budget is a benchmark's business, not this test's
    page.get_by_role("button", name="Deepen the thin slices").click(timeout=DEEPEN_MS)
    page.wait_for_url(re.compile(r"/asks/[^/?]+$"), timeout=DEEPEN_MS)
    assert page.locator("#deepen-progress dd").count() > 0
    shot(page, "ask-deepen")


@pytest.fixture(scope="module")
def endpoint(smollm2_dir):
    """The tests' OpenAI-compatible server over SmolLM2, as ``smol``, checking an API key."""
    with serve(LoadedModel.load(smollm2_dir), api_key=KEY, model_name="smol") as running:
        yield running


def test_ask_with_an_endpoint_and_watch_it_finish(page, server, dana, endpoint):
    axe = AxeFindings()
    signed_in(page, server, dana)
    seen: list[str] = []
    page.on("request", lambda request: seen.append(f"{request.url} {request.post_data or ''}"))
    page.goto(server + "/ask?q=" + QUERY)
    page.get_by_label("Samples per model").fill("2")  # generation on a shared CPU
    page.get_by_label("Base URL").fill(endpoint.base_url)
    page.get_by_label("Model name").fill("smol")
    page.get_by_label("API key").fill(KEY)
    page.get_by_role("button", name="Show the answer").click()
    page.wait_for_url(re.compile(r"/asks/[^/?]+$"))
    assert KEY not in page.url
    status = page.locator("#ask-status-badge")
    assert status.inner_text() in ("PENDING", "STARTED")
    assert page.locator("#ask-watch").is_visible()  # the script follows it
    axe.check(page, "a running ask")
    # the poller follows it and the page reloads once it is done
    page.wait_for_function(
        "['SUCCESS', 'FAILURE'].includes(document.getElementById('ask-status-badge').textContent)"
        " && !document.getElementById('ask-watch')",
        timeout=240_000,
    )
    assert status.inner_text() == "SUCCESS", page.locator("#ask-status").inner_text()
    row = page.locator("#ask-board tbody.endpoints tr.endpoint")
    assert row.count() == 1 and len(board_names(page)) == 6  # beside the verified models
    assert "not cross-checked" in row.inner_text() and "smol" in row.inner_text()
    assert row.locator("td.samples").inner_text().startswith("2")
    assert page.locator("#ask-progress").get_attribute("value") == "2"
    shot(page, "ask-endpoint")
    axe.check(page, "a finished ask with an endpoint")
    assert not axe.found, axe.found
    # the key went out once, in the form's POST body, and never came back
    posts = [s for s in seen if KEY in s]
    assert len(posts) == 1 and posts[0].startswith(server + "/ask ")
    assert KEY not in page.content()
    # the shared plan leaves the endpoint out, and another person cannot see the ask
    ask_url = page.url
    page.context.clear_cookies()
    page.goto(ask_url)
    assert page.locator("h1").inner_text() == "Not found"


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_ask_pages_pass_the_axe_checks(browser, server, dana, scheme):
    axe = AxeFindings()
    context = browser.new_context(color_scheme=scheme)
    context.set_default_timeout(10_000)
    try:
        page = context.new_page()
        page.goto(server + "/ask")
        axe.check(page, "/ask")
        page.goto(server + "/ask?q=" + QUERY)
        axe.check(page, "the plan")
        page.get_by_role("button", name="Show the answer").click()
        page.wait_for_url(re.compile(r"plan="))
        page.locator("#plan-json summary").click()
        axe.check(page, "the board, signed out")
        page.goto(server + "/ask?q=")
        axe.check(page, "an empty question")
        signed_in(page, server, dana)
        page.goto(server + "/ask?q=" + QUERY)
        axe.check(page, "the plan, signed in")
        page.get_by_label("Samples per model").fill("5000")
        page.get_by_role("button", name="Show the answer").click()
        page.wait_for_url(re.compile(r"plan="))
        axe.check(page, "the board, thin, signed in")
        page.get_by_role("button", name="Deepen the thin slices").click(timeout=DEEPEN_MS)
        page.wait_for_url(re.compile(r"/asks/"), timeout=DEEPEN_MS)
        axe.check(page, "an ask's page")
        page.goto(server + "/ask?q=" + QUERY)
        page.get_by_label("Base URL").fill("https://llm.example.org/v1")
        page.get_by_role("button", name="Show the answer").click()
        axe.check(page, "a refused endpoint")
    finally:
        context.close()
    assert not axe.found, axe.found
