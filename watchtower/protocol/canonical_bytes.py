"""Canonical signing bytes of a StreamMessage (DESIGN §7.1): what a publisher's key signs.

The signing bytes are the deterministic CBOR of a map with exactly the 11 CIP-7 keys. Because the
key set is fixed, its bytewise order (by encoded key) is fixed too; it is computed once at import
and the map is then assembled by concatenation, which keeps the verify path within a few
microseconds of raw libsodium. Tag numbers are always float64 (0xfb + 8 bytes), bools are CBOR
true/false and never numbers, and NaN/±Inf are refused.

`message_signing_bytes` encodes a valid StreamMessage; `signing_bytes` validates loose fields as a
StreamMessage would and encodes them; `unsigned_message` is the message those fields make, before
`signing` signs it. Pure: no I/O, no keys.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Final

from watchtower.protocol.cbor import encode_head, encode_text
from watchtower.protocol.constants import STREAM_MESSAGE_VERSION
from watchtower.protocol.enums import PayloadFormat
from watchtower.protocol.errors import InvalidArgumentError
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


def unsigned_message(
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
    """The StreamMessage these fields make, its payload hashed and its signature all zeros: what
    `message_signing_bytes` encodes before a key signs it. Raises what the message rules refuse."""
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
        unsigned_message(
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
