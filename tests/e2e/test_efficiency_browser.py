"""The efficiency page, its model-page section and the leaderboard's optional columns in
headless Chromium: the class picker and the sort links work without JavaScript, and
axe-core finds nothing in either colour scheme."""

from __future__ import annotations

import pytest
from sqlalchemy import select, update

from integration.web.seed import Seed
from quorumbench.api.app import create_app
from quorumbench.api.embedded import EmbeddedServer
from quorumbench.db.models import Result

from .test_web import AXE_OPTIONS, shot
from .test_web import browser as browser  # test_web's Chromium fixtures, reused
from .test_web import page as page

CPU = {"cpu_model": "Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz", "cpu_count": 2}
GPU = {"gpu_name": "NVIDIA H100 80GB HBM3", "cpu_count": 16}


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    made = Seed(tmp_path_factory.mktemp("efficiency"))
    made.fill()
    with made.ctx.db.write() as session:  # measurements on every result: odd ids on a GPU
        for number, result_id in enumerate(session.scalars(select(Result.id).order_by(Result.id))):
            gpu = number % 2 == 1
            session.execute(
                update(Result)
                .where(Result.id == result_id)
                .values(
                    hardware={"hardware": GPU if gpu else CPU},
                    measurements={
                        "wall_s": 2.0,
                        "energy_kwh": 1e-5 * (1 + number % 3),
                        "energy_method": "nvml" if gpu else "estimate",
                        "carbon_intensity_g_per_kwh": 471.08,
                        "carbon_intensity_source": "world-average",
                        "co2_g": 4.7e-3 * (1 + number % 3),
                        "ttft_s": 0.1,
                        "decode_tokens_per_s": 30.0,
                        "peak_rss_bytes": 2**31,
                    },
                )
            )
    yield made
    made.ctx.close()


@pytest.fixture(scope="module")
def server(seed):
    app = create_app(seed.ctx.settings, context=seed.ctx, run_scheduler=False)
    with EmbeddedServer(app) as running:
        yield running.url


def test_pick_a_class_and_sort_without_javascript(browser, server):
    context = browser.new_context(java_script_enabled=False)
    try:
        opened = context.new_page()
        opened.goto(server + "/efficiency")
        assert "never used for it" in opened.locator("#not-ranking").inner_text()
        opened.get_by_label("Hardware class").select_option("gpu:nvidia-h100-80gb-hbm3")
        opened.get_by_role("button", name="Show").click()
        opened.wait_for_url("**/efficiency?class=gpu*")
        assert opened.locator("#efficiency tbody tr").count() >= 2
        assert "nvml" in opened.locator("#efficiency tbody").inner_text()
        opened.get_by_role("link", name="Energy per 1k samples").click()
        opened.wait_for_url("**sort=energy_kwh_per_1k*")
        header = opened.locator("th[aria-sort]")
        assert header.get_attribute("aria-sort") == "ascending"
        shot(opened, "efficiency")
    finally:
        context.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_efficiency_views_pass_the_axe_checks(browser, server, seed, scheme):
    from axe_playwright_python.sync_playwright import Axe

    axe = Axe()
    paths = [
        "/efficiency",
        "/efficiency?class=gpu:nvidia-h100-80gb-hbm3&sort=decode_tokens_per_s",
        "/efficiency?class=gpu:nvidia-a100",  # no data
        f"/models/{seed.ids['beta-7b']}",
        "/?efficiency=gpu:nvidia-h100-80gb-hbm3",
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


def test_the_model_page_and_the_board_show_the_figures_beside_the_rank(page, server, seed):
    page.goto(server + f"/models/{seed.ids['beta-7b']}")
    section = page.locator("#efficiency-by-class")
    assert section.locator("tbody tr").count() == 2
    assert "estimate" in section.inner_text() and "nvml" in section.inner_text()
    page.goto(server + "/")
    ranked = page.locator("#board tbody td.name > a").all_inner_texts()
    page.goto(server + "/?efficiency=gpu:nvidia-h100-80gb-hbm3")
    assert page.locator("#board tbody td.name > a").all_inner_texts() == ranked
    assert page.locator("th.measured").count() == 3
    shot(page, "leaderboard-efficiency")
