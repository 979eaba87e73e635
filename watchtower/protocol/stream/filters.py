"""The CIP-7 filter DSL: parse JSON into the typed AST, and evaluate it on message headers.

Validation (DESIGN §7.4), every failure an `InvalidFilterError` whose message starts with the
JSON-pointer-like path of the offending node (``/`` is the root, ``/all/2/not`` a nested node)
and names the rule; `details` carries ``path`` and ``rule`` for programs:

- a node is an object: a predicate with exactly field, op and value (`exists` may omit value,
  default true), or exactly one of ``all`` / ``any`` (non-empty arrays) / ``not`` (an object);
- fields: kind, sequence, timestamp_unix_ms, tags.<non-empty key>; ops: eq ne in nin gte lte exists;
- values: eq/ne a scalar, in/nin a non-empty array of scalars, gte/lte a number or a string,
  exists a bool; sequence and timestamp_unix_ms compare with numbers only. Scalars are text,
  bool or finite numbers; null, NaN and ±Inf are not scalars;
- depth at most 4 (a predicate is depth 1), at most 16 predicates in the tree;
- ``None`` means "no filter" and matches everything; ``{}`` is invalid.

Evaluation: a missing field satisfies only `ne`, `nin` and `exists: false`; numbers compare as
numbers (1 == 1.0); a bool equals only a bool; `gte`/`lte` compare number with number or text
with text (by code point), any other pairing is false.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from typing import Any, Final

from watchtower.protocol.constants import MAX_FILTER_DEPTH, MAX_FILTER_PREDICATES
from watchtower.protocol.errors import InvalidFilterError
from watchtower.protocol.stream.filter_ast import (
    NUMERIC_FIELDS,
    TAG_PREFIX,
    All,
    Any_,
    FilterNode,
    HeaderField,
    Not,
    Op,
    Predicate,
    Scalar,
)

_PREDICATE_KEYS: Final = frozenset({"field", "op", "value"})
_LOGICAL_KEYS: Final = ("all", "any", "not")
_HEADER_FIELDS: Final = frozenset(f.value for f in HeaderField)
_OPS: Final = {op.value: op for op in Op}
_TAG_PREFIX_LEN: Final = len(TAG_PREFIX)


def _fail(path: str, rule: str, text: str) -> InvalidFilterError:
    where = path or "/"
    return InvalidFilterError(f"filter node {where}: {text}", details={"path": where, "rule": rule})


def parse_filter(spec: object) -> FilterNode | None:
    """Validate a JSON filter and return its AST; None (no filter) returns None.

    Raises `InvalidFilterError` only, whatever `spec` is.
    """
    if spec is None:
        return None
    count = [0]
    return _parse_node(spec, "", 1, count)


def validate_filter(spec: object) -> None:
    """Raise `InvalidFilterError` unless `spec` is a valid filter or None."""
    parse_filter(spec)


def _parse_node(obj: object, path: str, level: int, count: list[int]) -> FilterNode:
    if level > MAX_FILTER_DEPTH:
        raise _fail(
            path,
            "max_depth",
            f"sits at depth {level}; filters nest at most {MAX_FILTER_DEPTH} levels "
            f"(a predicate is depth 1, each all/any/not adds 1). Flatten the expression.",
        )
    if not isinstance(obj, Mapping):
        raise _fail(path, "node_type", f"must be an object (a predicate or all/any/not), got {_kind(obj)}")
    if not all(isinstance(k, str) for k in obj):
        raise _fail(path, "node_type", "object keys must be strings")
    if _PREDICATE_KEYS.intersection(obj):
        return _parse_predicate(obj, path, count)
    if len(obj) != 1:
        if not obj:
            raise _fail(path, "empty_node", "{} is not a filter; omit the filter (null) to match everything")
        raise _fail(path, "single_key", f"a logical node has exactly one key (all, any or not), got {sorted(obj)}")
    ((key, value),) = obj.items()
    child_path = f"{path}/{key}"
    if key == "not":
        return Not(_parse_node(value, child_path, level + 1, count))
    if key in ("all", "any"):
        if not isinstance(value, list | tuple):
            raise _fail(child_path, "logical_operand", f"'{key}' takes an array of nodes, got {_kind(value)}")
        if not value:
            raise _fail(child_path, "logical_operand", f"'{key}' needs at least one node")
        children = tuple(_parse_node(child, f"{child_path}/{i}", level + 1, count) for i, child in enumerate(value))
        return All(children) if key == "all" else Any_(children)
    raise _fail(path, "unknown_key", f"unknown key {key!r}; a node is a predicate (field/op/value) or all/any/not")


def _parse_predicate(obj: Mapping[str, Any], path: str, count: list[int]) -> Predicate:
    count[0] += 1
    if count[0] > MAX_FILTER_PREDICATES:
        raise _fail(
            path,
            "max_predicates",
            f"is predicate number {count[0]}; a filter holds at most {MAX_FILTER_PREDICATES}. "
            f"Use 'in' to test many values at once.",
        )
    extra = set(obj) - _PREDICATE_KEYS
    if extra:
        raise _fail(path, "predicate_keys", f"a predicate has only field, op and value; remove {sorted(extra)}")
    field = obj.get("field")
    if not isinstance(field, str):
        raise _fail(path, "field", "a predicate needs 'field' as a string")
    if field not in _HEADER_FIELDS and not (field.startswith(TAG_PREFIX) and len(field) > _TAG_PREFIX_LEN):
        raise _fail(
            path,
            "field",
            f"field {field!r} is not filterable; use kind, sequence, timestamp_unix_ms or tags.<key>",
        )
    op_name = obj.get("op")
    op = _OPS.get(op_name) if isinstance(op_name, str) else None
    if op is None:
        raise _fail(path, "op", f"op {op_name!r} is unknown; use one of {', '.join(_OPS)}")
    if "value" not in obj:
        if op is Op.EXISTS:
            return Predicate(field, op, True)
        raise _fail(path, "value", f"op '{op.value}' needs a 'value'")
    return Predicate(field, op, _parse_value(op, field, obj["value"], path))


def _parse_value(op: Op, field: str, value: object, path: str) -> Scalar | tuple[Scalar, ...]:
    numeric_only = field in NUMERIC_FIELDS
    vpath = f"{path}/value"
    if op is Op.EXISTS:
        if not isinstance(value, bool):
            raise _fail(vpath, "value_type", f"'exists' takes true or false, got {_kind(value)}")
        return value
    if op in (Op.IN, Op.NIN):
        if not isinstance(value, list | tuple) or not value:
            raise _fail(vpath, "value_type", f"'{op.value}' takes a non-empty array of scalars")
        return tuple(_scalar(v, f"{vpath}/{i}", field, numeric_only) for i, v in enumerate(value))
    if op in (Op.GTE, Op.LTE):
        if isinstance(value, str) and not numeric_only:
            return value
        if not _is_number(value):
            wanted = "a number" if numeric_only else "a number or a string"
            raise _fail(vpath, "value_type", f"'{op.value}' on {field} takes {wanted}, got {_kind(value)}")
        return value  # type: ignore[return-value]
    return _scalar(value, vpath, field, numeric_only)


def _scalar(value: object, path: str, field: str, numeric_only: bool) -> Scalar:
    if numeric_only:
        if not _is_number(value):
            raise _fail(path, "value_type", f"{field} compares with numbers only, got {_kind(value)}")
        return value  # type: ignore[return-value]
    if isinstance(value, str | bool) or _is_number(value):
        return value  # type: ignore[return-value]
    raise _fail(path, "value_type", f"expected text, bool or a finite number, got {_kind(value)}")


def _is_number(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, int)


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    return {bool: "a bool", str: "text", int: "a number", float: "a number", list: "an array"}.get(
        type(value), f"a {type(value).__name__}"
    )


# --- Evaluation ----------------------------------------------------------------------------------
#
# A filter is compiled once into nested closures; `evaluate` compiles through a cache, so there is
# exactly one implementation of the semantics. Closures specialise on the predicate's value type,
# which is what makes "a bool equals only a bool" cheap: bools are singletons, text equals only
# text, and a number equals a non-bool only by value.

_MISSING: Final = object()
HeaderTest = Callable[[Mapping[str, Any]], bool]


def evaluate(node: FilterNode | None, headers: Mapping[str, Any]) -> bool:
    """Does a message with these headers pass the filter? None matches everything.

    `headers` has ``kind``, ``sequence``, ``timestamp_unix_ms`` and ``tags`` (a mapping), as
    returned by `StreamMessage.headers()`. Absent keys count as missing fields.
    """
    if node is None:
        return True
    return _compiled(node)(headers)


def compile_filter(node: FilterNode | None) -> HeaderTest:
    """A function headers -> bool equivalent to `evaluate(node, headers)`, for hot loops."""
    if node is None:
        return _match_all
    return _compiled(node)


def _match_all(_headers: Mapping[str, Any]) -> bool:
    return True


@functools.lru_cache(maxsize=4096)
def _compiled(node: FilterNode) -> HeaderTest:
    # Safe to key on node equality: Predicate equality distinguishes value types (True vs 1).
    return _compile(node)


def _compile(node: FilterNode) -> HeaderTest:
    if isinstance(node, Predicate):
        return _compile_predicate(node)
    if isinstance(node, Not):
        inner = _compile(node.child)
        return lambda headers: not inner(headers)
    tests = tuple(_compile(child) for child in node.children)
    if isinstance(node, All):

        def all_of(headers: Mapping[str, Any]) -> bool:
            for test in tests:  # noqa: SIM110 - a plain loop beats all(genexpr) on this hot path
                if not test(headers):
                    return False
            return True

        return all_of

    def any_of(headers: Mapping[str, Any]) -> bool:
        for test in tests:  # noqa: SIM110 - a plain loop beats any(genexpr) on this hot path
            if test(headers):
                return True
        return False

    return any_of


def _compile_predicate(p: Predicate) -> HeaderTest:
    matches = _value_test(p)
    op = p.op
    # A missing field satisfies only ne, nin and exists:false.
    on_missing = (op is Op.EXISTS and p.value is False) or op is Op.NE or op is Op.NIN
    tag_key = p.tag_key
    if tag_key is not None:

        def tag_predicate(headers: Mapping[str, Any]) -> bool:
            tags = headers.get("tags")
            actual = tags.get(tag_key, _MISSING) if tags else _MISSING
            return on_missing if actual is _MISSING else matches(actual)

        return tag_predicate
    field = p.field

    def header_predicate(headers: Mapping[str, Any]) -> bool:
        actual = headers.get(field, _MISSING)
        return on_missing if actual is _MISSING else matches(actual)

    return header_predicate


def _value_test(p: Predicate) -> Callable[[Any], bool]:
    """The test a *present* field value must pass."""
    op, value = p.op, p.value
    if op is Op.EXISTS:
        present = value is True
        return lambda _actual: present
    if op is Op.EQ:
        return _equals(value)  # type: ignore[arg-type]
    if op is Op.NE:
        equal = _equals(value)  # type: ignore[arg-type]
        return lambda actual: not equal(actual)
    if op in (Op.IN, Op.NIN):
        member = _member_of(value)  # type: ignore[arg-type]
        if op is Op.IN:
            return member
        return lambda actual: not member(actual)
    if isinstance(value, str):
        if op is Op.GTE:
            return lambda actual: isinstance(actual, str) and actual >= value
        return lambda actual: isinstance(actual, str) and actual <= value
    if op is Op.GTE:
        return lambda actual: _is_number(actual) and actual >= value
    return lambda actual: _is_number(actual) and actual <= value


def _equals(value: Scalar) -> Callable[[Any], bool]:
    if value is True or value is False:
        return lambda actual: actual is value
    if isinstance(value, str):
        return lambda actual: actual == value  # only text equals text
    return lambda actual: actual == value and not isinstance(actual, bool)


def _member_of(values: tuple[Scalar, ...]) -> Callable[[Any], bool]:
    bools = frozenset(v for v in values if isinstance(v, bool))
    texts = frozenset(v for v in values if isinstance(v, str))
    numbers = frozenset(v for v in values if not isinstance(v, bool | str))

    def member(actual: Any) -> bool:
        if isinstance(actual, bool):
            return actual in bools
        if isinstance(actual, str):
            return actual in texts
        # 1 and 1.0 hash alike, so set membership compares numbers by value.
        return _is_number(actual) and actual in numbers

    return member
