"""The hand-unrolled signing-bytes encoders equal the general deterministic CBOR encoder, and cbor2
(an independent implementation) decodes both to the same object.

Two encoders are hand-unrolled for speed: `signing.message_signing_bytes` (the 11-key StreamMessage
map, DESIGN §7.1) and `signed_command.command_signing_bytes` (the 6-key command envelope). Each is
checked on random inputs against `cbor.encode` of the equivalent map, and both byte strings are
decoded with `cbor2.loads` and compared with the expected Python object. Floats are compared by
their IEEE-754 bits (so -0.0 and 0.0 differ), and every tag number must be float64 in the bytes:
cbor2 decodes float16 and float64 to the same Python float, so decoding alone cannot show it.
Where no float is involved, cbor2's own canonical encoder must reproduce our bytes exactly.
"""

from __future__ import annotations

import struct
from typing import Any

import cbor2
from hypothesis import assume, given
from hypothesis import strategies as st
from protocol_strategies import PROPERTY

from watchtower.protocol import cbor
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.constants import MAX_WIRE_UINT64
from watchtower.protocol.enums import PayloadFormat
from watchtower.protocol.frozen_json import BYTES_TAG
from watchtower.protocol.signed_command import COMMAND_DOMAIN, METHODS, command_signing_bytes
from watchtower.protocol.signing import message_signing_bytes
from watchtower.protocol.stream.message import StreamMessage

texts = st.text(min_size=1, max_size=20)  # any Unicode but lone surrogates, which UTF-8 cannot carry
wire_uint = st.integers(min_value=0, max_value=MAX_WIRE_UINT64)
finite = st.floats(allow_nan=False, allow_infinity=False)
tag_value = st.one_of(texts, st.text(max_size=3), st.booleans(), finite, st.integers(-(2**63), 2**63))
tag_maps = st.dictionaries(texts, tag_value, max_size=8)


