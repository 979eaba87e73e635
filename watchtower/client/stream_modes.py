"""The delivery modes of ``Subscriber.stream``: push, and push with pull fallback.

CIP-7 push is best-effort and at-least-once; PUSH_WITH_PULL_FALLBACK adds, on the subscriber's
side only, periodic `get_since` catch-up. Here a push source (`client.push.PushConsumer` on Kafka,
`client.sse.SseSource` over HTTP, or anything with ``poll(timeout_s) -> list[StreamMessage]``) is
merged with the Subscriber's own verified pull path so the application receives every message:

- each pushed message is verified with the Subscriber's `verify` (key chain included); one that
  fails, belongs to another stream or does not pass the Subscriber's filter is counted and
  skipped (the pull path reads the genuine one; a transport never stops the application);
- a pushed message at or below the Subscriber's cursor was handed out already: a duplicate,
  counted and dropped, so each (stream_id, sequence) reaches the application once;
- fallback mode hands messages out strictly in ascending order with no gap: a push of exactly
  cursor + 1 is released at once; a push beyond it waits in a bounded buffer and triggers a pull
  (`poll_page` with ``min_head`` = that sequence, a long poll, so a read side that trails the
  delivery worker is waited for, not spun on). With a filter the cursor + 1 test cannot tell a
  gap from non-matching sequences, so the pull with the filter decides. Pulls also run every
  `pull_interval_s`, and continuously (long polls) while the source reports itself unhealthy
  (``source.healthy`` False: an SSE connection down or stalled), or after it failed for good;
- push mode hands out what is pushed, verified, ascending and once: a message below the last one
  handed out is dropped, and a gap is not filled (that is what fallback is for);
- both modes tell a source that can resume (``source.resume_after``, `SseSource`) the cursor every
  round, so a connection that drops before its first event resumes from what the application
  holds rather than live: a gateway killed before the first push reached this subscriber costs it
  nothing once it is back (the gateway resends what was pushed meanwhile).

`StreamStats` counts what happened, for monitoring and tests.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator
from typing import Any, Final, Protocol

from watchtower.protocol.errors import InvalidArgumentError, WatchtowerError
from watchtower.protocol.stream.filters import compile_filter, parse_filter
from watchtower.protocol.stream.message import StreamMessage

log = logging.getLogger(__name__)

MODES: Final = ("pull", "push", "push-with-pull-fallback")
#: Pushed messages held while a gap below them is pulled; more are left to the pull.
MAX_PENDING: Final = 10_000
#: After a gap pull that moved nothing (a long poll the read side answered early), wait this long.
GAP_RETRY_S: Final = 0.2
#: A catch-up hands out what it has after this many pages, so the application starts early.
CATCH_UP_PAGES: Final = 10


class PulledPage(Protocol):
    """What a pull returns (`subscriber.Page`): the new messages and where the stream and the cursor stand."""

    @property
    def messages(self) -> tuple[StreamMessage, ...]: ...
    @property
    def head_sequence(self) -> int: ...
    @property
    def next_cursor(self) -> int: ...


class PullSide(Protocol):
    """What a stream run needs of its `subscriber.Subscriber`: its verified pull path and its cursor."""

    stream_id: str
    filter: Any

    @property
    def cursor(self) -> int: ...
    def verify(self, msg: StreamMessage) -> None: ...
    def poll_page(self, limit: int = ..., *, min_head: int | None = ..., wait_ms: int | None = ...) -> PulledPage: ...
    def advance_to(self, sequence: int) -> None: ...
    def follow(self, *, limit: int = ..., wait_ms: int = ...,
               idle_timeout_s: float | None = ...) -> Iterator[StreamMessage]: ...


class PushSource(Protocol):
    """What `Subscriber.stream` reads pushes from (`PushConsumer`, `SseSource`)."""

    def poll(self, timeout_s: float = ...) -> list[StreamMessage]: ...


@dataclasses.dataclass
class StreamStats:
    """Counters of one `Subscriber.stream` run."""

    delivered: int = 0  #: messages handed to the application
    pushed: int = 0  #: pushed messages handed out (verified, in order)
    pulled: int = 0  #: pulled messages handed out
    duplicates: int = 0  #: pushed messages already handed out (dropped)
    rejected: int = 0  #: pushed messages that did not verify or belong to another stream (skipped)
    unmatched: int = 0  #: pushed messages that do not pass the Subscriber's filter (skipped)
    skipped_gaps: int = 0  #: push mode: sequences jumped over (never pulled)
    timer_pulls: int = 0  #: catch-up pulls on the timer
    gap_pulls: int = 0  #: pulls triggered by a gap under a pushed message
    fallback_pulls: int = 0  #: pulls while the source was unhealthy or failed
    source_errors: int = 0  #: errors the source raised (fallback mode goes on pulling)


def check_stream_args(mode: str, source: PushSource | None, pull_interval_s: float) -> None:
    """INVALID_ARGUMENT for an unknown mode, a push mode without a source or a bad interval."""
    if mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    if mode != "pull" and source is None:
        raise InvalidArgumentError(f"mode {mode!r} needs source=PushConsumer(...) (Kafka) or SseSource(...) (HTTP)")
    if not pull_interval_s > 0:
        raise InvalidArgumentError(f"pull_interval_s must be > 0, got {pull_interval_s!r}")


def run_stream(sub: PullSide, mode: str, source: PushSource | None, *, limit: int, wait_ms: int,
               pull_interval_s: float, idle_timeout_s: float | None, poll_s: float,
               stats: StreamStats) -> Iterator[StreamMessage]:
    """The generator behind `Subscriber.stream` (see the module docstring; `check_stream_args` first)."""
    if mode == "pull":
        for msg in sub.follow(limit=limit, wait_ms=wait_ms, idle_timeout_s=idle_timeout_s):
            stats.delivered += 1
            stats.pulled += 1
            yield msg
        return
    assert source is not None  # check_stream_args
    merger = _Merger(sub, source, stats, fallback=mode != "push", limit=limit, wait_ms=wait_ms,
                     pull_interval_s=pull_interval_s, poll_s=poll_s)
    last_activity = time.monotonic()
    while True:
        got = 0
        for msg in merger.step():
            got += 1
            stats.delivered += 1
            yield msg
        now = time.monotonic()
        if got:
            last_activity = now
        elif idle_timeout_s is not None and now - last_activity >= idle_timeout_s:
            return


class _Merger:
    """One push source and the Subscriber's pull path, merged (state of one `stream` run)."""

    def __init__(self, sub: PullSide, source: PushSource, stats: StreamStats, *, fallback: bool, limit: int,
                 wait_ms: int, pull_interval_s: float, poll_s: float) -> None:
        self.sub, self.source, self.stats = sub, source, stats
        self.fallback, self.limit, self.wait_ms = fallback, limit, wait_ms
        self.pull_interval_s, self.poll_s = pull_interval_s, poll_s
        self.matches = compile_filter(parse_filter(sub.filter))
        self.pending: dict[int, StreamMessage] = {}
        self.next_pull = 0.0 if fallback else float("inf")  # fallback catches up from the cursor first
        self.source_failed = False
        self.gap_retry_at = 0.0

    def step(self) -> list[StreamMessage]:
        """Whatever can be handed out after one round: a pull when due, then one poll of the source."""
        out: list[StreamMessage] = []
        if self.fallback:
            out += self._pull_if_due()
        self._tell_cursor()
        out += self._receive()
        if self.fallback:
            out += self._release()
        return out

    def _tell_cursor(self) -> None:
        """Tell a source that can resume what the application holds (see the module docstring)."""
        resume_after = getattr(self.source, "resume_after", None)
        if callable(resume_after):
            resume_after(self.sub.cursor)

    # ------------------------------------------------------------------ pull side
    def _pull_if_due(self) -> list[StreamMessage]:
        now = time.monotonic()
        gap = self._gap()
        down = self.source_failed or not getattr(self.source, "healthy", True)
        if gap is not None and now < self.gap_retry_at:
            gap = None  # the last gap pull found the read side behind the push: give it a moment
        if gap is None and not down and now < self.next_pull:
            return []
        if gap is not None:
            self.stats.gap_pulls += 1
        elif down:
            self.stats.fallback_pulls += 1
        else:
            self.stats.timer_pulls += 1
        # A gap waits for the head to reach the pushed message; a down source long-polls like `follow`.
        min_head = gap if gap is not None else (self.sub.cursor + 1 if down else None)
        before = self.sub.cursor
        out, caught_up = self._catch_up(min_head)
        # Stopped early to hand a long catch-up out in parts: the next round goes on at once.
        self.next_pull = time.monotonic() + (self.pull_interval_s if caught_up else 0.0)
        if gap is not None and self.sub.cursor == before:
            self.gap_retry_at = time.monotonic() + GAP_RETRY_S
        return out

    def _gap(self) -> int | None:
        """The lowest pending sequence when something below it is still unknown, else None."""
        if not self.pending:
            return None
        low = min(self.pending)
        return low if low > self.sub.cursor + 1 else None

    def _catch_up(self, min_head: int | None) -> tuple[list[StreamMessage], bool]:
        """Pages from the cursor until the read side's head (the first one a long poll when asked);
        the messages, and whether it got there (False: it stopped after CATCH_UP_PAGES pages)."""
        out: list[StreamMessage] = []
        wait = self.wait_ms if min_head is not None else None
        pages = 0
        while True:
            before = self.sub.cursor
            page = self.sub.poll_page(self.limit, min_head=min_head, wait_ms=wait)
            out += page.messages
            self.stats.pulled += len(page.messages)
            self._drop_handled()
            if page.next_cursor >= page.head_sequence or self.sub.cursor == before:
                return out, True  # caught up with the read side (or it has nothing more to give now)
            pages += 1
            if pages >= CATCH_UP_PAGES:
                return out, False  # hand these out first
            min_head, wait = None, None

    # ------------------------------------------------------------------ push side
    def _receive(self) -> list[StreamMessage]:
        timeout = self.poll_s
        if self.fallback:
            timeout = max(0.0, min(timeout, self.next_pull - time.monotonic()))
            if self.source_failed:
                return []
        try:
            pushed = self.source.poll(timeout)
        except WatchtowerError as err:
            if not self.fallback:
                raise
            self.stats.source_errors += 1
            self.source_failed = True
            log.warning("the push source of %s failed (%s); going on with pulls only", self.sub.stream_id, err)
            return []
        out: list[StreamMessage] = []
        for msg in sorted(pushed, key=lambda m: m.sequence):  # a redelivery may interleave older ones
            if not self._admit(msg):
                continue
            if self.fallback:
                if len(self.pending) < MAX_PENDING:
                    self.pending[msg.sequence] = msg
                continue  # beyond the bound: the pull brings it
            if msg.sequence > self.sub.cursor + 1 and self.sub.filter is None:
                self.stats.skipped_gaps += msg.sequence - self.sub.cursor - 1
            self.sub.advance_to(msg.sequence)
            self.stats.pushed += 1
            out.append(msg)
        return out

    def _admit(self, msg: StreamMessage) -> bool:
        """Verified, of this stream, matching, and not handed out yet."""
        try:
            self.sub.verify(msg)
        except WatchtowerError as err:
            self.stats.rejected += 1
            log.warning("rejected a pushed message of %s: %s", self.sub.stream_id, err)
            return False
        if msg.sequence <= self.sub.cursor or msg.sequence in self.pending:
            self.stats.duplicates += 1
            return False
        if not self.matches(msg.headers()):
            self.stats.unmatched += 1
            return False
        return True

    def _release(self) -> list[StreamMessage]:
        """Pending pushes that continue the cursor without a gap, in order."""
        out: list[StreamMessage] = []
        while (msg := self.pending.pop(self.sub.cursor + 1, None)) is not None:
            self.sub.advance_to(msg.sequence)
            self.stats.pushed += 1
            out.append(msg)
        return out

    def _drop_handled(self) -> None:
        for seq in [s for s in self.pending if s <= self.sub.cursor]:
            del self.pending[seq]
