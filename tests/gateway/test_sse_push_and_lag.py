"""The SSE route's ``subscriber=`` mode and its bounds, on a real stack.

Push records are written here exactly as the delivery worker writes them (docs/push.md: the
``messages`` record value byte for byte on ``deliveries``, keyed by the subscriber, the original
headers then the ``wt:push*`` headers, in Kafka transactions), with what a reader must ignore
around them: another subscriber's pushes, pushes of another stream, a replay record, an aborted
transaction, a record that does not decode and a repeated delivery.
"""

from __future__ import annotations

import json
import urllib.request
import uuid
from pathlib import Path

import nacl.signing
import pytest
from confluent_kafka import Producer
from sse_reader import SseClient
from sse_stack import Feed
from waiting import wait_until

from watchtower.client.account import Account
from watchtower.local.stack import ServiceSet
from watchtower.protocol.replay.rules import replay_headers
from watchtower.schemas.records import decode_message
from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.reader import read_committed

pytestmark = pytest.mark.integration

Record = tuple[bytes, list[tuple[str, bytes]]]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sse-push-home")


def gateway(services: ServiceSet) -> str:
    return services.urls["gateway-g1"]


def records_of(services: ServiceSet, stream_id: str) -> dict[int, Record]:
    """The stream's committed ``messages`` records by sequence: (value, headers)."""
    out: dict[int, Record] = {}
    for m in read_committed(services.bootstrap, [topic_name("messages", services.prefix)]):
        if m.key() == stream_id.encode():
            headers = [(str(k), bytes(v or b"")) for k, v in (m.headers() or [])]
            out[decode_message(m.value() or b"").sequence] = (bytes(m.value() or b""), headers)
    return out


def push_headers(stream_id: str, sequence: int) -> list[tuple[str, bytes]]:
    return [("wt:push", b"1"), ("wt:push:stream", stream_id.encode()), ("wt:push:sequence", str(sequence).encode()),
            ("wt:push:block", b"1000"), ("wt:push:cycles", b"1100")]


class Pushes:
    """A transactional writer of ``deliveries`` records."""

    def __init__(self, services: ServiceSet) -> None:
        self.topic = topic_name("deliveries", services.prefix)
        self.producer = Producer(kafka_config(services.bootstrap, **{
            "transactional.id": f"wt-test-push-{uuid.uuid4().hex}", "log_level": 3}))
        self.producer.init_transactions(30)

    def write(self, records: list[tuple[str, Record, list[tuple[str, bytes]]]], *, commit: bool = True) -> None:
        """(subscriber, messages record, extra headers) each, in one transaction."""
        self.producer.begin_transaction()
        for subscriber, (value, headers), extra in records:
            self.producer.produce(self.topic, key=subscriber.encode(), value=value, headers=[*headers, *extra])
        if commit:
            self.producer.commit_transaction(30)
        else:
            self.producer.abort_transaction(30)


def subscriber_path(feed: Feed, subscriber: str) -> str:
    return f"/v1/feeds/{feed.feed_id}/events?subscriber={subscriber}"


@pytest.mark.secure
def test_subscriber_mode_streams_only_that_subscribers_pushes_of_that_stream(sse_stack: ServiceSet,
                                                                            home: Path) -> None:
    feed, other = Feed(sse_stack, home), Feed(sse_stack, home, name="other")
    feed.publish(5)
    other.publish(1)
    mine, theirs = records_of(sse_stack, feed.stream_id), records_of(sse_stack, other.stream_id)
    alice, bob = "0x" + "a1" * 32, "0x" + "b2" * 32
    pushes = Pushes(sse_stack)
    with SseClient(gateway(sse_stack), subscriber_path(feed, alice)) as a, \
            SseClient(gateway(sse_stack), subscriber_path(feed, bob)) as b:
        assert (a.status, b.status) == (200, 200)
        pushes.write([
            (alice, mine[1], push_headers(feed.stream_id, 1)),
            (bob, mine[1], push_headers(feed.stream_id, 1)),
            (alice, theirs[1], push_headers(other.stream_id, 1)),  # another stream's push
            (alice, mine[2], replay_headers(7)),  # a replay fulfilment: not a push
            (alice, (b"\x00not a framed record", []), push_headers(feed.stream_id, 9)),  # skipped, not fatal
            (alice, mine[2], push_headers(feed.stream_id, 2)),
        ])
        pushes.write([(alice, mine[3], push_headers(feed.stream_id, 3))], commit=False)  # aborted
        pushes.write([(alice, mine[2], push_headers(feed.stream_id, 2)),  # delivered again (at-least-once)
                      (alice, mine[4], push_headers(feed.stream_id, 4)),
                      (alice, mine[5], [])])  # no wt:push header at all
        got_a = a.messages(3)
        got_b = b.messages(1)
    assert [int(e.id) for e in got_a] == [1, 2, 4]
    assert [int(e.id) for e in got_b] == [1]
    assert {e.json()["stream_id"] for e in got_a + got_b} == {feed.stream_id}
    assert all(e.json()["message"]["publisher_sig_hex"] for e in got_a)


