"""The projection fold's lag reading (`partition_reader.PartitionReader`) on a real broker and a transactional topic.

Records are written in committed transactions, so the partition also holds a commit marker per
transaction. A reader started from the beginning reads the whole backlog as its lag before it has
folded anything; once it has read everything its lag is 0: a commit marker is never counted as a
record still to fold.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import TopicSpec
from watchtower.topics.connection import kafka_config
from watchtower.topics.partition_reader import PartitionReader

pytestmark = pytest.mark.integration

RECORDS = 30
TRANSACTIONS = 3


def _measure(reader: PartitionReader, max_records: int,
             timeout_s: float = 5.0) -> tuple[int, dict[tuple[str, int], int]]:
    reader._next_lag = 0.0  # measure on this poll, not a second later
    got = len(reader.poll(max_records=max_records, timeout_s=timeout_s))
    assert reader.lag is not None
    return got, {tp: lag.behind for tp, lag in reader.lag.items()}


def test_the_lag_is_the_backlog_then_zero_with_commit_markers_not_counted(kafka_bootstrap: str) -> None:
    topic = f"ops-lag-{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_bootstrap, [TopicSpec("ops", topic, partitions=1, retention_ms=3_600_000)])
    producer = Producer({**kafka_config(kafka_bootstrap), "transactional.id": f"{topic}-tx"})
    producer.init_transactions(30)
    for t in range(TRANSACTIONS):
        producer.begin_transaction()
        for i in range(RECORDS // TRANSACTIONS):
            producer.produce(topic, key=b"k", value=b"%d-%d" % (t, i), partition=0)
        producer.commit_transaction(30)
    reader = PartitionReader(kafka_bootstrap, {(topic, 0): None})
    try:
        got, lag = _measure(reader, max_records=1)
        assert got == 1
        # One record folded of the backlog: the rest (and, before the reader passed them, up to one
        # marker per transaction) is behind.
        assert RECORDS - 1 <= lag[(topic, 0)] <= RECORDS - 1 + TRANSACTIONS
        folded = got
        while folded < RECORDS:
            got, lag = _measure(reader, max_records=RECORDS)
            folded += got
        assert folded == RECORDS
        for _ in range(3):  # the end of the partition (past the last marker) is reached
            _got, lag = _measure(reader, max_records=RECORDS, timeout_s=0.5)
        assert lag == {(topic, 0): 0}
        assert reader.pending == set()
    finally:
        reader.close()
