"""``/submit`` (check, then register, once per form) and retiring from ``/account``, on
SQLite and PostgreSQL: the report in place, CSRF and ended sessions refused with
nothing changed, a form posted twice registering once, another account's model 404,
the submission rate limit's 429, and a ref the Hub cannot resolve shown in place."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

import pytest
from sqlalchemy import select

from quorumbench.db.models import Model
from quorumbench.db.session_models import WebFormUse
from quorumbench.services.accounts import Principal, create_account, get_account
from quorumbench.services.model_metadata import HfHubClient, inspect_model
from quorumbench.services.models import register_model

from ..pg import emptied
from ..server.conftest import fake_metadata, hub_ref
from ..server.test_header_only_metadata import (  # noqa: F401 (fixtures)
    SHA,
    _safetensors,
    hub_dir,
    local_hub,
)
from .browser import SeenForm, forms_of, serve_site

PREVIEW, REGISTER = "/submit/preview", "/submit/register"
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "float32"}


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    ]
)
def make_site(request, tmp_path):
    """A server with the development sign-in on and fake model metadata; quota 0 unless
    the settings say otherwise."""
    with ExitStack() as stack:

        def make(**settings):
            url = None
            if request.param == "postgres":
                url = emptied(request.getfixturevalue("site_pg"))
            made = stack.enter_context(
                serve_site(tmp_path, url, **{"quota_evaluations": 0, **settings})
            )
            made.ctx.inspector = fake_metadata
            return made

        yield make


def check(browser, ref: str, **fields):
    """Fill the form on /submit and press Check."""
    return browser.submit(browser.form("/submit", PREVIEW), ref=ref, **fields)


def models(site) -> list[Model]:
    with site.ctx.db.read() as session:
        return list(session.scalars(select(Model).order_by(Model.id)))


def register_form(page) -> SeenForm:
    return next(f for f in forms_of(page.text) if f.action == REGISTER)


def test_signed_out_the_page_says_to_sign_in_and_keeps_the_instructions(make_site):
    site = make_site()
    with site.browser() as browser:
        page = browser.get("/submit")
        assert page.status_code == 200
        assert 'href="/signin">Sign in</a> to submit a model here' in page.text
        assert PREVIEW not in page.text and "csrf" not in page.text
        assert "quorumbench runner start --server http://testserver" in page.text


def test_check_shows_the_report_in_place_and_registers_nothing(make_site):
    site = make_site()
    with site.browser() as browser:
        browser.dev_signin("alice")
        page = check(browser, hub_ref(1), name="My model", family="llama")
        assert page.status_code == 200 and page.headers["cache-control"] == "no-store"
        text = page.text
        assert "Ready to register" in text and 'value="My model"' in text  # kept
        assert f"<code>{hub_ref(1)}</code>" in text and "LlamaForCausalLM" in text
        assert "apache-2.0" in text and "Context length</dt><dd>2048" in text
        assert 'id="report-owed">0<' in text
        assert "An <strong>estimate</strong>, not a measurement" in text
        assert 'data-code="limits-ok"' in text
        form = register_form(page)
        assert form.value("ref") == hub_ref(1) and form.value("name") == "My model"
        assert models(site) == [] and site.count(WebFormUse) == 0


def test_a_branch_is_pinned_and_the_register_form_carries_the_commit(
    make_site,
    local_hub,  # noqa: F811
    hub_dir,  # noqa: F811
):
    site = make_site()
    where = hub_dir / "org--model"
    where.mkdir()
    (where / "config.json").write_text(json.dumps(LLAMA))
    (where / "README.md").write_text("---\nlicense: mit\n---\n")
    files = {"config.json": where / "config.json", "README.md": where / "README.md"}
    files["model.safetensors"] = _safetensors(where / "model.safetensors", {"w": (8, 8)})
    local_hub.add("org/model", SHA, files)

    def inspect(ref):
        with HfHubClient(local_hub.url, token="hf_test") as client:
            return inspect_model(ref, hub=client)

    site.ctx.inspector = inspect
    with site.browser() as browser:
        browser.dev_signin("alice")
        page = check(browser, "hf:org/model@main")
        assert 'data-code="ref-pinned"' in page.text
        form = register_form(page)
        assert form.value("ref") == f"hf:org/model@{SHA}"
        done = browser.submit(form)
        assert done.status_code == 303
        (model,) = models(site)
        assert model.ref == f"hf:org/model@{SHA}" and model.params == 64

        # a branch the repository lacks, and a repository that does not exist
        for ref, says in [
            ("hf:org/model@no-such-branch", "cannot resolve hf:org/model@no-such-branch"),
            ("hf:org/missing@main", "cannot resolve hf:org/missing@main"),
        ]:
            refused = check(browser, ref, name="kept name")
            assert refused.status_code == 200 and "Cannot be registered" in refused.text
            shown = refused.text[refused.text.find('id="report"') :]
            assert says in shown and 'data-code="repo-unreachable"' in shown, shown[:1500]
            assert f'value="{ref}"' in refused.text and 'value="kept name"' in refused.text
            assert REGISTER not in refused.text
        assert len(models(site)) == 1


def test_register_redirects_to_the_account_and_a_second_post_registers_nothing(make_site):
    site = make_site()
    with site.browser() as browser:
        browser.dev_signin("alice")
        form = register_form(check(browser, hub_ref(2), name="Twice"))
        first = browser.submit(form)
        assert first.status_code == 303
        (model,) = models(site)
        assert first.headers["location"] == f"/account?registered={model.id}#models"
        second = browser.submit(form)  # a double click, the back button
        assert second.status_code == 303
        assert second.headers["location"] == f"/account?already={model.id}#models"
        assert len(models(site)) == 1 and site.count(WebFormUse) == 1
        page = browser.get(first.headers["location"]).text
        assert f'<a href="/models/{model.id}">Twice</a> is registered' in page
        assert f'href="/account/models/{model.id}/retire"' in page
        again = browser.get(second.headers["location"]).text
        assert "nothing more was registered" in again
        # a new form for the same ref is the account's repeat: the same model again
        repeat = browser.submit(register_form(check(browser, hub_ref(2))))
        assert repeat.headers["location"] == f"/account?already={model.id}#models"
        assert len(models(site)) == 1


def test_two_posts_of_one_form_at_the_same_moment_register_once(make_site):
    site = make_site()
    with site.browser() as browser:
        browser.dev_signin("alice")
        form = register_form(check(browser, hub_ref(3)))
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda _: browser.submit(form), range(4)))
        assert {a.status_code for a in answers} == {303}
        assert len(models(site)) == 1


@pytest.mark.parametrize("csrf", ["forged-token", None])
def test_forged_or_missing_csrf_tokens_are_refused_and_change_nothing(make_site, csrf):
    site = make_site()
    with site.browser() as browser:
        browser.dev_signin("alice")
        form = register_form(check(browser, hub_ref(4)))
        alice = get_account(site.ctx, "alice")
        owned = register_model(
            site.ctx,
            Principal(alice.id, "alice", True, frozenset({"admin"})),
            hub_ref(5),
            name="mine",
        )
        refused = [
            browser.submit(browser.form("/submit", PREVIEW), ref=hub_ref(6), csrf=csrf),
            browser.submit(form, csrf=csrf),
            browser.post(f"/account/models/{owned.id}/retire", data={"csrf": csrf or ""}),
        ]
        for answer in refused:
            assert answer.status_code == 403, answer.text
            assert "<h1>Not allowed</h1>" in answer.text and "nothing was changed" in answer.text
        assert [m.ref for m in models(site)] == [hub_ref(5)]
        assert models(site)[0].retired_at is None and site.count(WebFormUse) == 0


def test_an_ended_session_is_sent_to_sign_in_and_nothing_changes(make_site):
    site = make_site()
    with site.browser() as browser:
        browser.dev_signin("alice")
        form = register_form(check(browser, hub_ref(7)))
        preview = browser.form("/submit", PREVIEW)
        site.clock.advance(days=30, seconds=1)
        for answer in (browser.submit(form), browser.submit(preview, ref=hub_ref(8))):
            assert answer.status_code == 401, answer.text
            assert "Your session expired at" in answer.text and 'href="/signin"' in answer.text
        assert models(site) == []
        signed_out = browser.get("/submit")
        assert "to submit a model here" in signed_out.text and PREVIEW not in signed_out.text


def test_retiring_asks_first_then_takes_the_model_off_and_keeps_it(make_site):
    site = make_site()
    with site.browser() as browser:
        browser.dev_signin("alice")
        browser.submit(register_form(check(browser, hub_ref(9), name="Old one")))
        (model,) = models(site)
        ask = browser.get(f"/account/models/{model.id}/retire")
        assert ask.status_code == 200 and "Retire Old one?" in ask.text
        assert "Its tasks, results and log entries stay" in ask.text
        done = browser.submit(next(f for f in forms_of(ask.text) if f.method == "post"))
        assert done.status_code == 303
        assert done.headers["location"] == f"/account?retired={model.id}#models"
        page = browser.get(done.headers["location"]).text
        assert "Old one is retired" in page and "status-retired" in page
        assert f'href="/account/models/{model.id}/retire"' not in page
        (kept,) = models(site)
        assert kept.retired_at == site.clock.now and not kept.active
        assert browser.get(f"/models/{model.id}").status_code == 200  # its page stays
        again = browser.post(f"/account/models/{model.id}/retire", data={"csrf": csrf_of(browser)})
        assert again.status_code == 303  # twice: nothing more happens


def csrf_of(browser) -> str:
    return browser.form("/submit", PREVIEW).value("csrf")


def test_another_accounts_model_cannot_be_retired(make_site):
    site = make_site()
    bob = create_account(site.ctx, "bob")
    bobs = register_model(
        site.ctx, Principal(bob.id, "bob", True, frozenset({"admin"})), hub_ref(10), name="b"
    )
    with site.browser() as browser:
        browser.dev_signin("alice")
        asked = browser.get(f"/account/models/{bobs.id}/retire")
        assert asked.status_code == 404 and "<h1>Not found</h1>" in asked.text
        posted = browser.post(f"/account/models/{bobs.id}/retire", data={"csrf": csrf_of(browser)})
        assert posted.status_code == 404 and "you have no model" in posted.text
        missing = browser.post("/account/models/99999/retire", data={"csrf": csrf_of(browser)})
        assert missing.status_code == 404
        assert models(site)[0].retired_at is None


def test_the_quota_refusal_is_shown_in_place_and_a_forged_register_changes_nothing(make_site):
    site = make_site(quota_evaluations=3)
    with site.browser() as browser:
        browser.dev_signin("alice")
        page = check(browser, hub_ref(11), name="Too soon")
        assert "Cannot be registered" in page.text and 'data-code="quota-not-earned"' in page.text
        assert 'id="report-owed">3<' in page.text and REGISTER not in page.text
        csrf = csrf_of(browser)
        forged = browser.post(
            REGISTER,
            data={"csrf": csrf, "form": "f" * 32, "ref": hub_ref(11), "name": "Too soon"},
        )
        assert forged.status_code == 422 and "Not registered" in forged.text
        assert "earn your submit" in forged.text and 'value="Too soon"' in forged.text
        assert models(site) == [] and site.count(WebFormUse) == 0


@pytest.mark.parametrize(
    ("ref", "says"),
    [
        ("", "Paste a model ref"),
        ("owner/name", "A ref starts with"),
        ("hf:" + "x" * 600, "longer than 512"),
    ],
)
def test_a_ref_the_form_cannot_take_is_shown_in_place(make_site, ref, says):
    site = make_site()
    with site.browser() as browser:
        browser.dev_signin("alice")
        page = check(browser, ref, name="kept")
        assert page.status_code == 400 and says in page.text and 'value="kept"' in page.text
        assert models(site) == []


def test_the_submission_rate_limit_answers_429_with_retry_after(make_site):
    site = make_site(submission_rate_limit="2/minute")
    with site.browser() as browser:
        browser.dev_signin("alice")
        assert check(browser, hub_ref(12)).status_code == 200
        form = register_form(check(browser, hub_ref(13)))
        limited = browser.submit(form)
        assert limited.status_code == 429, limited.text
        assert 1 <= int(limited.headers["Retry-After"]) <= 60
        assert "too many" in limited.text and models(site) == []


def test_an_admin_session_may_retire_anyones_model_as_the_api_allows(make_site):
    site = make_site()
    bob = create_account(site.ctx, "bob")
    bobs = register_model(
        site.ctx, Principal(bob.id, "bob", True, frozenset({"admin"})), hub_ref(20), name="b"
    )
    create_account(site.ctx, "root", is_admin=True)
    with site.browser() as browser:
        browser.dev_signin("root")
        ask = browser.get(f"/account/models/{bobs.id}/retire")
        assert ask.status_code == 200
        done = browser.submit(next(f for f in forms_of(ask.text) if f.method == "post"))
        assert done.status_code == 303 and models(site)[0].retired_at is not None