def test_subscriber_mode_resumes_from_last_event_id_with_the_subscriptions_own_range_and_filter(
        sse_stack: ServiceSet, home: Path) -> None:
    feed = Feed(sse_stack, home)
    feed.publish(1, symbol="BTC")
    feed.publish(1, symbol="ETH")  # both before the subscription: never pushable to it
    reader = Account(nacl.signing.SigningKey.generate(), home=home)
    btc = {"field": "tags.symbol", "op": "eq", "value": "BTC"}
    feed.api.command(reader.sign("subscribe", feed.stream_id, {"mode": "PUSH", "filter": btc}))
    wait_until("the subscription to become visible",
               lambda: any(s["subscriber"] == reader.address for s in feed.api.subscribers(feed.stream_id)),
               timeout_s=60, every_s=0.2)
    for symbol in ("BTC", "ETH", "BTC", "ETH"):  # sequences 3..6
        feed.publish(1, symbol=symbol)
    records = records_of(sse_stack, feed.stream_id)
    with SseClient(gateway(sse_stack), subscriber_path(feed, reader.address), headers={"Last-Event-ID": "0"}) as c:
        assert c.status == 200
        caught_up = c.messages(2)
        Pushes(sse_stack).write([(reader.address, records[3], push_headers(feed.stream_id, 3)),  # sent already
                                 (reader.address, records[6], push_headers(feed.stream_id, 6))])
        feed.publish(1, symbol="BTC")
        records = records_of(sse_stack, feed.stream_id)
        Pushes(sse_stack).write([(reader.address, records[7], push_headers(feed.stream_id, 7))])
        live = c.messages(2)
    assert [int(e.id) for e in caught_up] == [3, 5]
    assert [int(e.id) for e in live] == [6, 7]  # the push of 3 is not sent twice; live pushes go on


def sse_stats(services: ServiceSet) -> dict[str, int]:
    with urllib.request.urlopen(gateway(services) + "/v1/health", timeout=30) as resp:  # noqa: S310
        return dict(json.loads(resp.read())["sse"])


def test_a_slow_reader_is_closed_with_lagged_and_its_buffer_stays_bounded(sse_stack: ServiceSet, home: Path) -> None:
    feed = Feed(sse_stack, home)
    feed.publish(1)
    queue = sse_stats(sse_stack)["queue_size"]
    before = sse_stats(sse_stack)["lagged"]
    pad = "x" * 15_000
    with SseClient(gateway(sse_stack), f"/v1/feeds/{feed.feed_id}/events", rcvbuf=4096) as slow:
        assert slow.status == 200
        published = 0
        # The reader reads nothing: its socket fills, then its buffer on the server; publish until the
        # server says a connection lagged (bounded, so a broken bound fails instead of hanging).
        while sse_stats(sse_stack)["lagged"] == before:
            assert published < 400, "the slow reader was never closed"
            for _ in range(5):
                seq = (feed.publisher.head or 0) + 1
                feed.publisher.publish("big", json.dumps({"i": seq, "pad": pad}).encode())
                published += 1
        stats = sse_stats(sse_stack)
        assert stats["max_queued"] <= queue
        received, lagged = [], None
        for ev in slow.events():
            if ev.comment is not None:
                continue
            if ev.event == "lagged":
                lagged = ev.json()
                continue
            assert lagged is None, "an event after lagged"
            received.append(int(ev.id or 0))
    head = feed.publisher.head or 0
    assert lagged is not None, "the stream closed without a lagged event"
    assert received == list(range(2, 2 + len(received)))
    # Under load the server may fill and drop the buffer before the first event reaches the socket:
    # then nothing was received, and lagged names where the connection started (the head it saw).
    resume = received[-1] if received else 1
    assert resume < head
    assert lagged["code"] == "LIMIT_EXCEEDED"
    assert lagged["message"].endswith(f"reconnect with Last-Event-ID: {resume}")
    with SseClient(gateway(sse_stack), f"/v1/feeds/{feed.feed_id}/events",
                   headers={"Last-Event-ID": str(resume)}) as resumed:
        rest = resumed.messages(head - resume)
    assert [int(e.id) for e in rest] == list(range(resume + 1, head + 1))
