"""Epoch keys, the XChaCha20-Poly1305 envelope and sealed-box delivery (DESIGN §7.7)."""

from __future__ import annotations

from typing import Any

import nacl.public
import pytest
from hypothesis import given
from hypothesis import strategies as st
from protocol_strategies import PROPERTY, vectors_of_type

from watchtower.protocol import (
    decrypt_for_epoch,
    decrypt_with_content_key,
    derive_content_key,
    derive_nonce,
    encrypt_for_epoch,
    envelope_aad,
    open_payload,
    seal_payload,
    unwrap_epoch_key,
    validate_x25519_public_key,
    wrap_epoch_key,
)
from watchtower.protocol.confidential.envelope import hkdf_expand, hkdf_sha256
from watchtower.protocol.errors import (
    DecryptionFailedError,
    InvalidAccountKeyError,
    InvalidArgumentError,
    PayloadTooLargeError,
    WatchtowerError,
)

SEED = bytes(range(32))
CONTEXT: dict[str, Any] = {
    "stream_id": "prices.btc-usd",
    "key_epoch": 2946,
    "sequence": 17,
    "kind": "price_batch",
    "content_type": "application/json",
}


def test_hkdf_matches_rfc5869_test_case_1() -> None:
    okm = hkdf_sha256(
        ikm=bytes.fromhex("0b" * 22),
        salt=bytes.fromhex("000102030405060708090a0b0c"),
        info=bytes.fromhex("f0f1f2f3f4f5f6f7f8f9"),
        length=42,
    )
    assert okm.hex() == ("3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865")
    with pytest.raises(InvalidArgumentError):
        hkdf_expand(b"k" * 32, b"", 255 * 32 + 1)


@pytest.mark.parametrize("vector", vectors_of_type("epoch_envelope"), ids=lambda v: v["id"])
def test_envelope_vectors(vector: dict[str, Any]) -> None:
    inp, expect = vector["input"], vector["expect"]
    seed = bytes.fromhex(inp["master_seed_hex"])
    context = {k: inp[k] for k in CONTEXT}
    plaintext = bytes.fromhex(inp["plaintext_hex"])
    if "error" in expect:
        with pytest.raises(PayloadTooLargeError):
            encrypt_for_epoch(master_seed=seed, actor_nonce=inp["actor_nonce"], plaintext=plaintext, **context)
        return
    key = derive_content_key(seed, inp["stream_id"], inp["key_epoch"])
    assert key.hex() == expect["content_key_hex"]
    assert derive_nonce(key, inp["stream_id"], inp["key_epoch"], inp["actor_nonce"]).hex() == expect["nonce_hex"]
    assert envelope_aad(**context).hex() == expect["aad_hex"]
    envelope = encrypt_for_epoch(master_seed=seed, actor_nonce=inp["actor_nonce"], plaintext=plaintext, **context)
    assert envelope.hex() == expect["envelope_hex"]
    assert decrypt_for_epoch(master_seed=seed, envelope=envelope, **context) == plaintext


@pytest.mark.parametrize("vector", vectors_of_type("decrypt"), ids=lambda v: v["id"])
def test_decrypt_vectors(vector: dict[str, Any]) -> None:
    inp, expect = vector["input"], vector["expect"]
    call = {k: inp[k] for k in CONTEXT} | {
        "master_seed": bytes.fromhex(inp["master_seed_hex"]),
        "envelope": bytes.fromhex(inp["envelope_hex"]),
    }
    if "error" in expect:
        with pytest.raises(WatchtowerError) as caught:
            decrypt_for_epoch(**call)
        assert caught.value.code == expect["error"]
    else:
        assert decrypt_for_epoch(**call).hex() == expect["plaintext_hex"]


def test_envelope_layout_is_nonce_ciphertext_tag() -> None:
    envelope = encrypt_for_epoch(master_seed=SEED, actor_nonce=5, plaintext=b"abc", **CONTEXT)
    key = derive_content_key(SEED, CONTEXT["stream_id"], CONTEXT["key_epoch"])
    assert envelope[:24] == derive_nonce(key, CONTEXT["stream_id"], CONTEXT["key_epoch"], 5)
    assert len(envelope) == 24 + 3 + 16


def test_distinct_actor_nonces_give_distinct_nonces() -> None:
    key = derive_content_key(SEED, "s", 1)
    nonces = {derive_nonce(key, "s", 1, n) for n in range(100)}
    assert len(nonces) == 100


