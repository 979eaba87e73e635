"""Account and actor addresses.

An address is "0x" followed by the 64 lowercase hex digits of the holder's ed25519 public key.
Addresses are therefore self-certifying: a signed command is checked against its caller address
with no lookup, and an actor's address is simply its own key's.
"""

from __future__ import annotations

import re
from typing import Final

from watchtower.protocol.constants import ED25519_PUBLIC_KEY_BYTES
from watchtower.protocol.errors import InvalidArgumentError
from watchtower.protocol.validation import require_bytes

_ADDRESS_RE: Final = re.compile(r"0x[0-9a-f]{64}")


def is_address(value: object) -> bool:
    """True when `value` is a Watchtower address: "0x" + 64 lowercase hex digits."""
    return isinstance(value, str) and _ADDRESS_RE.fullmatch(value) is not None


def require_address(value: object, name: str) -> str:
    """`value` as an address (see `address_from_public_key`), else InvalidArgumentError."""
    if not is_address(value):
        raise InvalidArgumentError(
            f"{name} must be an address: '0x' followed by the 64 lowercase hex digits of an ed25519 public key"
        )
    return str(value)


def address_from_public_key(public_key: bytes) -> str:
    """The address of an account or actor: "0x" + hex of its 32-byte ed25519 public key.

    Addresses are self-certifying: a command's signature can be checked against its caller
    address without any lookup.
    """
    raw = require_bytes(public_key, "public_key", length=ED25519_PUBLIC_KEY_BYTES)
    return "0x" + raw.hex()


def public_key_from_address(address: str) -> bytes:
    """The ed25519 public key an address names (inverse of `address_from_public_key`)."""
    return bytes.fromhex(require_address(address, "address")[2:])
