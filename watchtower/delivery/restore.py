"""What a delivery worker rebuilds when it is assigned partition *p*: the streams' states and schedules.

1. ``events`` *p* is folded with the aggregate host's `EventFold` (every aggregate hosted, so the
   keys of other aggregates are folded too and never mistaken for hostile records), from the
   partition's latest valid snapshot on ``snapshots`` (the stream workers write them, so recovery
   does not grow with the log) or from the beginning without one; a record that breaks a rule
   (or a refused snapshot) is quarantined and the fold goes on.
2. ``delivery.state`` *p* (compacted) is read to its end: the latest valid checkpoint of each
   stream wins. A record that does not decode, is keyed by another stream than it names, sits
   on another partition than its stream's, or is for a block beyond the worker's block clock
   (`push_checkpoint.checkpoint_block_refusal`: it would stall the stream's pushes until that
   block) is quarantined; the stream's latest checkpoint that passes is used.
3. ``messages`` *p* is consumed again from the lowest ``resume_offset`` of those checkpoints (the
   oldest message some subscriber still needs), or from the group's committed position when it is
   lower or no checkpoint needs anything (the beginning when the group never committed). Every
   message below a checkpoint's low watermark is ignored by its schedule, so nothing committed as
   pending is lost and nothing below the watermark is pushed again.

Everything is read ``read_committed``: an aborted transaction never reaches a fold or a schedule.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from watchtower.protocol.errors import MalformedRecordError, SchemaMismatchError
from watchtower.protocol.push.checkpoint import PushCheckpoint, checkpoint_block_refusal
from watchtower.schemas.delivery_records import decode_checkpoint
from watchtower.topics.partitioning import partition_for_key
from watchtower.topics.reader import end_offsets
from watchtower.topics.records import Record
from watchtower.workers.aggregates import default_aggregates
from watchtower.workers.event_fold import EventFold, PartitionState, Quarantined
from watchtower.workers.snapshots import latest_snapshots
from watchtower.workers.state_loader import scan_partition

Quarantine = Callable[[str, int, int, str], None]


@dataclass
class Restored:
    """One partition's rebuilt state and where the live consumer goes on from."""

    fold: EventFold
    events_offset: int
    checkpoints: dict[str, PushCheckpoint] = field(default_factory=dict)


def restore_partition(bootstrap: str, topics: dict[str, str], partition: int, partitions: int,
                      quarantine: Quarantine, now_block: int | None = None) -> Restored:
    """Steps 1 and 2 of the module docstring for `partition` (of `partitions`); `now_block` is the
    worker's block clock (None: no clock, checkpoints are not bounded by it)."""

    def fold_quarantine(entry: Quarantined) -> None:
        quarantine(entry.topic, entry.partition, entry.offset, entry.reason)

    aggregates = default_aggregates()
    ends = end_offsets(bootstrap, topics["events"], [partition])
    found = latest_snapshots(bootstrap, topics["snapshots"], [partition], partitions, aggregates, ends,
                             fold_quarantine).get(partition)
    start = found if isinstance(found, PartitionState) else None
    fold = EventFold(topics["events"], partition, partitions, on_quarantine=fold_quarantine, aggregates=aggregates,
                     state=start)
    # events keep coming while the stream worker serves: read what was there, the worker folds the rest live.
    events_offset = scan_partition(bootstrap, topics["events"], partition,
                                   lambda r: fold.apply(r.key, r.value, r.offset),
                                   start=(start.snapshot_offset or 0) if start is not None else 0, catch_up=True,
                                   group=_scan_group())
    restored = Restored(fold, events_offset)

    def checkpoint(record: Record) -> None:
        offset = record.offset
        try:
            cp = decode_checkpoint(record.value)
        except (MalformedRecordError, SchemaMismatchError) as exc:
            quarantine(topics["delivery-state"], partition, offset, exc.message)
            return
        reason = check_checkpoint_placement(cp, record.key, partition, partitions)
        if reason is None and now_block is not None:
            reason = checkpoint_block_refusal(cp, now_block)
        if reason is not None:
            quarantine(topics["delivery-state"], partition, offset, reason)
            return
        restored.checkpoints[cp.stream_id] = cp

    scan_partition(bootstrap, topics["delivery-state"], partition, checkpoint, group=_scan_group())
    return restored


def _scan_group() -> str:
    return f"wt-delivery-scan-{uuid.uuid4().hex[:12]}"


def check_checkpoint_placement(cp: PushCheckpoint, key: bytes | None, partition: int, partitions: int) -> str | None:
    """Why a checkpoint record is not where its stream's checkpoints go (None: it is)."""
    if key != cp.stream_id.encode():
        return f"the record key {key!r:.80} is not the checkpoint's stream id {cp.stream_id!r:.80}"
    home = partition_for_key(key, partitions)
    if home != partition:
        return f"checkpoints of stream {cp.stream_id!r:.80} belong on partition {home}, not {partition}"
    return None


def messages_start(committed: int | None, checkpoints: dict[str, PushCheckpoint]) -> int:
    """Step 3 of the module docstring: where ``messages`` is consumed again from (an offset ≥ 0)."""
    resume = [cp.resume_offset for cp in checkpoints.values() if cp.resume_offset is not None]
    start = committed if committed is not None and committed >= 0 else 0
    return min([start, *resume])
