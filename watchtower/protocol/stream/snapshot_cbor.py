"""Reading and writing snapshot parts: strict, deterministic CBOR shared by every aggregate's codec.

A snapshot part (`stream.snapshots` for the stream actor's and the registry's, `ledger.snapshots`
for the key manager's) is deterministic CBOR (RFC 8949 canonical) of plain maps, arrays, text,
integers and bytes. Decoding never runs code from the bytes (no tag hook, no object hook), and
the readers here check each value's shape before it is used, so anything that is not exactly
what an encoder writes raises `SnapshotError` (MALFORMED_RECORD), never an IndexError or a
huge allocation: the loader quarantines the snapshot and folds the whole partition instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import cbor2

from watchtower.protocol.errors import MalformedRecordError
from watchtower.protocol.events import BODY_FIELDS, ReplayOrdered
from watchtower.protocol.frozen_json import freeze_json, from_tagged_json, to_tagged_json
from watchtower.protocol.ledger.events import EpochAccessRequested
from watchtower.protocol.stream.state import CallerRecord, FrozenMap


class SnapshotError(MalformedRecordError):
    """Bytes that are not a snapshot this codec wrote."""


def dumps(value: object) -> bytes:
    """`value` as deterministic CBOR."""
    return bytes(cbor2.dumps(value, canonical=True))


def loads(data: object, what: str) -> Any:
    """The CBOR value of `data` (a `what`); SnapshotError when it is not bytes of CBOR."""
    if not isinstance(data, bytes | bytearray):
        raise SnapshotError(f"{what} must be bytes, got {type(data).__name__}")
    try:
        # No tag hook and no object hook: a tag (which could name a class) is refused below.
        return cbor2.loads(bytes(data))
    except Exception as exc:  # cbor2 raises many types for hostile input
        raise SnapshotError(f"{what} is not CBOR ({exc.__class__.__name__})") from None


def require(cond: bool, why: str) -> None:
    """SnapshotError(`why`) unless `cond`."""
    if not cond:
        raise SnapshotError(why)


def read_int(value: object, name: str, minimum: int = 0) -> int:
    """`value` if it is an integer (not a bool) of at least `minimum`; SnapshotError naming `name` otherwise."""
    require(isinstance(value, int) and not isinstance(value, bool) and value >= minimum,
            f"{name} must be an integer >= {minimum}")
    return int(value)  # type: ignore[call-overload]


B = TypeVar("B", EpochAccessRequested, ReplayOrdered)


def folded_body(value: object, cls: type[B], what: str) -> B:
    """The `cls` body a part spells as a map of exactly its fields (`to_tagged_json` of them)."""
    # A purchase in flight or a replay order is the event body it was folded from, spelled as a
    # JSON-safe map of exactly that class's fields (a list, such as a replay's skip, reads as a tuple).
    fields = from_tagged_json(value, what)
    require(isinstance(fields, Mapping) and set(fields) == set(BODY_FIELDS[cls.TYPE]),
            f"a {what} must be a map of the {cls.TYPE} fields")
    return cls(**fields)


def row_of(value: object, length: int, what: str) -> list[Any]:
    """`value` if it is an array of `length` items; SnapshotError naming `what` otherwise."""
    # Rows are fixed-length arrays; checked here so a short row or a text is a SnapshotError, not
    # an IndexError, and a number where bytes belong never reaches bytes() (bytes(n) allocates n).
    require(isinstance(value, list) and len(value) == length, f"a {what} row is an array of {length} items")
    return value  # type: ignore[return-value]


def raw(value: object, name: str) -> bytes:
    """`value` if it is bytes; SnapshotError naming `name` otherwise."""
    require(isinstance(value, bytes), f"{name} must be bytes")
    return value  # type: ignore[return-value]


def key_of(row: list[Any], what: str) -> str:
    """The text that starts `row` (its map key); SnapshotError otherwise."""
    # The first item keys a FrozenMap, which hashes text only.
    require(isinstance(row[0], str), f"a {what} row starts with its address (text)")
    return row[0]


def rows_of(value: object, what: str) -> list[Any]:
    """`value` if it is an array; SnapshotError naming `what` otherwise."""
    require(isinstance(value, list), f"{what} must be an array")
    return value  # type: ignore[return-value]


def callers_doc(callers: Mapping[str, CallerRecord]) -> list[Any]:
    """An instance's per-caller replay records as rows (inverse: `callers_from`)."""
    return [[k, r.last_nonce, r.last_digest, to_tagged_json(r.last_reply)] for k, r in sorted(callers.items())]


def callers_from(value: object) -> FrozenMap[CallerRecord]:
    """The per-caller replay records of `callers_doc`'s rows; SnapshotError for anything else."""
    return FrozenMap((key_of(row, "caller"), CallerRecord(read_int(row[1], "last_nonce", 1), raw(row[2], "last_digest"),
                                           freeze_json(from_tagged_json(row[3], "last_reply"), "last_reply")))
                     for row in (row_of(r, 4, "caller") for r in rows_of(value, "callers")))


def opt_int(value: object, name: str) -> int | None:
    """None, or `read_int(value, name)`."""
    return None if value is None else read_int(value, name)


__all__ = ["SnapshotError", "callers_doc", "callers_from", "dumps", "folded_body", "key_of", "loads", "opt_int",
           "raw", "read_int", "require", "row_of", "rows_of"]
