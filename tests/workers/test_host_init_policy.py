"""The one init_transactions policy of every transactional host (`workers.host`), without a broker.

A broker that restarts answers nothing for a while, then NOT_COORDINATOR or
COORDINATOR_LOAD_IN_PROGRESS: a worker that gave up there would never serve again. So every host
(the stream worker, push delivery, replay) retries with backoff for as long as it should run, each
attempt bounded by the watchdog, replacing a producer whose attempt overran or failed for good, and
logs every retry. It stops only when asked to, or when the process may not use its id at all.
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from watchtower.delivery.worker import DeliveryWorker
from watchtower.replay.worker import ReplayWorker
from watchtower.workers.command_processor import ENV_PRODUCER_PAIR, CommandProcessor, producer_pair_from_env
from watchtower.workers.fences import MAX_FENCES
from watchtower.workers.host import FencedError, TransactionalProducer

HANG = "hang"
OK = "ok"


def error(code: int, *, retriable: bool = False, fatal: bool = False) -> KafkaError:
    return KafkaError(code, "from the test", retriable=retriable, fatal=fatal)


class Script:
    """What each init_transactions attempt does, in order, whichever producer makes it."""

    def __init__(self, outcomes: list[Any]) -> None:
        self.outcomes = list(outcomes)
        self.calls: list[int] = []  # the producer (by creation number) of each attempt
        self.made = 0
        self.release = threading.Event()  # ends a hanging attempt

    def factory(self, _config: dict[str, Any]) -> FakeProducer:
        self.made += 1
        return FakeProducer(self, self.made)


class FakeProducer:
    def __init__(self, script: Script, number: int) -> None:
        self.script, self.number = script, number

    def init_transactions(self, _timeout: float) -> None:
        self.script.calls.append(self.number)
        outcome = self.script.outcomes.pop(0)
        if isinstance(outcome, KafkaError):
            raise KafkaException(outcome)
        if outcome is HANG:
            self.script.release.wait(30)

    def poll(self, _timeout: float) -> int:
        return 0


def fast(txn: TransactionalProducer) -> TransactionalProducer:
    txn.init_backoff_s, txn.init_backoff_max_s = 0.01, 0.02
    return txn


@pytest.fixture
def script() -> Iterator[Script]:
    made = Script([])
    yield made
    made.release.set()


def producer(script: Script, *, call_timeout_s: float = 5.0) -> TransactionalProducer:
    return fast(TransactionalProducer({}, worker_id="w1", service="test", call_timeout_s=call_timeout_s,
                                      thread_name="wt-test", factory=script.factory))  # type: ignore[arg-type]


RESTART = [error(KafkaError._TRANSPORT, retriable=True), error(KafkaError._ALL_BROKERS_DOWN, retriable=True),
           error(KafkaError.NOT_COORDINATOR, retriable=True), error(KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                                                      retriable=True)]


def test_a_broker_restart_is_outlasted_and_every_retry_is_logged(script: Script,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    script.outcomes = RESTART * 10 + [OK]  # far more attempts than a timeout of old would have allowed
    txn = producer(script)
    txn.outage = True
    with caplog.at_level(logging.WARNING, logger="watchtower.workers.host"):
        assert txn.init_transactions(threading.Event())
    retries = [r for r in caplog.records if "initialising transactions failed" in r.getMessage()]
    assert len(retries) == len(RESTART) * 10
    assert script.calls == [1] * (len(RESTART) * 10 + 1), "a retriable error keeps the producer"
    assert not txn.outage


@pytest.mark.parametrize("failure", [error(KafkaError._FATAL, fatal=True), error(KafkaError._STATE)],
                         ids=["fatal", "not-retriable"])
def test_a_producer_that_failed_for_good_is_replaced_and_tried_again(script: Script, failure: KafkaError) -> None:
    script.outcomes = [failure, failure, OK]
    assert producer(script).init_transactions(threading.Event())
    assert script.calls == [1, 2, 3]


def test_an_attempt_that_overruns_is_abandoned_and_a_new_producer_tries_again(script: Script) -> None:
    script.outcomes = [HANG, OK]
    assert producer(script, call_timeout_s=0.1).init_transactions(threading.Event())
    assert script.calls == [1, 2]


def test_it_stops_only_when_asked(script: Script) -> None:
    script.outcomes = RESTART * 5
    stop = threading.Event()
    seen: list[BaseException] = []

    def on_retry(exc: BaseException) -> None:
        seen.append(exc)
        if len(seen) == 3:
            stop.set()

    assert not producer(script).init_transactions(stop, on_retry)
    assert len(seen) == 3


def test_an_id_the_principal_may_not_use_and_a_rival_end_the_process(script: Script) -> None:
    script.outcomes = [error(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)]
    with pytest.raises(FencedError, match="may not use its transactional id"):
        producer(script).init_transactions(threading.Event())
    script.outcomes = [error(KafkaError.PRODUCER_FENCED, fatal=True)] * MAX_FENCES
    with pytest.raises(FencedError, match="another process runs with the same worker id"):
        producer(script).init_transactions(threading.Event())


def stream_worker(bootstrap: str, worker_id: str, *, prefix: str) -> CommandProcessor:
    return CommandProcessor(bootstrap, worker_id, prefix=prefix)


@pytest.mark.parametrize("make", [stream_worker, DeliveryWorker, ReplayWorker], ids=["stream", "delivery", "replay"])
def test_every_host_initialises_through_the_one_policy(script: Script, make: Callable[..., Any]) -> None:
    # Nothing listens there: constructing the clients contacts no broker, and no call below does.
    worker = make("127.0.0.1:1", "policy", prefix="tpolicy")
    try:
        assert isinstance(worker.txn, TransactionalProducer)
        fast(worker.txn)
        worker.txn._factory = script.factory
        worker.txn.producer = script.factory({})  # one producer, until the first replace
        pair = 2 if worker.txn.pair_config is not None else 1  # the stream worker's: a pair
        script.outcomes = [*RESTART, error(KafkaError._FATAL, fatal=True)] + [OK] * pair
        assert worker._init_transactions()
        assert script.calls == [1] * len(RESTART) + [1] + list(range(2, 2 + pair))
    finally:
        worker._close()
        worker.producer = None
        del worker
        gc.collect()


class PairProducer:
    """Records what a pair's producers are asked, by creation number and transactional id."""

    def __init__(self, log: list[tuple[int, str]], number: int, config: dict[str, Any]) -> None:
        self.log, self.number, self.config = log, number, config

    def init_transactions(self, _timeout: float) -> None:
        self.log.append((self.number, "init"))

    def begin_transaction(self) -> None:
        self.log.append((self.number, "begin"))

    def poll(self, _timeout: float) -> int:
        self.log.append((self.number, "poll"))
        return 0

    def flush(self, _timeout: float) -> int:
        return 0


