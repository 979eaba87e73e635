"""The Spark hop of the three-client smoke check (`watchtower.local.smoke.three_client_roundtrip`)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from watchtower.spark.session import local_session
from watchtower.topics.connection import spark_kafka_options


def spark_copy(bootstrap: str, source: str, sink: str, jars: Iterable[str | Path] | None = None) -> list[str]:
    """Read ``source`` read_committed with Spark's Kafka source; write each value to ``sink``
    (`jars`: the connector's, as `local_session` takes them)."""
    spark = local_session("watchtower-smoke", jars=jars)
    try:
        df = (spark.read.format("kafka")
              .options(**spark_kafka_options(bootstrap))
              .option("subscribe", source)
              .option("startingOffsets", "earliest")
              .option("kafka.isolation.level", "read_committed")
              .load())
        rows = [bytes(r.value).decode() for r in df.select("value").collect()]
        (df.selectExpr("key", "CONCAT(CAST(value AS STRING), ' via spark') AS value")
           .write.format("kafka")
           .options(**spark_kafka_options(bootstrap))
           .option("topic", sink)
           .save())
        return rows
    finally:
        spark.stop()
