"""``/account``: quota, models, runners and API tokens, and its forms (CSRF, double posts,
refusals that change nothing), on SQLite and PostgreSQL (the ``site`` fixture)."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from nacl.signing import SigningKey
from sqlalchemy import select, update

from quorumbench.db.models import ApiToken, Model, Runner
from quorumbench.db.session_models import WebFormUse
from quorumbench.errors import NotFoundError, PermissionDeniedError
from quorumbench.services import runner_keys, web_sessions
from quorumbench.services.accounts import (
    SCOPES,
    Principal,
    create_account,
    create_token,
    get_account,
    list_tokens,
    revoke_own_token,
)
from quorumbench.services.models import register_model
from quorumbench.services.runners import runner_for
from quorumbench.web.account import SCOPE_TEXT

from ..server.conftest import fake_metadata, hub_ref

TOKEN = re.compile(r'value="(qb_[A-Za-z0-9_-]{43})"')
CREATE = "/account/tokens"


def principal_of(site, name: str, *scopes: str) -> Principal:
    account = get_account(site.ctx, name)
    return Principal(account.id, name, account.is_admin, frozenset(scopes))


def shown_token(page) -> str | None:
    found = TOKEN.findall(page.text)
    assert len(found) <= 1
    return found[0] if found else None


def create(browser, **changes):
    """Post the account page's token form (``changes`` replace its fields)."""
    return browser.submit(browser.form("/account", CREATE), **changes)


def whoami(browser, token: str):
    return browser.client.get("/v0/me", headers={"Authorization": f"Bearer {token}"})


def test_signed_out_the_page_says_to_sign_in_with_the_buttons(site):
    with site.browser() as browser:
        page = browser.get("/account")
        assert page.status_code == 200 and "Sign in to see your quota" in page.text
        assert 'action="/signin/dev"' in page.text and "Sign in (development)" in page.text
        assert 'id="own-tokens"' not in page.text and "csrf" not in page.text


def test_the_page_shows_quota_models_runners_and_tokens(site):
    ctx = site.ctx
    with site.browser() as browser:
        browser.dev_signin("alice")
        alice = principal_of(site, "alice", "task:pull", "task:submit", "model:register")
        runner_for(ctx, alice, "alice-box")
        key = bytes(SigningKey.generate().verify_key).hex()
        registered = runner_keys.register_key(ctx, alice, "alice-box", key)
        rotated = runner_keys.register_key(
            ctx, alice, "alice-box", bytes(SigningKey.generate().verify_key).hex()
        )
        with ctx.db.write() as session:
            session.execute(update(Runner).values(agreements=3, outliers=1))
        ctx.inspector = lambda ref: fake_metadata(ref)
        admin = Principal(alice.account_id, "alice", True, frozenset({"admin"}))
        pending = register_model(ctx, admin, hub_ref(1), name="alice-pending")
        paused = register_model(ctx, admin, hub_ref(2), name="alice-paused")
        with ctx.db.write() as session:
            session.execute(
                update(Model)
                .where(Model.id == paused.id)
                .values(paused_at=site.clock.now, paused_reason="the weights do not load")
            )
        create_account(ctx, "bob")
        create_token(ctx, principal_of(site, "bob", "task:pull"), ["task:pull"], "bob's")

        page = browser.get("/account")
        text = page.text
        assert "Your account: alice" in text
        assert re.search(r'id="quota-owed"><strong>3</strong>', text)  # none earned yet
        assert 'id="quota-accepted">0<' in text and "needs 3 accepted evaluations" in text
        assert 'id="quota-can-register">no<' in text
        assert f'href="/models/{pending.id}">alice-pending</a>' in text
        assert "status-pending" in text and "status-paused" in text
        assert "the weights do not load" in text
        assert "alice-box" in text and "75%" in text and "(3 of 4)" in text
        assert registered["key_id"][:16] in text and rotated["key_id"][:16] in text
        assert text.count('<span class="tag">active</span>') == 1  # the rotated-in key
        assert "revoked" in text
        assert "bob's" not in text and "No API tokens yet." in text


def test_a_new_token_is_shown_once_and_works_with_its_scopes(site):
    with site.browser() as browser:
        browser.dev_signin("alice")
        answer = create(browser, scope=["task:pull", "model:register"], name="laptop runner")
        assert answer.status_code == 303
        result = answer.headers["location"]
        assert result.startswith("/account/tokens/created?form=")
        page = browser.get(result)
        assert page.status_code == 200 and page.headers["cache-control"] == "no-store"
        assert "shown <strong>only this once</strong>" in page.text
        token = shown_token(page)
        assert token is not None
        me = whoami(browser, token)
        assert me.status_code == 200, me.text
        assert me.json()["name"] == "alice"
        assert me.json()["scopes"] == ["model:register", "task:pull"]

        again = browser.get(result)  # a reload, the back button
        assert shown_token(again) is None and "shown only once" in again.text
        with site.ctx.db.read() as session:
            use = session.scalars(select(WebFormUse)).one()
        assert use.sealed is None  # emptied when shown

        listed = browser.get("/account").text
        assert "laptop runner" in listed and token[:10] in listed and token not in listed
        assert "model:register, task:pull" in listed


