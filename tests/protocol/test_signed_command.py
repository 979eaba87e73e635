"""The signed command envelope: signing bytes, signatures, digests and the JSON form."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
from typing import Any

import nacl.signing
import pytest
from hypothesis import given
from hypothesis import strategies as st
from protocol_strategies import PROPERTY, json_values

from watchtower.protocol import cbor
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.errors import InvalidArgumentError, InvalidSignatureError, WatchtowerError
from watchtower.protocol.frozen_json import FrozenDict
from watchtower.protocol.signed_command import (
    COMMAND_DOMAIN,
    METHODS,
    Command,
    Method,
    command_digest,
    command_signing_bytes,
    sign_command,
    verify_command,
)

ALICE = nacl.signing.SigningKey(b"\x11" * 32)
MALLORY = nacl.signing.SigningKey(b"\x22" * 32)
ALICE_PUB = bytes(ALICE.verify_key)


def signed(body: dict[str, Any] | None = None, **overrides: Any) -> Command:
    args: dict[str, Any] = {"method": "subscribe", "stream_id": "prices", "nonce": 1, "body": body or {"mode": "PULL"}}
    args.update(overrides)
    return sign_command(ALICE, args["method"], args["stream_id"], args["nonce"], args["body"])


# --- signing bytes ------------------------------------------------------------------------------


def test_signing_bytes_are_the_deterministic_cbor_of_the_documented_map() -> None:
    expected = cbor.encode(
        {
            "domain": COMMAND_DOMAIN,
            "method": "publish",
            "stream_id": "prices",
            "caller": address_from_public_key(ALICE_PUB),
            "nonce": 7,
            "body": {"n": 3, "x": cbor.Float64(0.5), "b": b"\x00\x01", "l": [True, None, "t"]},
        }
    )
    body = {"l": [True, None, "t"], "b": b"\x00\x01", "x": 0.5, "n": 3}
    assert command_signing_bytes("publish", "prices", ALICE_PUB, 7, body) == expected


def test_body_key_order_does_not_change_the_bytes() -> None:
    one = command_signing_bytes("subscribe", "s", ALICE_PUB, 1, {"a": 1, "bb": 2, "c": {"y": 1, "x": 2}})
    two = command_signing_bytes("subscribe", "s", ALICE_PUB, 1, {"c": {"x": 2, "y": 1}, "bb": 2, "a": 1})
    assert one == two


def test_ints_stay_ints_and_floats_are_always_float64() -> None:
    as_int = command_signing_bytes("subscribe", "s", ALICE_PUB, 1, {"v": 1})
    as_float = command_signing_bytes("subscribe", "s", ALICE_PUB, 1, {"v": 1.0})
    assert as_int != as_float
    body_key = cbor.encode("body")
    assert body_key + bytes.fromhex("a1") + cbor.encode("v") + b"\x01" in as_int
    # 1.0 would shorten to the 3-byte float16 f93c00 under preferred serialization; it must not.
    assert body_key + bytes.fromhex("a1") + cbor.encode("v") + bytes.fromhex("fb3ff0000000000000") in as_float


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_refused(bad: float) -> None:
    with pytest.raises(InvalidArgumentError, match="NaN"):
        command_signing_bytes("subscribe", "s", ALICE_PUB, 1, {"deep": [{"x": bad}]})
    with pytest.raises(InvalidArgumentError):
        signed({"x": bad})


@pytest.mark.parametrize(
    "body",
    [
        {1: "non-text key"},
        {"x": {1, 2}},
        {"x": object()},
        {"x": 2**64},
        {"$bytes": "00"},
        {"x": {"$bytes": "00"}},
    ],
)
def test_bodies_json_cannot_carry_exactly_are_refused(body: dict[Any, Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        signed(body)


def test_hostile_nesting_is_refused_without_recursion_error() -> None:
    body: Any = "leaf"
    for _ in range(5000):
        body = [body]
    with pytest.raises(InvalidArgumentError, match="nests deeper"):
        signed({"x": body})


def test_the_domain_separates_this_envelope_from_others() -> None:
    assert COMMAND_DOMAIN.encode() in command_signing_bytes("subscribe", "s", ALICE_PUB, 1, {})


# --- Command construction -----------------------------------------------------------------------


def test_caller_is_the_address_of_the_public_key() -> None:
    assert signed().caller == "0x" + ALICE_PUB.hex()


def test_every_method_of_the_protocol_is_known() -> None:
    assert {
        "create_stream",
        "publish",
        "subscribe",
        "unsubscribe",
        "rotate_publisher_key",
        "set_subscription_policy",
        "allowlist_add",
        "allowlist_remove",
        "announce_key_epoch",
        "renew_subscription",
        "report_ingest_failure",
        "register_runner",
        "retire_runner",
        "register_replay",
        "cancel_replay",
        "set_replay_price",
        "register_account_key",
        "revoke_account_key",
        "authorize_actor",
        "revoke_actor",
        "create_actor",
        "approve_spending",
        "revoke_spending",
        "transfer_cby",
        "mint_cby",
        "burn_cby",
        "acquire_epoch_access",
        "stream_encrypt",
        "stream_decrypt",
        "fetch_epoch_keys",
    } == METHODS
    assert signed(method="publish").method is Method.PUBLISH


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("method", "drop_table"),
        ("stream_id", ""),
        ("stream_id", 5),
        ("caller_public_key", b"\x00" * 31),
        ("nonce", 0),
        ("nonce", True),
        ("nonce", "1"),
        ("body", ["not", "a", "map"]),
        ("signature", "00" * 64),
    ],
)
def test_malformed_fields_are_invalid_argument(field: str, value: Any) -> None:
    fields: dict[str, Any] = {
        "method": "subscribe",
        "stream_id": "s",
        "caller_public_key": ALICE_PUB,
        "nonce": 1,
        "body": {},
        "signature": b"\x00" * 64,
    }
    fields[field] = value
    with pytest.raises(InvalidArgumentError):
        Command(**fields)


def test_the_body_is_deep_frozen() -> None:
    body: dict[str, Any] = {"mode": "PULL", "filter": {"all": [{"field": "kind", "op": "eq", "value": "x"}]}}
    cmd = signed(body)
    body["mode"] = "PUSH"
    body["filter"]["all"].append("junk")
    assert cmd.body["mode"] == "PULL"
    assert isinstance(cmd.body, FrozenDict)
    assert isinstance(cmd.body["filter"]["all"], tuple)
    with pytest.raises(TypeError):
        cmd.body["mode"] = "PUSH"  # type: ignore[index]
    verify_command(cmd)  # still the bytes that were signed


# --- signatures ---------------------------------------------------------------------------------


def test_a_signed_command_verifies() -> None:
    verify_command(signed())


@pytest.mark.parametrize(
    "change",
    [
        {"method": "unsubscribe"},
        {"stream_id": "other"},
        {"nonce": 2},
        {"body": {"mode": "PUSH"}},
        {"caller_public_key": bytes(MALLORY.verify_key)},
    ],
)
def test_any_altered_field_breaks_the_signature(change: dict[str, Any]) -> None:
    cmd = signed()
    fields: dict[str, Any] = {
        "method": cmd.method,
        "stream_id": cmd.stream_id,
        "caller_public_key": cmd.caller_public_key,
        "nonce": cmd.nonce,
        "body": cmd.body,
        "signature": cmd.signature,
    }
    fields.update(change)
    with pytest.raises(InvalidSignatureError):
        verify_command(Command(**fields))


def test_a_signature_by_another_key_is_invalid() -> None:
    forged = sign_command(MALLORY, "subscribe", "prices", 1, {"mode": "PULL"})
    impostor = Command("subscribe", "prices", ALICE_PUB, 1, {"mode": "PULL"}, forged.signature)
    with pytest.raises(InvalidSignatureError):
        verify_command(impostor)


def test_a_truncated_signature_is_invalid_signature() -> None:
    cmd = signed()
    with pytest.raises(InvalidSignatureError):
        verify_command(Command(cmd.method, cmd.stream_id, cmd.caller_public_key, 1, cmd.body, cmd.signature[:63]))


def test_sign_command_accepts_a_seed() -> None:
    assert sign_command(b"\x11" * 32, "subscribe", "prices", 1, {"mode": "PULL"}) == signed()


# --- digests ------------------------------------------------------------------------------------


def test_digest_is_sha256_of_the_signing_bytes() -> None:
    cmd = signed()
    assert command_digest(cmd) == hashlib.sha256(cmd.signing_bytes).digest()
    assert command_digest(cmd) == command_digest(signed())
    assert command_digest(cmd) != command_digest(signed(nonce=2))
    assert command_digest(cmd) != command_digest(signed({"mode": "PUSH"}))


# --- JSON form ----------------------------------------------------------------------------------


def test_to_dict_is_json_and_round_trips_bytes_and_floats() -> None:
    cmd = signed({"new_key": b"\xab" * 32, "x": 1.0, "n": 1, "nested": [{"b": b""}]}, method="rotate_publisher_key")
    data = json.loads(json.dumps(cmd.to_dict()))
    assert data["body"]["new_key"] == {"$bytes": "ab" * 32}
    assert data["signature_hex"] == cmd.signature.hex()
    back = Command.from_dict(data)
    assert back == cmd
    assert command_digest(back) == command_digest(cmd)
    verify_command(back)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.pop("nonce"),
        lambda d: d.update(extra=1),
        lambda d: d.update(signature_hex="zz"),
        lambda d: d.update(signature_hex=5),
        lambda d: d.update(caller_public_key_hex="00"),
        lambda d: d.update(nonce="1"),
        lambda d: d.update(method=None),
        lambda d: d.update(body=[]),
        lambda d: d.update(body={"k": {"$bytes": 3}}),
        lambda d: d.update(body={"k": {"$bytes": "xyz"}}),
        lambda d: d.update(body={"k": math.nan}),
    ],
)
def test_from_dict_reports_bad_input_as_invalid_argument(mutate: Any) -> None:
    data = signed().to_dict()
    mutate(data)
    with pytest.raises(InvalidArgumentError):
        Command.from_dict(data)


@PROPERTY
@given(st.one_of(json_values, st.dictionaries(st.text(max_size=8), json_values, max_size=6)))
def test_from_dict_never_leaks_anything_but_watchtower_errors(junk: Any) -> None:
    for data in (junk, {**signed().to_dict(), "body": junk}):
        with contextlib.suppress(WatchtowerError):
            Command.from_dict(data)


# Keys stay shorter than "$bytes", the one reserved spelling.
json_bodies = st.dictionaries(
    st.text(max_size=5),
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-(2**63), 2**63)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=6)
        | st.binary(max_size=6),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(min_size=2, max_size=4), inner, max_size=3),
        max_leaves=12,
    ),
    max_size=5,
)


@PROPERTY
@given(json_bodies, st.integers(1, 2**63 - 1))
def test_json_round_trip_preserves_the_signed_command(body: dict[str, Any], nonce: int) -> None:
    cmd = sign_command(ALICE, "subscribe", "s", nonce, body)
    back = Command.from_dict(json.loads(json.dumps(cmd.to_dict())))
    assert back == cmd
    assert back.signing_bytes == cmd.signing_bytes
    verify_command(back)
