"""The push delivery worker: fans new messages out to push subscribers on ``deliveries``, per block.

It joins the consumer group ``wt-<prefix>.delivery-worker`` on ``events`` and ``messages``
(read_committed, range assignment: the two topics are co-partitioned and have the same partition
count, so a worker owns the same partition numbers of both). On the assignment of partition *p* it
rebuilds the streams' states and their push schedules (`restore`), then consumes both topics:

- ``events`` records are folded (the stream's subscriptions, config and head); a record that breaks
  a rule is quarantined (logged with topic, partition, offset and reason, counted, skipped);
- ``messages`` records are added to their stream's schedule (a value that does not decode, or a
  message on another partition than its stream's, is quarantined).

It wakes at least every block (`protocol.ledger.billing.block_height_at`, 1,000 ms blocks) and whenever
records arrived, and plans each stream that changed or still owes pushes (`push_schedule.plan_block`:
round-robin under ``max_push_deliveries_per_block`` / ``max_push_cycles_per_block``). Everything one
wake-up planned goes in ONE Kafka transaction: the deliveries (key = subscriber, value = the
``messages`` record value byte for byte, headers = the original ones then ``wt:push*``), the new
checkpoint of every planned stream on ``delivery.state`` *p*, and the group's consumed offsets
(``send_offsets_to_transaction``, which fences an evicted zombie). A plan is applied to memory
only once its transaction committed; an aborted one is planned again. ``kill -9`` anywhere leaves
the last committed checkpoints with exactly their deliveries, and each checkpoint carries the
budget its block used, so a restart within the block never exceeds the bound. A fenced or fatally
failed producer is replaced and the worker starts over from the log; only repeated fences (another
process with the same worker id) make it exit (code 3) for its supervisor (`workers.host`).

Nothing here touches the publish path: the stream actor writes ``messages`` and ``events`` and
never waits for this worker. It writes ``deliveries`` and ``delivery.state`` only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any, ClassVar, Final

from watchtower import tracing
from watchtower.delivery.health import DeliveryHealth
from watchtower.delivery.restore import messages_start, restore_partition
from watchtower.metrics.side_workers import BLOCK_DELIVERIES
from watchtower.protocol.constants import BLOCK_INTERVAL_MS, GENESIS_UNIX_MS
from watchtower.protocol.errors import MalformedRecordError, SchemaMismatchError
from watchtower.protocol.ledger.billing import block_height_at
from watchtower.protocol.push.schedule import (
    DEFAULT_BACKLOG_BYTES,
    DEFAULT_BACKLOG_MESSAGES,
    BlockPlan,
    PushLimits,
    PushMessage,
    StreamSchedule,
    plan_block,
    push_headers,
    push_limits,
    push_subscribers,
)
from watchtower.protocol.stream.state import StreamState
from watchtower.schemas.delivery_records import encode_checkpoint
from watchtower.schemas.records import decode_message
from watchtower.topics.catalogue import topic_name
from watchtower.topics.partitioning import partition_for_key
from watchtower.topics.records import Record
from watchtower.workers.event_fold import EventFold
from watchtower.workers.state_loader import CommittedOffsets
from watchtower.workers.tx_worker import (
    TopicPartitionId,
    TransactionalWorker,
    env_int,
)

log = logging.getLogger("watchtower.delivery")

ENV_BACKLOG: Final = "WATCHTOWER_PUSH_BACKLOG"
ENV_BACKLOG_BYTES: Final = "WATCHTOWER_PUSH_BACKLOG_BYTES"
_NO_LIMITS: Final = PushLimits(1, 1)  # a stream not created yet: nobody to push to
#: One committed-offsets fetch before a rebuild, and how many stable ones may time out in a row
#: before the last committed offsets are read instead (together longer than the transaction timeout).
OFFSETS_TIMEOUT_S: Final = 5.0
STABLE_TRIES: Final = 3


Key = tuple[int, str]  # (partition, stream id)


class DeliveryWorker(TransactionalWorker):
    """Call `run` (blocking) and `stop` from elsewhere (a signal handler)."""

    kind: ClassVar[str] = "delivery"
    log: ClassVar[logging.Logger] = log
    health: DeliveryHealth

    def __init__(self, bootstrap: str, worker_id: str, *, prefix: str | None = None,
                 clock_ms: Callable[[], int] | None = None, health: DeliveryHealth | None = None) -> None:
        self.topics = {role: topic_name(role, prefix) for role in ("events", "messages", "deliveries",
                                                                   "delivery-state", "snapshots")}
        self.backlog_messages = env_int(ENV_BACKLOG, DEFAULT_BACKLOG_MESSAGES, minimum=1)
        self.backlog_bytes = env_int(ENV_BACKLOG_BYTES, DEFAULT_BACKLOG_BYTES, minimum=1)
        self.health = health or DeliveryHealth(worker_id)
        self.folds: dict[int, EventFold] = {}
        self.schedules: dict[Key, StreamSchedule] = {}
        self.positions: dict[tuple[str, int], int] = {}  # (topic, partition) -> next offset to consume
        self.dirty: set[Key] = set()  # changed since the last commit: plan and checkpoint them
        self.owing: set[Key] = set()  # pushes left for a later block
        self._owing_block = -1
        self._partitions = 0
        # Deliveries are keyed by the subscriber; every reader must agree on its partition (murmur2).
        super().__init__(bootstrap, worker_id, prefix, clock_ms,
                         **{"message.max.bytes": 8 * 1024 * 1024})  # a checkpoint lists up to max_subscribers cursors
        self._offsets = CommittedOffsets(bootstrap, self.group, timeout_s=OFFSETS_TIMEOUT_S,
                                         stable_tries=STABLE_TRIES)

    # ------------------------------------------------------------------ lifecycle
    def subscriptions(self) -> list[str]:
        return [self.topics["events"], self.topics["messages"]]

    def _step(self) -> None:
        for record in self.host.fetch(1000, self._until_next_block()):
            self._consume(record)
        self._tick()

    def _now_block(self) -> int:
        return block_height_at(max(self._clock_ms(), GENESIS_UNIX_MS))

    def _until_next_block(self) -> float:
        ms = max(self._clock_ms(), GENESIS_UNIX_MS) - GENESIS_UNIX_MS
        return min(0.1, (BLOCK_INTERVAL_MS - ms % BLOCK_INTERVAL_MS) / 1000 + 0.001)

    # ------------------------------------------------------------------ assignment
    def prepare(self) -> None:
        # Before subscribing: list_topics inside the assignment callback would abort the process at
        # the next callback of the same consume() (workers.loop).
        self._partitions = self._partition_count(self.topics["events"])

    def _restore(self, partitions: list[TopicPartitionId], *,
                 recovering: bool = False) -> dict[TopicPartitionId, int]:  # noqa: ARG002 (the same after a rebalance or a recovery)
        if not self._partitions:
            raise RuntimeError("the partition count of events is read before subscribing (prepare)")
        events = self.topics["events"]
        numbers = sorted({p for _topic, p in partitions})
        # Asked by a client of its own: the group consumer's committed() blocks while its group state
        # waits for a rebalance it has not served yet (after a broker restart: for good).
        # A hanging offset commit after a broker restart falls back to the last committed offsets
        # (CommittedOffsets); the checkpoints bound where the messages are read from anyway.
        committed = self._offsets.offsets(self.topics["messages"], numbers)
        for p in numbers:
            restored = restore_partition(self.bootstrap, self.topics, p, self._partitions, self.health.quarantine,
                                         now_block=self._now_block())
            self.folds[p] = restored.fold
            for sid, cp in restored.checkpoints.items():
                self.schedules[(p, sid)] = StreamSchedule.restore(
                    cp, max_messages=self.backlog_messages, max_bytes=self.backlog_bytes)
                self.owing.add((p, sid))
            self.positions[(events, p)] = restored.events_offset
            start = committed.get(p)
            self.positions[(self.topics["messages"], p)] = messages_start(
                start if start is not None and start >= 0 else None, restored.checkpoints)
            log.info("partition %d restored (events from offset %s): %d streams, %d checkpoints", p,
                     restored.fold.state.snapshot_offset or 0, len(restored.fold.state.streams),
                     len(restored.checkpoints))
        self.health.partitions = sorted(self.folds)
        self.health.write()
        return {tp: self.positions[tp] for tp in partitions}

    def _on_revoke(self, partitions: list[TopicPartitionId]) -> None:
        gone = {p for _topic, p in partitions}
        for p in gone:
            self.folds.pop(p, None)
        for key in [k for k in self.schedules if k[0] in gone]:
            del self.schedules[key]
        self.dirty = {k for k in self.dirty if k[0] not in gone}
        self.owing = {k for k in self.owing if k[0] not in gone}
        self.positions = {tp: o for tp, o in self.positions.items() if tp[1] not in gone}
        self.health.partitions = sorted(self.folds)

    # ------------------------------------------------------------------ consuming
    def _consume(self, record: Record) -> None:
        topic, p, offset = record.topic, record.partition, record.offset
        if p not in self.folds:
            return
        self.positions[(topic, p)] = offset + 1
        if topic == self.topics["events"]:
            key = record.key
            if self.folds[p].apply(key, record.value, offset) is None and key:
                sid = key.decode("utf-8", "replace")
                if sid in self.folds[p].state.streams:  # its head or subscriptions may have moved
                    self.dirty.add((p, sid))
            return
        # A span per message scheduled for push when tracing is on; its pushes keep the message's
        # headers, so a delivery record carries the publish's trace context too.
        with tracing.span("delivery schedule", record.headers, partition=p) or nullcontext():
            self._ingest(p, offset, record)

    def _ingest(self, p: int, offset: int, record: Record) -> None:
        value = record.value or b""
        try:
            message = decode_message(value)
        except (MalformedRecordError, SchemaMismatchError, ValueError, TypeError) as exc:
            reason = exc.message if isinstance(exc, (MalformedRecordError, SchemaMismatchError)) else str(exc)
            self.health.quarantine(self.topics["messages"], p, offset, f"not a StreamMessage: {reason}"[:300])
            return
        sid = message.stream_id
        if record.key != sid.encode() or partition_for_key(sid.encode(), self._partitions) != p:
            self.health.quarantine(self.topics["messages"], p, offset,
                                   f"a message of stream {sid!r:.80} keyed {record.key!r:.80} does not belong on "
                                   f"partition {p}")
            return
        schedule = self.schedules.get((p, sid))
        if schedule is None:
            schedule = self.schedules[(p, sid)] = StreamSchedule(
                sid, max_messages=self.backlog_messages, max_bytes=self.backlog_bytes)
        headers = tuple((k, v if isinstance(v, bytes) else str(v or "").encode()) for k, v in record.headers or [])
        if schedule.ingest(PushMessage(message.sequence, offset, value, headers, message.headers())):
            self.dirty.add((p, sid))

    # ------------------------------------------------------------------ planning and committing
    def _tick(self) -> None:
        block = self._now_block()
        keys = set(self.dirty)
        if block != self._owing_block:
            keys |= self.owing  # a new block: a new budget for the streams that still owe pushes
            self._owing_block = block
        if not keys:
            return
        plans: list[tuple[Key, BlockPlan, bytes]] = []
        for key in sorted(keys):
            planned = self._plan(key, block)
            if planned is not None:
                plans.append((key, planned[0], planned[1]))
        if plans:
            self._commit(plans, block)

    def _plan(self, key: Key, block: int) -> tuple[BlockPlan, bytes] | None:
        p, sid = key
        schedule = self.schedules.get(key)
        fold = self.folds.get(p)
        if schedule is None or fold is None:
            return None
        state: StreamState | None = fold.state.streams.get(sid)
        if state is not None and state.config is not None:
            schedule.max_messages = min(self.backlog_messages, state.config.ring_buffer_capacity)
        subscribers = push_subscribers(state) if state is not None else {}
        head = state.head if state is not None else 0
        limits = (push_limits(state) if state is not None else None) or _NO_LIMITS
        plan = plan_block(schedule, block, subscribers=subscribers, limits=limits, head=head)
        if not plan.deliveries and key not in self.dirty:
            return None  # an owing stream whose block budget is spent: nothing new to record
        return plan, encode_checkpoint(plan.schedule.checkpoint(subscribers, head))

    def _commit(self, plans: list[tuple[Key, BlockPlan, bytes]], block: int) -> None:
        """Deliveries + checkpoints + the group's offsets in one transaction; memory follows only on commit."""
        def write() -> dict[TopicPartitionId, int]:
            for (p, sid), plan, checkpoint in plans:
                for d in plan.deliveries:
                    headers = push_headers(d.message.headers, sid, d.message.sequence, d.block, d.cycles)
                    self._produce(self.topics["deliveries"], key=d.subscriber.encode(), value=d.message.value,
                                  headers=headers)
                self._produce(self.topics["delivery-state"], key=sid.encode(), value=checkpoint, partition=p)
            return dict(self.positions)

        if not self._transaction(write):
            return
        delivered = sum(len(plan.deliveries) for _, plan, _ in plans)
        for key, plan, _ in plans:
            self.schedules[key] = plan.schedule
            self.dirty.discard(key)
            state = self.folds[key[0]].state.streams.get(key[1])
            if plan.schedule.pending(state.head if state is not None else 0):
                self.owing.add(key)
            else:
                self.owing.discard(key)
        self.health.committed(delivered, block)
        BLOCK_DELIVERIES.observe(delivered)

    def _produce(self, topic: str, **kwargs: Any) -> None:
        try:
            self.producer.produce(topic, **kwargs)
        except BufferError:
            self.producer.poll(0.5)  # the local queue is full: let it drain once, then retry
            self.producer.produce(topic, **kwargs)

    def _aborting(self, exc: Exception) -> None:
        self._owing_block = -1  # the owing streams' plans were lost with the transaction: plan them again
        log.warning("push transaction failed (%s); aborting, the block is planned again", exc)

    def _count(self) -> None:
        pending = dropped = 0
        for (p, sid), schedule in self.schedules.items():
            fold = self.folds.get(p)
            state = fold.state.streams.get(sid) if fold is not None else None
            pending += schedule.pending(state.head if state is not None else 0)
            dropped += schedule.dropped
        self.health.pending, self.health.dropped, self.health.streams = pending, dropped, len(self.schedules)
