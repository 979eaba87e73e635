"""A runner's task reader outlives a fatal consumer error (`ingest.task_reader`), on a real broker.

A static group member fenced under its instance id (what a broker outage longer than the session
does to librdkafka's static consumer: confluentinc/librdkafka#3437) gets a fatal error and never
delivers a record again. Here another consumer joins under the runner's instance id, which fences
the runner's member in the same way; the reader must join again and go on reading its tasks.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from watchtower.ingest.task_reader import INSTANCE_ID, TaskReader
from watchtower.topics.connection import GroupTimeouts, kafka_config

pytestmark = pytest.mark.integration


def reader_config(bootstrap: str, group: str) -> dict[str, Any]:
    timeouts = GroupTimeouts.from_env()
    return kafka_config(bootstrap, **{
        "group.id": group, "session.timeout.ms": timeouts.session_ms, "heartbeat.interval.ms": timeouts.heartbeat_ms,
        "auto.offset.reset": "earliest", "isolation.level": "read_committed", "enable.auto.commit": True,
        "log_level": 0})


def read_until(reader: TaskReader, value: bytes, timeout_s: float = 60.0) -> list[bytes]:
    seen: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while value not in seen and time.monotonic() < deadline:
        seen += [m.value() for m in reader.consume(100, 0.2)]
    return seen


def test_a_fenced_task_reader_joins_again_and_reads_the_tasks_after_it(kafka_bootstrap: str) -> None:
    topic, group = f"tr-{uuid.uuid4().hex[:8]}.ingest.tasks", f"wt-tr-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(kafka_config(kafka_bootstrap))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer(kafka_config(kafka_bootstrap))
    reader = TaskReader(reader_config(kafka_bootstrap, group), topic)
    intruder = None
    try:
        producer.produce(topic, b"before")
        producer.flush(10)
        assert b"before" in read_until(reader, b"before")

        # Another consumer under the runner's instance id: the coordinator fences the reader's member.
        intruder = Consumer({**reader_config(kafka_bootstrap, group), "group.instance.id": INSTANCE_ID})
        intruder.subscribe([topic])
        deadline = time.monotonic() + 60
        while reader.replaced == 0 and time.monotonic() < deadline:
            intruder.poll(0.1)
            reader.consume(100, 0.1)
        assert reader.replaced == 1, "the fenced reader was never replaced"

        producer.produce(topic, b"after")
        producer.flush(10)
        assert b"after" in read_until(reader, b"after")
    finally:
        reader.close()
        if intruder is not None:
            with contextlib.suppress(KafkaException):  # fenced in turn by the reader's new member
                intruder.close()
