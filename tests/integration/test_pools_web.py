"""The pool pages on the site, on SQLite and PostgreSQL: ``/pools``, ``/pools/new``,
``/pools/{id}`` with its join form, and the credits section of ``/account``.

Anonymous and signed-in people see the pages; the create form creates a pool and
moves its funds into escrow; bad input (funds over the balance, an end before the
start, fractional or negative funds, a bad rule parameter) is shown back in the form
with its message and a 4xx, and nothing is created or moved; the join form enters
one's own model only; ``/account`` shows the balance and the ledger lines.
"""

from __future__ import annotations

from contextlib import ExitStack
from datetime import timedelta

import pytest
from sqlalchemy import select

from quorumbench.db.pool_models import Pool, PoolEntry
from quorumbench.services import ledger
from quorumbench.services.accounts import Principal, create_account, get_account
from quorumbench.services.models import register_model
from quorumbench.services.pools import PoolSpec, create_pool

from .pg import emptied, throwaway_database
from .server.conftest import fake_metadata, hub_ref
from .web.browser import Site, forms_of, serve_site

NEW = "/pools/new"
ALICE_CREDITS = 10_000
RULE = "ArithmeticDecrease"
"""The rule the form shows chosen (the test browser posts no ``<select>`` by itself)."""


@pytest.fixture(scope="module")
def pools_pg():
    with throwaway_database("qb_pools_web", migrated=True) as name:
        yield name


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    ]
)
def site(request, tmp_path):
    """Alice (a funder with 10,000 credits) and bob (a trainer with two models), an
    admin who minted alice's credits; the development sign-in is on."""
    url = None if request.param == "sqlite" else emptied(request.getfixturevalue("pools_pg"))
    with ExitStack() as stack:
        made = stack.enter_context(serve_site(tmp_path, url, quota_evaluations=0))
        ctx = made.ctx
        ctx.inspector = fake_metadata
        admin = create_account(ctx, "root", is_admin=True)
        for name in ("alice", "bob"):
            create_account(ctx, name)
        ledger.mint(ctx, admin_id=admin.id, account_name="alice", amount=ALICE_CREDITS, memo="t")
        for who, n in (("bob", 1), ("bob", 2), ("alice", 3)):
            account = get_account(ctx, who)
            owner = Principal(account.id, who, True, frozenset({"admin"}))
            register_model(ctx, owner, hub_ref(n), name=f"{who}-model-{n}")
        yield made


def principal(site: Site, name: str) -> Principal:
    account = get_account(site.ctx, name)
    return Principal(account.id, name, False, frozenset({"model:register"}))


def balance(site: Site, name: str) -> int:
    account = get_account(site.ctx, name)
    return ledger.balance(site.ctx, ledger.account_holder(account.id))


def pools_in(site: Site) -> list[Pool]:
    with site.ctx.db.read() as session:
        return list(session.scalars(select(Pool).order_by(Pool.id)))


def entries_in(site: Site) -> list[PoolEntry]:
    with site.ctx.db.read() as session:
        return list(session.scalars(select(PoolEntry).order_by(PoolEntry.id)))


def model_id(site: Site, name: str) -> int:
    from quorumbench.db.models import Model

    with site.ctx.db.read() as session:
        return int(session.scalar(select(Model.id).where(Model.name == name)))


def make_pool(site: Site, *, funds: int = 1_000, **changes) -> int:
    now = site.clock.now
    fields = {
        "title": "Arithmetic sprint",
        "funds": funds,
        "rule": "ArithmeticDecrease",
        "starts_at": now + timedelta(minutes=1),
        "ends_at": now + timedelta(days=3),
        "join_deadline": now + timedelta(days=2),
        "benchmarks": ["arith"],
        "description": "Who adds best?\nThree days.",
        **changes,
    }
    return create_pool(site.ctx, principal(site, "alice"), PoolSpec(**fields)).id


def test_the_pages_render_for_anonymous_visitors(site):
    pool = make_pool(site)
    site.clock.advance(minutes=2)  # started: open for entries
    with site.browser() as browser:
        listing = browser.get("/pools")
        assert listing.status_code == 200, listing.text
        text = listing.text
        for heading in ("Open", "Upcoming", "Ended"):
            assert f'id="pools-{heading.lower()}-heading">{heading}' in text
        assert f'<a href="/pools/{pool}">Arithmetic sprint</a>' in text
        assert "1,000" in text and "ArithmeticDecrease (paid places 10)" in text
        assert "2 d 23 h left (entries close in 1 d 23 h)" in text
        assert 'href="/pools" aria-current="page">Pools</a>' in text  # the navigation

        page = browser.get(f"/pools/{pool}")
        assert page.status_code == 200, page.text
        assert "Who adds best?\nThree days." in page.text
        assert 'id="pool-funds"><strong>1,000</strong> credits' in page.text
        assert "Sign in</a> to enter one of your models" in page.text
        assert "csrf" not in page.text and "join-form" not in page.text
        assert "No entries yet." in page.text
        assert "quorumbench verify --server http://testserver" in page.text

        new = browser.get(NEW)
        assert new.status_code == 200 and "Sign in</a> to create a pool" in new.text
        assert 'action="/pools/new"' not in new.text

        assert browser.get("/pools/999").status_code == 404


