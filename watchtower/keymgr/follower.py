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

The records come from a `topics.log_follower.LogFollower`; the end offsets from
`topics.stable_offsets.StableOffsets`, whose AdminClient is replaced when its answers show stale
metadata (after a broker restart a long-lived one answered FENCED_LEADER_EPOCH for minutes).

`readiness` is what ``/v1/health`` reports: whether the last check of the broker's end offsets and
of the fold succeeded, and why not. A watch thread repeats that check every few seconds, so health
turns not-ready while reads fail even when no request arrives, and the client is replaced before
the next request needs it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final

from watchtower.protocol.errors import NotReadyError, WatchtowerError
from watchtower.protocol.ledger.keymgr_access import KeymgrState
from watchtower.protocol.stream.state import STREAM_EVENT_TYPES, Event, StreamState, evolve
from watchtower.schemas.wire import decode_event
from watchtower.topics.catalogue import topic_name
from watchtower.topics.errors import BrokerError, TopicUnavailableError
from watchtower.topics.log_follower import LogFollower
from watchtower.topics.records import EndOfPartition
from watchtower.topics.stable_offsets import StableOffsets

log = logging.getLogger("watchtower.keymgr.follower")

CATCH_UP_TIMEOUT_S: Final = 30.0
#: How long the watch thread waits for the broker's end offsets before it calls the service not ready.
PROBE_TIMEOUT_S: Final = 3.0
#: The watch thread's period while ready, and while not ready (recovery is seen sooner).
PROBE_INTERVAL_S: Final = 2.0
PROBE_RETRY_S: Final = 1.0
_MAX_REASON: Final = 300


@dataclass(frozen=True)
class Readiness:
    """Whether a request would be served now; `reason` says why not (None when ready)."""

    ready: bool
    reason: str | None = None


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
        self._readiness = Readiness(False, "the key manager is reading the events topic")
        self._readiness_at = 0.0  # when the check behind `_readiness` started
        self._ends_failing = False  # whether the last end-offsets query went unanswered
        try:
            self._log = LogFollower(bootstrap, self.topic, group_prefix="wt-keymgr-follow")
        except TopicUnavailableError as exc:
            raise NotReadyError(f"the events topic {self.topic} is not available ({exc.reason}); "
                                "run watchtower init") from None
        self.partitions = self._log.partitions
        self.end_offsets = StableOffsets(bootstrap, self.topic, self.partitions)
        self._thread = threading.Thread(target=self._run, name="keymgr-follower", daemon=True)
        self._watch_thread = threading.Thread(target=self._watch, name="keymgr-readiness", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._watch_thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._watch_thread.join(PROBE_TIMEOUT_S + 5)
        self._log.close()

    # ------------------------------------------------------------------ fold
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                records = self._log.poll(500, 0.2)
            except BrokerError as exc:  # the client failed for good; transient errors never come here
                self._error = str(exc)
                log.error("the events follower stopped: %s", exc)
                return
            if not records:
                continue
            with self._cond:
                for record in records:
                    if isinstance(record, EndOfPartition):
                        self._advance(record.partition, record.offset)
                        continue
                    self._fold(record.partition, record.offset, record.value)
                    self._advance(record.partition, record.offset + 1)
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
    def catch_up(self, timeout_s: float = CATCH_UP_TIMEOUT_S, *, ends_timeout_s: float | None = None) -> None:
        """Block until everything committed before this call is folded (NOT_READY after `timeout_s`).

        The broker has `ends_timeout_s` to answer the end offsets; by default all of `timeout_s`, or
        `PROBE_TIMEOUT_S` while the last query went unanswered (a request is refused in seconds, not
        held, while the broker is known to be away). Every outcome is what `readiness` reports next.
        """
        started = time.monotonic()
        if ends_timeout_s is None:
            ends_timeout_s = min(timeout_s, PROBE_TIMEOUT_S) if self._ends_failing else timeout_s
        try:
            self._catch_up(started + timeout_s, ends_timeout_s)
        except NotReadyError as err:
            self._record(started, Readiness(False, err.message))
            raise
        self._record(started, Readiness(True))

    def _catch_up(self, deadline: float, ends_timeout_s: float) -> None:
        if self._error is not None:
            raise NotReadyError(f"the key manager lost its view of the events topic ({self._error}); restart it")
        ends_timeout_s = min(ends_timeout_s, deadline - time.monotonic())
        try:
            targets = self.end_offsets.query(ends_timeout_s)
        except (BrokerError, TimeoutError) as exc:
            self._ends_failing = True
            why = str(exc) or f"no answer in {ends_timeout_s:.0f}s"
            raise NotReadyError(f"the broker did not answer the events topic's end offsets ({why}); retry") from None
        self._ends_failing = False
        with self._cond:
            while not all(self._reached.get(p, 0) >= end for p, end in targets.items()):
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    raise NotReadyError("the key manager is still reading the events topic; retry in a moment")
                self._cond.wait(min(left, 0.5))

    # ------------------------------------------------------------------ readiness
    def readiness(self) -> Readiness:
        """The outcome of the latest check: a request's catch-up or the watch thread's."""
        if self._error is not None:
            return Readiness(False, f"the key manager lost its view of the events topic ({self._error}); restart it")
        with self._cond:
            return self._readiness

    def _record(self, started: float, outcome: Readiness) -> None:
        # A check that started before the one recorded last is older news: it does not overwrite it.
        with self._cond:
            if started < self._readiness_at:
                return
            before, self._readiness, self._readiness_at = self._readiness, outcome, started
        if before.ready and not outcome.ready:
            log.warning("not ready: %s", (outcome.reason or "")[:_MAX_REASON])
        elif outcome.ready and not before.ready:
            log.info("ready again")

    def _watch(self) -> None:
        """Check the end offsets and the fold every few seconds, until stopped."""
        while not self._stop.wait(PROBE_INTERVAL_S if self.readiness().ready else PROBE_RETRY_S):
            with contextlib.suppress(NotReadyError):  # recorded by catch_up; health reports it
                self.catch_up(ends_timeout_s=PROBE_TIMEOUT_S)

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
