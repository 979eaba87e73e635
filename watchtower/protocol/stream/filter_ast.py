"""The typed AST of the CIP-7 filter DSL (DESIGN §7.4).

`filters.parse_filter` produces these nodes from JSON; evaluators (the Python one in `filters`,
the Spark Column compiler) walk them. Nodes are frozen, hashable and already valid: depth,
predicate count, field names, operators and value types were checked when they were built from
JSON, so a walker needs no checks of its own.

    FilterNode = Predicate | All | Any_ | Not

`Predicate.value` is a scalar (str, bool, int or float), a tuple of scalars for `in`/`nin`, or
a bool for `exists` (default True already filled in).
"""

from __future__ import annotations

import dataclasses
from enum import StrEnum
from typing import Any, TypeAlias

Scalar: TypeAlias = str | bool | int | float


class Op(StrEnum):
    """Predicate operators."""

    EQ = "eq"
    NE = "ne"
    IN = "in"
    NIN = "nin"
    GTE = "gte"
    LTE = "lte"
    EXISTS = "exists"


class HeaderField(StrEnum):
    """The header fields a filter may read besides `tags.<key>`."""

    KIND = "kind"
    SEQUENCE = "sequence"
    TIMESTAMP_UNIX_MS = "timestamp_unix_ms"


TAG_PREFIX = "tags."
NUMERIC_FIELDS = frozenset({HeaderField.SEQUENCE.value, HeaderField.TIMESTAMP_UNIX_MS.value})


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class Predicate:
    """`{"field": field, "op": op, "value": value}`; `field` is a header name or `tags.<key>`.

    Equality and hashing respect the DSL's types: Python says True == 1, but a filter on
    ``true`` and one on ``1`` behave differently, so they are different predicates. 1 and 1.0
    compare as numbers in the DSL and are equal here too.
    """

    field: str
    op: Op
    value: Scalar | tuple[Scalar, ...]

    @property
    def tag_key(self) -> str | None:
        """The tag key for a `tags.<key>` field, else None."""
        return self.field[len(TAG_PREFIX) :] if self.field.startswith(TAG_PREFIX) else None

    def _identity(self) -> tuple[object, ...]:
        return (self.field, self.op, _typed(self.value))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Predicate):
            return NotImplemented
        return self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())


def _typed(value: object) -> object:
    if isinstance(value, tuple):
        return tuple(_typed(v) for v in value)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, str):
        return ("text", value)
    return ("number", value)


@dataclasses.dataclass(frozen=True, slots=True)
class All:
    """`{"all": [...]}`: true when every child is true (children non-empty)."""

    children: tuple[FilterNode, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Any_:  # noqa: N801 - `Any` would shadow typing.Any for every importer
    """`{"any": [...]}`: true when some child is true (children non-empty)."""

    children: tuple[FilterNode, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Not:
    """`{"not": {...}}`: true when the child is false."""

    child: FilterNode


FilterNode: TypeAlias = Predicate | All | Any_ | Not


def to_json(node: FilterNode) -> dict[str, Any]:
    """The canonical JSON form of `node` (exists always carries its bool value)."""
    if isinstance(node, Predicate):
        value: Any = list(node.value) if isinstance(node.value, tuple) else node.value
        return {"field": node.field, "op": node.op.value, "value": value}
    if isinstance(node, All):
        return {"all": [to_json(c) for c in node.children]}
    if isinstance(node, Any_):
        return {"any": [to_json(c) for c in node.children]}
    return {"not": to_json(node.child)}


def depth(node: FilterNode) -> int:
    """A predicate has depth 1; a logical node 1 + the depth of its deepest child."""
    if isinstance(node, Predicate):
        return 1
    if isinstance(node, Not):
        return 1 + depth(node.child)
    return 1 + max(depth(c) for c in node.children)


def predicates(node: FilterNode) -> list[Predicate]:
    """Every predicate in `node`, in document order."""
    if isinstance(node, Predicate):
        return [node]
    if isinstance(node, Not):
        return predicates(node.child)
    return [p for c in node.children for p in predicates(c)]
