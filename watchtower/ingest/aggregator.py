"""The aggregator: tasks and runners' results in, one decision per tick out — a publish through
the stream actor, or an IngestFailed.

Per stream, ticks are finished strictly in order (a later tick waits for an earlier one), so
"the last finished tick" is one number, recoverable from the log after a crash: the greater of
the stream's last IngestFailed tick and the ``ingest_tick`` tag of its newest message
(`Sink.last_ingested_tick`). A tick at or below it is never finished again, so a restarted
aggregator neither publishes a tick twice nor reports it twice.

Hostile input is counted in `quarantined` by spec code and never reaches a decision: a task not
signed by this deployment's scheduler, a result from an unregistered or unselected runner or with
a bad signature, a result for another task, a replayed result (for a tick already finished), or a
result that is not canonical JSON. A registered, selected runner's result that breaks
``result_schema`` counts as that runner's SCHEMA_MISMATCH answer (and is counted too). Reading
and checking the input is `intake.Intake`, which the aggregator is; deciding and sending each
tick's outcome is here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from typing import Final

from watchtower.ingest.intake import Intake, Pending
from watchtower.ingest.runner import block_ms
from watchtower.ingest.sink_contract import (
    Flight,
    HeadMovedError,
    Sink,
    SinkRefusedError,
    TransientError,
    submitted,
)
from watchtower.ingest.view import IngestingStream, IngestionView
from watchtower.ingest.window import SendWindow
from watchtower.protocol.constants import BLOCK_INTERVAL_MS
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.ingestion import IngestReason, ProofType
from watchtower.protocol.ingestion.proof import Outcome, decide_proof
from watchtower.protocol.ingestion.records import IngestResult, IngestTask
from watchtower.protocol.ingestion.transform import (
    TransformError,
    apply_transform,
    check_payload_size,
    parse_transform,
)

log = logging.getLogger("watchtower.ingest.aggregator")

UNKNOWN_STREAM_GRACE_BLOCKS: Final = 60
BEHIND_S: Final = BLOCK_INTERVAL_MS / 1000
"""Streams held back by the send window for longer than this (a block): ingestion is falling behind,
and the window grows (`SendWindow.answered`)."""
REPLY_TIMEOUT_S: Final = 30.0
"""How long a publish or report waits for the worker's answer before its tick is tried again."""


