"""Payloads for get_since: read from the messages topic by offset, with a bounded recent cache.

Projections keep only sequence -> offset. The payload of a sequence is the record at that offset
of the stream's messages partition. Recent records are also kept in a byte-bounded LRU cache
(default 64 MiB, `WATCHTOWER_PAYLOAD_CACHE_MB`), filled as the projection consumes them, so the
common case, a subscriber near the head, never touches the broker; memory stays bounded by the
cache size, never by payload size x window.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable

from confluent_kafka import Consumer, KafkaError, TopicPartition

DEFAULT_CACHE_BYTES = int(float(os.environ.get("WATCHTOWER_PAYLOAD_CACHE_MB", "64")) * 1024 * 1024)


class PayloadCache:
    """Raw messages-topic values by (stream_id, sequence), evicting least recently used first."""

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, stream_id: str, sequence: int, value: bytes) -> None:
        if len(value) > self.max_bytes:
            return
        key = (stream_id, sequence)
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.bytes -= len(old)
            self._items[key] = value
            self.bytes += len(value)
            while self.bytes > self.max_bytes:
                _, evicted = self._items.popitem(last=False)
                self.bytes -= len(evicted)

    def get(self, stream_id: str, sequence: int) -> bytes | None:
        with self._lock:
            value = self._items.get((stream_id, sequence))
            if value is not None:
                self._items.move_to_end((stream_id, sequence))
            return value


class LogReader:
    """Reads records of one stream from a messages partition (read_committed). Thread-safe."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self._local = threading.local()
        self._all: list[Consumer] = []
        self._lock = threading.Lock()

    def _consumer(self) -> Consumer:
        consumer = getattr(self._local, "consumer", None)
        if consumer is None:
            consumer = Consumer({
                "bootstrap.servers": self.bootstrap,
                "group.id": f"wt-reader-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "fetch.wait.max.ms": 10,
                "log_level": 3,
            })
            self._local.consumer = consumer
            with self._lock:
                self._all.append(consumer)
        return consumer

    def scan(self, partition: int, first_offset: int, last_offset: int | None, stream_id: str,
             pick: Callable[[int, bytes], int | None], wanted: Iterable[int] | None = None,
             timeout_s: float = 10.0) -> dict[int, tuple[int, bytes]]:
        """Records of `stream_id` from `first_offset` to `last_offset` (None: to the end) that
        `pick(offset, value)` names a sequence for: sequence -> (offset, value), the first per sequence.

        `pick` decides from the record itself (decoded message, verification), never from a
        header. `wanted` limits which sequences are kept (all when None); the scan stops early
        once all of them are found.
        """
        want = None if wanted is None else set(wanted)
        found: dict[int, tuple[int, bytes]] = {}
        key = stream_id.encode()
        consumer = self._consumer()
        consumer.assign([TopicPartition(self.topic, partition, first_offset)])
        try:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                batch = consumer.consume(num_messages=1000, timeout=0.2)
                done = False
                for m in batch:
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            done = True
                        continue
                    offset = int(m.offset() or 0)
                    if last_offset is not None and offset > last_offset:
                        done = True
                        break
                    if m.key() != key:
                        continue
                    value = m.value() or b""
                    sequence = pick(offset, value)
                    if sequence is None or sequence in found or (want is not None and sequence not in want):
                        continue
                    found[sequence] = (offset, value)
                    if want is not None and len(found) == len(want):
                        done = True
                        break
                if done:
                    return found
            raise TimeoutError(
                f"reading {self.topic}[{partition}] from {first_offset} took over {timeout_s}s")
        finally:
            consumer.unassign()

    def close(self) -> None:
        with self._lock:
            for consumer in self._all:
                consumer.close()
            self._all.clear()

