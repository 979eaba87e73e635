"""Hypothesis strategies that generate records from an Avro schema."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

PROPERTY = settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

_PRIMITIVES: dict[str, st.SearchStrategy[Any]] = {
    "null": st.none(),
    "boolean": st.booleans(),
    "int": st.integers(-(2**31), 2**31 - 1),
    "long": st.integers(-(2**63), 2**63 - 1),
    # NaN is never equal to itself, so it cannot show a lossless round trip.
    "double": st.floats(allow_nan=False),
    "bytes": st.binary(max_size=40),
    "string": st.text(max_size=12),
}


def records_for(schema: Any) -> st.SearchStrategy[Any]:
    """Records matching an expanded Avro schema (as returned by `codec.avro_schema`)."""
    return _strategy(schema, {}, "")


def _strategy(schema: Any, named: dict[str, Any], namespace: str) -> st.SearchStrategy[Any]:
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        full = schema if "." in schema else f"{namespace}.{schema}"
        return _strategy(named[full], named, full.rsplit(".", 1)[0])
    if isinstance(schema, list):
        return st.one_of([_strategy(branch, named, namespace) for branch in schema])
    kind = schema["type"]
    if kind == "record":
        namespace = schema.get("namespace", namespace)
        full = schema["name"] if "." in schema["name"] else f"{namespace}.{schema['name']}"
        named[full] = schema
        return st.fixed_dictionaries({f["name"]: _strategy(f["type"], named, namespace) for f in schema["fields"]})
    if kind == "map":
        return st.dictionaries(st.text(max_size=8), _strategy(schema["values"], named, namespace), max_size=4)
    if kind == "array":
        return st.lists(_strategy(schema["items"], named, namespace), max_size=4)
    return _strategy(kind, named, namespace)
