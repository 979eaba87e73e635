"""StreamMessage v1: the one CIP-7 message envelope.

Contract: a `StreamMessage` that exists is structurally valid. The constructor (run again by
`dataclasses.replace`) enforces every CIP-7 field rule:

- version is 1; stream_id, kind and content_type are non-empty text (content_type None becomes
  application/json);
- sequence ≥ 1, timestamp, key_epoch and signing_key_id (≥ 1) are integers within the wire range;
- payload_inline is at most 16,384 bytes (else PAYLOAD_TOO_LARGE), payload_hash is 32 bytes and
  publisher_sig 64 bytes;
- PLAINTEXT ⇔ key_epoch is None; CIPHERTEXT carries a key_epoch and at least nonce+tag bytes;
- tag keys are non-empty text, values text, bool or a finite number. Numbers are stored as float,
  because CIP-7 tags are float64 and are signed as float64.

What the constructor does not check is integrity: whether payload_hash is SHA-256 of the payload
and whether the signature verifies. `validate()` adds the hash check; `signing.verify_message`
does both. Keeping the hash out of the constructor lets consumers decode without hashing twice.

Everything else that fails is `InvalidArgumentError`.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from watchtower.protocol.constants import (
    DEFAULT_CONTENT_TYPE,
    ED25519_SIGNATURE_BYTES,
    MAX_INLINE_PAYLOAD_BYTES,
    MAX_WIRE_UINT64,
    MIN_CIPHERTEXT_ENVELOPE_BYTES,
    PAYLOAD_HASH_BYTES,
    STREAM_MESSAGE_VERSION,
)
from watchtower.protocol.enums import PayloadFormat
from watchtower.protocol.errors import InvalidArgumentError, InvalidSignatureError, PayloadTooLargeError
from watchtower.protocol.validation import (
    is_finite_number,
    is_int,
    known_fields,
    require_bytes,
    require_int,
    require_text,
)

TagValue = str | bool | float
"""A tag value: text, bool, or a finite float64 (ints are accepted and stored as float)."""


def payload_hash_of(payload: bytes) -> bytes:
    """SHA-256 of the inline payload, as CIP-7 defines payload_hash."""
    return hashlib.sha256(payload).digest()


def normalize_tags(tags: object) -> MappingProxyType[str, TagValue]:
    """Validated, read-only copy of `tags` with every number as float.

    Raises `InvalidArgumentError` naming the offending key.
    """
    if tags is None:
        return MappingProxyType({})
    if not isinstance(tags, Mapping):
        raise InvalidArgumentError(f"tags must be a map of text to text/bool/number, got {type(tags).__name__}")
    out: dict[str, TagValue] = {}
    for key, value in tags.items():
        if not (type(key) is str and key and key.isascii()):
            if not isinstance(key, str) or not key:
                raise InvalidArgumentError(f"tag keys must be non-empty text, got {key!r}")
            _require_utf8(key, "tag key")
        kind = type(value)
        # Exact-type fast paths first (finite float, ASCII text, bool); bool must never reach
        # the number branch. A float is finite iff value - value is 0 (NaN and ±Inf give NaN).
        if (kind is float and value - value == 0.0) or (kind is str and value.isascii()) or kind is bool:
            out[key] = value
        elif isinstance(value, str):
            _require_utf8(value, f"tags[{key!r}]")
            out[key] = value
        elif is_finite_number(value):
            try:
                out[key] = float(value)
            except OverflowError:
                raise InvalidArgumentError(f"tags[{key!r}] is too large for float64") from None
        else:
            raise InvalidArgumentError(
                f"tags[{key!r}] must be text, bool or a finite number (NaN and ±Inf are not allowed), got {value!r}"
            )
    return MappingProxyType(out)


def _require_utf8(text: str, name: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentError(f"{name} is not valid Unicode (lone surrogate)") from None


def _text(value: object, name: str) -> str:
    if type(value) is str and value and value.isascii():
        return value
    s = require_text(value, name)
    _require_utf8(s, name)
    return s


def _uint(value: object, name: str, minimum: int = 0) -> int:
    if type(value) is int and minimum <= value <= MAX_WIRE_UINT64:
        return value
    return require_int(value, name, minimum=minimum)


def _bytes(value: object, name: str, length: int | None = None) -> bytes:
    if type(value) is bytes and (length is None or len(value) == length):
        return value
    return require_bytes(value, name, length=length)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StreamMessage:
    """A CIP-7 StreamMessage, structurally valid by construction (see the module docstring)."""

    stream_id: str
    sequence: int
    timestamp_unix_ms: int
    kind: str
    payload_inline: bytes
    payload_hash: bytes
    publisher_sig: bytes
    content_type: str = DEFAULT_CONTENT_TYPE
    tags: Mapping[str, TagValue] = dataclasses.field(default_factory=dict)
    payload_format: PayloadFormat = PayloadFormat.PLAINTEXT
    key_epoch: int | None = None
    signing_key_id: int = 1
    version: int = STREAM_MESSAGE_VERSION

    def __post_init__(self) -> None:
        put = object.__setattr__  # frozen: normalised values are written once, here
        version = self.version
        if not (type(version) is int and version == STREAM_MESSAGE_VERSION):
            if not is_int(version) or version != STREAM_MESSAGE_VERSION:
                raise InvalidArgumentError(f"version must be {STREAM_MESSAGE_VERSION} (CIP-7 v1), got {version!r}")
            put(self, "version", int(version))
        put(self, "stream_id", _text(self.stream_id, "stream_id"))
        put(self, "sequence", _uint(self.sequence, "sequence", 1))
        put(self, "timestamp_unix_ms", _uint(self.timestamp_unix_ms, "timestamp_unix_ms"))
        put(self, "kind", _text(self.kind, "kind"))
        content_type = DEFAULT_CONTENT_TYPE if self.content_type is None else self.content_type
        put(self, "content_type", _text(content_type, "content_type"))
        put(self, "tags", normalize_tags(self.tags))
        fmt = self.payload_format
        if type(fmt) is not PayloadFormat:
            try:
                fmt = PayloadFormat(fmt)
            except ValueError:
                raise InvalidArgumentError(f"payload_format must be PLAINTEXT or CIPHERTEXT, got {fmt!r}") from None
            put(self, "payload_format", fmt)
        payload = _bytes(self.payload_inline, "payload_inline")
        if len(payload) > MAX_INLINE_PAYLOAD_BYTES:
            raise PayloadTooLargeError(
                f"payload_inline is {len(payload)} bytes; the limit is {MAX_INLINE_PAYLOAD_BYTES} "
                f"(the whole envelope when encrypted). Split the data into several messages."
            )
        put(self, "payload_inline", payload)
        put(self, "payload_hash", _bytes(self.payload_hash, "payload_hash", PAYLOAD_HASH_BYTES))
        put(self, "publisher_sig", _bytes(self.publisher_sig, "publisher_sig", ED25519_SIGNATURE_BYTES))
        put(self, "signing_key_id", _uint(self.signing_key_id, "signing_key_id", 1))
        if fmt is PayloadFormat.PLAINTEXT:
            if self.key_epoch is not None:
                raise InvalidArgumentError("key_epoch must be null for a PLAINTEXT message")
        else:
            if self.key_epoch is None:
                raise InvalidArgumentError("a CIPHERTEXT message requires key_epoch")
            put(self, "key_epoch", _uint(self.key_epoch, "key_epoch"))
            if len(payload) < MIN_CIPHERTEXT_ENVELOPE_BYTES:
                raise InvalidArgumentError(
                    f"a CIPHERTEXT payload is nonce(24) ‖ ciphertext ‖ tag(16), so at least "
                    f"{MIN_CIPHERTEXT_ENVELOPE_BYTES} bytes; got {len(payload)}"
                )

    def with_signature(self, publisher_sig: bytes) -> StreamMessage:
        """This message with `publisher_sig` replaced (64 bytes), without re-checking other fields.

        Every other field is already valid, so only the signature's shape needs checking; this
        keeps signing from validating the message twice.
        """
        signature = _bytes(publisher_sig, "publisher_sig", ED25519_SIGNATURE_BYTES)
        clone = object.__new__(StreamMessage)
        for name in _FIELD_NAMES:
            object.__setattr__(clone, name, signature if name == "publisher_sig" else getattr(self, name))
        return clone

    def __hash__(self) -> int:
        # Consistent with the generated __eq__ (equal messages share these fields); tags are a
        # read-only mapping and cannot be hashed themselves.
        return hash((self.stream_id, self.sequence, self.payload_hash, self.publisher_sig))

    def validate(self) -> StreamMessage:
        """Full CIP-7 check: the structure (already enforced) plus payload_hash == SHA-256(payload).

        Returns self so it chains; raises `InvalidSignatureError` on a hash mismatch, since the payload
        is then not the one that was signed.
        """
        if payload_hash_of(self.payload_inline) != self.payload_hash:
            raise InvalidSignatureError(
                "payload_hash is not SHA-256(payload_inline): the payload changed after signing. "
                "Discard the message, or re-fetch it from the log."
            )
        return self

    def headers(self) -> dict[str, Any]:
        """The header view the filter DSL evaluates: kind, sequence, timestamp_unix_ms, tags."""
        return headers_of_record(self.to_record())

    def to_record(self) -> dict[str, Any]:
        """Plain dict with every field (bytes stay bytes, enums become text): the Avro record."""
        return {
            "version": self.version,
            "stream_id": self.stream_id,
            "sequence": self.sequence,
            "timestamp_unix_ms": self.timestamp_unix_ms,
            "kind": self.kind,
            "content_type": self.content_type,
            "tags": dict(self.tags),
            "payload_format": str(self.payload_format),
            "payload_inline": self.payload_inline,
            "payload_hash": self.payload_hash,
            "key_epoch": self.key_epoch,
            "signing_key_id": self.signing_key_id,
            "publisher_sig": self.publisher_sig,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> StreamMessage:
        """Inverse of `to_record`; raises `InvalidArgumentError` for missing or unknown fields."""
        return cls(**known_fields(cls, record, "StreamMessage"))

    def to_json_dict(self) -> dict[str, Any]:
        """JSON-safe dict: byte fields become lowercase hex under `*_hex` names."""
        return json_dict_of_record(self.to_record())

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any]) -> StreamMessage:
        """Inverse of `to_json_dict`."""
        if isinstance(data, Mapping) and len(data) == _JSON_KEY_COUNT:
            # The shape `to_json_dict` writes (every publish on the write path): no copies, no
            # field-set bookkeeping. Anything else takes the general path and its messages.
            try:
                fast = _from_exact_json(cls, data)
            except (KeyError, TypeError, ValueError):
                fast = None  # a missing key, or hex that is not: the general path names the field
            if fast is not None:
                return fast
        if not isinstance(data, Mapping):
            # A JSON array or scalar where a message belongs: dict() would raise a bare TypeError.
            raise InvalidArgumentError(f"a message must be a JSON object, got {type(data).__name__}")
        fields = dict(data)
        for name in _BYTE_FIELDS:
            hex_value = fields.pop(f"{name}_hex", None)
            if not isinstance(hex_value, str):
                raise InvalidArgumentError(f"{name}_hex must be a hex string")
            try:
                fields[name] = bytes.fromhex(hex_value)
            except ValueError:
                raise InvalidArgumentError(f"{name}_hex is not valid hex") from None
        return cls.from_record(fields)


_BYTE_FIELDS = ("payload_inline", "payload_hash", "publisher_sig")


def json_dict_of_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON form (`StreamMessage.to_json_dict`) of a message given as its record (`to_record`).

    The read path serves a record it has already decoded, checked and verified once (when it was
    folded, or by the verifying scan) straight from its Avro record with this, instead of building
    the `StreamMessage` again: the same function makes both forms, so they cannot differ.
    """
    out = dict(record)
    for name in _BYTE_FIELDS:
        out[f"{name}_hex"] = out.pop(name).hex()
    return out


