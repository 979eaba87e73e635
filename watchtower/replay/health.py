"""The replay worker's health file (``$WATCHTOWER_HEALTH_FILE``; nothing is written without it).

Written atomically (temporary file, then ``os.replace``) at most once a second and at every state
change. Fields: ``worker``, ``pid``, ``state`` (starting | serving | exiting), ``partitions`` (the
``replay`` partitions owned), ``replays`` (count per status: pending, running, completed,
canceled, errored), ``reemitted`` (deliveries committed since the start), ``slices`` (committed
transactions), ``aborted`` (aborted ones), ``quarantined`` and ``last_quarantined`` (the last 20
refused records as ``{topic, partition, offset, reason}``), ``updated_ms``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

from watchtower.protocol.replay_status import STATUSES, ReplayView

log = logging.getLogger("watchtower.replay.health")


class ReplayHealth:
    """Counters of one replay worker and their health file."""

    def __init__(self, worker: str, path: str | None = None) -> None:
        self.worker, self.path = worker, path if path is not None else os.environ.get("WATCHTOWER_HEALTH_FILE")
        self.state = "starting"
        self.partitions: list[int] = []
        self.replays = dict.fromkeys(STATUSES, 0)
        self.reemitted = self.slices = self.aborted = self.quarantined = 0
        self.last_quarantined: deque[dict[str, Any]] = deque(maxlen=20)
        self._last_write = 0.0

    def quarantine(self, topic: str, partition: int, offset: int, reason: str) -> None:
        """Count and log a refused record (the fold or the slice goes on without it)."""
        self.quarantined += 1
        self.last_quarantined.append({"topic": topic, "partition": partition, "offset": offset, "reason": reason})
        log.warning("quarantined %s[%d]@%d: %s", topic, partition, offset, reason)

    def count(self, views: Iterable[ReplayView]) -> None:
        counts = dict.fromkeys(STATUSES, 0)
        for view in views:
            counts[view.status] = counts.get(view.status, 0) + 1
        self.replays = counts

    def set_state(self, state: str) -> None:
        if state != self.state:
            self.state = state
            self.write()

    def due(self) -> bool:
        """Whether a periodic write is due (at most one a second)."""
        return time.monotonic() - self._last_write >= 1.0

    def as_json(self) -> dict[str, Any]:
        return {"worker": self.worker, "pid": os.getpid(), "state": self.state, "partitions": self.partitions,
                "replays": self.replays, "reemitted": self.reemitted, "slices": self.slices,
                "aborted": self.aborted, "quarantined": self.quarantined,
                "last_quarantined": list(self.last_quarantined), "updated_ms": int(time.time() * 1000)}

    def write(self) -> None:
        self._last_write = time.monotonic()
        if not self.path:
            return
        tmp = f"{self.path}.tmp"
        try:
            with open(tmp, "w") as fh:
                json.dump(self.as_json(), fh)
            os.replace(tmp, self.path)
        except OSError as exc:  # best effort: a full disk must not stop the replays
            log.warning("cannot write the health file %s: %s", self.path, exc)
