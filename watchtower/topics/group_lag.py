"""A consumer group's lag, read from Kafka: its committed offsets against its topics' ends.

The lag per partition is the records a ``read_committed`` reader would still get after the group's
committed offset. The offset arithmetic (last stable offset minus committed offset; a partition
never committed counts from its start) overstates it on a transactionally written topic: a
transaction's commit marker takes an offset after its last record, and an aborted transaction's
records and marker take offsets no reader ever gets. So a group that consumed everything shows a
raw lag of 1 or more. A reading therefore reads, for each partition whose raw lag is at most
`CHECK_AT_MOST`, what a ``read_committed`` reader gets from the committed offset to the end, and
counts those records; a larger raw lag is reported as it is (``exact``: false), an upper bound.

The committed offsets are read by a consumer of the group that never joins it, not by the admin
client: its ListConsumerGroupOffsets crashed the process on a fresh broker whose group coordinator
was still loading (a segmentation fault in the client).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from confluent_kafka import OFFSET_BEGINNING, Consumer, IsolationLevel, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from watchtower.topics.connection import kafka_config

#: A partition with a raw lag up to this is read to count its records exactly.
CHECK_AT_MOST: Final = 50


@dataclass
class GroupLag:
    """One consumer group's committed offsets against the ends of its topics' partitions."""

    group: str
    #: (topic, partition) -> (committed offset or None, last stable offset)
    partitions: dict[tuple[str, int], tuple[int | None, int]] = field(default_factory=dict)
    #: (topic, partition) -> records a read_committed reader still gets, where they were counted
    counted: dict[tuple[str, int], int] = field(default_factory=dict)

    def raw_lag_of(self, topic: str, partition: int) -> int:
        committed, end = self.partitions[(topic, partition)]
        return max(0, end - (committed if committed is not None else 0))

    def lag_of(self, topic: str, partition: int) -> int:
        counted = self.counted.get((topic, partition))
        return self.raw_lag_of(topic, partition) if counted is None else counted

    @property
    def total(self) -> int:
        return sum(self.lag_of(t, p) for t, p in self.partitions)

    @property
    def exact(self) -> bool:
        return all(tp in self.counted or self.raw_lag_of(*tp) == 0 for tp in self.partitions)

    def as_json(self) -> dict[str, Any]:
        return {"group": self.group, "lag": self.total, "exact": self.exact,
                "partitions": [{"topic": t, "partition": p, "committed": c, "end": e, "lag": self.lag_of(t, p)}
                               for (t, p), (c, e) in sorted(self.partitions.items())]}


class GroupLagReader:
    """Reads groups' lag through clients made on first use and kept until `close`: one admin client,
    and per group one consumer that reads its committed offsets (a reader asked every few seconds
    would otherwise pay connections and metadata round trips each time).

    `quiet`: the clients log nothing themselves (a caller that reports failures its own way; otherwise
    librdkafka prints every failed connect). Not thread-safe.
    """

    def __init__(self, bootstrap: str, *, quiet: bool = False) -> None:
        self.bootstrap = bootstrap
        self._log_level = 0 if quiet else 3
        self._admin: AdminClient | None = None
        self._offsets: dict[str, Consumer] = {}

    def read(self, group: str, topics: Iterable[str], timeout_s: float = 10.0) -> GroupLag:
        """The lag of `group` on every partition of `topics`, each Kafka call bounded by `timeout_s`
        (the client's exception when the cluster does not answer)."""
        if self._admin is None:
            self._admin = AdminClient({**kafka_config(self.bootstrap), "log_level": self._log_level})
        names = list(topics)
        md = self._admin.list_topics(timeout=timeout_s)
        tps = [TopicPartition(t, p) for t in names if t in md.topics for p in sorted(md.topics[t].partitions)]
        out = GroupLag(group)
        if not tps:
            return out
        reader = self._offsets.get(group)
        if reader is None:
            # Never joins the group: `committed` only asks its coordinator.
            reader = self._offsets[group] = Consumer({**kafka_config(self.bootstrap), "group.id": group,
                                                      "enable.auto.commit": False, "log_level": 0})
        committed = {(tp.topic, tp.partition): tp.offset for tp in reader.committed(tps, timeout=timeout_s)}
        ends = self._admin.list_offsets({tp: OffsetSpec.latest() for tp in tps},
                                        isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=timeout_s)
        for tp, future in ends.items():
            end = int(future.result(timeout=timeout_s).offset)
            c = committed.get((tp.topic, tp.partition))
            out.partitions[(tp.topic, tp.partition)] = (c if c is not None and c >= 0 else None, end)
        small = {tp: out.partitions[tp] for tp in out.partitions if 0 < out.raw_lag_of(*tp) <= CHECK_AT_MOST}
        if small:
            out.counted = _count_records(self.bootstrap, small, timeout_s)
        return out

    def close(self) -> None:
        """Close the offsets consumers (the admin client needs no closing)."""
        for reader in self._offsets.values():
            reader.close()
        self._offsets.clear()


def group_lag(bootstrap: str, group: str, topics: Iterable[str], timeout_s: float = 10.0) -> GroupLag:
    """One reading of `group`'s lag (`GroupLagReader.read`) through clients of its own, closed after."""
    reader = GroupLagReader(bootstrap)
    try:
        return reader.read(group, topics, timeout_s)
    finally:
        reader.close()


def _count_records(bootstrap: str, ranges: Mapping[tuple[str, int], tuple[int | None, int]],
                   timeout_s: float) -> dict[tuple[str, int], int]:
    """Records a read_committed reader gets in each [committed, end) range; partitions that did not
    reach their end within `timeout_s` are left out (their raw lag stands)."""
    consumer = Consumer({**kafka_config(bootstrap), "group.id": f"wt-lag-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True, "log_level": 3})
    counts = dict.fromkeys(ranges, 0)
    pending = set(ranges)
    try:
        consumer.assign([TopicPartition(t, p, c if c is not None else OFFSET_BEGINNING)
                         for (t, p), (c, _end) in ranges.items()])
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=500, timeout=0.2):
                tp = (str(m.topic()), int(m.partition() or 0))
                if tp not in pending:
                    continue
                err = m.error()
                if err is None:
                    if int(m.offset() or 0) < ranges[tp][1]:
                        counts[tp] += 1
                    else:
                        pending.discard(tp)
                elif err.code() == KafkaError._PARTITION_EOF:
                    pending.discard(tp)
    finally:
        consumer.close()
    return {tp: n for tp, n in counts.items() if tp not in pending}
