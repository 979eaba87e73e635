"""A worker that is fenced starts over from the log, unless the fences keep coming.

The transaction coordinator fences a producer whose open transaction outlived its timeout, which a
broker restart under an open transaction does: the delivery worker used to exit on that fence and,
with nobody to restart it, pushes stopped. Only two processes with one worker id fencing each other
again and again (or a transactional id the principal may not use) make the worker exit. The rule is
the one transactional host's (`workers.host`), so it holds for every worker: stream, delivery, replay.
"""

from __future__ import annotations

import gc

import pytest
from confluent_kafka import KafkaError, KafkaException

from watchtower.delivery.worker import DeliveryWorker
from watchtower.replay.worker import ReplayWorker
from watchtower.workers.command_processor import CommandProcessor
from watchtower.workers.fences import FENCE_WINDOW_S, MAX_FENCES, FenceCounter
from watchtower.workers.host import FencedError, ProducerFailedError


def raising(code: int, *, fatal: bool = True):
    def call() -> None:
        raise KafkaException(KafkaError(code, "from the test", fatal=fatal))
    return call


def stream_worker(bootstrap: str, worker_id: str, *, prefix: str) -> CommandProcessor:
    return CommandProcessor(bootstrap, worker_id, prefix=prefix)


@pytest.fixture(params=[stream_worker, DeliveryWorker, ReplayWorker], ids=["stream", "delivery", "replay"])
def worker(request: pytest.FixtureRequest):
    # Nothing listens there: constructing the clients contacts no broker, and no call below does.
    made = request.param("127.0.0.1:1", "fences", prefix="tfences")
    yield made
    made._close()
    # Drop the clients now (they hold no message): left to the garbage collector (the raised
    # errors' tracebacks hold the worker in a cycle), their threads would keep dialling the
    # unreachable address for much of the session.
    made.producer = None
    del made
    gc.collect()


@pytest.mark.parametrize("code", [KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH])
def test_a_fence_starts_over_and_only_repeated_fences_exit(worker, code: int) -> None:
    for _ in range(MAX_FENCES - 1):
        with pytest.raises(ProducerFailedError, match="fenced"):
            worker.txn.call(raising(code), what="commit_transaction")
    with pytest.raises(FencedError, match="another process runs with the same worker id"):
        worker.txn.call(raising(code), what="commit_transaction")


def test_a_transactional_id_the_principal_may_not_use_exits_at_once(worker) -> None:
    with pytest.raises(FencedError, match="may not use its transactional id"):
        worker.txn.call(raising(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED), what="init_transactions")


def test_an_ordinary_error_is_the_workers_to_handle(worker) -> None:
    with pytest.raises(KafkaException):
        worker.txn.call(raising(KafkaError._INCONSISTENT, fatal=False), what="commit_transaction")


def test_fences_older_than_the_window_are_forgotten() -> None:
    now = [0.0]
    counter = FenceCounter(clock=lambda: now[0])
    for _ in range(MAX_FENCES - 1):
        assert not counter.note()
    now[0] += FENCE_WINDOW_S + 1
    assert not counter.note()
    assert len(counter) == 1
    for _ in range(MAX_FENCES - 2):
        assert not counter.note()
    assert counter.note()
