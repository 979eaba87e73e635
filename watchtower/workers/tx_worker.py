"""What every transactional side worker (push delivery, replay) shares: its group and transactional
ids, its Kafka client configs, its serving loop and health writes, the fenced exit, and the process
entry point (`worker_main`).

Contracts:

- A worker of kind *k* joins the consumer group ``wt-<prefix>.<k>-worker`` and produces with the
  transactional id ``<group>-<worker id>``: stable per worker id, so a restarted worker fences its
  own zombie at ``init_transactions``.
- The producer, its watchdog (every transactional call bounded), fencing, outage recovery and the
  one ``init_transactions`` policy (retried with backoff for as long as the worker runs) are
  `workers.host.TransactionalProducer`'s, shared with the stream worker. A call that overran, a
  fence, or a producer that failed fatally otherwise or cannot even abort its transaction (a
  broker killed under an open transaction leaves librdkafka in INVALID_TXN_STATE) raises
  `ProducerFailedError`, and the worker *starts over from the log* in process: a new producer with
  the same transactional id (``init_transactions`` fences the old one and settles its last
  transaction, committed or aborted), then every assigned partition is rebuilt from what is
  committed (`_restore`) and the consumer seeks there. Whatever happened, state and positions are
  again exactly what the log says. Repeated fences (two processes with one worker id) or a
  transactional id the principal may not use raise `FencedError`, and the process exits with
  `EXIT_FENCED`. Any other failure is the worker's to handle (abort and do it again). A start over
  that cannot rebuild a partition (the brokers went away again) leaves it paused, and the serving
  loop rebuilds it later (as after a failed assignment callback, below).
- After every broker connection was lost, the producer is replaced between two steps once the
  brokers answer again (`TransactionalProducer.refresh_after_outage`).
- Inside a rebalance callback the group consumer is only assigned, paused and resumed, never asked
  anything that enters librdkafka through confluent-kafka's call state (``list_topics``, ``poll``,
  ``consume``, ``close``): such a call ends by clearing the calling thread's call state, which the
  ``consume`` still serving the callback needs for the next callback it serves (a second rebalance
  event, an error or statistics event), and the process then aborts with
  ``CallState_get: Assertion 'cs != NULL' failed`` (seen after broker restarts, when revocations
  and assignments queue up). Whatever the rebuild needs from the cluster is read before subscribing
  (`_prepare`) or through clients of its own. A rebuild that fails inside the callback (the brokers
  are away) never raises out of it: the partitions are assigned paused, and the serving loop
  rebuilds them outside any callback, seeks them to what it rebuilt and resumes them.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, Final

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from watchtower.logs import setup_logging
from watchtower.metrics import common as common_metrics
from watchtower.metrics import side_workers as side_metrics
from watchtower.metrics.consumer_lag import ConsumerLag
from watchtower.metrics.exposition import start_metrics
from watchtower.topics.groups import worker_group
from watchtower.workers.health import SideHealth
from watchtower.workers.host import (
    EXIT_FENCED,
    FencedError,
    ProducerFailedError,
    TransactionalProducer,
    consumer_config,
    producer_config,
)

__all__ = ["EXIT_FENCED", "FencedError", "ProducerFailedError", "TransactionalWorker", "consumer_config",
           "producer_config", "worker_main"]

TXN_TIMEOUT_S: Final = 10.0
#: Pause between attempts to rebuild partitions whose rebuild failed in the assignment callback.
RESTORE_RETRY_S: Final = 1.0
EXIT_USAGE: Final = 2


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    """The whole number in environment variable `name` (`default` when unset or blank); a value that
    is not a whole number ≥ `minimum` is a ValueError naming the variable."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < minimum:
        raise ValueError(f"{name} must be a whole number ≥ {minimum}, got {raw!r}")
    return int(raw)


def tx_consumer_config(bootstrap: str, group: str, client_id: str) -> dict[str, Any]:
    """`consumer_config` of a side worker: it rebuilds a partition inside the assignment callback."""
    return consumer_config(bootstrap, group, client_id, **{
        "max.poll.interval.ms": 900_000,  # the rebuild of a long partition runs in the callback
        "fetch.wait.max.ms": 20,
    })


