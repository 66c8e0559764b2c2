"""Signing in and out on the site: the session cookie, the server-side session, the
development sign-in, GitHub's code flow started from the site, and the header.

Each test gets its own server (``site``: SQLite, then PostgreSQL) with the
development sign-in on; a ``Browser`` is a TestClient that asks for HTML and posts
the forms the pages show.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from sqlalchemy import select

from quorumbench.db.models import Account
from quorumbench.db.session_models import OAuthLogin, WebSession
from quorumbench.services.accounts import token_hash

from ..fake_github import FakeGitHub
from .browser import serve_site

SESSION = "qb_session"


def set_cookie(answer: httpx.Response, name: str) -> str:
    """The Set-Cookie header that sets ``name`` (lowercased)."""
    found = [h for h in answer.headers.get_list("set-cookie") if h.startswith(f"{name}=")]
    assert len(found) == 1, answer.headers.get_list("set-cookie")
    return found[0].lower()


def test_signing_in_sets_an_httponly_samesite_cookie_of_an_opaque_server_session(site):
    with site.browser() as browser:
        answer = browser.dev_signin("alice")
        assert answer.headers["location"] == "/account"
        cookie = set_cookie(answer, SESSION)
        assert "httponly" in cookie and "samesite=lax" in cookie and "path=/" in cookie
        assert "secure" not in cookie  # plain http
        assert "max-age=2592000" in cookie  # QB_REFRESH_TOKEN_DAYS (30)
        value = browser.cookie(SESSION)
        assert value and len(value) == 43 and "alice" not in value and "." not in value
        with site.ctx.db.read() as session:
            record = session.scalars(select(WebSession)).one()
        # the server keeps the id's hash only, with the account and the CSRF token
        assert record.token_hash == token_hash(value) and value not in record.token_hash
        assert record.via == "insecure-dev-login" and record.csrf_token != value
        page = browser.get("/account")
        assert page.status_code == 200 and "Your account: alice" in page.text
        assert page.headers["cache-control"] == "no-store"
        assert value not in page.text  # never handed to the page (nor to scripts)


def test_over_https_the_cookie_is_secure_and_host_prefixed(site):
    with site.browser("https://testserver") as browser:
        answer = browser.dev_signin("alice")
        cookie = set_cookie(answer, "__Host-qb_session")
        assert "secure" in cookie and "httponly" in cookie and "samesite=lax" in cookie
        assert "path=/" in cookie and "domain" not in cookie
        assert "secure" in set_cookie(browser.get("/signin"), "__Host-qb_signin")
        assert "Your account: alice" in browser.get("/account").text
        # the same id under the plain name (as a sibling subdomain could plant it) is ignored
        value = browser.cookie("__Host-qb_session")
        browser.client.cookies.clear()
        browser.plant(SESSION, value)
        assert "Your account: alice" not in browser.get("/account").text


def test_signing_out_ends_the_session_on_the_server(site):
    with site.browser() as browser:
        browser.dev_signin("alice")
        old = browser.cookie(SESSION)
        signout = browser.form("/account", "/signout")
        answer = browser.submit(signout)
        assert answer.status_code == 303 and answer.headers["location"] == "/signin?signed_out=1"
        assert 'qb_session=""' in answer.headers["set-cookie"] and "max-age=0" in set_cookie(
            answer, SESSION
        )
        assert "You are signed out." in browser.get("/signin?signed_out=1").text
        assert site.live_sessions() == 0
        # the old cookie, kept by someone, signs nothing in any more
        browser.plant(SESSION, old)
        page = browser.get("/account")
        assert "This browser was signed out at" in page.text and "Sign in" in page.text
        assert "max-age=0" in set_cookie(page, SESSION)  # and is cleared
        browser.plant(SESSION, old)
        tokens = site.tokens()
        create = browser.post(
            "/account/tokens",
            data={"csrf": signout.value("csrf"), "form": "f" * 32, "scope": "task:pull"},
        )
        assert create.status_code == 401 and "signed out" in create.text
        assert "Nothing was changed." in create.text and site.tokens() == tokens


def test_an_expired_session_is_signed_out_with_a_message(site):
    with site.browser() as browser:
        browser.dev_signin("alice")
        create = browser.form("/account", "/account/tokens")
        site.clock.advance(days=30, seconds=1)
        answer = browser.submit(create)  # a page left open past the session's end
        assert answer.status_code == 401 and "Your session expired at" in answer.text
        assert 'href="/signin">Sign in</a>' in answer.text and site.tokens() == 0
        page = browser.get("/account")
        assert page.status_code == 200 and "Your session expired at" in page.text
        assert "Your account: alice" not in page.text and "Sign in (development)" in page.text
        assert "max-age=0" in set_cookie(page, SESSION)


def test_signing_in_again_mints_a_new_id_and_ends_the_old_one(site):
    """Session fixation: an id the browser held before signing in never becomes signed in."""
    with site.browser() as browser:
        browser.plant(SESSION, "planted-by-someone-else-" + "x" * 19)
        browser.dev_signin("alice")
        first = browser.cookie(SESSION)
        assert first and not first.startswith("planted")
        browser.dev_signin("bob")
        second = browser.cookie(SESSION)
        assert second != first and site.live_sessions() == 1
        with site.browser() as other:  # whoever kept the first id
            other.plant(SESSION, first)
            page = other.get("/account").text
            assert "Your account: " not in page and "This browser was signed out" in page


def test_the_sign_in_form_needs_this_browsers_token(site):
    with site.browser() as browser:
        form = browser.form("/signin", "/signin/dev")
        assert set_cookie(browser.get("/signin"), "qb_signin")
        forged = browser.submit(form, account="mallory", signin_token="x" * 43)
        missing = browser.submit(form, account="mallory", signin_token=None)
        assert forged.status_code == missing.status_code == 403
        assert "security token" in forged.text and "nobody was signed in" in forged.text
    with site.browser() as other:  # another site's page posting the form: no cookie
        assert other.post("/signin/dev", data=form.fields + [("account", "x")]).status_code == 403
    assert site.count(Account) == 0 and site.live_sessions() == 0


def test_a_bad_account_name_is_refused_in_plain_words(site):
    with site.browser() as browser:
        answer = browser.submit(browser.form("/signin", "/signin/dev"), account="A B")
        assert answer.status_code == 400 and "use 2–63 lowercase letters" in answer.text
        assert site.count(Account) == 0


def test_without_the_development_flag_there_is_no_dev_form_and_no_dev_sign_in(tmp_path):
    with serve_site(tmp_path, insecure_dev_login=False) as site, site.browser() as browser:
        page = browser.get("/signin")
        assert "/signin/dev" not in page.text and "offers no sign-in on the site" in page.text
        token = browser.cookie("qb_signin")
        answer = browser.post("/signin/dev", data={"account": "alice", "signin_token": token})
        assert answer.status_code == 404 and site.count(Account) == 0


def test_sign_out_needs_the_sessions_csrf_token(site):
    with site.browser() as browser:
        browser.dev_signin("alice")
        form = browser.form("/account", "/signout")
        assert browser.submit(form, csrf="forged").status_code == 403
        assert browser.submit(form, csrf=None).status_code == 403
        assert site.live_sessions() == 1
        assert "Your account: alice" in browser.get("/account").text


def header_session(html: str) -> str:
    """The header's sign-in part: a "Sign in" link, or the signed-in account's name."""
    return " ".join(html.split('<p class="session">')[1].split("</p>")[0].split())


def test_the_header_names_who_is_signed_in_on_every_page(site):
    pages = ["/", "/runners", "/tasks", "/methodology", "/submit", "/signin", "/nope"]
    with site.browser() as browser:
        for path in pages:
            page = browser.get(path)
            assert page.headers["vary"] == "Cookie", path  # no shared cache mixes people
            session = header_session(page.text)
            assert session.startswith('<a href="/signin"') and session.endswith(">Sign in</a>")
        browser.dev_signin("alice")
        for path in pages:
            session = header_session(browser.get(path).text)
            assert session.startswith('<a href="/account"'), (path, session)
            assert session.endswith('<span class="visually-hidden">Your account: </span>alice</a>')


# --- GitHub, started from the site ----------------------------------------------------


@pytest.fixture
def github():
    with FakeGitHub() as fake:
        yield fake


@pytest.fixture
def github_site(tmp_path, github):
    with serve_site(tmp_path, oauth_providers=[github.provider()]) as made:
        yield made


def github_signin(browser) -> httpx.Response:
    """The person presses "Sign in with GitHub", logs in there, and comes back."""
    page = browser.get("/signin")
    assert 'href="/signin/github">Sign in with GitHub</a>' in page.text
    start = browser.get("/signin/github")
    assert start.status_code == 302
    back = httpx.get(start.headers["location"], follow_redirects=False)
    assert back.status_code == 302
    parts = urlsplit(back.headers["location"])
    return browser.get(f"{parts.path}?{parts.query}")


def test_sign_in_with_github_uses_the_code_flow_and_opens_a_site_session(github_site, github):
    with github_site.browser() as browser:
        start = browser.get("/signin/github")
        query = {k: v[0] for k, v in parse_qs(urlsplit(start.headers["location"]).query).items()}
        assert query["code_challenge_method"] == "S256" and len(query["state"]) >= 32
        assert query["redirect_uri"] == "http://testserver/v0/auth/github/callback"
        state_cookie = set_cookie(start, "qb_oauth_state")
        assert "path=/v0/auth/github/callback" in state_cookie and "httponly" in state_cookie
        with github_site.ctx.db.read() as session:
            assert session.scalars(select(OAuthLogin.kind)).one() == "site"

        answer = github_signin(browser)
        assert answer.status_code == 303 and answer.headers["location"] == "/account"
        assert "httponly" in set_cookie(answer, SESSION)
        assert "access_token" not in answer.text  # no API tokens for a browser
        page = browser.get("/account")
        assert "Your account: octocat" in page.text and "with github" in page.text
        assert github.token_requests[-1]["code_verifier"]  # PKCE
        with github_site.ctx.db.read() as session:
            assert session.scalars(select(WebSession.via)).one() == "oauth:github"


def test_the_api_code_flow_still_answers_tokens(github_site):
    with github_site.browser() as browser:
        start = browser.get("/v0/auth/github/login")
        back = httpx.get(start.headers["location"], follow_redirects=False)
        parts = urlsplit(back.headers["location"])
        answer = browser.get(f"{parts.path}?{parts.query}")
        assert answer.status_code == 200 and answer.json()["account"] == "octocat"
        assert SESSION not in answer.headers.get("set-cookie", "")


def test_a_declined_or_replayed_github_sign_in_is_an_error_page(github_site, github):
    with github_site.browser() as browser:
        github.decline = True
        declined = github_signin(browser)
        assert declined.status_code == 403 and declined.headers["content-type"].startswith(
            "text/html"
        )
        assert "declined at github" in declined.text
        github.decline = False
        start = browser.get("/signin/github")
        redirect = httpx.get(start.headers["location"], follow_redirects=False)
        back = urlsplit(redirect.headers["location"])
        url = f"{back.path}?{back.query}"
        assert browser.get(url).status_code == 303
        state = parse_qs(back.query)["state"][0]
        browser.client.cookies.set(
            "qb_oauth_state", state, domain="testserver.local", path=back.path
        )
        replay = browser.get(url)
        assert replay.status_code == 400 and "used already" in replay.text
        assert "<h1>Cannot show this page</h1>" in replay.text
    assert github_site.live_sessions() == 1


def test_a_site_login_finishes_only_in_the_browser_that_started_it(github_site, github):
    with github_site.browser() as browser, github_site.browser() as other:
        start = browser.get("/signin/github")
        back = httpx.get(start.headers["location"], follow_redirects=False)
        parts = urlsplit(back.headers["location"])
        stolen = other.get(f"{parts.path}?{parts.query}")
        assert stolen.status_code == 400 and "not started in this browser" in stolen.text
        assert stolen.headers["content-type"].startswith("text/html")
    assert github_site.live_sessions() == 0 and not github.token_requests


def test_a_github_session_may_grant_the_default_scopes(github_site):
    """A provider's sign-in gets the default scopes, as the API's identity logins do."""
    with github_site.browser() as browser:
        github_signin(browser)
        form = browser.form("/account", "/account/tokens")
        offered = [v for k, v in form.fields if k == "scope"]
        assert offered == ["task:pull", "task:submit", "model:register"]
