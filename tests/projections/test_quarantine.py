"""Forged and rule-breaking records on the log: the projection quarantines them and serves the truth.

Each reproduction writes straight to a service topic, as an adversary with Kafka access can (the
local broker has no authentication yet), against a real broker and a real projection worker. The
projection must keep serving the genuine stream, count the refused records in /v1/health and the
digest, and make exactly the decisions the offline rebuild makes.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from typing import Any

import nacl.signing
import pytest
from api_calls import Caller, http, wait_for
from confluent_kafka import Producer

from watchtower.local.stack import ServiceSet
from watchtower.projections.rebuild import rebuild_digest
from watchtower.protocol.signing import sign_message, verify_message
from watchtower.protocol.stream.message import StreamMessage
from watchtower.protocol.stream.state import STREAM_MESSAGE_PUBLISHED, Event
from watchtower.schemas.records import encode_message
from watchtower.schemas.wire import decode_event, encode_event
from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.partitioning import partition_for_key
from watchtower.topics.reader import read_committed

pytestmark = pytest.mark.integration


class Feed:
    """A stream with its owner, publisher key and the messages published so far."""

    def __init__(self, stack: ServiceSet, *, listed: bool = False) -> None:
        self.api = stack.api_url
        self.owner = Caller(self.api)
        self.publisher = nacl.signing.SigningKey.generate()
        self.sid = f"q-{uuid.uuid4().hex[:10]}"
        body: dict[str, Any] = {"publisher_key_hex": bytes(self.publisher.verify_key).hex()}
        if listed:
            body["feed"] = {"name": self.sid, "description": "quarantine test"}
        self.created = self.owner.ok("create_stream", self.sid, body)
        self.head = 0

    def publish(self, n: int = 1) -> None:
        for _ in range(n):
            seq = self.head + 1
            msg = sign_message(stream_id=self.sid, sequence=seq, timestamp_unix_ms=1_700_000_000_000 + seq,
                               kind="tick", payload=json.dumps({"n": seq}).encode(), signing_key=self.publisher)
            assert self.owner.ok("publish", self.sid, msg.to_json_dict())["sequence"] == seq
            self.head = seq

    def page(self, cursor: int = 0) -> dict[str, Any]:
        status, body = http("GET", f"{self.api}/v1/streams/{self.sid}/messages?cursor={cursor}&limit=500")
        assert status == 200, body
        return body

    def wait_head(self, head: int) -> None:
        # An acknowledged write is visible once the projection has folded it: until its creation is
        # folded the stream answers STREAM_NOT_FOUND ("or is not projected yet"), so keep waiting.
        def reached() -> bool:
            status, body = http("GET", f"{self.api}/v1/streams/{self.sid}/head")
            if status == 404 and body["error"]["code"] == "STREAM_NOT_FOUND":
                return False
            assert status == 200, body
            return bool(body["head_sequence"] == head)
        wait_for(reached, what=f"{self.sid} to reach head {head}")

    def verified_sequences(self) -> list[int]:
        """The sequences get_since serves, each checked to carry the sequence asked for and to verify."""
        messages = [StreamMessage.from_json_dict(m) for m in self.page(0)["messages"]]
        assert all(verify_message(m, bytes(self.publisher.verify_key)) for m in messages)
        return [m.sequence for m in messages]


def _records(stack: ServiceSet, topic: str, key: str) -> list[Any]:
    return [m for m in read_committed(stack.bootstrap, [topic_name(topic, stack.prefix)]) if m.key() == key.encode()]


def _produce(stack: ServiceSet, topic: str, key: str, value: bytes, headers: dict[str, str] | None = None) -> None:
    """What an adversary with write access to the broker can do: any bytes, any headers, the key's partition."""
    name = topic_name(topic, stack.prefix)
    producer = Producer(kafka_config(stack.bootstrap))
    partitions = len(producer.list_topics(name, timeout=30).topics[name].partitions)
    producer.produce(name, key=key.encode(), value=value, headers=headers or {},
                     partition=partition_for_key(key.encode(), partitions))
    assert producer.flush(30) == 0


def _quarantined(stack: ServiceSet) -> dict[str, Any]:
    status, health = http("GET", f"{stack.api_url}/v1/health")
    assert status == 200
    return health["quarantined"]


def _reasons(stack: ServiceSet) -> list[str]:
    return [r["reason"] for r in _quarantined(stack)["recent"]]


def test_an_old_record_with_the_next_sequence_header_is_quarantined_and_the_genuine_message_served(
        stack: ServiceSet) -> None:
    feed = Feed(stack)
    feed.publish(3)
    feed.wait_head(3)
    first = _records(stack, "messages", feed.sid)[0]
    before = _quarantined(stack)["count"]
    # A valid older record, produced with the header of the next sequence.
    _produce(stack, "messages", feed.sid, first.value(), {"sequence": "4", "wt-capacity": "10000"})
    feed.publish()  # the genuine sequence 4
    feed.wait_head(4)
    assert feed.verified_sequences() == [1, 2, 3, 4]
    wait_for(lambda: _quarantined(stack)["count"] > before, what="the replayed record to be quarantined")
    assert any("already indexed" in reason for reason in _reasons(stack))


