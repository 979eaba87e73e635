"""A runner's task reader outlives a fatal consumer error (`ingest.task_reader`), on a real broker.

A static group member fenced under its instance id (what a broker outage longer than the session
does to librdkafka's static consumer: confluentinc/librdkafka#3437) gets a fatal error and never
delivers a record again. Here another consumer joins under the runner's instance id, which fences
the runner's member in the same way; the reader must join again and go on reading its tasks.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from waiting import wait_until

from watchtower.ingest.task_reader import INSTANCE_ID, task_reader
from watchtower.topics.connection import GroupTimeouts, kafka_config
from watchtower.topics.group_reader import GroupReader
from watchtower.topics.records import Record

pytestmark = pytest.mark.integration


def intruder_config(bootstrap: str, group: str) -> dict[str, Any]:
    timeouts = GroupTimeouts.from_env()
    return kafka_config(bootstrap, **{
        "group.id": group, "session.timeout.ms": timeouts.session_ms, "heartbeat.interval.ms": timeouts.heartbeat_ms,
        "auto.offset.reset": "earliest", "isolation.level": "read_committed", "enable.auto.commit": True,
        "log_level": 0})


def read_until(reader: GroupReader, value: bytes, timeout_s: float = 60.0) -> list[bytes | None]:
    seen: list[bytes | None] = []

    def arrived() -> bool:
        seen.extend(r.value for r in reader.poll(100, 0.2) if isinstance(r, Record))
        return value in seen

    wait_until(lambda: f"{value!r} (read {seen})", arrived, timeout_s=timeout_s, every_s=0)
    return seen


def test_a_fenced_task_reader_joins_again_and_reads_the_tasks_after_it(kafka_bootstrap: str) -> None:
    topic, group = f"tr-{uuid.uuid4().hex[:8]}.ingest.tasks", f"wt-tr-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(kafka_config(kafka_bootstrap))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer(kafka_config(kafka_bootstrap))
    reader = task_reader(kafka_bootstrap, topic, group)
    intruder = None
    try:
        producer.produce(topic, b"before")
        producer.flush(10)
        assert b"before" in read_until(reader, b"before")

        # Another consumer under the runner's instance id: the coordinator fences the reader's member.
        intruder = Consumer({**intruder_config(kafka_bootstrap, group), "group.instance.id": INSTANCE_ID})
        intruder.subscribe([topic])

        def replaced() -> bool:
            intruder.poll(0.1)
            reader.poll(100, 0.1)
            return reader.replaced > 0

        wait_until("the fenced reader to be replaced", replaced, timeout_s=60, every_s=0)
        assert reader.replaced == 1, "the fenced reader was replaced more than once"

        producer.produce(topic, b"after")
        producer.flush(10)
        assert b"after" in read_until(reader, b"after")
    finally:
        reader.close()
        if intruder is not None:
            with contextlib.suppress(KafkaException):  # fenced in turn by the reader's new member
                intruder.close()


class _FencedConsumer:
    """A consumer whose every consume returns one fatal error (what a fenced static member gets)."""

    def subscribe(self, _topics: list[str]) -> None:
        pass

    def consume(self, _n: int, _timeout: float) -> list[Any]:
        error = KafkaError(KafkaError._FATAL, "fenced by the test", fatal=True)
        return [type("Msg", (), {"error": staticmethod(lambda: error)})()]

    def close(self) -> None:
        pass


def test_a_reader_fenced_again_soon_after_rejoining_waits_longer_each_time(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    monkeypatch.setattr("watchtower.topics.group_reader.time.sleep", waits.append)
    reader = GroupReader("unused:9092", ["t.ingest.tasks"], group="wt-test", auto_commit=True, instance_id=INSTANCE_ID,
                         factory=lambda _config: _FencedConsumer())  # type: ignore[arg-type,return-value]
    for _ in range(7):
        reader.poll(10, 0)
    assert reader.replaced == 7
    # The first rejoin is at once (a broker outage); fenced again within a minute, another process
    # likely holds the same key: 2, 4, 8, 16 s, then at most 30 s.
    assert waits == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
