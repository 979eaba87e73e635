"""Canonical signing bytes (DESIGN §7.1) and ed25519 sign/verify (§7.2)."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import nacl.signing
import pytest
from hypothesis import given
from hypothesis import strategies as st
from protocol_strategies import KEYS, PROPERTY, signed_messages, vectors_of_type

from watchtower.protocol import (
    KeySchedule,
    PayloadFormat,
    StreamMessage,
    message_signing_bytes,
    sign_message,
    signing_bytes,
    verify_message,
    verify_message_or_raise,
    verify_with_schedule,
    verify_with_schedule_or_raise,
)
from watchtower.protocol.errors import InvalidArgumentError, InvalidSignatureError

KEY = KEYS[0]
BASE: dict[str, Any] = {
    "stream_id": "prices.btc-usd",
    "sequence": 1,
    "timestamp_unix_ms": 1767225600000,
    "kind": "price_batch",
    "payload": b'{"p":1}',
}


@pytest.mark.parametrize("vector", vectors_of_type("signing"), ids=lambda v: v["id"])
def test_signing_known_answers(vector: dict[str, Any]) -> None:
    inp, expect = vector["input"], vector["expect"]
    key = nacl.signing.SigningKey(bytes.fromhex(inp["signer_seed_hex"]))
    fields = {
        k: inp[k]
        for k in (
            "stream_id",
            "sequence",
            "timestamp_unix_ms",
            "kind",
            "content_type",
            "tags",
            "payload_format",
            "key_epoch",
            "signing_key_id",
        )
    }
    payload = bytes.fromhex(inp["payload_hex"])
    if "error" in expect:
        with pytest.raises(InvalidArgumentError):
            sign_message(**fields, payload=payload, signing_key=key)
        return
    msg = sign_message(**fields, payload=payload, signing_key=key)
    assert msg.payload_hash.hex() == expect["payload_hash_hex"]
    assert message_signing_bytes(msg).hex() == expect["signing_bytes_hex"]
    assert signing_bytes(**fields, payload=payload).hex() == expect["signing_bytes_hex"]
    assert bytes(key.verify_key).hex() == expect["public_key_hex"]
    assert msg.publisher_sig.hex() == expect["publisher_sig_hex"]


def test_map_header_and_key_order() -> None:
    data = signing_bytes(**BASE)
    assert data[0] == 0xAB  # a map of exactly 11 pairs
    assert data[1:6] == b"\x64kind"  # shortest key first
    assert data.endswith(b"\x71timestamp_unix_ms" + b"\x1b" + (1767225600000).to_bytes(8, "big"))


def test_every_number_tag_is_float64_never_shortened() -> None:
    data = signing_bytes(**BASE, tags={"count": 12, "half": 0.5})
    assert bytes.fromhex("65636f756e74fb4028000000000000") in data
    assert bytes.fromhex("6468616c66fb3fe0000000000000") in data


def test_bool_tags_are_cbor_booleans_not_numbers() -> None:
    assert bytes.fromhex("6566696e616cf5") in signing_bytes(**BASE, tags={"final": True})
    assert signing_bytes(**BASE, tags={"x": True}) != signing_bytes(**BASE, tags={"x": 1})


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf"), None, [1], {"a": 1}])
def test_unsignable_tag_values_are_rejected(bad: object) -> None:
    with pytest.raises(InvalidArgumentError):
        signing_bytes(**BASE, tags={"x": bad})


def test_missing_content_type_signs_as_application_json() -> None:
    assert signing_bytes(**BASE) == signing_bytes(**BASE, content_type="application/json")
    assert signing_bytes(**BASE) != signing_bytes(**BASE, content_type="text/plain")


def test_plaintext_key_epoch_is_null_and_ciphertext_carries_it() -> None:
    assert b"\x69key_epoch\xf6" in signing_bytes(**BASE)
    cipher = signing_bytes(**{**BASE, "payload": bytes(40)}, payload_format="CIPHERTEXT", key_epoch=2946)
    assert b"\x69key_epoch\x19\x0b\x82" in cipher


def test_signature_is_plain_ed25519_over_the_signing_bytes() -> None:
    msg = sign_message(**BASE, signing_key=KEY)
    KEY.verify_key.verify(message_signing_bytes(msg), msg.publisher_sig)  # independent check
    assert msg.payload_hash == hashlib.sha256(BASE["payload"]).digest()


@PROPERTY
@given(signed_messages())
def test_sign_then_verify_round_trips(pair: tuple[StreamMessage, nacl.signing.SigningKey]) -> None:
    msg, key = pair
    assert verify_message(msg, bytes(key.verify_key))
    verify_message_or_raise(msg, bytes(key.verify_key))


def _changed(msg: StreamMessage, field: str, data: st.DataObject) -> StreamMessage:
    value = getattr(msg, field)
    if field in ("stream_id", "kind", "content_type"):
        new: Any = data.draw(st.text(min_size=1, max_size=8).filter(lambda s: s != value))
    elif field in ("sequence", "signing_key_id") or field == "timestamp_unix_ms":
        new = value + 1 if value < 2**63 - 1 else value - 1
    elif field == "tags":
        new = {**value, "zz-extra": 1.0} if "zz-extra" not in value else {}
    elif field == "key_epoch":
        if value is None:
            return msg
        return dataclasses.replace(msg, key_epoch=value + 1 if value < 2**63 - 1 else value - 1)
    elif field == "payload_format":
        if value is PayloadFormat.PLAINTEXT:
            return msg
        return dataclasses.replace(msg, payload_format=PayloadFormat.PLAINTEXT, key_epoch=None)
    else:
        raise AssertionError(field)
    return dataclasses.replace(msg, **{field: new})


@PROPERTY
@given(
    signed_messages(),
    st.sampled_from(
        [
            "stream_id",
            "sequence",
            "timestamp_unix_ms",
            "kind",
            "content_type",
            "tags",
            "payload_format",
            "key_epoch",
            "signing_key_id",
        ]
    ),
    st.data(),
)
def test_changing_any_signed_field_breaks_verification(
    pair: tuple[StreamMessage, nacl.signing.SigningKey], field: str, data: st.DataObject
) -> None:
    msg, key = pair
    changed = _changed(msg, field, data)
    if changed is msg:  # the field has no other valid value for this message's format
        return
    assert not verify_message(changed, bytes(key.verify_key))
    with pytest.raises(InvalidSignatureError):
        verify_message_or_raise(changed, bytes(key.verify_key))


@PROPERTY
@given(signed_messages(), st.data())
def test_flipping_any_payload_or_signature_byte_breaks_verification(
    pair: tuple[StreamMessage, nacl.signing.SigningKey], data: st.DataObject
) -> None:
    msg, key = pair
    public = bytes(key.verify_key)
    target = data.draw(st.sampled_from(["payload_inline", "publisher_sig", "payload_hash"]))
    raw = bytearray(getattr(msg, target))
    if not raw:
        return
    index = data.draw(st.integers(0, len(raw) - 1))
    raw[index] ^= data.draw(st.integers(1, 255))
    assert not verify_message(dataclasses.replace(msg, **{target: bytes(raw)}), public)


def test_a_consistent_rehash_of_changed_payload_still_fails() -> None:
    msg = sign_message(**BASE, signing_key=KEY)
    other = b'{"p":2}'
    forged = dataclasses.replace(msg, payload_inline=other, payload_hash=hashlib.sha256(other).digest())
    assert not verify_message(forged, bytes(KEY.verify_key))


def test_wrong_key_fails_and_malformed_key_is_an_argument_error() -> None:
    msg = sign_message(**BASE, signing_key=KEY)
    assert not verify_message(msg, bytes(KEYS[1].verify_key))
    with pytest.raises(InvalidArgumentError):
        verify_message(msg, b"\x00" * 31)


def test_verify_with_schedule_uses_the_key_in_force() -> None:
    schedule = KeySchedule.initial(bytes(KEYS[0].verify_key)).rotate(bytes(KEYS[1].verify_key), head_sequence=5)
    old = sign_message(**{**BASE, "sequence": 5}, signing_key=KEYS[0], signing_key_id=1)
    new = sign_message(**{**BASE, "sequence": 6}, signing_key=KEYS[1], signing_key_id=2)
    stale = sign_message(**{**BASE, "sequence": 6}, signing_key=KEYS[0], signing_key_id=1)
    assert verify_with_schedule(old, schedule)
    assert verify_with_schedule(new, schedule)
    assert not verify_with_schedule(stale, schedule)
    with pytest.raises(InvalidSignatureError, match="key 2 is in force from sequence 6"):
        verify_with_schedule_or_raise(stale, schedule)
    mislabelled = sign_message(**{**BASE, "sequence": 6}, signing_key=KEYS[0], signing_key_id=2)
    with pytest.raises(InvalidSignatureError):
        verify_with_schedule_or_raise(mislabelled, schedule)
