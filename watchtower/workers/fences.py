"""How a transactional worker tells a transaction the coordinator aborted from a real rival.

A producer is fenced (``PRODUCER_FENCED``, ``INVALID_PRODUCER_EPOCH``) in two cases that look the
same from the client: another process initialised the same transactional id, or the transaction
coordinator aborted an open transaction that outlived ``transaction.timeout.ms`` and bumped the
epoch (what a broker restart under an open transaction does). Kafka Streams answers both by
starting over with a new producer; the group generation passed with the offsets (KIP-447) keeps a
real zombie from committing. A worker does the same, and only gives up after `MAX_FENCES` fences
within `FENCE_WINDOW_S`: two processes then keep fencing each other, which means two of them run
with one worker id.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

#: Fenced this many times within FENCE_WINDOW_S: another process runs with our worker id.
MAX_FENCES: Final = 3
FENCE_WINDOW_S: Final = 60.0


class FenceCounter:
    """Counts the fences of the last `window_s` seconds; `note` says whether to give up."""

    def __init__(self, limit: int = MAX_FENCES, window_s: float = FENCE_WINDOW_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self.window_s, self._clock = limit, window_s, clock
        self._times: list[float] = []

    def note(self) -> bool:
        """Record one fence; True when `limit` fences fell within the window (a rival runs)."""
        now = self._clock()
        self._times = [t for t in self._times if now - t < self.window_s] + [now]
        return len(self._times) >= self.limit

    def __len__(self) -> int:
        return len(self._times)


def rival_message(worker_id: str, fences: int, window_s: float = FENCE_WINDOW_S) -> str:
    """What a worker that gives up says: the cause and what to do."""
    return (f"worker {worker_id} was fenced {fences} times within {window_s:g}s: another process runs with the "
            "same worker id; give every worker its own id")
