"""What every transactional side worker (push delivery, replay) shares: its group and transactional
ids, its Kafka client configs, its serving loop and health writes, the fenced exit, and the process
entry point (`worker_main`).

Contracts:

- A worker of kind *k* joins the consumer group ``wt-<prefix>.<k>-worker`` and produces with the
  transactional id ``<group>-<worker id>``: stable per worker id, so a restarted worker fences its
  own zombie at ``init_transactions``.
- Every transactional call goes through `TransactionalWorker._call_txn`, which runs it on a bounded
  caller thread (`workers.bounded`): the worker waits at most the call's timeout plus
  `CALL_GRACE_S`, writing its health file meanwhile. librdkafka does not always honour the timeout
  (after a broker outage ``send_offsets_to_transaction`` can hang on a stale coordinator for
  minutes, librdkafka #5511); a call that overruns counts as a failed producer (below). A fenced
  producer is one too: the coordinator also fences a producer whose open transaction outlived
  ``transaction.timeout.ms`` (a broker restart under an open transaction), so a fence starts over
  from the log like any failed producer (`workers.fences`). Only `fences.MAX_FENCES` fences within
  `fences.FENCE_WINDOW_S` (two processes with one worker id fencing each other) raise `FencedError`,
  and the process exits with `EXIT_FENCED`. A producer that failed fatally otherwise, or that
  cannot even abort its transaction (a broker killed under an open transaction leaves librdkafka
  in INVALID_TXN_STATE), raises `ProducerFailedError`, and the worker *starts over from the log*
  in process: a new producer with the same transactional id (``init_transactions`` fences the old
  one and settles its last transaction, committed or aborted), then every assigned partition is
  rebuilt from what is committed (`_restore`) and the consumer seeks there. Whatever happened,
  state and positions are again exactly what the log says. Any other failure is the worker's to
  handle (abort and do it again). A start over that cannot rebuild a partition (the brokers went
  away again) leaves it paused, and the serving loop rebuilds it later (as after a failed
  assignment callback, below).
- After every broker connection was lost (an ``_ALL_BROKERS_DOWN`` error from either client), the
  producer is replaced between two steps (no transaction is open then, so nothing needs rebuilding)
  once the brokers answer again: a producer that lived through the outage can keep a stale
  coordinator and hang in its next transactional call.
- ``init_transactions`` is retried for up to `INIT_TIMEOUT_S` while the transaction coordinator is
  not ready (a broker that just started answers NOT_COORDINATOR for a while).
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
from functools import partial
from typing import Any, ClassVar, Final

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from watchtower.logs import setup_logging
from watchtower.metrics import common as common_metrics
from watchtower.metrics import side_workers as side_metrics
from watchtower.metrics.consumer_lag import ConsumerLag
from watchtower.metrics.exposition import start_metrics
from watchtower.topics.connection import GroupTimeouts, kafka_config
from watchtower.topics.groups import worker_group
from watchtower.workers.bounded import BoundedCaller, CallStuckError
from watchtower.workers.fences import FenceCounter, rival_message
from watchtower.workers.tx_health import TxWorkerHealth

TXN_TIMEOUT_S: Final = 10.0
#: A transactional call is given up (the producer replaced) this long after its own timeout.
CALL_GRACE_S: Final = 2.0
#: After a broker outage, how often to ask whether the brokers answer again.
PROBE_INTERVAL_S: Final = 1.0
INIT_TIMEOUT_S: Final = 120.0
#: Pause between attempts to rebuild partitions whose rebuild failed in the assignment callback.
RESTORE_RETRY_S: Final = 1.0
EXIT_FENCED: Final = 3
EXIT_USAGE: Final = 2
# Errors of init_transactions worth retrying (besides the ones librdkafka marks retriable).
TRANSIENT_INIT: Final = frozenset({KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                                   KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError._TIMED_OUT,
                                   KafkaError.REQUEST_TIMED_OUT, KafkaError._TRANSPORT, KafkaError._WAIT_COORD})
# A fence: another instance initialised our transactional id, or the coordinator aborted a
# transaction that outlived its timeout (`workers.fences`): the worker starts over from the log,
# unless the fences repeat.
FENCES: Final = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})
# Errors after which this process can never commit: exit (the operator must grant the id).
FATAL: Final = frozenset({KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED})


class FencedError(RuntimeError):
    """This process must exit: another one keeps taking over its transactional id, or it may not use it."""


class ProducerFailedError(RuntimeError):
    """The producer can never commit again, but nobody took over: replace it and start over from the log."""


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    """The whole number in environment variable `name` (`default` when unset or blank); a value that
    is not a whole number ≥ `minimum` is a ValueError naming the variable."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < minimum:
        raise ValueError(f"{name} must be a whole number ≥ {minimum}, got {raw!r}")
    return int(raw)


