"""Signing in and ``/account`` end to end: headless Chromium (Playwright) against a live
server with the development sign-in on.

A person signs in from the header, sees what they still owe, makes an API token
(shown once, with a copy button), revokes it, and signs out; the same without
JavaScript; and axe-core finds nothing on the sign-in and account pages in light and
dark. Screenshots go to ``tests/artifacts/web/`` (``account*.png``).
"""

from __future__ import annotations

import re

import pytest
from nacl.signing import SigningKey
from pydantic import SecretStr
from sqlalchemy import update

from integration.server.conftest import fake_metadata, hub_ref
from integration.web.browser import serve_site
from quorumbench.api.embedded import EmbeddedServer
from quorumbench.db.models import Model, Runner
from quorumbench.services import runner_keys
from quorumbench.services.accounts import Principal, create_account, create_token
from quorumbench.services.models import register_model
from quorumbench.services.runners import runner_for
from quorumbench.settings import OAuthProvider

from .test_web import AxeFindings, browser, shot

__all__ = ["browser"]  # the module's Chromium, shared with test_web
TOKEN = re.compile(r"^qb_[A-Za-z0-9_-]{43}$")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """Alice, with a runner (a rotated key) and two models; bob, with a token. GitHub is
    configured (its button is shown; these tests never press it)."""
    github = OAuthProvider(name="github", client_id="Iv1.e2e", client_secret=SecretStr("s"))
    with serve_site(tmp_path_factory.mktemp("account"), oauth_providers=[github]) as made:
        ctx = made.ctx
        alice = create_account(ctx, "alice")
        owner = Principal(alice.id, "alice", False, frozenset({"task:pull", "task:submit"}))
        runner_for(ctx, owner, "alice-laptop")
        for _ in range(2):
            key = bytes(SigningKey.generate().verify_key).hex()
            runner_keys.register_key(ctx, owner, "alice-laptop", key)
        with ctx.db.write() as session:
            session.execute(update(Runner).values(agreements=11, outliers=1))
        ctx.inspector = lambda ref: fake_metadata(ref)
        admin = Principal(alice.id, "alice", True, frozenset({"admin"}))
        register_model(ctx, admin, hub_ref(1), name="alice-chat-1b")
        paused = register_model(ctx, admin, hub_ref(2), name="alice-tiny")
        with ctx.db.write() as session:
            session.execute(
                update(Model)
                .where(Model.id == paused.id)
                .values(paused_at=made.clock.now, paused_reason="the weights did not load")
            )
        bob = create_account(ctx, "bob")
        create_token(ctx, Principal(bob.id, "bob", False, frozenset({"task:pull"})), ["task:pull"])
        yield made


@pytest.fixture(scope="module")
def server(site):
    with EmbeddedServer(site.app) as running:
        yield running.url


def new_context(browser, **options):
    options.setdefault("viewport", {"width": 1280, "height": 900})
    context = browser.new_context(**options)
    context.set_default_timeout(5000)
    return context


def sign_in(page, server: str, account: str) -> None:
    page.goto(server + "/")
    page.get_by_role("link", name="Sign in", exact=True).click()
    page.wait_for_url(re.compile(r"/signin$"))
    assert page.get_by_role("link", name="Sign in with GitHub").get_attribute("href") == (
        "/signin/github"
    )
    page.get_by_label("Account name").fill(account)
    page.get_by_role("button", name="Sign in (development)").click()
    page.wait_for_url(re.compile(r"/account$"))


