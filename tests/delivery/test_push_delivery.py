"""The push delivery worker against a real broker and the real stack: per-block bounds, round-robin,
nothing lost across a kill -9, hostile records quarantined."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from push_helpers import (
    PushFeed,
    PushReader,
    create_push_feed,
    health,
    per_block_counts,
    publish,
    served_everything,
)
from stack_fixture import start_stack
from waiting import wait_until

from watchtower.gateway.transport import CommandClient
from watchtower.local.stack import ServiceSet
from watchtower.protocol.push.checkpoint import PushCheckpoint
from watchtower.schemas.delivery_records import encode_checkpoint
from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.partitioning import partition_for_key

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceSet]:
    with start_stack(kafka_bootstrap, tmp_path_factory.mktemp("push-logs"), replay=False,
                     delivery=True) as services:
        yield services


@pytest.fixture(scope="module")
def client(stack: ServiceSet) -> Iterator[CommandClient]:
    c = CommandClient(stack.bootstrap, prefix=stack.prefix)
    yield c
    c.close()


@pytest.fixture
def reader(stack: ServiceSet) -> Iterator[PushReader]:
    r = PushReader(stack.bootstrap, stack.prefix)
    yield r
    r.close()


def assert_every_subscriber_got_every_message(reader: PushReader, feed: PushFeed) -> None:
    got = {(p.subscriber, p.sequence) for p in reader.of(feed)}
    assert got == {(s, seq) for s in feed.subscribers for seq in range(1, feed.head + 1)}
    assert all(p.sequence == p.value_sequence for p in reader.of(feed)), "the value is the message pushed"


def test_1000_push_subscribers_bound_100_never_exceeded_nothing_lost_each_served_within_10_blocks(
        stack: ServiceSet, client: CommandClient, reader: PushReader) -> None:
    feed = create_push_feed(client, 1000, per_block=100)
    publish(client, feed, 3)
    reader.until(served_everything(reader, feed), timeout_s=300, what="3,000 pushes")
    reader.poll(1.0)
    pushes = reader.of(feed)
    counts = per_block_counts(pushes)
    assert max(counts.values()) <= 100, f"a block carried {max(counts.values())} pushes"
    assert_every_subscriber_got_every_message(reader, feed)
    # Round-robin: once a message is first pushed, every subscriber has it within ceil(1000/100) of
    # the scheduler's blocks (the blocks in which it pushed; a block in which a busy machine gave
    # the worker no time at all is not one of them).
    working = sorted(counts)
    bound = math.ceil(1000 / 100)
    spans = []
    for seq in range(1, feed.head + 1):
        blocks = sorted({p.block for p in pushes if p.sequence == seq})
        first, last = working.index((feed.stream_id, blocks[0])), working.index((feed.stream_id, blocks[-1]))
        assert last - first + 1 <= bound, f"sequence {seq} took {last - first + 1} blocks: {blocks}"
        spans.append((last - first + 1, blocks[-1] - blocks[0] + 1))
    print(f"pushes {len(pushes)}, blocks with pushes {len(working)}, max per block {max(counts.values())}, "
          f"(scheduler blocks, clock blocks) per message {spans}")
    # Deterministic round-robin in address order: the first message's fan-out, block by block,
    # is the sorted subscriber list; and each push is charged the documented cost (no filter).
    fanout: dict[int, list[str]] = defaultdict(list)
    for p in pushes:
        if p.sequence == 1:
            fanout[p.block].append(p.subscriber)
    assert [s for block in sorted(fanout) for s in sorted(fanout[block])] == feed.subscribers
    assert all(p.cycles == 1_000 + p.value_len for p in pushes)
    # The health file counts what was committed.
    path = stack.health_file("delivery-d1")
    wait_until("the health file to count 3000 deliveries", lambda: health(path).get("delivered", 0) >= 3000,
               timeout_s=30, every_s=0.3)
    counters = health(path)
    assert counters["delivered"] >= 3000, counters
    assert counters["blocks"] >= 30, counters
    assert counters["state"] == "serving", counters
    assert {"pending", "dropped", "quarantined"} <= set(counters)


def test_kill_9_mid_fan_out_loses_nothing_and_never_exceeds_the_bound(
        stack: ServiceSet, client: CommandClient, reader: PushReader) -> None:
    feed = create_push_feed(client, 200, per_block=20)
    publish(client, feed, 3)
    reader.until(lambda: len(reader.of(feed)) >= 60, timeout_s=180, what="the fan-out to start")
    stack.kill9("delivery-d1")
    before = len(reader.of(feed))
    stack.start_delivery("d1")
    reader.until(served_everything(reader, feed), timeout_s=300, what="600 pushes after the restart")
    reader.poll(1.0)
    assert before < 600, "the kill landed mid-fan-out"
    counts = per_block_counts(reader.of(feed))
    assert max(counts.values()) <= 20, f"a block carried {max(counts.values())} pushes"
    assert_every_subscriber_got_every_message(reader, feed)


def test_hostile_records_on_events_messages_and_delivery_state_are_quarantined(
        stack: ServiceSet, client: CommandClient, reader: PushReader) -> None:
    feed = create_push_feed(client, 3, per_block=100)
    partitions = 3
    p = partition_for_key(feed.stream_id.encode(), partitions)
    producer = Producer(kafka_config(stack.bootstrap, **{"enable.idempotence": True, "log_level": 3}))
    key = feed.stream_id.encode()
    for role, value in (("events", b"\x57garbage"), ("messages", b"not avro"), ("messages", None),
                        ("delivery-state", b'{"v":1,"stream_id":"x"}'), ("delivery-state", b"\xff\xfe"),
                        ("events", None)):
        producer.produce(topic_name(role, stack.prefix), key=key, value=value, partition=p)
    assert producer.flush(30) == 0
    publish(client, feed, 1)
    reader.until(served_everything(reader, feed), timeout_s=120, what="the push after hostile records")
    path = stack.health_file("delivery-d1")
    wait_until("the health file to count 4 quarantined records", lambda: health(path).get("quarantined", 0) >= 4,
               timeout_s=60, every_s=0.3)
    live = health(path)
    assert live["quarantined"] >= 4, live
    assert {q["topic"] for q in live["last_quarantined"]} >= {topic_name("events", stack.prefix),
                                                               topic_name("messages", stack.prefix)}
    # The hostile checkpoints are read when a worker restores the partition: restart it. Meanwhile
    # the stream's latest checkpoint becomes a well-formed one whose block is far beyond the block
    # clock, with that block's budget spent: honoured, it would stall the stream's pushes forever.
    stack.kill9("delivery-d1")
    future = PushCheckpoint(feed.stream_id, low_watermark=1, ahead={}, pointer=None, block=2**62,
                            used_deliveries=100, used_cycles=0, resume_offset=None, dropped=0)
    producer.produce(topic_name("delivery-state", stack.prefix), key=key, value=encode_checkpoint(future), partition=p)
    assert producer.flush(30) == 0
    stack.start_delivery("d1")
    publish(client, feed, 1)
    reader.until(served_everything(reader, feed), timeout_s=180, what="the push after the restart")
    state_topic = topic_name("delivery-state", stack.prefix)
    wait_until("a quarantined delivery-state record in the health file",
               lambda: any(q["topic"] == state_topic for q in health(path).get("last_quarantined", [])),
               timeout_s=60, every_s=0.3)
    restored = health(path)
    assert any(q["topic"] == state_topic for q in restored["last_quarantined"]), restored
    assert any(q["topic"] == state_topic and "beyond the current block" in q["reason"]
               for q in restored["last_quarantined"]), restored
    assert restored["state"] == "serving"
    assert_every_subscriber_got_every_message(reader, feed)