def bits(value: Any) -> Any:
    """`value` with every float replaced by its float64 bits and every bool tagged, recursively,
    so equality is exact (1 != 1.0 != True, -0.0 != 0.0)."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, float):
        return ("f64", struct.pack(">d", value))
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, list | tuple):
        return [bits(v) for v in value]
    if isinstance(value, dict):
        return {k: bits(v) for k, v in value.items()}
    return value


def has_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, list | tuple):
        return any(has_float(v) for v in value)
    if isinstance(value, dict):
        return any(has_float(v) for v in value.values())
    return False


# --- StreamMessage signing bytes ------------------------------------------------------------------


@st.composite
def messages(draw: st.DrawFn) -> StreamMessage:
    """Any structurally valid message: both formats, every optional field present or not."""
    ciphertext = draw(st.booleans())
    optional: dict[str, Any] = {}
    if draw(st.booleans()):
        optional["content_type"] = draw(texts)
    if draw(st.booleans()):
        optional["tags"] = draw(tag_maps)
    if draw(st.booleans()):
        optional["signing_key_id"] = draw(st.integers(1, MAX_WIRE_UINT64))
    return StreamMessage(
        stream_id=draw(texts),
        sequence=draw(st.integers(1, MAX_WIRE_UINT64)),
        timestamp_unix_ms=draw(wire_uint),
        kind=draw(texts),
        payload_inline=draw(st.binary(min_size=40 if ciphertext else 0, max_size=64)),
        payload_hash=draw(st.binary(min_size=32, max_size=32)),
        publisher_sig=bytes(64),
        payload_format=PayloadFormat.CIPHERTEXT if ciphertext else PayloadFormat.PLAINTEXT,
        key_epoch=draw(wire_uint) if ciphertext else None,
        **optional,
    )


def message_map(msg: StreamMessage, *, for_cbor_encode: bool) -> dict[str, Any]:
    """The 11-key signing map of DESIGN §7.1; tag numbers are float64 (`cbor.Float64` to encode)."""

    def tag(value: Any) -> Any:
        if isinstance(value, bool | str):
            return value
        return cbor.Float64(value) if for_cbor_encode else float(value)

    return {
        "stream_id": msg.stream_id,
        "version": msg.version,
        "sequence": msg.sequence,
        "timestamp_unix_ms": msg.timestamp_unix_ms,
        "kind": msg.kind,
        "content_type": msg.content_type,
        "tags": {k: tag(v) for k, v in msg.tags.items()},
        "payload_format": str(msg.payload_format),
        "payload_hash": msg.payload_hash,
        "key_epoch": msg.key_epoch,
        "signing_key_id": msg.signing_key_id,
    }


@PROPERTY
@given(messages())
def test_message_signing_bytes_equal_the_general_encoder_and_cbor2_agrees(msg: StreamMessage) -> None:
    hand = message_signing_bytes(msg)
    general = cbor.encode(message_map(msg, for_cbor_encode=True))
    assert hand == general

    expected = message_map(msg, for_cbor_encode=False)
    assert bits(cbor2.loads(hand)) == bits(cbor2.loads(general)) == bits(expected)
    # Every tag number is float64 in the bytes, never shortened (cbor2 could not tell).
    for value in msg.tags.values():
        if not isinstance(value, bool | str):
            assert b"\xfb" + struct.pack(">d", value) in hand
    if not has_float(expected):
        assert cbor2.dumps(expected, canonical=True) == hand  # a third encoder, same bytes


def test_the_property_covers_numbers_that_float16_would_hold() -> None:
    # 1.0 fits float16: a shortening encoder would write f9 3c00. The signing bytes never do.
    msg = StreamMessage(stream_id="s", sequence=1, timestamp_unix_ms=0, kind="k", payload_inline=b"",
                        payload_hash=bytes(32), publisher_sig=bytes(64), tags={"n": 1})
    hand = message_signing_bytes(msg)
    assert b"\xfb\x3f\xf0" + bytes(6) in hand
    assert b"\xf9\x3c\x00" not in hand
    assert cbor2.loads(hand)["tags"] == {"n": 1.0}


# --- Command signing bytes ------------------------------------------------------------------------

body_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**64), 2**64 - 1), finite, st.text(max_size=10), st.binary(max_size=10)
)
body_values = st.recursive(
    body_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


def reserved(value: Any) -> bool:
    """A map that is exactly {"$bytes": <text>}, which command bodies may not hold."""
    if isinstance(value, dict):
        if len(value) == 1 and isinstance(value.get(BYTES_TAG), str):
            return True
        return any(reserved(v) for v in value.values())
    if isinstance(value, list):
        return any(reserved(v) for v in value)
    return False


def for_cbor_encode(value: Any) -> Any:
    if isinstance(value, float):
        return cbor.Float64(value)
    if isinstance(value, list):
        return [for_cbor_encode(v) for v in value]
    if isinstance(value, dict):
        return {k: for_cbor_encode(v) for k, v in value.items()}
    return value


@PROPERTY
@given(
    st.sampled_from(sorted(METHODS)),
    texts,
    st.binary(min_size=32, max_size=32),
    st.integers(1, MAX_WIRE_UINT64),
    st.dictionaries(st.text(max_size=8), body_values, max_size=6),
)
def test_command_signing_bytes_equal_the_general_encoder_and_cbor2_agrees(
    method: str, stream_id: str, caller_key: bytes, nonce: int, body: dict[str, Any]
) -> None:
    assume(not reserved(body))
    hand = command_signing_bytes(method, stream_id, caller_key, nonce, body)
    envelope = {
        "domain": COMMAND_DOMAIN,
        "method": method,
        "stream_id": stream_id,
        "caller": address_from_public_key(caller_key),
        "nonce": nonce,
        "body": body,
    }
    general = cbor.encode({**envelope, "body": for_cbor_encode(body)})
    assert hand == general
    assert bits(cbor2.loads(hand)) == bits(cbor2.loads(general)) == bits(envelope)
    if not has_float(body):
        assert cbor2.dumps(envelope, canonical=True) == hand


def test_command_floats_are_float64_even_when_float16_holds_them() -> None:
    hand = command_signing_bytes("subscribe", "s", bytes(32), 1, {"x": 1.0, "y": [0.5]})
    assert hand.count(b"\xfb") == 2
    assert cbor2.loads(hand)["body"] == {"x": 1.0, "y": [0.5]}
