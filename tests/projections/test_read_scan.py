"""Cold reads: `LogReader.scan` reads a stream's records of an offset range of the messages topic,
with one assign and contiguous consumes, against a real broker, transactions included."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from watchtower.projections.log_reader import LogReader
from watchtower.topics.connection import kafka_config

pytestmark = pytest.mark.integration


def _topic(bootstrap: str) -> str:
    name = f"scan-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(kafka_config(bootstrap))  # kept alive until the topic exists
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    return name


def _write(bootstrap: str, topic: str, n: int) -> dict[str, list[int]]:
    """`n` records of three interleaved streams, each in its own transaction (so the log holds
    commit markers between them, as the messages topic does); stream -> its records' offsets."""
    producer = Producer({**kafka_config(bootstrap), "transactional.id": f"scan-{uuid.uuid4().hex}"})
    producer.init_transactions(30)
    offsets: dict[str, list[int]] = {}

    def delivered(_err: object, msg: object) -> None:
        offsets.setdefault(msg.key().decode(), []).append(msg.offset())  # type: ignore[attr-defined]
    for i in range(n):
        producer.begin_transaction()
        producer.produce(topic, key=f"s{i % 3}".encode(), value=f"{i // 3 + 1}".encode(), partition=0,
                         on_delivery=delivered)
        producer.commit_transaction(30)
    producer.flush(30)
    return offsets


def _sequence(_offset: int, value: bytes) -> int:
    return int(value)


def test_a_scan_reads_exactly_the_stream_records_of_its_range_and_stops_at_its_end(kafka_bootstrap: str) -> None:
    topic = _topic(kafka_bootstrap)
    offsets = _write(kafka_bootstrap, topic, 60)
    reader = LogReader(kafka_bootstrap, topic)
    try:
        s1 = offsets["s1"]
        # A range in the middle, up to the partition's last record, and to the end (None).
        for first, last in ((s1[3], s1[9]), (s1[10], s1[-1]), (s1[15], None)):
            found = reader.scan(0, first, last, "s1", _sequence)
            want = [o for o in s1 if o >= first and (last is None or o <= last)]
            assert sorted(o for o, _v in found.values()) == want
            assert sorted(found) == [s1.index(o) + 1 for o in want]
        # Only the wanted sequences, stopping once all are found.
        found = reader.scan(0, s1[0], None, "s1", _sequence, wanted=[2, 5])
        assert {seq: o for seq, (o, _v) in found.items()} == {2: s1[1], 5: s1[4]}
    finally:
        reader.close()
