"""The chosen broker works with all three client stacks, transactions included."""

from __future__ import annotations

import pytest

from watchtower.local.jars import spark_jars
from watchtower.local.smoke import Hop, three_client_roundtrip
from watchtower.spark.smoke import spark_copy

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_confluent_faust_spark_roundtrip_with_transactions(kafka_bootstrap: str) -> None:
    hops: list[Hop] = three_client_roundtrip(kafka_bootstrap, lambda b, src, dst: spark_copy(b, src, dst, spark_jars()))
    clients = [h.client for h in hops]
    assert clients == ["confluent-kafka", "faust-streaming", "confluent-kafka", "spark", "confluent-kafka"]
    # Faust forwarded through an aiokafka transaction and the aborted record never surfaced.
    assert hops[2].value == "hello via faust"
    # Spark's read_committed source saw exactly the committed record, and its sink wrote it on.
    assert hops[3].value == "hello via faust"
    assert hops[4].value == "hello via faust via spark"
