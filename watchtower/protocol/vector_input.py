"""Reading a conformance vector's input (``watchtower-vectors/1``, DESIGN §7.9).

Each vector type's computation (`conformance`, `confidential.vectors`, `ingestion.vectors`) takes
its `input` object through these readers, so a vector with a missing or mistyped input field
fails as a malformed vector (`VectorFormatError`, reported as a FAIL), never as a crash or as a
Watchtower error the vector might have expected.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from watchtower.protocol.errors import InvalidArgumentError

#: One vector type's computation: its input in, its result fields out (or a Watchtower error).
Computation = Callable[[Mapping[str, Any]], dict[str, Any]]


class VectorFormatError(InvalidArgumentError):
    """The vector itself is unreadable (missing or mistyped input); reported as a FAIL."""


def field(data: Mapping[str, Any], key: str) -> Any:
    """`data[key]`; VectorFormatError when `data` is not an object or lacks it."""
    if not isinstance(data, Mapping) or key not in data:
        raise VectorFormatError(f"input lacks {key!r}")
    return data[key]


def hex_field(data: Mapping[str, Any], key: str) -> bytes:
    """The bytes of hex string `data[key]`; VectorFormatError when it is not one."""
    value = field(data, key)
    try:
        return bytes.fromhex(value)
    except (TypeError, ValueError):
        raise VectorFormatError(f"input {key!r} is not a hex string") from None


def hex_list(data: Mapping[str, Any], key: str) -> list[bytes]:
    """The bytes of each hex string in list `data[key]`; VectorFormatError when it is not one."""
    values = field(data, key)
    if not isinstance(values, list):
        raise VectorFormatError(f"input {key!r} must be a list of hex strings")
    try:
        return [bytes.fromhex(v) for v in values]
    except (TypeError, ValueError):
        raise VectorFormatError(f"input {key!r} must be a list of hex strings") from None


__all__ = ["Computation", "VectorFormatError", "field", "hex_field", "hex_list"]