def pair_of(log: list[tuple[int, str]]) -> TransactionalProducer:
    made: list[PairProducer] = []

    def factory(config: dict[str, Any]) -> PairProducer:
        made.append(PairProducer(log, len(made) + 1, config))
        return made[-1]

    return fast(TransactionalProducer({"transactional.id": "wt-stream-actor-w1", "client.id": "wt-worker-w1"},
                                      worker_id="w1", service="test", call_timeout_s=5.0, thread_name="wt-test",
                                      factory=factory, pair=True))  # type: ignore[arg-type]


def test_a_pair_alternates_its_two_transactional_ids_one_transaction_each() -> None:
    log: list[tuple[int, str]] = []
    txn = pair_of(log)
    ids = [p.config["transactional.id"] for p in txn.producers()]
    assert ids == ["wt-stream-actor-w1", "wt-stream-actor-w1#2"]
    assert txn.producers()[1].config["client.id"] == "wt-worker-w1#2"
    assert txn.init_transactions(threading.Event())
    assert log == [(1, "init"), (2, "init")], "both ids initialised: a restarted worker fences both zombies"
    log.clear()
    used = []
    for _ in range(4):
        txn.begin()
        used.append(txn.producer.config["transactional.id"])
    assert used == ["wt-stream-actor-w1#2", "wt-stream-actor-w1"] * 2
    assert log == [(2, "begin"), (1, "begin"), (2, "begin"), (1, "begin")]
    log.clear()
    txn.poll()
    assert sorted(log) == [(1, "poll"), (2, "poll")], "both producers' callbacks are served"


def test_a_pair_is_replaced_whole_and_a_failed_second_init_retries_only_the_second() -> None:
    log: list[tuple[int, str]] = []
    txn = pair_of(log)
    second = txn.producers()[1]
    failures = [error(KafkaError.NOT_COORDINATOR, retriable=True)]

    def flaky_init(_timeout: float) -> None:
        log.append((2, "init"))
        if failures:
            raise KafkaException(failures.pop())

    second.init_transactions = flaky_init  # type: ignore[method-assign]
    assert txn.init_transactions(threading.Event())
    assert [e for e in log if e[1] == "init"] == [(1, "init"), (2, "init"), (2, "init")]
    before = txn.producers()
    txn.replace()
    assert [p.number for p in txn.producers()] == [3, 4]
    assert not set(map(id, before)) & set(map(id, txn.producers()))


def test_setting_a_producer_uses_exactly_that_one_until_the_next_replace() -> None:
    log: list[tuple[int, str]] = []
    txn = pair_of(log)
    only = PairProducer(log, 9, {})
    txn.producer = only  # type: ignore[assignment]
    txn.begin()
    txn.begin()
    assert txn.producers() == [only]
    assert log == [(9, "begin"), (9, "begin")]
    txn.replace()
    assert len(txn.producers()) == 2


@pytest.mark.parametrize(("raw", "pair"), [("", True), ("1", True), ("0", False)])
def test_the_stream_worker_pairs_its_producers_unless_told_not_to(monkeypatch, raw: str, pair: bool) -> None:
    monkeypatch.setenv(ENV_PRODUCER_PAIR, raw)
    assert producer_pair_from_env() is pair
    worker = CommandProcessor("127.0.0.1:1", "pairing", prefix="tpair")
    try:
        assert len(worker.txn.producers()) == (2 if pair else 1)
    finally:
        worker._close()
        worker.producer = None
        del worker
        gc.collect()


def test_a_bad_pair_setting_is_refused_with_the_setting_named(monkeypatch) -> None:
    monkeypatch.setenv(ENV_PRODUCER_PAIR, "yes")
    with pytest.raises(ValueError, match=ENV_PRODUCER_PAIR):
        producer_pair_from_env()
