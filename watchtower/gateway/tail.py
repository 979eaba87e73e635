"""One live tail of a topic per process, fanned out to the SSE connections that listen.

A `Tailer` owns one `topics.assigned_reader.AssignedReader` (``read_committed``, no consumer group
offsets: partitions are assigned by hand at the high watermark the tailer found when it started)
running in a thread. It routes each record (a `Record`) to a key: `messages_route` keys a ``messages`` record by its
stream id; `push_route` keys a ``deliveries`` record by ``(subscriber, stream id)`` and drops every
record without the ``wt:push`` header (replays and anything else on that topic). Only records
whose key has a registered sink are decoded (``watchtower.schemas.records.decode_message``), so
a busy topic costs a process nothing for the streams nobody watches.

Sinks are called on their own event loop with a batch of items (`Item`) per poll: one
`loop.call_soon_threadsafe` per loop and poll hands every listening sink of that loop its batch
(a wake-up of the loop costs a syscall; one per connection made 100 connections 100 wake-ups).
An `Item` is shared by every sink it goes to: the message's JSON is made once per record here, and
its `events` cache lets the SSE route format the event once per feed, not once per connection.
A sink is expected to bound what it keeps itself (the SSE connection does).
A record that does not decode is logged with its position and skipped: nothing
a producer writes can stop the tail.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable, Hashable
from typing import Any, Protocol

from watchtower.schemas.records import decode_message
from watchtower.topics.assigned_reader import AssignedReader
from watchtower.topics.errors import BrokerError
from watchtower.topics.records import Record

log = logging.getLogger("watchtower.gateway.tail")

PUSH_HEADER = "wt:push"
PUSH_STREAM_HEADER = "wt:push:stream"
_POLL_S = 0.2  # the longest wait for a first record (so a stop is seen within it)
_COALESCE_S = 0.01  # after the first record, how long to gather what follows into the same batch
_BATCH = 500

Route = Callable[[Record], Hashable | None]


class Item:
    """One record as the sinks get it, shared by all of them (read-only but for the `events` cache).

    `sequence` and `message` (the StreamMessage), `text` its ``to_json_dict()`` as compact JSON,
    and `events`: whatever a sink derives from it once for everyone (the SSE route keeps each
    feed's encoded event there, by feed id).
    """

    __slots__ = ("events", "message", "sequence", "text")

    def __init__(self, sequence: int, message: Any, text: str) -> None:
        self.sequence = sequence
        self.message = message
        self.text = text
        self.events: dict[Hashable, bytes] = {}

    @classmethod
    def of(cls, message: Any) -> Item:
        return cls(message.sequence, message, message_json(message))


class Sink(Protocol):
    """Where a tailer hands the records of a key (called on `loop`, never on the tail thread)."""

    loop: asyncio.AbstractEventLoop

    def offer(self, items: list[Item]) -> None: ...


def message_json(msg: Any) -> str:
    """The message's JSON form (`StreamMessage.to_json_dict`) as compact JSON text."""
    return json.dumps(msg.to_json_dict(), separators=(",", ":"))


def messages_route(record: Record) -> Hashable | None:
    """A ``messages`` record's stream id (its key)."""
    key = record.key
    return None if key is None else bytes(key).decode("utf-8", "replace")


def _headers(record: Record) -> dict[str, bytes]:
    return {str(k): v.encode() if isinstance(v, str) else bytes(v or b"") for k, v in (record.headers or [])}


def push_route(record: Record) -> Hashable | None:
    """``(subscriber, stream id)`` of a push delivery; None for any record without ``wt:push``."""
    headers = _headers(record)
    key = record.key
    if headers.get(PUSH_HEADER) != b"1" or key is None or PUSH_STREAM_HEADER not in headers:
        return None
    return bytes(key).decode("utf-8", "replace"), headers[PUSH_STREAM_HEADER].decode("utf-8", "replace")


class Tailer:
    """The live tail of `topic` (see the module docstring). `start` blocks: call it from a thread."""

    def __init__(self, bootstrap: str, topic: str, route: Route) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.route = route
        self._sinks: dict[Hashable, set[Sink]] = {}
        self._lock = threading.Lock()  # the sinks
        self._start_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reader: AssignedReader | None = None
        self.records = 0  # records read (all keys); for health

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Assign every partition at its high watermark and start the tail thread (idempotent).

        Positions are fixed here, before any connection registers, so every record committed
        after `start` returns is seen.
        """
        with self._start_lock:
            if self._thread is not None:
                return
            reader = AssignedReader(self.bootstrap, self.topic, group_prefix="wt-sse-tail",  # never joins or commits
                                    settings={"auto.offset.reset": "latest", "enable.partition.eof": False})
            try:
                # TopicUnavailableError when the topic does not exist (`watchtower init` makes it).
                reader.assign({p: reader.end(p) for p in reader.partitions()})
            except BaseException:
                reader.close()
                raise
            self._reader = reader
            self._thread = threading.Thread(target=self._run, name=f"sse-tail-{self.topic}", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the thread and close the reader (blocking, bounded by one poll)."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(10)

    def register(self, key: Hashable, sink: Sink) -> None:
        with self._lock:
            self._sinks.setdefault(key, set()).add(sink)

    def unregister(self, key: Hashable, sink: Sink) -> None:
        with self._lock:
            sinks = self._sinks.get(key)
            if sinks is not None:
                sinks.discard(sink)
                if not sinks:
                    del self._sinks[key]

    def listeners(self) -> int:
        with self._lock:
            return sum(len(s) for s in self._sinks.values())

    def _run(self) -> None:
        reader = self._reader
        assert reader is not None  # set by `start` before the thread starts
        try:
            while not self._stop.is_set():
                try:
                    batch = _next_batch(reader)
                except BrokerError:
                    log.exception("tail of %s: poll failed; retrying", self.topic)
                    self._stop.wait(1.0)
                    continue
                if batch:
                    self._fan_out(batch)
        finally:
            reader.close()

    def _fan_out(self, batch: list[Record]) -> None:
        out: dict[Sink, list[Item]] = {}
        with self._lock:
            sinks = {k: list(v) for k, v in self._sinks.items()}
        for record in batch:
            self.records += 1
            try:
                key = self.route(record)
                targets = sinks.get(key) if key is not None else None
                if not targets:
                    continue
                item = Item.of(decode_message(bytes(record.value or b"")))
            except Exception as exc:  # a record no reader can use: skip it, never stop the tail
                log.warning("tail of %s: skipped %s[%s]@%s (%s)", self.topic, record.topic, record.partition,
                            record.offset, type(exc).__name__)
                continue
            for sink in targets:
                out.setdefault(sink, []).append(item)
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Sink, list[Item]]]] = {}
        for sink, items in out.items():
            by_loop.setdefault(sink.loop, []).append((sink, items))
        for loop, handoffs in by_loop.items():
            try:
                loop.call_soon_threadsafe(_offer_all, handoffs)  # one wake-up of each loop per poll
            except RuntimeError:  # the loop is closed: its sinks are going away
                continue


def _next_batch(reader: AssignedReader) -> list[Record]:
    """The next records: wait up to `_POLL_S` for the first one only, then gather for `_COALESCE_S`.

    ``consume(n, timeout)`` returns when it has `n` records or the whole timeout has passed, which
    held every record of a quiet feed for up to 0.2 s. Waiting for the first record alone passes it
    on at once, and the short second wait still gathers a burst (or a busy topic) into one batch:
    one hand-over to each loop and one write per connection. Partition-level events are not data
    (the client recovers by itself) and are left out.
    """
    return [r for r in reader.fetch(_BATCH, _POLL_S, gather_s=_COALESCE_S) if isinstance(r, Record)]


def _offer_all(handoffs: list[tuple[Sink, list[Item]]]) -> None:
    """On a sink's loop: hand every sink its batch; one sink that fails does not starve the others."""
    for sink, items in handoffs:
        try:
            sink.offer(items)
        except Exception:
            log.exception("an SSE sink refused a batch of %d records", len(items))
