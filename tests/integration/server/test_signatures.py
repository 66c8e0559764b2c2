"""Signed results over HTTP: every way a signature can be wrong is refused.

Runner keys are registered through the API; submissions are signed as a runner signs
them (``tests/integration/signing.py``, the same ``core.signing`` functions). The
small-order encodings are the 14 of Table 6b of "Taming the many EdDSAs" (Chalkias,
Garillot, Nikolaenko; 2020).
"""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest
from nacl.signing import SigningKey

from quorumbench.core.canonical import sha256_hex

from ..signing import signature
from .conftest import hub_ref
from .test_api import assert_problem, auth, payload, pull, register

SMALL_ORDER = [
    "0100000000000000000000000000000000000000000000000000000000000000",
    "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "0000000000000000000000000000000000000000000000000000000000000080",
    "0000000000000000000000000000000000000000000000000000000000000000",
    "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
    "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
    "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
    "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
    "0100000000000000000000000000000000000000000000000000000000000080",
    "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
    "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
    "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
    "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
]
L = 2**252 + 27742317777372353535851937790883648493  # the group order


def register_key(api, token: str, runner: str, key: SigningKey):
    return api.post(
        f"/v0/runners/{runner}/keys",
        json={"public_key": bytes(key.verify_key).hex()},
        headers=auth(token),
    )


def post_result(api, token, runner, lease, body):
    return api.post(
        f"/v0/leases/{lease['lease_id']}/result",
        params={"runner": runner},
        json=body,
        headers=auth(token),
    )


@pytest.fixture
def setup(api, people, ctx):
    """r1's runner with a registered key, and a lease of it on a fresh task."""
    key = SigningKey.generate()
    assert register_key(api, people["r1"], "r1-box", key).status_code == 201
    register(api, people, hub_ref(60))
    register(api, people, hub_ref(61))
    lease = pull(api, people, "r1").json()
    now = ctx.now().isoformat()
    return key, lease, now


def signed_body(key, lease, score=0.5, signed_at=None, sign_as=None):
    body = payload(lease, score)
    body["signature"] = signature(key, sign_as or lease, body["result"], signed_at)
    return body


def test_a_correctly_signed_result_is_stored_with_its_signature(api, people, setup):
    key, lease, now = setup
    answer = post_result(api, people["r1"], "r1-box", lease, signed_body(key, lease, signed_at=now))
    assert answer.status_code == 201, answer.text


def test_a_result_without_a_signature_is_refused(api, people, setup):
    _, lease, _ = setup
    problem = assert_problem(
        post_result(api, people["r1"], "r1-box", lease, payload(lease, 0.5)),
        422,
        "invalid-request",
    )
    assert "signature" in problem["detail"] or "signature" in str(problem.get("errors"))


def test_replays_onto_another_task_lease_or_revision_are_refused(api, people, setup):
    key, lease, now = setup
    other = pull(api, people, "r1").json()  # r1's lease on the other task
    assert other["task"]["id"] != lease["task"]["id"]
    moved = signed_body(key, other, signed_at=now)
    moved["result"]["task_id"] = lease["task"]["id"]  # other task's body, this lease
    moved["result"]["sample_ids"] = lease["task"]["sample_ids"]
    assert_problem(post_result(api, people["r1"], "r1-box", lease, moved), 422, "invalid-signature")
    for change in ("lease_id", "attempt"):
        wrong = copy.deepcopy(lease)
        wrong[change] += 1
        body = signed_body(key, lease, signed_at=now, sign_as=wrong)
        response = post_result(api, people["r1"], "r1-box", lease, body)
        assert_problem(response, 422, "invalid-signature", "does not verify")
    for path, value in (
        (("model", "ref"), "hf:org/model-60@" + "f" * 40),
        (("benchmark", "version"), 2),
        (("benchmark", "dataset_sha256"), "0" * 64),
    ):
        wrong = copy.deepcopy(lease)
        wrong["task"][path[0]][path[1]] = value
        body = signed_body(key, lease, signed_at=now, sign_as=wrong)
        response = post_result(api, people["r1"], "r1-box", lease, body)
        assert_problem(response, 422, "invalid-signature", "does not verify")


def test_an_old_or_future_timestamp_is_refused(api, people, ctx, setup):
    key, lease, _ = setup
    for when in (ctx.now() - timedelta(hours=1), ctx.now() + timedelta(hours=1)):
        body = signed_body(key, lease, signed_at=when.isoformat())
        response = post_result(api, people["r1"], "r1-box", lease, body)
        assert_problem(response, 422, "invalid-signature", "replayed or stale")
    naive = signed_body(key, lease, signed_at=ctx.now().replace(tzinfo=None).isoformat())
    response = post_result(api, people["r1"], "r1-box", lease, naive)
    assert_problem(response, 422, "invalid-signature", "UTC offset")


def flip(hex_value: str, position: int = 0) -> str:
    raw = bytearray.fromhex(hex_value)
    raw[position] ^= 0x01
    return raw.hex()


