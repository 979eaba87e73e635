"""`KeyedWriter`: records routed by key as every Kafka client routes them, batched across callers.

A record's partition is its key's murmur2 hash (``murmur2_random``: the partitioner Faust and
Kafka's Java clients use), so every client agrees on which partition, and so which worker, owns a
key. The producer is idempotent with ``acks=all`` (a retry never writes a record twice) and
gathers the records of concurrent callers for `linger_ms` into one request. `write` hands a
record to the client and returns; `flush` waits for what is on its way.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaException, Producer

from watchtower.topics.connection import kafka_config
from watchtower.topics.errors import BrokerError


class KeyedWriter:
    """One idempotent producer of plain (non-transactional) keyed records; thread-safe."""

    def __init__(self, bootstrap: str, *, linger_ms: int) -> None:
        self._producer = Producer({
            **kafka_config(bootstrap),
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": linger_ms,
            "partitioner": "murmur2_random",
            "log_level": 3,
        })

    def write(self, topic: str, *, key: bytes, value: bytes, headers: dict[str, Any] | None = None,
              poll: bool = True) -> None:
        """Hand one record to the client; returns at once. `poll`: serve the delivery reports now
        (a caller writing many at once passes False and calls `poll` once for all of them).

        BufferError when the client's local queue is full (the record was not taken: write it
        again later); `BrokerError` when the client refused it."""
        try:
            self._producer.produce(topic, key=key, value=value, headers=headers)
        except KafkaException as exc:
            raise BrokerError(str(exc)) from exc
        if poll:
            self._producer.poll(0)

    def poll(self, timeout_s: float = 0.0) -> None:
        """Serve the delivery reports (waiting up to `timeout_s` for one)."""
        self._producer.poll(timeout_s)

    def flush(self, timeout_s: float) -> int:
        """Wait up to `timeout_s` for every record written; how many were not acknowledged (0: all were)."""
        return int(self._producer.flush(timeout_s))
