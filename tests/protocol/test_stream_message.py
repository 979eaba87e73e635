"""StreamMessage v1 field rules (CIP-7 Data Type 3)."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import pytest
from hypothesis import given
from protocol_strategies import KEYS, PROPERTY, signed_messages

from watchtower.protocol import PayloadFormat, StreamMessage, sign_message
from watchtower.protocol.errors import InvalidArgumentError, InvalidSignatureError, PayloadTooLargeError


def _fields(**overrides: Any) -> dict[str, Any]:
    payload = overrides.pop("payload_inline", b"hello")
    fields: dict[str, Any] = {
        "stream_id": "s",
        "sequence": 1,
        "timestamp_unix_ms": 0,
        "kind": "news",
        "payload_inline": payload,
        "payload_hash": hashlib.sha256(payload if isinstance(payload, bytes) else b"").digest(),
        "publisher_sig": bytes(64),
    }
    fields.update(overrides)
    return fields


def test_defaults_follow_cip7() -> None:
    msg = StreamMessage(**_fields())
    assert msg.version == 1
    assert msg.content_type == "application/json"
    assert msg.payload_format is PayloadFormat.PLAINTEXT
    assert msg.key_epoch is None
    assert dict(msg.tags) == {}


def test_none_content_type_becomes_the_default() -> None:
    assert StreamMessage(**_fields(content_type=None)).content_type == "application/json"


@pytest.mark.parametrize(
    "overrides",
    [
        {"version": 2},
        {"version": True},
        {"stream_id": ""},
        {"stream_id": 7},
        {"kind": ""},
        {"content_type": ""},
        {"sequence": 0},
        {"sequence": True},
        {"sequence": 2**63},
        {"timestamp_unix_ms": -1},
        {"timestamp_unix_ms": 1.5},
        {"signing_key_id": 0},
        {"publisher_sig": bytes(63)},
        {"payload_hash": bytes(31)},
        {"payload_inline": "text"},
        {"payload_format": "COMPRESSED"},
        {"key_epoch": 3},  # PLAINTEXT must not carry a key epoch
        {"payload_format": "CIPHERTEXT"},  # CIPHERTEXT requires one
        {"payload_format": "CIPHERTEXT", "key_epoch": 1, "payload_inline": bytes(39)},
        {"payload_format": "CIPHERTEXT", "key_epoch": -1, "payload_inline": bytes(40)},
        {"tags": {"": "x"}},
        {"tags": {1: "x"}},
        {"tags": {"x": None}},
        {"tags": {"x": [1]}},
        {"tags": {"x": float("nan")}},
        {"tags": {"x": float("-inf")}},
        {"tags": {"x": 10**400}},
        {"tags": ["x"]},
        {"kind": "\ud800"},
    ],
)
def test_rule_violations_are_invalid_argument(overrides: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        StreamMessage(**_fields(**overrides))


def test_payload_limit_is_16_kib_inclusive() -> None:
    StreamMessage(**_fields(payload_inline=bytes(16384)))
    with pytest.raises(PayloadTooLargeError, match="16385 bytes"):
        StreamMessage(**_fields(payload_inline=bytes(16385)))


def test_ciphertext_envelope_minimum_is_nonce_plus_tag() -> None:
    msg = StreamMessage(**_fields(payload_format="CIPHERTEXT", key_epoch=0, payload_inline=bytes(40)))
    assert msg.payload_format is PayloadFormat.CIPHERTEXT


def test_tags_normalise_numbers_to_float_and_keep_bools() -> None:
    msg = StreamMessage(**_fields(tags={"n": 12, "b": True, "s": "x", "f": 0.5}))
    assert dict(msg.tags) == {"n": 12.0, "b": True, "s": "x", "f": 0.5}
    assert type(msg.tags["n"]) is float
    assert type(msg.tags["b"]) is bool


def test_message_is_immutable_including_its_tags() -> None:
    source = {"a": "1"}
    msg = StreamMessage(**_fields(tags=source))
    source["a"] = "2"
    assert msg.tags["a"] == "1"
    with pytest.raises(TypeError):
        msg.tags["a"] = "3"  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        msg.sequence = 2  # type: ignore[misc]


def test_validate_checks_the_payload_hash() -> None:
    good = StreamMessage(**_fields())
    assert good.validate() is good
    bad = dataclasses.replace(good, payload_hash=bytes(32))
    with pytest.raises(InvalidSignatureError, match="payload_hash"):
        bad.validate()


def test_bytearray_and_memoryview_payloads_become_bytes() -> None:
    msg = StreamMessage(**_fields(payload_inline=bytearray(b"hello")))
    assert type(msg.payload_inline) is bytes


@PROPERTY
@given(signed_messages())
def test_record_and_json_forms_round_trip(pair: tuple[StreamMessage, Any]) -> None:
    msg, _ = pair
    assert StreamMessage.from_record(msg.to_record()) == msg
    assert StreamMessage.from_json_dict(msg.to_json_dict()) == msg
    assert hash(StreamMessage.from_record(msg.to_record())) == hash(msg)


def test_from_record_rejects_unknown_and_missing_fields() -> None:
    record = sign_message(
        stream_id="s", sequence=1, timestamp_unix_ms=0, kind="k", payload=b"", signing_key=KEYS[0]
    ).to_record()
    with pytest.raises(InvalidArgumentError, match="unknown"):
        StreamMessage.from_record({**record, "extra": 1})
    del record["publisher_sig"]
    with pytest.raises(InvalidArgumentError, match="missing"):
        StreamMessage.from_record(record)


def test_headers_are_what_filters_read() -> None:
    msg = StreamMessage(**_fields(tags={"symbol": "BTC"}, sequence=9))
    assert msg.headers() == {"kind": "news", "sequence": 9, "timestamp_unix_ms": 0, "tags": {"symbol": "BTC"}}


def test_with_signature_replaces_only_the_signature() -> None:
    msg = StreamMessage(**_fields(tags={"a": 1}))
    signed = msg.with_signature(b"\x01" * 64)
    assert signed.publisher_sig == b"\x01" * 64
    assert dataclasses.replace(signed, publisher_sig=bytes(64)) == msg
    with pytest.raises(InvalidArgumentError):
        msg.with_signature(b"\x01" * 63)
