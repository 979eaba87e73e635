"""An outside reader decodes `events` and `messages` with Spark's `from_avro` and the `.avsc` files alone.

The expressions are docs/wire-formats.md's, checked verbatim, and run on records the real encoders wrote.
One local[1] Spark session serves the whole module.
"""

from __future__ import annotations

import hashlib
import struct
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "schemas"))
from event_samples import OWNER, SID, one_of_each

import watchtower.schemas
from watchtower.protocol.events import StreamMessagePublished, event_fields
from watchtower.protocol.signing import sign_message
from watchtower.schemas.codec import latest_version
from watchtower.schemas.records import encode_message
from watchtower.schemas.schema_ids import CATALOG
from watchtower.schemas.wire import encode_event
from watchtower.topics.connection import kafka_config, spark_kafka_options

pyspark = pytest.importorskip("pyspark")

WIRE_FORMATS = Path(__file__).resolve().parents[2] / "docs" / "wire-formats.md"
SCHEMAS = Path(watchtower.schemas.__file__).parent
BODY = "substring(value, 6, length(value) - 5)"  # the Avro body after the 5-byte frame


def header_filter(name: str) -> str:
    """The documented filter on the frame: magic 0x57, schema id and version, as a binary literal."""
    version = latest_version(name)
    return f"substring(value, 1, 5) = X'{struct.pack('>BHH', 0x57, CATALOG[name].schema_id, version).hex().upper()}'"




def read(spark: Any, values: list[bytes], name: str) -> list[Any]:
    from pyspark.sql.avro.functions import from_avro
    from pyspark.sql.functions import expr

    schema = (SCHEMAS / f"{name}.v{latest_version(name)}.avsc").read_text(encoding="utf-8")
    df = spark.createDataFrame([(bytearray(v),) for v in values], "value binary")
    rows = (df.where(expr(header_filter(name)))
              .select(from_avro(expr(BODY), schema).alias("r"))
              .select("r.*")
              .collect())
    return list(rows)


def test_the_wire_formats_page_documents_these_expressions() -> None:
    section = WIRE_FORMATS.read_text(encoding="utf-8").split("\n## Wire formats\n", 1)[1].split("\n## ", 1)[0]
    assert "Reading the topics from Spark" in section
    assert BODY in section
    assert "substring(value, 1, 5) = X'57000A0001'" in section  # StreamMessagePublished v1
    assert header_filter("StreamMessagePublished") == "substring(value, 1, 5) = X'57000A0001'"


def test_spark_reads_every_event_type_from_a_mixed_events_topic(spark: Any) -> None:
    events = one_of_each()
    values = [encode_event(e) for e in events]
    for event in events:
        rows = read(spark, values, event.type)
        assert len(rows) == 1, event.type  # the header filter picks this type's record only
        row = rows[0]
        assert row["block_height"] == event.block_height
        assert row["caused_by"]["aggregate_id"] == event.stream_id
        assert row["caused_by"]["caller"] == event.caller
        assert bytes(row["caused_by"]["digest"]) == event.digest
        if event.type == "StreamCreated":
            assert row["config"]["stream_id"] == SID
            assert row["config"]["owner"] == OWNER
        else:
            for field, value in event_fields(event.body).items():
                got = row[field]
                got = got.asDict() if hasattr(got, "asDict") else got  # a nested record (PaidStreamConfig)
                value = value.to_dict() if hasattr(value, "to_dict") else value
                value = list(value) if isinstance(value, tuple) else value  # an array (a frozen body's tuple)
                assert (bytes(got) if isinstance(got, bytearray) else got) == value, (event.type, field)


def test_spark_reads_stream_messages_and_matches_the_published_reference(spark: Any) -> None:
    key = bytes(range(32))
    messages = [sign_message(stream_id=SID, sequence=n, timestamp_unix_ms=1_000 + n, kind="k",
                             payload=f'{{"n":{n}}}'.encode(), signing_key=key, tags={"t": "x", "b": True})
                for n in (1, 2, 3)]
    rows = read(spark, [encode_message(m) for m in messages], "StreamMessage")
    assert [r["sequence"] for r in rows] == [1, 2, 3]
    for row, message in zip(rows, messages, strict=True):
        payload = bytes(row["payload_inline"])
        assert payload == message.payload_inline
        assert bytes(row["payload_hash"]) == hashlib.sha256(payload).digest()  # the event's reference holds
        assert bytes(row["publisher_sig"]) == message.publisher_sig


@pytest.mark.integration
def test_spark_reads_the_events_topic_from_kafka_with_the_readme_expressions(spark: Any, kafka_bootstrap: str) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from pyspark.sql.avro.functions import from_avro
    from pyspark.sql.functions import expr

    topic = f"wt-spark-{uuid.uuid4().hex[:8]}.events"
    admin = AdminClient(kafka_config(kafka_bootstrap))  # kept alive until the topic exists
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)
    events = one_of_each()
    producer = Producer(kafka_config(kafka_bootstrap))
    for event in events:
        producer.produce(topic, key=event.stream_id.encode(), value=encode_event(event))
    assert producer.flush(60) == 0
    schema = (SCHEMAS / "StreamMessagePublished.v1.avsc").read_text(encoding="utf-8")
    published = (spark.read.format("kafka").option("subscribe", topic)
                 .options(**spark_kafka_options(kafka_bootstrap)).option("kafka.isolation.level", "read_committed")
                 .load()
                 .where(expr("substring(value, 1, 5) = X'57000A0001'"))
                 .select(from_avro(expr("substring(value, 6, length(value) - 5)"), schema).alias("e"))
                 .select("e.*")
                 .collect())
    expected = next(e for e in events if isinstance(e.body, StreamMessagePublished))
    assert isinstance(expected.body, StreamMessagePublished)
    assert [(r["stream_id"], r["sequence"], bytes(r["payload_hash"])) for r in published] == [
        (SID, expected.body.sequence, expected.body.payload_hash)]
