"""Snapshots of a partition's aggregates on the compacted ``snapshots`` topic: writing and loading.

Writing (:class:`SnapshotPolicy`, used by the host): at the *start* of a batch, inside its
transaction and before any of its records, the host snapshots the states as they are after the
previous committed batch. The events partition's end offset at that moment covers exactly those
batches (the host is the partition's single writer and nothing of the new batch is produced yet),
so the snapshot is tagged with it. One snapshot record per partition, keyed ``p<partition>``, so
compaction keeps the latest; it commits or aborts with the batch. A snapshot is taken every
``every_events`` events or ``every_s`` seconds per partition (and only if events were written
since the last one), never per batch.

Loading (:func:`latest_snapshots`): the latest committed record of each partition is a *claim*. It
is quarantined (logged with topic, partition, offset and reason; the partition is then folded from
the start) when it does not decode with the codecs (:mod:`watchtower.protocol.stream.snapshots`), names
another partition, claims an events offset beyond the log's end, lacks a hosted aggregate's part,
or holds an instance that does not live on the partition. Bytes are CBOR, never pickle.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Final

from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.stream.snapshots import decode_snapshot, encode_snapshot
from watchtower.topics.partitioning import partition_for_key
from watchtower.topics.reader import end_offsets, read_committed
from watchtower.workers.aggregate import Aggregate
from watchtower.workers.event_fold import MAX_REASON_CHARS, PartitionState, Quarantined

log = logging.getLogger("watchtower.snapshots")

#: Defaults: snapshot a partition after this many events, or this long after the first unsnapshotted one.
EVERY_EVENTS: Final = 20_000
EVERY_S: Final = 60.0
#: How far back from the end the loader looks first for the latest snapshot record (a commit
#: marker follows each one; older records are only read when none is found there).
TAIL_WINDOW: Final = 64


def snapshot_key(partition: int) -> bytes:
    return f"p{partition}".encode()


def snapshot_value(partition: int, events_offset: int, states: Mapping[str, Mapping[str, Any]],
                   aggregates: Sequence[Aggregate]) -> bytes:
    """The snapshot record of one partition: every hosted aggregate's instances there."""
    return encode_snapshot(partition, events_offset,
                           {a.name: a.encode_snapshot(states.get(a.name, {})) for a in aggregates})


class SnapshotPolicy:
    """When each partition is due a snapshot: events written since the last one, and since when."""

    def __init__(self, every_events: int = EVERY_EVENTS, every_s: float = EVERY_S) -> None:
        self.every_events = every_events
        self.every_s = every_s
        self._pending: dict[int, int] = {}
        self._since: dict[int, float] = {}
        self._not_before: dict[int, float] = {}

    def written(self, partition: int, events: int) -> None:
        """``events`` more events of ``partition`` are committed (or were folded at a load)."""
        if events > 0:
            self._pending[partition] = self._pending.get(partition, 0) + events
            self._since.setdefault(partition, time.monotonic())

    def due(self, owned: Collection[int]) -> list[int]:
        now = time.monotonic()
        return [p for p in owned if self._pending.get(p, 0) > 0 and now >= self._not_before.get(p, 0.0) and (
            self._pending[p] >= self.every_events or now - self._since[p] >= self.every_s)]

    def retry_in(self, partition: int, seconds: float) -> None:
        """A snapshot of ``partition`` could not be taken for a passing reason: it stays due, but is
        not tried again for ``seconds`` (so a slow broker is not asked at every batch)."""
        self._not_before[partition] = time.monotonic() + seconds

    def taken(self, partitions: Collection[int]) -> None:
        """Snapshots of ``partitions`` were committed (or given up: the next after another period)."""
        for p in partitions:
            self._pending.pop(p, None)
            self._since.pop(p, None)
            self._not_before.pop(p, None)

    def forget(self, partition: int) -> None:
        self.taken([partition])


def latest_snapshots(bootstrap: str, topic: str, partitions: Collection[int], partition_count: int,
                     aggregates: Sequence[Aggregate], events_ends: Mapping[int, int],
                     quarantine: Callable[[Quarantined], None], *,
                     timeout_s: float = 120.0) -> dict[int, PartitionState | Quarantined]:
    """The state each partition's latest committed snapshot holds, or why it was quarantined.
    Partitions without any snapshot are missing from the result."""
    latest = _latest_records(bootstrap, topic, list(partitions), timeout_s)
    out: dict[int, PartitionState | Quarantined] = {}
    for p, (offset, key, value) in latest.items():
        try:
            out[p] = _check(p, key, value, aggregates, events_ends.get(p, 0), partition_count)
        except Exception as exc:  # nothing a record holds may stop the load
            reason = f"{exc.code}: {exc.message}" if isinstance(exc, WatchtowerError) else str(exc)
            reason = f"snapshot refused, folding the whole partition instead: {reason}"[:MAX_REASON_CHARS]
            entry = Quarantined(topic, p, offset, reason)
            quarantine(entry)
            out[p] = entry
    return out


def _latest_records(bootstrap: str, topic: str, partitions: list[int],
                    timeout_s: float) -> dict[int, tuple[int, bytes | None, bytes | None]]:
    ends = end_offsets(bootstrap, topic, partitions)
    found: dict[int, tuple[int, bytes | None, bytes | None]] = {}
    todo = [p for p in partitions if ends.get(p, 0) > 0]
    for window in (TAIL_WINDOW, None):
        if not todo:
            break
        start = {p: max(0, ends[p] - window) for p in todo} if window is not None else None
        for m in read_committed(bootstrap, [topic], partition=todo, timeout_s=timeout_s, start=start):
            found[int(m.partition() or 0)] = (int(m.offset() or 0), m.key(), m.value())
        todo = [p for p in todo if p not in found and window is not None and ends[p] > window]
    return found


def _check(partition: int, key: bytes | None, value: bytes | None, aggregates: Sequence[Aggregate],
           events_end: int, partition_count: int) -> PartitionState:
    if key != snapshot_key(partition):
        raise ValueError(f"the record key {key!r} is not {snapshot_key(partition)!r}")
    named, offset, parts = decode_snapshot(value)
    if named != partition:
        raise ValueError(f"it names partition {named}")
    if offset > events_end:
        raise ValueError(f"it covers events up to offset {offset}, beyond the log's end {events_end}")
    state = PartitionState(snapshot_offset=offset)
    for aggregate in aggregates:
        if aggregate.name not in parts:
            raise ValueError(f"it has no part for aggregate {aggregate.name!r}")
        instances = aggregate.decode_snapshot(parts[aggregate.name])
        for instance in instances:
            home = partition_for_key(instance.encode(), partition_count)
            if home != partition:
                raise ValueError(f"its {aggregate.name} instance {instance!r} belongs on partition {home}")
        state.states[aggregate.name] = dict(instances)
    return state
