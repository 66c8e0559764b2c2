"""A prize pool end to end in headless Chromium (Playwright) against a live server with
a fake clock and the development sign-in on.

The funder (1,500 credits minted) fills ``/pools/new`` (first with fractional funds:
the form comes back with the message and nothing moves), creates a 1,000-credit
ArithmeticDecrease pool on ``sums``; ana and ben each sign in and enter a model from
the pool's page; runners (real signed submissions through the API, as in
``tests/integration/server/pool_world.py``) answer every task while the fake clock
moves a day at a time and the scheduler's tick (epochs, then the pool's snapshots)
runs; the board shows both entries with their intervals and the payout preview, and
the history; at the end the tick settles, and the page shows the paid amounts, the
public log entry of the payout record and the verify command; ``/account`` shows the
payout in the ledger. axe-core (light and dark) finds nothing on ``/pools``, ``/pools/new`` (with an
error too), ``/pools/{id}`` (before and after settlement) and ``/account``.
Screenshots go to ``tests/artifacts/web/`` (``pool*.png``).
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from integration.server.conftest import clock, hub_ref, make_ctx, sums_spec
from integration.server.pool_world import DAY1, World
from quorumbench.api.app import create_app
from quorumbench.api.embedded import EmbeddedServer
from quorumbench.services import pools
from quorumbench.services.scheduler import tick

from .test_web import AxeFindings, browser, shot

__all__ = ["browser", "clock", "make_ctx", "sums_spec"]  # fixtures shared with other modules


@pytest.fixture
def world(make_ctx, sums_spec):
    made = World(make_ctx, sums_spec, None, insecure_dev_login=True, quota_evaluations=0)
    yield made
    made.close()


@pytest.fixture
def server(world):
    app = create_app(world.ctx.settings, context=world.ctx, run_scheduler=False)
    with EmbeddedServer(app) as running:
        yield running.url


def new_context(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme="light")
    context.set_default_timeout(10000)
    return context


def sign_in(page, server: str, account: str) -> None:
    page.goto(server + "/signin")
    page.get_by_label("Account name").fill(account)
    page.get_by_role("button", name="Sign in (development)").click()
    page.wait_for_url(re.compile(r"/account$"))


class BothSchemes(AxeFindings):
    """axe in the light scheme, then in the dark one (the page's own CSS switches)."""

    def check(self, page, label: str) -> None:
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            super().check(page, f"{label} [{scheme}]")
        page.emulate_media(color_scheme="light")


def test_create_join_score_settle_and_see_the_payouts(browser, server, world, clock):
    ctx = world.ctx
    axe = BothSchemes()
    world.mint("funder", 1500)
    one = world.register(hub_ref(1), "ana")
    two = world.register(hub_ref(2), "ben")
    score_of = {one: 1.0, two: 0.5}
    world.run_all(score_of)  # the registration epoch: before the pool's epochs

    funder = new_context(browser)
    page = funder.new_page()
    sign_in(page, server, "funder")
    page.get_by_role("link", name="Pools", exact=True).click()
    page.wait_for_url(re.compile(r"/pools$"))
    assert page.locator("#pools-open .empty").inner_text() == "No pool is open now."
    axe.check(page, "/pools (none)")
    page.get_by_role("link", name="Create a pool").click()
    page.wait_for_url(re.compile(r"/pools/new$"))
    assert page.locator("#pool-balance").inner_text() == "1,500"
    axe.check(page, "/pools/new")

    page.get_by_label("Title").fill("Sums, three days")
    page.get_by_label("Description").fill("Who adds best?")
    page.get_by_label("Funds (credits)").fill("10.5")
    page.get_by_label("End", exact=True).fill("2026-11-26T00:00")
    page.get_by_label("Entries close").fill("2026-11-24T00:00")
    page.get_by_role("button", name="Create the pool").click()
    page.wait_for_url(re.compile(r"/pools/new$"))
    problem = page.get_by_role("alert")
    assert "'10.5' is not one" in problem.inner_text()
    assert page.get_by_label("Title").input_value() == "Sums, three days"  # kept
    assert world.balance("funder") == 1500
    axe.check(page, "/pools/new (an error)")

    page.get_by_label("Funds (credits)").fill("1000")
    page.get_by_role("button", name="Create the pool").click()
    page.wait_for_url(re.compile(r"/pools/\d+\?created=1$"))
    pool_id = int(re.search(r"/pools/(\d+)", page.url)[1])
    assert "1,000 credits moved" in page.locator("#pool-notice").inner_text()
    assert world.balance("funder") == 500 and world.escrow(pool_id) == 1000
    shot(page, "pool-created")
    funder.close()

    for who, model in (("ana", one), ("ben", two)):
        trainer = new_context(browser)
        page = trainer.new_page()
        sign_in(page, server, who)
        page.goto(f"{server}/pools/{pool_id}")
        page.get_by_label("Your model").select_option(str(model))
        page.get_by_role("button", name="Enter").click()
        page.wait_for_url(re.compile(rf"/pools/{pool_id}\?joined=\d+#entries$"))
        assert "is entered in this pool" in page.locator("#pool-notice").inner_text()
        trainer.close()
    assert pools.get_pool(ctx, pool_id).pool.n_entries == 2

    for day in range(3):  # the pool's three daily epochs, scored by the runners
        clock.now = DAY1 + timedelta(days=day, seconds=5)
        tick(ctx)
        world.run_all(score_of)
        tick(ctx)

    viewer = new_context(browser)
    page = viewer.new_page()
    page.goto(f"{server}/pools/{pool_id}")
    rows = page.locator("#pool-board tbody tr")
    assert rows.count() == 2
    assert rows.nth(0).locator("td.name a").get_attribute("href") == f"/models/{one}"
    assert rows.nth(1).locator("td.name a").get_attribute("href") == f"/models/{two}"
    assert rows.nth(0).locator("td.amount").inner_text().startswith("667")
    assert rows.nth(1).locator("td.amount").inner_text().startswith("333")
    assert page.locator("#pool-board svg.ci").count() == 2  # the intervals
    assert page.locator("#history svg.history").count() == 1
    assert page.locator("#pool-history tbody tr").count() >= 2
    shot(page, "pool-running")
    axe.check(page, "/pools/{id} (running)")

    clock.now = DAY1 + timedelta(days=3, seconds=5)
    tick(ctx)  # the end: standing frozen, settled (no dispute window)
    page.goto(f"{server}/pools/{pool_id}")
    assert page.locator("h1 .badge").inner_text() == "settled"
    assert "Paid (credits)" in page.locator("#pool-board thead").inner_text()
    record = page.locator("#payout-record")
    assert "public log" in record.inner_text()
    href = record.get_by_role("link", name="read it").get_attribute("href")
    assert href is not None and href.startswith("/v0/log/entries?start=")
    logged = page.request.get(server + href).json()
    assert logged[0]["entry"]["payout"]["funds"] == 1000
    assert f"quorumbench verify --server {server}" in page.locator("#verify pre").inner_text()
    shot(page, "pool-settled")
    axe.check(page, "/pools/{id} (settled)")
    page.goto(server + "/pools")
    assert page.locator(f"#pools-ended tr[data-pool='{pool_id}']").count() == 1
    axe.check(page, "/pools (ended)")
    viewer.close()

    ana = new_context(browser)
    page = ana.new_page()
    sign_in(page, server, "ana")
    assert page.locator("#credits-balance").inner_text() == "667 credits"
    ledger_rows = page.locator("#ledger tbody tr")
    assert "payout" in ledger_rows.nth(0).inner_text()
    assert "+667" in ledger_rows.nth(0).inner_text()
    shot(page, "pool-account")
    axe.check(page, "/account")
    ana.close()
    assert world.balance("ana") == 667 and world.balance("ben") == 333
    assert not axe.found, axe.found
