"""Pauses of Python's cyclic garbage collector: measured in every service, and the long ones made rare.

A collection holds the interpreter lock from start to end, so every thread of the process (the
event loop serving HTTP, the reply reader, the worker's loop) waits for it. A *full* collection
(generation 2) traverses every object the collector tracks. In the API process beside 500
ingesting feeds (about 200,000 tracked objects) one cost about 100 ms of CPU and 110-220 ms of wall
time, every 25-30 s; a publish whose request or reply was in that process at that moment waited
for all of it, and those few publishes were the plain path's p99 (`bench/bench_ingest.py`).

**What is done about it** (`install`): after each full collection, whatever survived it is frozen
(``gc.freeze``: moved to the permanent generation, which later collections skip). Survivors of a
full collection are the process's long-lived state (tables, connections, modules), so the next full
collection traverses only what was allocated since, and costs a fraction of one over the whole heap.
The collector's own schedule is unchanged.

The price: a reference cycle among frozen objects that becomes garbage later (an HTTP connection
open at the moment of the freeze, closed afterwards) is not reclaimed while it is frozen.
Reference counting still frees everything that is not in a cycle. Every `THAW_EVERY_S` the permanent
generation is thawed (``gc.unfreeze``), so the next full collection traverses everything once and
reclaims such cycles: one long pause per period instead of one every half a minute, and the memory
that frozen garbage can hold stays bounded by what one period leaves.

``WATCHTOWER_GC_THAW_S`` sets the period in seconds (``0`` turns freezing off; the pauses are still
measured).

Metric: ``watchtower_gc_pause_seconds{generation}``, a histogram of every collection's wall time
(``python_gc_collections_total`` from the Prometheus client counts them too, without durations).
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from prometheus_client import Histogram

ENV_THAW: Final = "WATCHTOWER_GC_THAW_S"
#: How often the frozen survivors are thawed, so that garbage cycles among them are reclaimed.
THAW_EVERY_S: Final = 300.0
FULL: Final = 2

PAUSES = Histogram("watchtower_gc_pause_seconds",
                   "Wall time of each cyclic garbage collection (the process holds its interpreter lock "
                   "throughout), by generation (2: a full collection).", ["generation"],
                   buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0))


class GcPolicy:
    """A ``gc.callbacks`` entry: times each collection, and after each full one freezes its survivors,
    or thaws every frozen object once `thaw_every_s` has passed since the last thaw (module docstring).
    `thaw_every_s` of 0: measure only. `observe(generation, seconds)` sees every pause."""

    def __init__(self, *, thaw_every_s: float = THAW_EVERY_S, clock: Callable[[], float] = time.monotonic,
                 observe: Callable[[int, float], None] | None = None) -> None:
        self.thaw_every_s = thaw_every_s
        self._clock = clock
        self._observe = observe or _observe
        self._next_thaw = clock() + thaw_every_s
        self._started: float | None = None  # when the collection under way started (one at a time: the GIL)
        self.freezes = 0
        self.thaws = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        # Runs inside the collector, on whichever thread triggered it: never raise, never allocate much.
        if phase == "start":
            self._started = time.perf_counter()
            return
        started, self._started = self._started, None
        generation = int(info.get("generation", 0))
        if started is not None:
            self._observe(generation, time.perf_counter() - started)
        if generation != FULL or self.thaw_every_s <= 0:
            return
        # The collection has finished (the "stop" callback comes after it): the generations are
        # consistent, and right after a full collection every survivor sits in the oldest one.
        now = self._clock()
        if now >= self._next_thaw:
            gc.unfreeze()  # the next full collection traverses everything once, and reclaims frozen cycles
            self._next_thaw = now + self.thaw_every_s
            self.thaws += 1
        else:
            gc.freeze()
            self.freezes += 1


def _observe(generation: int, seconds: float) -> None:
    PAUSES.labels(str(generation)).observe(seconds)


_installed: GcPolicy | None = None
_lock = threading.Lock()


def thaw_every_s_from_env() -> float:
    """``WATCHTOWER_GC_THAW_S`` (seconds, ≥ 0; `THAW_EVERY_S` when unset). ValueError names the setting."""
    raw = os.environ.get(ENV_THAW, "").strip()
    if not raw:
        return THAW_EVERY_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{ENV_THAW} must be a number of seconds ≥ 0 (0 turns freezing off), got {raw!r}")
    return value


def install() -> GcPolicy:
    """Install the policy in this process (once; a second call returns the first). Call it from a
    service's entry point, after its imports: what is loaded by then is frozen at the first full
    collection like any other survivor."""
    global _installed
    with _lock:
        if _installed is None:
            _installed = GcPolicy(thaw_every_s=thaw_every_s_from_env())
            gc.callbacks.append(_installed)
        return _installed