class Aggregator(Intake):
    """See the module docstring. Not thread-safe: one loop drives it."""

    def __init__(self, view: IngestionView, scheduler: str, sink: Sink, *,
                 reply_timeout_s: float = REPLY_TIMEOUT_S, window: SendWindow | None = None) -> None:
        self.view = view
        self.scheduler = scheduler
        self.sink = sink
        self.pending: dict[str, dict[int, Pending]] = {}
        self.done: dict[str, int] = {}
        self.early: OrderedDict[tuple[str, int], list[tuple[IngestResult, bool]]] = OrderedDict()
        self.quarantined: Counter[str] = Counter()
        self._logged: dict[str, tuple[float, int]] = {}  # code -> (last line, records not logged since)
        self.published = 0
        self.tasks = 0  # tasks accepted (the scheduler's output, as this aggregator saw it)
        self.failed: Counter[str] = Counter()
        self.last_reasons: dict[str, list[str]] = {}
        self.lock = threading.RLock()
        self.flights: dict[str, Flight] = {}
        """Each stream's publish or report on its way (`step`)."""
        self.reply_timeout_s = reply_timeout_s
        self.dirty: set[str] = set()
        """Streams with news since their last drain (a task, a result, a retry); the others wait for the next block."""
        self.resync: dict[str, int] = {}
        """Streams whose head moved under the sink: the head the events fold must reach first."""
        self._height = -1
        self.waiting: dict[str, int] = {}  # stream -> the tick a transient error holds back (logged once)
        """Streams a thread is draining now (`step`)."""
        self.lags_ms: deque[int] = deque(maxlen=2_000)
        """Tick start to publish acknowledged, of the last publishes (operators' latency view)."""
        self._latest_lag_ms = -1
        """The most, since `take_lateness` last ran (-1: no publish since)."""
        self.window = SendWindow() if window is None else window
        """How many publishes and reports may be in flight together (`window`)."""
        self.held: OrderedDict[str, None] = OrderedDict()
        """Streams with a command to send that found the window full, oldest first."""
        self._held_since: float | None = None
        """Since when (monotonic) some stream has been held without a break."""
        self._serving: str | None = None
        """The held stream `step` is sending now."""

    # --- ownership (scale-out) -------------------------------------------------------------------

    def forget_finished(self) -> None:
        """Drop what this aggregator remembers as finished: each stream's last finished tick is
        read again from the events fold (after a rebalance, another member may have finished more)."""
        with self.lock:
            self.done.clear()
            self.resync.clear()

    def release(self, streams: set[str], timeout_s: float) -> bool:
        """Stop working on `streams` (another aggregator takes them): drop their pending ticks, then
        wait until none of them has a publish or report in flight (its outcome is then on the log,
        where the next owner reads it). False when one was still unanswered at `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        with self.lock:
            for sid in streams:
                self.pending.pop(sid, None)
                self.done.pop(sid, None)
                self.resync.pop(sid, None)
                self.dirty.discard(sid)
                self.held.pop(sid, None)
            flights = [self.flights.pop(sid) for sid in streams if sid in self.flights]
            for _flight in flights:
                self.window.forget()
        for flight in flights:
            try:
                flight.future.exception(max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                return False
        return True
    # --- decisions -------------------------------------------------------------------------------

    def step(self, height: int, expired_at: Callable[[str], int] | None = None) -> None:
        """Advance every stream that can move at block `height`: land the answers that came back,
        finish ticks in order, and send each stream's next publish or report.

        One thread drives it (the reader's). Nothing here waits for a reply: a stream with a
        command in flight (`flights`, at most one per stream, so its ticks still finish in order)
        is looked at again once the answer is in. Each step looks at the streams with news
        (`dirty`: a task, a result, an answer, a retry), and at every stream once per new block (a
        deadline may have passed).

        A tick times out once `height` is past its deadline and, with `expired_at(stream_id)` (the
        instant, Unix ms, up to which the stream's results have been read), once every result
        written before its deadline ended is in: a reader that lags never turns a runner's timely
        answer into a TIMEOUT."""
        with self.lock:
            if height != self._height:
                self._height = height
                ready = list(self.pending.keys() | self.flights.keys())
            else:
                ready = [sid for sid in self.dirty if sid in self.pending or sid in self.flights]
            self.dirty.difference_update(ready)
        for stream_id in ready:
            self._advance_safely(stream_id, height, expired_at)
        # Then the room the answers freed goes to the streams that found the window full, oldest
        # first: a tick held back is not overtaken by a newer one.
        while self.held and self.window.room():
            with self.lock:
                self._serving = self.held.popitem(last=False)[0]
            try:
                self._advance_safely(self._serving, height, expired_at)
            finally:
                self._serving = None
        if not self.held:
            self._held_since = None
        elif self._held_since is None:
            self._held_since = time.monotonic()

    def _behind(self) -> bool:
        return self._held_since is not None and time.monotonic() - self._held_since > BEHIND_S

    def _advance_safely(self, stream_id: str, height: int, expired_at: Callable[[str], int] | None) -> None:
        try:
            self._advance(stream_id, height, None if expired_at is None else expired_at(stream_id))
        except Exception:
            log.exception("ingestion of %s stopped on an unexpected error; it resumes next step", stream_id)
            self._retry(stream_id)

    def _advance(self, stream_id: str, height: int, read_to_ms: int | None) -> None:
        while True:
            flight = self.flights.get(stream_id)
            if flight is not None:
                if not flight.future.done():
                    if time.monotonic() - flight.started > self.reply_timeout_s:
                        flight.future.cancel()
                        self.flights.pop(stream_id, None)
                        self.window.answered(self.reply_timeout_s)
                        self.sink.forget_head(stream_id)  # it may have landed: the next attempt starts from the log
                        self._wait(stream_id, flight.task.tick, f"no answer to its {flight.kind} in "
                                   f"{self.reply_timeout_s:g} s (is a stream worker running?)")
                    return
                self.flights.pop(stream_id, None)
                answered = time.monotonic() if flight.answered is None else flight.answered
                self.window.answered(answered - flight.started, behind=self._behind())
                following = self._land(stream_id, flight)
                if isinstance(following, Flight):
                    self._fly(stream_id, following)
                    continue
                if not following:
                    return
                self._tick_finished(stream_id, flight.task.tick)
                continue
            with self.lock:
                ticks = self.pending.get(stream_id)
                if not ticks:
                    self.pending.pop(stream_id, None)
                    return
                tick = min(ticks)
                task, outcomes = ticks[tick].task, list(ticks[tick].outcomes)
                if self.window.room() == 0 or (self.held and stream_id != self._serving):
                    self.held.setdefault(stream_id)  # sent when an answer frees room, after older ones
                    return
            outcome = self._finish(stream_id, task, outcomes, height, read_to_ms)
            if isinstance(outcome, Flight):
                self._fly(stream_id, outcome)
                continue
            if not outcome:
                return
            self._tick_finished(stream_id, tick)

    def _fly(self, stream_id: str, flight: Flight) -> None:
        # Its answer is news: the stream is looked at in the next step, not at the next block (its
        # tick is counted, and a refusal reported, within a step of the answer).
        self.flights[stream_id] = flight
        self.window.sent()
        flight.future.add_done_callback(lambda _f: self._answered(stream_id, flight))

    def _answered(self, stream_id: str, flight: Flight) -> None:
        # The time is the flight's own: a cancelled or released flight never lends its stream a round trip.
        flight.answered = time.monotonic()
        self._retry(stream_id)

    def _tick_finished(self, stream_id: str, tick: int) -> None:
        with self.lock:
            ticks = self.pending.get(stream_id)
            if ticks is not None:
                ticks.pop(tick, None)

    def _finish(self, stream_id: str, task: IngestTask, outcomes: list[Outcome], height: int,
                read_to_ms: int | None) -> Flight | bool | None:
        """True: the tick is finished; a Flight: its publish or report is on its way; None: wait."""
        stream = self.view.streams.get(stream_id)
        if stream is None:
            if height > task.deadline_height + UNKNOWN_STREAM_GRACE_BLOCKS:
                self._count("STREAM_NOT_FOUND")
                return True
            return None  # the events fold has not seen the stream yet
        moved_to = self.resync.get(stream_id)
        if moved_to is not None:
            folded = self.view.head(stream_id)
            if folded is None or folded[0] < moved_to:
                self._retry(stream_id)
                return None
            with self.lock:
                del self.resync[stream_id]
                self.done.pop(stream_id, None)  # decided again from the log
        if stream_id not in self.done:
            self.done[stream_id] = max(self.view.last_failed_tick.get(stream_id, 0),
                                       self.sink.last_ingested_tick(stream))
        if task.tick <= self.done[stream_id]:
            return True
        if task.skip_from is not None:
            return self._report(stream, task, IngestReason.TICKS_SKIPPED,
                                f"ticks {task.skip_from}..{task.tick} were past the scheduler's catch-up limit")
        expired = height > task.deadline_height and (read_to_ms is None
                                                     or read_to_ms >= block_ms(task.deadline_height + 1))
        verdict = decide_proof(ProofType(task.proof_type), task.num_runners, outcomes, expired=expired)
        if verdict.pending:
            return None
        if verdict.result is None:
            return self._report(stream, task, verdict.reason or IngestReason.TIMEOUT, verdict.detail)
        return self._publish(stream, task, verdict.result)

    def _publish(self, stream: IngestingStream, task: IngestTask, result: bytes) -> Flight:
        try:
            transform = parse_transform(stream.config.transform_method, stream.config.task_definition)
            payloads = apply_transform(transform, result)
            for payload in payloads:
                check_payload_size(payload, paid=stream.paid)
        except TransformError as exc:
            return self._report(stream, task, exc.reason, exc.detail)
        except WatchtowerError as exc:
            return self._report(stream, task, IngestReason.TRANSFORM_FAILED, exc.message)
        future = submitted(self.sink, "publish", stream, task.tick, block_ms(task.tick_height), payloads)
        return Flight(stream, task, "publish", future, time.monotonic())

    def _report(self, stream: IngestingStream, task: IngestTask, reason: IngestReason, detail: str) -> Flight:
        first = task.skip_from if task.skip_from is not None else task.tick
        future = submitted(self.sink, "report", stream, first, task.tick, reason, detail[:512],
                           block_ms(task.tick_height))
        return Flight(stream, task, "report", future, time.monotonic(), reason)

    def _land(self, stream_id: str, flight: Flight) -> Flight | bool | None:
        """Apply a flight's answer: True when its tick is finished, a Flight when a report follows
        a refused publish, None when the tick waits (a retry, or the fold must catch up)."""
        task = flight.task
        exc = flight.future.exception()
        if isinstance(exc, HeadMovedError):
            with self.lock:
                self.resync[stream_id] = exc.head
            self._retry(stream_id)
            return None
        if isinstance(exc, TransientError):
            self._wait(stream_id, task.tick, str(exc))
            return None
        if flight.kind == "publish":
            if isinstance(exc, SinkRefusedError):
                return self._report(flight.stream, task, exc.reason, exc.detail)
            if isinstance(exc, WatchtowerError):
                return self._report(flight.stream, task, IngestReason.PUBLISH_REFUSED, f"{exc.code}: {exc.message}")
            if exc is not None:
                raise exc
            with self.lock:
                self.done[stream_id] = task.tick
                self.published += 1
                lag_ms = time.time_ns() // 1_000_000 - block_ms(task.tick_height)
                self.lags_ms.append(lag_ms)
                self._latest_lag_ms = max(self._latest_lag_ms, lag_ms)
            return True
        if isinstance(exc, WatchtowerError):
            # Refused for good (e.g. the key is no longer delegated): retrying cannot succeed.
            self._count("REPORT_REFUSED")
            log.error("IngestFailed for %s tick %d refused: %s: %s", stream_id, task.tick, exc.code, exc.message)
        elif exc is not None:
            raise exc
        with self.lock:
            self.done[stream_id] = task.tick
            self.failed[str(flight.reason)] += 1
            reasons = self.last_reasons.setdefault(stream_id, [])
            reasons.append(str(flight.reason))
            del reasons[:-10]
        return True

    def _wait(self, stream_id: str, tick: int, why: str) -> None:
        if self.waiting.get(stream_id) != tick:  # once per tick, not once per step
            self.waiting[stream_id] = tick
            log.warning("ingestion of %s tick %d waits: %s", stream_id, tick, why)
        self._retry(stream_id)

    def _retry(self, stream_id: str) -> None:
        with self.lock:
            self.dirty.add(stream_id)

    def take_lateness(self) -> float | None:
        """How late after its tick's start (s) the latest publishes were acknowledged, at most, since
        the last call; None when none was (`ingest.priority` takes the CPU back on it)."""
        with self.lock:
            lag_ms, self._latest_lag_ms = self._latest_lag_ms, -1
        return None if lag_ms < 0 else lag_ms / 1000

    def health(self) -> dict[str, object]:
        with self.lock:
            return self._health()

    def _health(self) -> dict[str, object]:
        lags = sorted(self.lags_ms)
        lag = {"p50": lags[len(lags) // 2], "p99": lags[min(len(lags) - 1, len(lags) * 99 // 100)]} if lags else None
        base = self.window.base_s()
        window = {"limit": self.window.limit, "in_flight": self.window.in_flight, "held": len(self.held),
                  "base_rtt_ms": None if base is None else round(base * 1000, 1)}
        return {"tasks": self.tasks, "published": self.published, "tick_to_ack_ms": lag, "failed": dict(self.failed),
                "window": window,
                "quarantined": dict(self.quarantined), "pending": sum(len(t) for t in self.pending.values()),
                "done": dict(self.done), "last_reasons": {k: list(v) for k, v in self.last_reasons.items()}}
