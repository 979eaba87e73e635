"""The one transactional serving loop: every worker (the stream worker, push delivery, replay) is a
`Processor` plugged into a `TransactionalLoop`.

The loop owns the group consumer and the `workers.host.TransactionalProducer` of a stable
``transactional.id`` (``<group>-<worker id>``), and serves until stopped:

1. initialise transactions under the one policy of `workers.host` (retried while the process
   should run), let the processor `prepare` (read what its rebuilds need from the cluster), then
   subscribe with rebalance callbacks that hand each assignment and revocation to the processor;
2. every turn: ask the brokers whether they answer again after an outage and then replace the
   producer (`TransactionalProducer.refresh_after_outage`), let the processor take one `step`, serve
   the producer's callbacks, measure the consumer lag and let the processor `tick` (health file);
3. a processor's step fetches records (`fetch`) and writes what it decided in ONE transaction
   (`transaction`): begin, its records, the group's consumed offsets
   (``send_offsets_to_transaction``, which fences an evicted zombie), commit.

A failed transaction is handled by what the error allows (one rule for every worker):

- it can be aborted: abort it, and the processor drops what the transaction assumed (`aborted`:
  an undo in memory, a seek back) and does it again;
- anything else (a fatal or fencing error, a call that overran its deadline, an abort that failed,
  a commit whose outcome is unknown): *start over from the log* (`recover`) - a new producer with
  the same ``transactional.id`` (``init_transactions`` fences the old one and settles its last
  transaction, committed or aborted), then the processor rebuilds every assigned partition from
  what the log holds committed and moves the consumer there (`rebuild`). Whatever happened, state
  and position are again exactly what the log says. Repeated fences (two processes with one
  worker id) or a transactional id the principal may not use raise `FencedError`: the process
  exits with `EXIT_FENCED` for its supervisor.

Rebalance callbacks never raise: librdkafka would surface the error from ``poll``/``consume`` and
the worker would die on whatever the log or the cluster did (the brokers away mid-rebalance). A
processor whose rebuild fails in the callback leaves the partitions paused and rebuilds them later
outside any callback. Inside a rebalance callback the group consumer is only assigned, paused,
resumed and sought, never asked anything that enters librdkafka through confluent-kafka's call
state (``list_topics``, ``poll``, ``consume``, ``close``): such a call ends by clearing the calling
thread's call state, which the ``consume`` still serving the callback needs for the next callback
it serves (a second rebalance event, an error or statistics event), and the process then aborts
with ``CallState_get: Assertion 'cs != NULL' failed`` (seen after broker restarts, when revocations
and assignments queue up). Whatever a rebuild needs from the cluster is read before subscribing
(`Processor.prepare`) or through clients of its own.

While the brokers are away (every connection lost, a call that found none) `brokers_down` is set,
and cleared once they answer again; the stream worker's health file says ``broker_unreachable``
meanwhile. A consumer that fails fatally is replaced (the processor forgets every partition: the
new one rejoins the group and is assigned through the usual callbacks).
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from watchtower.metrics import common as common_metrics
from watchtower.metrics.consumer_lag import ConsumerLag
from watchtower.topics.batches import failed_fatally
from watchtower.topics.records import Record, record_of
from watchtower.workers.host import (
    ProducerFailedError,
    TransactionalProducer,
    kafka_error,
    unreachable,
)

log = logging.getLogger("watchtower.workers.loop")

#: A transaction that takes this long is logged with where its time went (a healthy one takes ms).
SLOW_TRANSACTION_S = 1.0


class Processor(ABC):
    """What a worker plugs into the `TransactionalLoop`: its topics, its partitions' state, and what
    it does with each turn. The loop calls every method on its own thread (the rebalance callbacks
    from inside ``poll``/``consume``)."""

    #: the worker's logger: the loop logs its starts over there
    log: ClassVar[logging.Logger] = log

    @abstractmethod
    def subscriptions(self) -> list[str]:
        """The topics the group consumes (the first one is asked whether the brokers answer)."""

    def prepare(self) -> None:  # noqa: B027 (optional: a worker that needs nothing keeps it)
        """Read what the rebuilds need from the cluster (partition counts), before subscribing: never
        from inside a rebalance callback (module docstring). Called once the brokers answer."""

    @abstractmethod
    def assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """The rebalance callback of an assignment: assign `partitions` (paused until their state is
        rebuilt). Should not raise; the loop logs what escapes and leaves the partitions to the next
        rebalance."""

    @abstractmethod
    def revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """The rebalance callback of a revocation: forget the state of `partitions`."""

    @abstractmethod
    def step(self) -> None:
        """One turn of the serving loop: consume what arrived (`TransactionalLoop.fetch`), commit
        what is due (`TransactionalLoop.transaction`)."""

    def failed(self, exc: Exception) -> None:  # noqa: B027 (optional)
        """A transaction failed with `exc` (before it is aborted or the worker starts over): count
        it, drop what it assumed."""

    def aborted(self) -> None:  # noqa: B027 (optional)
        """The failed transaction was aborted: undo in memory what it decided, seek back to redo it."""

    @abstractmethod
    def rebuild(self) -> None:
        """After the producer was replaced: rebuild every assigned partition from what the log holds
        committed and move the consumer there (a partition that cannot be rebuilt yet stays paused)."""

    def reset(self) -> None:  # noqa: B027 (optional)
        """The consumer is replaced: forget every partition (the new one is assigned again)."""

    def update_state(self) -> None:  # noqa: B027 (optional)
        """The loop's flags (`brokers_down`, `recovering`) changed: the health state may follow."""

    @abstractmethod
    def tick(self) -> None:
        """Keep the health file current (called every turn and while a transactional call waits)."""

    def lifecycle(self, state: str) -> None:  # noqa: B027 (optional)
        """The loop ``starting`` (before anything), ``serving`` (subscribed), or ``exiting``."""

    def closers(self) -> list[Callable[[], None]]:
        """Clients of the processor's own to close after the consumer, when the worker exits."""
        return []


