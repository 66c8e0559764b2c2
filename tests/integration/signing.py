"""Test helpers: runner signing keys registered over HTTP, signed submission bodies."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from nacl.signing import SigningKey
from pydantic import ValidationError

from quorumbench.core.canonical import canonical_json, sha256_hex
from quorumbench.core.signing import message_for_task, result_digest
from quorumbench.protocol import ResultPayload, Task


class Keyring:
    """One Ed25519 key per (account, runner), registered the first time it is used."""

    def __init__(self, post: Any, now: Any = None) -> None:
        self._post = post  # post(path, json=..., headers=...) -> response
        self._now = now or (lambda: datetime.now(UTC))  # the server's clock, in tests
        self.keys: dict[tuple[str, str], SigningKey] = {}

    def key(self, token: str, runner: str) -> SigningKey:
        if (token, runner) not in self.keys:
            key = SigningKey.generate()
            answer = self._post(
                f"/v0/runners/{runner}/keys",
                json={"public_key": bytes(key.verify_key).hex()},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert answer.status_code == 201, answer.text
            self.keys[(token, runner)] = key
        return self.keys[(token, runner)]

    def sign(self, token: str, runner: str, lease: dict[str, Any], result: dict[str, Any]) -> dict:
        return signature(self.key(token, runner), lease, result, self._now().isoformat())


def signature(
    key: SigningKey, lease: dict[str, Any], result: dict[str, Any], signed_at: str | None = None
) -> dict[str, str]:
    """The ``signature`` object for submitting ``result`` under ``lease`` (as served).

    A ``result`` that is not a valid payload (adversarial tests send such) is signed
    over the canonical JSON of what is sent: the server refuses it before any check of
    the signature.
    """
    signed_at = signed_at or datetime.now(UTC).isoformat()
    try:
        digest = result_digest(ResultPayload.model_validate(result))
    except ValidationError:
        digest = sha256_hex(canonical_json(result))
    task = Task.model_validate(lease["task"])
    message = message_for_task(task, lease["lease_id"], lease["attempt"], digest, signed_at)
    return {
        "key_id": sha256_hex(bytes(key.verify_key)),
        "signed_at": signed_at,
        "value": key.sign(message).signature.hex(),
    }