def test_sign_in_make_a_token_revoke_it_and_sign_out(browser, server):
    context = new_context(browser, color_scheme="light")
    try:
        page = context.new_page()
        sign_in(page, server, "alice")
        assert page.locator("h1").inner_text() == "Your account: alice"
        assert page.locator("#quota-owed").inner_text() == "3"
        assert page.locator("#own-models tbody tr").count() == 2
        assert page.locator("#own-runners tbody tr").count() == 1
        assert page.get_by_role("link", name="Your account: alice").count() == 1
        shot(page, "account")

        page.get_by_label("register models").uncheck()
        page.get_by_label("Name").fill("laptop runner")
        page.get_by_role("button", name="Create token").click()
        page.wait_for_url(re.compile(r"/account/tokens/created\?form="))
        token = page.get_by_label(re.compile("^Token")).input_value()
        assert TOKEN.match(token)
        copy = page.get_by_role("button", name="Copy")
        assert copy.is_visible()  # the script's enhancement
        shot(page, "account-token-created")
        me = page.request.get(server + "/v0/me", headers={"Authorization": f"Bearer {token}"})
        assert me.ok and me.json()["scopes"] == ["task:pull", "task:submit"]

        page.reload()
        assert page.locator("input.token").count() == 0
        assert "shown only once" in page.locator("main").inner_text()

        page.goto(server + "/account")
        row = page.locator("#own-tokens tbody tr", has_text="laptop runner")
        assert token[:10] in row.inner_text() and token not in page.content()
        row.get_by_role("button", name=re.compile("^Revoke")).click()
        page.wait_for_url(re.compile(r"/account\?revoked=\d+"))
        assert "is revoked" in page.get_by_role("status").inner_text()
        me = page.request.get(server + "/v0/me", headers={"Authorization": f"Bearer {token}"})
        assert me.status == 401

        page.get_by_role("button", name="Sign out").first.click()
        page.wait_for_url(re.compile(r"/signin\?signed_out=1$"))
        assert "You are signed out." in page.get_by_role("status").inner_text()
        page.goto(server + "/account")
        assert page.locator("h1").inner_text() == "Your account"
        assert page.get_by_role("link", name="Sign in", exact=True).count() == 1
    finally:
        context.close()


def test_the_account_pages_work_without_javascript_and_by_keyboard(browser, server):
    context = new_context(browser, java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto(server + "/")
        link = page.locator("header .session a")
        link.focus()
        assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") == "solid"
        page.keyboard.press("Enter")
        page.wait_for_url(re.compile(r"/signin$"))
        page.get_by_label("Account name").fill("carol")
        page.get_by_label("Account name").press("Enter")
        page.wait_for_url(re.compile(r"/account$"))
        page.get_by_label("Name").fill("no-js")
        page.get_by_label("Name").press("Enter")
        page.wait_for_url(re.compile(r"/account/tokens/created"))
        assert TOKEN.match(page.locator("input.token").input_value())
        assert page.get_by_role("button", name="Copy").is_hidden()  # no script, no button
        shot(page, "account-token-created-no-js")
    finally:
        context.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_sign_in_and_account_pages_pass_the_axe_checks(browser, server, scheme):
    axe = AxeFindings()
    context = new_context(browser, color_scheme=scheme)
    try:
        page = context.new_page()

        def check(label: str) -> None:
            axe.check(page, label)

        for path in ("/signin", "/account"):
            page.goto(server + path)
            check(f"{path} signed out")
        shot(page, f"account-signed-out-{scheme}")
        sign_in(page, server, "alice")
        check("/account")
        shot(page, f"account-{scheme}")
        page.get_by_role("button", name="Create token").click()
        page.wait_for_url(re.compile(r"/account/tokens/created"))
        check("token created")
        page.reload()
        check("token shown already")
        page.goto(server + "/signin")
        check("/signin signed in")
        page.goto(server + "/account/tokens/created?form=" + "x" * 30)
        check("error page")
    finally:
        context.close()
    assert not axe.found, axe.found


def test_the_account_page_fits_a_phone(browser, server):
    context = new_context(browser, viewport={"width": 390, "height": 844}, is_mobile=True)
    try:
        page = context.new_page()
        sign_in(page, server, "alice")
        # the page itself does not scroll sideways; wide tables do, inside their frames
        # (a table's visually hidden button text included: .table-wrap contains it)
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        shot(page, "account-phone")
    finally:
        context.close()
