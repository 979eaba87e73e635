"""The CIP-7 filter DSL compiled to a Spark Column, with exactly `protocol.stream.filters.evaluate`'s semantics.

Input columns are the decoded StreamMessage columns (`message_columns`): ``kind`` (string),
``sequence`` and ``timestamp_unix_ms`` (long) and ``tags``, the Avro map of the union
``[string, boolean, double]`` as Spark's ``from_avro`` reads it:
``map<string, struct<member0: string, member1: boolean, member2: double>>`` (exactly one member set).

Semantics (DESIGN §7.4), the same rules as the Python evaluator:

- a missing field satisfies only ``ne``, ``nin`` and ``exists: false``;
- numbers compare as numbers and exactly (1 == 1.0; an integer no double can hold equals no tag),
  a bool equals only a bool, text only text;
- ``gte``/``lte`` compare number with number or text with text (Spark orders strings by their UTF-8
  bytes, which is code point order); any other pairing is false.

Every predicate yields a definite true/false (never SQL NULL), so ``not`` is a plain negation.
"""

from __future__ import annotations

import math
from typing import Any

from pyspark.sql import functions as sf

from watchtower.protocol.stream.filter_ast import All, FilterNode, Not, Op, Predicate, Scalar

_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
TAG_TYPE = "map<string, struct<member0: string, member1: boolean, member2: double>>"


def filter_column(node: FilterNode | None, columns: Any = None) -> Any:
    """A boolean Column true exactly where `protocol.stream.filters.evaluate(node, headers)` is true.

    `columns` maps ``kind``/``sequence``/``timestamp_unix_ms``/``tags`` to Columns (default: the
    top-level columns of those names). None (no filter) matches everything.
    """
    if node is None:
        return sf.lit(True)
    cols = columns or {name: sf.col(name) for name in ("kind", "sequence", "timestamp_unix_ms", "tags")}
    return _compile(node, cols)


def _compile(node: FilterNode, cols: Any) -> Any:
    if isinstance(node, Predicate):
        return _predicate(node, cols)
    if isinstance(node, Not):
        return ~_compile(node.child, cols)
    parts = [_compile(child, cols) for child in node.children]
    out = parts[0]
    for part in parts[1:]:
        out = (out & part) if isinstance(node, All) else (out | part)
    return out


def _predicate(p: Predicate, cols: Any) -> Any:
    on_missing = (p.op is Op.EXISTS and p.value is False) or p.op in (Op.NE, Op.NIN)
    key = p.tag_key
    if key is None:
        # Header fields are always present on a decoded message.
        column = cols[p.field]
        test = _header_test(p, column, numeric=p.field != "kind")
        return sf.coalesce(test, sf.lit(False))
    value = sf.try_element_at(cols["tags"], sf.lit(key))
    test = sf.coalesce(_tag_test(p, value), sf.lit(False))
    return sf.when(value.isNull(), sf.lit(on_missing)).otherwise(test)


# --- a present header field (kind: text; sequence, timestamp_unix_ms: long) -------------------------

def _header_test(p: Predicate, column: Any, *, numeric: bool) -> Any:
    op, value = p.op, p.value
    if op is Op.EXISTS:
        return sf.lit(value is True)
    if op in (Op.EQ, Op.NE):
        equal = _header_equals(column, value, numeric)  # type: ignore[arg-type]
        return equal if op is Op.EQ else ~equal
    if op in (Op.IN, Op.NIN):
        member = _any([_header_equals(column, v, numeric) for v in value])  # type: ignore[union-attr]
        return member if op is Op.IN else ~member
    if isinstance(value, str):
        if numeric:
            return sf.lit(False)
        return column >= sf.lit(value) if op is Op.GTE else column <= sf.lit(value)
    if not numeric:
        return sf.lit(False)
    return _long_bound(column, value, op)  # type: ignore[arg-type]


def _header_equals(column: Any, value: Scalar, numeric: bool) -> Any:
    if isinstance(value, bool):
        return sf.lit(False)
    if isinstance(value, str):
        return sf.lit(False) if numeric else column == sf.lit(value)
    if not numeric:
        return sf.lit(False)
    exact = _as_long(value)
    return sf.lit(False) if exact is None else column == sf.lit(exact).cast("long")


def _as_long(value: int | float) -> int | None:
    """The long equal to `value`, or None when no long is (1.5, 2**70)."""
    if isinstance(value, float) and not value.is_integer():
        return None
    n = int(value)
    return n if _LONG_MIN <= n <= _LONG_MAX else None


def _long_bound(column: Any, value: int | float, op: Op) -> Any:
    """column >= value (or <=) for a long column, exactly: a bound is rounded to the integer it implies."""
    bound = math.ceil(value) if op is Op.GTE else math.floor(value)
    if bound > _LONG_MAX:
        return sf.lit(op is Op.LTE)
    if bound < _LONG_MIN:
        return sf.lit(op is Op.GTE)
    lit = sf.lit(bound).cast("long")
    return column >= lit if op is Op.GTE else column <= lit


# --- a present tag (struct of member0 text, member1 bool, member2 double) -----------------------------

def _tag_test(p: Predicate, tag: Any) -> Any:
    op, value = p.op, p.value
    if op is Op.EXISTS:
        return sf.lit(value is True)
    if op in (Op.EQ, Op.NE):
        equal = _tag_equals(tag, value)  # type: ignore[arg-type]
        return equal if op is Op.EQ else ~equal
    if op in (Op.IN, Op.NIN):
        member = _any([_tag_equals(tag, v) for v in value])  # type: ignore[union-attr]
        return member if op is Op.IN else ~member
    if isinstance(value, str):
        text = tag.getField("member0")
        return sf.coalesce(text >= sf.lit(value) if op is Op.GTE else text <= sf.lit(value), sf.lit(False))
    return sf.coalesce(_double_bound(tag.getField("member2"), value, op), sf.lit(False))  # type: ignore[arg-type]


def _tag_equals(tag: Any, value: Scalar) -> Any:
    if isinstance(value, bool):
        test = tag.getField("member1") == sf.lit(value)
    elif isinstance(value, str):
        test = tag.getField("member0") == sf.lit(value)
    else:
        as_double = _nearest_double(value)
        if as_double is None or as_double != value:  # an integer no double holds: no tag equals it
            return sf.lit(False)
        test = tag.getField("member2") == sf.lit(as_double)
    return sf.coalesce(test, sf.lit(False))


def _double_bound(column: Any, value: int | float, op: Op) -> Any:
    """column >= value (or <=) for a double column, exact for integers a double cannot hold."""
    nearest = _nearest_double(value)
    if nearest is None:  # beyond every finite double: nothing is above it, everything below
        return sf.when(column.isNotNull(), sf.lit(op is Op.LTE if value > 0 else op is Op.GTE))
    lit = sf.lit(nearest)
    if nearest == value:
        return column >= lit if op is Op.GTE else column <= lit
    # No double lies strictly between `value` and its nearest double, so the bound moves onto it.
    if op is Op.GTE:
        return column >= lit if nearest > value else column > lit
    return column <= lit if nearest < value else column < lit


def _nearest_double(value: int | float) -> float | None:
    try:
        return float(value)
    except OverflowError:
        return None


def _any(tests: list[Any]) -> Any:
    out = tests[0]
    for test in tests[1:]:
        out = out | test
    return out
