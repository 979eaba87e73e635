"""`OffsetRangeReader`: a stretch of one partition of a topic, by offset, read_committed, on demand.

A reader that serves a page out of the log (the records between two offsets it has indexed) reads
one partition from an offset up to a last offset or the partition's end, and stops there. Each
calling thread has its own consumer, made on its first read and kept for the next (a read is then
one assign and one contiguous fetch, no group and no connection set-up); the consumer is assigned
the partition (it never joins its group, never commits) and unassigned when the read ends. Records
come as `records.Record`s of plain values; transaction markers and records of aborted transactions
never show, and transient client errors are the client's to retry.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Generator

from confluent_kafka import Consumer, KafkaError, TopicPartition

from watchtower.topics.batches import next_batch
from watchtower.topics.connection import kafka_config
from watchtower.topics.records import Record, record_of

#: The most records one fetch hands over.
MAX_BATCH = 1000


class OffsetRangeReader:
    """Reads stretches of `topic`'s partitions; `group_prefix` names its (never joined) groups. Thread-safe."""

    def __init__(self, bootstrap: str, topic: str, *, group_prefix: str = "wt-reader") -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.group_prefix = group_prefix
        self._local = threading.local()
        self._all: list[Consumer] = []
        self._lock = threading.Lock()

    def _consumer(self) -> Consumer:
        consumer = getattr(self._local, "consumer", None)
        if consumer is None:
            consumer = Consumer({
                **kafka_config(self.bootstrap),
                "group.id": f"{self.group_prefix}-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "fetch.wait.max.ms": 10,
                "log_level": 3,
            })
            self._local.consumer = consumer
            with self._lock:
                self._all.append(consumer)
        return consumer

    def read(self, partition: int, first_offset: int, last_offset: int | None,
             timeout_s: float = 10.0) -> Generator[Record, None, None]:
        """The committed records of `partition` from `first_offset` to `last_offset` (inclusive; None:
        to the partition's end), in log order.

        It ends after `last_offset`, or at the end of the partition (once the records fetched with
        that end are handed over). A caller that has what it wants stops early by closing the
        generator (``contextlib.closing``), which frees the thread's consumer for its next read.
        TimeoutError when the stretch is not read within `timeout_s` (the caller's time between
        records counts too).
        """
        consumer = self._consumer()
        consumer.assign([TopicPartition(self.topic, partition, first_offset)])
        try:
            deadline = time.monotonic() + timeout_s
            position = first_offset
            while time.monotonic() < deadline:
                # Ask for no more records than the range can hold, and never wait for a batch to
                # fill: the range's offsets include transaction markers, which are never delivered,
                # so consume(left, timeout) would wait out its whole timeout on every cold read.
                left = MAX_BATCH if last_offset is None else max(1, min(MAX_BATCH, last_offset - position + 1))
                done = False
                for m in next_batch(consumer, left, 0.02):
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            done = True
                        continue
                    record = record_of(m)
                    offset = record.offset
                    position = offset + 1
                    if last_offset is not None and offset > last_offset:
                        return
                    yield record
                    if offset == last_offset:
                        return
                if done:
                    return
            raise TimeoutError(f"reading {self.topic}[{partition}] from {first_offset} took over {timeout_s}s")
        finally:
            consumer.unassign()

    def close(self) -> None:
        """Close every thread's consumer."""
        with self._lock:
            for consumer in self._all:
                consumer.close()
            self._all.clear()
