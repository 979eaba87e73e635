"""The filter DSL (DESIGN §7.4): validation with node paths, typed AST, evaluation."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from protocol_strategies import PROPERTY, json_values, vectors_of_type

from watchtower.protocol import All, Any_, Not, Op, Predicate, compile_filter, evaluate, parse_filter
from watchtower.protocol.errors import InvalidFilterError
from watchtower.protocol.stream.filter_ast import depth, predicates, to_json

HEADERS: dict[str, Any] = {
    "kind": "price_batch",
    "sequence": 42,
    "timestamp_unix_ms": 1767225600000,
    "tags": {"symbol": "BTC", "venue": "coinbase", "confidence": 0.93, "live": True, "count": 12.0},
}


def pred(field: str, op: str, value: Any = None) -> dict[str, Any]:
    node = {"field": field, "op": op}
    if value is not None:
        node["value"] = value
    return node


@pytest.mark.parametrize("vector", vectors_of_type("filter"), ids=lambda v: v["id"])
def test_filter_vectors(vector: dict[str, Any]) -> None:
    inp, expect = vector["input"], vector["expect"]
    if "error" in expect:
        with pytest.raises(InvalidFilterError):
            parse_filter(inp["filter"])
    else:
        assert evaluate(parse_filter(inp["filter"]), inp["headers"]) is expect["match"]


def test_parse_builds_a_typed_ast() -> None:
    ast = parse_filter({"all": [pred("kind", "eq", "a"), {"not": pred("tags.x", "in", [1, "b"])}]})
    assert ast == All((Predicate("kind", Op.EQ, "a"), Not(Predicate("tags.x", Op.IN, (1, "b")))))
    assert parse_filter(pred("tags.x", "exists")) == Predicate("tags.x", Op.EXISTS, True)
    assert isinstance(parse_filter({"any": [pred("sequence", "gte", 3)]}), Any_)


@pytest.mark.parametrize(
    ("spec", "path", "rule"),
    [
        ({}, "/", "empty_node"),
        ([], "/", "node_type"),
        ("kind", "/", "node_type"),
        ({"all": [], "any": []}, "/", "single_key"),
        ({"or": []}, "/", "unknown_key"),
        ({"all": []}, "/all", "logical_operand"),
        ({"any": {"field": "kind"}}, "/any", "logical_operand"),
        ({"not": []}, "/not", "node_type"),
        ({"all": [pred("kind", "eq", "a"), pred("kind", "eq", "b"), pred("payload", "eq", "x")]}, "/all/2", "field"),
        ({"all": [pred("kind", "eq", "a"), {"not": pred("kind", "regex", ".*")}]}, "/all/1/not", "op"),
        (pred("tags.", "eq", "x"), "/", "field"),
        ({"field": "kind", "op": "eq", "value": "a", "extra": 1}, "/", "predicate_keys"),
        ({"field": "kind", "op": "eq"}, "/", "value"),
        ({"op": "eq", "value": "a"}, "/", "field"),
        (pred("kind", "exists", "yes"), "/value", "value_type"),
        (pred("kind", "in", []), "/value", "value_type"),
        (pred("kind", "in", "a"), "/value", "value_type"),
        (pred("kind", "in", ["a", ["b"]]), "/value/1", "value_type"),
        (pred("kind", "eq", None) | {"value": None}, "/value", "value_type"),
        (pred("kind", "eq", {"a": 1}), "/value", "value_type"),
        (pred("tags.x", "gte", True), "/value", "value_type"),
        (pred("tags.x", "lte", [1]), "/value", "value_type"),
        (pred("sequence", "eq", "1"), "/value", "value_type"),
        (pred("sequence", "gte", "a"), "/value", "value_type"),
        (pred("timestamp_unix_ms", "in", [1, "2"]), "/value/1", "value_type"),
        (pred("sequence", "eq", True), "/value", "value_type"),
        (pred("tags.x", "eq", float("nan")), "/value", "value_type"),
        (pred("tags.x", "eq", float("inf")), "/value", "value_type"),
    ],
)
def test_every_violation_names_its_node_and_rule(spec: Any, path: str, rule: str) -> None:
    with pytest.raises(InvalidFilterError) as caught:
        parse_filter(spec)
    assert caught.value.code == "INVALID_FILTER"
    assert caught.value.details == {"path": path, "rule": rule}
    assert caught.value.message.startswith(f"filter node {path}:")


def test_depth_four_is_the_limit() -> None:
    leaf = pred("kind", "eq", "a")
    four = {"all": [{"any": [{"not": leaf}]}]}
    assert depth(parse_filter(four)) == 4  # type: ignore[arg-type]
    with pytest.raises(InvalidFilterError) as caught:
        parse_filter({"all": [{"any": [{"not": {"all": [leaf]}}]}]})
    assert caught.value.details["path"] == "/all/0/any/0/not/all/0"
    assert "depth 5" in caught.value.message


def test_sixteen_predicates_is_the_limit() -> None:
    sixteen = {"any": [pred("sequence", "eq", i) for i in range(16)]}
    assert len(predicates(parse_filter(sixteen))) == 16  # type: ignore[arg-type]
    with pytest.raises(InvalidFilterError) as caught:
        parse_filter({"any": [{"all": [pred("sequence", "eq", i) for i in range(8)]}] * 2 + [pred("kind", "eq", "x")]})
    assert caught.value.details == {"path": "/any/2", "rule": "max_predicates"}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (None, True),
        (pred("kind", "eq", "price_batch"), True),
        (pred("sequence", "eq", 42.0), True),  # numbers compare as numbers
        (pred("tags.count", "eq", 12), True),
        (pred("tags.live", "eq", True), True),
        (pred("tags.live", "eq", 1), False),  # a bool equals only a bool
        (pred("tags.count", "eq", True), False),
        (pred("tags.symbol", "ne", "ETH"), True),
        (pred("tags.symbol", "in", ["ETH", "BTC"]), True),
        (pred("tags.symbol", "nin", ["ETH", "BTC"]), False),
        (pred("tags.confidence", "gte", 0.93), True),
        (pred("tags.confidence", "lte", 0.5), False),
        (pred("tags.symbol", "gte", "BTA"), True),  # text by code point
        (pred("tags.symbol", "lte", "B"), False),
        (pred("tags.symbol", "gte", 1), False),  # mixed pairings are false
        (pred("tags.count", "gte", "1"), False),
        (pred("tags.live", "gte", 0), False),
        (pred("kind", "exists"), True),
        (pred("kind", "exists", False), False),
        # a missing field satisfies only ne, nin and exists:false
        (pred("tags.region", "eq", "eu"), False),
        (pred("tags.region", "ne", "eu"), True),
        (pred("tags.region", "in", ["eu"]), False),
        (pred("tags.region", "nin", ["eu"]), True),
        (pred("tags.region", "gte", 0), False),
        (pred("tags.region", "lte", "z"), False),
        (pred("tags.region", "exists"), False),
        (pred("tags.region", "exists", False), True),
        ({"not": pred("tags.region", "eq", "eu")}, True),
        ({"all": [pred("kind", "eq", "price_batch"), pred("sequence", "lte", 41)]}, False),
        ({"any": [pred("kind", "eq", "news"), pred("sequence", "gte", 42)]}, True),
    ],
)
def test_evaluation_semantics(spec: Any, expected: bool) -> None:
    assert evaluate(parse_filter(spec), HEADERS) is expected


def test_text_ordering_is_by_code_point() -> None:
    headers = {**HEADERS, "tags": {"s": "Z"}}
    assert evaluate(parse_filter(pred("tags.s", "lte", "a")), headers)  # "Z" (0x5a) < "a" (0x61)


# --- properties ----------------------------------------------------------------------------------

scalars = st.one_of(st.text(max_size=5), st.booleans(), st.integers(-5, 50), st.floats(-10, 10))
numbers = st.one_of(st.integers(-5, 50), st.floats(-10, 50))


@st.composite
def predicates_strategy(draw: st.DrawFn) -> dict[str, Any]:
    field = draw(st.sampled_from(["kind", "sequence", "timestamp_unix_ms", "tags.symbol", "tags.count", "tags.nope"]))
    numeric = field in ("sequence", "timestamp_unix_ms")
    op = draw(st.sampled_from([o.value for o in Op]))
    if op == "exists":
        return draw(st.just(pred(field, op)) | st.booleans().map(lambda b: {"field": field, "op": op, "value": b}))
    if op in ("in", "nin"):
        return pred(field, op, draw(st.lists(numbers if numeric else scalars, min_size=1, max_size=3)))
    if op in ("gte", "lte"):
        return pred(field, op, draw(numbers if numeric else numbers | st.text(max_size=4)))
    return pred(field, op, draw(numbers if numeric else scalars))


def valid_filters(max_depth: int = 4) -> st.SearchStrategy[dict[str, Any]]:
    if max_depth == 1:
        return predicates_strategy()
    child = valid_filters(max_depth - 1)
    return st.one_of(
        predicates_strategy(),
        st.lists(child, min_size=1, max_size=2).map(lambda c: {"all": c}),
        st.lists(child, min_size=1, max_size=2).map(lambda c: {"any": c}),
        child.map(lambda c: {"not": c}),
    )


headers_strategy = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["price_batch", "news"]),
        "sequence": st.integers(0, 50),
        "timestamp_unix_ms": st.integers(0, 50),
        "tags": st.dictionaries(st.sampled_from(["symbol", "count"]), scalars, max_size=2),
    }
)


@PROPERTY
@given(valid_filters())
def test_valid_filters_parse_and_round_trip_through_json(spec: dict[str, Any]) -> None:
    ast = parse_filter(spec)
    assert ast is not None
    assert parse_filter(to_json(ast)) == ast
    assert depth(ast) <= 4


@PROPERTY
@given(valid_filters(3), headers_strategy)
def test_not_negates_and_all_any_combine(spec: dict[str, Any], headers: dict[str, Any]) -> None:
    ast = parse_filter(spec)
    assert ast is not None
    value = evaluate(ast, headers)
    assert evaluate(Not(ast), headers) is (not value)
    assert evaluate(All((ast, ast)), headers) is value
    assert evaluate(Any_((ast, Not(ast))), headers) is True


@PROPERTY
@given(json_values)
def test_arbitrary_json_only_ever_raises_invalid_filter(spec: Any) -> None:
    with contextlib.suppress(InvalidFilterError):  # any other exception type fails the test
        parse_filter(spec)


@PROPERTY
@given(
    st.recursive(
        predicates_strategy() | json_values,
        lambda c: st.dictionaries(
            st.sampled_from(["all", "any", "not", "field", "op", "value", "x"]), c | st.lists(c), max_size=3
        ),
        max_leaves=20,
    )
)
def test_filter_shaped_junk_only_ever_raises_invalid_filter(spec: Any) -> None:
    with contextlib.suppress(InvalidFilterError):
        parse_filter(spec)


def test_predicates_with_bool_and_number_values_are_different_filters() -> None:
    as_bool = parse_filter(pred("tags.x", "eq", True))
    as_number = parse_filter(pred("tags.x", "eq", 1))
    assert as_bool != as_number
    assert parse_filter(pred("tags.x", "eq", 1)) == parse_filter(pred("tags.x", "eq", 1.0))
    headers = {"tags": {"x": True}}
    # Evaluate the number filter first so a cache keyed on Python equality would poison the bool one.
    assert evaluate(as_number, headers) is False
    assert evaluate(as_bool, headers) is True


@PROPERTY
@given(valid_filters(3), headers_strategy)
def test_compiled_filters_agree_with_evaluate(spec: dict[str, Any], headers: dict[str, Any]) -> None:
    ast = parse_filter(spec)
    assert compile_filter(ast)(headers) is evaluate(ast, headers)
    assert compile_filter(None)(headers) is True
