"""`PartitionWriter`: records written to the partitions their writer names, idempotently, outside any transaction.

A writer that places its records itself (the ingestion runner puts each result in its task's
partition) hands each to the client with its partition and returns; the client delivers it in the
background and retries by itself (idempotent, so ``acks=all`` and a retry never writes a record
twice). Records finished within `linger_ms` of each other leave in one request. When the client's
local queue is full, `write` waits for it to drain rather than fail: a writer that outruns the
broker slows down, it drops nothing.

Unlike `record_writer.RecordWriter`, the writer never serves the client by itself: its owner calls
`poll` from its loop, and `flush` when it stops.
"""

from __future__ import annotations

from confluent_kafka import Producer

from watchtower.topics.connection import kafka_config
from watchtower.topics.metadata import partitions

#: How long `write` lets a full local queue drain before it hands the record over again.
_DRAIN_S = 0.05


class PartitionWriter:
    """One idempotent producer of records to named partitions (module docstring). `write` may be
    called from another thread than `poll` and `flush`."""

    def __init__(self, bootstrap: str, *, linger_ms: int) -> None:
        # Kafka's own partitioner, the one `partitioning.partition_for_key` computes and the
        # writer's callers place their records by: the client agrees with them on every key.
        self._producer = Producer(kafka_config(bootstrap, **{"enable.idempotence": True, "linger.ms": linger_ms,
                                                             "partitioner": "murmur2_random"}))

    def partitions(self, topic: str) -> list[int]:
        """The partition ids of `topic`, ascending (`metadata.partitions`: `TopicUnavailableError`
        when the topic is not served)."""
        return partitions(self._producer, topic)

    def write(self, topic: str, partition: int, value: bytes) -> None:
        """Hand one record to the client, for `partition` of `topic`; waits only while the local queue is full."""
        while True:
            try:
                self._producer.produce(topic, partition=partition, value=value)
                return
            except BufferError:  # the local queue is full: let it drain
                self._producer.poll(_DRAIN_S)

    def poll(self) -> None:
        """Serve the client's delivery reports and errors without waiting."""
        self._producer.poll(0)

    def flush(self, timeout_s: float) -> int:
        """Wait up to `timeout_s` for every record written; how many were not acknowledged (0: all were)."""
        return int(self._producer.flush(timeout_s))
