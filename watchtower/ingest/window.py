"""An adaptive bound on the aggregator's publishes and reports in flight.

A block's ticks finish together: the runners answer within milliseconds of each other, so without
a bound every ingesting feed's publish reaches the stream worker in the same instant. The worker
decides commands in arrival order, so a plain publish sent during that burst waits behind all of
them (hundreds of milliseconds at 500 feeds). The window keeps the burst in the aggregator
instead, where it delays only ingestion, and lets through as much as the worker decides without a
queue forming.

It follows TCP Vegas, as request-concurrency limiters do: with `limit` commands in flight and the
least round trip of late `base_s`, a round trip of `rtt_s` means that about
``limit × (1 − base_s / rtt_s)`` of them wait in a queue instead of being decided. Each answer moves
the limit by one: up while that queue is below `low`, down while it is above `high`. Since about
`limit` answers come back per round trip, the limit can double in one round trip when the worker
has room, and halve in one when a queue builds. The base is the least round trip of the last
`base_period_s` seconds, so it follows a slower or faster worker instead of remembering one
lucky answer forever.

Keeping up comes first. Under load a round trip grows with the worker's batches and the busy
machine, not only with a queue, so the estimate can hold the limit below what the feeds need. When
the aggregator reports that it is behind (streams have waited for room for longer than a block),
every answer grows the limit whatever the estimate says, until the backlog is gone; then the
estimate brings it back down.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Final

MIN_LIMIT: Final = 16
MAX_LIMIT: Final = 4096
INITIAL_LIMIT: Final = 64
QUEUE_LOW: Final = 24
"""Below this many commands queued at the worker, the limit grows."""
QUEUE_HIGH: Final = 64
"""Above this many, it shrinks: at the worker's few hundred µs a command, a plain publish sent
during a burst waits some 20–40 ms behind ingestion instead of the whole block's burst.

Measured at 500 feeds on 2 cores (docs/ingestion.md): bounds of 48–128 left the plain path's p99
3.4–5.8× its own; 24–64 brought it to 2.1–2.3× with tick → visible p99 at 0.6–0.7 s; 12–32 gave
2.1–2.6× but pushed tick → visible p99 to 1.0–1.15 s (smaller transactions cost the worker and the
broker more per tick). Measured again with the command lane and ingestion at niceness 10, two runs
each, alternated: 48–128 gave 2.38–2.66× and 64–192 gave 3.11–3.16× (the worker's and the broker's
CPU per tick fell by up to a tenth, but the plain publish waited longer for the projection), against
1.57–2.30× at 24–64."""
BASE_PERIOD_S: Final = 10.0


class SendWindow:
    """Not thread-safe: the aggregator's loop calls it, and answers are fed back from that loop."""

    def __init__(self, *, low: int = QUEUE_LOW, high: int = QUEUE_HIGH, initial: int = INITIAL_LIMIT,
                 min_limit: int = MIN_LIMIT, max_limit: int = MAX_LIMIT, base_period_s: float = BASE_PERIOD_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not 0 <= low <= high:
            raise ValueError(f"need 0 <= low <= high, got low={low}, high={high}")
        if not 1 <= min_limit <= initial <= max_limit:
            raise ValueError(f"need 1 <= min_limit <= initial <= max_limit, got {min_limit}, {initial}, {max_limit}")
        self.low, self.high = low, high
        self.min_limit, self.max_limit = min_limit, max_limit
        self.limit = initial
        self.in_flight = 0
        self.base_period_s = base_period_s
        self.clock = clock
        # (bucket start, least round trip in it): one bucket a second, the base is their least.
        self._minima: deque[tuple[float, float]] = deque()

    def room(self) -> int:
        """How many more commands may be sent now."""
        return max(0, self.limit - self.in_flight)

    def sent(self) -> None:
        self.in_flight += 1

    def forget(self) -> None:
        """A command in flight is no longer this aggregator's to wait for (its stream moved away)."""
        self.in_flight = max(0, self.in_flight - 1)

    def answered(self, rtt_s: float, *, behind: bool = False) -> None:
        """A command sent `rtt_s` seconds ago has its answer (a refusal or a timeout counts too:
        the worker did, or could not, decide it). `behind`: the sender has had commands waiting
        for room for longer than it can afford, so the limit grows."""
        self.in_flight = max(0, self.in_flight - 1)
        base = self._observe(max(rtt_s, 1e-6))
        queued = self.limit * (1.0 - base / max(rtt_s, 1e-6))
        if behind or queued < self.low:
            self.limit = min(self.max_limit, self.limit + 1)
        elif queued > self.high:
            self.limit = max(self.min_limit, self.limit - 1)

    def base_s(self) -> float | None:
        """The least round trip of the last `base_period_s` seconds (None before any answer)."""
        return min((m for _t, m in self._minima), default=None)

    def _observe(self, rtt_s: float) -> float:
        now = self.clock()
        while self._minima and now - self._minima[0][0] > self.base_period_s:
            self._minima.popleft()
        if self._minima and now - self._minima[-1][0] < 1.0:
            start, least = self._minima[-1]
            self._minima[-1] = (start, min(least, rtt_s))
        else:
            self._minima.append((now, rtt_s))
        return min(m for _t, m in self._minima)
