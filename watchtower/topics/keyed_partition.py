"""`KeyedPartitionReader`: the one partition of a topic that a key hashes to, read_committed, by assignment.

A reader of the records addressed to one key (a subscriber's pushes, a requester's replays, both on
``deliveries``) needs only the partition every producer puts that key in
(`partitioning.partition_for_key`, murmur2). The reader is assigned it (never joins its group,
never commits), reads it ``read_committed`` (a transaction that a crash aborted never shows), and
answers each record as a `records.Record` of plain values: the records of other keys on the same
partition included, for the caller to count or skip. Transient client errors are the client's to
retry and never surface; a fatal one is raised as the client's exception.
"""

from __future__ import annotations

import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from watchtower.protocol.errors import InvalidArgumentError
from watchtower.topics.batches import failed_fatally, next_batch
from watchtower.topics.connection import kafka_config
from watchtower.topics.errors import TopicUnavailableError
from watchtower.topics.metadata import partitions
from watchtower.topics.partitioning import partition_for_key
from watchtower.topics.records import Record, record_of


class KeyedPartitionReader:
    """The partition of `topic` that `key` hashes to; `group_prefix` names its (never joined) group.

    INVALID_ARGUMENT at construction when the topic does not exist (most likely a wrong prefix).
    Nothing is read until `start_at`. Use as a context manager, or call `close`. Not thread-safe:
    one thread polls it.
    """

    def __init__(self, bootstrap: str, topic: str, key: bytes, *, group_prefix: str) -> None:
        self.topic = topic
        self.key = key
        self._consumer: Consumer | None = Consumer(kafka_config(bootstrap, **{
            "group.id": f"{group_prefix}-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "log_level": 3,
        }))
        try:
            count = len(partitions(self._consumer, topic))
        except TopicUnavailableError:
            self.close()
            raise InvalidArgumentError(f"topic {topic} does not exist; is the deployment's prefix right "
                                       "(WATCHTOWER_TOPIC_PREFIX)?") from None
        except BaseException:
            self.close()
            raise
        self.partition = partition_for_key(key, count)

    def __enter__(self) -> KeyedPartitionReader:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _client(self) -> Consumer:
        if self._consumer is None:
            raise InvalidArgumentError(f"this reader of {self.topic} is closed; create a new one")
        return self._consumer

    def end(self) -> int:
        """The partition's high watermark now: the offset the next record written will take."""
        return int(self._client().get_watermark_offsets(TopicPartition(self.topic, self.partition), timeout=30)[1])

    def start_at(self, offset: int | None) -> None:
        """Read from `offset` on (None: from the partition's beginning)."""
        self._client().assign([TopicPartition(self.topic, self.partition,
                                              OFFSET_BEGINNING if offset is None else offset)])

    def poll(self, timeout_s: float, max_records: int = 500) -> list[Record]:
        """The records that arrived, in log order: the first waited for up to `timeout_s`, the rest
        only if already fetched (`batches.next_batch`)."""
        out: list[Record] = []
        for m in next_batch(self._client(), max_records, timeout_s):
            err = m.error()
            if err is not None:
                if failed_fatally(err):
                    raise KafkaException(err)
                continue  # transient (the client retries by itself) or the end of the partition
            out.append(record_of(m))
        return out

    def close(self) -> None:
        """Leave the partition (idempotent)."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
