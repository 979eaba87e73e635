"""The delivery worker's health file (``$WATCHTOWER_HEALTH_FILE``; nothing is written without it).

Written atomically (temporary file, then ``os.replace``) at most once a second and at every state
change (`workers.health.SideHealth`). Fields: ``worker``, ``pid``, ``state`` (starting | serving | exiting),
``partitions`` (the partition numbers of ``events`` / ``messages`` owned), ``streams`` (schedules
held), ``delivered`` (deliveries committed since the start), ``blocks`` (block heights in which it
committed deliveries), ``pending`` (an upper bound of the (subscriber, message) pairs still owed,
filters not applied), ``dropped`` (pairs that fell out of the bounded backlog, or cost more than a
whole block, summed over the owned streams), ``transactions`` / ``aborted``, ``quarantined`` and
``last_quarantined`` (the last 20 refused records as ``{topic, partition, offset, reason}``),
``updated_ms``.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from watchtower.workers.health import SideHealth


class DeliveryHealth(SideHealth):
    """Counters of one delivery worker and their health file."""

    log: ClassVar[logging.Logger] = logging.getLogger("watchtower.delivery.health")

    def __init__(self, worker: str, path: str | None = None) -> None:
        super().__init__(worker, path)
        self.streams = self.delivered = self.blocks = self.pending = self.dropped = 0
        self.transactions = 0
        self._last_block: int | None = None

    def committed(self, deliveries: int, block: int) -> None:
        """A transaction committed with `deliveries` pushes paid by `block`."""
        self.transactions += 1
        self.delivered += deliveries
        if deliveries and block != self._last_block:
            self.blocks += 1
            self._last_block = block

    def counters(self) -> dict[str, Any]:
        return {"streams": self.streams, "delivered": self.delivered, "blocks": self.blocks,
                "pending": self.pending, "dropped": self.dropped, "transactions": self.transactions}
