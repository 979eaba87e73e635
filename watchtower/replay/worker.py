"""The replay worker: fulfils the ICRC-77 replays of the ``replay`` partitions it owns.

It joins the consumer group ``wt-<prefix>.replay-worker`` on ``replay`` (read_committed). On the
assignment of partition *p* it folds *p* from the beginning with `protocol.replay.status` (a
record that breaks a rule is quarantined: logged with topic/partition/offset and reason, counted,
skipped) and then keeps consuming it. A record it wrote itself is applied to its view only once
its transaction committed (and skipped when read back), so an aborted transaction never needs an
undo in memory, and the next slice does not wait for the round trip.

The unfinished replays of the owned partitions are served round-robin, one slice at a time
(``WATCHTOWER_REPLAY_SLICE`` records of ``messages``, default 1000), at most
``WATCHTOWER_REPLAY_RATE`` records/s (0 = no cap). A slice reads ``messages`` partition *p* from the
checkpoint and writes, in ONE Kafka transaction, the deliveries, one replay record (the new
checkpoint or the terminal record) and the group's consumed offsets (``send_offsets_to_transaction``):
so a zombie (an evicted worker) is fenced, and ``kill -9`` anywhere leaves exactly the last
committed checkpoint with exactly its deliveries. A fenced or fatally failed producer is replaced
and the worker starts over from the log; only repeated fences (another process with the same worker
id) make it exit (code 3) for its supervisor (`workers.host`); any other failed transaction is
aborted and the slice is done again from the checkpoint.

When a replay ends (the terminal record: completed, canceled or errored), the same transaction also
writes a ``ReplayFinished`` forward to the stream on ``internal`` (keyed by the stream id, on the
stream's partition), so the stream answers a later cancel of it CANNOT_CANCEL
(`protocol.replay.control.finish_replay`). Its origin is the replay's registration (caller, nonce,
digest of the signed register_replay).

A ``registered`` record is fulfilled only when it carries its requester's signed register_replay
and matches it (`protocol.replay.registration`); any other is quarantined like a record that breaks
a rule. A requested cancel is honoured at the next slice (``canceled``, nothing more is delivered). A plan
above the Spark threshold is handed off (`handoff`). The worker writes ``deliveries`` and
``replay`` only, never ``messages``, ``events`` or ``commands``.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import ClassVar, Final

from watchtower.metrics.side_workers import replay_progress
from watchtower.protocol.errors import MalformedRecordError, SchemaMismatchError, WatchtowerError
from watchtower.protocol.ledger.common import Origin, ReplayFinished
from watchtower.protocol.placement import misplacement
from watchtower.protocol.replay.records import (
    ReplayCanceled,
    ReplayCompleted,
    ReplayErrored,
    ReplayRecord,
)
from watchtower.protocol.replay.records import (
    ReplayCancelRequest as ReplayCancelRequested,
)
from watchtower.protocol.replay.records import (
    ReplayRegistration as ReplayRegistered,
)
from watchtower.protocol.replay.registration import check_registration_command
from watchtower.protocol.replay.rules import ReplaySelector, selector_for
from watchtower.protocol.replay.status import ReplayRuleError, ReplayView, apply_replay_record
from watchtower.replay.archive import ArchiveReader
from watchtower.replay.fulfil import SliceResult, cancel_record, fulfil_slice, start_offset
from watchtower.replay.handoff import SparkLauncher, spark_progress, spark_threshold, wants_spark
from watchtower.replay.health import ReplayHealth
from watchtower.schemas.replay_records import decode_replay_record, encode_replay_record
from watchtower.schemas.wire import encode_replay_finished
from watchtower.topics.catalogue import topic_name
from watchtower.topics.partitioning import partition_for_key
from watchtower.topics.records import Record
from watchtower.workers.state_loader import scan_partition
from watchtower.workers.tx_worker import (
    TopicPartitionId,
    TransactionalWorker,
    env_int,
    worker_group,
)

log = logging.getLogger("watchtower.replay")

ENV_SLICE: Final = "WATCHTOWER_REPLAY_SLICE"
ENV_RATE: Final = "WATCHTOWER_REPLAY_RATE"
DEFAULT_SLICE: Final = 1000
#: A fold of a replay partition that reads nothing for this long gives up; the rebuild is retried.
FOLD_STALL_S: Final = 60.0


def group_id(prefix: str | None = None) -> str:
    """The replay workers' consumer group of one deployment: ``wt-<prefix>.replay-worker``."""
    return worker_group("replay", prefix)


