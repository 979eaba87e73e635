"""`PushConsumer` on a real broker: it reads exactly its subscriber's pushes of its stream.

Push records are written here the way the delivery worker writes them (docs/push.md: the
StreamMessage record value byte for byte on ``deliveries``, keyed by the subscriber, with the
``wt:push*`` headers, in Kafka transactions), surrounded by what a reader must ignore or survive:
a push from before the consumer started, a replay delivery (ICRC-77 headers, no ``wt:push``),
another stream's push to the same subscriber, another subscriber's push on the same partition, an
undecodable value, a value of another stream under this stream's header, and an aborted
transaction.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator

import nacl.signing
import pytest
from confluent_kafka import Producer
from kafka_fixture import grant
from waiting import wait_until

from watchtower.client.push import PushConsumer
from watchtower.protocol.replay.rules import replay_headers
from watchtower.protocol.signing import sign_message
from watchtower.protocol.stream.message import StreamMessage
from watchtower.schemas.records import encode_message
from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import catalogue, topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.partitioning import partition_for_key

pytestmark = pytest.mark.integration

PARTITIONS = 3
SUBSCRIBER = "0x" + "ab" * 32
STREAM = "s-" + secrets.token_hex(8)
KEY = nacl.signing.SigningKey.generate()


def message(sequence: int, stream_id: str = STREAM) -> StreamMessage:
    return sign_message(stream_id=stream_id, sequence=sequence, timestamp_unix_ms=1_700_000_000_000 + sequence,
                        kind="tick", payload=b'{"n": %d}' % sequence, signing_key=KEY, tags={"n": sequence})


def push_headers(msg: StreamMessage, stream_id: str | None = None) -> list[tuple[str, bytes]]:
    """The messages record's headers, then the push headers (docs/push.md)."""
    return [("sequence", str(msg.sequence).encode()), ("capacity", b"1000"), ("wt:push", b"1"),
            ("wt:push:stream", (stream_id or msg.stream_id).encode()), ("wt:push:sequence", str(msg.sequence).encode()),
            ("wt:push:block", b"1"), ("wt:push:cycles", b"1100")]


def neighbour_of(address: str) -> str:
    """Another subscriber address whose deliveries land on the same partition."""
    target = partition_for_key(address.encode(), PARTITIONS)
    while True:
        other = "0x" + secrets.token_hex(32)
        if partition_for_key(other.encode(), PARTITIONS) == target:
            return other


@pytest.fixture(scope="module")
def prefix(kafka_bootstrap: str) -> str:
    name = f"t{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_bootstrap, catalogue(name, partitions=PARTITIONS))
    grant(kafka_bootstrap, name)
    return name


class Deliveries:
    """A transactional producer of ``deliveries`` records, as the delivery worker is."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.topic = topic_name("deliveries", prefix)
        self.producer = Producer(kafka_config(bootstrap, **{
            "transactional.id": f"wt-test-push-{uuid.uuid4().hex}", "partitioner": "murmur2_random", "log_level": 3}))
        self.producer.init_transactions(30)

    def write(self, records: list[tuple[str, bytes, list[tuple[str, bytes]]]], *, commit: bool = True) -> None:
        self.producer.begin_transaction()
        for key, value, headers in records:
            self.producer.produce(self.topic, key=key.encode(), value=value, headers=headers)
        if commit:
            self.producer.commit_transaction(30)
        else:
            self.producer.abort_transaction(30)


@pytest.fixture
def deliveries(kafka_bootstrap: str, prefix: str) -> Iterator[Deliveries]:
    producer = Deliveries(kafka_bootstrap, prefix)
    yield producer
    assert producer.producer.flush(30) == 0


def read_until(consumer: PushConsumer, last: int, timeout_s: float = 60) -> list[int]:
    seen: list[int] = []

    def arrived() -> bool:
        seen.extend(m.sequence for m in consumer.poll(0.5))
        return last in seen

    wait_until(lambda: f"push {last} (read {seen})", arrived, timeout_s=timeout_s, every_s=0)
    seen += [m.sequence for m in consumer.poll(1.0)]  # nothing more may follow
    return seen


def test_push_consumer_yields_only_its_subscribers_committed_pushes_of_its_stream(
        kafka_bootstrap: str, prefix: str, deliveries: Deliveries) -> None:
    early = message(1)
    deliveries.write([(SUBSCRIBER, encode_message(early), push_headers(early))])
    with PushConsumer(kafka_bootstrap, SUBSCRIBER, STREAM, prefix=prefix) as consumer:
        assert consumer.partition == partition_for_key(SUBSCRIBER.encode(), PARTITIONS)
        m2, m3, m4, m5, m6 = (message(s) for s in (2, 3, 4, 5, 6))
        other_stream = message(2, "s-" + secrets.token_hex(8))
        deliveries.write([
            (SUBSCRIBER, encode_message(m2), push_headers(m2)),
            (SUBSCRIBER, encode_message(m3), [("sequence", b"3"), *replay_headers(7, None)]),  # a replay
            (SUBSCRIBER, encode_message(other_stream), push_headers(other_stream)),  # another stream's push
            (neighbour_of(SUBSCRIBER), encode_message(m3), push_headers(m3)),  # another subscriber's push
            (SUBSCRIBER, b"\x57not avro at all", push_headers(m3)),  # undecodable
            (SUBSCRIBER, encode_message(other_stream), push_headers(other_stream, STREAM)),  # header lies
        ])
        deliveries.write([(SUBSCRIBER, encode_message(m4), push_headers(m4))], commit=False)  # aborted
        deliveries.write([(SUBSCRIBER, encode_message(m5), push_headers(m5)),
                          (SUBSCRIBER, encode_message(m6), push_headers(m6))])
        got = read_until(consumer, 6)
        assert got == [2, 5, 6]
        assert consumer.stats.received == 3
        assert consumer.stats.undecodable == 2
        assert consumer.stats.ignored >= 2  # the replay and the other stream (the neighbour's key too)


def test_push_consumer_yields_the_record_value_byte_for_byte(kafka_bootstrap: str, prefix: str,
                                                             deliveries: Deliveries) -> None:
    subscriber = "0x" + secrets.token_hex(32)
    with PushConsumer(kafka_bootstrap, subscriber, STREAM, prefix=prefix) as consumer:
        sent = message(42)
        deliveries.write([(subscriber, encode_message(sent), push_headers(sent))])
        got = wait_until("the push", lambda: consumer.poll(0.5), timeout_s=60, every_s=0)
        assert got == [sent]
        assert encode_message(got[0]) == encode_message(sent)


def test_push_consumer_from_an_offset_reads_what_came_before(kafka_bootstrap: str, prefix: str,
                                                             deliveries: Deliveries) -> None:
    subscriber = "0x" + secrets.token_hex(32)
    m1 = message(1)
    deliveries.write([(subscriber, encode_message(m1), push_headers(m1))])
    with PushConsumer(kafka_bootstrap, subscriber, STREAM, prefix=prefix, start_offset=0) as consumer:
        assert 1 in read_until(consumer, 1)
