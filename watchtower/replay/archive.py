"""Reading ranges of the ``messages`` archive (read_committed) for the replay worker.

One consumer, assigned (never in a group) to one partition at a time. Consecutive slices of the
same replay continue where the last read stopped without a new fetch; a read elsewhere re-assigns.
A read returns at most ``limit`` records and says whether it stopped at the partition's end
(``enable.partition.eof``: with read_committed that is the last stable offset, so a record of a
still-open transaction is never returned).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from watchtower.replay.fulfil import ArchivedRecord
from watchtower.topics.batches import failed_fatally
from watchtower.topics.connection import kafka_config

#: How long one read waits for more records before it counts as at the end (safety net; the
#: end-of-partition event normally ends a read much sooner).
READ_TIMEOUT_S = 30.0


class ArchiveReader:
    """Reads `topic` (the ``messages`` topic) by (partition, offset)."""

    def __init__(self, bootstrap: str, topic: str, *, client_id: str = "wt-replay-archive", **extra: Any) -> None:
        self.topic = topic
        self._consumer = Consumer({
            **kafka_config(bootstrap),
            "group.id": f"wt-replay-archive-{uuid.uuid4().hex}",  # offsets are never committed
            "client.id": client_id,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 50,
            "log_level": 3,
            **extra,
        })
        self._at: tuple[int, int] | None = None  # (partition, next offset) the consumer is positioned at
        self._eof_at: tuple[int, int] | None = None

    def read(self, partition: int, offset: int, limit: int) -> tuple[list[ArchivedRecord], bool]:
        """Up to `limit` records of `partition` from `offset`, and whether the read reached the end."""
        if self._at != (partition, offset):
            self._consumer.assign([TopicPartition(self.topic, partition, offset)])
            self._at, self._eof_at = (partition, offset), None
        out: list[ArchivedRecord] = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        at_end = False
        next_offset = offset
        while len(out) < limit:
            # consume() with a timeout waits for a FULL batch; take what is fetched, and wait for one
            # record with poll() only when nothing is.
            batch = self._consumer.consume(num_messages=limit - len(out), timeout=0)
            if not batch:
                # The end-of-partition event comes once per end reached: at an end seen before, a short
                # wait without a new record means it is still the end.
                seen_end = self._eof_at == (partition, next_offset)
                if not seen_end and time.monotonic() > deadline:
                    break
                msg = self._consumer.poll(0.1 if seen_end else 0.2)
                if msg is None:
                    at_end = seen_end
                    if at_end:
                        break
                    continue
                batch = [msg]
            for m in batch:
                err = m.error()
                if err is None:
                    out.append(ArchivedRecord(int(m.offset() or 0), m.value(), _headers(m.headers())))
                    next_offset = int(m.offset() or 0) + 1
                    at_end = False  # a record after an end event: not the end any more
                elif err.code() == KafkaError._PARTITION_EOF:
                    at_end = True
                    next_offset = max(next_offset, int(m.offset() or next_offset))
                elif failed_fatally(err):
                    raise KafkaException(err)
            if at_end:
                break
        if at_end:
            self._eof_at = (partition, next_offset)
        self._at = (partition, next_offset)
        return out, at_end

    def forget_position(self) -> None:
        """The next read re-assigns (e.g. after an aborted slice, whose records are read again)."""
        self._at = self._eof_at = None

    def close(self) -> None:
        self._consumer.close()


def _headers(raw: object) -> list[tuple[str, str | bytes | None]] | None:
    # confluent-kafka returns a list of (name, value) tuples for a consumed record.
    return list(raw) if isinstance(raw, list) else None
