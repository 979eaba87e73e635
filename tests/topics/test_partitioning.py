"""Watchtower's murmur2 is Kafka's, bit for bit, so forwards land where clients' records land."""

from __future__ import annotations

import ctypes
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from watchtower.topics.connection import kafka_config
from watchtower.topics.partitioning import murmur2, partition_for_key

# The vectors of Kafka's own UtilsTest.testMurmur2 (signed 32-bit results).
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("data", "expected"), KAFKA_VECTORS.items())
def test_murmur2_matches_kafka(data: bytes, expected: int) -> None:
    assert ctypes.c_int32(murmur2(data)).value == expected


@pytest.mark.integration
def test_partition_for_key_matches_librdkafka_murmur2_random(kafka_bootstrap: str) -> None:
    topic = f"partitioning-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(kafka_config(kafka_bootstrap))
    admin.create_topics([NewTopic(topic, 7, 1)])[topic].result()
    producer = Producer({**kafka_config(kafka_bootstrap), "partitioner": "murmur2_random"})
    landed: dict[str, int] = {}
    keys = [f"s-{i:04x}" for i in range(60)] + ["registry"]
    for key in keys:
        producer.produce(topic, key=key.encode(), value=b"x",
                         on_delivery=lambda _err, msg, k=key: landed.__setitem__(k, msg.partition()))
    producer.flush(30)
    assert landed == {k: partition_for_key(k.encode(), 7) for k in keys}


def test_remembered_partitions_agree_with_murmur2_and_long_keys_are_not_kept() -> None:
    """A key's partition is remembered only for short keys (stream ids): the same answer as murmur2
    either way, and a hostile writer's long keys take no room in the memo."""
    from watchtower.protocol import partitioning

    short, long = b"prices.btc-usd", b"k" * (partitioning.CACHED_KEY_BYTES + 1)
    for key in (short, long):
        expected = (partitioning.murmur2(key) & 0x7FFFFFFF) % 6
        assert partitioning.partition_for_key(key, 6) == expected
        assert partitioning.partition_for_key(bytearray(key), 6) == expected
    before = partitioning._partition.cache_info().currsize
    partitioning.partition_for_key(b"x" * 10_000, 6)
    assert partitioning._partition.cache_info().currsize == before
