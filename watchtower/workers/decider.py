"""Deciding one batch of records: the hosted aggregates' rules applied to consumed records.

:class:`CommandDecider` holds the per-partition aggregate instances a worker owns and turns each
command or forward record (a typed :class:`~watchtower.workers.record.Record`) into events,
extra records (StreamMessages), forwards and a reply, produced on the current transaction of
``self.producer``. It knows aggregates only through the contract of
:mod:`watchtower.workers.aggregate`; it never commits or aborts:
:class:`~watchtower.workers.command_processor.CommandProcessor` (its subclass) owns the
transaction, the consumer and recovery.

Every command gets an answer carrying a spec error code when it is refused; a record on a partition
its key does not hash to is refused (MALFORMED_RECORD, :mod:`watchtower.protocol.placement`) before
it is decoded, so nothing is ever written for it but the refusal. Nothing a record contains raises
out of :meth:`CommandDecider._handle` except a Kafka error from producing, which fails the whole
transaction.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from watchtower import tracing
from watchtower.protocol.errors import MalformedRecordError, SchemaMismatchError, WatchtowerError
from watchtower.protocol.ledger.billing import block_height_at
from watchtower.protocol.partitioning import partition_for_key
from watchtower.protocol.placement import check_command_placement, check_instance_placement
from watchtower.schemas.wire import H_CORRELATION, H_REPLY_PARTITION, encode_reply
from watchtower.topics.catalogue import topic_name
from watchtower.topics.records import Record
from watchtower.workers.aggregate import Aggregate, Context, DecodeOnce, check_unique
from watchtower.workers.aggregates import default_aggregates
from watchtower.workers.deployment import deployment_from_env

log = logging.getLogger("watchtower.worker")

#: (partition, aggregate name, instance key) -> the instance's state before the batch (None: absent).
Touched = dict[tuple[int, str, str], Any]


@dataclass
class WorkerStats:
    """Counters a supervisor or benchmark can read."""

    batches: int = 0
    commands: int = 0
    events: int = 0
    rejected: int = 0
    aborted_batches: int = 0
    rebuilt_partitions: int = 0
    quarantined: int = 0
    recoveries: int = 0
    #: lane transactions ended early for a client's command (`CommandProcessor.step`)
    lane_yields: int = 0
    #: clients' commands decided in a lane transaction, which then ended (`CommandProcessor._join_clients`)
    lane_joined: int = 0
    #: events records read by rebuilds (a rebuild from a snapshot reads only the tail after it)
    folded_events: int = 0
    #: partitions rebuilt from a snapshot, and snapshots committed
    snapshot_loads: int = 0
    snapshots_taken: int = 0
    #: partitions whose state was kept through a rebalance instead of rebuilt (`PartitionOwner`)
    kept_partitions: int = 0
    extra: dict[str, float] = field(default_factory=dict)


class Sink(Protocol):
    """What the decider needs of the host's transactional producer."""

    def produce(self, topic: str, value: bytes | None = ..., key: bytes | None = ..., partition: int = ...,
                headers: Any = ...) -> None: ...

    def list_topics(self, topic: str | None = ..., timeout: float = ...) -> Any: ...


