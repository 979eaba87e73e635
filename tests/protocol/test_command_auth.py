"""Command signing bytes, caller signatures and per-account nonces."""

from __future__ import annotations

from typing import Any

import pytest
from protocol_strategies import KEYS

from watchtower.protocol import (
    address_from_public_key,
    caller_address,
    check_nonce,
    command_signing_bytes,
    is_address,
    public_key_from_address,
    sign_command_bytes,
    verify_command_signature,
)
from watchtower.protocol.errors import InvalidArgumentError, InvalidSignatureError, NonceReplayedError

KEY = KEYS[0]
CALLER = caller_address(KEY)


def fields(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "command": "Publish",
        "schema_version": 1,
        "caller": CALLER,
        "nonce": 7,
        "request_id": "r-1",
        "body": b"\x01\x02",
    }
    base.update(overrides)
    return base


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


def test_signing_bytes_are_deterministic_cbor_with_a_domain() -> None:
    data = command_signing_bytes(**fields())
    assert data == command_signing_bytes(**fields())
    assert b"watchtower/command/v1" in data
    assert data[0] == 0xA7  # a map of 7 pairs


@pytest.mark.parametrize(
    "change",
    [{"command": "Subscribe"}, {"schema_version": 2}, {"nonce": 8}, {"request_id": "r-2"}, {"body": b"\x01"}],
)
def test_signature_covers_every_field(change: dict[str, Any]) -> None:
    signature = sign_command_bytes(command_signing_bytes(**fields()), KEY)
    verify_command_signature(caller=CALLER, signing_bytes=command_signing_bytes(**fields()), signature=signature)
    with pytest.raises(InvalidSignatureError):
        verify_command_signature(
            caller=CALLER, signing_bytes=command_signing_bytes(**fields(**change)), signature=signature
        )


def test_a_command_signed_by_someone_else_is_rejected() -> None:
    data = command_signing_bytes(**fields())
    with pytest.raises(InvalidSignatureError, match=CALLER):
        verify_command_signature(caller=CALLER, signing_bytes=data, signature=sign_command_bytes(data, KEYS[1]))
    with pytest.raises(InvalidSignatureError):
        verify_command_signature(caller=CALLER, signing_bytes=data, signature=b"short")


def test_nonces_must_strictly_increase() -> None:
    assert check_nonce(None, 0) == 0
    assert check_nonce(4, 5) == 5
    assert check_nonce(4, 100) == 100
    with pytest.raises(NonceReplayedError, match="nonce 5 or higher") as caught:
        check_nonce(4, 4)
    assert caught.value.details == {"nonce": 4, "last_nonce": 4}
    with pytest.raises(NonceReplayedError):
        check_nonce(4, 1)
    with pytest.raises(InvalidArgumentError):
        check_nonce(None, -1)
