"""The key manager's ciphertext receipt: proof that `stream_encrypt` produced an envelope.

A PLATFORM_MANAGED stream accepts only ciphertext the Stream Key Manager sealed. The key manager
signs, with its ed25519 receipt key, the deterministic CBOR of

    {"domain": "watchtower-keymgr-receipt-v1", "stream_id": <text>, "key_epoch": <uint>,
     "payload_hash": <32 bytes: SHA-256 of the envelope>}

and returns the 64-byte signature beside the envelope. A publish carries it in its command body as
``"keymgr_receipt"``; every worker checks it with the deployment's `keymgr_public_key` (genesis
configuration), so no worker needs a secret and a forged envelope, a tampered tag, or a receipt
for another stream, epoch or envelope is refused at publish time with one of the codes CIP-7 maps
for ``publish``: UNAUTHORIZED without a receipt, INVALID_SIGNATURE with one that does not verify.

Pure: no I/O, no clock. Receipts carry no key material (only a hash of the ciphertext).
"""

from __future__ import annotations

import hashlib
from typing import Final

import nacl.exceptions
import nacl.signing

from watchtower.protocol import cbor
from watchtower.protocol.constants import ED25519_PUBLIC_KEY_BYTES, MAX_UINT64
from watchtower.protocol.errors import InvalidArgumentError, InvalidSignatureError, UnauthorizedError
from watchtower.protocol.validation import require_int, require_text

RECEIPT_DOMAIN: Final = "watchtower-keymgr-receipt-v1"
RECEIPT_BYTES: Final = 64
PAYLOAD_HASH_BYTES: Final = 32
# The publish command body field that carries the receipt beside the message's own fields.
RECEIPT_FIELD: Final = "keymgr_receipt"


def envelope_hash(envelope: bytes) -> bytes:
    """SHA-256 of the envelope: the message's payload_hash for an inline CIPHERTEXT payload."""
    if not isinstance(envelope, bytes):
        raise InvalidArgumentError("the envelope must be bytes")
    return hashlib.sha256(envelope).digest()


def receipt_signing_bytes(*, stream_id: str, key_epoch: int, payload_hash: bytes) -> bytes:
    """The deterministic CBOR the key manager signs (module docstring)."""
    if not isinstance(payload_hash, bytes) or len(payload_hash) != PAYLOAD_HASH_BYTES:
        raise InvalidArgumentError(f"payload_hash must be {PAYLOAD_HASH_BYTES} bytes (SHA-256 of the envelope)")
    return cbor.encode(
        {
            "domain": RECEIPT_DOMAIN,
            "stream_id": require_text(stream_id, "stream_id"),
            "key_epoch": require_int(key_epoch, "key_epoch", maximum=MAX_UINT64),
            "payload_hash": payload_hash,
        }
    )


def sign_receipt(signing_key: nacl.signing.SigningKey, *, stream_id: str, key_epoch: int, payload_hash: bytes) -> bytes:
    """The 64-byte receipt for an envelope with `payload_hash` on (`stream_id`, `key_epoch`)."""
    message = receipt_signing_bytes(stream_id=stream_id, key_epoch=key_epoch, payload_hash=payload_hash)
    return bytes(signing_key.sign(message).signature)


def verify_receipt(
    public_key: bytes | None, receipt: object, *, stream_id: str, key_epoch: int, payload_hash: bytes
) -> None:
    """Return if `receipt` is the key manager's signature over this envelope, else the code CIP-7 maps
    for ``publish``: UNAUTHORIZED when there is no receipt to check (none, not 64 bytes, or no key
    manager key in this deployment: this publisher may not put that ciphertext on the stream), and
    INVALID_SIGNATURE when the receipt does not verify (docs/publish-auth.md)."""
    if public_key is None:
        raise UnauthorizedError(
            "this deployment has no key manager public key, so it cannot accept ciphertext for a "
            "PLATFORM_MANAGED stream; its operator sets WATCHTOWER_KEYMGR_PUBLIC_KEY for the stream workers"
        )
    if not isinstance(receipt, bytes) or len(receipt) != RECEIPT_BYTES:
        raise UnauthorizedError(
            f"the ciphertext was not produced by stream_encrypt: a PLATFORM_MANAGED publish carries the key "
            f"manager's {RECEIPT_BYTES}-byte receipt as {RECEIPT_FIELD!r}; encrypt the payload through the key manager"
        )
    message = receipt_signing_bytes(stream_id=stream_id, key_epoch=key_epoch, payload_hash=payload_hash)
    try:
        if len(public_key) != ED25519_PUBLIC_KEY_BYTES:
            raise ValueError("bad key length")
        nacl.signing.VerifyKey(public_key).verify(message, receipt)
    except (nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError, nacl.exceptions.TypeError, ValueError):
        raise InvalidSignatureError(
            "the ciphertext was not produced by stream_encrypt for this stream, key epoch and envelope: its "
            "receipt does not verify under the key manager's public key; encrypt the payload through the key "
            "manager and publish its envelope unchanged"
        ) from None
