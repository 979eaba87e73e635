"""The replay worker's health file (``$WATCHTOWER_HEALTH_FILE``; nothing is written without it).

Written atomically (temporary file, then ``os.replace``) at most once a second and at every state
change (`workers.health.SideHealth`). Fields: ``worker``, ``pid``, ``state`` (starting | serving |
exiting), ``partitions`` (the ``replay`` partitions owned), ``replays`` (count per status:
pending, running, completed, canceled, errored), ``reemitted`` (deliveries committed since the
start), ``slices`` (committed transactions), ``aborted`` (aborted ones), ``quarantined`` and
``last_quarantined`` (the last 20 refused records as ``{topic, partition, offset, reason}``),
``updated_ms``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, ClassVar

from watchtower.protocol.replay.status import STATUSES, ReplayView
from watchtower.workers.health import SideHealth


class ReplayHealth(SideHealth):
    """Counters of one replay worker and their health file."""

    log: ClassVar[logging.Logger] = logging.getLogger("watchtower.replay.health")

    def __init__(self, worker: str, path: str | None = None) -> None:
        super().__init__(worker, path)
        self.replays = dict.fromkeys(STATUSES, 0)
        self.reemitted = self.slices = 0

    def count(self, views: Iterable[ReplayView]) -> None:
        counts = dict.fromkeys(STATUSES, 0)
        for view in views:
            counts[view.status] = counts.get(view.status, 0) + 1
        self.replays = counts

    def counters(self) -> dict[str, Any]:
        return {"replays": self.replays, "reemitted": self.reemitted, "slices": self.slices}
