"""A writer's transaction that failed never wedges it (`workers.tx_writer`), and the ingestion
scheduler that uses it writes every tick once after such a failure.

The defect this pins: a commit that timed out while a broker was away left librdkafka's producer
refusing every later ``begin_transaction`` ("Conflicting commit_transaction API call is already in
progress"), so the scheduler wrote no task again and every ingested feed stopped.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import nacl.signing
import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from watchtower.ingest.scheduler import TaskWriter
from watchtower.protocol.ingestion.records import new_task
from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.reader import read_committed
from watchtower.workers.host import FencedError
from watchtower.workers.tx_writer import TransactionalWriter, WriteFailedError

# ---------------------------------------------------------------------------------- without a broker


class FakeProducer:
    """Records the calls; `fail` maps a call name to the exception its next call raises."""

    def __init__(self, log: list[str], fail: dict[str, list[BaseException]]) -> None:
        self.id = len([e for e in log if e == "new"])
        self.log, self.fail = log, fail
        log.append("new")

    def _call(self, name: str) -> None:
        self.log.append(f"{name}#{self.id}")
        queue = self.fail.get(name)
        if queue:
            raise queue.pop(0)

    def init_transactions(self, _timeout: float) -> None:
        self._call("init")

    def begin_transaction(self) -> None:
        self._call("begin")

    def produce(self, *_: Any, **__: Any) -> None:
        self._call("produce")

    def commit_transaction(self, _timeout: float) -> None:
        self._call("commit")

    def abort_transaction(self, _timeout: float) -> None:
        self._call("abort")

    def poll(self, _timeout: float) -> int:
        return 0


def kafka_exc(code: int, **flags: bool) -> KafkaException:
    return KafkaException(KafkaError(code, "test", **flags))


def fake_writer(fail: dict[str, list[BaseException]]) -> tuple[TransactionalWriter, list[str], list[int]]:
    log: list[str] = []
    restarts: list[int] = []
    writer = TransactionalWriter({}, name="w-test", stop=threading.Event(), on_restart=lambda: restarts.append(1),
                                 call_timeout_s=1.0, factory=lambda _cfg: FakeProducer(log, fail))  # type: ignore[arg-type,return-value]
    writer.tx.init_backoff_s = writer.tx.init_backoff_max_s = 0.0
    assert writer.open()
    return writer, log, restarts


def produce_one(producer: Any) -> None:
    producer.produce("t", b"v")


def test_a_commit_with_an_unknown_outcome_restarts_the_producer_and_rereads_the_log() -> None:
    writer, log, restarts = fake_writer({"commit": [kafka_exc(KafkaError._TIMED_OUT, retriable=True)]})
    with pytest.raises(WriteFailedError) as failed:
        writer.write(produce_one)
    assert failed.value.restarted
    # A second producer settles the first's transaction (its init_transactions) before the log is read.
    assert log[-2:] == ["new", "init#1"]
    assert restarts == [1]
    writer.write(produce_one)  # the next write goes through the new producer
    assert log[-3:] == ["begin#1", "produce#1", "commit#1"]


def test_an_abortable_failure_aborts_and_keeps_the_producer() -> None:
    writer, log, restarts = fake_writer({"produce": [kafka_exc(KafkaError._MSG_TIMED_OUT, txn_requires_abort=True)]})
    with pytest.raises(WriteFailedError) as failed:
        writer.write(produce_one)
    assert not failed.value.restarted
    assert log[-1] == "abort#0"
    assert restarts == []
    assert log.count("new") == 1
    writer.write(produce_one)
    assert log[-1] == "commit#0"


def test_an_abort_that_fails_restarts_instead() -> None:
    writer, log, restarts = fake_writer({"commit": [kafka_exc(KafkaError._STATE, txn_requires_abort=True)],
                                         "abort": [kafka_exc(KafkaError._TIMED_OUT, retriable=True)]})
    with pytest.raises(WriteFailedError) as failed:
        writer.write(produce_one)
    assert failed.value.restarted
    assert restarts == [1]
    assert log.count("new") == 2


def test_a_full_queue_aborts_the_transaction() -> None:
    writer, log, restarts = fake_writer({"produce": [BufferError("queue full")]})
    with pytest.raises(WriteFailedError):
        writer.write(produce_one)
    assert log[-1] == "abort#0"
    assert restarts == []


def test_repeated_fences_stop_the_writer() -> None:
    fenced = [kafka_exc(KafkaError._FENCED, fatal=True) for _ in range(3)]
    writer, _log, restarts = fake_writer({"commit": list(fenced)})
    for _ in range(2):  # a fence alone may be a transaction the coordinator aborted: start over
        with pytest.raises(WriteFailedError):
            writer.write(produce_one)
    with pytest.raises(FencedError):  # the third within a minute: another instance holds the id
        writer.write(produce_one)
    assert restarts == [1, 1]


# ---------------------------------------------------------------------------------- on a real broker

CONFIG = {"enabled": True, "interval_blocks": 1, "num_runners": 1, "proof_type": "NONE", "transform_method": None,
          "result_schema": {"type": "object"},
          "task_definition": {"kind": "http_json", "url": "http://127.0.0.1:1/p", "timeout_blocks": 2}}


class FirstCommitTimesOut(Producer):
    """A real producer whose first commit is given 1 ms: it times out with the commit still under
    way, which leaves librdkafka in the state a broker outage mid-commit leaves it in."""

    commits = 0

    def commit_transaction(self, *args: Any) -> None:
        type(self).commits += 1
        if type(self).commits == 1:
            super().commit_transaction(0.001)
            raise AssertionError("a 1 ms commit did not time out; this test cannot pin the wedge")
        super().commit_transaction(*args)


@pytest.mark.integration
def test_the_scheduler_writes_again_after_a_commit_that_timed_out(kafka_bootstrap: str) -> None:
    prefix = f"txw{uuid.uuid4().hex[:8]}"
    topic = topic_name("ingest-tasks", prefix)
    admin = AdminClient(kafka_config(kafka_bootstrap))
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    key = nacl.signing.SigningKey.generate()
    made: list[Producer] = []

    def factory(cfg: dict[str, Any]) -> Producer:
        made.append(FirstCommitTimesOut(cfg))
        return made[-1]

    writer = TaskWriter(kafka_bootstrap, prefix, key, factory=factory)

    def tasks(stream: str, tick: int) -> list[Any]:
        return [new_task(stream_id=stream, tick=tick, tick_height=tick, timeout_blocks=5, config=CONFIG,
                         runner_keys=(), scheduler=key, scheduler_address=writer.address, for_batch=True)]

    with pytest.raises(WriteFailedError) as failed:
        writer.write(tasks("s1", 1))
    assert failed.value.restarted
    assert len(made) == 2
    # Whatever became of the timed-out commit, `last` is what the log holds now.
    in_log = {t.stream_id: t.tick for m in read_committed(kafka_bootstrap, [topic]) for t in writer._tasks(m.value())}
    assert writer.last == in_log
    # The scheduler is not wedged: its next round commits (before the fix: _CONFLICT for good).
    writer.write(tasks("s2", 7))
    assert writer.last["s2"] == 7
    writer.close()
    ticks = [(t.stream_id, t.tick) for m in read_committed(kafka_bootstrap, [topic]) for t in writer._tasks(m.value())]
    assert ticks.count(("s2", 7)) == 1
    assert ticks.count(("s1", 1)) <= 1
