"""The ingestion lane: the stream worker serves clients' commands before the ingested publishes
fetched with them, each in a transaction of its own (`CommandProcessor.step`), without a broker.

A client's publish sent while a block's worth of ingested publishes waits at the worker must not
be decided and committed behind them. Each transaction commits the offsets of exactly the records
it decided, so an abort puts back both what it held and what was waiting after it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from counter_aggregate import CounterAggregate, TotalAggregate, counter_command

from watchtower.topics.records import Record
from watchtower.workers import snapshots
from watchtower.workers.command_processor import (
    END_READER_CONNECT_S,
    SNAPSHOT_END_TIMEOUT_MAX_S,
    SNAPSHOT_END_TIMEOUT_S,
    SNAPSHOT_RETRY_S,
    CommandProcessor,
)
from watchtower.workers.partitions import PartitionOwner
from watchtower.workers.snapshots import SnapshotPolicy

PREFIX = "tlane"


class RecordingProducer:
    """A transactional producer that records each transaction's records and offsets."""

    def __init__(self, fail_first_commit: bool = False) -> None:
        self.transactions: list[dict[str, Any]] = []
        self.fail_first_commit = fail_first_commit

    def init_transactions(self, _timeout: float) -> None:
        pass

    def begin_transaction(self) -> None:
        self.transactions.append({"produced": [], "offsets": None, "outcome": "open"})

    def produce(self, topic: str, _value: bytes | None = None, key: bytes | None = None, **_kwargs: Any) -> None:
        self.transactions[-1]["produced"].append((topic, key))

    def send_offsets_to_transaction(self, offsets: list[TopicPartition], *_args: Any) -> None:
        self.transactions[-1]["offsets"] = sorted((tp.topic, tp.partition, tp.offset) for tp in offsets)
        if self.fail_first_commit and len(self.transactions) == 1:
            raise KafkaException(KafkaError(KafkaError._INCONSISTENT, "from the test"))

    def commit_transaction(self, _timeout: float) -> None:
        self.transactions[-1]["outcome"] = "committed"

    def abort_transaction(self, _timeout: float) -> None:
        self.transactions[-1]["outcome"] = "aborted"

    def poll(self, _timeout: float) -> int:
        return 0


class RecordingConsumer:
    """The group consumer as far as a step uses it: seeks are recorded; `commands` partition 0 is
    consumed up to `position`, and the last fetch response said its end is `high`."""

    def __init__(self, position: int = 8, high: int = 8) -> None:
        self.seeks: list[tuple[str, int, int]] = []
        self.position_, self.high = position, high
        self.looks = 0

    def seek(self, tp: TopicPartition) -> None:
        self.seeks.append((tp.topic, tp.partition, tp.offset))

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        self.looks += 1
        return [TopicPartition(tp.topic, tp.partition, self.position_) for tp in tps]

    def get_watermark_offsets(self, tp: TopicPartition, cached: bool = False) -> tuple[int, int]:
        assert cached, "a look at the watermarks must not ask the broker"
        assert (tp.topic, tp.partition) == (f"{PREFIX}.commands", 0)  # only the clients' topic is looked at
        return 0, self.high

    def consumer_group_metadata(self) -> None:
        return None


@pytest.fixture
def worker() -> Iterator[CommandProcessor]:
    # Nothing listens there: constructing the clients contacts no broker, and no call below does.
    made = CommandProcessor("127.0.0.1:1", "lane", prefix=PREFIX, aggregates=[CounterAggregate(), TotalAggregate()])
    made._command_partitions = made._reply_partitions = 1
    made._states[0] = {"counter": {}, "total": {}}  # partition 0 rebuilt
    made._owned = [0]
    real_consumer = made.consumer
    yield made
    made.host.consumer = real_consumer
    made._close()
    made.producer = None
    del made
    gc.collect()


def serve(worker: CommandProcessor, batch: list[Record], producer: RecordingProducer,
          consumer: RecordingConsumer | None = None, *, then: list[list[Record]] | None = None) -> RecordingConsumer:
    """One step of `worker` over `batch` (as fetched), with the recording clients; a fetch inside
    the step (`_join_clients`) takes the next of `then` (nothing once they are used up)."""
    consumer = consumer or RecordingConsumer()
    worker.host.consumer = consumer  # type: ignore[assignment]
    worker.txn._factory = lambda _config: producer
    worker.producer = producer  # type: ignore[assignment]
    answers = [list(batch), *(then or [])]
    worker.host.fetch = lambda *_args: answers.pop(0) if answers else []  # type: ignore[method-assign]
    worker.step()
    return consumer


