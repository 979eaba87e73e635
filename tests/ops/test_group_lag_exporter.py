"""The consumer-group lag exporter (`metrics.group_lag`) on a real broker.

A group is made to lag by committing an offset behind the end of its topic: the exporter's page
(read back with prometheus_client's parser) shows exactly the records after the committed offset,
summed per topic role, and 0 once the group commits the end. On a transactionally written topic a
group that committed past its last record reads 0 although a commit marker follows it; a group that
never committed lags by the whole topic. A group whose reading Kafka cannot answer keeps no
invented value and is counted as a failure.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from watchtower.metrics.group_lag import GroupLagExporter, every_s
from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import TopicSpec
from watchtower.topics.connection import kafka_config

pytestmark = pytest.mark.integration


def _page(exporter: GroupLagExporter) -> dict[str, dict[tuple[str, ...], float]]:
    registry = CollectorRegistry()
    registry.register(exporter)
    out: dict[str, dict[tuple[str, ...], float]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(s.labels.values())] = s.value
    return out


def _topic(bootstrap: str, partitions: int) -> str:
    topic = f"lagx{uuid.uuid4().hex[:8]}.events"
    ensure_topics(bootstrap, [TopicSpec("events", topic, partitions=partitions, retention_ms=3_600_000)])
    return topic


def _commit(bootstrap: str, group: str, offsets: list[TopicPartition]) -> None:
    consumer = Consumer({**kafka_config(bootstrap), "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=offsets, asynchronous=False)
    finally:
        consumer.close()


def test_a_group_behind_its_topic_lags_by_the_records_after_its_commit_then_0(kafka_bootstrap: str) -> None:
    topic = _topic(kafka_bootstrap, 2)
    producer = Producer(kafka_config(kafka_bootstrap))
    for i in range(7):
        producer.produce(topic, value=b"r%d" % i, partition=i % 2)  # 4 on partition 0, 3 on 1
    assert producer.flush(30) == 0
    group = f"wt-lagx-{uuid.uuid4().hex[:8]}"
    _commit(kafka_bootstrap, group, [TopicPartition(topic, 0, 1), TopicPartition(topic, 1, 3)])
    exporter = GroupLagExporter(kafka_bootstrap, {group: [topic]}, timeout_s=20)

    exporter.read_once()
    page = _page(exporter)
    assert page["watchtower_consumer_group_lag_records"] == {(group, "events"): 3.0}
    assert page["watchtower_consumer_group_lag_read_failures_total"] == {(group,): 0.0}
    assert page["watchtower_consumer_group_lag_age_seconds"][(group,)] >= 0

    _commit(kafka_bootstrap, group, [TopicPartition(topic, 0, 4)])
    exporter.read_once()
    assert _page(exporter)["watchtower_consumer_group_lag_records"] == {(group, "events"): 0.0}


def test_a_commit_marker_is_no_lag_and_a_group_that_never_committed_lags_by_everything(
        kafka_bootstrap: str) -> None:
    topic = _topic(kafka_bootstrap, 1)
    producer = Producer({**kafka_config(kafka_bootstrap), "transactional.id": f"{topic}-tx"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=b"r%d" % i, partition=0)
    producer.commit_transaction(30)  # records at 0..2, the commit marker at 3
    caught_up, never = f"wt-lagx-{uuid.uuid4().hex[:8]}", f"wt-lagx-{uuid.uuid4().hex[:8]}"
    _commit(kafka_bootstrap, caught_up, [TopicPartition(topic, 0, 3)])
    exporter = GroupLagExporter(kafka_bootstrap, {caught_up: [topic], never: [topic]}, timeout_s=20)
    exporter.read_once()
    assert _page(exporter)["watchtower_consumer_group_lag_records"] == {(caught_up, "events"): 0.0,
                                                                        (never, "events"): 3.0}


def test_an_unanswered_reading_is_counted_and_invents_no_lag() -> None:
    exporter = GroupLagExporter("127.0.0.1:1", {"wt-nobody": ["x.events"]}, timeout_s=0.5)
    exporter.read_once()
    page = _page(exporter)
    assert page.get("watchtower_consumer_group_lag_records", {}) == {}
    assert page["watchtower_consumer_group_lag_read_failures_total"] == {("wt-nobody",): 1.0}


def test_the_interval_setting() -> None:
    assert every_s({}) == 5.0
    assert every_s({"WATCHTOWER_GROUP_LAG_EVERY_S": "off"}) is None
    assert every_s({"WATCHTOWER_GROUP_LAG_EVERY_S": "0.5"}) == 0.5
    for bad in ("0", "-1", "soon"):
        with pytest.raises(ValueError):
            every_s({"WATCHTOWER_GROUP_LAG_EVERY_S": bad})
