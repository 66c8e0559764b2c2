"""The web pages end to end: headless Chromium (Playwright) against a live server.

One seeded SQLite database (``integration/web/seed.py``: models of every type, two
benchmarks, epochs of DONE tasks, a DISPUTED one) and one ``EmbeddedServer`` per
module. Debian's Chromium (``/usr/bin/chromium``) is driven by Playwright; without it
the tests skip, or fail under ``QB_REQUIRE_ALL=1``. Screenshots of every page go to
``tests/artifacts/web/`` (printed at the end).
"""

from __future__ import annotations

import csv
import io
import json
import re
import urllib.request
from pathlib import Path

import pytest

from integration.pg import unavailable
from integration.web.seed import Seed
from quorumbench.api.app import create_app
from quorumbench.api.embedded import EmbeddedServer

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "web"


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    made = Seed(tmp_path_factory.mktemp("web"))
    made.fill()
    yield made
    made.ctx.close()


@pytest.fixture(scope="module")
def server(seed):
    app = create_app(seed.ctx.settings, context=seed.ctx, run_scheduler=False)
    with EmbeddedServer(app) as running:
        yield running.url


# --- the browser -----------------------------------------------------------------


@pytest.fixture(scope="module")
def browser(pytestconfig):
    if not CHROMIUM.is_file():
        unavailable(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the playwright package is not installed (pip install playwright)")

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield launched
        launched.close()
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and ARTIFACTS.is_dir():
        reporter.write_line(f"\nweb screenshots in {ARTIFACTS}")


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme="light")
    context.set_default_timeout(5000)
    opened = context.new_page()
    yield opened
    context.close()


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def model_names(page) -> list[str]:
    return page.locator("#board tbody td.name > a").all_inner_texts()


# --- tests ---------------------------------------------------------------------------


def test_the_leaderboard_ranks_complete_models_with_intervals(page, server):
    page.goto(server + "/")
    names = model_names(page)
    # every model with both benchmarks; the endpoint has only one (no aggregate rank)
    assert len(names) == 7 and names[-1] == "chat-endpoint"
    assert names[0] == "beta-7b"
    cells = page.locator("#board tbody td.rank").all_inner_texts()
    ranks = [cell.split("\n")[0] for cell in cells]  # the rank, then the range it may be in
    assert cells[0] == "1\n1–3"
    # equal scores share a rank: alpha-1b and its LoRA, delta-360m and smol-q4
    assert ranks[:6] == ["1", "2", "2", "4", "4", "6"] and ranks[6] == "—"
    assert page.locator("#board tbody td.score svg.ci").count() == 6
    # a bar per benchmark score too: 6 models on both, the endpoint on arith only
    assert page.locator("#board tbody td.bench svg.ci").count() == 13
    row = page.locator("#board tbody tr", has_text="delta-360m")
    assert row.locator(".badge.disputed").inner_text() == "DISPUTED"
    lora = page.locator("#board tbody tr", has_text="alpha-1b-lora")
    assert lora.locator(".tag").inner_text() == "LoRA"
    shot(page, "leaderboard")


def test_sorting_by_a_column_changes_the_order_and_the_url(page, server):
    page.goto(server + "/")
    page.get_by_role("link", name="Model", exact=True).click()
    page.wait_for_url(re.compile(r"sort=model"))
    names = model_names(page)
    assert names == sorted(names, key=str.lower)
    page.get_by_role("link", name=re.compile(r"^Model")).click()
    page.wait_for_url(re.compile(r"order=desc"))
    assert model_names(page) == sorted(names, key=str.lower, reverse=True)
    page.get_by_role("link", name="Size", exact=True).click()
    page.wait_for_url(re.compile(r"sort=params"))
    assert model_names(page)[0] == "beta-7b" and model_names(page)[-1] == "chat-endpoint"


def test_filters_by_type_size_and_benchmark(page, server):
    page.goto(server + "/")
    page.get_by_label("Type").select_option("gguf")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_url(re.compile(r"type=gguf"))
    assert model_names(page) == ["smol-q4"]

    page.goto(server + "/?min_params=100M&max_params=2B")
    assert sorted(model_names(page)) == [
        "alpha-1b",
        "alpha-1b-lora",  # 1.104B: its base's parameters and its own
        "delta-360m",
        "gamma-135m",
        "smol-q4",
    ]

    page.goto(server + "/")
    page.get_by_label("Benchmark").select_option("arith")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_url(re.compile(r"benchmark=arith"))
    names = model_names(page)
    assert "chat-endpoint" in names and len(names) == 7
    endpoint = page.locator("#board tbody tr", has_text="chat-endpoint")
    assert endpoint.locator("td.rank").inner_text() != "—"  # ranked on arith
    shot(page, "leaderboard-arith")


