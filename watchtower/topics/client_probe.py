"""The confluent-kafka hops of the three-client round trip (`local.smoke`): one-partition topics made
for it, a record produced in a committed transaction and one in an aborted transaction, and a
``read_committed`` read from the start until the caller has seen what it waits for.

Each call opens and closes its own client: the probe checks that the client stack works end to
end, not how fast. A read that does not see what it waits for within its time raises `TimeoutError`
with what it saw.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from watchtower.topics.connection import kafka_config


def make_topics(bootstrap: str, names: Sequence[str]) -> None:
    """Create each of `names` with one partition and one replica (it must not exist yet)."""
    admin = AdminClient({**kafka_config(bootstrap), "log_level": 0})
    futures = admin.create_topics([NewTopic(n, 1, 1) for n in names], operation_timeout=30)
    for fut in futures.values():
        fut.result()


def _transactional(bootstrap: str) -> Producer:
    producer = Producer({**kafka_config(bootstrap), "transactional.id": f"wt-smoke-{uuid.uuid4()}",
                         "log_level": 0})
    producer.init_transactions(30)
    producer.begin_transaction()
    return producer


def produce_transactional(bootstrap: str, topic: str, key: bytes, value: bytes) -> None:
    """Produce one record inside a committed transaction."""
    producer = _transactional(bootstrap)
    producer.produce(topic, key=key, value=value)
    producer.commit_transaction(30)


def produce_aborted(bootstrap: str, topic: str, key: bytes, value: bytes) -> None:
    """Produce one record inside a transaction that is then aborted (it must stay invisible)."""
    producer = _transactional(bootstrap)
    producer.produce(topic, key=key, value=value)
    producer.flush(10)
    producer.abort_transaction(30)


def read_committed_until(bootstrap: str, topic: str, until: Callable[[list[bytes]], bool],
                         timeout: float = 60.0) -> list[bytes]:
    """The values of `topic`, read from the start ``read_committed``, once ``until(values)`` holds."""
    consumer = Consumer({
        **kafka_config(bootstrap), "group.id": f"wt-smoke-{uuid.uuid4()}",
        "auto.offset.reset": "earliest", "isolation.level": "read_committed",
        "enable.auto.commit": False, "log_level": 0,
    })
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while not until(values):
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out reading {topic}: saw {values!r}")
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            values.append(msg.value() or b"")
    finally:
        consumer.close()
    return values
