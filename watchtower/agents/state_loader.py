"""Rebuild the aggregates of the owned partitions from the committed events — the projection rebuild."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection

from watchtower.agents.event_fold import EventFold, PartitionState, Quarantined
from watchtower.topics.reader import read_committed

log = logging.getLogger("watchtower.rebuild")

__all__ = ["PartitionState", "Quarantined", "load_partitions"]


def load_partitions(bootstrap: str, events_topic: str, partitions: Collection[int], partition_count: int, *,
                    timeout_s: float = 120.0,
                    on_quarantine: Callable[[Quarantined], None] | None = None) -> dict[int, PartitionState]:
    """Fold every committed event of the given ``partitions`` of ``events_topic`` (which has
    ``partition_count``) into their aggregates, in one scan of the log.

    Reads ``read_committed`` up to the last stable offset, so an aborted or still-open
    transaction of a previous owner never leaks into the state. A record that breaks a rule (see
    :mod:`watchtower.agents.event_fold`) is logged with its topic, partition, offset and reason,
    passed to ``on_quarantine``, listed in its partition's result and skipped: nothing a record
    contains makes this raise. It raises only when the log cannot be read (TimeoutError,
    KafkaException).
    """

    def quarantine(entry: Quarantined) -> None:
        log.error("quarantined event %s[%d]@%d: %s", entry.topic, entry.partition, entry.offset, entry.reason)
        if on_quarantine is not None:
            on_quarantine(entry)

    folds = {p: EventFold(events_topic, p, partition_count, on_quarantine=quarantine) for p in partitions}
    if folds:
        for m in read_committed(bootstrap, [events_topic], partition=list(folds), timeout_s=timeout_s):
            folds[int(m.partition() or 0)].apply(m.key(), m.value(), int(m.offset() or 0))
    return {p: fold.state for p, fold in folds.items()}