def test_the_sealed_token_is_not_in_the_database_in_clear(site):
    with site.browser() as browser:
        browser.dev_signin("alice")
        result = create(browser).headers["location"]
        with site.ctx.db.read() as session:
            sealed = session.scalars(select(WebFormUse.sealed)).one()
        token = shown_token(browser.get(result))
        assert sealed and token and token not in sealed and token[3:20] not in sealed


def test_a_token_form_posted_twice_makes_one_token(site):
    with site.browser() as browser:
        browser.dev_signin("alice")
        form = browser.form("/account", CREATE)
        first = browser.submit(form, scope="task:pull")
        second = browser.submit(form, scope="task:pull")  # a double click
        assert first.status_code == second.status_code == 303
        assert first.headers["location"] == second.headers["location"]
        assert site.tokens() == 1
        # the browser shows the last answer: the token is there, once
        assert shown_token(browser.get(second.headers["location"])) is not None
        assert shown_token(browser.get(first.headers["location"])) is None
        assert site.tokens() == 1


def test_a_token_page_is_shown_only_soon_after_its_form(site):
    with site.browser() as browser:
        browser.dev_signin("alice")
        result = create(browser).headers["location"]
        site.clock.advance(minutes=11)
        late = browser.get(result)
        assert shown_token(late) is None and "shown only once" in late.text


def test_another_session_cannot_see_the_token_a_form_made(site):
    with site.browser() as alice, site.browser() as bob:
        alice.dev_signin("alice")
        bob.dev_signin("bob")
        result = create(alice).headers["location"]
        stolen = bob.get(result)
        assert stolen.status_code == 404 and shown_token(stolen) is None
        assert shown_token(alice.get(result)) is not None


@pytest.mark.parametrize("csrf", ["forged-token", None, "bob"])
def test_forged_or_missing_csrf_tokens_are_refused_and_change_nothing(site, csrf):
    with site.browser() as alice, site.browser() as bob:
        alice.dev_signin("alice")
        bob.dev_signin("bob")
        if csrf == "bob":  # a real token, of another session
            csrf = bob.form("/account", CREATE).value("csrf")
        existing = create_token(site.ctx, principal_of(site, "alice", "task:pull"), ["task:pull"])
        tokens = site.tokens()
        refused = [
            create(alice, csrf=csrf),
            alice.submit(
                alice.form("/account", f"/account/tokens/{existing.record.id}/revoke"), csrf=csrf
            ),
            alice.submit(alice.form("/account", "/signout"), csrf=csrf),
        ]
        for answer in refused:
            assert answer.status_code == 403, answer.text
            assert answer.headers["content-type"].startswith("text/html")
            assert "<h1>Not allowed</h1>" in answer.text and "nothing was changed" in answer.text
        assert site.tokens() == tokens and site.live_sessions() == 2
        assert whoami(alice, existing.token).status_code == 200  # not revoked
        assert "Your account: alice" in alice.get("/account").text  # still signed in


def test_a_program_gets_the_refusal_as_a_problem_document(site):
    with site.browser() as browser:
        browser.dev_signin("alice")
        form = browser.form("/account", CREATE)
        answer = browser.client.post(
            CREATE, data={"form": form.value("form")}, headers={"Accept": "application/json"}
        )
        assert answer.status_code == 403
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.json()["type"] == "/problems/csrf-refused"


@pytest.mark.parametrize(
    ("changes", "status", "says"),
    [
        ({"scope": "admin"}, 403, "may not grant admin"),
        ({"scope": None}, 400, "at least one scope"),
        ({"scope": "task:everything"}, 400, "unknown scope"),
        ({"name": "x" * 65}, 400, "at most 64"),
        ({"form": None}, 400, "one-time id"),
        ({"form": "short"}, 400, "one-time id"),
    ],
)
def test_a_token_the_session_may_not_make_is_refused_and_nothing_is_made(
    site, changes, status, says
):
    with site.browser() as browser:
        browser.dev_signin("alice")
        form = browser.form("/account", CREATE)
        answer = browser.submit(form, **changes)
        assert answer.status_code == status and says in answer.text, answer.text
        assert site.tokens() == 0 and site.count(WebFormUse) == 0
        # the form is still good for a request it may make
        assert browser.submit(form, scope="task:pull").status_code == 303
        assert site.tokens() == 1


def test_an_admin_session_may_grant_admin(site):
    create_account(site.ctx, "root", is_admin=True)
    with site.browser() as browser:
        browser.dev_signin("root")
        form = browser.form("/account", CREATE)
        page = browser.get("/account").text
        assert 'value="admin"' in page and "everything, as an admin" in page
        token = shown_token(browser.get(browser.submit(form, scope="admin").headers["location"]))
        assert whoami(browser, token).json()["scopes"] == ["admin"]


