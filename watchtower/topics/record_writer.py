"""`RecordWriter`: records written one at a time, outside any transaction, idempotently, not waited for.

`write` hands a record to the client and returns; the client delivers it in the background and
retries by itself (idempotent, ``acks=all``: a retry never writes it twice). `flush` waits, within
a bound, for what is still on its way and answers how many records were not acknowledged by then.
A writer that must know a record landed flushes after it (a Spark job's status record); one that
must not block on it flushes when it stops (the key manager's audit trail).
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import Producer

from watchtower.topics.connection import kafka_config


class RecordWriter:
    """One idempotent producer of plain (non-transactional) records. Not thread-safe."""

    def __init__(self, bootstrap: str) -> None:
        self._producer = Producer(
            kafka_config(bootstrap, **{"enable.idempotence": True, "acks": "all", "linger.ms": 5, "log_level": 3})
        )

    def write(self, topic: str, value: bytes, *, key: bytes | None = None, partition: int | None = None) -> None:
        """Hand one record to the client (to `partition`, else where its key hashes); returns at once."""
        record: dict[str, Any] = {"key": key, "value": value}
        if partition is not None:
            record["partition"] = partition
        try:
            self._producer.produce(topic, **record)
        except BufferError:  # the local queue is full: let it drain, then hand the record over again
            self._producer.flush(5)
            self._producer.produce(topic, **record)
        self._producer.poll(0)

    def flush(self, timeout_s: float) -> int:
        """Wait up to `timeout_s` for every record written; how many were not acknowledged (0: all were)."""
        return int(self._producer.flush(timeout_s))
