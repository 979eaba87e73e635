"""Read topics from offset 0 to their current end, read_committed: the one log scan.

Rebuilding an aggregate, rebuilding the projections, verifying the archive and the tests all need
"every committed record up to now". Records of aborted transactions are never returned; a
partition counts as finished at its end-of-partition event (empty partitions are finished from
the start).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Collection, Iterator, Mapping, Sequence

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from watchtower.topics.connection import kafka_config


def read_committed(bootstrap: str, topics: Sequence[str], *, partition: int | Collection[int] | None = None,
                   timeout_s: float = 300.0, start: Mapping[int, int] | None = None) -> Iterator[Message]:
    """Every committed record of `topics` (only `partition` of each, or only those partitions, if given),
    in log order per partition; with `start`, partition p is read from offset ``start[p]`` on
    (a partition missing from it: from the beginning).

    Raises TimeoutError when the end is not reached within `timeout_s`.
    """
    consumer = Consumer({
        **kafka_config(bootstrap),
        "group.id": f"wt-scan-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        "log_level": 3,
    })
    try:
        wanted = None if partition is None else {partition} if isinstance(partition, int) else set(partition)
        assignment: list[TopicPartition] = []
        pending = set()
        for topic in topics:
            for p in consumer.list_topics(topic, timeout=30).topics[topic].partitions:
                if wanted is not None and p not in wanted:
                    continue
                low, high = _watermarks(consumer, TopicPartition(topic, p))
                # Never before the log start: an out-of-range offset would reset to the end.
                first = max(low, (start or {}).get(p, low))
                assignment.append(TopicPartition(topic, p, first if first > low else OFFSET_BEGINNING))
                if high > first:
                    pending.add((topic, p))
        if not pending:
            return
        consumer.assign(assignment)
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {', '.join(topics)} to the end took over {timeout_s:g}s")
            for m in consumer.consume(num_messages=1000, timeout=0.5):
                err = m.error()
                if err is None:
                    yield m
                elif err.code() == KafkaError._PARTITION_EOF:
                    pending.discard((m.topic(), m.partition()))
    finally:
        consumer.close()


def _watermarks(consumer: Consumer, tp: TopicPartition, timeout_s: float = 60.0) -> tuple[int, int]:
    """(low, high) of ``tp``, asking again while the answer is retriable: right after a broker
    failover, or when leadership moves back to a restarted broker, a partition briefly answers
    NOT_LEADER_FOR_PARTITION until the consumer's metadata catches up."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=30)
            return int(low), int(high)
        except KafkaException as exc:
            if time.monotonic() > deadline or not exc.args[0].retriable():
                raise
            time.sleep(0.2)


def end_offsets(bootstrap: str, topic: str, partitions: Collection[int], timeout_s: float = 10.0,
                admin: AdminClient | None = None) -> dict[int, int]:
    """The high watermark of each of ``partitions`` of ``topic``: the offset after its last record,
    open transactions and commit markers included. `admin`: a client to ask through (a new one
    otherwise).

    Not a read_committed consumer's ``get_watermark_offsets``: that answers the last stable offset,
    which stays at the first record of a transaction until the coordinator writes its commit marker,
    a moment after ``commit_transaction`` returned."""
    admin = admin or AdminClient({**kafka_config(bootstrap), "log_level": 3})
    futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in partitions},
                                 isolation_level=IsolationLevel.READ_UNCOMMITTED, request_timeout=timeout_s)
    return {tp.partition: int(f.result(timeout=timeout_s).offset) for tp, f in futures.items()}


class HighWatermarks:
    """`end_offsets` through one admin client, made on first use and kept (a worker asks at every
    snapshot: a new client each time costs a connection and a metadata round trip)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self._admin: AdminClient | None = None

    def __call__(self, topic: str, partitions: Collection[int], timeout_s: float = 10.0) -> dict[int, int]:
        if self._admin is None:
            self._admin = AdminClient({**kafka_config(self.bootstrap), "log_level": 3})
        return end_offsets(self.bootstrap, topic, partitions, timeout_s, admin=self._admin)
