"""Canonical signing bytes (DESIGN §7.1), ed25519 signing and verification (§7.2).

The signing bytes are the deterministic CBOR of a map with exactly the 11 CIP-7 keys. Because the
key set is fixed, its bytewise order (by encoded key) is fixed too; it is computed once at import
and the map is then assembled by concatenation, which keeps the verify path within a few
microseconds of raw libsodium. Tag numbers are always float64 (0xfb + 8 bytes), bools are CBOR
true/false and never numbers, and NaN/±Inf are refused.

`verify_message` is the consumer-side check: recompute payload_hash from the payload, compare it
with the stored one, rebuild the bytes from the recomputed hash, and verify the signature.
`verify_with_schedule` additionally resolves the key in force at the message's sequence.
"""

from __future__ import annotations

import functools
import hashlib
import struct
from collections.abc import Mapping
from typing import Final

import nacl.exceptions
import nacl.signing

from watchtower.protocol.cbor import encode_head, encode_text
from watchtower.protocol.constants import ED25519_PUBLIC_KEY_BYTES, ED25519_SEED_BYTES, STREAM_MESSAGE_VERSION
from watchtower.protocol.enums import PayloadFormat
from watchtower.protocol.errors import InvalidArgumentError, InvalidSignatureError
from watchtower.protocol.stream.key_schedule import KeySchedule
from watchtower.protocol.stream.message import StreamMessage, TagValue, payload_hash_of

SIGNING_KEYS: Final = (
    "stream_id",
    "version",
    "sequence",
    "timestamp_unix_ms",
    "kind",
    "content_type",
    "tags",
    "payload_format",
    "payload_hash",
    "key_epoch",
    "signing_key_id",
)
"""The 11 keys of the signing map, in CIP-7's listing order (not the encoded order)."""

# Deterministic CBOR orders map keys by their encoded bytes: shorter keys first, then bytewise.
_ENCODED_ORDER: Final = tuple(sorted(SIGNING_KEYS, key=lambda k: encode_text(k)))
_EXPECTED_ORDER: Final = (
    "kind",
    "tags",
    "version",
    "sequence",
    "key_epoch",
    "stream_id",
    "content_type",
    "payload_hash",
    "payload_format",
    "signing_key_id",
    "timestamp_unix_ms",
)
if _ENCODED_ORDER != _EXPECTED_ORDER:  # pragma: no cover - guards the hand-unrolled builder below
    raise RuntimeError(f"signing key order changed: {_ENCODED_ORDER}")

_MAP11: Final = encode_head(5, len(SIGNING_KEYS))
_K_KIND, _K_TAGS, _K_VERSION, _K_SEQUENCE, _K_KEY_EPOCH, _K_STREAM_ID = (encode_text(k) for k in _EXPECTED_ORDER[:6])
_K_CONTENT_TYPE, _K_PAYLOAD_HASH, _K_PAYLOAD_FORMAT, _K_SIGNING_KEY_ID, _K_TIMESTAMP = (
    encode_text(k) for k in _EXPECTED_ORDER[6:]
)
_EMPTY_MAP: Final = b"\xa0"
_NULL: Final = b"\xf6"
_TRUE: Final = b"\xf5"
_FALSE: Final = b"\xf4"
_HASH_HEAD: Final = encode_head(2, 32)
_pack_f64 = struct.Struct(">d").pack
_pack_u8 = struct.Struct(">BB").pack
_pack_u16 = struct.Struct(">BH").pack
_pack_u32 = struct.Struct(">BI").pack
_pack_u64 = struct.Struct(">BQ").pack
_SMALL_UINTS: Final = tuple(bytes((n,)) for n in range(24))

# Stream ids, kinds, content types, formats and tag keys repeat on every message of a stream, so
# their encodings are memoised. Only short strings are kept and the table is dropped when full,
# which bounds its memory without any bookkeeping on the hot path.
_TEXT_CACHE: dict[str, bytes] = {}
_TEXT_CACHE_MAX_ENTRIES: Final = 16_384
_TEXT_CACHE_MAX_CHARS: Final = 64


def _text(s: str) -> bytes:
    encoded = _TEXT_CACHE.get(s)
    if encoded is None:
        encoded = encode_text(s)
        if len(s) <= _TEXT_CACHE_MAX_CHARS:
            if len(_TEXT_CACHE) >= _TEXT_CACHE_MAX_ENTRIES:
                _TEXT_CACHE.clear()
            _TEXT_CACHE[s] = encoded
    return encoded


def _uint(n: int) -> bytes:
    if n < 24:
        return _SMALL_UINTS[n]
    if n < 0x100:
        return _pack_u8(0x18, n)
    if n < 0x10000:
        return _pack_u16(0x19, n)
    if n < 0x1_0000_0000:
        return _pack_u32(0x1A, n)
    return _pack_u64(0x1B, n)


