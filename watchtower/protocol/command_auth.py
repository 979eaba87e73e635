"""Who may issue a command: ed25519 caller signatures and the nonce rule (DESIGN §4).

The bytes a caller signs are defined once, by `signed_command.command_signing_bytes`; this module
holds the primitives around them. Because addresses are the hex of the caller's public key,
verification needs no lookup. A nonce is accepted only if it is strictly greater than the
caller's previous one; anything else is NONCE_REPLAYED. A nonce is also bounded above by
`nonce_ceiling`: at most one day ahead of the block clock read as microseconds since the Unix epoch
(docs/nonces.md), so no single command can push a caller's nonce out of its own clock's reach.
"""

from __future__ import annotations

import nacl.exceptions
import nacl.signing

from watchtower.protocol.addresses import address_from_public_key, public_key_from_address
from watchtower.protocol.constants import (
    BLOCK_INTERVAL_MS,
    ED25519_SIGNATURE_BYTES,
    GENESIS_UNIX_MS,
    MAX_WIRE_UINT64,
    NONCE_MAX_AHEAD_US,
)
from watchtower.protocol.errors import (
    InvalidArgumentError,
    InvalidSignatureError,
    MalformedRecordError,
    NonceReplayedError,
)
from watchtower.protocol.validation import require_int


def sign_command_bytes(signing_bytes: bytes, signing_key: nacl.signing.SigningKey) -> bytes:
    """The caller's 64-byte ed25519 signature over `signing_bytes`."""
    return bytes(signing_key.sign(signing_bytes).signature)


def caller_address(signing_key: nacl.signing.SigningKey) -> str:
    """The address that `signing_key` signs as."""
    return address_from_public_key(bytes(signing_key.verify_key))


def verify_command_signature(*, caller: str, signing_bytes: bytes, signature: bytes) -> None:
    """Raise `InvalidSignatureError` unless `signature` is the caller's signature over `signing_bytes`."""
    public_key = public_key_from_address(caller)
    if not isinstance(signature, bytes) or len(signature) != ED25519_SIGNATURE_BYTES:
        raise InvalidSignatureError(f"a command signature is exactly {ED25519_SIGNATURE_BYTES} bytes")
    try:
        nacl.signing.VerifyKey(public_key).verify(signing_bytes, signature)
    except nacl.exceptions.BadSignatureError:
        raise InvalidSignatureError(
            f"the command signature does not verify for caller {caller}; sign the command with "
            f"that account's key (a forged or altered command is rejected)."
        ) from None


def nonce_ceiling(block_height: int) -> int:
    """The largest nonce a command decided at `block_height` may carry.

    The end of that block in microseconds since the Unix epoch, plus `NONCE_MAX_AHEAD_US`, capped
    at the wire range. Pure: the block height is the only clock.
    """
    height = require_int(block_height, "block_height")
    block_end_us = (GENESIS_UNIX_MS + (height + 1) * BLOCK_INTERVAL_MS) * 1000
    return min(block_end_us + NONCE_MAX_AHEAD_US, MAX_WIRE_UINT64)


def check_event_clock(event_block_height: int, now_block_height: int) -> None:
    """Raise MALFORMED_RECORD for an event stamped more than a day after `now_block_height`.

    A fold that has a clock (a worker loading its partitions) calls this before `evolve`: an
    event from the future could carry a nonce under its own (future) ceiling and lock its caller
    out, so it cannot have been written by an honest writer and is quarantined.
    """
    limit = now_block_height + NONCE_MAX_AHEAD_US // (BLOCK_INTERVAL_MS * 1000)
    if event_block_height > limit:
        raise MalformedRecordError(
            f"the event is stamped block {event_block_height}, more than a day after the current block "
            f"{now_block_height}; no writer could have written it"
        )


def check_nonce(last_nonce: int | None, nonce: int, *, block_height: int) -> int:
    """`nonce` if it is strictly greater than the account's `last_nonce` (None: no command yet) and
    at most `nonce_ceiling(block_height)`.

    Raises `NonceReplayedError` naming the smallest acceptable nonce, or `InvalidArgumentError`
    for a nonce too far ahead of the clock.
    """
    n = require_int(nonce, "nonce")
    ceiling = nonce_ceiling(block_height)
    if n > ceiling:
        raise InvalidArgumentError(
            f"nonce {n} is more than a day ahead of the network clock (block {block_height} allows at most "
            f"{ceiling}); sign with a counter or with microseconds since the Unix epoch from an accurate clock",
            details={"nonce": n, "max_nonce": ceiling},
        )
    if last_nonce is not None and n <= last_nonce:
        raise NonceReplayedError(
            f"nonce {n} was already used (the account's last nonce is {last_nonce}); sign the "
            f"command again with nonce {last_nonce + 1} or higher.",
            details={"nonce": n, "last_nonce": last_nonce},
        )
    return n