def headers_of_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """The filter headers (`StreamMessage.headers`) of a message given as its record."""
    return {"kind": record["kind"], "sequence": record["sequence"],
            "timestamp_unix_ms": record["timestamp_unix_ms"], "tags": record["tags"]}
_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(StreamMessage))
_JSON_KEY_COUNT = len(_FIELD_NAMES)


def _from_exact_json(cls: type[StreamMessage], data: Mapping[str, Any]) -> StreamMessage:
    # 13 keys, each of the 13 names present: exactly `to_json_dict`'s key set. KeyError for a
    # missing one; TypeError/ValueError for hex that is not a hex string.
    payload_hex, hash_hex, sig_hex = data["payload_inline_hex"], data["payload_hash_hex"], data["publisher_sig_hex"]
    if type(payload_hex) is not str or type(hash_hex) is not str or type(sig_hex) is not str:
        raise TypeError("hex fields must be text")
    return cls(
        stream_id=data["stream_id"],
        sequence=data["sequence"],
        timestamp_unix_ms=data["timestamp_unix_ms"],
        kind=data["kind"],
        payload_inline=bytes.fromhex(payload_hex),
        payload_hash=bytes.fromhex(hash_hex),
        publisher_sig=bytes.fromhex(sig_hex),
        content_type=data["content_type"],
        tags=data["tags"],
        payload_format=data["payload_format"],
        key_epoch=data["key_epoch"],
        signing_key_id=data["signing_key_id"],
        version=data["version"],
    )
