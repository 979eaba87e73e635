"""Transactions of a writer that consumes nothing: the ingestion scheduler and the key manager's vault.

Such a writer owns one fixed ``transactional.id`` and writes a few records per transaction. It
shares the hosts' `TransactionalProducer` (the watchdog on every call, the fence counter and the
one ``init_transactions`` policy) and adds the rule for a transaction that failed:

- **The outcome is known** (the error asks for an abort, and the abort succeeds): nothing of the
  transaction was committed. The writer goes on with the same producer.
- **The outcome is unknown** (a commit that timed out while the brokers were away, a call that
  overran, a producer that failed fatally or was fenced): the coordinator may have committed it
  or not, and librdkafka refuses every later call but a retried commit ("Conflicting
  commit_transaction API call is already in progress"). The writer replaces the producer;
  ``init_transactions`` with the same id completes or aborts whatever the old one left, and only
  then does `on_restart` re-read what the log holds. The caller's next write starts from there.

Either way `write` raises `WriteFailedError`, so the caller never counts a failed write as done.
`FencedError` means another instance keeps taking the id over (or the principal may not use it):
stop writing. A fence alone may also be a transaction the coordinator aborted after a broker
restart, so by default the writer starts over and gives up only after repeated fences
(`workers.fences`); a writer whose takeover is the normal hand-over (``fence_is_final``: the key
manager, where a newer instance replaces the older one) stops at the first.
"""

from __future__ import annotations

import inspect
import logging
import threading
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any

from confluent_kafka import KafkaException, Producer

from watchtower.workers.host import FENCES, FencedError, ProducerFailedError, TransactionalProducer, kafka_error

log = logging.getLogger("watchtower.workers.tx_writer")


class WriteFailedError(RuntimeError):
    """The transaction did not commit, or its outcome is unknown and the writer re-read the log.

    ``restarted``: the producer was replaced and `TransactionalWriter.on_restart` ran."""

    def __init__(self, message: str, *, restarted: bool) -> None:
        super().__init__(message)
        self.restarted = restarted


class TransactionalWriter:
    """One transactional id's writes, each `write` one transaction (module docstring).

    `config` is the producer's configuration with its ``transactional.id``; `name` names the writer
    in logs and metrics; `stop` ends `open`'s retries (and a restart's) when the process stops;
    `on_restart` re-reads the writer's state from the log after the producer was replaced (when the
    object it is a method of still lives);
    `fence_is_final`: the first fence stops the writer (module docstring)."""

    def __init__(self, config: dict[str, Any], *, name: str, stop: threading.Event,
                 on_restart: Callable[[], None], call_timeout_s: float = 30.0, fence_is_final: bool = False,
                 factory: Callable[[dict[str, Any]], Producer] = Producer) -> None:
        self.name = name
        self.stop = stop
        # A bound method is held weakly: its owner holds this writer, and a cycle would keep the
        # producer alive until a garbage collection, possibly the one at interpreter shutdown.
        self._on_restart: Callable[[], Callable[[], None] | None] = (
            weakref.WeakMethod(on_restart) if inspect.ismethod(on_restart) else (lambda: on_restart))
        self.tx = TransactionalProducer(config, worker_id=name, service=name, call_timeout_s=call_timeout_s,
                                        thread_name=name, factory=factory)
        self.fence_is_final = fence_is_final
        self.restarts = 0

    @property
    def producer(self) -> Producer:
        """The current producer (replaced after a failure: never keep it across writes)."""
        return self.tx.producer

    def open(self) -> bool:
        """Initialise transactions (fencing an older instance), retried until they are; False when
        `stop` was set meanwhile."""
        return self.tx.init_transactions(self.stop)

    def write(self, produce: Callable[[Producer], None]) -> None:
        """Begin a transaction, let `produce` add its records through the producer it is given, commit.

        Raises `WriteFailedError` when it did not commit (or may not have: then the writer restarted
        and re-read the log first), `FencedError` when this writer must stop."""
        try:
            self.tx.call(self.tx.producer.begin_transaction, "begin_transaction")
            try:
                produce(self.tx.producer)
            except KafkaException as exc:
                raise self.tx.classify(exc) from None
            self.tx.call(partial(self.tx.producer.commit_transaction, self.tx.call_timeout_s), "commit_transaction")
        except FencedError:
            raise
        except (KafkaException, ProducerFailedError, BufferError) as exc:
            restarted = self._after_failure(exc)
            raise WriteFailedError(f"{self.name}: the transaction failed ({exc})", restarted=restarted) from None

    def _after_failure(self, exc: BaseException) -> bool:
        """Abort when that settles the outcome, else restart; whether the writer restarted."""
        err = kafka_error(exc)
        if self.fence_is_final and err is not None and err.code() in FENCES:
            raise FencedError(f"{self.name}: another instance took over ({err})")
        abortable = isinstance(exc, BufferError) or (
            not isinstance(exc, ProducerFailedError) and err is not None and err.txn_requires_abort())
        if abortable:
            try:
                self.tx.abort()
                log.warning("%s: transaction aborted (%s)", self.name, err or exc)
                return False
            except ProducerFailedError as abort_exc:
                log.warning("%s: %s", self.name, abort_exc)
        self.restart(err or exc)
        return True

    def close(self) -> None:
        """Stop writing: `stop` ends any retry, and the producer is flushed and let go."""
        self.stop.set()
        self.tx.close()

    def restart(self, cause: object) -> None:
        """A new producer under the same id, initialised, then `on_restart` (module docstring).
        Returns without `on_restart` only when `stop` was set meanwhile."""
        log.warning("%s: the outcome of the last transaction is unknown (%s); a new producer settles it and "
                    "the log is read again", self.name, cause)
        self.restarts += 1
        self.tx.replace()
        if self.tx.init_transactions(self.stop) and (on_restart := self._on_restart()) is not None:
            on_restart()


__all__ = ["FencedError", "TransactionalWriter", "WriteFailedError"]
