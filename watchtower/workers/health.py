"""The workers' health file: a small JSON document a supervisor can read at any time.

One module for every worker host. Written to ``$WATCHTOWER_HEALTH_FILE`` when that is set (nothing
is written otherwise), always atomically (`write_atomically`: a temporary file in the same
directory, then ``os.replace``), so a reader sees either the previous document or the next one,
never half of one. Writing is best effort: a failing disk is logged, never raised into the worker.

The stream worker's file (:class:`HealthFile`) has the fields:

- ``worker``, ``pid``: who wrote it;
- ``state``: ``starting`` | ``serving`` | ``recovering`` | ``broker_unreachable``;
- ``partitions``: the commands partitions the worker owns (sorted);
- ``quarantined``: how many event records its rebuilds refused; ``last_quarantined``: the last
  :data:`LAST_QUARANTINED` of them as ``{topic, partition, offset, reason}``;
- ``aborted_batches``: transactions aborted since the start;
- ``lane_yields``: transactions of ingested publishes ended early for a client's command;
- ``updated_ms``: wall-clock time of this write (a stale value means a stuck or dead worker).

The worker calls the setters as things happen and :meth:`HealthFile.tick` from its loop; a
state or assignment change is written at once, anything else at most once a second.

A side worker's file (:class:`SideHealth`: push delivery, replay) has ``worker``, ``pid``,
``state`` (starting | serving | exiting), ``partitions`` (owned), then the worker's own counters
(`SideHealth.counters`, defined by `delivery.health` and `replay.health`), then ``aborted``
(transactions aborted), ``quarantined`` and ``last_quarantined`` (the last 20 refused records as
``{topic, partition, offset, reason}``), ``updated_ms``; written at most once a second (the worker
asks `SideHealth.due`) and at every state change.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, ClassVar, Final, Literal

from watchtower.metrics import common as common_metrics
from watchtower.metrics import worker as worker_metrics
from watchtower.workers.event_fold import Quarantined

log = logging.getLogger("watchtower.health")

ENV_VAR: Final = "WATCHTOWER_HEALTH_FILE"
LAST_QUARANTINED: Final = 20
MIN_INTERVAL_S: Final = 1.0

State = Literal["starting", "serving", "recovering", "broker_unreachable"]


def write_atomically(path: str, doc: dict[str, Any], logger: logging.Logger = log, *, warn: bool = True) -> bool:
    """Write `doc` as JSON to `path` through a temporary file and ``os.replace``; False (logged when
    `warn`) when the disk refused it."""
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, separators=(",", ":"))
        os.replace(tmp, path)
    except OSError as exc:
        if warn:
            logger.warning("cannot write the health file %s: %s", path, exc)
        return False
    return True


class HealthFile:
    """Thread-safe writer of one worker's health file (a no-op without a path)."""

    def __init__(self, path: str | None, worker: str, *, clock_ms: Callable[[], int] | None = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.path = path or None
        self.worker = worker
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._state: State = "starting"
        self._partitions: list[int] = []
        self._quarantined = 0
        self._last_quarantined: deque[Quarantined] = deque(maxlen=LAST_QUARANTINED)
        self._aborted_batches = 0
        self._lane_yields = 0
        self._last_write = -1e9  # the first tick writes
        self._warned = False

    @classmethod
    def from_env(cls, worker: str) -> HealthFile:
        return cls(os.environ.get(ENV_VAR), worker)

    # ------------------------------------------------------------------ setters
    @property
    def state(self) -> State:
        return self._state

    def set_state(self, state: State) -> None:
        with self._lock:
            changed = state != self._state
            self._state = state
        if changed:
            self.write()

    def set_partitions(self, partitions: list[int]) -> None:
        with self._lock:
            self._partitions = sorted(partitions)
        self.write()

    def quarantined(self, entry: Quarantined) -> None:
        with self._lock:
            self._quarantined += 1
            self._last_quarantined.append(entry)
        # A flood of bad records must not become a flood of file writes: batch them.
        self.tick(min_interval_s=0.1)

    def set_counts(self, *, aborted_batches: int, lane_yields: int) -> None:
        with self._lock:
            self._aborted_batches, self._lane_yields = aborted_batches, lane_yields

    # ------------------------------------------------------------------ writing
    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "worker": self.worker,
                "pid": os.getpid(),
                "state": self._state,
                "partitions": list(self._partitions),
                "quarantined": self._quarantined,
                "last_quarantined": [q.to_dict() for q in self._last_quarantined],
                "aborted_batches": self._aborted_batches,
                "lane_yields": self._lane_yields,
                "updated_ms": self._clock_ms(),
            }

    def tick(self, min_interval_s: float = MIN_INTERVAL_S) -> None:
        """Write if the last write is at least ``min_interval_s`` old (refreshing ``updated_ms``)."""
        if self._monotonic() - self._last_write >= min_interval_s:
            self.write()

    def write(self) -> None:
        """Write the file now (atomically)."""
        if self.path is None:
            return
        if not write_atomically(self.path, self.snapshot(), warn=not self._warned):
            self._warned = True
            return
        with self._lock:
            self._last_write = self._monotonic()


class MeteredHealthFile(HealthFile):
    """The worker's health file, also counting each quarantined record in the metrics."""

    def quarantined(self, entry: Quarantined) -> None:
        common_metrics.quarantined(worker_metrics.SERVICE, entry.topic, entry.reason)
        super().quarantined(entry)


class SideHealth:
    """Counters of one side worker and their health file; a subclass adds its counters in `counters`."""

    log: ClassVar[logging.Logger] = logging.getLogger("watchtower.workers.health")

    def __init__(self, worker: str, path: str | None = None) -> None:
        self.worker, self.path = worker, path if path is not None else os.environ.get(ENV_VAR)
        self.state = "starting"
        self.partitions: list[int] = []
        self.aborted = self.quarantined = 0
        self.last_quarantined: deque[dict[str, Any]] = deque(maxlen=LAST_QUARANTINED)
        self._last_write = 0.0

    def quarantine(self, topic: str, partition: int, offset: int, reason: str) -> None:
        """Count and log a refused record (the worker goes on without it)."""
        self.quarantined += 1
        self.last_quarantined.append({"topic": topic, "partition": partition, "offset": offset, "reason": reason})
        self.log.warning("quarantined %s[%d]@%d: %s", topic, partition, offset, reason)

    def set_state(self, state: str) -> None:
        if state != self.state:
            self.state = state
            self.write()

    def due(self) -> bool:
        """Whether a periodic write is due (at most one a second)."""
        return time.monotonic() - self._last_write >= MIN_INTERVAL_S

    def counters(self) -> dict[str, Any]:
        """The worker's own fields, written between ``partitions`` and ``aborted``."""
        return {}

    def as_json(self) -> dict[str, Any]:
        return {"worker": self.worker, "pid": os.getpid(), "state": self.state, "partitions": self.partitions,
                **self.counters(), "aborted": self.aborted, "quarantined": self.quarantined,
                "last_quarantined": list(self.last_quarantined), "updated_ms": int(time.time() * 1000)}

    def write(self) -> None:
        self._last_write = time.monotonic()
        if self.path:  # best effort: a full disk must not stop the worker
            write_atomically(self.path, self.as_json(), self.log)
