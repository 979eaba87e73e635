"""Read topics from offset 0 to their current end, read_committed: the one log scan.

Rebuilding an aggregate, rebuilding the projections, verifying the archive and the tests all need
"every committed record up to now". Records of aborted transactions are never returned.

"Now" is each partition's high watermark when the scan starts: a partition is finished once the
consumer's position reaches it (or at an end-of-partition event, whichever comes first), and
records written after it are left to whoever tails the topic next. Not the end-of-partition event
alone: a read_committed consumer gets one only when its position meets the high watermark with
no transaction open, which on a partition that a worker writes a transaction to every few
milliseconds may not happen for minutes. Not the last stable offset either: it stays at the first
record of a transaction the caller has just committed until the commit marker is written, so the
caller would not read its own writes.
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
    """Every committed record of `topics` (only `partition` of each, or only those partitions, if given)
    written before the call (see the module docstring), in log order per partition; with `start`,
    partition p is read from offset ``start[p]`` on (a partition missing from it: from the beginning).

    Raises TimeoutError when the end is not reached within `timeout_s` (a transaction left open
    below it holds the scan until the broker aborts it).
    """
    consumer = Consumer({
        **kafka_config(bootstrap),
        "group.id": f"wt-scan-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        "log_level": 3,
    })
    admin = AdminClient({**kafka_config(bootstrap), "log_level": 3})
    try:
        wanted = None if partition is None else {partition} if isinstance(partition, int) else set(partition)
        assignment: list[TopicPartition] = []
        ends: dict[tuple[str, int], int] = {}
        for topic in topics:
            chosen = [p for p in consumer.list_topics(topic, timeout=30).topics[topic].partitions
                      if wanted is None or p in wanted]
            if not chosen:
                continue
            for p, (low, high) in _log_bounds(admin, topic, chosen).items():
                # Never before the log start: an out-of-range offset would reset to the end.
                first = max(low, (start or {}).get(p, low))
                assignment.append(TopicPartition(topic, p, first if first > low else OFFSET_BEGINNING))
                if high > first:
                    ends[(topic, p)] = high
        if not ends:
            return
        consumer.assign(assignment)
        deadline = time.monotonic() + timeout_s
        while ends:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {', '.join(topics)} to the end took over {timeout_s:g}s")
            for m in consumer.consume(num_messages=1000, timeout=0.5):
                where = (str(m.topic()), int(m.partition() or 0))
                err = m.error()
                if err is None:
                    if where in ends and int(m.offset() or 0) < ends[where]:
                        yield m
                elif err.code() == KafkaError._PARTITION_EOF:
                    ends.pop(where, None)
            _drop_reached(consumer, ends)
    finally:
        consumer.close()


def _drop_reached(consumer: Consumer, ends: dict[tuple[str, int], int]) -> None:
    """Forget (and pause) each partition of `ends` whose position reached its end. The position is
    the consumer's own (no request); it moves past commit markers and aborted records as well as
    past the records it returned."""
    for tp in consumer.position([TopicPartition(t, p) for t, p in ends]):
        if tp.offset >= ends[(tp.topic, tp.partition)]:
            del ends[(tp.topic, tp.partition)]
            consumer.pause([tp])


def _log_bounds(admin: AdminClient, topic: str, partitions: list[int],
                timeout_s: float = 60.0) -> dict[int, tuple[int, int]]:
    """(log start, high watermark) of each of `partitions` of `topic`, open transactions included,
    asking again while the answer is retriable: right after a broker failover, or when leadership
    moves back to a restarted broker, a partition briefly answers NOT_LEADER_OR_FOLLOWER until the
    client's metadata catches up."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            lows = _offsets(admin, topic, partitions, OffsetSpec.earliest())
            highs = _offsets(admin, topic, partitions, OffsetSpec.latest())
            return {p: (lows[p], highs[p]) for p in partitions}
        except KafkaException as exc:
            if time.monotonic() > deadline or not exc.args[0].retriable():
                raise
            time.sleep(0.2)


def _offsets(admin: AdminClient, topic: str, partitions: Collection[int], spec: OffsetSpec,
             timeout_s: float = 30.0) -> dict[int, int]:
    futures = admin.list_offsets({TopicPartition(topic, p): spec for p in partitions},
                                 isolation_level=IsolationLevel.READ_UNCOMMITTED, request_timeout=timeout_s)
    return {tp.partition: int(f.result(timeout=timeout_s).offset) for tp, f in futures.items()}


def end_offsets(bootstrap: str, topic: str, partitions: Collection[int], timeout_s: float = 10.0,
                admin: AdminClient | None = None) -> dict[int, int]:
    """The high watermark of each of ``partitions`` of ``topic``: the offset after its last record,
    open transactions and commit markers included. `admin`: a client to ask through (a new one
    otherwise).

    Not a read_committed consumer's ``get_watermark_offsets``: that answers the last stable offset,
    which stays at the first record of a transaction until the coordinator writes its commit marker,
    a moment after ``commit_transaction`` returned."""
    return _offsets(admin or AdminClient({**kafka_config(bootstrap), "log_level": 3}), topic, partitions,
                    OffsetSpec.latest(), timeout_s)


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
