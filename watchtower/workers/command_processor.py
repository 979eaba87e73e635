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

It is a processor of the one transactional loop (:mod:`watchtower.workers.loop`), like the push
delivery and replay workers: the loop owns the consumer, the producer (its watchdog, fencing,
outage recovery and the one ``init_transactions`` policy of :mod:`watchtower.workers.host`), the
transaction of each batch, and what a failed one means. Consumed records are turned into typed
records (:class:`watchtower.workers.record.Record`) before they are decided. A batch whose
transaction is aborted is undone in memory and decided again (the consumer seeks back to its
first records); a worker that starts over from the log rebuilds every owned partition from the
events and seeks to the committed offsets. While the brokers are away the health file says
``broker_unreachable``.

The worker reports how it is doing in its health file (:mod:`watchtower.workers.health`).
Faust's ``exactly_once`` has open duplicate bugs (DESIGN.md §3), so this step uses
confluent-kafka transactions; Faust stays for read-side projections.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Final

from confluent_kafka import Consumer, KafkaException, TopicPartition

from watchtower import tracing
from watchtower.metrics import worker as worker_metrics
from watchtower.metrics.exposition import start_metrics
from watchtower.metrics.group_lag import GroupLagExporter, every_s
from watchtower.metrics.lag import worker_groups
from watchtower.protocol.errors import WatchtowerError
from watchtower.topics.groups import STREAM_WORKER_GROUP, stream_worker_group
from watchtower.topics.reader import HighWatermarks
from watchtower.topics.records import Record
from watchtower.workers.aggregate import Aggregate, Context
from watchtower.workers.client_log import kafka_logger
from watchtower.workers.decider import Touched
from watchtower.workers.health import HealthFile, MeteredHealthFile
from watchtower.workers.host import ProducerFailedError, consumer_config, producer_config, unreachable
from watchtower.workers.loop import Hosted, Processor, TransactionalLoop
from watchtower.workers.partitions import PartitionOwner
from watchtower.workers.snapshots import SnapshotPolicy, snapshot_key, snapshot_value

log = logging.getLogger("watchtower.worker")

GROUP_ID = STREAM_WORKER_GROUP

#: Ingested publishes decided between two looks at whether a client's command is waiting (step).
LANE_LOOK_EVERY: Final = 8

#: How long a snapshot may wait for its partition's end offset before it is put off: every command of
#: the turn waits with it, and a snapshot is only an optimisation (the read takes a few ms when healthy).
#: Each timeout in a row doubles the wait, up to `SNAPSHOT_END_TIMEOUT_MAX_S`, so a broker that is
#: merely slow (the first read also connects the admin client) still gets its snapshots taken.
SNAPSHOT_END_TIMEOUT_S: Final = 0.25
SNAPSHOT_END_TIMEOUT_MAX_S: Final = 2.0
#: How soon a snapshot put off by a timeout is tried again.
SNAPSHOT_RETRY_S: Final = 1.0
#: How long a rebuild waits, outside any batch, for the end-offset reader to connect (`_load_pending`).
END_READER_CONNECT_S: Final = 5.0

#: Timeout passed to each transactional call; the watchdog gives up `host.CALL_GRACE_S` later still.
#: A healthy call takes milliseconds; one that overruns costs a start over from the log (seconds).
TXN_CALL_TIMEOUT_S: Final = 5.0


def group_id(prefix: str | None = None) -> str:
    """The consumer group of one deployment's stream workers (`topics.groups`)."""
    return stream_worker_group(prefix)


