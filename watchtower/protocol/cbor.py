"""A small deterministic CBOR encoder (RFC 8949 §4.2.1, "core deterministic encoding").

Rules it follows:
- integers, lengths and tags use the shortest head;
- map keys are ordered bytewise by their *encoded* bytes (so shorter text keys sort first, which
  is not Python's `str` order);
- no indefinite lengths;
- plain floats use the shortest of float16/32/64 that holds the value exactly (§4.2.2 preferred
  serialization), NaN is the canonical 0xf97e00.

`Float64(x)` forces the 9-byte float64 form. CIP-7 tag numbers need it: they are always float64,
never shortened (DESIGN §7.1), which is exactly what `cbor2`'s canonical mode gets wrong.

Supported Python types: None, bool, int (−2**64 .. 2**64−1), float, Float64, str, bytes-like,
list/tuple and Mapping. Anything else raises `InvalidArgumentError`.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from typing import Final

from watchtower.protocol.errors import InvalidArgumentError

_MAJOR_UINT: Final = 0
_MAJOR_NEGINT: Final = 1
_MAJOR_BYTES: Final = 2
_MAJOR_TEXT: Final = 3
_MAJOR_ARRAY: Final = 4
_MAJOR_MAP: Final = 5

FALSE: Final = b"\xf4"
TRUE: Final = b"\xf5"
NULL: Final = b"\xf6"
_CANONICAL_NAN: Final = b"\xf9\x7e\x00"

_pack_f64 = struct.Struct(">d").pack
_pack_f32 = struct.Struct(">f").pack
_pack_f16 = struct.Struct(">e").pack
_unpack_f32 = struct.Struct(">f").unpack
_unpack_f16 = struct.Struct(">e").unpack


class Float64(float):
    """A float that always encodes as CBOR float64 (0xfb + 8 bytes), never shortened."""

    __slots__ = ()


def encode_head(major: int, n: int) -> bytes:
    """The shortest head for major type `major` carrying argument `n` (0 ≤ n < 2**64)."""
    mt = major << 5
    if n < 24:
        return bytes((mt | n,))
    if n < 0x100:
        return bytes((mt | 24, n))
    if n < 0x10000:
        return bytes((mt | 25,)) + n.to_bytes(2, "big")
    if n < 0x1_0000_0000:
        return bytes((mt | 26,)) + n.to_bytes(4, "big")
    if n < 0x1_0000_0000_0000_0000:
        return bytes((mt | 27,)) + n.to_bytes(8, "big")
    raise InvalidArgumentError(f"integer {n} does not fit in a CBOR head (max 2**64-1)")


def encode_int(n: int) -> bytes:
    """Shortest-form CBOR integer (major 0 or 1)."""
    if n >= 0:
        return encode_head(_MAJOR_UINT, n)
    return encode_head(_MAJOR_NEGINT, -1 - n)


def encode_text(s: str) -> bytes:
    """CBOR text string (major 3) of `s` as UTF-8."""
    try:
        raw = s.encode("utf-8")
    except UnicodeEncodeError as exc:
        # Lone surrogates cannot be UTF-8; they would make the bytes implementation-defined.
        raise InvalidArgumentError(f"text is not valid Unicode: {exc.reason}") from None
    return encode_head(_MAJOR_TEXT, len(raw)) + raw


def encode_bytes(b: bytes | bytearray | memoryview) -> bytes:
    """CBOR byte string (major 2)."""
    raw = bytes(b)
    return encode_head(_MAJOR_BYTES, len(raw)) + raw


def encode_float64(x: float) -> bytes:
    """CBOR float64: 0xfb followed by the IEEE-754 binary64 bytes, big-endian."""
    return b"\xfb" + _pack_f64(x)


def encode_float_preferred(x: float) -> bytes:
    """The shortest IEEE-754 form that round-trips `x` exactly (RFC 8949 §4.2.2)."""
    if math.isnan(x):
        return _CANONICAL_NAN
    try:
        half = _pack_f16(x)
        if _unpack_f16(half)[0] == x:
            return b"\xf9" + half
    except OverflowError:
        pass
    try:
        single = _pack_f32(x)
        if _unpack_f32(single)[0] == x:
            return b"\xfa" + single
    except OverflowError:
        pass
    return encode_float64(x)


def encode_map_items(items: list[tuple[bytes, bytes]]) -> bytes:
    """A map from already-encoded (key, value) pairs, sorted bytewise by encoded key.

    Raises `InvalidArgumentError` when two keys encode identically (a map must not repeat a key).
    """
    items.sort(key=_first)
    for i in range(1, len(items)):
        if items[i][0] == items[i - 1][0]:
            raise InvalidArgumentError("CBOR map has a duplicate key")
    return encode_head(_MAJOR_MAP, len(items)) + b"".join(k + v for k, v in items)


def _first(pair: tuple[bytes, bytes]) -> bytes:
    return pair[0]


def encode(value: object) -> bytes:
    """Deterministic CBOR of `value` (see the module docstring for the supported types)."""
    # Exact-type dispatch first: bool is an int subclass and Float64 a float subclass, and each
    # must take its own branch.
    t = type(value)
    if value is None:
        return NULL
    if t is bool:
        return TRUE if value else FALSE
    if t is Float64:
        return encode_float64(value)  # type: ignore[arg-type]
    if isinstance(value, int) and not isinstance(value, bool):
        if not -(2**64) <= value < 2**64:
            raise InvalidArgumentError(f"integer {value} is outside CBOR's 64-bit range")
        return encode_int(value)
    if isinstance(value, float):
        return encode_float_preferred(value)
    if isinstance(value, str):
        return encode_text(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return encode_bytes(value)
    if isinstance(value, list | tuple):
        return encode_head(_MAJOR_ARRAY, len(value)) + b"".join(encode(v) for v in value)
    if isinstance(value, Mapping):
        return encode_map_items([(encode(k), encode(v)) for k, v in value.items()])
    raise InvalidArgumentError(f"cannot encode a {t.__name__} as CBOR")
