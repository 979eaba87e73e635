"""A consumed record as the code above the host sees it: Kafka stays at the edges.

The serving loop (`workers.loop`) turns each consumed confluent-kafka ``Message`` into a
`ConsumedRecord` (`workers.host.record_of`) before any worker sees it, so the decider, the
aggregates and the side workers never touch a client object.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Record headers as the consumer hands them over: (name, value) pairs, in order.
Headers = list[tuple[str, Any]]


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    """One consumed record: where it sits and what it holds."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers | None = None
