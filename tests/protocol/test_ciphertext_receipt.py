"""The key manager's ciphertext receipt, and the stream actor's check of it at publish time."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

import nacl.signing
import pytest

from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.confidential.envelope import encrypt_for_epoch
from watchtower.protocol.confidential.receipt import (
    RECEIPT_DOMAIN,
    envelope_hash,
    receipt_signing_bytes,
    sign_receipt,
    verify_receipt,
)
from watchtower.protocol.deployment import Deployment
from watchtower.protocol.enums import PayloadFormat
from watchtower.protocol.errors import UnauthorizedError, WatchtowerError
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.signing import sign_message
from watchtower.protocol.stream.actor import StreamState, decide, evolve

KEYMGR = nacl.signing.SigningKey(b"\x09" * 32)
OTHER_KEYMGR = nacl.signing.SigningKey(b"\x0a" * 32)
OWNER = nacl.signing.SigningKey(b"\x01" * 32)
SEED = bytes(range(32))
SID = "prices.paid"


def _addr(key: nacl.signing.SigningKey) -> str:
    return address_from_public_key(bytes(key.verify_key))


DEPLOYMENT = Deployment(
    protocol_treasury=_addr(nacl.signing.SigningKey(b"\x06" * 32)), keymgr_public_key=bytes(KEYMGR.verify_key)
)


def _envelope(sequence: int, key_epoch: int = 3, plaintext: bytes = b'{"px": 1}') -> bytes:
    return encrypt_for_epoch(
        master_seed=SEED,
        stream_id=SID,
        key_epoch=key_epoch,
        actor_nonce=sequence,
        sequence=sequence,
        kind="price",
        content_type="application/json",
        plaintext=plaintext,
    )


def test_receipt_signs_the_domain_stream_epoch_and_payload_hash() -> None:
    h = envelope_hash(b"envelope")
    receipt = sign_receipt(KEYMGR, stream_id=SID, key_epoch=3, payload_hash=h)
    assert len(receipt) == 64
    message = receipt_signing_bytes(stream_id=SID, key_epoch=3, payload_hash=h)
    assert RECEIPT_DOMAIN.encode() in message
    assert h in message
    KEYMGR.verify_key.verify(message, receipt)
    verify_receipt(bytes(KEYMGR.verify_key), receipt, stream_id=SID, key_epoch=3, payload_hash=h)


@pytest.mark.parametrize(
    "change",
    [
        {"stream_id": "prices.other"},
        {"key_epoch": 4},
        {"payload_hash": hashlib.sha256(b"another envelope").digest()},
        {"public_key": bytes(OTHER_KEYMGR.verify_key)},
        {"receipt": None},
        {"receipt": b"\x00" * 64},
        {"receipt": b"short"},
        {"public_key": None},
    ],
    ids=["other-stream", "other-epoch", "other-hash", "other-key", "missing", "zeros", "short", "no-deployment-key"],
)
def test_a_receipt_for_anything_else_is_refused_with_a_publish_code(change: dict[str, Any]) -> None:
    h = envelope_hash(b"envelope")
    args: dict[str, Any] = {
        "public_key": bytes(KEYMGR.verify_key),
        "receipt": sign_receipt(KEYMGR, stream_id=SID, key_epoch=3, payload_hash=h),
        "stream_id": SID,
        "key_epoch": 3,
        "payload_hash": h,
        **change,
    }
    missing = args["receipt"] is None or not isinstance(args["receipt"], bytes) or len(args["receipt"]) != 64 \
        or args["public_key"] is None
    with pytest.raises(WatchtowerError) as err:
        verify_receipt(args.pop("public_key"), args.pop("receipt"), **args)
    # CIP-7's publish codes: no receipt to check is UNAUTHORIZED, one that does not verify INVALID_SIGNATURE.
    assert err.value.code == ("UNAUTHORIZED" if missing else "INVALID_SIGNATURE")
    assert "key manager" in err.value.message


class _Stream:
    def __init__(self, paid: bool, deployment: Deployment = DEPLOYMENT) -> None:
        self.state, self.height, self.nonce, self.deployment = StreamState.initial(SID), 10, 0, deployment
        body: dict[str, Any] = {"access_mode": "OPEN"}
        if paid:
            body = {
                "access_mode": "PLATFORM_MANAGED",
                "paid_stream_config": {
                    "fee_per_key_epoch_cby": 5,
                    "protocol_fee_bps": 100,
                    "publisher_treasury": _addr(OWNER),
                },
            }
        self.submit("create_stream", {**body, "publisher_key": bytes(OWNER.verify_key)})

    def submit(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        self.nonce += 1
        self.height += 1
        decision = decide(
            self.state,
            sign_command(OWNER, method, SID, self.nonce, body),
            block_height=self.height,
            deployment=self.deployment,
        )
        for event in decision.events:
            self.state = evolve(self.state, event)
        return decision.reply

    def publish(
        self, envelope: bytes, receipt: object = None, *, key_epoch: int = 3, ciphertext: bool = True
    ) -> dict[str, Any]:
        msg = sign_message(
            stream_id=SID,
            sequence=self.state.head + 1,
            timestamp_unix_ms=1_700_000_000_000,
            kind="price",
            tags={},
            payload=envelope,
            payload_format=PayloadFormat.CIPHERTEXT if ciphertext else PayloadFormat.PLAINTEXT,
            key_epoch=key_epoch if ciphertext else None,
            signing_key=OWNER,
            signing_key_id=1,
            content_type="application/json",
        )
        body = msg.to_json_dict()
        if receipt is not None:
            body["keymgr_receipt"] = receipt
        return self.submit("publish", body)


def _receipt(
    envelope: bytes, *, stream_id: str = SID, key_epoch: int = 3, key: nacl.signing.SigningKey = KEYMGR
) -> bytes:
    return sign_receipt(key, stream_id=stream_id, key_epoch=key_epoch, payload_hash=envelope_hash(envelope))


def test_a_paid_stream_accepts_ciphertext_with_its_receipt() -> None:
    stream = _Stream(paid=True)
    envelope = _envelope(1)
    assert stream.publish(envelope, _receipt(envelope))["sequence"] == 1
    assert stream.state.head == 1


def _tamper_tag(envelope: bytes) -> bytes:
    return envelope[:-1] + bytes([envelope[-1] ^ 1])


@pytest.mark.parametrize(
    ("why", "make"),
    [
        ("missing receipt", lambda env: (env, None, 3)),
        ("forged envelope", lambda env: (b"\x00" * 24 + b"forged ciphertext" + b"\x00" * 16, _receipt(env), 3)),
        ("tampered tag", lambda env: (_tamper_tag(env), _receipt(env), 3)),
        ("receipt for another stream", lambda env: (env, _receipt(env, stream_id="prices.other"), 3)),
        ("receipt for another epoch", lambda env: (env, _receipt(env, key_epoch=4), 3)),
        ("receipt by another key", lambda env: (env, _receipt(env, key=OTHER_KEYMGR), 3)),
        ("receipt that is not bytes", lambda env: (env, "00" * 64, 3)),
    ],
)
def test_a_paid_publish_without_a_valid_receipt_answers_a_cip7_publish_code(why: str, make: Any) -> None:
    """Failed before the fix: DECRYPTION_FAILED, which CIP-7 does not list for publish."""
    stream = _Stream(paid=True)
    envelope, receipt, key_epoch = make(_envelope(1))
    with pytest.raises(WatchtowerError) as err:
        stream.publish(envelope, receipt, key_epoch=key_epoch)
    assert err.value.code == ("UNAUTHORIZED" if why in ("missing receipt", "receipt that is not bytes")
                              else "INVALID_SIGNATURE"), why
    assert stream.state.head == 0
    # The stream still takes the genuine envelope afterwards.
    genuine = _envelope(1)
    assert stream.publish(genuine, _receipt(genuine))["sequence"] == 1


def test_a_paid_publish_is_refused_when_the_deployment_has_no_keymgr_key() -> None:
    stream = _Stream(paid=True, deployment=dataclasses.replace(DEPLOYMENT, keymgr_public_key=None))
    envelope = _envelope(1)
    with pytest.raises(UnauthorizedError, match="WATCHTOWER_KEYMGR_PUBLIC_KEY"):
        stream.publish(envelope, _receipt(envelope))


def test_an_open_stream_never_checks_receipts(monkeypatch: pytest.MonkeyPatch) -> None:
    import watchtower.protocol.stream.publish_rules as publish_rules

    def boom(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("verify_receipt ran for an OPEN stream")

    monkeypatch.setattr(publish_rules, "verify_receipt", boom)
    stream = _Stream(paid=False, deployment=dataclasses.replace(DEPLOYMENT, keymgr_public_key=None))
    assert stream.publish(b"plain", ciphertext=False)["sequence"] == 1
    # An OPEN stream accepts ciphertext the publisher sealed itself, with no receipt.
    assert stream.publish(_envelope(2))["sequence"] == 2


CIP7_PUBLISH_CODES = {"INVALID_SIGNATURE", "PAYLOAD_TOO_LARGE", "UNAUTHORIZED"}
# Documented in docs/publish-auth.md and the OpenAPI document, each with its reason.
PUBLISH_EXTENSIONS = {"STREAM_NOT_FOUND", "STALE_SEQUENCE", "INVALID_ARGUMENT", "NOT_READY", "TIMEOUT"}


def test_plaintext_on_a_paid_stream_is_unauthorized() -> None:
    """Failed before the fix: INVALID_ARGUMENT."""
    stream = _Stream(paid=True)
    with pytest.raises(WatchtowerError) as err:
        stream.publish(b"plain", ciphertext=False)
    assert err.value.code == "UNAUTHORIZED"
    assert "CIPHERTEXT only" in err.value.message


def test_every_code_publish_answers_is_cip7s_or_a_documented_extension() -> None:
    from watchtower.http.openapi import OPENAPI

    documented = OPENAPI["paths"]["/v1/commands"]["post"]["description"]
    assert all(code in documented for code in PUBLISH_EXTENSIONS | CIP7_PUBLISH_CODES)
    doc = (Path(__file__).parents[2] / "docs" / "publish-auth.md").read_text()
    assert all(f"`{code}`" in doc for code in PUBLISH_EXTENSIONS)
    paid, envelope = _Stream(paid=True), _envelope(1)
    refusals = []
    for attempt in (lambda: paid.publish(envelope, None), lambda: paid.publish(envelope, b"\x00" * 64),
                    lambda: paid.publish(b"plain", ciphertext=False)):
        with pytest.raises(WatchtowerError) as err:
            attempt()
        refusals.append(err.value.code)
    assert set(refusals) <= CIP7_PUBLISH_CODES | PUBLISH_EXTENSIONS, refusals
