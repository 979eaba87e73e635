"""`topics.reader.HighWatermarks` answers the high watermark, open transactions included, on a real broker.

The stream worker tags each snapshot with it. A read_committed consumer's ``get_watermark_offsets``
answers the last stable offset instead, which stays at the first record of a transaction until its
commit marker is replicated: on a cluster that is a moment after ``commit_transaction`` returned,
and a snapshot tagged with it made the next owner fold the last batch's events a second time.
An open transaction holds the last stable offset back on one broker too, which is what this shows.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from watchtower.topics.connection import kafka_config
from watchtower.topics.reader import HighWatermarks

pytestmark = pytest.mark.integration


def test_the_high_watermark_counts_an_open_transaction_the_stable_offset_does_not(kafka_bootstrap: str) -> None:
    topic = f"hw-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(kafka_config(kafka_bootstrap))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    plain = Producer(kafka_config(kafka_bootstrap))
    for i in range(3):
        plain.produce(topic, b"%d" % i, partition=0)
    assert plain.flush(30) == 0
    txn = Producer(kafka_config(kafka_bootstrap, **{"transactional.id": f"hw-{uuid.uuid4().hex}"}))
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(topic, b"open", partition=0)
    assert txn.flush(30) == 0  # written, not committed
    committed_reader = Consumer(kafka_config(kafka_bootstrap, **{
        "group.id": f"hw-{uuid.uuid4().hex}", "isolation.level": "read_committed"}))
    try:
        high_watermarks = HighWatermarks(kafka_bootstrap)
        assert high_watermarks(topic, [0]) == {0: 4}
        assert high_watermarks(topic, [0]) == {0: 4}  # the same client, asked again
        _, stable = committed_reader.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        assert stable == 3  # what the snapshots were tagged with before
    finally:
        txn.abort_transaction(30)
        committed_reader.close()
