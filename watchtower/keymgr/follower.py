"""The key manager's view of the log: every committed event, folded as the workers fold it.

A background thread reads the ``events`` topic from the beginning, ``read_committed``, and folds

- the key manager's own instances (accounts, paid streams, supply) into L's pure `KeymgrState`
  (entitlements, actor authorizations, account keys), and
- each stream's `StreamState` (owner, access mode, publisher key schedule) with the stream
  actor's own `evolve`, for encryption's authorization.

A record that does not decode or breaks a rule is quarantined: logged with topic, partition,
offset and reason, counted, skipped; the fold goes on from the last valid state.

`catch_up` is what makes a refusal "from the next block": a request first asks the broker for
the last stable offset of every events partition, then waits until the thread has folded up to
it, so any revocation or purchase committed before the request arrived is seen.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

from confluent_kafka import OFFSET_BEGINNING, Consumer, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from watchtower.protocol.errors import NotReadyError, WatchtowerError
from watchtower.protocol.keymgr_access import KeymgrState
from watchtower.protocol.stream_state import STREAM_EVENT_TYPES, Event, StreamState, evolve
from watchtower.schemas.wire import decode_event
from watchtower.topics.batches import next_batch
from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config

log = logging.getLogger("watchtower.keymgr.follower")

CATCH_UP_TIMEOUT_S: Final = 30.0
_MAX_REASON: Final = 300


class EventFollower:
    """Folds the events topic in a thread; read the state only inside `reading()`."""

    def __init__(self, bootstrap: str, prefix: str | None) -> None:
        self.topic = topic_name("events", prefix)
        self.keymgr = KeymgrState()
        self.streams: dict[str, StreamState] = {}
        self.quarantined = 0
        self._cond = threading.Condition()
        self._reached: dict[int, int] = {}
        self._stop = threading.Event()
        self._error: str | None = None
        self._consumer = Consumer(
            kafka_config(
                bootstrap,
                **{
                    "group.id": f"wt-keymgr-follow-{uuid.uuid4().hex[:12]}",
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                    "enable.partition.eof": True,
                    "log_level": 3,
                },
            )
        )
        self._admin = AdminClient(kafka_config(bootstrap, log_level=3))
        meta = self._consumer.list_topics(self.topic, timeout=30).topics[self.topic]
        if meta.error is not None:
            raise NotReadyError(f"the events topic {self.topic} is not available ({meta.error}); run watchtower init")
        self.partitions = sorted(meta.partitions)
        self._consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in self.partitions])
        self._thread = threading.Thread(target=self._run, name="keymgr-follower", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()

    # ------------------------------------------------------------------ fold
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                records = next_batch(self._consumer, 500, 0.2)
            except KafkaException as exc:  # fatal consumer errors only; transient ones come as records
                self._error = str(exc)
                log.error("the events follower stopped: %s", exc)
                return
            if not records:
                continue
            with self._cond:
                for record in records:
                    err = record.error()
                    partition, offset = record.partition() or 0, record.offset() or 0
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            self._advance(partition, offset)
                        continue
                    self._fold(partition, offset, record.value())
                    self._advance(partition, offset + 1)
                self._cond.notify_all()

    def _advance(self, partition: int, offset: int) -> None:
        if offset > self._reached.get(partition, 0):
            self._reached[partition] = offset

    def _fold(self, partition: int, offset: int, value: bytes | None) -> None:
        try:
            event = decode_event(value)
            self.apply(event)
        except WatchtowerError as exc:
            self.quarantined += 1
            log.warning("quarantined %s[%d]@%d: %s", self.topic, partition, offset, exc.message[:_MAX_REASON])

    def apply(self, event: Event) -> None:
        """Fold one decoded event (MALFORMED_RECORD leaves every state as it was)."""
        # The stream actor's own events fold per stream; every other type goes to `KeymgrState`.
        if event.type in STREAM_EVENT_TYPES:
            state = self.streams.get(event.stream_id) or StreamState.initial(event.stream_id)
            self.streams[event.stream_id] = evolve(state, event)
        else:
            self.keymgr.apply(event)

    # ------------------------------------------------------------------ reads
    def _stable_ends(self, timeout_s: float) -> dict[int, int]:
        futures = self._admin.list_offsets(
            {TopicPartition(self.topic, p): OffsetSpec.latest() for p in self.partitions},
            isolation_level=IsolationLevel.READ_COMMITTED,
            request_timeout=timeout_s,
        )
        return {tp.partition: int(f.result(timeout=timeout_s).offset) for tp, f in futures.items()}

    def catch_up(self, timeout_s: float = CATCH_UP_TIMEOUT_S) -> None:
        """Block until everything committed before this call is folded (NOT_READY after `timeout_s`)."""
        if self._error is not None:
            raise NotReadyError(f"the key manager lost its view of the events topic ({self._error}); restart it")
        try:
            targets = self._stable_ends(timeout_s)
        except (KafkaException, TimeoutError) as exc:
            raise NotReadyError(f"the broker did not answer the events topic's end offsets ({exc}); retry") from None
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not all(self._reached.get(p, 0) >= end for p, end in targets.items()):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise NotReadyError("the key manager is still reading the events topic; retry in a moment")
                self._cond.wait(min(left, 0.5))

    @contextmanager
    def reading(self) -> Iterator[EventFollower]:
        """Hold the fold still while a request reads the state."""
        with self._cond:
            yield self

    def wait_until(self, predicate: Callable[[EventFollower], bool], timeout_s: float = 30.0) -> bool:
        """For tests and start-up: wait until `predicate(self)` holds (False on timeout)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not predicate(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.5))
        return True
