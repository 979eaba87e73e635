"""Reading the ``messages`` archive from Spark: the Kafka source, read_committed, decoded with from_avro.

Kafka options come only from `topics.connection.spark_kafka_options`. Values are framed Avro (a 5-byte
frame, then the body, see README "Wire formats"); the frame is checked against the StreamMessage
schema id and version so no other record is ever decoded as a message.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from pyspark.sql import functions as sf
from pyspark.sql.avro.functions import from_avro

import watchtower.schemas
from watchtower.schemas.codec import latest_version
from watchtower.schemas.schema_ids import CATALOG
from watchtower.topics.connection import spark_kafka_options

SCHEMAS = Path(watchtower.schemas.__file__).parent
#: The frame before the Avro body: magic 0x57, schema id, schema version.
FRAME_BYTES = 5
#: The Avro body after the 5-byte frame (Spark's substring is 1-based).
BODY = "substring(value, 6, length(value) - 5)"


def message_schema() -> str:
    """The StreamMessage .avsc text from_avro reads with."""
    version = latest_version("StreamMessage")
    return (SCHEMAS / f"StreamMessage.v{version}.avsc").read_text(encoding="utf-8")


def message_frame() -> bytes:
    """The 5 frame bytes of every StreamMessage record: magic 0x57, schema id, schema version."""
    return struct.pack(">BHH", 0x57, CATALOG["StreamMessage"].schema_id, latest_version("StreamMessage"))


def kafka_source(spark: Any, bootstrap: str, topic: str, partitions: list[int] | None = None,
                 ending: dict[int, int] | None = None, min_partitions: int | None = None,
                 headers: bool = True) -> Any:
    """A batch DataFrame of `topic` (only `partitions` if given; up to `ending` offsets, else the end
    at the start of the job), read_committed, with the records' headers unless `headers` is false.

    `min_partitions` splits a Kafka partition's offset range into that many Spark tasks, for work
    that does not need log order (verification); left unset, one Kafka partition is one Spark
    partition and rows keep log order (replay relies on it)."""
    reader = (spark.read.format("kafka").options(**spark_kafka_options(bootstrap))
              .option("kafka.isolation.level", "read_committed")
              .option("includeHeaders", "true" if headers else "false"))
    if partitions is None:
        reader = reader.option("subscribe", topic)
    else:
        reader = reader.option("assign", json.dumps({topic: sorted(partitions)}))
    if ending is not None:
        reader = reader.option("endingOffsets", json.dumps({topic: {str(p): o for p, o in ending.items()}}))
    if min_partitions is not None:
        reader = reader.option("minPartitions", str(min_partitions))
    return reader.load()


def decoded(df: Any, *, keep_all: bool = False) -> Any:
    """`df` (a Kafka DataFrame, or any with a binary ``value``) keeping only StreamMessage records,
    with column ``m`` = the decoded message struct (kind, sequence, timestamp_unix_ms, tags, ...).

    With `keep_all`, other records stay, with ``m`` null (an audit counts them as malformed)."""
    is_message = sf.substring("value", 1, 5) == sf.lit(bytearray(message_frame()))
    body = from_avro(sf.expr(BODY), message_schema(), {"mode": "PERMISSIVE"})
    if keep_all:
        return df.withColumn("m", sf.when(is_message, body))
    return df.where(is_message).withColumn("m", body)


def message_columns(prefix: str = "m") -> dict[str, Any]:
    """The filter columns of a decoded message struct (see `filter_compile.filter_column`)."""
    return {name: sf.col(f"{prefix}.{name}") for name in ("kind", "sequence", "timestamp_unix_ms", "tags")}
