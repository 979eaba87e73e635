"""Caller signatures, addresses and the nonce rule (the signing bytes are in test_signed_command)."""

from __future__ import annotations

import pytest
from protocol_strategies import KEYS

from watchtower.protocol import (
    address_from_public_key,
    caller_address,
    check_nonce,
    is_address,
    public_key_from_address,
    sign_command_bytes,
    verify_command_signature,
)
from watchtower.protocol.command_auth import check_event_clock, nonce_ceiling
from watchtower.protocol.constants import BLOCK_INTERVAL_MS, GENESIS_UNIX_MS, MAX_WIRE_UINT64, NONCE_MAX_AHEAD_US
from watchtower.protocol.errors import (
    InvalidArgumentError,
    InvalidSignatureError,
    MalformedRecordError,
    NonceReplayedError,
)
from watchtower.protocol.signed_command import command_signing_bytes

KEY = KEYS[0]
CALLER = caller_address(KEY)


def signing_bytes(nonce: int = 7) -> bytes:
    return command_signing_bytes("publish", "prices", bytes(KEY.verify_key), nonce, {"a": 1})


def test_addresses_are_hex_public_keys() -> None:
    public = bytes(KEY.verify_key)
    assert "0x" + public.hex() == CALLER
    assert is_address(CALLER)
    assert not is_address(CALLER.upper())
    assert not is_address("0x1234")
    assert public_key_from_address(CALLER) == public
    assert address_from_public_key(public) == CALLER
    with pytest.raises(InvalidArgumentError):
        public_key_from_address("alice")


def test_signature_binds_the_bytes_it_signed() -> None:
    signature = sign_command_bytes(signing_bytes(), KEY)
    verify_command_signature(caller=CALLER, signing_bytes=signing_bytes(), signature=signature)
    with pytest.raises(InvalidSignatureError):
        verify_command_signature(caller=CALLER, signing_bytes=signing_bytes(nonce=8), signature=signature)


def test_a_command_signed_by_someone_else_is_rejected() -> None:
    data = signing_bytes()
    with pytest.raises(InvalidSignatureError, match=CALLER):
        verify_command_signature(caller=CALLER, signing_bytes=data, signature=sign_command_bytes(data, KEYS[1]))
    with pytest.raises(InvalidSignatureError):
        verify_command_signature(caller=CALLER, signing_bytes=data, signature=b"short")


def test_nonces_must_strictly_increase() -> None:
    assert check_nonce(None, 0, block_height=0) == 0
    assert check_nonce(4, 5, block_height=0) == 5
    assert check_nonce(4, 100, block_height=0) == 100
    with pytest.raises(NonceReplayedError, match="nonce 5 or higher") as caught:
        check_nonce(4, 4, block_height=0)
    assert caught.value.details == {"nonce": 4, "last_nonce": 4}
    with pytest.raises(NonceReplayedError):
        check_nonce(4, 1, block_height=0)
    with pytest.raises(InvalidArgumentError):
        check_nonce(None, -1, block_height=0)


def test_a_nonce_at_most_a_day_ahead_of_the_block_clock_is_accepted() -> None:
    height = 1_000_000
    now_us = (GENESIS_UNIX_MS + (height + 1) * BLOCK_INTERVAL_MS) * 1000
    assert nonce_ceiling(height) == now_us + NONCE_MAX_AHEAD_US
    # The SDK's clock nonces (microseconds) and plain counters both sit far below the ceiling.
    assert check_nonce(None, now_us, block_height=height) == now_us
    assert check_nonce(None, 1, block_height=height) == 1
    assert check_nonce(None, nonce_ceiling(height), block_height=height) == nonce_ceiling(height)


def test_a_nonce_more_than_a_day_ahead_is_refused_so_it_cannot_lock_the_caller_out() -> None:
    height = 1_000_000
    with pytest.raises(InvalidArgumentError, match="ahead of the network clock") as caught:
        check_nonce(None, nonce_ceiling(height) + 1, block_height=height)
    assert caught.value.code == "INVALID_ARGUMENT"
    assert caught.value.details == {"nonce": nonce_ceiling(height) + 1, "max_nonce": nonce_ceiling(height)}
    with pytest.raises(InvalidArgumentError):
        check_nonce(None, 2**62, block_height=height)


def test_the_nonce_ceiling_never_leaves_the_wire_range() -> None:
    assert nonce_ceiling(2**62) == MAX_WIRE_UINT64


def test_an_event_from_more_than_a_day_in_the_future_is_malformed() -> None:
    day = NONCE_MAX_AHEAD_US // (BLOCK_INTERVAL_MS * 1000)
    check_event_clock(1_000 + day, 1_000)
    check_event_clock(10, 1_000)
    with pytest.raises(MalformedRecordError, match="more than a day after"):
        check_event_clock(1_001 + day, 1_000)