def record(topic: str, offset: int, counter: str) -> Record:
    return Record(f"{PREFIX}.{topic}", 0, offset, counter.encode(), counter_command(counter, 1), (), 0)


def ingested(count: int, first_offset: int = 40) -> list[Record]:
    return [record("ingest.commands", first_offset + i, f"feed-{i}") for i in range(count)]


def test_a_client_command_fetched_behind_ingested_ones_is_committed_first_in_its_own_transaction(
        worker: CommandProcessor) -> None:
    producer = RecordingProducer()
    serve(worker, [*ingested(30), record("commands", 7, "plain")], producer)
    first, second = producer.transactions
    assert first == {"produced": [(f"{PREFIX}.events", b"plain")], "outcome": "committed",
                     "offsets": [(f"{PREFIX}.commands", 0, 8)]}
    assert second["outcome"] == "committed"
    assert second["produced"] == [(f"{PREFIX}.events", f"feed-{i}".encode()) for i in range(30)]
    assert second["offsets"] == [(f"{PREFIX}.ingest.commands", 0, 70)]
    assert worker._states[0]["counter"]["plain"] == 1
    assert worker._states[0]["counter"]["feed-29"] == 1


def test_a_batch_of_one_kind_is_one_transaction(worker: CommandProcessor) -> None:
    producer = RecordingProducer()
    serve(worker, ingested(5), producer)
    assert [t["offsets"] for t in producer.transactions] == [[(f"{PREFIX}.ingest.commands", 0, 45)]]
    producer = RecordingProducer()
    serve(worker, [record("commands", 3, "a"), record("internal", 9, "b")], producer)
    assert len(producer.transactions) == 1
    assert producer.transactions[0]["offsets"] == [(f"{PREFIX}.commands", 0, 4), (f"{PREFIX}.internal", 0, 10)]


def test_an_aborted_first_transaction_puts_back_the_ingested_records_waiting_behind_it(
        worker: CommandProcessor) -> None:
    producer = RecordingProducer(fail_first_commit=True)
    consumer = serve(worker, [*ingested(3), record("commands", 7, "plain")], producer)
    assert [t["outcome"] for t in producer.transactions] == ["aborted"]  # nothing decided after it
    assert sorted(consumer.seeks) == [(f"{PREFIX}.commands", 0, 7), (f"{PREFIX}.ingest.commands", 0, 40)]
    assert worker._states[0]["counter"] == {}  # undone in memory: decided again from there
    # The next step decides them again, the client's command first.
    producer = RecordingProducer()
    serve(worker, [*ingested(3), record("commands", 7, "plain")], producer)
    assert [t["offsets"] for t in producer.transactions] == [[(f"{PREFIX}.commands", 0, 8)],
                                                             [(f"{PREFIX}.ingest.commands", 0, 43)]]
    assert worker._states[0]["counter"] == {"plain": 1, "feed-0": 1, "feed-1": 1, "feed-2": 1}


def test_the_worker_consumes_the_lane_with_its_command_topics(worker: CommandProcessor) -> None:
    assert worker.subscriptions() == [f"{PREFIX}.commands", f"{PREFIX}.internal", f"{PREFIX}.ingest.commands"]


def test_a_client_command_arriving_while_the_lane_is_decided_joins_its_transaction_which_then_ends(
        worker: CommandProcessor) -> None:
    producer = RecordingProducer()
    # A client's command landed on commands[0] (offset 8) after the fetch: the watermark says so, and
    # the consumer has fetched it, behind more of the lane.
    consumer = serve(worker, ingested(30), producer, RecordingConsumer(position=8, high=9),
                     then=[[*ingested(4, first_offset=70), record("commands", 8, "plain")]])
    (only,) = producer.transactions
    assert only["outcome"] == "committed"
    # The first LANE_LOOK_EVERY = 8 ingested ones, then the client's: one commit for both.
    assert only["produced"] == [*[(f"{PREFIX}.events", f"feed-{i}".encode()) for i in range(8)],
                                (f"{PREFIX}.events", b"plain")]
    assert only["offsets"] == [(f"{PREFIX}.commands", 0, 9), (f"{PREFIX}.ingest.commands", 0, 48)]
    assert consumer.seeks == [(f"{PREFIX}.ingest.commands", 0, 48)]  # the other 26 are decided again later
    assert sorted(worker._states[0]["counter"]) == sorted(["plain", *(f"feed-{i}" for i in range(8))])
    assert (worker.stats.lane_yields, worker.stats.lane_joined) == (1, 1)
    # The same watermark, still not consumed (a transaction marker, say) gives way once, not again.
    producer = RecordingProducer()
    serve(worker, ingested(22, first_offset=48), producer, consumer, then=[[record("commands", 9, "late")]])
    assert [t["offsets"] for t in producer.transactions] == [[(f"{PREFIX}.ingest.commands", 0, 70)]]
    assert worker.stats.lane_yields == 1