def test_a_flipped_bit_in_payload_signature_or_key_is_refused(api, people, setup):
    key, lease, now = setup
    body = signed_body(key, lease, signed_at=now)
    tampered = copy.deepcopy(body)
    tampered["result"]["outputs_sha256"] = flip(tampered["result"]["outputs_sha256"])
    assert_problem(
        post_result(api, people["r1"], "r1-box", lease, tampered),
        422,
        "invalid-signature",
        "does not verify",
    )
    for position in (0, 31, 32, 63):
        tampered = copy.deepcopy(body)
        tampered["signature"]["value"] = flip(body["signature"]["value"], position)
        assert_problem(
            post_result(api, people["r1"], "r1-box", lease, tampered), 422, "invalid-signature"
        )
    tampered = copy.deepcopy(body)
    tampered["signature"]["key_id"] = flip(body["signature"]["key_id"])
    assert_problem(
        post_result(api, people["r1"], "r1-box", lease, tampered),
        422,
        "invalid-signature",
        "not a key of the runner",
    )
    assert post_result(api, people["r1"], "r1-box", lease, body).status_code == 201


def test_a_non_canonical_s_and_a_small_order_r_are_refused(api, people, setup):
    key, lease, now = setup
    body = signed_body(key, lease, signed_at=now)
    raw = bytes.fromhex(body["signature"]["value"])
    s = int.from_bytes(raw[32:], "little")
    malleated = raw[:32] + (s + L).to_bytes(32, "little")  # the same point equation holds
    tampered = copy.deepcopy(body)
    tampered["signature"]["value"] = malleated.hex()
    assert_problem(
        post_result(api, people["r1"], "r1-box", lease, tampered), 422, "invalid-signature"
    )
    for r in SMALL_ORDER[:8]:
        tampered["signature"]["value"] = r + "00" * 32
        assert_problem(
            post_result(api, people["r1"], "r1-box", lease, tampered), 422, "invalid-signature"
        )


def test_small_order_and_malformed_public_keys_are_refused_at_registration(api, people):
    for public in SMALL_ORDER + ["ff" * 32, "00" * 31, "zz" * 32]:
        response = api.post(
            "/v0/runners/r1-box/keys", json={"public_key": public}, headers=auth(people["r1"])
        )
        assert response.status_code == 400, (public, response.text)


def test_a_key_of_another_runner_or_account_is_refused(api, people, setup):
    key, lease, now = setup
    other = SigningKey.generate()
    assert register_key(api, people["r1"], "r1-spare", other).status_code == 201
    body = signed_body(other, lease, signed_at=now)
    assert_problem(
        post_result(api, people["r1"], "r1-box", lease, body),
        422,
        "invalid-signature",
        "not a key of the runner",
    )
    stranger = SigningKey.generate()
    assert register_key(api, people["r2"], "r2-box", stranger).status_code == 201
    body = signed_body(stranger, lease, signed_at=now)
    assert_problem(
        post_result(api, people["r1"], "r1-box", lease, body),
        422,
        "invalid-signature",
        "not a key of the runner",
    )
    # one key belongs to one runner: r2 cannot claim r1's key
    taken = register_key(api, people["r2"], "r2-box", key)
    assert_problem(taken, 409, "conflict", "already registered")


def test_rotation_and_revocation(api, people, setup):
    key, lease, now = setup
    new = SigningKey.generate()
    assert register_key(api, people["r1"], "r1-box", new).status_code == 201  # rotates
    keys = api.get("/v0/runners/r1-box/keys", headers=auth(people["r1"])).json()
    assert [k["revoked_at"] is not None for k in keys] == [True, False]
    old_body = signed_body(key, lease, signed_at=now)
    assert_problem(
        post_result(api, people["r1"], "r1-box", lease, old_body),
        422,
        "invalid-signature",
        "revoked",
    )
    key_id = sha256_hex(bytes(new.verify_key))
    assert api.get(f"/v0/runner-keys/{key_id}").json()["public_key"] == bytes(new.verify_key).hex()
    revoked = api.delete(f"/v0/runners/r1-box/keys/{key_id}", headers=auth(people["r1"]))
    assert revoked.status_code == 204
    new_body = signed_body(new, lease, signed_at=now)
    assert_problem(
        post_result(api, people["r1"], "r1-box", lease, new_body),
        422,
        "invalid-signature",
        "revoked",
    )
    again = register_key(api, people["r1"], "r1-box", new)
    assert_problem(again, 409, "conflict", "revoked")
    nobody = api.delete(f"/v0/runners/r1-box/keys/{'0' * 64}", headers=auth(people["r1"]))
    assert nobody.status_code == 404
    third = SigningKey.generate()
    assert register_key(api, people["r1"], "r1-box", third).status_code == 201
    body = signed_body(third, lease, signed_at=now)
    assert post_result(api, people["r1"], "r1-box", lease, body).status_code == 201


def test_key_endpoints_need_the_submit_scope(api, people, ctx):
    from quorumbench.services.accounts import issue_token

    pull_only = issue_token(ctx, "r1", scopes=("task:pull",)).token
    response = register_key(api, pull_only, "r1-box", SigningKey.generate())
    assert_problem(response, 403, "forbidden", "task:submit")
    unauthenticated = api.post("/v0/runners/r1-box/keys", json={"public_key": "00" * 32})
    assert unauthenticated.status_code == 401