def test_search_finds_a_model(page, server):
    page.goto(server + "/")
    page.get_by_label("Search").fill("lora")
    page.get_by_label("Search").press("Enter")
    page.wait_for_url(re.compile(r"q=lora"))
    assert model_names(page) == ["alpha-1b-lora"]
    page.goto(server + "/?q=nothing-like-this")
    assert page.locator("#board tbody").inner_text().strip() == "No models match."


def test_pagination_walks_through_every_row(page, server):
    page.goto(server + "/?per_page=3")
    seen = model_names(page)
    assert len(seen) == 3 and "page 1 of 3" in page.locator("#board-count").inner_text()
    while page.get_by_role("link", name="Next →").count():
        page.get_by_role("link", name="Next →").click()
        page.wait_for_load_state()
        seen += model_names(page)
    assert len(seen) == len(set(seen)) == 7
    assert "page=3" in page.url and "per_page=3" in page.url


def test_the_model_page_shows_scores_history_tasks_and_lineage(page, server, seed):
    page.goto(server + "/")
    page.get_by_role("link", name="alpha-1b-lora", exact=True).click()
    page.wait_for_url(re.compile(r"/models/\d+$"))
    assert page.locator("h1").inner_text().startswith("alpha-1b-lora")
    # arith, sums, aggregate, and the pillars: math (arith), reasoning (sums)
    assert page.locator("#scores tbody tr").count() == 5
    assert page.locator("#scores tbody tr.pillar").count() == 2
    assert page.locator("svg.history circle").count() == 10  # 5 epochs x 2 benchmarks
    assert page.locator("table.tasks tbody tr").count() == 10
    assert page.get_by_role("link", name=re.compile("^" + "5" * 40)).count() == 1
    shot(page, "model-lora")
    page.get_by_role("link", name="alpha-1b", exact=True).click()
    page.wait_for_url(re.compile(rf"/models/{seed.ids['alpha-1b']}$"))
    assert page.get_by_role("link", name="alpha-1b-lora").count() == 1  # its adapter
    page.goto(server + f"/models/{seed.ids['delta-360m']}")
    assert page.locator("table.tasks .status-disputed").count() == 1
    page.goto(server + "/models/99999")
    assert page.locator("h1").inner_text() == "Not found"


def test_compare_shows_two_models_and_marks_separated_intervals(page, server, seed):
    a, b = seed.ids["beta-7b"], seed.ids["gamma-135m"]
    page.goto(server + f"/compare?models={a},{b}")
    headers = page.locator("#compare thead th").all_inner_texts()
    assert any("beta-7b" in h for h in headers) and any("gamma-135m" in h for h in headers)
    assert page.locator("#compare tbody tr.separated").count() >= 1
    # per subject: sums' even samples (1.0 against 0.3 over ten samples each) differ
    subjects = page.locator("table.subjects[data-benchmark=sums] tbody tr")
    assert subjects.all_inner_texts()[0].split("\t")[0] == "science/even"
    even = subjects.filter(has_text="even")
    assert even.locator(".badge.differ").count() == 1
    assert even.locator("td").first.inner_text().startswith("1.000")
    shot(page, "compare")


def test_models_are_picked_for_comparison_from_the_leaderboard(page, server, seed):
    page.goto(server + "/")
    page.get_by_label("Compare beta-7b").check()
    page.get_by_label("Compare gamma-135m").check()
    assert page.evaluate("window.quorumbench.refreshBoard()") is True  # ticks survive it
    assert page.get_by_label("Compare beta-7b").is_checked()
    page.get_by_label("Compare delta-360m").check()
    page.get_by_label("Compare smol-q4").check()
    # four is the most compare takes: the other boxes are disabled
    assert page.get_by_label("Compare alpha-1b", exact=True).is_disabled()
    page.get_by_label("Compare smol-q4").uncheck()
    assert page.get_by_label("Compare alpha-1b", exact=True).is_enabled()
    page.get_by_role("button", name="Compare selected").click()
    page.wait_for_url(re.compile(r"/compare\?models="))
    headers = " ".join(page.locator("#compare thead th").all_inner_texts())
    for name in ("beta-7b", "gamma-135m", "delta-360m"):
        assert name in headers
    picked = page.get_by_label(re.compile("Model ids")).input_value().split(",")
    assert sorted(picked) == sorted(
        str(seed.ids[n]) for n in ("beta-7b", "gamma-135m", "delta-360m")
    )