def test_revoking_a_token_stops_it_at_once(site):
    with site.browser() as browser:
        browser.dev_signin("alice")
        token = shown_token(browser.get(create(browser).headers["location"]))
        session = browser.client.post("/v0/auth/token", json={"api_token": token})
        assert session.status_code == 200
        (record,) = list_tokens(site.ctx, principal_of(site, "alice"))
        revoke = browser.form("/account", f"/account/tokens/{record.id}/revoke")
        answer = browser.submit(revoke)
        assert answer.status_code == 303
        assert answer.headers["location"] == f"/account?revoked={record.id}#tokens"
        page = browser.get(answer.headers["location"])
        assert f"Token <code>{record.prefix}…</code> (web) is revoked." in page.text
        assert f'action="/account/tokens/{record.id}/revoke"' not in page.text
        assert whoami(browser, token).status_code == 401
        # and the API session opened with it ends too
        access = session.json()["access_token"]
        assert whoami(browser, access).status_code == 401
        again = browser.submit(revoke)  # posted twice: nothing more happens
        assert again.status_code == 303
        with site.ctx.db.read() as db:
            revoked_at = db.scalars(select(ApiToken.revoked_at)).one()
        assert revoked_at == site.clock.now


def test_another_accounts_token_cannot_be_revoked(site):
    create_account(site.ctx, "bob")
    bobs = create_token(site.ctx, principal_of(site, "bob", "task:pull"), ["task:pull"])
    with site.browser() as browser:
        browser.dev_signin("alice")
        csrf = browser.form("/account", CREATE).value("csrf")
        answer = browser.post(f"/account/tokens/{bobs.record.id}/revoke", data={"csrf": csrf})
        assert answer.status_code == 404 and "no API token" in answer.text
        assert whoami(browser, bobs.token).status_code == 200
        missing = browser.post("/account/tokens/99999/revoke", data={"csrf": csrf})
        assert missing.status_code == 404
        bad = browser.post("/account/tokens/abc/revoke", data={"csrf": csrf})
        assert bad.status_code == 400 and "token_id" in bad.text


# --- the services behind the page -------------------------------------------------------


def test_token_services_are_scoped_to_their_owner(site):
    ctx = site.ctx
    alice = principal_of(site, create_account(ctx, "alice").name, "task:pull", "task:submit")
    bob = principal_of(site, create_account(ctx, "bob").name, "task:pull")
    made = create_token(ctx, alice, ["task:submit", "task:pull", "task:pull"], "  two   words ")
    assert made.record.scopes == "task:pull task:submit" and made.record.name == "two words"
    with pytest.raises(PermissionDeniedError, match="may not grant model:register"):
        create_token(ctx, alice, ["model:register"])
    with pytest.raises(NotFoundError):
        revoke_own_token(ctx, bob, made.record.id)
    assert [t.id for t in list_tokens(ctx, bob)] == []
    site.clock.advance(seconds=5)
    first = revoke_own_token(ctx, alice, made.record.id)
    site.clock.advance(seconds=5)
    second = revoke_own_token(ctx, alice, made.record.id)  # changes nothing
    assert first.revoked_at == second.revoked_at == site.clock.now - timedelta(seconds=5)
    (listed,) = list_tokens(ctx, alice)
    assert listed.revoked_at is not None and listed.prefix == made.token[:10]


def test_every_scope_has_its_words_on_the_form():
    assert set(SCOPE_TEXT) == set(SCOPES)


def test_two_posts_of_one_form_at_the_same_moment_make_one_token(site):
    """The form's nonce is claimed in the transaction that makes the token: of two posts
    racing (threads, each with its own database connection), one makes it."""
    opened = web_sessions.sign_in_for_development(site.ctx, "alice")
    nonce = web_sessions.new_nonce()

    def post() -> bool:
        return web_sessions.create_token_once(
            site.ctx, opened.session, opened.cookie, nonce, ["task:pull"], None
        )

    with ThreadPoolExecutor(4) as pool:
        made = list(pool.map(lambda _: post(), range(4)))
    assert sorted(made) == [False, False, False, True] and site.tokens() == 1
    shown = web_sessions.created_token(site.ctx, opened.session, opened.cookie, nonce)
    assert shown.token is not None and shown.info.scopes == ("task:pull",)


def test_the_page_shows_the_benchmark_create_grant_and_offers_its_scope(site):
    from quorumbench.services.grants import change_grant

    create_account(site.ctx, "root", is_admin=True)
    root = get_account(site.ctx, "root")
    with site.browser() as browser:
        browser.dev_signin("alice")
        page = browser.get("/account").text
        assert 'id="benchmark-create-held">no<' in page
        assert 'value="benchmark:create"' not in page  # not held: not offered
        change_grant(site.ctx, root.id, "alice", "grant", "runs the Korean benchmarks")
        page = browser.get("/account").text
        assert 'id="benchmark-create-held">yes<' in page
        assert "by the admin root: runs the Korean benchmarks" in page
        assert 'value="benchmark:create">' in page  # offered, not checked by default
        answer = create(browser, scope=["benchmark:create"], name="bench")
        token = shown_token(browser.get(answer.headers["location"]))
        assert whoami(browser, token).json()["scopes"] == ["benchmark:create"]
