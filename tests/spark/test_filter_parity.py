"""The Spark-compiled filter selects exactly what the live evaluator selects.

Hypothesis draws filters (every operator, tag and header fields, nested all/any/not) and messages
(text, bool and number tags, some missing); the messages are encoded with the real Avro codec and
decoded by Spark's from_avro as the replay job does, and every filter of a batch is one column of a
single Spark job, so one local session checks many filters per job.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiers import scale

from watchtower.protocol.stream.filters import evaluate, parse_filter
from watchtower.protocol.stream.message import StreamMessage
from watchtower.schemas.records import encode_message

pytest.importorskip("pyspark")

TAG_KEYS = ("a", "b", "sym", "é")
KINDS = ("news", "alert", "price", "Zeta", "ä")
texts = st.sampled_from(("", "a", "b", "BTC", "ETH", "news", "alert", "é", "ä", "Z", "1", "true"))
numbers = st.one_of(st.integers(-3, 3), st.sampled_from([0.5, -0.5, 1.0, 2.0, 1e300, 2**53 + 1, -(2**70), 2**1100]),
                    st.floats(-5, 5, allow_nan=False, allow_infinity=False))
scalars = st.one_of(texts, st.booleans(), numbers)
header_numbers = st.one_of(st.integers(-2, 60), st.sampled_from([0.5, 3.5, 10.0, 2**63, -(2**64), 1e30]))


@st.composite
def predicates(draw: Any) -> dict[str, Any]:
    field = draw(st.sampled_from(("kind", "sequence", "timestamp_unix_ms", *(f"tags.{k}" for k in TAG_KEYS))))
    op = draw(st.sampled_from(("eq", "ne", "in", "nin", "gte", "lte", "exists")))
    numeric = field in ("sequence", "timestamp_unix_ms")
    one = header_numbers if numeric else scalars
    if op == "exists":
        return {"field": field, "op": op, "value": draw(st.booleans())}
    if op in ("in", "nin"):
        return {"field": field, "op": op, "value": draw(st.lists(one, min_size=1, max_size=4))}
    if op in ("gte", "lte"):
        return {"field": field, "op": op, "value": draw(header_numbers if numeric else st.one_of(texts, numbers))}
    return {"field": field, "op": op, "value": draw(one)}


def filters() -> st.SearchStrategy[dict[str, Any]]:
    return st.recursive(
        predicates(),
        lambda inner: st.one_of(st.builds(lambda c: {"all": c}, st.lists(inner, min_size=1, max_size=3)),
                                st.builds(lambda c: {"any": c}, st.lists(inner, min_size=1, max_size=3)),
                                st.builds(lambda c: {"not": c}, inner)),
        max_leaves=6,
    )


tag_values = st.one_of(texts, st.booleans(), st.integers(-3, 3), st.sampled_from([0.5, 1e300, -0.5, 2.0**53]))


@st.composite
def messages(draw: Any) -> list[StreamMessage]:
    count = draw(st.integers(1, 30))
    out = []
    for sequence in range(1, count + 1):
        tags = draw(st.dictionaries(st.sampled_from(TAG_KEYS), tag_values, max_size=3))
        out.append(StreamMessage(stream_id="s-parity", sequence=sequence, timestamp_unix_ms=draw(st.integers(0, 40)),
                                 kind=draw(st.sampled_from(KINDS)), payload_inline=b"{}", payload_hash=bytes(32),
                                 publisher_sig=bytes(64), tags=tags))
    return out




def valid(spec: dict[str, Any]) -> Any:
    from watchtower.protocol.errors import InvalidFilterError

    try:
        return parse_filter(spec)
    except InvalidFilterError:
        return None  # too deep or too many predicates: not a filter anyone can register


def spark_selection(spark: Any, msgs: list[StreamMessage], nodes: list[Any]) -> list[list[int]]:
    """For each filter, the sequences Spark's compiled column keeps, in one job."""
    from pyspark.sql import functions as sf

    from watchtower.spark.archive import decoded, message_columns
    from watchtower.spark.filter_compile import filter_column

    df = decoded(spark.createDataFrame([(bytearray(encode_message(m)),) for m in msgs], "value binary"))
    cols = message_columns()
    rows = df.select(sf.col("m.sequence").alias("sequence"),
                     *[filter_column(node, cols).alias(f"f{i}") for i, node in enumerate(nodes)]).collect()
    return [sorted(r["sequence"] for r in rows if r[f"f{i}"]) for i in range(len(nodes))]


# Each example is one Spark job of up to 25 filters: 12 jobs (~300 filters) in CI, 100 in the soak tier.
@pytest.mark.soak
@settings(max_examples=scale(12, 100), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(msgs=messages(), specs=st.lists(filters(), min_size=1, max_size=25))
def test_spark_compiled_filters_select_the_same_sequences_as_the_live_evaluator(
        spark: Any, msgs: list[StreamMessage], specs: list[dict[str, Any]]) -> None:
    nodes = [n for n in (valid(s) for s in specs) if n is not None]
    if not nodes:
        return
    got = spark_selection(spark, msgs, nodes)
    for node, selected in zip(nodes, got, strict=True):
        expected = [m.sequence for m in msgs if evaluate(node, m.headers())]
        assert selected == expected, node


def test_the_dsl_edge_cases_agree(spark: Any) -> None:
    """The rules the issue names, pinned: missing fields, 1 == 1.0, bool only equals bool, text order."""
    msgs = [StreamMessage(stream_id="s-parity", sequence=n, timestamp_unix_ms=n, kind=kind, payload_inline=b"{}",
                          payload_hash=bytes(32), publisher_sig=bytes(64), tags=tags)
            for n, (kind, tags) in enumerate([("a", {"x": 1}), ("b", {"x": True}), ("é", {"x": "1"}), ("z", {})],
                                             start=1)]
    specs = [{"field": "tags.x", "op": "eq", "value": 1.0}, {"field": "tags.x", "op": "eq", "value": True},
             {"field": "tags.x", "op": "ne", "value": 1}, {"field": "tags.x", "op": "exists", "value": False},
             {"field": "tags.x", "op": "nin", "value": ["1", True]}, {"field": "kind", "op": "gte", "value": "b"},
             {"field": "tags.x", "op": "gte", "value": 0}, {"field": "sequence", "op": "lte", "value": 2.5},
             {"not": {"field": "tags.x", "op": "in", "value": [1, "1"]}}]
    nodes = [parse_filter(s) for s in specs]
    assert spark_selection(spark, msgs, nodes) == [[1], [2], [2, 3, 4], [4], [1, 4], [2, 3, 4], [1], [1, 2], [2, 4]]
