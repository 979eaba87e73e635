"""The health file of a transactional side worker (``$WATCHTOWER_HEALTH_FILE``; nothing is written
without it): the fields every such worker writes, and the writer.

Written atomically (temporary file, then ``os.replace``) at most once a second (the worker asks
`due`) and at every state change. Fields: ``worker``, ``pid``, ``state`` (starting | serving |
exiting), ``partitions`` (owned), then the worker's own counters (`counters`), then ``aborted``
(transactions aborted), ``quarantined`` and ``last_quarantined`` (the last 20 refused records as
``{topic, partition, offset, reason}``), ``updated_ms``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import deque
from typing import Any, ClassVar

LAST_QUARANTINED = 20


class TxWorkerHealth:
    """Counters of one worker and their health file; a subclass adds its counters in `counters`."""

    log: ClassVar[logging.Logger] = logging.getLogger("watchtower.workers.tx_health")

    def __init__(self, worker: str, path: str | None = None) -> None:
        self.worker, self.path = worker, path if path is not None else os.environ.get("WATCHTOWER_HEALTH_FILE")
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
        return time.monotonic() - self._last_write >= 1.0

    def counters(self) -> dict[str, Any]:
        """The worker's own fields, written between ``partitions`` and ``aborted``."""
        return {}

    def as_json(self) -> dict[str, Any]:
        return {"worker": self.worker, "pid": os.getpid(), "state": self.state, "partitions": self.partitions,
                **self.counters(), "aborted": self.aborted, "quarantined": self.quarantined,
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
        except OSError as exc:  # best effort: a full disk must not stop the worker
            self.log.warning("cannot write the health file %s: %s", self.path, exc)
