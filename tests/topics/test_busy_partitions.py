"""Reading a partition "to its end" ends while a transactional writer never leaves it alone.

A stream worker commits a transaction to ``events`` every few milliseconds. A read_committed
consumer is told it reached the end of a partition only when its position meets the high watermark
with no transaction open, which on such a partition may not happen for minutes:

- `reader.read_committed`: the ingestion aggregator's catch-up on ``events`` waited there, and no
  feed ticked while it did. The scan now stops at the high watermark of its start, so it ends while
  the writer goes on, and it still returns the caller's own transaction committed just before the
  call (its commit marker may not be written yet, which holds the last stable offset back for a
  moment), and nothing aborted.
- `PartitionReader` (a projection's catch-up): a partition left `pending` only at that event, and
  the messages it leads were not fetched until then, so a projection restarted beside a busy
  stream worker served nothing. A partition now leaves `pending` once the position reaches the end
  it had at open.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from watchtower.topics.connection import kafka_config
from watchtower.topics.partition_reader import PartitionReader
from watchtower.topics.reader import read_committed

pytestmark = pytest.mark.integration


def _transactional(bootstrap: str) -> Producer:
    producer = Producer(kafka_config(bootstrap, **{"transactional.id": f"busy-{uuid.uuid4().hex}", "linger.ms": 0}))
    producer.init_transactions(30)
    return producer


def _commit(producer: Producer, topic: str, values: list[bytes], *, abort: bool = False) -> None:
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value, partition=0)
    if abort:
        producer.abort_transaction(30)
    else:
        producer.commit_transaction(30)


def _new_topic(bootstrap: str, name: str) -> str:
    topic = f"{name}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(kafka_config(bootstrap))  # kept: a collected client fails its futures
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    return topic


@pytest.fixture
def busy_topic(kafka_bootstrap: str) -> Iterator[tuple[str, threading.Event, list[int]]]:
    """A one-partition topic that another producer writes one committed transaction after another to
    until the test ends; (topic, started, transactions committed so far)."""
    topic = _new_topic(kafka_bootstrap, "busy")
    stop, started, committed = threading.Event(), threading.Event(), [0]

    def write() -> None:
        producer = _transactional(kafka_bootstrap)
        while not stop.is_set():
            _commit(producer, topic, [b"busy"])
            committed[0] += 1
            if committed[0] >= 20:
                started.set()

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        yield topic, started, committed
    finally:
        stop.set()
        writer.join(60)


def test_the_scan_ends_beside_a_writer_that_never_stops_and_returns_the_callers_own_commit(
        kafka_bootstrap: str, busy_topic: tuple[str, threading.Event, list[int]]) -> None:
    topic, started, committed = busy_topic
    mine = _transactional(kafka_bootstrap)
    _commit(mine, topic, [b"first", b"second"])
    _commit(mine, topic, [b"aborted"], abort=True)
    assert started.wait(60), "the busy writer committed nothing"

    for round_ in range(3):  # each scan starts with a transaction of the other writer open or about to be
        _commit(mine, topic, [b"mine-%d" % round_])
        before = committed[0]
        values = [m.value() for m in read_committed(kafka_bootstrap, [topic], timeout_s=60)]
        assert committed[0] > before, "the other writer stopped: the scan proved nothing"
        # the caller's own commits in their order (the last one's marker may have been written
        # after the call), among the other writer's, and nothing aborted
        ours = [b"first", b"second", *(b"mine-%d" % r for r in range(round_ + 1))]
        assert [v for v in values if v != b"busy"] == ours


def test_a_catch_up_beside_a_busy_writer_reaches_the_end_it_had_and_then_reads_what_it_leads(
        kafka_bootstrap: str, busy_topic: tuple[str, threading.Event, list[int]]) -> None:
    leader, started, committed = busy_topic
    assert started.wait(60), "the busy writer committed nothing"
    follower = _new_topic(kafka_bootstrap, "led")
    _commit(_transactional(kafka_bootstrap), follower, [b"led"])
    before = committed[0]
    reader = PartitionReader(kafka_bootstrap, {(leader, 0): None, (follower, 0): None}, lead=(leader, follower))
    try:
        assert reader.pending == {(leader, 0), (follower, 0)}
        led: list[bytes] = []
        deadline = time.monotonic() + 60
        while (reader.pending or not led) and time.monotonic() < deadline:
            led += [r.value for r in reader.poll(2000, 0.2) if r.topic == follower and r.value is not None]
        assert not reader.pending, "the catch-up never reached the end its partitions had at open"
        assert led == [b"led"]  # the follower is read once its leader reached that end
        assert committed[0] > before, "the other writer stopped: the catch-up proved nothing"
    finally:
        reader.close()