class ReplayWorker(TransactionalWorker):
    """Call `run` (blocking) and `stop` from elsewhere (a signal handler)."""

    kind: ClassVar[str] = "replay"
    log: ClassVar[logging.Logger] = log
    health: ReplayHealth

    def __init__(self, bootstrap: str, worker_id: str, *, prefix: str | None = None, slice_size: int | None = None,
                 rate: float | None = None, threshold: int | None = None,
                 clock_ms: Callable[[], int] | None = None, health: ReplayHealth | None = None) -> None:
        self.prefix = prefix
        self.t_replay, self.t_messages = topic_name("replay", prefix), topic_name("messages", prefix)
        self.t_deliveries = topic_name("deliveries", prefix)
        self.t_internal = topic_name("internal", prefix)
        self.slice_size = max(1, slice_size if slice_size is not None else env_int(ENV_SLICE, DEFAULT_SLICE))
        self.rate = float(rate if rate is not None else env_int(ENV_RATE, 0))
        self.threshold = threshold if threshold is not None else spark_threshold()
        self.health = health or ReplayHealth(worker_id)
        self.views: dict[int, dict[int, ReplayView]] = {}  # replay partition -> replay id -> view
        self._consumed: dict[int, int] = {}  # replay partition -> next offset to consume
        self._awaiting: set[int] = set()  # replays whose last committed record must be read back first
        self._echo: dict[int, deque[bytes]] = {}  # committed records applied already, to skip when read back
        self._selectors: dict[int, ReplaySelector] = {}
        self._last_served = 0
        self._next_allowed = 0.0
        self._partitions = 0
        self._internal_partitions = 0
        # replay id -> its registration (the signed register_replay): the origin of its ReplayFinished.
        self._origins: dict[int, Origin] = {}
        # Deliveries are keyed by the requester; every client must agree on its partition (murmur2).
        super().__init__(bootstrap, worker_id, prefix, clock_ms)
        self.archive = ArchiveReader(bootstrap, self.t_messages, client_id=f"wt-replay-{worker_id}-archive")
        self.spark = SparkLauncher(bootstrap, prefix)

    # ------------------------------------------------------------------ lifecycle
    def subscriptions(self) -> list[str]:
        return [self.t_replay]

    def _step(self) -> None:
        view = self._pick()
        wait = 0.0 if view is not None else 0.2
        if view is not None and self.rate > 0:
            wait = max(0.0, min(0.2, self._next_allowed - time.monotonic()))
        # A lone record (our own checkpoint read back) is taken at once (`TransactionalLoop.fetch`).
        for record in self.host.fetch(500, wait):
            self._consume(record)
        view = self._pick()
        if view is not None and (self.rate <= 0 or time.monotonic() >= self._next_allowed):
            self._serve(view)
        self.spark.reap()

    def _count(self) -> None:
        views = [v for views in self.views.values() for v in views.values()]
        self.health.count(views)
        replay_progress(views, self._clock_ms())

    def closers(self) -> list[Callable[[], None]]:
        return [self.spark.stop, self.archive.close]

    # ------------------------------------------------------------------ the replay topic
    def prepare(self) -> None:
        # Before subscribing: list_topics inside the assignment callback would abort the process at
        # the next callback of the same consume() (workers.loop).
        self._partitions = self._partition_count(self.t_replay)
        self._internal_partitions = self._partition_count(self.t_internal)

    def _restore(self, partitions: list[TopicPartitionId], *,
                 recovering: bool = False) -> dict[TopicPartitionId, int]:
        if not self._partitions:
            raise RuntimeError("the partition count of replay is read before subscribing (prepare)")
        resume: dict[TopicPartitionId, int] = {}
        for topic, partition in partitions:
            self.views[partition] = {}
            resume[(topic, partition)] = self._consumed[partition] = self._fold(partition)
            log.info("replay partition %d folded: %d replays", partition, len(self.views[partition]))
            # A Spark replay without a terminal record: its job died with the previous owner (or is
            # still running; the deliveries are deduplicated by readers): launch it again. Not after
            # this process's own producer failed: its launches are still running.
            for view in self.views[partition].values():
                if view.engine == "spark" and not view.terminal and not recovering:
                    self.spark.launch(view)
        self.health.partitions = sorted(self.views)
        self.health.write()
        return resume

    def _on_revoke(self, partitions: list[TopicPartitionId]) -> None:
        for _topic, partition in partitions:
            for rid in self.views.pop(partition, {}):
                self._awaiting.discard(rid)
                self._echo.pop(rid, None)
                self._selectors.pop(rid, None)
                self._origins.pop(rid, None)
            self._consumed.pop(partition, None)
        self.health.partitions = sorted(self.views)

    def _fold(self, partition: int) -> int:
        """Fold `partition` of ``replay`` from the beginning; the offset the fold reached.

        It stops at the partition's end, or once its position reaches what the partition held when the fold began
        (stream workers keep writing registrations, so a read_committed reader may never see the end
        event; the live consumer goes on from the offset returned). A fold that reads nothing for
        `FOLD_STALL_S` raises TimeoutError: the rebuild is retried later, never hung."""
        return scan_partition(self.bootstrap, self.t_replay, partition, self._apply,
                              group=f"{self.group}-scan", catch_up=True, timeout_s=FOLD_STALL_S)

    def _consume(self, msg: Record) -> None:
        partition = msg.partition
        if partition not in self.views:
            return
        self._consumed[partition] = msg.offset + 1
        self._apply(msg)

    def _apply(self, msg: Record) -> None:
        partition, offset = msg.partition, msg.offset
        views = self.views.setdefault(partition, {})
        try:
            record = decode_replay_record(msg.value)
        except (MalformedRecordError, SchemaMismatchError) as exc:
            self.health.quarantine(self.t_replay, partition, offset, exc.message)
            return
        if not isinstance(record, (ReplayRegistered, ReplayCancelRequested)):
            self._awaiting.discard(record.replay_id)  # a worker record: the checkpoint is read back
            echo = self._echo.get(record.replay_id)
            if echo and msg.value in echo:
                while echo.popleft() != msg.value:  # our own commit, applied when it committed
                    pass
                return
        try:
            if msg.key != record.stream_id.encode():
                raise ReplayRuleError(f"the record key {msg.key!r:.80} is not the replay's stream "
                                      f"{record.stream_id!r:.80}")
            misplaced = self._partitions and misplacement(msg.key, partition, self._partitions)
            if misplaced:
                raise ReplayRuleError(f"stream {record.stream_id!r:.80} does not belong to replay partition "
                                      f"{partition}: {misplaced}")
            if isinstance(record, ReplayRegistered):
                # Only a registration its requester signed is fulfilled (a forged one is quarantined).
                check_registration_command(record)
            changes = apply_replay_record(views, record)
            if isinstance(record, ReplayRegistered):
                origin = Origin(record.caller, record.nonce, bytes.fromhex(record.digest_hex))
        except ReplayRuleError as exc:
            self.health.quarantine(self.t_replay, partition, offset, str(exc))
            return
        except (WatchtowerError, ValueError) as exc:  # an origin that is not one (checked with the command)
            self.health.quarantine(self.t_replay, partition, offset, f"the registration's origin is invalid: {exc}")
            return
        if isinstance(record, ReplayRegistered):
            self._origins[record.replay_id] = origin
        views.update(changes or {})

    # ------------------------------------------------------------------ serving
    def _pick(self) -> tuple[int, ReplayView] | None:
        """The next replay to serve, round-robin by id (with its replay partition)."""
        ready = sorted(((p, v) for p, views in self.views.items() for v in views.values()
                        if not v.terminal and v.replay_id not in self._awaiting and v.engine == "service"),
                       key=lambda pv: pv[1].replay_id)
        if not ready:
            return None
        return next((pv for pv in ready if pv[1].replay_id > self._last_served), ready[0])

    def _serve(self, picked: tuple[int, ReplayView]) -> None:
        partition, view = picked
        self._last_served = view.replay_id
        now = self._clock_ms()
        if view.cancel_requested:
            self._commit(partition, view, SliceResult(record=cancel_record(view, now)))
            return
        if wants_spark(view, self.threshold):
            if self._commit(partition, view, SliceResult(record=spark_progress(view, partition, now))):
                self.spark.launch(view)
            return
        selector = self._selectors.get(view.replay_id)
        if selector is None:
            try:
                selector = self._selectors[view.replay_id] = selector_for(view)
            except WatchtowerError as exc:  # a registration the writer should have refused
                log.error("replay %d has an unusable selection (%s)", view.replay_id, exc)
                return
        records, at_end = self.archive.read(partition, start_offset(view), self.slice_size)
        result = fulfil_slice(view, selector, partition, records, at_end=at_end, now_ms=now)
        for offset, reason in result.quarantined:
            self.health.quarantine(self.t_messages, partition, offset, reason)
        if not records and not at_end and view.next_sequence < view.end_exclusive:
            return  # nothing read (the archive is slow to answer): try again later
        if self.rate > 0:
            self._next_allowed = max(self._next_allowed, time.monotonic()) + max(1, result.examined) / self.rate
        self._commit(partition, view, result)

    def _commit(self, partition: int, view: ReplayView, result: SliceResult) -> bool:
        """Deliveries + the replay record + the group's offsets in one transaction; whether it committed."""
        record: ReplayRecord | None = result.record
        assert record is not None
        value = encode_replay_record(record)

        def write() -> dict[TopicPartitionId, int]:
            for d in result.deliveries:
                self.producer.produce(self.t_deliveries, key=d.key, value=d.value, headers=d.headers)
            self.producer.produce(self.t_replay, key=view.stream_id.encode(), value=value, partition=partition)
            finished = self._finished(view, record)
            if finished is not None:
                key = view.stream_id.encode()
                self.producer.produce(self.t_internal, key=key, value=encode_replay_finished(finished),
                                      partition=partition_for_key(key, self._internal_partitions))
            return {(self.t_replay, p): o for p, o in self._consumed.items()}

        if not self._transaction(write):
            return False
        self._applied_own(partition, record, value)
        self.health.slices += 1
        self.health.reemitted += len(result.deliveries)
        return True

    def _finished(self, view: ReplayView, record: ReplayRecord) -> ReplayFinished | None:
        """The ReplayFinished forward to the stream when `record` ends the replay (None otherwise, or
        when the registration's origin is unknown: the stream then keeps the replay cancellable)."""
        outcome = {ReplayCompleted: "completed", ReplayCanceled: "canceled", ReplayErrored: "errored"}.get(
            type(record))
        origin = self._origins.get(view.replay_id)
        if outcome is None or origin is None or not self._internal_partitions:
            return None
        return ReplayFinished(view.replay_id, view.stream_id, view.requester, outcome, origin)

    def _applied_own(self, partition: int, record: ReplayRecord, value: bytes) -> None:
        """Apply a record this worker just committed, so the next slice need not wait to read it back
        (it is skipped when it is). Folding it cannot fail (it was built from the current view); if it
        does anyway, the replay waits for the log's verdict instead."""
        views = self.views.get(partition)
        try:
            if views is None:
                raise ReplayRuleError("the partition is no longer owned")
            views.update(apply_replay_record(views, record) or {})
        except ReplayRuleError as exc:
            log.warning("replay %d: own record not applied (%s); waiting to read it back", record.replay_id, exc)
            self._awaiting.add(record.replay_id)
            return
        self._echo.setdefault(record.replay_id, deque()).append(value)

    def _aborting(self, exc: Exception) -> None:
        self.archive.forget_position()
        log.warning("replay slice failed (%s); aborting, the slice is done again from its checkpoint", exc)
