"""Owning partitions: pausing each one until its aggregates are rebuilt from the log.

:class:`PartitionOwner` is the consumer-facing half of a worker
(:class:`~watchtower.workers.command_processor.CommandProcessor` is its subclass). On assignment
each commands partition (with its ``internal`` and ``ingest.commands`` twins) is paused, its aggregates are rebuilt by
:func:`~watchtower.workers.state_loader.load_partitions` (the latest snapshot plus the events after
it; a record that breaks a rule is quarantined, never fatal), and it is resumed. A rebuild that
cannot read the log yet is retried while the partition stays paused, so a command is never
decided against a missing state. Nothing raises out of a rebalance callback.

It also derives the health state from its partitions and its loop's flags (:meth:`PartitionOwner._update_state`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from watchtower.protocol.ledger.billing import block_height_at
from watchtower.topics.records import Record
from watchtower.workers.aggregate import Aggregate
from watchtower.workers.decider import CommandDecider
from watchtower.workers.health import HealthFile
from watchtower.workers.snapshots import SnapshotPolicy
from watchtower.workers.state_loader import CommittedOffsets, load_partitions

if TYPE_CHECKING:
    from watchtower.workers.loop import TransactionalLoop

log = logging.getLogger("watchtower.worker")

#: Timeout of the committed-offsets fetch before a rebuild.
OFFSETS_TIMEOUT_S: Final = 5.0
#: How long one rebuild may read the log. Without a snapshot a long log takes minutes to fold; the
#: bound is for a log that cannot be read at all, not for a slow one.
LOAD_TIMEOUT_S: Final = 1_800.0
#: Pause between attempts to rebuild a partition whose log could not be read.
LOAD_RETRY_S: Final = 2.0
RETRY_BACKOFF_S: Final = 0.5
#: Stable offset fetches (OFFSETS_TIMEOUT_S each) tried before a rebuild reads the last committed
#: offsets instead: together longer than the transaction timeout, so an open transaction of any
#: producer would have been aborted by then.
STABLE_TRIES_AFTER_FENCING: Final = 3


class PartitionOwner(CommandDecider):
    """The owned partitions and their rebuilt aggregates; the health state they imply."""

    consumer: Consumer
    #: the transactional loop this owner is plugged into: its flags drive the health state
    host: TransactionalLoop

    def __init__(self, bootstrap: str, worker_id: str, group: str, prefix: str | None,
                 clock_ms: Callable[[], int] | None, health: HealthFile | None,
                 aggregates: Sequence[Aggregate] | None = None, snapshots: SnapshotPolicy | None = None) -> None:
        super().__init__(prefix, clock_ms, aggregates)
        self.snapshots = snapshots or SnapshotPolicy()
        self.bootstrap = bootstrap
        self.worker_id = worker_id
        self.group = group
        self.health = health or HealthFile.from_env(worker_id)
        self._stop = threading.Event()
        self._owned: list[int] = []
        self._unloaded: set[int] = set()  # owned partitions still paused, waiting for their rebuild
        # A rebalance revokes every partition (the range assignor is eager), and most come straight
        # back. The states of those are kept (`_kept`) with the offsets this worker knows the group
        # holds for them (`_mine`: fetched at their rebuild, then its own commits); they are used
        # again only if the group's committed offsets are still exactly those, i.e. nobody else
        # decided a record of the partition in between (`_restore_kept`).
        self._kept: dict[int, dict[str, Any]] = {}
        self._mine: dict[tuple[str, int], int] = {}
        self._offsets = CommittedOffsets(bootstrap, group, timeout_s=OFFSETS_TIMEOUT_S,
                                         stable_tries=STABLE_TRIES_AFTER_FENCING)
        self._next_load_try = 0.0
        self._assigned = False

    def _update_state(self) -> None:
        if self.host.brokers_down:
            self.health.set_state("broker_unreachable")
        elif self.host.recovering or self._unloaded:
            self.health.set_state("recovering")
        elif not self._assigned:
            self.health.set_state("starting")
        else:
            self.health.set_state("serving")

    def assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Never raise out of a rebalance callback: librdkafka would surface it from poll() and the
        # worker would die on whatever the log or the cluster did. Partitions stay paused until
        # their aggregates are rebuilt, so no command is ever decided against a missing state.
        try:
            # Explicit offsets: left to the consumer, each partition would wait for the group's
            # *stable* committed offsets before it starts, which a hanging offset commit (after an
            # unclean broker restart) delays for good, and a seek to a partition not started fails.
            # The partitions stay paused; the rebuild seeks each to the offsets it fetched itself.
            consumer.assign([TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING) for tp in partitions])
            self._owned = sorted({tp.partition for tp in partitions if tp.topic == self.t_commands})
            for partition in list(self._kept):  # kept for a partition that went elsewhere: gone
                if partition not in self._owned:
                    self._drop_kept(partition)
            for partition in self._owned:  # whatever we held before is stale: another owner may have written
                if partition not in self._kept:
                    self._forget(partition)
            self._unloaded.update(self._owned)
            self._set_paused(self._owned, paused=True)
            self._load_pending()
        except Exception:
            log.exception("worker %s: handling the assignment failed; partitions stay paused and are "
                          "rebuilt again shortly", self.worker_id)
            self._next_load_try = time.monotonic() + LOAD_RETRY_S
        self._assigned = True
        self.health.set_partitions(self._owned)
        self._update_state()
        log.info("worker %s assigned %s", self.worker_id, self._owned)

    def revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            if tp.topic != self.t_commands:
                continue
            state = self._states.pop(tp.partition, None)
            if state is not None and tp.partition not in self._unloaded:
                self._kept[tp.partition] = state  # checked before any use (`_restore_kept`)
            else:
                self._forget(tp.partition)
            self._unloaded.discard(tp.partition)
        revoked = {tp.partition for tp in partitions if tp.topic == self.t_commands}
        self._owned = [p for p in self._owned if p not in revoked]
        self.health.set_partitions(self._owned)

    def _load_pending(self) -> bool:
        """Rebuild the owned partitions that have no state yet, in one scan; True when none is left.

        The group's committed offsets of those partitions are fetched first: a read_committed
        consumer asks for *stable* offsets, so the fetch returns only once any transaction still
        open on them (a dead owner's last batch) is settled, and the fold after it then sees that
        batch's outcome (or the last committed ones once stable fetches kept timing out:
        CommittedOffsets). The rebuilt partitions are moved to those offsets and resumed.
        """
        kept = sorted(p for p in self._unloaded if p in self._kept)
        if kept:
            self._restore_kept(kept)
        pending = sorted(self._unloaded)
        if not pending:
            return True
        log.info("worker %s rebuilds partitions %s", self.worker_id, pending)
        # The stable fetch may never settle after a broker restart (CommittedOffsets); this holds on
        # assignment as after a start over (the rebalance that follows a restart hits it too).
        started = time.monotonic()
        try:
            tps = [TopicPartition(t, p) for p in pending for t in self.input_topics]
            committed = self._offsets.fetch(tps)
            settled = time.monotonic()
            loaded = load_partitions(self.bootstrap, self.t_events, pending, self._partition_count(),
                                     now_block_height=block_height_at(self._clock_ms()),
                                     on_quarantine=self.health.quarantined, aggregates=self.aggregates,
                                     snapshots_topic=self.t_snapshots, timeout_s=LOAD_TIMEOUT_S)
            # Every rebuilt partition resumes from the offsets read here (the assignment gave
            # the consumer none of its own: assign).
            if committed:
                for tp in committed:
                    offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                    self.consumer.seek(TopicPartition(tp.topic, tp.partition, offset))
                    self._mine[(tp.topic, tp.partition)] = tp.offset
        except Exception as exc:
            log.warning("cannot rebuild partitions %s yet (%s); retrying in %gs", pending, exc, LOAD_RETRY_S)
            self._next_load_try = time.monotonic() + LOAD_RETRY_S
            return False
        for partition, state in loaded.items():
            self._states[partition] = state.states
            self.stats.quarantined += len(state.quarantined)
            self.stats.folded_events += state.folded
            self.stats.snapshot_loads += state.snapshot_offset is not None
            # What was folded is not in a snapshot yet: a long fold makes the next one due.
            self.snapshots.written(partition, state.folded)
            log.info("worker %s rebuilt partition %d: %d events folded after %s", self.worker_id, partition,
                     state.folded, "the whole log" if state.snapshot_offset is None
                     else f"the snapshot at events offset {state.snapshot_offset}")
        # Where a takeover's time goes: the stable offset fetch waits for a dead owner's open
        # transaction to be aborted (its transaction timeout); the rest reads snapshots and events.
        log.info("worker %s rebuilt partitions %s in %.1fs (%.1fs waiting for stable offsets, %.1fs reading the log)",
                 self.worker_id, sorted(loaded), time.monotonic() - started, settled - started,
                 time.monotonic() - settled)
        self.stats.rebuilt_partitions += len(loaded)
        self._unloaded.difference_update(loaded)
        self._set_paused(pending, paused=False)
        return True

    def _forget(self, partition: int) -> None:
        self._states.pop(partition, None)
        self._drop_kept(partition)

    def _drop_kept(self, partition: int) -> None:
        self._kept.pop(partition, None)
        self.snapshots.forget(partition)
        for topic in self.input_topics:
            self._mine.pop((topic, partition), None)

    def note_committed(self, offsets: Sequence[TopicPartition]) -> None:
        """This worker's transaction committed `offsets` (the next offset of each input partition)."""
        for tp in offsets:
            self._mine[(tp.topic, tp.partition)] = tp.offset

    def _restore_kept(self, kept: list[int]) -> None:
        """Use the kept state of each of `kept` again where the group's committed offsets of all its
        input partitions are still the ones this worker knows (no other worker decided a record of it
        meanwhile: deciding one commits its offset); rebuild the others from the log. Only this
        worker's own transactions can be open on such a partition, so the stable fetch is quick."""
        tps = [TopicPartition(t, p) for p in kept for t in self.input_topics]
        try:
            committed = {(tp.topic, tp.partition): tp.offset for tp in self._offsets.fetch(tps)}
        except Exception as exc:
            log.warning("worker %s: cannot check the kept partitions %s (%s); rebuilding them", self.worker_id,
                        kept, exc)
            committed = {}
        for partition in kept:
            keys = [(t, partition) for t in self.input_topics]
            if not all(k in committed and k in self._mine and committed[k] == self._mine[k] for k in keys):
                log.info("worker %s: partition %d moved on elsewhere since it was revoked; rebuilding it",
                         self.worker_id, partition)
                self._drop_kept(partition)
                continue
            for topic, _ in keys:
                offset = committed[(topic, partition)]
                self.consumer.seek(TopicPartition(topic, partition, offset if offset >= 0 else OFFSET_BEGINNING))
            self._states[partition] = self._kept.pop(partition)
            self._unloaded.discard(partition)
            self._set_paused([partition], paused=False)
            self.stats.kept_partitions += 1
            log.info("worker %s kept partition %d through the rebalance (no rebuild)", self.worker_id, partition)

    def _set_paused(self, partitions: list[int], *, paused: bool) -> None:
        tps = [TopicPartition(t, p) for p in partitions for t in self.input_topics]
        if tps:
            (self.consumer.pause if paused else self.consumer.resume)(tps)

    def _ready_only(self, batch: list[Record]) -> list[Record]:
        """The records of partitions with a rebuilt state; the others are put back (never decided)."""
        ready = [r for r in batch if r.partition in self._states]
        if len(ready) < len(batch):
            try:
                self._seek_to_firsts([r for r in batch if r.partition not in self._states])
            except KafkaException as exc:
                log.warning("could not put back records of a partition being rebuilt: %s", exc)
        return ready

    def _seek_to_firsts(self, batch: list[Record]) -> None:
        firsts: dict[tuple[str, int], int] = {}
        for r in batch:
            firsts.setdefault((r.topic, r.partition), r.offset)
        for (topic, partition), offset in firsts.items():
            self.consumer.seek(TopicPartition(topic, partition, offset))

    def _resync(self) -> None:
        """Rebuild every owned partition and seek it to the group's committed offsets."""
        try:
            self._owned = sorted({tp.partition for tp in self.consumer.assignment() if tp.topic == self.t_commands})
            for partition in [*self._owned, *self._kept]:
                self._forget(partition)
            self._unloaded = set(self._owned)
            self._set_paused(self._owned, paused=True)
        except KafkaException as exc:
            log.warning("reading the assignment failed (%s); the next rebalance rebuilds it", exc.args[0])
            return
        while not self._stop.is_set() and not self._load_pending():
            self._update_state()
            self.health.tick()
            self._stop.wait(RETRY_BACKOFF_S)
