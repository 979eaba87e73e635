"""What the transactional side workers (push delivery, replay) share on top of the one serving loop
(`workers.loop`): their group and transactional ids, their Kafka client configs, how a partition is
rebuilt on assignment, the fenced exit, and the process entry point (`worker_main`).

Contracts:

- A worker of kind *k* joins the consumer group ``wt-<prefix>.<k>-worker`` and produces with the
  transactional id ``<group>-<worker id>``: stable per worker id, so a restarted worker fences its
  own zombie at ``init_transactions``.
- It is a processor of `workers.loop.TransactionalLoop`, like the stream worker: the loop owns the
  consumer, the producer (its watchdog, fencing, outage recovery and the one ``init_transactions``
  policy of `workers.host`), each transaction and what a failed one means. A fence, a call that
  overran, or a producer that failed fatally otherwise or cannot even abort its transaction (a
  broker killed under an open transaction leaves librdkafka in INVALID_TXN_STATE) makes the worker
  *start over from the log* in process: every assigned partition is rebuilt from what is committed
  (`_restore`) and the consumer seeks there. Repeated fences (two processes with one worker id) or a
  transactional id the principal may not use raise `FencedError`, and the process exits with
  `EXIT_FENCED`. A start over that cannot rebuild a partition (the brokers went away again) leaves
  it paused, and the serving loop rebuilds it later (as after a failed assignment callback, below).
- A partition is rebuilt inside the assignment callback, where the group consumer must only be
  assigned, paused and resumed (`workers.loop`: the CallState hazard). Whatever the rebuild needs
  from the cluster is read before subscribing (`prepare`) or through clients of its own. A rebuild
  that fails inside the callback (the brokers are away) never raises out of it: the partitions are
  assigned paused, and the serving loop rebuilds them outside any callback, seeks them to what it
  rebuilt and resumes them.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from abc import abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final

from confluent_kafka import Consumer, KafkaException, TopicPartition

from watchtower.logs import setup_logging
from watchtower.metrics import gc_pauses
from watchtower.metrics import side_workers as side_metrics
from watchtower.metrics.exposition import start_metrics
from watchtower.topics.groups import worker_group
from watchtower.workers.health import SideHealth
from watchtower.workers.host import (
    EXIT_FENCED,
    FencedError,
    ProducerFailedError,
    consumer_config,
    producer_config,
)
from watchtower.workers.loop import Hosted, Processor, TransactionalLoop

__all__ = ["EXIT_FENCED", "FencedError", "ProducerFailedError", "TransactionalWorker", "consumer_config",
           "producer_config", "worker_main"]

TXN_TIMEOUT_S: Final = 10.0
#: Pause between attempts to rebuild partitions whose rebuild failed in the assignment callback.
RESTORE_RETRY_S: Final = 1.0
EXIT_USAGE: Final = 2

#: A partition of a consumed topic, as a worker sees it: (topic, partition).
TopicPartitionId = tuple[str, int]


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


class TransactionalWorker(Hosted, Processor):
    """A side worker: a processor of the one transactional loop. A subclass names its `kind`
    (``delivery``, ``replay``: the group is ``wt-<prefix>.<kind>-worker``, the client id
    ``wt-<kind>-<worker id>``), sets `health`, reads its own settings, then calls ``super().__init__``
    (which builds the loop: the consumer and the transactional producer), and implements `_restore`,
    `_on_revoke`, `_step`, `_count` and `subscriptions`. Call `run` (blocking) and `stop` from elsewhere (a signal
    handler)."""

    kind: ClassVar[str]
    log: ClassVar[logging.Logger] = logging.getLogger("watchtower.workers.tx_worker")
    health: SideHealth

    def __init__(self, bootstrap: str, worker_id: str, prefix: str | None, clock_ms: Callable[[], int] | None,
                 **producer_extra: Any) -> None:
        self.bootstrap, self.worker_id = bootstrap, worker_id
        self.group = worker_group(self.kind, prefix)
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        client_id = f"wt-{self.kind}-{worker_id}"
        self.host = TransactionalLoop(
            self, worker_id=worker_id, service=self.kind, call_timeout_s=TXN_TIMEOUT_S, thread_name=f"wt-{self.kind}",
            consumer_conf=tx_consumer_config(bootstrap, self.group, client_id),
            producer_conf=tx_producer_config(bootstrap, self.group, worker_id, client_id, **producer_extra))
        # (topic, partition) assigned paused because their rebuild failed in the callback.
        self._unrestored: list[tuple[str, int]] = []
        self._next_restore = 0.0

    # ------------------------------------------------------------------ what a worker implements
    @abstractmethod
    def _restore(self, partitions: list[TopicPartitionId], *, recovering: bool = False) -> dict[TopicPartitionId, int]:
        """Rebuild the state of `partitions` from what the log holds committed; where consuming
        resumes, for each of them (`recovering`: after a producer failure, not a rebalance)."""

    @abstractmethod
    def _on_revoke(self, partitions: list[TopicPartitionId]) -> None:
        """Forget the state of the revoked partitions."""

    @abstractmethod
    def _count(self) -> None:
        """Refresh the health counters before a periodic write."""

    def _aborting(self, exc: Exception) -> None:
        """A transaction failed with `exc` and is about to be aborted: drop what it assumed."""

    # ------------------------------------------------------------------ the processor
    def lifecycle(self, state: str) -> None:
        if state == "starting":
            self.health.write()
        else:
            self.health.set_state(state)

    def assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Never raise out of a rebalance callback: librdkafka would surface it from consume() and
        # the worker would die on whatever the cluster did (the brokers away mid-rebalance).
        try:
            self._restore_at(partitions)
        except Exception as exc:
            waiting = self._defer(partitions, exc)
            consumer.assign(waiting)
            consumer.pause(waiting)
            return
        consumer.assign(partitions)

    def _defer(self, partitions: list[TopicPartition], exc: Exception) -> list[TopicPartition]:
        """`partitions` could not be rebuilt (`exc`): drop whatever the failed rebuild left half done and
        leave them to the serving loop (`_restore_deferred`); the partitions, for the caller to pause."""
        self.log.warning("worker %s cannot rebuild partitions %s yet (%s); they stay paused and are rebuilt "
                         "shortly", self.worker_id, sorted({tp.partition for tp in partitions}), exc)
        waiting = [TopicPartition(tp.topic, tp.partition) for tp in partitions]
        self._on_revoke(_ids(waiting))
        self._unrestored = sorted({(tp.topic, tp.partition) for tp in waiting} | set(self._unrestored))
        self._next_restore = time.monotonic() + RESTORE_RETRY_S
        return waiting

    def revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:  # noqa: ARG002 (the contract's)
        gone = {(tp.topic, tp.partition) for tp in partitions}
        self._unrestored = [tp for tp in self._unrestored if tp not in gone]
        self._on_revoke(_ids(partitions))

    def reset(self) -> None:
        held = [TopicPartition(t, p) for t in self.subscriptions() for p in self.health.partitions]
        self.revoke(self.consumer, held)

    def step(self) -> None:
        if self._unrestored and time.monotonic() >= self._next_restore:
            self._restore_deferred()
        self._step()

    @abstractmethod
    def _step(self) -> None:
        """One turn of the serving loop: consume what arrived, commit what is due."""

    def failed(self, exc: Exception) -> None:
        if isinstance(exc, (KafkaException, BufferError)):  # not a failed producer: aborted
            self.health.aborted += 1
            self._aborting(exc)

    def tick(self) -> None:
        if self.health.due():
            self._count()
            self.health.write()

    def _restore_deferred(self) -> None:
        """Rebuild the partitions whose rebuild failed inside the assignment callback, outside any
        callback: seek each to what was rebuilt and resume it. Retried later when it fails again."""
        assigned = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
        pending = [TopicPartition(t, p) for t, p in self._unrestored if (t, p) in assigned]
        try:
            if pending:
                self._restore_at(pending)
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

    def rebuild(self) -> None:
        """Rebuild every assigned partition after a start over from the log (module docstring)."""
        partitions = [TopicPartition(tp.topic, tp.partition) for tp in self.consumer.assignment()]
        self._on_revoke(_ids(partitions))
        try:
            self._restore_at(partitions, recovering=True)
        except Exception as exc:  # the brokers went away again: rebuilt later by the serving loop
            waiting = self._defer(partitions, exc)
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

    # ------------------------------------------------------------------ shared plumbing
    def _restore_at(self, partitions: list[TopicPartition], *, recovering: bool = False) -> None:
        """`_restore` `partitions` and set each one's ``offset`` to where consuming resumes."""
        resume = self._restore(_ids(partitions), recovering=recovering)
        for tp in partitions:
            tp.offset = resume[(tp.topic, tp.partition)]

    def _transaction(self, write: Callable[[], Mapping[TopicPartitionId, int]]) -> bool:
        """ONE transaction of the loop (`TransactionalLoop.transaction`): `write` produces the records
        and answers the group's next offsets to commit with them, by (topic, partition). Whether it
        committed."""
        return self.host.transaction(lambda: [TopicPartition(t, p, o) for (t, p), o in write().items()])

    def _partition_count(self, topic: str) -> int:
        """Partitions of `topic`, asked by the group consumer: call it from `prepare` only, never from
        inside a rebalance callback (`workers.loop`)."""
        return len(self.consumer.list_topics(topic, timeout=30).topics[topic].partitions)


def _ids(partitions: list[TopicPartition]) -> list[TopicPartitionId]:
    return [(tp.topic, tp.partition) for tp in partitions]


def worker_main(argv: list[str], usage: str, make: Callable[[str, str, str | None], TransactionalWorker],
                logger: str) -> int:
    """The body of ``python -m <worker>.main BOOTSTRAP WORKER_ID [PREFIX]``: logs to stderr at
    ``$WATCHTOWER_LOG_LEVEL`` (default WARNING) in ``$WATCHTOWER_LOG_FORMAT`` (`watchtower.logs`),
    stops on SIGTERM/SIGINT. Returns the exit code: 0 after a stop, `EXIT_USAGE` (printing
    `usage`'s first line) for wrong arguments, `EXIT_FENCED` when fenced."""
    setup_logging(logger.rsplit(".", 1)[-1], argv[1] if len(argv) > 1 else None)
    gc_pauses.install()
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
