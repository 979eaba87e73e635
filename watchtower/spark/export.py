"""`watchtower spark export`: a stream's archive as Parquet, with the verification status of every row.

Layout: ``PATH/stream_id=<id>/date=<YYYY-MM-DD>/part-*.parquet`` (Hive-style partitions: a stream's
rows live together, and a date range is a directory range; the date is the message's own
``timestamp_unix_ms`` in UTC). Columns: stream_id, sequence, timestamp_unix_ms, kind, content_type,
tags_json (canonical JSON of the tags: text, bool and float64 values), payload_format,
payload_inline, payload_hash, key_epoch, signing_key_id, publisher_sig, key_in_force (the key id
the verified schedule puts in force at the sequence), verification (`audit.STATUSES`) and the Kafka
coordinates kafka_partition, kafka_offset. Writing replaces that stream's directory.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import functions as sf

from watchtower.protocol.stream.key_schedule import KeySchedule
from watchtower.spark.audit import audited

Report = Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class ExportResult:
    """What an export wrote."""

    stream_id: str
    path: str
    rows: int
    verified: int
    dates: int

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def export_stream(spark: Any, bootstrap: str, stream_id: str, schedule: KeySchedule, to: str | Path, *,
                  prefix: str | None = None, report: Report = lambda _line: None) -> ExportResult:
    """Write `stream_id`'s archive under `to` (see the module docstring)."""
    df = audited(spark, bootstrap, stream_id, schedule, prefix=prefix, with_tags=True).where(sf.col("m").isNotNull())
    m = "m."
    rows = df.select(
        sf.col(m + "stream_id").alias("stream_id"), sf.col(m + "sequence").alias("sequence"),
        sf.col(m + "timestamp_unix_ms").alias("timestamp_unix_ms"), sf.col(m + "kind").alias("kind"),
        sf.col(m + "content_type").alias("content_type"),
        sf.col("a.tags_json").alias("tags_json"),
        sf.col(m + "payload_format").alias("payload_format"), sf.col(m + "payload_inline").alias("payload_inline"),
        sf.col(m + "payload_hash").alias("payload_hash"), sf.col(m + "key_epoch").alias("key_epoch"),
        sf.col(m + "signing_key_id").alias("signing_key_id"), sf.col(m + "publisher_sig").alias("publisher_sig"),
        sf.col("a.key_in_force").alias("key_in_force"), sf.col("a.status").alias("verification"),
        sf.col("partition").alias("kafka_partition"), sf.col("offset").alias("kafka_offset"),
        sf.date_format(sf.timestamp_millis(sf.col(m + "timestamp_unix_ms")), "yyyy-MM-dd").alias("date"),
    ).cache()
    try:
        report(f"exporting stream {stream_id} to {to}")
        totals = rows.agg(sf.count(sf.lit(1)).alias("rows"),
                          sf.sum(sf.when(sf.col("verification") == "verified", 1).otherwise(0)).alias("verified"),
                          sf.count_distinct("date").alias("dates")).first()
        (rows.repartition("date").sortWithinPartitions("sequence").write.mode("overwrite")
             .partitionBy("stream_id", "date").option("partitionOverwriteMode", "dynamic").parquet(str(to)))
    finally:
        rows.unpersist()
    result = ExportResult(stream_id, str(to), int(totals["rows"]), int(totals["verified"] or 0), int(totals["dates"]))
    report(f"stream {stream_id}: {result.rows} rows ({result.verified} verified) in {result.dates} date partitions")
    return result