def test_the_create_form_creates_a_pool_and_moves_the_funds_into_escrow(site):
    with site.browser() as browser:
        browser.dev_signin("alice")
        page = browser.get(NEW)
        assert page.status_code == 200 and page.headers["cache-control"] == "no-store"
        assert 'id="pool-balance">10,000<' in page.text
        form = next(f for f in forms_of(page.text) if f.action == NEW)
        assert form.value("benchmark") == "arith" and form.value("ties") == "exact"
        answer = browser.submit(
            form, title="Sums week", funds="2,500", description="Add up.", k="3", rule=RULE
        )
        assert answer.status_code == 303, answer.text
        [pool] = pools_in(site)
        assert answer.headers["location"] == f"/pools/{pool.id}?created=1"
        assert pool.funds == 2_500 and pool.title == "Sums week"
        assert pool.rule_params == {"k": 3} and pool.benchmarks == ["arith"]
        assert balance(site, "alice") == 7_500
        assert ledger.balance(site.ctx, ledger.pool_holder(pool.id)) == 2_500

        shown = browser.get(answer.headers["location"])
        assert "2,500 credits moved from your balance into its escrow" in shown.text
        assert "ArithmeticDecrease (paid places 3)" in shown.text

        account = browser.get("/account")
        assert account.status_code == 200
        assert 'id="credits-balance"><strong>7,500</strong> credits' in account.text
        assert f'<a href="/pools/{pool.id}">pool {pool.id}</a>' in account.text
        assert "−2,500" in account.text and "+10,000" in account.text


def test_posting_the_create_form_twice_makes_one_pool_and_moves_the_funds_once(site):
    """A double click or a retried post answers the first post's pool (its nonce)."""
    with site.browser() as browser:
        browser.dev_signin("alice")
        form = browser.form(NEW, NEW)
        first = browser.submit(form, title="Once", funds="1,000", rule=RULE)
        again = browser.submit(form, title="Once", funds="1,000", rule=RULE)
        assert first.status_code == again.status_code == 303
        [pool] = pools_in(site)
        assert (
            first.headers["location"]
            == again.headers["location"]
            == (f"/pools/{pool.id}?created=1")
        )
        assert balance(site, "alice") == ALICE_CREDITS - 1_000
        refused = browser.submit(form, title="Once", funds="1,000", rule=RULE, nonce="short")
        assert refused.status_code >= 400 and len(pools_in(site)) == 1


@pytest.mark.parametrize(
    ("changes", "status", "message"),
    [
        ({"funds": "20000"}, 400, "more than your balance of 10,000"),
        ({"funds": "10.5"}, 400, "&#39;10.5&#39; is not one; amounts are never rounded"),
        ({"funds": "-5"}, 400, "&#39;-5&#39; is not one"),
        ({"funds": "0"}, 400, "positive whole number"),
        ({"funds": ""}, 400, "how many credits"),
        ({"ends_at": "2026-12-10T08:00"}, 400, "The end must come after the start."),
        ({"join_deadline": "2026-12-30T09:00"}, 400, "Entries must close by the end"),
        ({"rule": "Geometric", "q": "1.5"}, 400, "Geometric"),
        ({"rule": "Nope"}, 400, "Choose a rule"),
        ({"k": "2.5"}, 400, "Paid places (K): a whole number"),
        ({"title": ""}, 400, "Give the pool a title."),
        ({"benchmark": None}, 400, "Choose at least one benchmark."),
        ({"benchmark": "nope"}, 400, "No active benchmark is named"),
        ({"final_sha256": "abc"}, 400, "64 hexadecimal digits"),
        ({"period_hours": "0"}, 400, "update period"),
        ({"max_params": "lots"}, 400, "lots"),
    ],
)
def test_bad_input_is_shown_back_in_the_form_and_changes_nothing(site, changes, status, message):
    with site.browser() as browser:
        browser.dev_signin("alice")
        form = browser.form(NEW, NEW)
        fields = {"title": "Kept title", "funds": "100", "rule": RULE, **changes}
        if fields.get("benchmark", "") is None:
            form.fields = [(k, v) for k, v in form.fields if k != "benchmark"]
        answer = browser.submit(form, **fields)
        assert answer.status_code == status, answer.text[:500]
        assert message in answer.text
        assert 'role="alert" id="pool-problem"' in answer.text
        if fields["title"]:
            assert 'value="Kept title"' in answer.text  # what was typed stays
        assert pools_in(site) == []
        assert balance(site, "alice") == ALICE_CREDITS


