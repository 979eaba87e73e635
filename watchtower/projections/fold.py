"""Folding the events and messages topics into the views, record by record: one implementation
for the live Faust agent and the offline rebuild, so both refuse exactly the same records.

- An events record is decoded and folded with `views.apply_event`, which checks it first
  (`view_checks`) and folds it with the writer's `evolve`. A StreamMessagePublished carries only a
  reference to its message (stream, sequence, hash, key id, ...): it moves the published head and
  leaves the reference for the message to match.
- A messages record, the one copy of each payload, is decoded and indexed by what the record says
  (its message's stream and sequence, never the ``sequence`` header), and only if it is the first
  record that holds a message matching its publish event's reference and verifying under the key
  in force (`view_checks.message_verdict`); then the readable head moves and long polls wake. A
  record whose publish event is not folded yet waits in memory (the two topics are read
  concurrently, in no fixed order) and is decided when the event arrives; the decision does not
  depend on which came first.
- A key manager event (`keymgr_tables.is_keymgr_event`) is folded into the keymgr tables with
  `keymgr_tables.apply_keymgr_event` (the stream views never see it), and a KeyEpochRotated the
  stream views accepted also joins its stream's key epoch schedule there.
- Anything else is quarantined (`quarantine.record`): logged, counted, skipped.

A stream a reader waits on (a long poll) has its publishes folded first (`publishes_first`): a
block's burst of other streams' publishes committed in the same transaction does not stand between
that reader and its message. Only publish events and messages records go first, and only up to the
stream's first other record in the batch: those change nothing but their own stream's head and
index, so the tables end as the in-order fold leaves them, and each stream's records still fold in
log order.

Known limit: a waiting messages record lives in memory only. If the worker dies before its event
arrives, the record is not re-read (Faust committed past it); the head still moves (heads come
from the events), reads find the payload by scanning the log, and only that record's verdict is
missing from this worker's counts. At most `MAX_WAITING` records wait; beyond that the oldest are
dropped (same consequence), so a flood of records for streams that never publish costs bounded memory.
A catch-up reads a partition's events to their end before its messages (`catch_up.PartitionReader`,
as the offline rebuild does), so only the live fold's few in-flight records ever wait.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, MutableMapping, Sequence
from typing import Any, Final

from watchtower.projections import quarantine
from watchtower.projections.keymgr_tables import apply_key_epoch, apply_keymgr_event, is_keymgr_event, new_keymgr_tables
from watchtower.projections.log_reader import PayloadCache
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.signing import verify_with_schedule
from watchtower.protocol.stream.key_schedule import KeySchedule
from watchtower.protocol.stream.message import StreamMessage
from watchtower.protocol.stream.state import KEY_EPOCH_ROTATED
from watchtower.protocol.stream.view_checks import ACCEPT, DEFER, QUARANTINE, message_verdict
from watchtower.protocol.stream.views import (
    INDEXES,
    STREAM_LOCAL_EVENTS,
    StreamIndex,
    apply_event,
    apply_message,
)
from watchtower.schemas.codec import read_header
from watchtower.schemas.records import decode_message
from watchtower.schemas.wire import decode_event
from watchtower.topics.partitioning import partition_for_key
from watchtower.topics.records import Record

log = logging.getLogger("watchtower.projections.fold")

MAX_WAITING: Final = 10_000
Table = MutableMapping[str, Any]


def verified_sequence(stream_id: str, view: Mapping[str, Any],
                      decoded: dict[int, StreamMessage] | None = None) -> Callable[[int, bytes], int | None]:
    """A log-scan picker (`LogReader.scan`): the sequence of a record holding a verifying message of
    `stream_id` under the key schedule of `view`, else None. With `decoded`, the first verifying
    message of each sequence is kept there, so the caller can cache it and serve it without
    decoding the record a second time."""
    schedule = KeySchedule.from_dict(view["key_schedule"])

    def pick(_offset: int, raw: bytes) -> int | None:
        try:
            message = decode_message(raw)
        except WatchtowerError:
            return None
        if not (message.stream_id == stream_id and verify_with_schedule(message, schedule)):
            return None
        if decoded is not None:
            decoded.setdefault(message.sequence, message)
        return message.sequence
    return pick


def publishes_first(records: Sequence[Record], waited: Collection[bytes], *, t_events: str,
                    t_messages: str) -> list[Record]:
    """The records of `records` to fold before the others, in batch order: for each stream keyed in
    `waited`, its messages records and stream-local events (`views.STREAM_LOCAL_EVENTS`: its
    publishes) up to its first other record (a rotation, say, or anything undecodable), which folds
    in log order with everything after it.

    Those records change their own stream's head and index only, so folding them first leaves the
    tables as the in-order fold does; `records` must be in log order per partition.
    """
    if not waited:
        return []
    first: list[Record] = []
    stopped: set[bytes] = set()
    for r in records:
        key = r.key
        if key is None or key not in waited or key in stopped:
            continue
        if r.topic == t_messages or (r.topic == t_events and _is_stream_local(r.value)):
            first.append(r)
        else:
            stopped.add(key)
    return first


def _is_stream_local(value: bytes | None) -> bool:
    try:
        return value is not None and read_header(value)[0] in STREAM_LOCAL_EVENTS
    except WatchtowerError:
        return False


class Folder:
    """Folds records into `tables` (the `views.TABLE_NAMES` tables), `keymgr` (the
    `keymgr_tables.KEYMGR_TABLES` tables and its in-memory view; plain dicts when not given) and
    `refused` (quarantine)."""

    def __init__(self, tables: Mapping[str, Table], refused: Table, *, t_events: str, t_messages: str,
                 partitions: int, cache: PayloadCache | None = None,
                 on_head: Callable[[str, int], None] | None = None,
                 indexes: MutableMapping[str, StreamIndex] | None = None,
                 keymgr: Mapping[str, Table] | None = None) -> None:
        self.refused = refused
        self.t_events, self.t_messages = t_events, t_messages
        self.partitions = partitions
        self.cache = cache
        self.on_head = on_head
        # stream_id -> its aggregate state, the offsets of its window's messages and the references
        # not bound yet (`views.StreamIndex`; the live worker keeps them per partition).
        self.indexes: MutableMapping[str, StreamIndex] = {} if indexes is None else indexes
        self.tables: Mapping[str, Table] = {**tables, INDEXES: self.indexes}
        self.keymgr: Mapping[str, Table] = new_keymgr_tables() if keymgr is None else keymgr
        # stream_id -> {offset: (partition, message, raw)}: records waiting for their publish event.
        self.waiting: dict[str, dict[int, tuple[int, StreamMessage, bytes]]] = {}
        self.n_waiting = 0

    def quarantined(self, topic: str, partition: int, offset: int, reason: str) -> None:
        quarantine.record(self.refused, topic, partition, offset, reason)

    # ------------------------------------------------------------------ events
    def fold_event(self, partition: int, offset: int, key: bytes | None, value: bytes | None) -> None:
        try:
            event = decode_event(value)
        except WatchtowerError as exc:
            self.quarantined(self.t_events, partition, offset, f"undecodable event: {exc.message}")
            return
        misplaced = self._misplaced(key, event.stream_id, partition)  # the registry's key is its stream_id
        if misplaced:
            self.quarantined(self.t_events, partition, offset, f"{event.type}: {misplaced}")
            return
        try:
            if is_keymgr_event(event.type):
                apply_keymgr_event(self.keymgr, event)
                return
            published = apply_event(self.tables, event, offset=offset)
            if event.type == KEY_EPOCH_ROTATED:
                apply_key_epoch(self.keymgr, event)
        except WatchtowerError as exc:
            self.quarantined(self.t_events, partition, offset, exc.message)
            return
        except Exception as exc:  # a rule the checks missed must still never stop the fold
            log.exception("unexpected error folding %s[%s]@%s", self.t_events, partition, offset)
            self.quarantined(self.t_events, partition, offset, f"{event.type} cannot be folded ({type(exc).__name__})")
            return
        if published is not None:
            self._decide_waiting(event.stream_id, published)

    def _misplaced(self, key: bytes | None, expected: str, partition: int) -> str | None:
        if key != expected.encode():
            return f"the record is keyed {key!r}, not {expected!r}"
        if partition_for_key(key, self.partitions) != partition:
            return f"key {expected!r} belongs to partition {partition_for_key(key, self.partitions)}"
        return None

    # ------------------------------------------------------------------ messages
    def fold_message(self, partition: int, offset: int, key: bytes | None, value: bytes | None) -> None:
        try:
            stream_id = (key or b"").decode()
            message = decode_message(value or b"")
        except UnicodeDecodeError:
            self.quarantined(self.t_messages, partition, offset, "the record key is not UTF-8 text")
            return
        except WatchtowerError as exc:
            self.quarantined(self.t_messages, partition, offset, f"undecodable message: {exc.message}")
            return
        misplaced = self._misplaced(key, message.stream_id, partition)
        if misplaced:
            self.quarantined(self.t_messages, partition, offset, misplaced)
            return
        self._decide(stream_id, partition, offset, message, value or b"")

    def _decide(self, stream_id: str, partition: int, offset: int, message: StreamMessage, raw: bytes) -> None:
        index = self.indexes.get(stream_id)
        head = self.tables["heads"].get(stream_id)
        published = 0 if head is None else int(head["published"])
        schedule = None if index is None else index.state.key_schedule
        ref = None if index is None else index.refs.get(message.sequence)
        verdict, reason = message_verdict(stream_id, offset, message, schedule, published,
                                          self.tables["offsets"].get(stream_id), ref)
        if verdict == DEFER:
            self._wait(stream_id, partition, offset, message, raw)
        elif verdict == QUARANTINE:
            self.quarantined(self.t_messages, partition, offset, reason)
        elif verdict == ACCEPT and apply_message(self.tables, stream_id, message.sequence, offset):
            if self.cache is not None:
                self.cache.put(stream_id, message.sequence, raw, message)
            if self.on_head is not None:
                self.on_head(stream_id, message.sequence)

    def _wait(self, stream_id: str, partition: int, offset: int, message: StreamMessage, raw: bytes) -> None:
        waiting = self.waiting.setdefault(stream_id, {})
        if offset in waiting:
            return  # a redelivery of a record that is already waiting
        waiting[offset] = (partition, message, raw)
        self.n_waiting += 1
        while self.n_waiting > MAX_WAITING:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        stream_id = next(iter(self.waiting))
        waiting = self.waiting[stream_id]
        offset = min(waiting)
        del waiting[offset]
        self.n_waiting -= 1
        if not waiting:
            del self.waiting[stream_id]
        log.warning("dropped the waiting messages record %s@%s of %r: too many records wait for events",
                    self.t_messages, offset, stream_id)

    def _decide_waiting(self, stream_id: str, published: int) -> None:
        """Decide, in log order, the waiting records of `stream_id` whose publish event is now folded."""
        waiting = self.waiting.get(stream_id)
        if not waiting:
            return
        ready = sorted(o for o, (_p, msg, _r) in waiting.items() if msg.sequence <= published)
        for offset in ready:
            partition, message, raw = waiting.pop(offset)
            self.n_waiting -= 1
            self._decide(stream_id, partition, offset, message, raw)
        if not waiting:
            self.waiting.pop(stream_id, None)