def test_the_model_page_breaks_scores_down_by_subject(page, server, seed):
    page.goto(server + f"/models/{seed.ids['beta-7b']}")
    table = page.locator("table.subjects[data-benchmark=sums]")
    rows = [r.split("\t") for r in table.locator("tbody tr").all_inner_texts()]
    assert [(r[0], r[1], r[3]) for r in rows] == [
        ("science/even", "1.000", "10"),
        ("science/odd", "0.800", "10"),
    ]
    assert table.locator("svg.ci").count() == 2
    # arith's samples here are not from its data (the seed's ids), so it has no breakdown
    assert page.locator("table.subjects").count() == 1
    shot(page, "model-subjects")


def test_tasks_runners_methodology_and_submit_pages(page, server):
    page.goto(server + "/tasks?status=DISPUTED")
    rows = page.locator("table.tasks tbody tr")
    assert rows.count() == 1 and "delta-360m" in rows.inner_text()
    shot(page, "tasks-disputed")
    rows.locator("td").first.get_by_role("link").click()
    page.wait_for_url(re.compile(r"/tasks/\d+$"))
    assert page.locator("#outcomes tbody tr").inner_text().split("\t")[1] == "DISPUTED"
    # one runner said 0 where two said 1: its four cells are marked
    assert page.locator("#samples td.off").count() == 4
    verdicts = page.locator("#results tbody tr td:nth-child(5)").all_inner_texts()
    assert verdicts == ["no agreeing majority"] * 3
    shot(page, "task-disputed")
    page.goto(server + "/runners")
    assert page.locator("#runners tbody tr").count() == 4
    assert (
        page.locator("#runners tbody tr", has_text="volunteer3").locator("td").nth(6).inner_text()
        == "0%"
    )
    shot(page, "runners")
    page.goto(server + "/methodology")
    assert "Consensus" in page.locator("main").inner_text()
    shot(page, "methodology")
    page.goto(server + "/submit")
    assert "quorumbench runner start" in page.locator("main").inner_text()
    shot(page, "submit")


def test_dark_mode_is_remembered_across_reloads(page, server):
    page.goto(server + "/")
    assert page.evaluate("document.documentElement.dataset.theme || ''") == ""
    page.get_by_role("button", name="Toggle dark mode").click()
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    page.reload()
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(17, 20, 24)"
    shot(page, "leaderboard-dark")


def test_the_system_dark_preference_is_followed(browser, server):
    context = browser.new_context(color_scheme="dark")
    try:
        opened = context.new_page()
        opened.goto(server + "/")
        background = opened.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(17, 20, 24)"
    finally:
        context.close()


def test_the_table_works_without_javascript(browser, server):
    context = browser.new_context(java_script_enabled=False)
    try:
        opened = context.new_page()
        opened.goto(server + "/")
        assert len(model_names(opened)) == 7
        assert opened.locator("#theme-toggle").is_hidden()  # shown only by the script
        opened.get_by_role("link", name="Samples", exact=True).click()
        opened.wait_for_url(re.compile(r"sort=n_samples"))
        opened.get_by_label("Search").fill("beta")
        opened.get_by_role("button", name="Apply").click()
        opened.wait_for_url(re.compile(r"q=beta"))
        assert model_names(opened) == ["beta-7b"]
        shot(opened, "leaderboard-no-js")
    finally:
        context.close()


