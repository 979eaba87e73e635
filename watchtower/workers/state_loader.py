"""Rebuild the aggregates of the owned partitions: the latest snapshot plus the committed events after it;
and the scan of one partition a side worker's restore reads (`scan_partition`)."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from typing import Final

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from watchtower.topics.connection import kafka_config
from watchtower.topics.reader import end_offsets, read_committed
from watchtower.topics.records import Record, record_of
from watchtower.workers.aggregate import Aggregate
from watchtower.workers.aggregates import default_aggregates
from watchtower.workers.event_fold import EventFold, PartitionState, Quarantined
from watchtower.workers.snapshots import latest_snapshots

log = logging.getLogger("watchtower.rebuild")

__all__ = ["CommittedOffsets", "PartitionState", "Quarantined", "committed_offsets", "load_partitions",
           "scan_partition", "wait_until_settled"]

#: How long a rebuild waits for open transactions on its partitions to end before giving up (the
#: caller retries). A dead owner's transaction is aborted by the broker after its timeout.
SETTLE_TIMEOUT_S: Final = 30.0
#: A scan that reads nothing for this long gives up (TimeoutError): the rebuild is retried later.
SCAN_TIMEOUT_S: Final = 60.0


def load_partitions(bootstrap: str, events_topic: str, partitions: Collection[int], partition_count: int, *,
                    timeout_s: float = 120.0, now_block_height: int | None = None,
                    on_quarantine: Callable[[Quarantined], None] | None = None,
                    aggregates: Sequence[Aggregate] | None = None,
                    snapshots_topic: str | None = None) -> dict[int, PartitionState]:
    """Rebuild the aggregates of the given ``partitions`` of ``events_topic`` (which has
    ``partition_count``), in one scan of the log.

    First waits until no transaction is open on those partitions (:func:`wait_until_settled`).
    With ``snapshots_topic``, each partition starts from its latest valid snapshot
    (:mod:`watchtower.workers.snapshots`) and folds only the events after it; a partition without
    one, or whose snapshot is quarantined, folds every event. The events are read
    ``read_committed`` to the end: an aborted transaction never leaks into the state, and a
    committed one whose markers were still being written is not missed. A record that breaks a
    rule (see :mod:`watchtower.workers.event_fold`) is logged with its topic, partition, offset and
    reason, passed to ``on_quarantine``, listed in its partition's result and skipped: nothing a
    record contains makes this raise. It raises only when the log cannot be read (TimeoutError,
    KafkaException). ``now_block_height`` is the current block, to refuse events stamped in the
    future (None: not checked).

    A partition that never settles is never folded past its open transaction: a hanging one (an
    unclean broker restart lost its markers) is left for the operator (docs/operations.md), since
    deciding again what it holds would write its sequences twice once it ends.
    """

    def quarantine(entry: Quarantined) -> None:
        log.error("quarantined %s[%d]@%d: %s", entry.topic, entry.partition, entry.offset, entry.reason)
        if on_quarantine is not None:
            on_quarantine(entry)

    hosted = list(aggregates) if aggregates is not None else default_aggregates()
    if not partitions:
        return {}
    wait_until_settled(bootstrap, events_topic, list(partitions), min(timeout_s, SETTLE_TIMEOUT_S))
    starts: dict[int, PartitionState] = {}
    refused: dict[int, list[Quarantined]] = {}
    if snapshots_topic is not None:
        ends = end_offsets(bootstrap, events_topic, list(partitions))
        for p, found in latest_snapshots(bootstrap, snapshots_topic, partitions, partition_count, hosted, ends,
                                         quarantine, timeout_s=timeout_s).items():
            if isinstance(found, Quarantined):
                refused[p] = [found]
            else:
                starts[p] = found
    folds = {p: EventFold(events_topic, p, partition_count, on_quarantine=quarantine,
                          now_block_height=now_block_height, aggregates=hosted, state=starts.get(p))
             for p in partitions}
    for p, entries in refused.items():
        folds[p].state.quarantined.extend(entries)
    offsets = {p: s.snapshot_offset for p, s in starts.items() if s.snapshot_offset is not None}
    for m in read_committed(bootstrap, [events_topic], partition=list(folds), timeout_s=timeout_s, start=offsets):
        folds[int(m.partition() or 0)].apply(m.key(), m.value(), int(m.offset() or 0))
    return {p: fold.state for p, fold in folds.items()}


def committed_offsets(bootstrap: str, group: str, partitions: list[TopicPartition],
                      timeout_s: float, *, stable: bool = True) -> list[TopicPartition]:
    """The group's committed offsets of ``partitions``, *stable* ones (KIP-447): the fetch waits
    until no transaction that commits offsets for them is still open. With ``stable=False``, the
    last committed offsets, whatever is still open.

    Asked by a short-lived client that never joins the group, so it neither disturbs the group nor
    depends on the worker's own consumer, whose group state may be waiting for a rebalance the
    worker has not served yet (its ``committed()`` then blocks). Raises KafkaException on failure.
    """
    consumer = Consumer({
        **kafka_config(bootstrap),
        "group.id": group,
        "client.id": f"wt-offsets-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        # librdkafka asks for stable offsets exactly when the consumer reads committed records.
        "isolation.level": "read_committed" if stable else "read_uncommitted",
        "log_level": 3,
    })
    try:
        return list(consumer.committed(partitions, timeout=timeout_s))
    finally:
        consumer.close()


class CommittedOffsets:
    """A group's committed offsets for a rebuild, stable while that can work.

    The stable fetch (KIP-447) waits out every transaction still open on the offsets. After an
    unclean broker restart one may never settle: an offset commit of a fenced producer that reached
    the group coordinator after its abort (a hanging transaction), which only a later commit clears,
    and nobody commits before the rebuild. After ``stable_tries`` stable fetches in a row timed out
    (together longer than the transaction timeout, so every real open transaction has been aborted
    by its coordinator by then) the next fetch reads the last committed offsets instead. A stable
    fetch that succeeds resets the count; after a fallback the next fetch tries stable offsets
    once more before falling back again (the hanging commit lasts until the group commits anew,
    and the rebalances that follow a restart would otherwise wait out every try again).
    """

    def __init__(self, bootstrap: str, group: str, *, timeout_s: float, stable_tries: int) -> None:
        self.bootstrap, self.group = bootstrap, group
        self.timeout_s, self.stable_tries = timeout_s, stable_tries
        self.timeouts_in_a_row = 0

    @property
    def stable(self) -> bool:
        """Whether the next fetch asks for stable offsets."""
        return self.timeouts_in_a_row < self.stable_tries

    def fetch(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """The committed offsets of ``partitions``; raises KafkaException on failure (counted)."""
        stable = self.stable
        try:
            found = committed_offsets(self.bootstrap, self.group, partitions, self.timeout_s, stable=stable)
        except KafkaException:
            self.timeouts_in_a_row += 1
            raise
        self.timeouts_in_a_row = 0 if stable else self.stable_tries - 1
        if not stable:
            log.warning("group %s: stable offset fetches kept timing out for longer than the transaction timeout; "
                        "read the last committed offsets instead", self.group)
        return found

    def offsets(self, topic: str, partitions: Collection[int]) -> dict[int, int]:
        """`fetch` of `partitions` of `topic`, as ``{partition: committed offset}`` (negative: none)."""
        return {tp.partition: tp.offset for tp in self.fetch([TopicPartition(topic, p) for p in partitions])}


def wait_until_settled(bootstrap: str, topic: str, partitions: list[int], timeout_s: float) -> None:
    """Return once no transaction is open on ``topic``'s ``partitions``: each one's last stable
    offset has reached its high watermark. Raises TimeoutError after ``timeout_s``.

    A read_committed scan stops at the last stable offset. Right after a transaction commits, and
    until the coordinator has written its markers, that offset is still *before* the committed
    batch; a fold started then would miss a batch whose consumed offsets are already committed,
    and the worker would decide the next commands against a stale head. Waiting for LSO == HWM
    closes that window (new transactions on these partitions can only come from their owner,
    which is the caller, or from fenced zombies whose writes are aborted).
    """
    admin = AdminClient({**kafka_config(bootstrap), "log_level": 3})
    deadline = time.monotonic() + timeout_s
    pending = [TopicPartition(topic, p) for p in partitions]
    while pending:
        stable = _latest(admin, pending, IsolationLevel.READ_COMMITTED)
        high = _latest(admin, pending, IsolationLevel.READ_UNCOMMITTED)
        pending = [tp for tp in pending if stable[tp.partition] < high[tp.partition]]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic} partitions {[tp.partition for tp in pending]} still have an open "
                               f"transaction after {timeout_s:g}s")
        time.sleep(0.05)


def _latest(admin: AdminClient, tps: list[TopicPartition], isolation: IsolationLevel) -> dict[int, int]:
    futures = admin.list_offsets({tp: OffsetSpec.latest() for tp in tps}, isolation_level=isolation,
                                 request_timeout=10)
    return {tp.partition: int(f.result().offset) for tp, f in futures.items()}


def scan_partition(bootstrap: str, topic: str, partition: int, on_record: Callable[[Record], object],
                   start: int = 0,
                   *, group: str, catch_up: bool = False, timeout_s: float = SCAN_TIMEOUT_S) -> int:
    """Feed every committed record of `topic` `partition` from `start` to `on_record`; the offset reached.

    Without `catch_up` it reads to the partition's end (its end-of-partition event): for a topic
    nobody else writes meanwhile. With `catch_up` it stops once its position reaches the end offset
    the partition had when the scan began (the caller goes on consuming from the offset returned;
    the position also steps over transaction markers and aborted records, which are never
    delivered): a partition that is written all the time holds an open transaction nearly always,
    so a read_committed reader may never see its end event. A scan that makes no progress for `timeout_s` raises
    TimeoutError (the caller retries the rebuild later), so it can never hang the worker. `group` names
    the reader (it joins no group and commits nothing).

    A side worker's restore reads its partitions with it (push delivery: ``events`` and
    ``delivery.state``; replay: ``replay``)."""
    consumer = Consumer({**kafka_config(bootstrap), "group.id": group,
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True, "log_level": 3})
    try:
        tp = TopicPartition(topic, partition)
        low, high = consumer.get_watermark_offsets(tp, timeout=30)
        if high <= max(low, start):
            return int(max(high, start))
        consumer.assign([TopicPartition(topic, partition, start if start > low else OFFSET_BEGINNING)])
        # Done when the reader's position reaches `high`, not when a record at high-1 was seen: the
        # offsets before `high` may be transaction markers and aborted records, which are never
        # delivered but which the position steps over.
        reached = start
        stalled_at = time.monotonic() + timeout_s
        while True:
            batch = consumer.consume(num_messages=1000, timeout=1.0)
            for msg in batch:
                err = msg.error()
                if err is None:
                    on_record(record_of(msg))
                    reached = max(reached, int(msg.offset() or 0) + 1)
                elif err.code() == KafkaError._PARTITION_EOF:
                    return max(reached, int(msg.offset() or 0))
            position = consumer.position([tp])[0].offset
            moved = position > reached
            reached = max(reached, position)
            if catch_up and reached >= high:
                return int(reached)
            if batch or moved:
                stalled_at = time.monotonic() + timeout_s
            elif time.monotonic() > stalled_at:
                raise TimeoutError(f"reading {topic}[{partition}] made no progress for {timeout_s:g}s at offset "
                                   f"{reached} (end {high}); the rebuild is tried again")
    finally:
        consumer.close()
