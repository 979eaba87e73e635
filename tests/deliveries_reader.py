"""A test reader of every committed record of ``deliveries`` from the beginning (a fresh group, all
partitions assigned); the push and replay helpers keep the records they care about."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition
from waiting import wait_until

from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config


class CommittedDeliveries:
    """`records` yields the next fetched records (read_committed); `until` polls until a
    condition on what a subclass's `poll` kept holds; `close` when done."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.topic = topic_name("deliveries", prefix)
        self.consumer = Consumer(kafka_config(bootstrap, **{
            "group.id": f"wt-test-{uuid.uuid4().hex}", "enable.auto.commit": False,
            "isolation.level": "read_committed", "log_level": 3}))
        parts = self.consumer.list_topics(self.topic, timeout=30).topics[self.topic].partitions
        self.consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in parts])

    def records(self, timeout: float) -> Iterator[Message]:
        """The records fetched within `timeout` (an end-of-partition event is skipped, any other error fails)."""
        for m in self.consumer.consume(5000, timeout):
            err = m.error()
            if err is not None:
                assert err.code() == KafkaError._PARTITION_EOF, err
                continue
            yield m

    def poll(self, timeout: float = 0.5) -> object:
        """Read the records fetched within `timeout`, keeping those the reader is for."""
        raise NotImplementedError

    def until(self, cond: Callable[[], bool], timeout_s: float = 600, what: str = "deliveries") -> None:
        """`poll` until `cond()` holds; AssertionError naming `what` after `timeout_s`."""
        def polled() -> bool:
            if cond():
                return True
            self.poll()
            return False

        wait_until(what, polled, timeout_s=timeout_s, every_s=0)

    def close(self) -> None:
        self.consumer.close()