class CommandDecider:
    """The aggregate instances of the owned partitions, and how one record changes them."""

    producer: Sink

    def __init__(self, prefix: str | None, clock_ms: Callable[[], int] | None,
                 aggregates: Sequence[Aggregate] | None = None) -> None:
        self.t_commands = topic_name("commands", prefix)
        self.t_events = topic_name("events", prefix)
        self.t_internal = topic_name("internal", prefix)
        self.t_ingest_commands = topic_name("ingest-commands", prefix)
        #: Every topic commands are decided from, co-partitioned: clients' commands, the workers'
        #: own forwards, and the ingestion service's lane (served after the others: CommandProcessor).
        self.input_topics = (self.t_commands, self.t_internal, self.t_ingest_commands)
        self.t_replies = topic_name("replies", prefix)
        self.t_snapshots = topic_name("snapshots", prefix)
        self._prefix = prefix
        self._topics: dict[str, str] = {}
        self.aggregates: list[Aggregate] = list(aggregates) if aggregates is not None else default_aggregates()
        check_unique(self.aggregates)
        self.stats = WorkerStats()
        # Genesis configuration (the protocol treasury): the operator's, never a command's.
        self.deployment = deployment_from_env()
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        # partition -> aggregate name -> instance key -> state. Only partitions rebuilt from the log
        # have an entry.
        self._states: dict[int, dict[str, dict[str, Any]]] = {}
        # Events written per partition by the open batch (for the snapshot policy after commit).
        self._batch_events: dict[int, int] = {}
        self._command_partitions: int | None = None
        self._reply_partitions: int | None = None

    def _context(self) -> Context:
        """Read once per batch: every command of a batch is decided at the same block."""
        return Context(block_height_at(self._clock_ms()), self.deployment)

    def _route(self, value: bytes | None, internal: bool) -> tuple[Aggregate, Any]:
        """The first aggregate that accepts the record, and its command. When none does: the first
        refusal of an aggregate that recognised the record (e.g. UNAUTHORIZED for a forward on the
        public topic), else the first aggregate's (MALFORMED_RECORD / SCHEMA_MISMATCH)."""
        first: WatchtowerError | None = None
        decoded = DecodeOnce(value)
        for aggregate in self.aggregates:
            try:
                return aggregate, aggregate.accept_command(decoded.get(aggregate.command_decoder), internal=internal)
            except (MalformedRecordError, SchemaMismatchError) as err:
                first = first or err
            except WatchtowerError as err:
                recognised = err
                break
        else:
            assert first is not None  # check_unique: at least one aggregate
            raise first
        raise recognised

    def _handle(self, record: Record, touched: Touched, ctx: Context) -> None:
        self.stats.commands += 1
        partition = record.partition
        headers = dict(record.headers or [])
        internal = record.topic == self.t_internal
        # Known once a partition was rebuilt; outside the try, so a Kafka error fails the batch.
        partitions = self._partition_count()
        try:
            # Where the record sits first: a command on a partition its key does not hash to would be
            # decided against state this partition does not hold, and its events written where no
            # fold expects them (protocol.placement).
            check_command_placement(record.key, partition, partitions, topic=record.topic)
            aggregate, command = self._route(record.value, internal)
            key = aggregate.key(command)
            check_instance_placement(key, record.key, partition, partitions, internal=internal)
            states = self._states[partition][aggregate.name]  # _ready_only kept rebuilt partitions only
            before = states.get(key)
            state = aggregate.initial(key) if before is None else before
            outcome = aggregate.decide(state, command, ctx)
            for event in outcome.events:
                state = aggregate.evolve(state, event)
        except WatchtowerError as err:
            self.stats.rejected += 1
            self._reply(headers, encode_reply(False, error=err))
            return
        except Exception as exc:
            log.exception("unexpected error deciding a record at %s[%s]@%s", record.topic, partition, record.offset)
            self.stats.rejected += 1
            self._reply(headers, encode_reply(False, error=_internal(exc)))
            return
        touched.setdefault((partition, aggregate.name, key), before)
        states[key] = state
        if outcome.events:
            record_key = key.encode()
            for event in outcome.events:
                self.producer.produce(self.t_events, key=record_key, value=aggregate.encode_event(event),
                                      partition=partition, headers=tracing.inject(None))
            self.stats.events += len(outcome.events)
            self._batch_events[partition] = self._batch_events.get(partition, 0) + len(outcome.events)
        for extra in outcome.records:
            self.producer.produce(self._topic(extra.role), key=extra.key, value=extra.value, partition=partition,
                                  headers=tracing.inject(None if extra.headers is None else dict(extra.headers)))
        for forward in outcome.forwards:
            # The receiver answers the caller when the decision has no reply of its own.
            self.producer.produce(self.t_internal, key=forward.key.encode(), value=forward.value,
                                  partition=self._partition_of(forward.key),
                                  headers=tracing.inject(_reply_headers(headers) if forward.answers else None))
        if outcome.error is not None:
            # Committed events, refused caller (a purchase the payer could not pay).
            self.stats.rejected += 1
            self._reply(headers, encode_reply(False, error=outcome.error))
        elif outcome.reply is not None:
            self._reply(headers, encode_reply(True, result=dict(outcome.reply)))

    def _undo_in_memory(self, touched: Touched) -> None:
        """Put back the states an aborted batch changed."""
        for (partition, name, key), before in touched.items():
            states = self._states.get(partition, {}).get(name)
            if states is None:
                continue
            if before is None:
                states.pop(key, None)
            else:
                states[key] = before
        touched.clear()

    def _topic(self, role: str) -> str:
        name = self._topics.get(role)
        if name is None:
            name = self._topics[role] = topic_name(role, self._prefix)
        return name

    def _partition_of(self, key: str) -> int:
        return partition_for_key(key.encode(), self._partition_count())

    def _partition_count(self) -> int:
        """Partitions of the commands topic (and so of events, messages, internal and snapshots)."""
        if self._command_partitions is None:
            md = self.producer.list_topics(self.t_commands, timeout=30)
            self._command_partitions = len(md.topics[self.t_commands].partitions)
        return self._command_partitions

    def _reply(self, headers: dict[str, Any], value: bytes) -> None:
        corr = headers.get(H_CORRELATION)
        part = headers.get(H_REPLY_PARTITION)
        if corr is None or part is None:
            return  # fire-and-forget command: nobody is waiting
        try:
            partition = int(part)
        except ValueError:
            return
        if not 0 <= partition < self._replies_partition_count():
            # Nobody can be reading a partition that does not exist; producing to it would fail the
            # whole transaction again on every retry and stall the partition.
            log.warning("dropping a reply to partition %s of %s, which does not exist", part, self.t_replies)
            return
        self.producer.produce(self.t_replies, key=corr, value=value, partition=partition)

    def _replies_partition_count(self) -> int:
        if self._reply_partitions is None:
            md = self.producer.list_topics(self.t_replies, timeout=30)
            self._reply_partitions = len(md.topics[self.t_replies].partitions)
        return self._reply_partitions


def _internal(exc: Exception) -> WatchtowerError:
    return WatchtowerError(f"internal error while deciding the command ({exc.__class__.__name__}); "
                           "the command was not applied, retry or report it")


def _reply_headers(headers: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in headers.items() if k in (H_CORRELATION, H_REPLY_PARTITION)}