def test_keyboard_use_and_a_phone_sized_screen(browser, server):
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    context.set_default_timeout(5000)
    try:
        opened = context.new_page()
        opened.goto(server + "/")
        opened.keyboard.press("Tab")
        focused = "document.activeElement"
        assert opened.evaluate(f"{focused}.textContent") == "Skip to content"
        assert opened.evaluate(f"getComputedStyle({focused}).outlineStyle") == "solid"
        opened.locator("thead a", has_text="Model").focus()
        opened.keyboard.press("Enter")
        opened.wait_for_url(re.compile(r"sort=model"))
        # the page itself does not scroll sideways; the table does, inside its frame
        assert opened.evaluate("document.documentElement.scrollWidth") <= 390
        shot(opened, "leaderboard-phone")
    finally:
        context.close()


def test_auto_refresh_replaces_the_table_body(page, server):
    page.goto(server + "/?sort=model")
    page.evaluate("document.querySelector('#board tbody').innerHTML = ''")
    assert page.evaluate("window.quorumbench.refreshBoard()") is True
    names = model_names(page)
    assert names == sorted(names, key=str.lower) and len(names) == 7


def test_every_table_downloads_as_json_and_csv(page, server, seed):
    api = page.request
    board = api.get(server + "/?format=json&type=base").json()
    assert board["total"] == 4 and {r["type"] for r in board["rows"]} == {"base"}
    text = api.get(server + "/?format=csv").text()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 7 and "sums_ci_high" in rows[0]
    model = api.get(server + f"/models/{seed.ids['beta-7b']}?format=json").json()
    assert model["type"] == "base" and len(model["history"]["arith"]) == 5
    assert "arith" in api.get(server + f"/models/{seed.ids['beta-7b']}?format=csv").text()
    tasks = api.get(server + "/tasks?format=json&status=DISPUTED").json()["tasks"]
    assert [t["status"] for t in tasks] == ["DISPUTED"]
    assert "agreement_rate" in api.get(server + "/runners?format=csv").text()
    a, b = seed.ids["beta-7b"], seed.ids["gamma-135m"]
    compared = api.get(server + f"/compare?models={a},{b}&format=json").json()["rows"]
    assert len(compared) == 10  # (arith, sums, aggregate, sums even, sums odd) x 2
    assert [r["subject"] for r in compared[6:]] == [
        "science/even",
        "science/even",
        "science/odd",
        "science/odd",
    ]
    assert api.get(server + "/?sort=nonsense").status == 400


def test_the_static_export_works_from_disk(browser, seed, tmp_path):
    from typer.testing import CliRunner

    from quorumbench.cli.app import app

    out = tmp_path / "site"
    result = CliRunner().invoke(
        app, ["export-site", str(out), "--database-url", seed.ctx.settings.database_url]
    )
    assert result.exit_code == 0, result.output
    assert (out / "leaderboard.json").is_file() and (out / "static" / "site.css").is_file()
    context = browser.new_context()
    fetched: list[str] = []
    context.on("request", lambda request: fetched.append(request.url))
    try:
        opened = context.new_page()
        opened.goto((out / "index.html").as_uri())
        assert len(model_names(opened)) == 7
        opened.get_by_label("Search").fill("7b")
        assert opened.locator("#board tbody tr:visible").count() == 1
        opened.get_by_label("Search").fill("")
        opened.get_by_label("Type").select_option("base")
        assert opened.locator("#board-count").inner_text() == "4 models"
        opened.get_by_label("Size from").fill("1B")
        visible = opened.locator("#board tbody tr:visible td.name > a").all_inner_texts()
        assert sorted(visible) == ["alpha-1b", "beta-7b"]
        opened.get_by_label("Type").select_option("lora")  # 4M of its own, 1.104B in all
        visible = opened.locator("#board tbody tr:visible td.name > a").all_inner_texts()
        assert visible == ["alpha-1b-lora"]
        opened.get_by_label("Size from").fill("")
        opened.get_by_label("Type").select_option("")
        opened.get_by_role("button", name="Model", exact=True).click()
        names = model_names(opened)
        assert names == sorted(names, key=str.lower)
        opened.get_by_role("button", name="Model", exact=True).click()
        assert model_names(opened) == sorted(names, key=str.lower, reverse=True)
        opened.get_by_role("button", name="Size", exact=True).click()
        assert model_names(opened)[0] == "beta-7b" and model_names(opened)[-1] == "chat-endpoint"
        shot(opened, "export-leaderboard")
        opened.get_by_role("link", name="beta-7b", exact=True).click()
        opened.wait_for_url(re.compile(r"models/\d+\.html$"))
        assert opened.locator("svg.history circle").count() == 10
        shot(opened, "export-model")
        opened.get_by_role("link", name="Methodology").click()
        opened.wait_for_url(re.compile(r"methodology\.html$"))
    finally:
        context.close()
    assert fetched and all(url.startswith("file://") for url in fetched)


AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"]
AXE_OPTIONS = {
    "runOnly": {"type": "tag", "values": AXE_TAGS},
    # Every rule of the tags runs and every violating node is reported; the passes,
    # the inapplicable rules and the incomplete ones come back with one node each
    # instead of all of them (axe's own speed option; nothing here reads those).
    "resultTypes": ["violations"],
}


class AxeFindings:
    """axe-core (AXE_TAGS) over what a page shows, its violations kept by label."""

    def __init__(self) -> None:
        from axe_playwright_python.sync_playwright import Axe

        self.axe = Axe()
        self.found: dict[str, str] = {}

    def check(self, page, label: str) -> None:
        results = self.axe.run(page, options=AXE_OPTIONS)
        if results.violations_count:
            self.found[label] = results.generate_snapshot()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_page_passes_the_axe_accessibility_checks(browser, server, seed, scheme):
    """axe-core (bundled by axe-playwright-python, run in the page) on every page, in
    both colour schemes: WCAG 2.1 A/AA and best practices, contrast included."""
    from axe_playwright_python.sync_playwright import Axe

    axe = Axe()
    with urllib.request.urlopen(server + "/tasks?format=json&status=DISPUTED") as answer:
        (disputed,) = json.load(answer)["tasks"]
    failed = seed.fail_and_pause("chat-endpoint", "the endpoint answered 502 Bad Gateway")
    flagged, calm = seed.flag_a_measurement()
    paths = [
        "/",
        "/?benchmark=arith&type=base",
        f"/models/{seed.ids['beta-7b']}",
        f"/models/{seed.ids['chat-endpoint']}",  # paused, with a failure report
        f"/tasks/{failed}",
        f"/models/{seed.ids['alpha-1b-lora']}",
        f"/compare?models={seed.ids['beta-7b']},{seed.ids['gamma-135m']}",
        "/compare",
        "/tasks",
        f"/tasks/{disputed['id']}",
        "/runners",
        f"/runners/{flagged}",  # with a measurement flag
        f"/runners/{calm}",  # without
        "/methodology",
        "/submit",
        "/models/99999",
        "/signin",  # signed out, no way to sign in configured (tests/e2e/test_account.py
        "/account",  # checks them signed in, with the development sign-in on)
    ]
    context = browser.new_context(color_scheme=scheme)
    found = {}
    try:
        opened = context.new_page()
        for path in paths:
            opened.goto(server + path)
            results = axe.run(opened, options=AXE_OPTIONS)
            if results.violations_count:
                found[path] = results.generate_snapshot()
    finally:
        context.close()
    assert not found, found


def test_the_task_list_refreshes_and_an_open_task_reloads_when_it_settles(page, server, seed):
    from sqlalchemy import update

    from quorumbench.db.models import Task

    page.goto(server + "/tasks?status=DISPUTED")
    table = "document.querySelector('table.tasks')"
    page.evaluate(f"{table}.tBodies[0].innerHTML = ''")
    assert page.evaluate(f"window.quorumbench.refreshTable({table})") is True
    assert page.locator("table.tasks tbody tr").count() == 1

    assert seed.task("smol-q4", "sums", 6, [[1.0] * 4], quorum=3) == "PENDING"
    (task,) = page.request.get(server + "/tasks?format=json&status=PENDING").json()["tasks"]
    page.goto(server + f"/tasks/{task['id']}")
    assert page.locator("#task-watch").is_visible() and page.locator("#results").count() == 0
    assert page.evaluate("window.quorumbench.checkTask()") is False  # nothing changed yet
    with seed.ctx.db.write() as session:  # as if the quorum had been reached
        session.execute(
            update(Task)
            .where(Task.id == task["id"])
            .values(status="DONE", score=1.0, finalized_at=seed.clock.now)
        )
    with page.expect_navigation():
        assert page.evaluate("window.quorumbench.checkTask()") is True
    assert page.locator("#results tbody tr").count() == 1
    assert page.locator("#task-watch").count() == 0
