"""What a failed transaction means, one rule for every worker (`workers.loop`), without a broker.

The stream worker, push delivery and replay are processors of the one transactional loop. A
transaction whose error allows an abort is aborted and the processor undoes what it assumed (it
is done again); one whose producer failed (a fatal error, an abort that fails too) makes the
worker start over from the log with a new producer. Either way nothing is committed.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from watchtower.delivery.worker import DeliveryWorker
from watchtower.replay.worker import ReplayWorker
from watchtower.workers import loop
from watchtower.workers.command_processor import CommandProcessor
from watchtower.workers.loop import TransactionalLoop


class ScriptedProducer:
    """A transactional producer whose commit and abort fail as the test says; it records its calls."""

    def __init__(self, log: list[str], commit_error: KafkaError | None, abort_error: KafkaError | None) -> None:
        self.log, self.commit_error, self.abort_error = log, commit_error, abort_error

    def _call(self, name: str, error: KafkaError | None = None) -> None:
        self.log.append(name)
        if error is not None:
            raise KafkaException(error)

    def init_transactions(self, _timeout: float) -> None:
        self._call("init")

    def begin_transaction(self) -> None:
        self._call("begin")

    def produce(self, *_args: Any, **_kwargs: Any) -> None:
        self._call("produce")

    def send_offsets_to_transaction(self, *_args: Any) -> None:
        self._call("send_offsets", self.commit_error)

    def commit_transaction(self, _timeout: float) -> None:
        self._call("commit")

    def abort_transaction(self, _timeout: float) -> None:
        self._call("abort", self.abort_error)

    def poll(self, _timeout: float) -> int:
        return 0


def stream_worker(bootstrap: str, worker_id: str, *, prefix: str) -> CommandProcessor:
    return CommandProcessor(bootstrap, worker_id, prefix=prefix)


@pytest.fixture(params=[stream_worker, DeliveryWorker, ReplayWorker], ids=["stream", "delivery", "replay"])
def worker(request: pytest.FixtureRequest) -> Iterator[Any]:
    # Nothing listens there: constructing the clients contacts no broker, and no call below does.
    made = request.param("127.0.0.1:1", "loop", prefix="tloop")
    yield made
    made._close()
    made.producer = None
    del made
    gc.collect()


def scripted(worker: Any, commit_error: KafkaError | None, abort_error: KafkaError | None = None) -> list[str]:
    calls: list[str] = []
    worker.txn._factory = lambda _config: ScriptedProducer(calls, commit_error, abort_error)
    worker.producer = worker.txn._factory({})
    return calls


def spy(worker: Any, name: str) -> list[bool]:
    seen: list[bool] = []
    real: Callable[[], None] = getattr(worker, name)

    def called() -> None:
        seen.append(True)
        real()

    setattr(worker, name, called)
    return seen


def write() -> list[TopicPartition]:
    return [TopicPartition("tloop.commands", 0, 1)]


def test_every_worker_is_a_processor_of_the_one_loop(worker: Any) -> None:
    assert isinstance(worker.host, TransactionalLoop)
    assert worker.host.processor is worker


def test_a_transaction_that_can_be_aborted_is_aborted_and_done_again(worker: Any) -> None:
    calls = scripted(worker, KafkaError(KafkaError._INCONSISTENT, "from the test"))
    undone = spy(worker, "aborted")
    assert not worker.host.transaction(write)
    assert calls == ["begin", "send_offsets", "abort"]
    assert undone == [True]
    assert worker.recoveries == 0


def test_a_producer_that_cannot_abort_is_replaced_and_the_worker_starts_over(worker: Any) -> None:
    calls = scripted(worker, KafkaError(KafkaError._TIMED_OUT, "from the test"),
                     KafkaError(KafkaError.INVALID_TXN_STATE, "from the test", fatal=True))
    undone, rebuilt = spy(worker, "aborted"), spy(worker, "rebuild")
    first = worker.producer
    assert not worker.host.transaction(write)
    # the new producer initialised (both of the stream worker's pair)
    assert calls == ["begin", "send_offsets", "abort"] + ["init"] * len(worker.txn.producers())
    assert worker.producer is not first
    assert (undone, rebuilt, worker.recoveries) == ([], [True], 1)
    assert not worker.host.recovering


def test_a_fatal_error_starts_over_without_an_abort(worker: Any) -> None:
    calls = scripted(worker, KafkaError(KafkaError._FATAL, "from the test", fatal=True))
    rebuilt = spy(worker, "rebuild")
    assert not worker.host.transaction(write)
    assert calls == ["begin", "send_offsets"] + ["init"] * len(worker.txn.producers())
    assert (rebuilt, worker.recoveries) == ([True], 1)


def test_a_committed_transaction_commits_its_offsets(worker: Any) -> None:
    calls = scripted(worker, None)
    assert worker.host.transaction(write)
    assert calls == ["begin", "send_offsets", "commit"]


def test_a_slow_transaction_is_logged_with_where_its_time_went(worker: Any, monkeypatch: pytest.MonkeyPatch,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    scripted(worker, None)
    monkeypatch.setattr(loop, "SLOW_TRANSACTION_S", 0.0)  # every transaction counts as slow
    with caplog.at_level(logging.WARNING, logger=worker.log.name):
        assert worker.host.transaction(write)
    [line] = [r.getMessage() for r in caplog.records if "a transaction took" in r.getMessage()]
    assert "deciding and producing" in line
    assert "offsets and commit" in line
    assert "transactional id" in line


def test_a_fast_transaction_is_not_logged(worker: Any, caplog: pytest.LogCaptureFixture) -> None:
    scripted(worker, None)
    with caplog.at_level(logging.WARNING, logger=worker.log.name):
        assert worker.host.transaction(write)
    assert not [r for r in caplog.records if "a transaction took" in r.getMessage()]