def test_keys_differ_per_stream_and_epoch() -> None:
    assert derive_content_key(SEED, "s", 1) != derive_content_key(SEED, "s", 2)
    assert derive_content_key(SEED, "s", 1) != derive_content_key(SEED, "t", 1)


def test_plaintext_limit_is_16344_bytes() -> None:
    assert len(encrypt_for_epoch(master_seed=SEED, actor_nonce=1, plaintext=bytes(16344), **CONTEXT)) == 16384
    with pytest.raises(PayloadTooLargeError, match="16345 bytes"):
        encrypt_for_epoch(master_seed=SEED, actor_nonce=1, plaintext=bytes(16345), **CONTEXT)


@PROPERTY
@given(st.binary(max_size=2000), st.integers(0, 2**64 - 1), st.data())
def test_seal_open_round_trip_and_any_change_fails(plaintext: bytes, actor_nonce: int, data: st.DataObject) -> None:
    envelope = encrypt_for_epoch(master_seed=SEED, actor_nonce=actor_nonce, plaintext=plaintext, **CONTEXT)
    assert decrypt_for_epoch(master_seed=SEED, envelope=envelope, **CONTEXT) == plaintext
    tampered = bytearray(envelope)
    tampered[data.draw(st.integers(0, len(envelope) - 1))] ^= data.draw(st.integers(1, 255))
    with pytest.raises(DecryptionFailedError):
        decrypt_for_epoch(master_seed=SEED, envelope=bytes(tampered), **CONTEXT)
    field = data.draw(st.sampled_from(sorted(CONTEXT)))
    other = dict(CONTEXT)
    other[field] = other[field] + 1 if isinstance(other[field], int) else other[field] + "x"
    with pytest.raises(DecryptionFailedError):
        decrypt_for_epoch(master_seed=SEED, envelope=envelope, **other)


@pytest.mark.parametrize("envelope", [b"", bytes(39), "text"])
def test_short_or_mistyped_envelopes_fail_to_open(envelope: Any) -> None:
    key = derive_content_key(SEED, "s", 1)
    with pytest.raises(DecryptionFailedError):
        open_payload(content_key=key, aad=b"", envelope=envelope)


def test_wrong_key_fails_without_leaking_it() -> None:
    envelope = encrypt_for_epoch(master_seed=SEED, actor_nonce=1, plaintext=b"secret", **CONTEXT)
    wrong = derive_content_key(bytes(32), CONTEXT["stream_id"], CONTEXT["key_epoch"])
    with pytest.raises(DecryptionFailedError) as caught:
        decrypt_with_content_key(content_key=wrong, envelope=envelope, **CONTEXT)
    text = str(caught.value.to_dict())
    assert wrong.hex() not in text
    assert derive_content_key(SEED, CONTEXT["stream_id"], CONTEXT["key_epoch"]).hex() not in text


def test_argument_checks() -> None:
    with pytest.raises(InvalidArgumentError, match="master seed"):
        derive_content_key(b"short", "s", 1)
    with pytest.raises(InvalidArgumentError):
        derive_nonce(b"k" * 31, "s", 1, 1)
    with pytest.raises(InvalidArgumentError):
        seal_payload(content_key=b"k" * 32, nonce=b"n" * 23, aad=b"", plaintext=b"")


def test_epoch_keys_travel_as_sealed_boxes() -> None:
    account = nacl.public.PrivateKey.generate()
    key = derive_content_key(SEED, "s", 1)
    sealed = wrap_epoch_key(key, bytes(account.public_key))
    assert len(sealed) == 32 + 48
    assert unwrap_epoch_key(sealed, bytes(account)) == key
    with pytest.raises(DecryptionFailedError):
        unwrap_epoch_key(sealed, bytes(nacl.public.PrivateKey.generate()))
    with pytest.raises(DecryptionFailedError):
        unwrap_epoch_key(sealed[:-1], bytes(account))


@pytest.mark.parametrize(
    "public_key",
    [
        bytes(32),  # the identity point
        bytes([1]) + bytes(31),  # order-1 point u=1
        bytes.fromhex("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800"),  # order 8
        bytes(31),
        "00" * 32,
    ],
)
def test_unusable_account_keys_are_refused(public_key: Any) -> None:
    with pytest.raises(InvalidAccountKeyError):
        validate_x25519_public_key(public_key)
    with pytest.raises(InvalidAccountKeyError):
        wrap_epoch_key(bytes(32), public_key)


def test_a_real_key_is_accepted() -> None:
    public = bytes(nacl.public.PrivateKey.generate().public_key)
    assert validate_x25519_public_key(public) == public