def test_a_huge_or_garbage_sequence_header_leaves_the_stream_readable(stack: ServiceSet) -> None:
    feed = Feed(stack)
    feed.publish(2)
    feed.wait_head(2)
    second = _records(stack, "messages", feed.sid)[1]
    before = _quarantined(stack)["count"]
    _produce(stack, "messages", feed.sid, second.value(), {"sequence": "1000000"})
    _produce(stack, "messages", feed.sid, b"\x00garbage", {"sequence": "not-a-number"})
    feed.publish()
    feed.wait_head(3)
    assert feed.verified_sequences() == [1, 2, 3]
    wait_for(lambda: _quarantined(stack)["count"] >= before + 2, what="both forged records to be quarantined")
    assert any("undecodable message" in reason for reason in _reasons(stack))


def test_a_forged_publish_event_that_does_not_follow_the_head_is_quarantined(stack: ServiceSet) -> None:
    feed = Feed(stack)
    feed.publish(2)
    feed.wait_head(2)
    published = [r for r in _records(stack, "events", feed.sid)
                 if decode_event(r.value()).type == STREAM_MESSAGE_PUBLISHED]
    # A copy of a real publish event that claims a later sequence, skipping the next one.
    first = decode_event(published[0].value())
    forged = rebody(first, sequence=5)
    before = _quarantined(stack)["count"]
    _produce(stack, "events", feed.sid, encode_event(forged))
    # And the exact copy of an old publish event: a replay that does not follow the head either.
    _produce(stack, "events", feed.sid, published[1].value())
    feed.publish()
    feed.wait_head(3)
    assert feed.verified_sequences() == [1, 2, 3]
    wait_for(lambda: _quarantined(stack)["count"] >= before + 2, what="the forged publish events to be quarantined")
    assert any("sequence 5 does not follow head 2" in reason for reason in _reasons(stack))


def test_a_validly_signed_message_its_publish_event_does_not_name_is_quarantined(stack: ServiceSet) -> None:
    feed = Feed(stack)
    feed.publish(1)
    feed.wait_head(1)
    # The publisher's own signature over another payload for sequence 2, written ahead of the real one.
    other = sign_message(stream_id=feed.sid, sequence=2, timestamp_unix_ms=1_700_000_000_002, kind="tick",
                         payload=b'{"n":"not this one"}', signing_key=feed.publisher)
    before = _quarantined(stack)["count"]
    _produce(stack, "messages", feed.sid, encode_message(other))
    feed.publish()
    feed.wait_head(2)
    assert feed.verified_sequences() == [1, 2]
    assert feed.page(1)["messages"][0]["payload_inline_hex"] == b'{"n": 2}'.hex()
    wait_for(lambda: _quarantined(stack)["count"] > before, what="the unnamed message to be quarantined")
    assert any(f"message {feed.sid}#2 does not match its publish event" in reason for reason in _reasons(stack))


def test_a_feed_registered_event_reusing_a_feed_id_is_quarantined(stack: ServiceSet) -> None:
    genuine = Feed(stack, listed=True)
    feed_id = genuine.created["feed_id"]
    wait_for(lambda: http("GET", f"{stack.api_url}/v1/feeds/{feed_id}")[0] == 200, what="the listing")
    registered = [e for e in (decode_event(m.value()) for m in _records(stack, "events", "registry"))
                  if e.body.feed_id == feed_id]
    forged = rebody(registered[0], stream_id="someone-elses-stream", name="hijacked")
    before = _quarantined(stack)["count"]
    _produce(stack, "events", "registry", encode_event(forged))
    # The registry keeps working: the next listing gets the next id (folded after the forged record).
    successor = Feed(stack, listed=True)
    assert successor.created["feed_id"] == feed_id + 1
    wait_for(lambda: http("GET", f"{stack.api_url}/v1/feeds/{feed_id + 1}")[0] == 200, what="the next listing")
    status, entry = http("GET", f"{stack.api_url}/v1/feeds/{feed_id}")
    assert (status, entry["stream_id"], entry["name"]) == (200, genuine.sid, genuine.sid)
    wait_for(lambda: _quarantined(stack)["count"] > before, what="the forged listing to be quarantined")
    assert any(f"reuses feed id {feed_id}" in reason for reason in _reasons(stack))


def test_live_projection_and_rebuild_make_the_same_decisions_with_forged_records_present(stack: ServiceSet) -> None:
    # Runs after the reproductions above (module order): the log now holds their forged records.
    feed = Feed(stack)
    feed.publish(2)
    feed.wait_head(2)
    offline = rebuild_digest(stack.bootstrap, stack.prefix)
    assert offline["quarantined"]["count"] >= 6

    def live() -> dict[str, Any]:
        status, body = http("GET", f"{stack.api_url}/v1/admin/digest")
        assert status == 200
        return body

    wait_for(lambda: live()["digest"] == offline["digest"], what="live digest == rebuild digest")
    assert live()["quarantined"] == offline["quarantined"]


def rebody(event: Event, **changes: Any) -> Event:
    """`event` with some of its body's fields changed (a forged record, for the rules to refuse)."""
    return dataclasses.replace(event, body=dataclasses.replace(event.body, **changes))
