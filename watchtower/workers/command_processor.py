"""The aggregate host: commands in, events + records + forwards + replies out, exactly once.

One process (a *worker*) joins the ``wt-stream-actor`` consumer group on the commands topic.
For each partition it owns it is the single writer of the same partition of ``events``,
``messages`` and ``snapshots`` (the topics are co-partitioned). It hosts the aggregates it is
given (:mod:`watchtower.workers.aggregate`; by default the stream actor and the registry) and never
names one. Per poll batch it:

1. produces a snapshot of each owned partition that is due one (:mod:`watchtower.workers.snapshots`);
2. decides every command against the in-memory aggregates (their pure ``decide``/``evolve``);
3. produces the resulting events, extra records (StreamMessages), forwards and replies, and the
   consumed offsets, in ONE Kafka transaction, then commits it.

A crash (even ``kill -9``) before the commit aborts everything in the batch: the events, the
messages, the replies and the offset move vanish together, so the next owner re-decides those
commands from exactly the state the log holds. That is why sequences stay gapless and no
acknowledged publish (= a committed reply) is lost. A restarted worker reuses its
``transactional.id`` and so fences its own zombie at once; a different worker taking over waits
at most ``transaction.timeout.ms`` for the dead one's open transaction to be aborted.

On assignment a partition is paused, rebuilt from its latest snapshot plus the committed events
after it (a record that breaks a rule is quarantined, never fatal) and resumed:
:mod:`watchtower.workers.partitions`.

The producer, the watchdog that bounds every transactional call, fencing, outage recovery and the
one ``init_transactions`` policy (retried with backoff while the worker runs) are
:class:`watchtower.workers.host.TransactionalProducer`'s, shared with the side workers. Consumed
records are turned into typed records (:class:`watchtower.workers.record.ConsumedRecord`) before they are
decided. When Kafka misbehaves (a broker restart, a lost coordinator) a failed batch is handled by
what the error allows:

- the transaction can be aborted: abort it, undo the batch in memory, seek back and re-decide;
- anything else (a fatal or fencing error, a call that overran its deadline, an abort that
  failed, a commit whose outcome is unknown): *start over from the log* - a new producer with the
  same ``transactional.id`` (``init_transactions`` fences the old one and settles its last
  transaction, committed or aborted), then every owned partition is rebuilt from the events and
  the consumer seeks to the committed offsets. Whatever happened, state and position are again
  exactly what the log says. The consumer rejoins the group by itself; a rebalance then arrives
  through the usual callbacks.

After every broker connection was lost, the producer is also replaced (between batches, so
nothing needs rebuilding) once the brokers answer again: a producer that lived through the outage
can keep a stale coordinator and hang in its next ``send_offsets_to_transaction``. While the
brokers are away the health file says ``broker_unreachable``.

The worker reports how it is doing in its health file (:mod:`watchtower.workers.health`).
Faust's ``exactly_once`` has open duplicate bugs (DESIGN.md §3), so this step uses
confluent-kafka transactions; Faust stays for read-side projections.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from watchtower import tracing
from watchtower.metrics import common as common_metrics
from watchtower.metrics import worker as worker_metrics
from watchtower.metrics.consumer_lag import ConsumerLag
from watchtower.metrics.exposition import start_metrics
from watchtower.metrics.group_lag import GroupLagExporter, every_s
from watchtower.metrics.lag import worker_groups
from watchtower.protocol.errors import WatchtowerError
from watchtower.topics.groups import STREAM_WORKER_GROUP, stream_worker_group
from watchtower.topics.reader import end_offsets
from watchtower.workers.aggregate import Aggregate, Context
from watchtower.workers.client_log import kafka_logger
from watchtower.workers.decider import Touched
from watchtower.workers.health import HealthFile, MeteredHealthFile
from watchtower.workers.host import (
    ProducerFailedError,
    TransactionalProducer,
    consumer_config,
    kafka_error,
    producer_config,
    record_of,
    unreachable,
)
from watchtower.workers.partitions import PartitionOwner
from watchtower.workers.record import ConsumedRecord
from watchtower.workers.snapshots import SnapshotPolicy, snapshot_key, snapshot_value

log = logging.getLogger("watchtower.worker")

GROUP_ID = STREAM_WORKER_GROUP

#: Timeout passed to each transactional call; the watchdog gives up `host.CALL_GRACE_S` later still.
#: A healthy call takes milliseconds; one that overruns costs a start over from the log (seconds).
TXN_CALL_TIMEOUT_S: Final = 5.0


def group_id(prefix: str | None = None) -> str:
    """The consumer group of one deployment's stream workers (`topics.groups`)."""
    return stream_worker_group(prefix)