class CommandProcessor(Hosted, PartitionOwner, Processor):  # type: ignore[misc]  # producer: a Sink
    """A worker of the stream actor, a processor of the one transactional loop (`workers.loop`).
    Call :meth:`run` (blocking) and :meth:`stop` from elsewhere."""

    log: ClassVar[logging.Logger] = log

    def __init__(self, bootstrap: str, worker_id: str, *, prefix: str | None = None,
                 batch_size: int = 500, transaction_timeout_ms: int | None = None,
                 clock_ms: Callable[[], int] | None = None, health: HealthFile | None = None,
                 aggregates: Sequence[Aggregate] | None = None, snapshots: SnapshotPolicy | None = None) -> None:
        super().__init__(bootstrap, worker_id, group_id(prefix), prefix, clock_ms, health, aggregates, snapshots)
        self.batch_size = batch_size
        # Metrics: counted per batch, published when it commits (watchtower.metrics.worker).
        self._metrics = worker_metrics.BatchMetrics()
        self._method = worker_metrics.UNKNOWN_METHOD
        self._last_reply: bytes | None = None
        self._touched: Touched = {}
        self._batch: list[Record] = []
        self._held: list[Record] = []  # fetched, waiting for the batch before them (step)
        self._high_watermarks = HighWatermarks(bootstrap)
        self._snapshot_end_timeout_s = SNAPSHOT_END_TIMEOUT_S
        self._gave_way_at: dict[int, int] = {}  # commands partition -> its high watermark when the lane gave way
        self._joining = False  # fetching inside a transaction (`_join_clients`)
        self._rebalances = 0  # assignments and revocations seen, to tell one during `_join_clients`
        consumer_conf: dict[str, Any] = consumer_config(bootstrap, self.group, f"wt-worker-{worker_id}", **{
            # A partition is rebuilt inside the assignment callback, i.e. between two polls. From a
            # snapshot that takes seconds, but the first fold of a long log without one takes
            # minutes (200,000 events: about 3 on the shared benchmark machine); a shorter bound
            # made the group evict the worker mid-fold and reassign, so it folded forever.
            "max.poll.interval.ms": 900_000,
            "logger": kafka_logger(),
        })
        # Stable per worker: a restarted worker fences its own zombie transaction immediately.
        producer_conf: dict[str, Any] = producer_config(
            bootstrap, f"{group_id(prefix)}-{worker_id}", f"wt-worker-{worker_id}", **{
                "transaction.timeout.ms": transaction_timeout_ms or transaction_timeout_from_env(),
                # A longer linger would send a batch in fewer produce requests (nothing is visible
                # before the commit, which flushes): 50 ms cut the burst's produce requests per publish
                # from 0.24 to 0.05. It is not used: with it, a worker whose broker was killed and
                # restarted could not initialise transactions again within a minute
                # (tests/workers/test_broker_restart.py, reproduced twice; 2 ms passes).
                "linger.ms": 2,
                "logger": kafka_logger(),
            })
        self.host = TransactionalLoop(self, worker_id=worker_id, service=worker_metrics.SERVICE,
                                      consumer_conf=consumer_conf, producer_conf=producer_conf,
                                      call_timeout_s=TXN_CALL_TIMEOUT_S, thread_name="wt-worker", stop=self._stop,
                                      pair=producer_pair_from_env())

    # ------------------------------------------------------------------ the processor
    def subscriptions(self) -> list[str]:
        # The input topics are co-partitioned and the range assignor gives partition p of each to
        # the same worker, so a forward or an ingested publish lands with the writer of its aggregate.
        return list(self.input_topics)

    def step(self) -> None:
        if self._unloaded and time.monotonic() >= self._next_load_try:
            self._load_pending()
        batch = self.host.fetch(self.batch_size, 0.1)
        if not batch:
            return
        # The ingestion lane is served after what was fetched with it, in a transaction of its own:
        # a client's publish never waits for a block's worth of ingested publishes to be decided and
        # committed with it. The lane's offsets are its own topic's, so each transaction commits
        # exactly the records it decided. (No order is lost: a client's commands and the ingestion
        # service's are from different senders, each in its own order on its own topic.) A client's
        # command that arrives while the lane's records are being decided joins their transaction,
        # which then ends (`_join_clients`): the rest are put back and decided after it.
        lane = [r for r in batch if r.topic == self.t_ingest_commands]
        first = [r for r in batch if r.topic != self.t_ingest_commands] if lane else batch
        if first:
            self._held = lane  # put back with the first batch if its transaction is aborted
            try:
                committed = self._process_batch(first)
            finally:
                self._held = []
            if not committed:
                return
        if lane:
            self._process_batch(lane, lane=True)

    def _client_waiting(self) -> bool:
        """Whether a client's command sits on an owned ``commands`` partition past the consumer's
        position: its high watermark as the last fetch response gave it (no request) is beyond the
        position, and beyond the mark at which the lane last gave way (a mark that does not move,
        e.g. a transaction marker a hostile writer left, gives way once, not on every look)."""
        tps = [TopicPartition(self.t_commands, p) for p in self._owned]
        try:
            positions = self.consumer.position(tps)
        except KafkaException:
            return False
        for tp in positions:
            high = self.consumer.get_watermark_offsets(tp, cached=True)[1]
            if tp.offset >= 0 and high > max(tp.offset, self._gave_way_at.get(tp.partition, -1)):
                self._gave_way_at[tp.partition] = high
                return True
        return False

    def tick(self) -> None:
        self.health.set_counts(aborted_batches=self.stats.aborted_batches, lane_yields=self.stats.lane_yields)
        self._update_state()
        self.health.tick()

    def update_state(self) -> None:
        self._update_state()

    def reset(self) -> None:
        for partition in [*self._states, *self._kept]:
            self._forget(partition)
        self._unloaded.clear()
        self._owned = []

    def lifecycle(self, state: str) -> None:
        if state == "starting":
            self.health.write()

    # ------------------------------------------------------------------ the transaction
    def _process_batch(self, batch: list[Record], *, lane: bool = False) -> bool:
        """Decide `batch` and commit it in one transaction; whether it committed (an empty batch counts).

        For the `lane`'s records, every `LANE_LOOK_EVERY` records it looks whether a client's command
        waits (`_client_waiting`); if so, the clients' commands already fetched are decided in this
        transaction (`_join_clients`), which then commits, and the rest of the lane is put back (sought),
        to be fetched again."""
        batch = self._ready_only(batch)
        if not batch:
            return True
        self._touched, self._batch = {}, batch
        self._batch_events.clear()
        ctx = self._context()
        snapshotted: list[int] = []
        commit_started = 0.0
        decided = batch

        offsets: list[TopicPartition] = []

        joined: list[Record] = []  # clients' commands decided in this transaction of the lane (`_join_clients`)
        put_back: list[Record] = []  # fetched, not decided: sought back after the commit

        def write() -> list[TopicPartition]:
            nonlocal snapshotted, commit_started, decided, offsets, joined, put_back
            snapshotted = self._snapshot_due()
            decided, joined, put_back = batch, [], []
            for i, msg in enumerate(batch):
                if lane and i and i % LANE_LOOK_EVERY == 0 and self._client_waiting():
                    joined, later = self._join_clients(batch + put_back, ctx)
                    put_back += later
                    if joined:
                        decided, put_back = batch[:i] + joined, batch[i:] + put_back
                        break
                self._handle(msg, self._touched, ctx)
            commit_started = time.perf_counter()
            offsets = _next_offsets(decided)
            return offsets

        self._metrics.begin()
        if not self.host.transaction(write):
            return False
        self.note_committed(offsets)
        if joined:
            self.stats.lane_yields += 1
            self.stats.lane_joined += len(joined)
            worker_metrics.LANE_YIELDS.inc()
        if put_back:
            try:
                self._seek_to_firsts(put_back)
            except KafkaException as exc:  # never skip them: start over from the committed offsets
                self.host.recover(exc)
                return True
        self._metrics.committed(len(decided), commit_started)
        self.stats.batches += 1
        self.snapshots.taken(snapshotted)
        self.stats.snapshots_taken += len(snapshotted)
        for partition, count in self._batch_events.items():
            self.snapshots.written(partition, count)
        return True

    def _join_clients(self, fetched: list[Record], ctx: Context) -> tuple[list[Record], list[Record]]:
        """In the open transaction of the lane, with a client's command waiting (`_client_waiting`):
        take what the consumer has already fetched (no wait) and decide the clients' commands among it
        now, in this transaction; (those records, the lane's records taken with them, to be put back).

        The client's command then commits with the lane's records decided so far, instead of waiting
        for their commit and then for a transaction of its own. `fetched` is what the transaction holds
        so far: an abort puts it back with what this took. A rebalance (or a replaced consumer) during
        the fetch starts the worker over from the log: the revoked states hold this transaction's
        decisions, which may never commit (`revoke`)."""
        rebalances, consumer = self._rebalances, self.host.consumer
        self._joining = True
        try:
            more = self.host.fetch(self.batch_size, 0.0)
        finally:
            self._joining = False
        if self._rebalances != rebalances or self.host.consumer is not consumer:
            raise ProducerFailedError("the assignment changed while a transaction was open; starting over")
        more = self._ready_only(more)
        self._batch = fetched + more
        clients = [r for r in more if r.topic != self.t_ingest_commands]
        for record in clients:
            self._handle(record, self._touched, ctx)
        return clients, [r for r in more if r.topic == self.t_ingest_commands]

    def assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._rebalances += 1
        if self._joining:  # inside a transaction: rebuilt after it (the worker starts over: `_join_clients`)
            self._owned = sorted({tp.partition for tp in partitions if tp.topic == self.t_commands})
            return
        super().assign(consumer, partitions)

    def revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._rebalances += 1
        if self._joining:  # the states hold the open transaction's decisions: never keep them
            for tp in partitions:
                if tp.topic == self.t_commands:
                    self._forget(tp.partition)
        super().revoke(consumer, partitions)

    def _snapshot_due(self) -> list[int]:
        """Produce, in the open transaction and before any record of the batch, a snapshot of the
        first owned partition due one, if any (:mod:`watchtower.workers.snapshots`); the partitions
        whose snapshot was produced.

        One partition a transaction: every command of the turn waits for it, so partitions that fall
        due together are taken on successive turns. The state is the one after the previous committed
        batch, and the events partition's high watermark, read now, covers exactly those batches (not
        the consumer's read_committed end: the last stable offset lags the previous commit's marker,
        and a snapshot tagged with it made the next owner fold that batch's events twice). A snapshot
        that cannot be taken is skipped (logged): it is an optimisation, never a reason to fail a batch,
        nor to hold one. The end offset is given a bounded wait; a timeout (or no broker answering,
        `host.unreachable`) puts the snapshot off for `SNAPSHOT_RETRY_S` with a longer bound, any
        other failure for a whole period.
        """
        due = self.snapshots.due([p for p in self._owned if p in self._states])
        if not due:
            return []
        partition = due[0]
        started = time.perf_counter()
        bound = self._snapshot_end_timeout_s
        try:
            end = self._high_watermarks(self.t_events, [partition], timeout_s=bound)[partition]
            value = snapshot_value(partition, end, self._states[partition], self.aggregates)
            self.producer.produce(self.t_snapshots, key=snapshot_key(partition), value=value, partition=partition)
        except (TimeoutError, KafkaException) as exc:
            if isinstance(exc, KafkaException) and not unreachable(exc):
                return self._snapshot_given_up(partition, exc)
            self._snapshot_end_timeout_s = min(bound * 2, SNAPSHOT_END_TIMEOUT_MAX_S)
            self.snapshots.retry_in(partition, SNAPSHOT_RETRY_S)
            log.warning("no snapshot of partition %d now (no end offset within %.0f ms: %s); tried again in "
                        "%.0f s, waiting up to %.0f ms", partition, bound * 1000, str(exc) or type(exc).__name__,
                        SNAPSHOT_RETRY_S, self._snapshot_end_timeout_s * 1000)
            return []
        except (BufferError, WatchtowerError, ValueError, TypeError) as exc:
            return self._snapshot_given_up(partition, exc)
        self._snapshot_end_timeout_s = SNAPSHOT_END_TIMEOUT_S
        log.info("worker %s snapshots partition %d at events offset %d (%d bytes, %.0f ms)", self.worker_id,
                 partition, end, len(value), (time.perf_counter() - started) * 1000)
        return [partition]

    def _snapshot_given_up(self, partition: int, exc: Exception) -> list[int]:
        """Back off a whole period instead of retrying every batch; no partition was snapshotted."""
        log.warning("no snapshot of partition %d now (%s); the next one is tried after another %d events",
                    partition, str(exc) or type(exc).__name__, self.snapshots.every_events)
        self.snapshots.taken([partition])
        return []

    def failed(self, exc: Exception) -> None:  # noqa: ARG002 (every failure counts alike)
        self.stats.aborted_batches += 1
        self._metrics.aborted()

    def aborted(self) -> None:
        """Undo the batch in memory and seek back (with what was fetched after it): it is decided again."""
        self._undo_in_memory(self._touched)
        self._seek_to_firsts(self._batch + self._held)

    def _load_pending(self) -> bool:
        """Rebuild the partitions without state (`PartitionOwner`), then connect the end-offset reader
        the snapshots use: a first read also opens its connection and fetches metadata, which on a
        busy host overran a snapshot's bounded wait inside a batch; here no batch waits for it."""
        loaded = super()._load_pending()
        if loaded and self._owned:
            try:
                self._high_watermarks(self.t_events, self._owned, timeout_s=END_READER_CONNECT_S)
            except (KafkaException, TimeoutError) as exc:  # the first snapshot connects it, as before
                log.info("worker %s: the end-offset reader is not connected yet (%s)", self.worker_id,
                         str(exc) or type(exc).__name__)
        return loaded

    # ------------------------------------------------------------------ starting over from the log
    def rebuild(self) -> None:
        """Rebuild every owned partition from the log (see module docstring)."""
        self.stats.recoveries = self.host.recoveries
        started = time.monotonic()
        self._resync()
        log.info("worker %s: partitions %s rebuilt and serving again after %.1fs", self.worker_id,
                 self._owned, time.monotonic() - started)

    # ------------------------------------------------------------------ metrics of each decision
    def _handle(self, record: Record, touched: Touched, ctx: Context) -> None:
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


