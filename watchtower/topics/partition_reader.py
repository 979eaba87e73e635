"""`PartitionReader`: assigned topic partitions from start offsets on, read_committed, for as long as it is polled.

The reader is assigned its partitions (it never joins a group; with a group name it only records
positions there, for lag readers), and answers each record as a `records.Record` of plain values.
It tells which partitions have not yet reached the end they had at open (`pending`), can hold one
topic's partitions back until another topic's partition of the same number has reached that end
(`lead`), and measures how far each partition is behind its end (`lag`), all from the client's own
state. Transient client errors are the client's to retry and never surface; a client that failed
for good raises `BrokerError`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from watchtower.topics.batches import failed_fatally, next_batch
from watchtower.topics.connection import kafka_config
from watchtower.topics.errors import BrokerError
from watchtower.topics.records import Record, record_of

log = logging.getLogger("watchtower.topics.partition_reader")

TopicPartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class LagReading:
    """One measurement of a topic partition: records behind its end, and the timestamp (ms) of the
    newest record read from it (None before the first)."""

    behind: int
    newest_ms: int | None


class PartitionReader:
    """Committed records of some topic partitions, each from a start offset on.

    `starts` maps each (topic, partition) to the offset to read from (None: from the beginning; an
    offset before the log start reads from the log start). Blocking (confluent-kafka); run it in a
    worker thread. `pending` holds the partitions that have not yet reached the end they had at
    open (its last stable offset then): a partition leaves it once the consumer's position reaches
    that end, or at its first end-of-partition event if that comes first. Not at the event alone:
    a read_committed consumer gets one only when no transaction is open at the end of the
    partition, which on a partition a stream worker writes a transaction to every few milliseconds
    may not happen for minutes. Every partition is read on past its end, for as long as the reader
    is polled.

    With `lead` = (leader, follower), a follower partition is not fetched until the leader partition
    of the same number has reached its end at open (a follower with nothing pending is fetched at
    once). A reader whose follower records depend on leader records then never holds a follower
    record whose leader record is still to come at open.

    `fold_group` names the group `commit_positions` records positions in (a throwaway name
    otherwise). `lag` is a fresh measurement at most every `lag_every_s`: set by `poll`, for the
    caller to take and clear.
    """

    def __init__(self, bootstrap: str, starts: Mapping[TopicPartitionKey, int | None],
                 fold_group: str | None = None, lead: tuple[str, str] | None = None, *,
                 lag_every_s: float = 1.0) -> None:
        self._consumer = Consumer({
            **kafka_config(bootstrap),
            # assign() only: it never joins the group. With `fold_group` it commits positions
            # there (`commit_positions`), for lag readers only.
            "group.id": fold_group or f"wt-catch-up-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            # The reader lives as long as its caller's assignment: bound what librdkafka prefetches
            # for a reader that lags (64 MiB by default) so the process's memory stays within its budget.
            "queued.max.messages.kbytes": 16384,
            "log_level": 3,
        })
        self.pending: set[TopicPartitionKey] = set()
        #: The latest lag measurement per topic partition, taken by the polling thread (None: none new).
        self.lag: dict[TopicPartitionKey, LagReading] | None = None
        self._lag_every_s = lag_every_s
        self._begins: dict[TopicPartitionKey, int] = {}
        self._ends: dict[TopicPartitionKey, int] = {}  # of the pending partitions: the end they had at open
        self._newest_ms: dict[TopicPartitionKey, int] = {}
        self._next_lag = 0.0
        assignment = []
        for (topic, partition), start in starts.items():
            low, high = self._consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
            begin = low if start is None else max(start, low)
            self._begins[(topic, partition)] = begin
            if begin < high:
                self.pending.add((topic, partition))
                self._ends[(topic, partition)] = high
            assignment.append(TopicPartition(topic, partition, OFFSET_BEGINNING if start is None else begin))
        self._held: dict[TopicPartitionKey, TopicPartition] = {}  # leader partition -> its held follower
        if assignment:
            self._consumer.assign(assignment)
        if lead is not None:
            leader, follower = lead
            self._held = {(leader, p): TopicPartition(follower, p) for t, p in self.pending
                          if t == leader and (follower, p) in self._begins}
            if self._held:
                self._consumer.pause(list(self._held.values()))

    def poll(self, max_records: int = 2000, timeout_s: float = 0.2) -> list[Record]:
        """The next records, in log order per partition (`next_batch`: a live record is handed over
        as soon as it is committed, never held for a batch to fill). `BrokerError` when the client
        failed for good."""
        records = []
        for m in next_batch(self._consumer, max_records, timeout_s):
            err = m.error()
            if err is None:
                record = record_of(m)
                records.append(record)
                self._newest_ms[(record.topic, record.partition)] = record.timestamp_ms
                continue
            tp = (str(m.topic()), int(m.partition() or 0))
            if err.code() == KafkaError._PARTITION_EOF:
                self._reached(tp)
            elif failed_fatally(err):
                raise BrokerError(str(err))
            else:
                log.warning("reading %s[%s]: %s (the client retries)", tp[0], tp[1], err)
        if self.pending:
            for position in self._consumer.position([TopicPartition(t, p) for t, p in self.pending]):
                key = (str(position.topic), int(position.partition))
                if position.offset >= self._ends[key]:  # past commit markers and aborted records too
                    self._reached(key)
        if time.monotonic() >= self._next_lag:
            self._next_lag = time.monotonic() + self._lag_every_s
            self.lag = self._measure_lag()
        return records

    def _reached(self, tp: TopicPartitionKey) -> None:
        """`tp` reached the end it had at open: no longer pending, and its follower is read from here on."""
        self.pending.discard(tp)
        follower = self._held.pop(tp, None)
        if follower is not None:
            self._consumer.resume([follower])

    def _measure_lag(self) -> dict[TopicPartitionKey, LagReading]:
        """Records behind each partition's end, from the client's cached watermarks (no broker request)."""
        out = {}
        for tp in self._consumer.position(self._consumer.assignment()):
            key = (str(tp.topic), int(tp.partition))
            _low, high = self._consumer.get_watermark_offsets(tp, cached=True)
            position = tp.offset if tp.offset >= 0 else self._begins.get(key, 0)
            if high >= 0:
                out[key] = LagReading(high - position, self._newest_ms.get(key))
        return out

    def commit_positions(self, positions: Mapping[TopicPartitionKey, int]) -> None:
        """Record `positions` (the next offset to read, per topic partition) in the reader's group,
        asynchronously; a failed commit is retried by the next call."""
        if not positions:
            return
        try:
            self._consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in sorted(positions.items())],
                                  asynchronous=True)
        except KafkaException as exc:
            log.debug("recording the positions failed: %s", exc)

    def close(self) -> None:
        """Leave the partitions."""
        self._consumer.close()
