"""Rebuild the aggregates of one partition from the committed events — the projection rebuild."""

from __future__ import annotations

import logging
from collections.abc import Callable

from watchtower.agents.event_fold import EventFold, PartitionState, Quarantined
from watchtower.topics.reader import read_committed

log = logging.getLogger("watchtower.rebuild")

__all__ = ["PartitionState", "Quarantined", "load_partition_states"]


def load_partition_states(bootstrap: str, events_topic: str, partition: int, partitions: int, *,
                          timeout_s: float = 120.0,
                          on_quarantine: Callable[[Quarantined], None] | None = None) -> PartitionState:
    """Fold every committed event of ``events_topic[partition]`` (of ``partitions``) into aggregates.

    Reads ``read_committed`` up to the last stable offset, so an aborted or still-open
    transaction of a previous owner never leaks into the state. A record that breaks a rule (see
    :mod:`watchtower.agents.event_fold`) is logged with its topic, partition, offset and reason,
    passed to ``on_quarantine``, listed in the result and skipped: nothing a record contains makes
    this raise. It raises only when the log cannot be read (TimeoutError, KafkaException).
    """

    def quarantine(entry: Quarantined) -> None:
        log.error("quarantined event %s[%d]@%d: %s", entry.topic, entry.partition, entry.offset, entry.reason)
        if on_quarantine is not None:
            on_quarantine(entry)

    fold = EventFold(events_topic, partition, partitions, on_quarantine=quarantine)
    for m in read_committed(bootstrap, [events_topic], partition=partition, timeout_s=timeout_s):
        fold.apply(m.key(), m.value(), int(m.offset() or 0))
    return fold.state
