"""Who may issue a command: ed25519 caller signatures and the nonce rule (DESIGN §4).

The bytes a caller signs are defined once, by `signed_command.command_signing_bytes`; this module
holds the primitives around them. Because addresses are the hex of the caller's public key,
verification needs no lookup. A nonce is accepted only if it is strictly greater than the
caller's previous one; anything else is NONCE_REPLAYED.
"""

from __future__ import annotations

import nacl.exceptions
import nacl.signing

from watchtower.protocol.addresses import address_from_public_key, public_key_from_address
from watchtower.protocol.constants import ED25519_SIGNATURE_BYTES
from watchtower.protocol.errors import InvalidSignatureError, NonceReplayedError
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
