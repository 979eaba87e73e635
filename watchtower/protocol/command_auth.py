"""Who may issue a command: command signatures and per-account nonces (DESIGN §4).

Every command carries the caller's address, a per-account nonce, a request id and an ed25519
signature by the caller over the *command signing bytes*:

    deterministic CBOR of {"domain": "watchtower/command/v1", "command": <name>,
                           "schema_version": <int>, "caller": <address>, "nonce": <int>,
                           "request_id": <text>, "body": <bytes>}

where `body` is the method body already serialized by the wire codec (its Avro bytes). Signing
the serialized body rather than a Python dict means the bytes cannot drift between what the
client signed and what the agent decodes (e.g. a tag 12 that Avro hands back as 12.0).

Because addresses are the hex of the caller's public key, verification needs no lookup.
A nonce is accepted only if it is strictly greater than the account's previous one; anything
else is NONCE_REPLAYED.
"""

from __future__ import annotations

from typing import Final

import nacl.exceptions
import nacl.signing

from watchtower.protocol import cbor
from watchtower.protocol.addresses import address_from_public_key, public_key_from_address, require_address
from watchtower.protocol.constants import ED25519_SIGNATURE_BYTES
from watchtower.protocol.errors import InvalidSignatureError, NonceReplayedError
from watchtower.protocol.validation import require_bytes, require_int, require_text

COMMAND_DOMAIN: Final = "watchtower/command/v1"


def command_signing_bytes(
    *, command: str, schema_version: int, caller: str, nonce: int, request_id: str, body: bytes
) -> bytes:
    """The bytes a caller signs for a command (see the module docstring)."""
    return cbor.encode(
        {
            "domain": COMMAND_DOMAIN,
            "command": require_text(command, "command"),
            "schema_version": require_int(schema_version, "schema_version", minimum=1),
            "caller": require_address(caller, "caller"),
            "nonce": require_int(nonce, "nonce"),
            "request_id": require_text(request_id, "request_id"),
            "body": require_bytes(body, "body"),
        }
    )


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


def check_nonce(last_nonce: int | None, nonce: int) -> int:
    """`nonce` if it is strictly greater than the account's `last_nonce` (None: no command yet).

    Raises `NonceReplayedError` naming the smallest acceptable nonce.
    """
    n = require_int(nonce, "nonce")
    if last_nonce is not None and n <= last_nonce:
        raise NonceReplayedError(
            f"nonce {n} was already used (the account's last nonce is {last_nonce}); sign the "
            f"command again with nonce {last_nonce + 1} or higher.",
            details={"nonce": n, "last_nonce": last_nonce},
        )
    return n
