"""What ``GET /v1/health`` says about this projection worker, truthfully.

- ``broker``: whether the Kafka cluster answered a metadata request lately. The probe runs in a
  thread (never on the event loop), at most once every `PROBE_INTERVAL_S`; a health request answers
  with the last result at once and starts a fresh probe when that result is stale. Only the very
  first request waits for a probe (bounded), so a fresh worker never claims a broker it has not seen.
- ``ready``: the worker's tables are recovered, no rebalance is under way, and the broker answers.
  A worker whose broker is gone serves tables that no longer move, so it is not ready.
- ``partitions``: the partitions of the events topic this worker owns (its share of the streams),
  not the consumer's whole multi-topic assignment.
- ``quarantined``: records this worker's partitions refused (see `quarantine`), count and last few.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Final

from watchtower.topics.metadata import ClusterProbe

PROBE_INTERVAL_S: Final = 2.0
PROBE_TIMEOUT_S: Final = 1.5


class BrokerProbe:
    """A cached answer to "does the Kafka cluster answer?"."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._cluster = ClusterProbe(bootstrap)
        self._topic = topic
        self._lock = threading.Lock()
        self._reachable: bool | None = None  # None until the first probe finished
        self._error = "not probed yet"
        self._checked = 0.0
        self._running: asyncio.Future[None] | None = None

    def _probe(self) -> None:
        error = self._cluster.why_unreachable(self._topic, PROBE_TIMEOUT_S)
        with self._lock:
            self._reachable, self._error, self._checked = error is None, error or "", time.monotonic()

    async def status(self) -> dict[str, object]:
        """``{"reachable": bool, "error"?: str, "checked_ms_ago": int}``; refreshes in the background."""
        loop = asyncio.get_running_loop()
        with self._lock:
            stale = time.monotonic() - self._checked >= PROBE_INTERVAL_S
            first = self._reachable is None
        if stale and (self._running is None or self._running.done()):
            self._running = loop.run_in_executor(None, self._probe)
        if first and self._running is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._running), PROBE_TIMEOUT_S + 1.0)
        with self._lock:
            body: dict[str, object] = {"reachable": bool(self._reachable)}
            if not self._reachable:
                body["error"] = self._error
            body["checked_ms_ago"] = int((time.monotonic() - self._checked) * 1000) if self._checked else None
        return body