class TransactionalLoop:
    """The consumer, the transactional producer and the serving loop of one worker (module docstring).

    `consumer_conf` and `producer_conf` are the clients' configurations (`workers.host.consumer_config`,
    `producer_config`); the loop adds their ``error_cb``. `service` labels the metrics (recoveries,
    fences, consumer lag); `call_timeout_s` bounds each transactional call (`TransactionalProducer`).
    `stop` is the event `stop` sets (the processor may share it). `pair`: alternate two producers,
    one transaction each (`workers.host`, "A pair of producers")."""

    def __init__(self, processor: Processor, *, worker_id: str, service: str, consumer_conf: dict[str, Any],
                 producer_conf: dict[str, Any], call_timeout_s: float, thread_name: str,
                 stop: threading.Event | None = None, pair: bool = False) -> None:
        self.processor = processor
        self.worker_id = worker_id
        self.service = service
        self.stop_event = stop or threading.Event()
        self._consumer_conf = {**consumer_conf, "error_cb": self._on_client_error}
        self.consumer = Consumer(self._consumer_conf)
        self.txn = TransactionalProducer({**producer_conf, "error_cb": self._on_client_error}, worker_id=worker_id,
                                         service=service, call_timeout_s=call_timeout_s, thread_name=thread_name,
                                         while_waiting=self._while_waiting, pair=pair)
        self.consumer_lag = ConsumerLag(service)
        self.recoveries = 0
        #: no broker answers (every connection lost, or a call found none), until one answers again
        self.brokers_down = False
        #: starting over from the log (`recover`)
        self.recovering = False

    @property
    def producer(self) -> Producer:
        """The current transactional producer (replaced after a failure: never keep a reference)."""
        return self.txn.producer

    @producer.setter
    def producer(self, producer: Producer) -> None:
        self.txn.producer = producer

    # ------------------------------------------------------------------ lifecycle
    def stop(self) -> None:
        self.stop_event.set()

    def run(self) -> None:
        """Serve until `stop`; raises FencedError when this worker must exit for a restart."""
        self.processor.lifecycle("starting")
        try:
            if not self.init_transactions():
                return
            self.processor.prepare()
            self._subscribe()
            self.processor.lifecycle("serving")
            while not self.stop_event.is_set():
                try:
                    self._housekeeping()
                    self.processor.step()
                except ProducerFailedError as exc:  # from a transactional call outside `transaction`
                    self.recover(exc)
                self.txn.poll()  # serves the producers' error_cb and log lines
                self.consumer_lag.measure(self.consumer)  # at most once a second, on this thread
                self.processor.tick()
        finally:
            self.processor.lifecycle("exiting")
            self.close()

    def close(self) -> None:
        """Close the consumer (a call bounded by the watchdog) and then the processor's own clients."""
        for close in [self._close_consumer, *self.processor.closers()]:
            try:
                close()
            except (KafkaException, RuntimeError) as exc:
                self.processor.log.warning("closing a client failed: %s", exc)

    def _close_consumer(self) -> None:
        self.txn.call(self.consumer.close, "closing the consumer")

    def _subscribe(self) -> None:
        self.consumer.subscribe(self.processor.subscriptions(), on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        try:
            self.processor.assign(consumer, partitions)
        except Exception:  # never out of a rebalance callback (module docstring)
            self.processor.log.exception("worker %s: handling the assignment of %s failed", self.worker_id,
                                         sorted({(tp.topic, tp.partition) for tp in partitions}))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        try:
            self.processor.revoke(consumer, partitions)
        except Exception:
            self.processor.log.exception("worker %s: handling the revocation of %s failed", self.worker_id,
                                         sorted({(tp.topic, tp.partition) for tp in partitions}))

    # ------------------------------------------------------------------ consuming
    def fetch(self, max_records: int, wait_s: float) -> list[Record]:
        """Waits up to `wait_s` for the first record only, then takes whatever is already fetched (up to
        `max_records` in all): consume() with a timeout would wait for a FULL batch and hold a lone
        record for the whole wait, adding it to every latency. Errors and ends of partition are left
        out; a consumer that failed fatally is replaced."""
        first = self.consumer.poll(wait_s)
        if first is None:
            return []
        batch = []
        for msg in [first, *self.consumer.consume(num_messages=max_records - 1, timeout=0)]:
            err = msg.error()
            if err is None:
                batch.append(record_of(msg))
            elif err.code() != KafkaError._PARTITION_EOF:
                self.processor.log.warning("consumer error: %s", err)
                if failed_fatally(err):  # the error event carries _FATAL
                    self.replace_consumer(str(err))
                    return []
        if batch:
            self.brokers_down = False
        return batch

    def replace_consumer(self, why: str) -> None:
        """A new group consumer: the processor forgets every partition; the new one is assigned again."""
        self.processor.log.error("worker %s replaces its consumer: %s", self.worker_id, why)
        self.close_consumer_quietly()
        self.processor.reset()
        self.consumer = Consumer(self._consumer_conf)
        self._subscribe()

    def close_consumer_quietly(self) -> None:
        try:
            self._close_consumer()
        except (KafkaException, RuntimeError) as exc:
            self.processor.log.warning("closing the consumer failed: %s", exc)

    # ------------------------------------------------------------------ the transaction
    def transaction(self, write: Callable[[], list[TopicPartition]]) -> bool:
        """ONE transaction: `write` produces the records and returns the group's offsets to commit with
        them (``send_offsets_to_transaction`` fences an evicted zombie). Whether it committed; a failed
        one is handled by what its error allows (module docstring)."""
        if not self.refresh_after_outage():
            return False
        started = time.monotonic()
        try:
            self.txn.begin()
            offsets = write()
            written = time.monotonic()
            self.txn.send_offsets_and_commit(offsets, self.consumer.consumer_group_metadata())
        except (KafkaException, BufferError, ProducerFailedError) as exc:
            self._failed(exc)
            return False
        self.brokers_down = False
        ended = time.monotonic()
        if ended - started >= SLOW_TRANSACTION_S:
            # A healthy transaction takes milliseconds: say where a slow one spent its time.
            self.processor.log.warning(
                "worker %s: a transaction took %.0f ms (deciding and producing %.0f ms, offsets and commit "
                "%.0f ms, transactional id %s)", self.worker_id, (ended - started) * 1000,
                (written - started) * 1000, (ended - written) * 1000, self.txn.transactional_id)
        return True

    def _failed(self, exc: Exception) -> None:
        self.processor.failed(exc)
        if isinstance(exc, KafkaException):  # raised outside the watchdog (begin_transaction, produce)
            exc = self.txn.classify(exc)  # FencedError when this process must exit
        if unreachable(exc):
            self.brokers_down = True
        if not isinstance(exc, ProducerFailedError):
            self.processor.log.warning("transaction failed (%s); aborting, it is done again", kafka_error(exc) or exc)
            try:
                self.txn.abort()
                self.processor.aborted()
                return
            except ProducerFailedError as abort_exc:
                exc = abort_exc
        self.recover(exc)

    # ------------------------------------------------------------------ starting over from the log
    def recover(self, why: Exception) -> None:
        """Start over from the log (module docstring): new producer, settled transaction, rebuilt
        partitions, consumer positions at what was committed. FencedError if another instance took over."""
        self.recoveries += 1
        common_metrics.RECOVERIES.labels(self.service).inc()
        self.processor.log.warning("worker %s starts over from the log: %s", self.worker_id, why)
        self.recovering = True
        self.processor.update_state()
        started = time.monotonic()
        try:
            self.txn.replace()
            if self.init_transactions():
                self.processor.log.info("worker %s: transactions initialised after %.1fs", self.worker_id,
                                        time.monotonic() - started)
                self.processor.rebuild()
        finally:
            self.recovering = False
            self.processor.update_state()

    def init_transactions(self) -> bool:
        """Initialise transactions under the one policy of `workers.host` (retried while Kafka is away);
        False when stopped meanwhile, FencedError when this process may not use its id."""
        if not self.txn.init_transactions(self.stop_event, self._on_init_retry):
            return False
        self.brokers_down = False
        return True

    def _on_init_retry(self, exc: BaseException) -> None:
        if unreachable(exc) or kafka_error(exc) is None:
            self.brokers_down = True
        self.processor.update_state()
        self.processor.tick()

    # ------------------------------------------------------------------ outages
    def _housekeeping(self) -> None:
        if self.brokers_down and self.txn.probe(self.consumer, self.processor.subscriptions()[0]):
            self.brokers_down = False
        self.refresh_after_outage()
        self.processor.update_state()

    def refresh_after_outage(self) -> bool:
        """After every broker connection was lost, once the brokers answer again, start a fresh
        producer (called between transactions: no transaction is open, nothing needs rebuilding): a
        producer that lived through the outage can keep a stale coordinator and hang in its next
        ``send_offsets_to_transaction``. False if stopped meanwhile."""
        return self.txn.refresh_after_outage(lambda: not self.brokers_down, self.stop_event, self._on_init_retry)

    def _on_client_error(self, err: KafkaError) -> None:
        # Called from poll/consume/flush of either client, possibly on the call thread: only notes.
        if self.txn.note_client_error(err):
            self.brokers_down = True
            self.processor.update_state()

    def _while_waiting(self) -> None:
        # The watchdog has served the producer's error_cb (e.g. all brokers down) just before.
        self.processor.update_state()
        self.processor.tick()


class Hosted:
    """What a processor object shows of its loop, for its process entry point and its tests."""

    host: TransactionalLoop

    @property
    def consumer(self) -> Consumer:
        return self.host.consumer

    @consumer.setter
    def consumer(self, consumer: Consumer) -> None:
        self.host.consumer = consumer

    @property
    def producer(self) -> Producer:
        """The current transactional producer (replaced after a failure: never keep a reference)."""
        return self.host.producer

    @producer.setter
    def producer(self, producer: Producer) -> None:
        self.host.producer = producer

    @property
    def txn(self) -> TransactionalProducer:
        return self.host.txn

    @property
    def consumer_lag(self) -> ConsumerLag:
        return self.host.consumer_lag

    @property
    def recoveries(self) -> int:
        return self.host.recoveries

    def run(self) -> None:
        """Serve until `stop` (blocking); raises FencedError when this worker must exit for a restart."""
        self.host.run()

    def stop(self) -> None:
        self.host.stop()

    def _close(self) -> None:
        self.host.close()

    def _init_transactions(self) -> bool:
        return self.host.init_transactions()
