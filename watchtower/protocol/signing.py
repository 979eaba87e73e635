"""ed25519 signing and verification of StreamMessages (DESIGN §7.2-7.3).

`sign_message` builds, hashes and signs a message over its canonical signing bytes
(`canonical_bytes`, §7.1). `verify_message` is the consumer-side check: recompute payload_hash
from the payload, compare it with the stored one, rebuild the bytes from the recomputed hash, and
verify the signature. `verify_with_schedule` additionally resolves the key in force at the
message's sequence. Pure: no I/O.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping

import nacl.exceptions
import nacl.signing

from watchtower.protocol.canonical_bytes import message_signing_bytes, unsigned_message
from watchtower.protocol.constants import ED25519_PUBLIC_KEY_BYTES, ED25519_SEED_BYTES, STREAM_MESSAGE_VERSION
from watchtower.protocol.enums import PayloadFormat
from watchtower.protocol.errors import InvalidArgumentError, InvalidSignatureError
from watchtower.protocol.stream.key_schedule import KeySchedule
from watchtower.protocol.stream.message import StreamMessage, TagValue


def signing_key_from_seed(seed: bytes) -> nacl.signing.SigningKey:
    """An ed25519 signing key from its 32-byte seed."""
    if not isinstance(seed, bytes) or len(seed) != ED25519_SEED_BYTES:
        raise InvalidArgumentError(f"an ed25519 seed is exactly {ED25519_SEED_BYTES} bytes")
    return nacl.signing.SigningKey(seed)


def public_key_of(signing_key: nacl.signing.SigningKey) -> bytes:
    """The 32-byte ed25519 public key of `signing_key`."""
    return bytes(signing_key.verify_key)


def sign_message(
    *,
    stream_id: str,
    sequence: int,
    timestamp_unix_ms: int,
    kind: str,
    payload: bytes,
    signing_key: nacl.signing.SigningKey | bytes,
    content_type: str | None = None,
    tags: Mapping[str, TagValue] | None = None,
    payload_format: PayloadFormat | str = PayloadFormat.PLAINTEXT,
    key_epoch: int | None = None,
    signing_key_id: int = 1,
    version: int = STREAM_MESSAGE_VERSION,
) -> StreamMessage:
    """Build, hash and sign a StreamMessage (CIP-7 "Canonical Hashing and Signing" steps 1-5).

    `signing_key` is a SigningKey or its 32-byte seed. `content_type` None means application/json.
    Raises `InvalidArgumentError` / `PayloadTooLargeError` for fields the message rules refuse.
    """
    key = signing_key if isinstance(signing_key, nacl.signing.SigningKey) else signing_key_from_seed(signing_key)
    draft = unsigned_message(
        stream_id=stream_id,
        sequence=sequence,
        timestamp_unix_ms=timestamp_unix_ms,
        kind=kind,
        payload=payload,
        content_type=content_type,
        tags=tags,
        payload_format=payload_format,
        key_epoch=key_epoch,
        signing_key_id=signing_key_id,
        version=version,
    )
    signature = key.sign(message_signing_bytes(draft)).signature
    return draft.with_signature(bytes(signature))


@functools.lru_cache(maxsize=4096)
def _verify_key(public_key: bytes) -> nacl.signing.VerifyKey:
    # Constructing a VerifyKey validates the length once; consumers see few distinct keys.
    return nacl.signing.VerifyKey(public_key)


def _checked_verify_key(public_key: bytes) -> nacl.signing.VerifyKey:
    if type(public_key) is not bytes or len(public_key) != ED25519_PUBLIC_KEY_BYTES:
        raise InvalidArgumentError(f"an ed25519 public key is exactly {ED25519_PUBLIC_KEY_BYTES} bytes")
    return _verify_key(public_key)


def verify_message(msg: StreamMessage, public_key: bytes) -> bool:
    """True iff `msg` is intact and signed by `public_key` (DESIGN §7.2).

    Recomputes payload_hash, requires it to equal the stored one, rebuilds the signing bytes and
    verifies `publisher_sig`. Raises `InvalidArgumentError` only for a malformed `public_key`.
    """
    verify_key = _checked_verify_key(public_key)
    payload_hash = hashlib.sha256(msg.payload_inline).digest()
    if payload_hash != msg.payload_hash:
        return False
    try:
        verify_key.verify(message_signing_bytes(msg, payload_hash=payload_hash), msg.publisher_sig)
    except nacl.exceptions.BadSignatureError:
        return False
    return True


def verify_message_or_raise(msg: StreamMessage, public_key: bytes) -> None:
    """`verify_message`, raising `InvalidSignatureError` (naming stream and sequence) when it fails."""
    if not verify_message(msg, public_key):
        raise _bad_signature(msg)


def verify_with_schedule(msg: StreamMessage, schedule: KeySchedule) -> bool:
    """Verify `msg` against the key-schedule entry in force at its sequence (DESIGN §7.2-7.3).

    False when the message names another signing_key_id than the one in force, or when the
    signature does not verify under that entry's key.
    """
    entry = schedule.key_at_sequence(msg.sequence)
    if entry.signing_key_id != msg.signing_key_id:
        return False
    return verify_message(msg, entry.public_key)


def publish_digest(signing_bytes: bytes, publisher_sig: bytes) -> bytes:
    """SHA-256 of a message's signing bytes followed by its signature: what identifies a publish.

    Equal digests mean the same signed fields (payload_hash included) and the same signature, so
    an exact retry of a publish is recognised without keeping the message.
    """
    return hashlib.sha256(signing_bytes + publisher_sig).digest()


def verify_signing_bytes_with_schedule_or_raise(
    msg: StreamMessage, signing_bytes: bytes, schedule: KeySchedule
) -> None:
    """Verify `msg.publisher_sig` over `signing_bytes` (already built from `msg`, whose payload
    hash the caller has checked) under the key in force at `msg.sequence`.

    The write path builds the bytes once for both the signature and `publish_digest`; raises
    `InvalidSignatureError` as `verify_with_schedule_or_raise` does.
    """
    entry = schedule.key_at_sequence(msg.sequence)
    if entry.signing_key_id != msg.signing_key_id:
        raise _wrong_key_id(msg, entry.signing_key_id, entry.effective_sequence)
    try:
        _checked_verify_key(entry.public_key).verify(signing_bytes, msg.publisher_sig)
    except nacl.exceptions.BadSignatureError:
        raise _bad_signature(msg) from None


def _wrong_key_id(msg: StreamMessage, key_id: int, effective_sequence: int) -> InvalidSignatureError:
    return InvalidSignatureError(
        f"message {msg.stream_id}#{msg.sequence} claims signing key {msg.signing_key_id}, but "
        f"key {key_id} is in force from sequence {effective_sequence}; "
        f"re-sign with the active publisher key."
    )


def _bad_signature(msg: StreamMessage) -> InvalidSignatureError:
    return InvalidSignatureError(
        f"message {msg.stream_id}#{msg.sequence} does not verify under signing key "
        f"{msg.signing_key_id}: the payload or a signed field was altered, or it was signed "
        f"with another key. Discard it and re-fetch from the log."
    )


def verify_with_schedule_or_raise(msg: StreamMessage, schedule: KeySchedule) -> None:
    """`verify_with_schedule`, raising `InvalidSignatureError` with the key id in force."""
    entry = schedule.key_at_sequence(msg.sequence)
    if entry.signing_key_id != msg.signing_key_id:
        raise _wrong_key_id(msg, entry.signing_key_id, entry.effective_sequence)
    verify_message_or_raise(msg, entry.public_key)
