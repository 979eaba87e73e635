"""The stream actor's write path: commands in, events + messages + replies out, exactly once.

One process (a *worker*) joins the ``wt-stream-actor`` consumer group on the commands topic.
For each partition it owns it is the single writer of the same partition of ``events`` and
``messages`` (the topics are co-partitioned). Per poll batch it:

1. decides every command against the in-memory aggregate (the pure ``decide``/``evolve``);
2. produces the resulting events, StreamMessages and replies, and the consumed offsets,
   in ONE Kafka transaction, then commits it.

A crash (even ``kill -9``) before the commit aborts everything in the batch: the events, the
messages, the replies and the offset move vanish together, so the next owner re-decides those
commands from exactly the state the log holds. That is why sequences stay gapless and no
acknowledged publish (= a committed reply) is lost. A restarted worker reuses its
``transactional.id`` and so fences its own zombie at once; a different worker taking over waits
at most ``transaction.timeout.ms`` for the dead one's open transaction to be aborted.

Faust's ``exactly_once`` has open duplicate bugs (DESIGN.md §3), so this step uses
confluent-kafka transactions; Faust stays for read-side projections.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from watchtower.agents.state_loader import load_partition_states
from watchtower.agents.wire import (
    H_CAPACITY,
    H_CORRELATION,
    H_REPLY_PARTITION,
    RegistryForward,
    decode_command,
    encode_event,
    encode_registry_forward,
    encode_reply,
)
from watchtower.protocol.billing import block_height_at
from watchtower.protocol.errors import UnauthorizedError, WatchtowerError
from watchtower.protocol.registry import REGISTRY_KEY, RegistryState, decide_registration, evolve_registry
from watchtower.protocol.signed_command import Command, Method
from watchtower.protocol.stream_actor import StreamState, decide, evolve
from watchtower.protocol.stream_state import Event
from watchtower.schemas.records import encode_message
from watchtower.topics.catalogue import topic_name
from watchtower.topics.partitioning import partition_for_key

log = logging.getLogger("watchtower.worker")

GROUP_ID = "wt-stream-actor"


def group_id(prefix: str | None = None) -> str:
    """The consumer group of one deployment's workers (per topic prefix, so deployments sharing
    a cluster never rebalance each other)."""
    return f"{GROUP_ID}.{topic_name('commands', prefix).rsplit('.', 1)[0]}"


@dataclass
class WorkerStats:
    """Counters a supervisor or benchmark can read."""

    batches: int = 0
    commands: int = 0
    events: int = 0
    rejected: int = 0
    aborted_batches: int = 0
    rebuilt_partitions: int = 0
    extra: dict[str, float] = field(default_factory=dict)


class CommandProcessor:
    """A worker of the stream actor. Call :meth:`run` (blocking) and :meth:`stop` from elsewhere."""

    def __init__(self, bootstrap: str, worker_id: str, *, prefix: str | None = None,
                 batch_size: int = 500, transaction_timeout_ms: int = 10_000,
                 clock_ms: Callable[[], int] | None = None) -> None:
        self.bootstrap = bootstrap
        self.worker_id = worker_id
        self.batch_size = batch_size
        self.t_commands = topic_name("commands", prefix)
        self.t_events = topic_name("events", prefix)
        self.t_messages = topic_name("messages", prefix)
        self.t_replies = topic_name("replies", prefix)
        self.t_internal = topic_name("internal", prefix)
        self._reply_partitions: int | None = None
        self.stats = WorkerStats()
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._stop = threading.Event()
        self._states: dict[int, dict[str, StreamState]] = {}
        self._registries: dict[int, RegistryState] = {}
        self._touched_registries: dict[int, RegistryState] = {}
        self._command_partitions: int | None = None
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": group_id(prefix),
            "client.id": f"wt-worker-{worker_id}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "partition.assignment.strategy": "range",
            "session.timeout.ms": 10_000,
            "heartbeat.interval.ms": 1_000,
            "max.poll.interval.ms": 60_000,
            "log_level": 3,
        })
        self.producer = Producer({
            "bootstrap.servers": bootstrap,
            "client.id": f"wt-worker-{worker_id}",
            # Stable per worker: a restarted worker fences its own zombie transaction immediately.
            "transactional.id": f"{group_id(prefix)}-{worker_id}",
            "transaction.timeout.ms": transaction_timeout_ms,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            # Right after a commit the coordinator answers the next AddOffsetsToTxn with
            # CONCURRENT_TRANSACTIONS; librdkafka retries after retry.backoff.ms (100 ms by
            # default), which stalled back-to-back transactions by ~100 ms (p90) in the benchmark.
            "retry.backoff.ms": 5,
            "retry.backoff.max.ms": 200,
            "log_level": 3,
        })

    # ------------------------------------------------------------------ lifecycle
    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        """Process commands until :meth:`stop` (or SIGTERM via :func:`run_worker`)."""
        self.producer.init_transactions(60)
        # commands and internal are co-partitioned and the range assignor gives partition p of
        # both to the same worker, so a forward lands with the writer of its aggregate.
        self.consumer.subscribe([self.t_commands, self.t_internal], on_assign=self._on_assign,
                                on_revoke=self._on_revoke)
        try:
            while not self._stop.is_set():
                batch = self._next_batch()
                if batch:
                    self._process_batch(batch)
        finally:
            self.consumer.close()
            self.producer.flush(10)

    def _next_batch(self) -> list[Message]:
        # Wait for the first record only; then take whatever is already fetched. consume() with a
        # timeout would hold a lone command for the whole timeout, adding it to every latency.
        first = self.consumer.poll(0.1)
        if first is None:
            return []
        batch = [first, *self.consumer.consume(num_messages=self.batch_size - 1, timeout=0)]
        return [m for m in batch if not _is_benign_error(m)]

    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Rebuild each owned aggregate from the committed events before touching its commands.
        for tp in partitions:
            if tp.topic != self.t_commands:
                continue
            loaded = load_partition_states(self.bootstrap, self.t_events, tp.partition)
            self._states[tp.partition] = loaded.streams
            self._registries[tp.partition] = loaded.registry
            self.stats.rebuilt_partitions += 1
        log.info("worker %s assigned %s", self.worker_id, [tp.partition for tp in partitions])

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            if tp.topic != self.t_commands:
                continue
            self._states.pop(tp.partition, None)
            self._registries.pop(tp.partition, None)

    # ------------------------------------------------------------------ the transaction
    def _process_batch(self, batch: list[Message]) -> None:
        touched: dict[tuple[int, str], StreamState | None] = {}
        self._touched_registries.clear()
        self.producer.begin_transaction()
        try:
            for msg in batch:
                self._handle(msg, touched)
            self.producer.send_offsets_to_transaction(
                _next_offsets(batch), self.consumer.consumer_group_metadata(), 30)
            self.producer.commit_transaction(30)
            self.stats.batches += 1
        except KafkaException as exc:
            err = exc.args[0]
            if err.fatal() or err.code() == KafkaError._FENCED:
                raise
            log.warning("transaction failed (%s); aborting and rewinding", err)
            self._abort_and_rewind(batch, touched)

    def _abort_and_rewind(self, batch: list[Message],
                          touched: dict[tuple[int, str], StreamState | None]) -> None:
        self.stats.aborted_batches += 1
        try:
            self.producer.abort_transaction(30)
        except KafkaException:
            log.exception("abort failed")
            raise
        # Undo the in-memory effects of the aborted batch, then re-read those commands.
        for partition, registry in self._touched_registries.items():
            self._registries[partition] = registry
        self._touched_registries.clear()
        for (partition, stream_id), before in touched.items():
            states = self._states.get(partition)
            if states is None:
                continue
            if before is None:
                states.pop(stream_id, None)
            else:
                states[stream_id] = before
        firsts: dict[tuple[str, int], int] = {}
        for m in batch:
            firsts.setdefault((str(m.topic()), int(m.partition() or 0)), int(m.offset() or 0))
        for (topic, partition), offset in firsts.items():
            self.consumer.seek(TopicPartition(topic, partition, offset))

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
            states = self._states.setdefault(partition, {})
            state = states.get(cmd.stream_id) or StreamState.initial(cmd.stream_id)
            decision = decide(state, cmd, block_height=block_height_at(self._clock_ms()))
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
            if event.type == "StreamMessagePublished":
                message = event.message()
                capacity = state.capacity or 0
                self.producer.produce(self.t_messages, key=cmd.stream_id.encode(),
                                      value=encode_message(message), partition=partition,
                                      headers={"sequence": str(message.sequence), H_CAPACITY: str(capacity)})
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
        before = self._registries.get(partition, RegistryState())
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
        if self._command_partitions is None:
            md = self.producer.list_topics(self.t_commands, timeout=30)
            self._command_partitions = len(md.topics[self.t_commands].partitions)
        return partition_for_key(key.encode(), self._command_partitions)

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


def _is_benign_error(msg: Message) -> bool:
    err = msg.error()
    if err is None:
        return False
    if err.code() != KafkaError._PARTITION_EOF:
        log.warning("consumer error: %s", err)
    return True


def _next_offsets(batch: list[Message]) -> list[TopicPartition]:
    last: dict[tuple[str, int], int] = {}
    for m in batch:
        last[(str(m.topic()), int(m.partition() or 0))] = int(m.offset() or 0)
    return [TopicPartition(t, p, o + 1) for (t, p), o in last.items()]


def run_worker(bootstrap: str, worker_id: str, prefix: str | None = None) -> None:
    """Run one worker in the foreground until SIGTERM/SIGINT."""
    proc = CommandProcessor(bootstrap, worker_id, prefix=prefix)
    signal.signal(signal.SIGTERM, lambda *_: proc.stop())
    signal.signal(signal.SIGINT, lambda *_: proc.stop())
    proc.run()