class CommandProcessor(PartitionOwner):
    """A worker of the stream actor. Call :meth:`run` (blocking) and :meth:`stop` from elsewhere."""

    def __init__(self, bootstrap: str, worker_id: str, *, prefix: str | None = None,
                 batch_size: int = 500, transaction_timeout_ms: int = 10_000,
                 clock_ms: Callable[[], int] | None = None, health: HealthFile | None = None,
                 aggregates: Sequence[Aggregate] | None = None, snapshots: SnapshotPolicy | None = None) -> None:
        super().__init__(bootstrap, worker_id, group_id(prefix), prefix, clock_ms, health, aggregates, snapshots)
        self.batch_size = batch_size
        # Metrics: counted per batch, published when it commits (watchtower.metrics.worker).
        self._metrics = worker_metrics.BatchMetrics()
        self._method = worker_metrics.UNKNOWN_METHOD
        self._last_reply: bytes | None = None
        self.consumer_lag = ConsumerLag(worker_metrics.SERVICE)
        self._consumer_conf: dict[str, Any] = consumer_config(bootstrap, self.group, f"wt-worker-{worker_id}", **{
            # A partition is rebuilt inside the assignment callback, i.e. between two polls. From a
            # snapshot that takes seconds, but the first fold of a long log without one takes
            # minutes (200,000 events: about 3 on the shared benchmark machine); a shorter bound
            # made the group evict the worker mid-fold and reassign, so it folded forever.
            "max.poll.interval.ms": 900_000,
            "error_cb": self._on_client_error,
            "logger": kafka_logger(),
        })
        # Stable per worker: a restarted worker fences its own zombie transaction immediately.
        producer_conf: dict[str, Any] = producer_config(
            bootstrap, f"{group_id(prefix)}-{worker_id}", f"wt-worker-{worker_id}", **{
                "transaction.timeout.ms": transaction_timeout_ms,
                # A longer linger would send a batch in fewer produce requests (nothing is visible
                # before the commit, which flushes): 50 ms cut the burst's produce requests per publish
                # from 0.24 to 0.05. It is not used: with it, a worker whose broker was killed and
                # restarted could not initialise transactions again within a minute
                # (tests/workers/test_broker_restart.py, reproduced twice; 2 ms passes).
                "linger.ms": 2,
                "error_cb": self._on_client_error,
                "logger": kafka_logger(),
            })
        self.consumer = Consumer(self._consumer_conf)
        self.txn = TransactionalProducer(producer_conf, worker_id=worker_id, service=worker_metrics.SERVICE,
                                         call_timeout_s=TXN_CALL_TIMEOUT_S, thread_name="wt-worker",
                                         while_waiting=self._while_waiting)

    @property  # type: ignore[override]
    def producer(self) -> Producer:
        """The current transactional producer (replaced after a failure: never keep a reference)."""
        return self.txn.producer

    @producer.setter
    def producer(self, producer: Producer) -> None:
        self.txn.producer = producer

    # ------------------------------------------------------------------ lifecycle
    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        """Process commands until :meth:`stop` (or SIGTERM via :func:`run_worker`)."""
        self.health.write()
        try:
            if not self._init_transactions():
                return
            # commands and internal are co-partitioned and the range assignor gives partition p of
            # both to the same worker, so a forward lands with the writer of its aggregate.
            self.consumer.subscribe([self.t_commands, self.t_internal], on_assign=self._on_assign,
                                    on_revoke=self._on_revoke)
            while not self._stop.is_set():
                self._housekeeping()
                batch = self._next_batch()
                if batch:
                    self._process_batch(batch)
        finally:
            self._close()

    def _close(self) -> None:
        try:
            self.txn.call(self.consumer.close, "closing the consumer")
        except (KafkaException, RuntimeError) as exc:
            log.warning("closing the consumer failed: %s", exc)

    def _housekeeping(self) -> None:
        now = time.monotonic()
        if self._unloaded and now >= self._next_load_try:
            self._load_pending()
        if self._brokers_down and self.txn.probe(self.consumer, self.t_commands):
            self._brokers_down = False
        self._refresh_producer_after_outage()
        self.producer.poll(0)  # serves the producer's error_cb and log lines
        self.consumer_lag.measure(self.consumer)  # at most once a second, on this thread
        self.health.set_aborted_batches(self.stats.aborted_batches)
        self._update_state()
        self.health.tick()

    def _on_client_error(self, err: KafkaError) -> None:
        # Called from poll/flush of either client, possibly on the call thread.
        if self.txn.note_client_error(err):
            self._brokers_down = True
            self._update_state()

    def _next_batch(self) -> list[ConsumedRecord]:
        # Wait for the first record only; then take whatever is already fetched. consume() with a
        # timeout would hold a lone command for the whole timeout, adding it to every latency.
        first = self.consumer.poll(0.1)
        if first is None:
            return []
        batch = []
        for m in [first, *self.consumer.consume(num_messages=self.batch_size - 1, timeout=0)]:
            err = m.error()
            if err is None:
                batch.append(record_of(m))
            elif err.code() != KafkaError._PARTITION_EOF:
                log.warning("consumer error: %s", err)
                if err.fatal():
                    self._replace_consumer(str(err))
                    return []
        if batch:
            self._brokers_down = False
        return batch

    # ------------------------------------------------------------------ the transaction
    def _process_batch(self, batch: list[ConsumedRecord]) -> None:
        batch = self._ready_only(batch)
        if not batch or not self._refresh_producer_after_outage():
            return
        touched: Touched = {}
        self._batch_events.clear()
        ctx = self._context()
        self._metrics.begin()
        try:
            self.producer.begin_transaction()
            snapshotted = self._snapshot_due()
            for msg in batch:
                self._handle(msg, touched, ctx)
            offsets, group = _next_offsets(batch), self.consumer.consumer_group_metadata()
            commit_started = time.perf_counter()
            self.txn.send_offsets_and_commit(offsets, group)
        except (KafkaException, BufferError, ProducerFailedError) as exc:
            self.stats.aborted_batches += 1
            self._metrics.aborted()
            self._after_failed_batch(exc, batch, touched)
            return
        self._metrics.committed(len(batch), commit_started)
        self.stats.batches += 1
        self._brokers_down = False
        self.snapshots.taken(snapshotted)
        self.stats.snapshots_taken += len(snapshotted)
        for partition, count in self._batch_events.items():
            self.snapshots.written(partition, count)

    def _snapshot_due(self) -> list[int]:
        """Produce, in the open transaction and before any record of the batch, a snapshot of each
        owned partition that is due one (:mod:`watchtower.workers.snapshots`); the partitions done.

        The states are those after the previous committed batch, and the events partitions' end
        offsets, read now, cover exactly those batches. A snapshot that cannot be taken is skipped
        (logged): it is an optimisation, never a reason to fail a batch.
        """
        due = self.snapshots.due([p for p in self._owned if p in self._states])
        if not due:
            return []
        try:
            ends = end_offsets(self.bootstrap, self.t_events, due, timeout_s=TXN_CALL_TIMEOUT_S)
        except Exception as exc:
            log.warning("no snapshot of partitions %s now: cannot read the events' end offsets (%s)", due, exc)
            return []
        done = []
        for partition in due:
            try:
                value = snapshot_value(partition, ends[partition], self._states[partition], self.aggregates)
                self.producer.produce(self.t_snapshots, key=snapshot_key(partition), value=value, partition=partition)
            except (KafkaException, BufferError, WatchtowerError, ValueError, TypeError) as exc:
                log.warning("no snapshot of partition %d now (%s); the next one is tried after another %d events",
                            partition, exc, self.snapshots.every_events)
            else:
                log.info("worker %s snapshots partition %d at events offset %d (%d bytes)", self.worker_id,
                         partition, ends[partition], len(value))
            # Also after a failure: back off for a whole period instead of retrying every batch.
            done.append(partition)
        return done

    def _after_failed_batch(self, exc: Exception, batch: list[ConsumedRecord], touched: Touched) -> None:
        if isinstance(exc, KafkaException):  # raised outside the watchdog (begin_transaction, produce)
            exc = self.txn.classify(exc)  # FencedError when this process must exit
        if unreachable(exc):
            self._brokers_down = True
        if not isinstance(exc, ProducerFailedError):
            log.warning("transaction failed (%s); aborting and re-deciding the batch", kafka_error(exc) or exc)
            try:
                self.txn.abort()
                self._undo_in_memory(touched)
                self._seek_to_firsts(batch)
                return
            except ProducerFailedError as abort_exc:
                exc = abort_exc
        self._recover(f"transaction failed and could not be aborted ({exc})")

    # ------------------------------------------------------------------ starting over from the log
    def _recover(self, why: str) -> None:
        """Replace the producer and rebuild every owned partition from the log (see module docstring)."""
        log.warning("worker %s starts over from the log: %s", self.worker_id, why)
        self.stats.recoveries += 1
        common_metrics.RECOVERIES.labels(worker_metrics.SERVICE).inc()
        self._recovering = True
        self._update_state()
        started = time.monotonic()
        try:
            self.txn.replace()
            if self._init_transactions():
                log.info("worker %s: transactions initialised after %.1fs", self.worker_id, time.monotonic() - started)
                self._resync()
                log.info("worker %s: partitions %s rebuilt and serving again after %.1fs", self.worker_id,
                         self._owned, time.monotonic() - started)
        finally:
            self._recovering = False
            self._update_state()

    def _init_transactions(self) -> bool:
        """Initialise the producer's transactions under the one policy of `workers.host` (retried while
        Kafka is away); False if stopped meanwhile."""
        if not self.txn.init_transactions(self._stop, self._on_init_retry):
            return False
        self._brokers_down = False
        return True

    def _on_init_retry(self, exc: BaseException) -> None:
        if unreachable(exc) or kafka_error(exc) is None:
            self._brokers_down = True
        self._update_state()
        self.health.tick()

    def _refresh_producer_after_outage(self) -> bool:
        """After an outage, once the brokers answer again, start a fresh producer (no batch is
        open between batches, so nothing needs rebuilding). False if stopped meanwhile."""
        if not self.txn.outage or self._brokers_down:
            return True
        log.info("worker %s: the brokers are back; starting a fresh producer", self.worker_id)
        self.txn.replace()
        return self._init_transactions()

    def _replace_consumer(self, why: str) -> None:
        log.error("worker %s replaces its consumer: %s", self.worker_id, why)
        self._close()
        for partition in list(self._states):
            self._forget(partition)
        self._unloaded.clear()
        self._owned = []
        self.consumer = Consumer(self._consumer_conf)
        self.consumer.subscribe([self.t_commands, self.t_internal], on_assign=self._on_assign,
                                on_revoke=self._on_revoke)

    # ------------------------------------------------------------------ metrics of each decision
    def _handle(self, record: ConsumedRecord, touched: Touched, ctx: Context) -> None:
        self._method = worker_metrics.UNKNOWN_METHOD  # until the record is routed
        rejected = self.stats.rejected
        # A span per command when tracing is on (what it writes carries its context: decider);
        # off, `span` is None after one global read.
        span = tracing.span("worker decide", record.headers, partition=record.partition)
        if span is None:
            super()._handle(record, touched, ctx)
        else:
            with span:
                super()._handle(record, touched, ctx)
        if self.stats.rejected == rejected:
            self._metrics.decided(self._method, worker_metrics.OK)
        else:
            self._metrics.decided(self._method, worker_metrics.refusal_code(self._last_reply))

    def _route(self, value: bytes | None, internal: bool) -> tuple[Aggregate, Any]:
        aggregate, command = super()._route(value, internal)
        self._method = worker_metrics.method_label(command)
        return aggregate, command

    def _reply(self, headers: dict[str, Any], value: bytes) -> None:
        self._last_reply = value  # decoded only for a refusal, to count its code
        super()._reply(headers, value)

    def _while_waiting(self) -> None:
        # The watchdog has served the producer's error_cb (e.g. all brokers down) just before.
        self._update_state()
        self.health.tick()


