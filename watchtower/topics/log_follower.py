"""`LogFollower`: every partition of one topic, read_committed, from its first record on, for as long as it lives.

The follower is assigned the partitions (it never joins its group, never commits), so each process
that follows a topic sees all of it, in log order per partition. `poll` answers what arrived as
plain values: a `records.Record` for each record, an `records.EndOfPartition` whenever a partition is read to its
current end (so a reader can tell "caught up" from "nothing came"). Transient client errors are the
client's to retry and never surface; a client that failed for good raises `BrokerError`.
"""

from __future__ import annotations

import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from watchtower.topics.batches import next_batch
from watchtower.topics.connection import kafka_config
from watchtower.topics.errors import BrokerError
from watchtower.topics.metadata import partitions
from watchtower.topics.records import EndOfPartition, Record, end_of_partition, record_of


class LogFollower:
    """Follows every partition of `topic` from the beginning; `group_prefix` names its (never joined) group.

    `TopicUnavailableError` at construction when the topic is not served. Not thread-safe: one
    thread polls it.
    """

    def __init__(self, bootstrap: str, topic: str, *, group_prefix: str) -> None:
        self.topic = topic
        self._consumer = Consumer(kafka_config(bootstrap, **{
            "group.id": f"{group_prefix}-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "log_level": 3,
        }))
        try:
            #: the topic's partitions, ascending
            self.partitions = partitions(self._consumer, topic)
        except BaseException:
            self._consumer.close()
            raise
        self._consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in self.partitions])

    def poll(self, max_records: int, timeout_s: float) -> list[Record | EndOfPartition]:
        """What arrived, in log order per partition: the first waited for up to `timeout_s`, the rest
        only if already fetched (`batches.next_batch`). `BrokerError` when the client failed for good."""
        try:
            batch = next_batch(self._consumer, max_records, timeout_s)
        except KafkaException as exc:  # fatal consumer errors only; transient ones come as records
            raise BrokerError(str(exc)) from exc
        out: list[Record | EndOfPartition] = []
        for msg in batch:
            err = msg.error()
            if err is None:
                out.append(record_of(msg))
            elif err.code() == KafkaError._PARTITION_EOF:
                out.append(end_of_partition(msg))
        return out

    def close(self) -> None:
        """Leave the partitions."""
        self._consumer.close()
