"""Payloads for get_since: read from the messages topic by offset, with a bounded recent cache.

Projections keep only sequence -> offset. The payload of a sequence is the record at that offset
of the stream's messages partition (the one copy of each payload: events only refer to it).
Recent records are also kept in a byte-bounded LRU cache (default 64 MiB,
`WATCHTOWER_PAYLOAD_CACHE_MB`), filled as the projection indexes them, so the common case, a
subscriber near the head, never touches the broker, and kept in the form get_since serves, so a
page is not decoded and re-encoded on every read; memory stays bounded by the cache size, never by
payload size x window. A page the cache lacks is read with one assign and one contiguous consume
(`LogReader.scan`).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from watchtower.protocol.stream.message import StreamMessage, headers_of_record, json_dict_of_record
from watchtower.schemas.records import decode_message_record
from watchtower.topics.offset_range import OffsetRangeReader

DEFAULT_CACHE_BYTES = int(float(os.environ.get("WATCHTOWER_PAYLOAD_CACHE_MB", "64")) * 1024 * 1024)


Headers = dict[str, Any]
T = TypeVar("T")
Page = tuple[Headers, dict[str, Any]]
"""A message as get_since serves it: its filter headers and its JSON form (shared: never mutate)."""


class _Entry:
    __slots__ = ("encoded", "headers", "message", "page", "raw", "size")

    def __init__(self, raw: bytes, message: StreamMessage | None) -> None:
        self.raw, self.message = raw, message
        self.headers: Headers | None = None
        self.encoded: bytes | None = None
        self.page: Page | None = None
        self.size = len(raw) * (2 if message is not None else 1)

    def encode(self) -> tuple[Headers, bytes]:
        """The filter headers and the message's JSON bytes, built once: a page of 500 messages is
        their bytes joined, with no decode, no dict and no JSON encoding per read."""
        if self.encoded is None or self.headers is None:
            # A record read back from the log is one the fold (or the verifying scan) has decoded,
            # checked and verified already: its Avro record is served as it is, not rebuilt.
            record = self.message.to_record() if self.message is not None else decode_message_record(self.raw)
            self.headers = headers_of_record(record)
            # A signed document is written exactly as signed (`json_ints`): no integer rewriting.
            self.encoded = json.dumps(json_dict_of_record(record), separators=(",", ":")).encode()
            self.message = None
            # The JSON form holds the payload as hex: count it, so the cache stays within its bytes.
            self.size = len(self.raw) + len(self.encoded) + 512
        return self.headers, self.encoded

    def served(self) -> Page:
        """The served form as a dict (the proof path and in-process callers), built once."""
        if self.page is None:
            headers, encoded = self.encode()
            self.page = (headers, json.loads(encoded))
            self.size += len(encoded)
        return self.page


class PayloadCache:
    """Messages-topic values by (stream_id, sequence), evicting least recently used first.

    The fold puts each indexed record with the message it has already decoded, so a read never
    decodes it again; the first read builds the served form (`served`) and keeps it. Every entry
    counts its memory (raw, decoded and served forms) against `max_bytes`.
    """

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: OrderedDict[tuple[str, int], _Entry] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, stream_id: str, sequence: int, value: bytes, message: StreamMessage | None = None) -> None:
        """Keep the record `value` of `stream_id`#`sequence` (and `message`, its decoded form)."""
        self._store((stream_id, sequence), _Entry(value, message))

    def _store(self, key: tuple[str, int], entry: _Entry) -> None:
        if entry.size > self.max_bytes:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.bytes -= old.size
            self._items[key] = entry
            self.bytes += entry.size
            self._evict_over()

    def _evict_over(self) -> None:
        """Drop least recently used entries until the cache is within its bytes (under the lock)."""
        while self.bytes > self.max_bytes and self._items:
            _, evicted = self._items.popitem(last=False)
            self.bytes -= evicted.size

    def get(self, stream_id: str, sequence: int) -> bytes | None:
        """The record value, or None when it is not cached."""
        with self._lock:
            entry = self._items.get((stream_id, sequence))
            if entry is None:
                return None
            self._items.move_to_end((stream_id, sequence))
            return entry.raw

    def served(self, stream_id: str, sequence: int, raw: bytes) -> Page:
        """The served form of record `raw` (`stream_id`#`sequence`), from the cache or decoded now
        (and cached: a cold page read once is warm the next time). MALFORMED_RECORD if undecodable."""
        return self._entry(stream_id, sequence, raw, _Entry.served)

    def encoded(self, stream_id: str, sequence: int, raw: bytes) -> tuple[Headers, bytes]:
        """`served`, as the filter headers and the message's JSON bytes (what a get_since page joins)."""
        return self._entry(stream_id, sequence, raw, _Entry.encode)

    def _entry(self, stream_id: str, sequence: int, raw: bytes, form: Callable[[_Entry], T]) -> T:
        key = (stream_id, sequence)
        with self._lock:
            entry = self._items.get(key)
        if entry is None or (entry.raw is not raw and entry.raw != raw):
            entry = _Entry(raw, None)
            value = form(entry)
            self._store(key, entry)
            return value
        before = entry.size
        value = form(entry)
        if entry.size != before:
            with self._lock:
                if self._items.get(key) is entry:  # still cached: account for the served form
                    self.bytes += entry.size - before
                    self._evict_over()
        return value


class LogReader:
    """Reads records of one stream from a messages partition (read_committed). Thread-safe."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self._ranges = OffsetRangeReader(bootstrap, topic, group_prefix="wt-reader")

    def scan(self, partition: int, first_offset: int, last_offset: int | None, stream_id: str,
             pick: Callable[[int, bytes], int | None], wanted: Iterable[int] | None = None,
             timeout_s: float = 10.0) -> dict[int, tuple[int, bytes]]:
        """Records of `stream_id` from `first_offset` to `last_offset` (None: to the end) that
        `pick(offset, value)` names a sequence for: sequence -> (offset, value), the first per sequence.

        `pick` decides from the record itself (decoded message, verification), never from a
        header. `wanted` limits which sequences are kept (all when None); the scan stops early
        once all of them are found. TimeoutError when the range is not read within `timeout_s`.
        """
        want = None if wanted is None else set(wanted)
        found: dict[int, tuple[int, bytes]] = {}
        key = stream_id.encode()
        with contextlib.closing(self._ranges.read(partition, first_offset, last_offset, timeout_s)) as records:
            for record in records:
                if record.key == key:
                    value = record.value or b""
                    sequence = pick(record.offset, value)
                    if sequence is not None and sequence not in found and (want is None or sequence in want):
                        found[sequence] = (record.offset, value)
                if want is not None and len(found) == len(want):
                    break
        return found

    def close(self) -> None:
        self._ranges.close()