def _next_offsets(batch: list[Record]) -> list[TopicPartition]:
    last: dict[tuple[str, int], int] = {}
    for r in batch:
        last[(r.topic, r.partition)] = r.offset
    return [TopicPartition(t, p, o + 1) for (t, p), o in last.items()]


ENV_TRANSACTION_TIMEOUT: Final = "WATCHTOWER_TRANSACTION_TIMEOUT_MS"
DEFAULT_TRANSACTION_TIMEOUT_MS: Final = 10_000
MIN_TRANSACTION_TIMEOUT_MS: Final = 1_000


def transaction_timeout_from_env() -> int:
    """The stream worker's ``transaction.timeout.ms`` (``WATCHTOWER_TRANSACTION_TIMEOUT_MS``, 10 s
    by default). A worker killed mid-transaction leaves it open, and whoever takes its partitions
    over reads them only once the coordinator aborted it: this timeout after it began. A batch
    takes milliseconds, so a deployment that wants a fast takeover sets it near the group session
    timeout (compose.yaml: 6 s); a transaction that outlives it is aborted and the worker starts
    over from the log."""
    raw = os.environ.get(ENV_TRANSACTION_TIMEOUT, "").strip()
    if not raw:
        return DEFAULT_TRANSACTION_TIMEOUT_MS
    if not raw.isdigit() or int(raw) < MIN_TRANSACTION_TIMEOUT_MS:
        raise ValueError(f"{ENV_TRANSACTION_TIMEOUT} must be a whole number of milliseconds ≥ "
                         f"{MIN_TRANSACTION_TIMEOUT_MS}, got {raw!r}")
    return int(raw)


ENV_PRODUCER_PAIR: Final = "WATCHTOWER_WORKER_PRODUCER_PAIR"


def producer_pair_from_env() -> bool:
    """Whether the stream worker alternates a pair of transactional producers (`workers.host`, "A pair
    of producers"): ``WATCHTOWER_WORKER_PRODUCER_PAIR``, ``1`` (the default) or ``0`` for one producer."""
    raw = os.environ.get(ENV_PRODUCER_PAIR, "").strip()
    if raw not in ("", "0", "1"):
        raise ValueError(f"{ENV_PRODUCER_PAIR} must be 1 (a pair of producers, the default) or 0 (one), got {raw!r}")
    return raw != "0"


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
