"""Bad input to prize pools: each a clear error, and nothing changed (both databases)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from quorumbench.db.models import Model
from quorumbench.errors import (
    ConflictError,
    DuplicateEntryError,
    InsufficientFundsError,
    InvalidSpecError,
    NotFoundError,
    PermissionDeniedError,
    UnknownBenchmarkError,
)
from quorumbench.services import ledger, pools
from quorumbench.services.accounts import issue_token

from .conftest import hub_ref
from .pool_world import DAY1, World, spec


@pytest.fixture
def world(make_ctx, sums_spec, db_url):
    made = World(make_ctx, sums_spec, db_url)
    made.mint("funder", 1000)
    yield made
    made.close()


START = spec().starts_at

BAD_SPECS = [
    ({"funds": 1001}, InsufficientFundsError, "less than the 1001"),
    ({"funds": -5}, InvalidSpecError, "funds"),
    ({"funds": 0}, InvalidSpecError, "funds"),
    ({"funds": 10.5}, InvalidSpecError, "whole number"),
    ({"funds": True}, InvalidSpecError, "whole number"),
    ({"ends_at": START - timedelta(hours=1)}, InvalidSpecError, "before it starts"),
    ({"join_deadline": DAY1 + timedelta(days=4)}, InvalidSpecError, "join deadline"),
    ({"starts_at": START - timedelta(days=1)}, InvalidSpecError, "in the past"),
    ({"starts_at": START.replace(tzinfo=None)}, InvalidSpecError, "time zone"),
    ({"rule": "Lottery"}, InvalidSpecError, "rule"),
    ({"rule": "Geometric", "rule_params": {"q": 2}}, InvalidSpecError, "rule"),
    ({"rule_params": {"nope": 1}}, InvalidSpecError, "rule"),
    ({"ties": "earliest"}, InvalidSpecError, "ties"),
    ({"benchmarks": []}, InvalidSpecError, "benchmarks"),
    ({"benchmarks": ["no-such"]}, UnknownBenchmarkError, "no-such"),
    ({"title": "  "}, InvalidSpecError, "title"),
    ({"period_s": 60}, InvalidSpecError, "period_s"),
    ({"entries_per_account": 0}, InvalidSpecError, "entries_per_account"),
    ({"kinds": ["exe"]}, InvalidSpecError, "kind"),
    ({"max_params": 0}, InvalidSpecError, "max_params"),
    ({"final_sha256": "ABC"}, InvalidSpecError, "final_sha256"),
]


def test_bad_pool_specs_are_refused_and_change_nothing(world):
    before = world.counts()
    for changes, error, text in BAD_SPECS:
        with pytest.raises(error, match=text):
            pools.create_pool(world.ctx, world.who("funder"), spec(**changes))
        assert world.counts() == before, changes
    assert world.balance("funder") == 1000
    # a token without the scope of registering models may not fund
    narrow = issue_token(world.ctx, "funder", scopes=("task:pull",)).token
    world.tokens["narrow"] = narrow
    with pytest.raises(PermissionDeniedError):
        pools.create_pool(world.ctx, world.who("narrow"), spec())
    assert world.counts() == before


def test_bad_joins_are_refused_and_change_nothing(world, clock):
    ctx = world.ctx
    mine = world.register(hub_ref(21), "ana")
    theirs = world.register(hub_ref(22), "ben")
    extra = world.register(hub_ref(23), "ana")
    small = pools.create_pool(
        ctx, world.who("funder"), spec(max_params=10, kinds=["gguf"], funds=100)
    )
    made = pools.create_pool(ctx, world.who("funder"), spec(entries_per_account=1, funds=100))
    pools.join_pool(ctx, world.who("ana"), made.id, str(mine))
    before = world.counts()
    refusals = [
        ("ana", made.id, str(mine), DuplicateEntryError, "already"),
        ("ana", made.id, str(theirs), PermissionDeniedError, "not yours"),
        ("admin", made.id, str(theirs), PermissionDeniedError, "not yours"),
        ("ana", made.id, str(extra), ConflictError, "per account"),
        ("ana", made.id, "no-such-model", NotFoundError, "no model"),
        ("ana", 999, str(extra), NotFoundError, "no pool"),
        ("ana", small.id, str(extra), ConflictError, "kind"),
    ]
    for who, pool_id, model, error, text in refusals:
        with pytest.raises(error, match=text):
            pools.join_pool(ctx, world.who(who), pool_id, model)
        assert world.counts() == before, (who, model)
    # the same weights under another account cannot enter either (the weights key)
    with ctx.db.write() as session:
        twin = session.get(Model, theirs)
        original = session.get(Model, mine)
        assert twin is not None and original is not None
        original_weights, original.weights_sha256 = original.weights_sha256, None
        session.flush()
        twin.weights_sha256 = original_weights
    # (ana's entry keeps its weights key: ben's model with those weights is a duplicate)
    other = pools.create_pool(ctx, world.who("funder"), spec(funds=100))
    with pytest.raises(DuplicateEntryError):
        pools.join_pool(ctx, world.who("ben"), made.id, str(theirs))
    before = world.counts()
    # after the deadline nobody joins
    clock.now = made.join_deadline + timedelta(seconds=1)
    with pytest.raises(ConflictError, match="closed"):
        pools.join_pool(ctx, world.who("ben"), other.id, str(theirs))
    assert world.counts() == before
    assert world.balance("funder") == 700 and ledger.check_ledger(ctx) == []
