"""Deciding one batch of commands: the stream actor's rules applied to Kafka records.

:class:`CommandDecider` holds the per-partition aggregates a worker owns and turns each command
record into events, StreamMessages and a reply, produced on the current transaction of
``self.producer``. It never commits or aborts: :class:`~watchtower.agents.command_processor.CommandProcessor`
(its subclass) owns the transaction, the consumer and recovery.

Every command gets an answer carrying a spec error code when it is refused; nothing a record
contains raises out of :meth:`CommandDecider._handle` except a Kafka error from producing, which
fails the whole transaction.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Message, Producer

from watchtower.agents.deployment import deployment_from_env
from watchtower.protocol.billing import block_height_at
from watchtower.protocol.errors import UnauthorizedError, WatchtowerError
from watchtower.protocol.registry import REGISTRY_KEY, RegistryState, decide_registration, evolve_registry
from watchtower.protocol.signed_command import Command, Method
from watchtower.protocol.stream_actor import StreamState, decide, evolve
from watchtower.protocol.stream_state import Event
from watchtower.schemas.records import encode_message
from watchtower.schemas.wire import (
    H_CAPACITY,
    H_CORRELATION,
    H_REPLY_PARTITION,
    RegistryForward,
    decode_command,
    encode_event,
    encode_registry_forward,
    encode_reply,
)
from watchtower.topics.catalogue import topic_name
from watchtower.topics.partitioning import partition_for_key

log = logging.getLogger("watchtower.worker")


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
    extra: dict[str, float] = field(default_factory=dict)


class CommandDecider:
    """The aggregates of the owned partitions, and how one command record changes them."""

    producer: Producer

    def __init__(self, prefix: str | None, clock_ms: Callable[[], int] | None) -> None:
        self.t_commands = topic_name("commands", prefix)
        self.t_events = topic_name("events", prefix)
        self.t_messages = topic_name("messages", prefix)
        self.t_replies = topic_name("replies", prefix)
        self.t_internal = topic_name("internal", prefix)
        self.stats = WorkerStats()
        # Genesis configuration (the protocol treasury): the operator's, never a command's.
        self.deployment = deployment_from_env()
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        # Only partitions whose aggregates were rebuilt from the log have an entry here.
        self._states: dict[int, dict[str, StreamState]] = {}
        self._registries: dict[int, RegistryState] = {}
        self._touched_registries: dict[int, RegistryState] = {}
        self._command_partitions: int | None = None
        self._reply_partitions: int | None = None

    def _handle(self, msg: Message, touched: dict[tuple[int, str], StreamState | None]) -> None:
        self.stats.commands += 1
        partition = int(msg.partition() or 0)
        headers = dict(msg.headers() or [])
        try:
            record = decode_command(msg.value())
            from_worker = msg.topic() == self.t_internal
            if isinstance(record, RegistryForward) != from_worker:
                # Forwards are trusted because only workers can write the internal topic; the
                # same bytes arriving on the public commands topic are refused.
                raise UnauthorizedError("feed registrations are forwarded by stream workers only; create the "
                                        "stream with a `feed` listing in its create_stream body instead")
            if isinstance(record, RegistryForward):
                self._register(partition, record.create, headers)
                return
            cmd = record
            states = self._states[partition]  # _ready_only kept only partitions with a rebuilt state
            state = states.get(cmd.stream_id) or StreamState.initial(cmd.stream_id)
            decision = decide(state, cmd, block_height=block_height_at(self._clock_ms()),
                              deployment=self.deployment)
        except WatchtowerError as err:
            self.stats.rejected += 1
            self._reply(headers, encode_reply(False, error=err))
            return
        except Exception as exc:
            log.exception("unexpected error deciding a command at %s:%s", partition, msg.offset())
            self.stats.rejected += 1
            self._reply(headers, encode_reply(False, error=_internal(exc)))
            return
        key = (partition, cmd.stream_id)
        if key not in touched:
            touched[key] = states.get(cmd.stream_id)
        for event in decision.events:
            state = evolve(state, event)
            self._emit(partition, event)
        for message in decision.messages:
            self.producer.produce(self.t_messages, key=cmd.stream_id.encode(),
                                  value=encode_message(message), partition=partition,
                                  headers={"sequence": str(message.sequence), H_CAPACITY: str(state.capacity or 0)})
        states[cmd.stream_id] = state
        if cmd.method == Method.CREATE_STREAM and "feed" in cmd.body:
            # Listed feeds get their id from the registry, which answers the caller; forwarding in
            # this transaction makes "created" and "listed" one atomic fact.
            self.producer.produce(self.t_internal, key=REGISTRY_KEY.encode(), value=encode_registry_forward(cmd),
                                  partition=self._partition_of(REGISTRY_KEY), headers=_reply_headers(headers))
            return
        self._reply(headers, encode_reply(True, result=dict(decision.reply)))

    def _register(self, partition: int, create: Command, headers: dict[str, Any]) -> None:
        """Decide a registry forward against the registry aggregate this partition holds."""
        before = self._registries[partition]
        event, reply = decide_registration(before, create, block_height=block_height_at(self._clock_ms()))
        if event is not None:
            self._registries[partition] = evolve_registry(before, event)
            self._touched_registries.setdefault(partition, before)
            self._emit(partition, event)
        self._reply(headers, encode_reply(True, result=reply))

    def _emit(self, partition: int, event: Event) -> None:
        self.producer.produce(self.t_events, key=event.stream_id.encode(), value=encode_event(event),
                              partition=partition)
        self.stats.events += 1

    def _partition_of(self, key: str) -> int:
        return partition_for_key(key.encode(), self._partition_count())

    def _partition_count(self) -> int:
        """Partitions of the commands topic (and so of events, messages and internal)."""
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