def _tag_value(value: object) -> bytes:
    """CIP-7 tag value encoding: text, CBOR bool, or float64 for every finite number."""
    if value is True:
        return _TRUE
    if value is False:
        return _FALSE
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:
            raise InvalidArgumentError(f"tag number {value!r} does not fit in float64") from None
        if number - number != 0.0:  # NaN and ±Inf (inf - inf is NaN)
            raise InvalidArgumentError(f"tag number {value!r} is not finite; NaN and ±Inf cannot be signed")
        return b"\xfb" + _pack_f64(number)
    kind = type(value).__name__
    raise InvalidArgumentError(f"tag values must be text, bool or a finite number, got {kind}")


def _encode_tags(tags: Mapping[str, TagValue]) -> bytes:
    """The `tags` value of the signing map: a deterministic CBOR map, keys sorted by encoding.

    Precondition: keys are non-empty text (StreamMessage guarantees it). Keys of one mapping are
    distinct and UTF-8 is injective, so encoded keys never tie and sorting the pairs is enough.
    """
    n = len(tags)
    if n == 0:
        return _EMPTY_MAP
    text = _TEXT_CACHE.get
    items = []
    for key, value in tags.items():
        kind = type(value)
        if kind is float and value - value == 0.0:  # type: ignore[operator]
            encoded = b"\xfb" + _pack_f64(value)
        elif kind is str:
            encoded = text(value) or _text(value)  # type: ignore[arg-type]
        else:
            encoded = _tag_value(value)
        items.append((text(key) or _text(key), encoded))
    if n > 1:
        items.sort()
    head = bytes((0xA0 | n,)) if n < 24 else encode_head(5, n)
    return head + b"".join([k + v for k, v in items])


_MAP_AND_KIND: Final = _MAP11 + _K_KIND


def message_signing_bytes(msg: StreamMessage, *, payload_hash: bytes | None = None) -> bytes:
    """The canonical signing bytes of `msg` (with `payload_hash` substituted when given).

    Hand-unrolled in encoded-key order; `msg` is already valid, so no field is re-checked.
    """
    text = _TEXT_CACHE.get
    key_epoch = msg.key_epoch
    return b"".join(
        (
            _MAP_AND_KIND,
            text(msg.kind) or _text(msg.kind),
            _K_TAGS,
            _encode_tags(msg.tags),
            _K_VERSION,
            _uint(msg.version),
            _K_SEQUENCE,
            _uint(msg.sequence),
            _K_KEY_EPOCH,
            _NULL if key_epoch is None else _uint(key_epoch),
            _K_STREAM_ID,
            text(msg.stream_id) or _text(msg.stream_id),
            _K_CONTENT_TYPE,
            text(msg.content_type) or _text(msg.content_type),
            _K_PAYLOAD_HASH,
            _HASH_HEAD,
            msg.payload_hash if payload_hash is None else payload_hash,
            _K_PAYLOAD_FORMAT,
            text(msg.payload_format) or _text(msg.payload_format),
            _K_SIGNING_KEY_ID,
            _uint(msg.signing_key_id),
            _K_TIMESTAMP,
            _uint(msg.timestamp_unix_ms),
        )
    )


_UNSIGNED: Final = bytes(64)


def _draft(
    *,
    stream_id: str,
    sequence: int,
    timestamp_unix_ms: int,
    kind: str,
    payload: bytes,
    content_type: str | None,
    tags: Mapping[str, TagValue] | None,
    payload_format: PayloadFormat | str,
    key_epoch: int | None,
    signing_key_id: int,
    version: int,
) -> StreamMessage:
    payload = bytes(payload) if isinstance(payload, bytearray | memoryview) else payload
    if not isinstance(payload, bytes):
        raise InvalidArgumentError(f"payload must be bytes, got {type(payload).__name__}")
    return StreamMessage(
        stream_id=stream_id,
        sequence=sequence,
        timestamp_unix_ms=timestamp_unix_ms,
        kind=kind,
        content_type=content_type,  # type: ignore[arg-type]  # None means the CIP-7 default
        tags=tags if tags is not None else {},
        payload_format=payload_format,  # type: ignore[arg-type]  # parsed by StreamMessage
        payload_inline=payload,
        payload_hash=payload_hash_of(payload),
        key_epoch=key_epoch,
        signing_key_id=signing_key_id,
        version=version,
        publisher_sig=_UNSIGNED,
    )


def signing_bytes(
    *,
    stream_id: str,
    sequence: int,
    timestamp_unix_ms: int,
    kind: str,
    payload: bytes,
    content_type: str | None = None,
    tags: Mapping[str, TagValue] | None = None,
    payload_format: PayloadFormat | str = PayloadFormat.PLAINTEXT,
    key_epoch: int | None = None,
    signing_key_id: int = 1,
    version: int = STREAM_MESSAGE_VERSION,
) -> bytes:
    """Canonical signing bytes for the given fields, validating them as a StreamMessage would."""
    return message_signing_bytes(
        _draft(
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
    )


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
    draft = _draft(
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