def _next_offsets(batch: list[ConsumedRecord]) -> list[TopicPartition]:
    last: dict[tuple[str, int], int] = {}
    for r in batch:
        last[(r.topic, r.partition)] = r.offset
    return [TopicPartition(t, p, o + 1) for (t, p), o in last.items()]


def run_worker(bootstrap: str, worker_id: str, prefix: str | None = None) -> None:
    """Run one worker in the foreground until SIGTERM/SIGINT."""
    proc = CommandProcessor(bootstrap, worker_id, prefix=prefix,
                            health=MeteredHealthFile.from_env(worker_id))
    collectors: list[Any] = [worker_metrics.WorkerCollector(proc), proc.consumer_lag]
    # The worker stays up while the other workers come and go: it exports every group's lag, so a
    # stopped delivery or replay worker shows as a growing lag, not only as a target that is down.
    interval = every_s()
    groups = GroupLagExporter(bootstrap, worker_groups(prefix), every=interval) if interval else None
    if groups is not None:
        collectors.append(groups)
    if start_metrics(worker_metrics.SERVICE, collectors) is not None and groups is not None:
        groups.start()
    signal.signal(signal.SIGTERM, lambda *_: proc.stop())
    signal.signal(signal.SIGINT, lambda *_: proc.stop())
    proc.run()
