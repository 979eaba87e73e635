"""`workers.state_loader.scan_partition` (the restore scan of push delivery and replay) with
``catch_up`` ends once the reader's position reaches the end offset the partition had when the scan
began, also when the records before that end are transaction markers and aborted records (never
delivered to a read_committed reader), and while a later transaction is still open (so no
end-of-partition event comes)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from watchtower.topics.connection import kafka_config
from watchtower.topics.records import Record
from watchtower.workers.state_loader import scan_partition

pytestmark = pytest.mark.integration


def test_a_catch_up_scan_ends_at_the_end_offset_when_the_tail_is_markers_and_aborted_records(
        kafka_bootstrap: str) -> None:
    topic = f"scan-{uuid.uuid4().hex[:10]}"
    admin = AdminClient(kafka_config(kafka_bootstrap))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer(kafka_config(kafka_bootstrap, **{"transactional.id": f"wt-test-{topic}"}))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, key=b"k", value=b"committed", partition=0)  # offset 0 (its marker: 1)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for _ in range(3):  # offsets 2..4, then the abort marker at 5
        producer.produce(topic, key=b"k", value=b"aborted", partition=0)
    producer.flush(30)
    producer.abort_transaction(30)
    # A transaction left open after the end: a read_committed reader never gets an end-of-partition event.
    other = Producer(kafka_config(kafka_bootstrap, **{"transactional.id": f"wt-test-{topic}-open"}))
    other.init_transactions(30)
    other.begin_transaction()
    other.produce(topic, key=b"k", value=b"open", partition=0)  # offset 6
    other.flush(30)
    try:
        seen: list[bytes | None] = []

        def record(got: Record) -> None:
            seen.append(got.value)

        try:
            reached = scan_partition(kafka_bootstrap, topic, 0, record, group=f"wt-test-scan-{topic}", catch_up=True,
                                     timeout_s=10)
        except TimeoutError as exc:
            pytest.fail(f"the catch-up scan did not end: {exc}")
        assert seen == [b"committed"]
        assert reached == 6  # the open transaction's first offset: the live consumer goes on from there
    finally:
        other.abort_transaction(30)