def consumer_config(bootstrap: str, group: str, client_id: str, **extra: Any) -> dict[str, Any]:
    """A group member that reads committed records only and commits its offsets in its own
    transactions (never automatically); `extra` adds or overrides settings."""
    timeouts = GroupTimeouts.from_env()
    return {
        **kafka_config(bootstrap),
        "group.id": group,
        "client.id": client_id,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        # Co-partitioned topics: the range assignor gives partition p of each to the same member.
        "partition.assignment.strategy": "range",
        "session.timeout.ms": timeouts.session_ms,
        "heartbeat.interval.ms": timeouts.heartbeat_ms,
        "log_level": 3,
        **extra,
    }


def producer_config(bootstrap: str, transactional_id: str, client_id: str, **extra: Any) -> dict[str, Any]:
    """An idempotent transactional producer; `extra` adds or overrides settings."""
    return {
        **kafka_config(bootstrap),
        "client.id": client_id,
        "transactional.id": transactional_id,
        "enable.idempotence": True,
        "acks": "all",
        # Right after a commit the coordinator answers the next AddOffsetsToTxn with
        # CONCURRENT_TRANSACTIONS; librdkafka retries after retry.backoff.ms (100 ms by
        # default), which stalled back-to-back transactions by ~100 ms (p90) in the benchmark.
        "retry.backoff.ms": 5,
        "retry.backoff.max.ms": 200,
        "log_level": 3,
        **extra,
    }


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
    # Retried at init besides librdkafka's retriable errors (a subclass may narrow it).
    transient_init: ClassVar[frozenset[int]] = TRANSIENT_INIT
    log: ClassVar[logging.Logger] = logging.getLogger("watchtower.workers.tx_worker")
    health: TxWorkerHealth

    def __init__(self, bootstrap: str, worker_id: str, prefix: str | None, clock_ms: Callable[[], int] | None,
                 **producer_extra: Any) -> None:
        self.bootstrap, self.worker_id = bootstrap, worker_id
        self.group = worker_group(self.kind, prefix)
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._stop = threading.Event()
        client_id = f"wt-{self.kind}-{worker_id}"
        self.consumer = Consumer({**tx_consumer_config(bootstrap, self.group, client_id),
                                  "error_cb": self._on_client_error})
        self._producer_config = tx_producer_config(bootstrap, self.group, worker_id, client_id,
                                                   **{"error_cb": self._on_client_error, **producer_extra})
        self.producer = Producer(self._producer_config)
        self._calls = BoundedCaller(f"wt-{self.kind}-txn-call")
        self.recoveries = 0
        self._fences = FenceCounter()
        # Set when every broker connection was lost: the producer is replaced once they answer again.
        self._outage = False
        self._next_probe = 0.0
        # (topic, partition) assigned paused because their rebuild failed in the callback.
        self._unrestored: list[tuple[str, int]] = []
        self._next_restore = 0.0
        self.consumer_lag = ConsumerLag(self.kind)

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        """Serve until `stop`; raises FencedError when this worker must exit for a restart."""
        self.health.write()
        try:
            self._init_transactions()
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
        while not self._stop.is_set():
            self._replace_producer()
            try:
                self._init_transactions()
            except (ProducerFailedError, KafkaException) as again:  # the new producer failed too: again
                self.log.warning("worker %s: initialising transactions failed (%s); retrying", self.worker_id, again)
                self._tick_health()
                self._stop.wait(1.0)
                continue
            break
        else:
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

    def _replace_producer(self) -> None:
        """A new producer with the same transactional id (its ``init_transactions`` fences the old one)."""
        old = [self.producer]
        self.producer = Producer(self._producer_config)
        # Destroying a producer can block on its broker threads: let a daemon thread drop the last
        # reference (a call still stuck on it keeps it alive on its own thread until it returns).
        threading.Thread(target=old.clear, name=f"wt-{self.kind}-dispose", daemon=True).start()

    def _refresh_producer_after_outage(self) -> None:
        """After every broker connection was lost, once the brokers answer again, start a fresh
        producer (called between steps: no transaction is open, nothing needs rebuilding)."""
        if not self._outage or time.monotonic() < self._next_probe:
            return
        self._next_probe = time.monotonic() + PROBE_INTERVAL_S
        try:
            self.consumer.list_topics(self._subscriptions()[0], timeout=PROBE_INTERVAL_S)
        except KafkaException:
            return  # still away
        self.log.warning("worker %s: the brokers answer again; starting a fresh producer", self.worker_id)
        self._outage = False
        self._replace_producer()
        try:
            self._init_transactions()
        except KafkaException as exc:  # failed for good: start over from the log (retried there)
            raise ProducerFailedError(f"the fresh producer after an outage failed ({exc})") from None

    def _on_client_error(self, err: KafkaError) -> None:
        # Called from poll/consume of either client (possibly on the call thread): only notes.
        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            self._outage = True
        elif err.fatal():
            self.log.error("fatal client error: %s", err)

    def _tick_health(self) -> None:
        self.consumer_lag.measure(self.consumer)  # at most once a second, on this thread
        if self.health.due():
            self._count()
            self.health.write()

    def _closers(self) -> list[Callable[[], None]]:
        """The clients to close when the worker exits."""
        return [self.consumer.close]

    # ------------------------------------------------------------------ shared plumbing
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

    def _init_transactions(self) -> None:
        """Initialise transactions, retrying while the transaction coordinator is not ready yet (a
        broker that just started answers NOT_COORDINATOR for a while) and replacing a producer whose
        call overran; fenced: FencedError; failed for good, or still failing after `INIT_TIMEOUT_S`:
        raised."""
        deadline = time.monotonic() + INIT_TIMEOUT_S
        while True:
            try:
                self._call_txn(partial(self.producer.init_transactions, TXN_TIMEOUT_S), what="init_transactions")
                self._outage = False
                return
            except ProducerFailedError as exc:  # stuck or failed fatally: a new producer, then again
                if time.monotonic() > deadline or self._stop.is_set():
                    raise
                self.log.warning("initialising transactions failed (%s); retrying with a new producer", exc)
                self._replace_producer()
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                transient = isinstance(err, KafkaError) and (err.retriable() or err.code() in self.transient_init)
                if not transient or time.monotonic() > deadline or self._stop.is_set():
                    raise
                self.log.warning("initialising transactions failed (%s); retrying", err)
            self._tick_health()
            self._stop.wait(1.0)

    def _abort_txn(self) -> None:
        """Abort the open transaction; a producer that cannot even abort must be replaced: ProducerFailedError."""
        try:
            self._call_txn(partial(self.producer.abort_transaction, TXN_TIMEOUT_S))
        except (KafkaException, ProducerFailedError) as abort_exc:
            raise ProducerFailedError(f"the transaction could not be aborted ({abort_exc})") from None

    def _call_txn(self, fn: Callable[[], Any], what: str | None = None) -> Any:
        """A transactional call, bounded (module docstring): a fatal producer error (a fence among
        them), or a call that overran its deadline, is ProducerFailedError (start over from the log);
        fenced again and again (`FenceCounter`), FencedError (exit); the rest is raised as is."""
        name = what or getattr(getattr(fn, "func", fn), "__name__", "transactional call")
        try:
            return self._calls.call(fn, TXN_TIMEOUT_S + CALL_GRACE_S, what=f"worker {self.worker_id}: {name}",
                                    while_waiting=self._while_waiting)
        except CallStuckError as exc:
            raise ProducerFailedError(f"{exc}; the producer is replaced") from None
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() in FATAL:
                raise FencedError(f"worker {self.worker_id} may not use its transactional id ({err})") from None
            if isinstance(err, KafkaError) and err.code() in FENCES:
                common_metrics.FENCES.labels(self.kind).inc()
                if self._fences.note():
                    raise FencedError(f"{rival_message(self.worker_id, len(self._fences))} (last: {err})") from None
                raise ProducerFailedError(f"worker {self.worker_id} was fenced ({err}); a transaction the "
                                          "coordinator aborted, or another instance") from None
            if isinstance(err, KafkaError) and err.fatal():
                raise ProducerFailedError(f"worker {self.worker_id}'s producer failed fatally ({err})") from None
            raise

    def _while_waiting(self) -> None:
        """While a transactional call runs: serve the producer's error_cb and keep the health file current."""
        self.producer.poll(0)
        self._tick_health()


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
