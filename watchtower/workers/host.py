"""The transactional core every worker host shares: one producer, its watchdog, its fencing and its
``init_transactions`` policy, written once.

The one serving loop (`workers.loop.TransactionalLoop`) that runs every worker (the stream worker,
push delivery, replay) owns one `TransactionalProducer`. It holds the current producer of a
stable ``transactional.id`` (``<group>-<worker id>``: a restarted worker fences its own zombie at
``init_transactions``) and answers for what is the same in every host. The hosts' Kafka clients
are configured here too (`consumer_config`: read_committed, offsets committed only in the host's
transactions; `producer_config`: idempotent and transactional).

- **The watchdog.** Every transactional call goes through `TransactionalProducer.call`, which runs
  it on a bounded caller thread (`workers.bounded`) and waits at most the call's timeout plus
  `CALL_GRACE_S`, serving the host's ``while_waiting`` (health writes) meanwhile. librdkafka does
  not always honour the timeout: after a broker outage ``send_offsets_to_transaction`` can hang on a
  stale coordinator for minutes (librdkafka #5456, #5511). A call that overruns is a failed
  producer: `ProducerFailedError` (``stuck``), and the host replaces the producer.
- **Fencing.** A fenced producer is a failed one too: the coordinator also fences a producer whose
  open transaction outlived ``transaction.timeout.ms`` (a broker restart under an open
  transaction), so a fence starts over from the log (`ProducerFailedError`) like any failed
  producer (`workers.fences`). Only `fences.MAX_FENCES` fences within `fences.FENCE_WINDOW_S` (two
  processes with one worker id fencing each other), or a transactional id the principal may not
  use, raise `FencedError`: the process must exit (`EXIT_FENCED`) for its supervisor.
  `TransactionalProducer.classify` applies the same rule to an error raised outside the watchdog
  (``begin_transaction``, ``produce``).
- **init_transactions: one policy.** `TransactionalProducer.init_transactions` retries for as long
  as the process should run, with a backoff from `INIT_BACKOFF_S` doubling up to
  `INIT_BACKOFF_MAX_S`, each attempt bounded by the watchdog, and logs every retry. A producer
  whose attempt overran, failed fatally or failed for good is replaced before the next attempt. A
  broker that just started answers NOT_COORDINATOR for a while and a broker that is down answers
  nothing; giving up would leave a worker that never serves again after a broker restart. It
  returns False only when the host was stopped meanwhile; `FencedError` is the only error raised.
- **A pair of producers** (the stream worker's, `pair=True`). Right after a commit the coordinator
  is still writing that transaction's markers, and it answers the same transactional id's next
  AddPartitionsToTxn (and AddOffsetsToTxn) with CONCURRENT_TRANSACTIONS until they are written;
  librdkafka retries the former after a fixed 20 ms. Back-to-back transactions, a worker's normal
  state under load, each paid that wait. A pair alternates two producers of two transactional ids
  (``<group>-<worker id>`` and the same with `PAIR_SUFFIX`), one transaction each in turn, so the
  next transaction never waits for the previous one's markers. Still one transaction is open at a
  time, begun only after the previous one committed (or was aborted), so the records of each
  partition keep the order of the decisions; the group coordinator keeps, for each partition, the
  offset commit appended last, whichever transaction's marker lands first. Both ids are
  initialised (fencing both zombies of a restarted worker), replaced and refreshed together.
- **Outage recovery.** After every broker connection was lost (``_ALL_BROKERS_DOWN`` from either
  client, noted by `note_client_error`), `refresh_after_outage` replaces the producer once the
  brokers answer again (between two transactions: nothing needs rebuilding): a producer that lived
  through the outage can keep a stale coordinator and hang in its next transactional call.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any, Final, TypeVar

from confluent_kafka import KafkaError, KafkaException, Producer

from watchtower.metrics import common as common_metrics
from watchtower.topics.connection import GroupTimeouts, kafka_config
from watchtower.workers.bounded import BoundedCaller, CallStuckError
from watchtower.workers.fences import FenceCounter, rival_message

log = logging.getLogger("watchtower.workers.host")

#: A transactional call is given up (the producer replaced) this long after its own timeout.
CALL_GRACE_S: Final = 2.0
#: While the brokers are away, how often to ask whether they answer again (`TransactionalProducer.probe`).
PROBE_INTERVAL_S: Final = 1.0
#: The first pause between two init_transactions attempts, and the longest one.
INIT_BACKOFF_S: Final = 0.5
INIT_BACKOFF_MAX_S: Final = 4.0
EXIT_FENCED: Final = 3
#: Appended to a worker's transactional id (and client id) for the second producer of a pair.
PAIR_SUFFIX: Final = "#2"

#: Errors that mean "no broker answers" rather than "the request was refused".
UNREACHABLE: Final = frozenset({
    KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._MSG_TIMED_OUT,
    KafkaError._WAIT_COORD, KafkaError._RESOLVE, KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR, KafkaError.REQUEST_TIMED_OUT,
})
#: A fence: another instance initialised our transactional id, or the coordinator aborted a
#: transaction that outlived its timeout (`workers.fences`).
FENCES: Final = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})
#: Errors after which this process can never commit: exit (the operator must grant the id).
FATAL: Final = frozenset({KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED})

T = TypeVar("T")


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



def pair_config(config: dict[str, Any]) -> dict[str, Any]:
    """The second producer of a pair: `config` with `PAIR_SUFFIX` on its transactional and client ids."""
    out = dict(config)
    for key in ("transactional.id", "client.id"):
        if key in out:
            out[key] = f"{out[key]}{PAIR_SUFFIX}"
    return out


class FencedError(RuntimeError):
    """This process must exit: another one keeps taking over its transactional id, or it may not use it."""


class ProducerFailedError(RuntimeError):
    """The producer can never commit again, but nobody took over: replace it and start over from the log.

    ``stuck``: a call overran its deadline (the brokers are probably away); ``error``: the Kafka
    error, when there was one."""

    def __init__(self, message: str, *, stuck: bool = False, error: KafkaError | None = None) -> None:
        super().__init__(message)
        self.stuck, self.error = stuck, error


def kafka_error(exc: BaseException) -> KafkaError | None:
    """The KafkaError a KafkaException (or a ProducerFailedError) carries, if any."""
    if isinstance(exc, ProducerFailedError):
        return exc.error
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return err if isinstance(err, KafkaError) else None


def unreachable(exc: BaseException) -> bool:
    """Whether `exc` says that no broker answers (a stuck call counts: it is how an outage shows)."""
    if isinstance(exc, (CallStuckError, ProducerFailedError)) and getattr(exc, "stuck", True):
        return True
    err = kafka_error(exc)
    return err is not None and err.code() in UNREACHABLE


class TransactionalProducer:
    """The producer of one worker's transactional id, its watchdog and its fence counter.

    `config` is the producer's configuration (its ``error_cb`` should call `note_client_error`);
    `call_timeout_s` is the timeout passed to each transactional call (the watchdog waits
    `CALL_GRACE_S` longer); `service` labels the fence metric; `while_waiting` runs on the calling
    thread about every 0.2 s while a call or an init backoff waits (the host keeps its health file
    current there)."""

    #: The pause after a failed init_transactions attempt, doubling up to the maximum.
    init_backoff_s: float = INIT_BACKOFF_S
    init_backoff_max_s: float = INIT_BACKOFF_MAX_S

    def __init__(self, config: dict[str, Any], *, worker_id: str, service: str, call_timeout_s: float,
                 thread_name: str, while_waiting: Callable[[], None] | None = None,
                 factory: Callable[[dict[str, Any]], Producer] = Producer, pair: bool = False) -> None:
        self.config = config
        self.worker_id = worker_id
        self.service = service
        self.call_timeout_s = call_timeout_s
        self._factory = factory
        #: the second producer's configuration when the producers are a pair (module docstring)
        self.pair_config = pair_config(config) if pair else None
        self._producer: Producer = factory(config)
        self._spare: Producer | None = factory(self.pair_config) if self.pair_config is not None else None
        self._first: Producer = self._producer  # the producer of `config`'s own transactional id
        self.fences = FenceCounter()
        self.outage = False  # every broker connection was lost since the last init_transactions
        self._next_probe = 0.0
        self._thread_name = thread_name
        self._calls = BoundedCaller(f"{thread_name}-txn-call")
        self._while_waiting = while_waiting or (lambda: None)

    @property
    def producer(self) -> Producer:
        """The producer of the current (or next) transaction: never keep a reference."""
        return self._producer

    @producer.setter
    def producer(self, producer: Producer) -> None:
        """Use exactly `producer` from now on (a pair is undone until the next `replace`)."""
        self._producer, self._spare = producer, None
        self._first = producer

    @property
    def transactional_id(self) -> str:
        """The current producer's transactional id (as configured)."""
        config = self.config if self._producer_is_first() else (self.pair_config or self.config)
        return str(config.get("transactional.id", "?"))

    def _producer_is_first(self) -> bool:
        return self._first is self._producer

    def producers(self) -> list[Producer]:
        """Every producer held: the current one, and the other of a pair."""
        return [self._producer] if self._spare is None else [self._producer, self._spare]

    def begin(self) -> None:
        """Begin a transaction: on the other producer of a pair (module docstring), else on the one."""
        if self._spare is not None:
            self._producer, self._spare = self._spare, self._producer
        self._producer.begin_transaction()

    def poll(self) -> None:
        """Serve every producer's callbacks (error_cb, log lines)."""
        for producer in self.producers():
            producer.poll(0)

    # ------------------------------------------------------------------ the watchdog
    def call(self, fn: Callable[[], T], what: str | None = None, *, calls: int = 1) -> T:
        """``fn()`` bounded by the watchdog; its errors classified (`classify`). `calls`: how many
        transactional calls `fn` makes in a row (each is given its timeout)."""
        name = what or getattr(getattr(fn, "func", fn), "__name__", "transactional call")
        try:
            return self._calls.call(fn, self.call_timeout_s * calls + CALL_GRACE_S,
                                    what=f"worker {self.worker_id}: {name}",
                                    while_waiting=self._serve_while_waiting)
        except CallStuckError as exc:
            raise ProducerFailedError(f"{exc}; the producer is replaced", stuck=True) from None
        except KafkaException as exc:
            raise self.classify(exc) from None

    def classify(self, exc: KafkaException) -> Exception:
        """What a Kafka error of the producer means (module docstring): FencedError (raised at once:
        the process exits), ProducerFailedError (start over from the log), or `exc` itself (abort
        and do it again)."""
        err = kafka_error(exc)
        if err is None:
            return exc
        if err.code() in FATAL:
            raise FencedError(f"worker {self.worker_id} may not use its transactional id ({err})")
        if err.code() in FENCES:
            common_metrics.FENCES.labels(self.service).inc()
            if self.fences.note():
                raise FencedError(f"{rival_message(self.worker_id, len(self.fences))} (last: {err})")
            return ProducerFailedError(f"worker {self.worker_id} was fenced ({err}); a transaction the "
                                       "coordinator aborted, or another instance", error=err)
        if err.fatal():
            return ProducerFailedError(f"worker {self.worker_id}'s producer failed fatally ({err})", error=err)
        return exc

    def _serve_while_waiting(self) -> None:
        self.poll()  # serves the producers' error_cb (e.g. all brokers down)
        self._while_waiting()

    # ------------------------------------------------------------------ the transaction's calls
    def send_offsets_and_commit(self, offsets: list[Any], group_metadata: Any) -> None:
        """Add the consumed offsets to the open transaction and commit it: both calls in one turn of
        the watchdog's thread, bounded together. (One hand-over to that thread and back, not two:
        under load each wake-up of a thread waits for a core, and every commit paid it twice.)"""
        producer, timeout_s = self.producer, self.call_timeout_s

        def send_offsets_and_commit() -> None:
            producer.send_offsets_to_transaction(offsets, group_metadata, timeout_s)
            producer.commit_transaction(timeout_s)

        self.call(send_offsets_and_commit, "send_offsets_to_transaction and commit_transaction", calls=2)

    def abort(self) -> None:
        """Abort the open transaction; a producer that cannot even abort must be replaced: ProducerFailedError."""
        try:
            self.call(partial(self.producer.abort_transaction, self.call_timeout_s), "abort_transaction")
        except (KafkaException, ProducerFailedError) as abort_exc:
            raise ProducerFailedError(f"the transaction could not be aborted ({abort_exc})",
                                      stuck=unreachable(abort_exc), error=kafka_error(abort_exc)) from None

    # ------------------------------------------------------------------ the producer's life
    def close(self, timeout_s: float = 5.0) -> None:
        """Flush what is queued (bounded) and end the call thread; the producer is not used again."""
        try:
            for producer in self.producers():
                producer.flush(timeout_s)
        finally:
            self._calls.close()

    def replace(self) -> None:
        """New producers with the same transactional ids (their ``init_transactions`` fence the old ones)."""
        old = self.producers()
        self._producer = self._first = self._factory(self.config)
        self._spare = self._factory(self.pair_config) if self.pair_config is not None else None
        # Destroying a producer can block on its broker threads: let a daemon thread drop the last
        # reference (a call still stuck on it keeps it alive on its own thread until it returns).
        threading.Thread(target=old.clear, name=f"{self._thread_name}-dispose", daemon=True).start()

    def init_transactions(self, stop: threading.Event,
                          on_retry: Callable[[BaseException], None] | None = None) -> bool:
        """Initialise transactions under the one policy (module docstring): retried with backoff until
        they are, each attempt bounded; True once initialised, False when `stop` was set meanwhile.
        `on_retry` sees each failure before its backoff (the host notes an unreachable cluster)."""
        backoff = self.init_backoff_s
        attempt = 0
        pending = self.producers()  # a pair's first, once initialised, is not initialised again
        while not stop.is_set():
            try:
                while pending:
                    self.call(partial(pending[0].init_transactions, self.call_timeout_s), "init_transactions")
                    pending.pop(0)
            except (KafkaException, ProducerFailedError) as exc:
                attempt += 1
                err = kafka_error(exc)
                replace = isinstance(exc, ProducerFailedError) or (err is not None and not err.retriable())
                log.warning("worker %s: initialising transactions failed (%s); retry %d in %.1fs%s", self.worker_id,
                            err or exc, attempt, backoff, " with a new producer" if replace else "")
                if replace:
                    self.replace()
                    pending = self.producers()
                if on_retry is not None:
                    on_retry(exc)
                self._wait(stop, backoff)
                backoff = min(backoff * 2, self.init_backoff_max_s)
                continue
            self.outage = False
            if attempt:
                log.info("worker %s: transactions initialised after %d retries", self.worker_id, attempt)
            return True
        return False

    def _wait(self, stop: threading.Event, seconds: float) -> None:
        """Wait `seconds` (or until `stop`), serving the host's `while_waiting` meanwhile."""
        remaining = seconds
        while remaining > 0 and not stop.is_set():
            step = min(0.2, remaining)
            stop.wait(step)
            remaining -= step
            self._serve_while_waiting()

    # ------------------------------------------------------------------ outages
    def note_client_error(self, err: KafkaError) -> bool:
        """Note a client's error callback (either client, possibly on the call thread); True when every
        broker connection was lost."""
        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            self.outage = True
            return True
        if err.fatal():
            log.error("worker %s: fatal client error: %s", self.worker_id, err)
        return False

    def probe(self, consumer: Any, topic: str) -> bool | None:
        """Whether the brokers answer (a metadata request for `topic` through `consumer`), asked at most
        every `PROBE_INTERVAL_S`; None when it is not time to ask again yet. Nothing else tells an idle
        worker that the brokers are back."""
        now = time.monotonic()
        if now < self._next_probe:
            return None
        self._next_probe = now + PROBE_INTERVAL_S
        try:
            consumer.list_topics(topic, timeout=PROBE_INTERVAL_S)
        except KafkaException:
            return False  # still away
        return True

    def refresh_after_outage(self, brokers_answer: Callable[[], bool], stop: threading.Event,
                             on_retry: Callable[[BaseException], None] | None = None) -> bool:
        """After an outage, once `brokers_answer()`, start a fresh producer and initialise it (call it
        between transactions: nothing needs rebuilding). False only when stopped meanwhile."""
        if not self.outage or not brokers_answer():
            return True
        log.warning("worker %s: the brokers answer again; starting a fresh producer", self.worker_id)
        self.replace()
        return self.init_transactions(stop, on_retry)