def test_a_watermark_ahead_with_no_client_command_fetched_leaves_the_lane_transaction_whole(
        worker: CommandProcessor) -> None:
    producer = RecordingProducer()
    # The watermark moved (a transaction marker, say), but what was fetched is more of the lane only.
    consumer = serve(worker, ingested(30), producer, RecordingConsumer(position=8, high=9),
                     then=[ingested(5, first_offset=70)])
    assert [t["offsets"] for t in producer.transactions] == [[(f"{PREFIX}.ingest.commands", 0, 70)]]
    assert consumer.seeks == [(f"{PREFIX}.ingest.commands", 0, 70)], "what the look took is put back"
    assert worker.stats.lane_yields == 0


def test_an_aborted_transaction_with_a_client_joined_puts_back_everything_it_took(worker: CommandProcessor) -> None:
    producer = RecordingProducer(fail_first_commit=True)
    consumer = serve(worker, ingested(30), producer, RecordingConsumer(position=8, high=9),
                     then=[[*ingested(2, first_offset=70), record("commands", 8, "plain")]])
    assert [t["outcome"] for t in producer.transactions] == ["aborted"]
    assert sorted(set(consumer.seeks)) == [(f"{PREFIX}.commands", 0, 8), (f"{PREFIX}.ingest.commands", 0, 40)]
    assert worker._states[0]["counter"] == {}, "undone in memory, the client's decision with the rest"


def test_a_rebalance_while_a_client_joins_the_lane_starts_the_worker_over(
        worker: CommandProcessor, monkeypatch: pytest.MonkeyPatch) -> None:
    recovered: list[Exception] = []
    monkeypatch.setattr(worker.host, "recover", recovered.append)
    producer = RecordingProducer()
    consumer = RecordingConsumer(position=8, high=9)
    worker.host.consumer = consumer  # type: ignore[assignment]
    worker.txn._factory = lambda _config: producer
    worker.producer = producer  # type: ignore[assignment]
    answers = [ingested(30)]

    def fetch(*_args: Any) -> list[Record]:
        if answers:
            return answers.pop(0)
        # The poll inside the transaction serves a revocation: partition 0 goes elsewhere.
        worker.revoke(consumer, [TopicPartition(f"{PREFIX}.commands", 0)])  # type: ignore[arg-type]
        return [record("commands", 8, "plain")]

    worker.host.fetch = fetch  # type: ignore[method-assign]
    worker.step()
    assert [t["outcome"] for t in producer.transactions] == ["open"], "never committed"
    (why,) = recovered
    assert "assignment changed" in str(why)
    assert 0 not in worker._states, "its decisions are never kept: rebuilt from the log"
    assert 0 not in worker._kept


def test_with_no_client_waiting_the_lane_is_one_transaction_and_looks_cost_no_request(
        worker: CommandProcessor) -> None:
    producer = RecordingProducer()
    consumer = serve(worker, ingested(30), producer, RecordingConsumer(position=8, high=8))
    assert [t["offsets"] for t in producer.transactions] == [[(f"{PREFIX}.ingest.commands", 0, 70)]]
    assert consumer.looks == 3  # after 8, 16 and 24 records; the watermark is the cached one
    assert consumer.seeks == []


class Clock:
    """`time.monotonic` for the snapshot policy, moved by hand."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class EndOffsets:
    """The worker's end-offset reader: each call pops the next answer (an exception is raised)."""

    def __init__(self, *answers: int | Exception) -> None:
        self.answers = list(answers)
        self.asked: list[float] = []

    def __call__(self, _topic: str, partitions: list[int], timeout_s: float) -> dict[int, int]:
        self.asked.append(timeout_s)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return dict.fromkeys(partitions, answer)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    made = Clock()
    monkeypatch.setattr(snapshots.time, "monotonic", made)
    return made


def snapshot_due_after(worker: CommandProcessor, ends: EndOffsets, every_events: int = 2) -> None:
    worker._high_watermarks = ends  # type: ignore[assignment]
    worker.snapshots = SnapshotPolicy(every_events=every_events, every_s=3_600)
    worker.snapshots.written(0, every_events)


def snapshot_records(producer: RecordingProducer) -> list[tuple[str, bytes]]:
    return [r for t in producer.transactions for r in t["produced"] if r[0] == f"{PREFIX}.snapshots"]


