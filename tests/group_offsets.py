"""Wait until a consumer group has committed everything it read: no record lies past its offsets."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient
from waiting import wait_until

from watchtower.topics.connection import kafka_config


def records_past_commit(bootstrap: str, group: str) -> list[TopicPartition] | None:
    """The partitions where `group` has committed an offset with a committed record at or after it
    (None: the group has committed nothing yet).

    Transactional topics end in commit markers, so "committed == end offset" never holds there; a
    read_committed consumer placed at the committed offset either reaches the end (only markers
    follow: the group is caught up) or returns a record (it is not).
    """
    admin = AdminClient(kafka_config(bootstrap))
    found = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
    committed = [tp for tp in found.topic_partitions if tp.offset >= 0]
    if not committed:
        return None
    behind: list[TopicPartition] = []
    consumer = Consumer(kafka_config(bootstrap, **{
        "group.id": f"wt-offsets-probe-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
        "isolation.level": "read_committed", "enable.partition.eof": True, "log_level": 3}))
    try:
        for tp in committed:
            consumer.assign([TopicPartition(tp.topic, tp.partition, tp.offset)])
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                if msg.error() is not None and msg.error().code() == KafkaError._PARTITION_EOF:
                    break
                if msg.error() is None:
                    behind.append(tp)
                    break
            else:
                behind.append(tp)
    finally:
        consumer.close()
    return behind


def wait_group_committed(bootstrap: str, group: str, timeout_s: float = 120.0) -> None:
    """Until `group` has committed offsets and no committed record lies past them."""
    behind: list[TopicPartition] | None = None

    def covered() -> bool:
        nonlocal behind
        behind = records_past_commit(bootstrap, group)
        return behind == []

    wait_until(lambda: f"group {group}'s committed offsets to pass every record (records past them on {behind})",
               covered, timeout_s=timeout_s, every_s=0.2)
