"""Field checks shared by the value types: exact types, ranges, and spec-shaped messages.

JSON and Avro hand us `bool` where an integer is expected surprisingly often, and Python says
`isinstance(True, int)`. Every integer check here therefore rejects bools explicitly.
All failures are `InvalidArgumentError` unless the caller passes another error class.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import Any

from watchtower.protocol.constants import MAX_WIRE_UINT64
from watchtower.protocol.errors import InvalidArgumentError, WatchtowerError


def is_int(value: object) -> bool:
    """True for integers that are not bools."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    """True for JSON numbers: ints and floats, never bools."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_finite_number(value: object) -> bool:
    """True for numbers that are neither NaN nor ±Inf (ints are always finite)."""
    if isinstance(value, float):
        return math.isfinite(value)
    return is_int(value)


def require_int(
    value: object,
    name: str,
    *,
    minimum: int = 0,
    maximum: int = MAX_WIRE_UINT64,
    error: type[WatchtowerError] = InvalidArgumentError,
) -> int:
    """`value` as an int in [minimum, maximum], else `error` naming the field."""
    if not is_int(value):
        raise error(f"{name} must be an integer, got {type(value).__name__}")
    n = int(value)  # type: ignore[call-overload]
    if not minimum <= n <= maximum:
        raise error(f"{name} must be in [{minimum}, {maximum}], got {n}")
    return n


def require_amount(value: object, name: str = "amount_cby") -> int:
    """`value` as an amount of CBY wei (an int in 1..2**63-1, not a bool); INVALID_ARGUMENT otherwise."""
    if type(value) is not int or not 1 <= value <= MAX_WIRE_UINT64:
        raise InvalidArgumentError(
            f"{name} must be a whole number of CBY wei from 1 to {MAX_WIRE_UINT64}, got {value!r}",
            details={"field": name},
        )
    return value


def require_text(value: object, name: str, *, allow_empty: bool = False) -> str:
    """`value` as a str (non-empty unless `allow_empty`), else InvalidArgumentError."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name} must be a string, got {type(value).__name__}")
    if not value and not allow_empty:
        raise InvalidArgumentError(f"{name} must not be empty")
    return str(value)


def require_bytes(value: object, name: str, *, length: int | None = None) -> bytes:
    """`value` (bytes, bytearray or memoryview) as immutable bytes, optionally of exact length."""
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidArgumentError(f"{name} must be bytes, got {type(value).__name__}")
    raw = value if type(value) is bytes else bytes(value)
    if length is not None and len(raw) != length:
        raise InvalidArgumentError(f"{name} must be exactly {length} bytes, got {len(raw)}")
    return raw


@functools.cache
def _init_fields(cls: type) -> tuple[frozenset[str], frozenset[str]]:
    """Dataclass `cls`'s constructor field names, and those without a default (read once per class:
    `dataclasses.fields` builds a tuple on every call, and a fold asks for every record)."""
    fields = [f for f in dataclasses.fields(cls) if f.init]
    required = {f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    return frozenset(f.name for f in fields), frozenset(required)


def known_fields(cls: type, data: object, what: str) -> dict[str, Any]:
    """`data` as constructor kwargs for dataclass `cls`: no unknown keys, every required key present."""
    if not isinstance(data, Mapping):
        raise InvalidArgumentError(f"{what} must be an object, got {type(data).__name__}")
    names, required = _init_fields(cls)
    unknown = data.keys() - names
    if unknown:
        raise InvalidArgumentError(f"unknown {what} field(s): {', '.join(sorted(map(str, unknown)))}")
    missing = required - data.keys()
    if missing:
        raise InvalidArgumentError(f"missing {what} field(s): {', '.join(sorted(missing))}")
    return dict(data)