def test_a_snapshot_whose_end_offset_is_slow_is_put_off_never_holding_the_batch_and_taken_later(
        worker: CommandProcessor, clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    ends = EndOffsets(TimeoutError(), KafkaException(KafkaError(KafkaError._TIMED_OUT, "no answer")), 17)
    snapshot_due_after(worker, ends)
    producer = RecordingProducer()
    with caplog.at_level("WARNING", logger="watchtower.worker"):
        serve(worker, [record("commands", 3, "a")], producer)
    assert ends.asked == [SNAPSHOT_END_TIMEOUT_S]
    assert "no snapshot of partition 0 now (no end offset within 250 ms: TimeoutError); tried again in 1 s" \
        in caplog.text
    [txn] = producer.transactions
    assert txn["outcome"] == "committed", "the batch is decided and committed without its snapshot"
    assert txn["produced"] == [(f"{PREFIX}.events", b"a")]
    assert worker.stats.snapshots_taken == 0
    # Not asked again at every batch ...
    serve(worker, [record("commands", 4, "b")], producer)
    assert ends.asked == [SNAPSHOT_END_TIMEOUT_S]
    # ... but soon, each time waiting longer: the broker is slow, not gone (librdkafka's own timeout too).
    clock.now += SNAPSHOT_RETRY_S
    serve(worker, [record("commands", 5, "c")], producer)
    clock.now += SNAPSHOT_RETRY_S
    serve(worker, [record("commands", 6, "d")], producer)
    assert ends.asked == [SNAPSHOT_END_TIMEOUT_S, 2 * SNAPSHOT_END_TIMEOUT_S, 4 * SNAPSHOT_END_TIMEOUT_S]
    assert snapshot_records(producer) == [(f"{PREFIX}.snapshots", b"p0")]
    assert producer.transactions[-1]["produced"][0] == (f"{PREFIX}.snapshots", b"p0"), "before the batch"
    assert worker.stats.snapshots_taken == 1
    # A snapshot taken starts the next one from the short wait again.
    ends.answers = [TimeoutError()]
    worker.snapshots.written(0, 2)
    serve(worker, [record("commands", 7, "e")], producer)
    assert ends.asked[-1] == SNAPSHOT_END_TIMEOUT_S


def test_the_wait_for_a_slow_end_offset_is_bounded(worker: CommandProcessor, clock: Clock) -> None:
    ends = EndOffsets(*[TimeoutError()] * 6)
    snapshot_due_after(worker, ends)
    for offset in range(6):
        serve(worker, [record("commands", offset, "a")], RecordingProducer())
        clock.now += SNAPSHOT_RETRY_S
    assert max(ends.asked) == SNAPSHOT_END_TIMEOUT_MAX_S
    assert worker.stats.snapshots_taken == 0


def test_a_snapshot_that_fails_otherwise_is_given_up_until_another_period_of_events(
        worker: CommandProcessor, clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    ends = EndOffsets(KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, "no such partition")), 9)
    snapshot_due_after(worker, ends, every_events=3)
    producer = RecordingProducer()
    with caplog.at_level("WARNING", logger="watchtower.worker"):
        serve(worker, [record("commands", 3, "a")], producer)
    assert "no snapshot of partition 0 now (KafkaError" in caplog.text
    assert "the next one is tried after another 3 events" in caplog.text
    clock.now += 10 * SNAPSHOT_RETRY_S
    serve(worker, [record("commands", 4, "b")], producer)
    assert len(ends.asked) == 1, "not retried before another period of events"
    serve(worker, [record("commands", 5, "c")], producer)  # the third event since the failure
    serve(worker, [record("commands", 6, "d")], producer)
    assert len(ends.asked) == 2
    assert snapshot_records(producer) == [(f"{PREFIX}.snapshots", b"p0")]
    assert worker.stats.snapshots_taken == 1


def test_a_rebuild_connects_the_end_offset_reader_before_any_snapshot_waits_for_it(
        worker: CommandProcessor, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(PartitionOwner, "_load_pending", lambda _self: True)
    ends = EndOffsets(40, TimeoutError())
    worker._high_watermarks = ends  # type: ignore[assignment]
    assert worker._load_pending()
    assert ends.asked == [END_READER_CONNECT_S], "asked once, outside any batch, with a generous wait"
    assert worker._load_pending(), "a reader that cannot connect yet never fails the rebuild"
    monkeypatch.setattr(PartitionOwner, "_load_pending", lambda _self: False)
    assert not worker._load_pending()
    assert len(ends.asked) == 2, "nothing is asked while partitions are still to be rebuilt"