def tx_producer_config(bootstrap: str, group: str, worker_id: str, client_id: str, **extra: Any) -> dict[str, Any]:
    """`producer_config` of a side worker: transactional id ``<group>-<worker id>`` (stable per worker
    id: a restarted worker fences its own zombie at init_transactions), `TXN_TIMEOUT_S`, and the
    default partitioner of every Kafka client (records keyed by an account must land where readers
    in any language look for them)."""
    return producer_config(bootstrap, f"{group}-{worker_id}", client_id, **{
        "transaction.timeout.ms": int(TXN_TIMEOUT_S * 1000),
        "linger.ms": 5,
        "partitioner": "murmur2_random",
        **extra,
    })


class TransactionalWorker(ABC):
    """The lifecycle a side worker shares. A subclass names its `kind` (``delivery``, ``replay``: the
    group is ``wt-<prefix>.<kind>-worker``, the client id ``wt-<kind>-<worker id>``), sets `health`,
    reads its own settings, then calls ``super().__init__`` (which builds the consumer and the
    transactional producer), and implements the steps `run` calls. Call `run` (blocking) and `stop`
    from elsewhere (a signal handler)."""

    kind: ClassVar[str]
    log: ClassVar[logging.Logger] = logging.getLogger("watchtower.workers.tx_worker")
    health: SideHealth

    def __init__(self, bootstrap: str, worker_id: str, prefix: str | None, clock_ms: Callable[[], int] | None,
                 **producer_extra: Any) -> None:
        self.bootstrap, self.worker_id = bootstrap, worker_id
        self.group = worker_group(self.kind, prefix)
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._stop = threading.Event()
        client_id = f"wt-{self.kind}-{worker_id}"
        self.consumer = Consumer({**tx_consumer_config(bootstrap, self.group, client_id),
                                  "error_cb": self._on_client_error})
        self.txn = TransactionalProducer(
            tx_producer_config(bootstrap, self.group, worker_id, client_id,
                               **{"error_cb": self._on_client_error, **producer_extra}),
            worker_id=worker_id, service=self.kind, call_timeout_s=TXN_TIMEOUT_S, thread_name=f"wt-{self.kind}",
            while_waiting=self._tick_health)
        self.recoveries = 0
        # (topic, partition) assigned paused because their rebuild failed in the callback.
        self._unrestored: list[tuple[str, int]] = []
        self._next_restore = 0.0
        self.consumer_lag = ConsumerLag(self.kind)

    @property
    def producer(self) -> Producer:
        """The current transactional producer (replaced after a failure: never keep a reference)."""
        return self.txn.producer

    @producer.setter
    def producer(self, producer: Producer) -> None:
        self.txn.producer = producer

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        """Serve until `stop`; raises FencedError when this worker must exit for a restart."""
        self.health.write()
        try:
            if not self._init_transactions():
                return
            self._prepare()
            self.consumer.subscribe(self._subscriptions(), on_assign=self._on_assign, on_revoke=self._revoked)
            self.health.set_state("serving")
            while not self._stop.is_set():
                try:
                    self._refresh_producer_after_outage()
                    if self._unrestored and time.monotonic() >= self._next_restore:
                        self._restore_deferred()
                    self._step()
                except ProducerFailedError as exc:
                    self._recover(exc)
                self.producer.poll(0)  # serves the producer's error_cb
                self._tick_health()
        finally:
            self.health.set_state("exiting")
            self._close()

    # ------------------------------------------------------------------ what a worker implements
    def _prepare(self) -> None:  # noqa: B027 (optional hook: a worker that needs nothing keeps it)
        """Read what `_restore` needs from the cluster (partition counts), before subscribing: never
        from inside a rebalance callback (module docstring). Called once the brokers answer."""

    @abstractmethod
    def _subscriptions(self) -> list[str]:
        """The topics the group consumes."""

    @abstractmethod
    def _restore(self, consumer: Consumer, partitions: list[TopicPartition], *, recovering: bool = False) -> None:
        """Rebuild the state of `partitions` from what the log holds committed and set each one's
        ``offset`` to where consuming resumes (`recovering`: after a producer failure, not a rebalance)."""

    @abstractmethod
    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Forget the state of the revoked partitions."""

    @abstractmethod
    def _step(self) -> None:
        """One turn of the serving loop: consume what arrived, commit what is due."""

    @abstractmethod
    def _count(self) -> None:
        """Refresh the health counters before a periodic write."""

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Never raise out of a rebalance callback: librdkafka would surface it from consume() and
        # the worker would die on whatever the cluster did (the brokers away mid-rebalance).
        try:
            self._restore(consumer, partitions)
        except Exception as exc:
            self.log.warning("worker %s cannot rebuild partitions %s yet (%s); they stay paused and are rebuilt "
                             "shortly", self.worker_id, sorted({tp.partition for tp in partitions}), exc)
            waiting = [TopicPartition(tp.topic, tp.partition) for tp in partitions]
            self._on_revoke(consumer, waiting)  # drop whatever the failed rebuild left half done
            self._unrestored = sorted({(tp.topic, tp.partition) for tp in waiting} | set(self._unrestored))
            self._next_restore = time.monotonic() + RESTORE_RETRY_S
            consumer.assign(waiting)
            consumer.pause(waiting)
            return
        consumer.assign(partitions)

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        gone = {(tp.topic, tp.partition) for tp in partitions}
        self._unrestored = [tp for tp in self._unrestored if tp not in gone]
        self._on_revoke(consumer, partitions)

    def _restore_deferred(self) -> None:
        """Rebuild the partitions whose rebuild failed inside the assignment callback, outside any
        callback: seek each to what was rebuilt and resume it. Retried later when it fails again."""
        assigned = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
        pending = [TopicPartition(t, p) for t, p in self._unrestored if (t, p) in assigned]
        try:
            if pending:
                self._restore(self.consumer, pending)
                for tp in pending:
                    self.consumer.seek(tp)
                self.consumer.resume(pending)
        except Exception as exc:  # as in the callback: retried, never fatal
            self.log.warning("worker %s: rebuilding partitions %s failed again (%s); retrying in %gs", self.worker_id,
                             sorted({tp.partition for tp in pending}), exc, RESTORE_RETRY_S)
            self._next_restore = time.monotonic() + RESTORE_RETRY_S
            return
        self._unrestored = []
        if pending:
            self.log.info("worker %s rebuilt partitions %s and serves them", self.worker_id,
                          sorted({tp.partition for tp in pending}))

    def _recover(self, why: Exception) -> None:
        """Start over from the log (module docstring): new producer, settled transaction, rebuilt
        partitions, consumer positions at what was committed. FencedError if another instance took over."""
        self.recoveries += 1
        common_metrics.RECOVERIES.labels(self.kind).inc()
        self.log.warning("worker %s starts over from the log: %s", self.worker_id, why)
        self.txn.replace()
        if not self._init_transactions():
            return
        partitions = [TopicPartition(tp.topic, tp.partition) for tp in self.consumer.assignment()]
        self._on_revoke(self.consumer, partitions)
        try:
            self._restore(self.consumer, partitions, recovering=True)
        except Exception as exc:  # the brokers went away again: rebuilt later by the serving loop
            self.log.warning("worker %s cannot rebuild partitions %s yet (%s); they stay paused and are rebuilt "
                             "shortly", self.worker_id, sorted({tp.partition for tp in partitions}), exc)
            waiting = [TopicPartition(tp.topic, tp.partition) for tp in partitions]
            self._on_revoke(self.consumer, waiting)
            self._unrestored = sorted({(tp.topic, tp.partition) for tp in waiting})
            self._next_restore = time.monotonic() + RESTORE_RETRY_S
            if waiting:
                self.consumer.pause(waiting)
            return
        for tp in partitions:
            self.consumer.seek(tp)
        if self._unrestored:  # rebuilt just now with the others
            self.consumer.resume([TopicPartition(t, p) for t, p in self._unrestored])
            self._unrestored = []
        self.log.warning("worker %s serves again: partitions of %s rebuilt from the log", self.worker_id,
                         sorted({tp.topic for tp in partitions}))

    def _refresh_producer_after_outage(self) -> None:
        """After every broker connection was lost, once the brokers answer again, start a fresh
        producer (called between steps: no transaction is open, nothing needs rebuilding)."""
        self.txn.refresh_after_outage(self._brokers_answer, self._stop)

    def _brokers_answer(self) -> bool:
        return bool(self.txn.probe(self.consumer, self._subscriptions()[0]))

    def _on_client_error(self, err: KafkaError) -> None:
        # Called from poll/consume of either client (possibly on the call thread): only notes.
        self.txn.note_client_error(err)

    def _tick_health(self) -> None:
        self.consumer_lag.measure(self.consumer)  # at most once a second, on this thread
        if self.health.due():
            self._count()
            self.health.write()

    def _closers(self) -> list[Callable[[], None]]:
        """The clients to close when the worker exits."""
        return [self.consumer.close]

    # ------------------------------------------------------------------ shared plumbing
    def _fetch(self, max_records: int, wait_s: float) -> list[Message]:
        """What the consumer has fetched already (up to `max_records`), else the first record within
        `wait_s`; errors and ends of partition left out. (consume() with a timeout would wait for a
        FULL batch and hold a lone record for the whole wait.)"""
        batch = self.consumer.consume(num_messages=max_records, timeout=0)
        if not batch and wait_s > 0:
            first = self.consumer.poll(wait_s)
            batch = [first] if first is not None else []
        return [msg for msg in batch if self._is_record(msg)]

    def _partition_count(self, topic: str) -> int:
        """Partitions of `topic`, asked by the group consumer: call it from `_prepare` only, never from
        inside a rebalance callback (module docstring)."""
        return len(self.consumer.list_topics(topic, timeout=30).topics[topic].partitions)

    def _transaction(self, write: Callable[[], list[TopicPartition]]) -> bool:
        """ONE transaction: `write` produces the records and returns the group's offsets to commit with
        them (``send_offsets_to_transaction`` fences an evicted zombie). Whether it committed: a
        failed one is counted, `_aborting` is told, and it is aborted (ProducerFailedError when even
        that fails: the serving loop starts over from the log)."""
        try:
            self.producer.begin_transaction()
            offsets = write()
            self.txn.send_offsets_and_commit(offsets, self.consumer.consumer_group_metadata())
        except (KafkaException, BufferError) as exc:
            self.health.aborted += 1
            self._aborting(exc)
            self._abort_txn()
            return False
        return True

    def _aborting(self, exc: Exception) -> None:  # noqa: B027 (optional hook)
        """A transaction failed with `exc` and is about to be aborted: drop what it assumed."""

    def _is_record(self, msg: Message) -> bool:
        """Whether a consumed `msg` is a record: an end of partition is skipped, another error logged."""
        err = msg.error()
        if err is None:
            return True
        if err.code() != KafkaError._PARTITION_EOF:
            self.log.warning("consumer error: %s", err)
        return False

    def _close(self) -> None:
        for close in self._closers():
            try:
                close()
            except (KafkaException, RuntimeError) as exc:
                self.log.warning("closing a client failed: %s", exc)

    def _init_transactions(self) -> bool:
        """Initialise transactions under the one policy of `workers.host` (retried until they are);
        False when stopped meanwhile, FencedError when this process may not use its id."""
        return self.txn.init_transactions(self._stop)

    def _abort_txn(self) -> None:
        """Abort the open transaction; a producer that cannot even abort must be replaced: ProducerFailedError."""
        self.txn.abort()

    def _call_txn(self, fn: Callable[[], Any], what: str | None = None) -> Any:
        """A transactional call, bounded by the watchdog (`TransactionalProducer.call`): a fatal producer
        error (a fence among them), or a call that overran its deadline, is ProducerFailedError (start
        over from the log); fenced again and again, FencedError (exit); the rest is raised as is."""
        return self.txn.call(fn, what)


def worker_main(argv: list[str], usage: str, make: Callable[[str, str, str | None], TransactionalWorker],
                logger: str) -> int:
    """The body of ``python -m <worker>.main BOOTSTRAP WORKER_ID [PREFIX]``: logs to stderr at
    ``$WATCHTOWER_LOG_LEVEL`` (default WARNING) in ``$WATCHTOWER_LOG_FORMAT`` (`watchtower.logs`),
    stops on SIGTERM/SIGINT. Returns the exit code: 0 after a stop, `EXIT_USAGE` (printing
    `usage`'s first line) for wrong arguments, `EXIT_FENCED` when fenced."""
    setup_logging(logger.rsplit(".", 1)[-1], argv[1] if len(argv) > 1 else None)
    if len(argv) not in (2, 3):
        print(usage.strip().splitlines()[0], file=sys.stderr)
        return EXIT_USAGE
    bootstrap, worker_id, *rest = argv
    worker = make(bootstrap, worker_id, rest[0] if rest else None)
    side_metrics.meter_quarantines(worker.health, worker.kind)
    start_metrics(worker.kind, [side_metrics.TxWorkerCollector(worker), worker.consumer_lag])
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    signal.signal(signal.SIGINT, lambda *_: worker.stop())
    try:
        worker.run()
    except FencedError as exc:
        logging.getLogger(logger).error("%s; exiting for a restart", exc)
        return EXIT_FENCED
    return 0
