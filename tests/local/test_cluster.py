"""The 3-node KRaft cluster mode: replication factor 3, min ISR 2, survives losing a node."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from kafka_fixture import embedded_spec

from watchtower.local.broker import LocalKafka
from watchtower.topics.admin import describe_topics, ensure_topics
from watchtower.topics.catalogue import catalogue
from watchtower.topics.connection import kafka_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_three_node_cluster_keeps_acked_writes_when_a_node_dies(tmp_path: Path) -> None:
    lk = LocalKafka(embedded_spec(tmp_path / "cluster", nodes=3))
    try:
        lk.up()
        bs = lk.spec.bootstrap
        specs = catalogue(prefix="c3", partitions=3)
        ensure_topics(bs, specs)
        info = describe_topics(bs, specs)
        assert {v["replication_factor"] for v in info.values()} == {3}
        assert {v["min.insync.replicas"] for v in info.values()} == {"2"}

        producer = Producer({**kafka_config(bs), "acks": "all", "enable.idempotence": True,
                             "log_level": 0})
        acked: list[bytes] = []

        def on_delivery(err: object, msg: object) -> None:
            if err is None:
                acked.append(msg.value())  # type: ignore[attr-defined]

        for i in range(100):
            producer.produce("c3.messages", key=f"s{i % 7}".encode(), value=f"m{i}".encode(),
                             on_delivery=on_delivery)
        producer.flush(30)
        lk.kill_node(2, signal.SIGKILL)
        for i in range(100, 200):
            producer.produce("c3.messages", key=f"s{i % 7}".encode(), value=f"m{i}".encode(),
                             on_delivery=on_delivery)
        assert producer.flush(60) == 0
        assert len(acked) == 200, "with 2 of 3 replicas in sync every acks=all write is acknowledged"

        consumer = Consumer({**kafka_config(bs), "group.id": uuid.uuid4().hex,
                             "auto.offset.reset": "earliest", "log_level": 0})
        consumer.subscribe(["c3.messages"])
        seen: set[bytes] = set()
        for _ in range(240):
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                seen.add(m.value())
            if len(seen) >= 200:
                break
        consumer.close()
        assert seen == set(acked)
        assert lk.status()["state"] == "degraded"
        lk.up()
        assert lk.status()["state"] == "running"
    finally:
        lk.down()