def test_a_refusal_of_the_service_is_shown_in_the_form(site):
    """The form's own checks pass, the service's do not (a start long past)."""
    with site.browser() as browser:
        browser.dev_signin("alice")
        form = browser.form(NEW, NEW)
        answer = browser.submit(
            form,
            title="Late",
            funds="100",
            rule=RULE,
            starts_at="2026-12-01T09:00",
            join_deadline="2026-12-12T09:00",
            ends_at="2026-12-13T09:00",
        )
        assert answer.status_code == 422, answer.text[:500]
        assert "in the past" in answer.text and 'value="Late"' in answer.text
        assert pools_in(site) == [] and balance(site, "alice") == ALICE_CREDITS


def test_the_create_form_needs_a_session_and_its_csrf_token(site):
    with site.browser() as browser:
        assert browser.post(NEW, {"title": "x", "funds": "1"}).status_code == 401
        browser.dev_signin("alice")
        form = browser.form(NEW, NEW)
        forged = browser.submit(form, title="x", funds="100", csrf="forged")
        assert forged.status_code == 403
        assert pools_in(site) == [] and balance(site, "alice") == ALICE_CREDITS


def test_the_join_form_enters_ones_own_model_only(site):
    pool = make_pool(site)
    bob_1, bob_2 = model_id(site, "bob-model-1"), model_id(site, "bob-model-2")
    alices = model_id(site, "alice-model-3")
    join = f"/pools/{pool}/join"
    with site.browser() as browser:
        browser.dev_signin("bob")
        page = browser.get(f"/pools/{pool}")  # upcoming: entries are open already
        assert page.status_code == 200
        form = next(f for f in forms_of(page.text) if f.action == join)
        assert f'<option value="{bob_1}"' in page.text and f'<option value="{bob_2}"' in page.text
        assert f'value="{alices}"' not in page.text  # only bob's own models are offered

        theirs = browser.submit(form, model=str(alices))
        assert theirs.status_code in (403, 404), theirs.text[:500]
        assert 'id="join-problem"' in theirs.text
        assert entries_in(site) == []

        forged = browser.submit(form, model=str(bob_1), csrf="forged")
        assert forged.status_code == 403 and entries_in(site) == []
        empty = browser.submit(form, model="")
        assert empty.status_code == 400 and "Choose one of your models" in empty.text

        answer = browser.submit(form, model=str(bob_1))
        assert answer.status_code == 303, answer.text[:500]
        [entry] = entries_in(site)
        assert entry.model_id == bob_1
        assert answer.headers["location"] == f"/pools/{pool}?joined={entry.id}#entries"
        shown = browser.get(f"/pools/{pool}?joined={entry.id}")
        assert "bob-model-1</a> is entered in this pool." in shown.text
        assert f'<option value="{bob_1}"' not in shown.text  # entered: not offered again

        again = browser.submit(form, model=str(bob_1))  # the same model twice
        assert again.status_code == 409 and 'id="join-problem"' in again.text
        assert len(entries_in(site)) == 1

    with site.browser() as anonymous:
        assert anonymous.post(join, {"model": str(bob_2)}).status_code == 401
    assert len(entries_in(site)) == 1


def test_after_the_join_deadline_there_is_no_join_form_and_a_post_is_refused(site):
    pool = make_pool(site)
    site.clock.advance(days=2, minutes=1)
    with site.browser() as browser:
        browser.dev_signin("bob")
        page = browser.get(f"/pools/{pool}")
        assert "running (entries closed)" in page.text and "join-form" not in page.text
        token = browser.form("/account", "/signout").value("csrf")
        late = browser.post(
            f"/pools/{pool}/join", {"csrf": token, "model": str(model_id(site, "bob-model-1"))}
        )
        assert late.status_code == 409, late.text[:500]
        assert 'id="join-problem"' in late.text and entries_in(site) == []


def test_the_account_shows_credits_for_an_account_without_any(site):
    with site.browser() as browser:
        browser.dev_signin("bob")
        page = browser.get("/account")
        assert 'id="credits-balance"><strong>0</strong> credits' in page.text
        assert "No entries yet." in page.text
        new = browser.get(NEW)
        assert 'id="pool-balance">0<' in new.text and "quorumbench credits mint" in new.text
