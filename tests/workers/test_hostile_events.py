"""A forged or rule-breaking record on the events topic never stops the worker from starting.

Each case writes a hostile record straight to the events topic (anyone who can reach the broker
can), restarts the worker (its partitions are rebuilt from the events at start), and requires:

- the worker starts and serves: its health file says ``serving`` and lists the record's topic,
  partition and offset among the quarantined ones, with the reason;
- the owner's next publish, with the true next sequence, is acknowledged;
- the stream's messages log stays exactly 1..N.

A forged PublisherKeyRotated (the attacker's own key, its own signed command or none) is one of
the cases: only the owner's signed command can put a publisher key in force (docs/key-chain.md).

One worker process serves the module; every case restarts it, so every restart re-checks the
records of the cases before it too.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
from confluent_kafka import Producer
from waiting import wait_until
from worker_harness import Workers, partition_for, read_health, workers

from watchtower.cli.message_log import read_committed_messages
from watchtower.gateway.transport import CommandClient
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.events import FeedRegistered, PublisherKeyRotated, SubscriptionPolicyChanged
from watchtower.protocol.registry import REGISTRY_KEY
from watchtower.protocol.signed_command import command_digest, sign_command
from watchtower.protocol.signing import sign_message
from watchtower.protocol.stream.key_chain import command_json
from watchtower.protocol.stream.state import Event
from watchtower.schemas.wire import decode_event, encode_event
from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.reader import read_committed

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 3
WORKER = "hostile"


@dataclass
class Bench:
    workers: Workers
    health: Path
    client: CommandClient
    t_events: str = ""
    streams: int = 0

    def restart(self) -> int:
        """Stop the worker gracefully, start it again; return the new process id."""
        self.workers.terminate(WORKER)
        self.workers.start(WORKER, env={"WATCHTOWER_HEALTH_FILE": str(self.health)})
        return self.workers.pid(WORKER)

    def wait_serving_with_quarantined(self, pid: int, partition: int, offset: int,
                                      timeout: float = 90.0) -> dict[str, Any]:
        """Wait until the restarted worker serves and reports the record at partition/offset as quarantined."""
        last: dict[str, Any] | None = None

        def quarantined() -> dict[str, Any] | None:
            nonlocal last
            if not self.workers.alive(WORKER):
                pytest.fail(f"the worker died at start:\n{self.workers.log(WORKER)[-3000:]}")
            last = read_health(self.health)
            if last is not None and last["pid"] == pid and last["state"] == "serving":
                for q in last["last_quarantined"]:
                    if (q["topic"], q["partition"], q["offset"]) == (self.t_events, partition, offset):
                        assert last["quarantined"] >= 1
                        return dict(q)
            return None

        return wait_until(lambda: f"the restarted worker to report the record {partition}@{offset} as quarantined "
                                  f"while serving; last health: {last}\nlog:\n{self.workers.log(WORKER)[-3000:]}",
                          quarantined, timeout_s=timeout, every_s=0.1)


@dataclass
class Stream:
    bench: Bench
    stream_id: str
    owner: nacl.signing.SigningKey = field(default_factory=nacl.signing.SigningKey.generate)
    publisher: nacl.signing.SigningKey = field(default_factory=nacl.signing.SigningKey.generate)
    nonce: int = 0
    head: int = 0

    @property
    def partition(self) -> int:
        return partition_for(self.stream_id, PARTITIONS)

    def call(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        self.nonce += 1
        return self.bench.client.call(sign_command(self.owner, method, self.stream_id, self.nonce, body), timeout=120)

    def create(self, feed: dict[str, str] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"owner": address_from_public_key(bytes(self.owner.verify_key)),
                                "publisher_key_hex": bytes(self.publisher.verify_key).hex()}
        if feed is not None:
            body["feed"] = feed
        return self.call("create_stream", body)

    def publish_next(self) -> None:
        """Publish head+1 and require it to be acknowledged as head+1."""
        seq = self.head + 1
        msg = sign_message(stream_id=self.stream_id, sequence=seq, timestamp_unix_ms=1_790_000_000_000 + seq,
                           kind="tick", payload=b'{"n":%d}' % seq, signing_key=self.publisher)
        assert self.call("publish", msg.to_json_dict())["sequence"] == seq
        self.head = seq

    def assert_gapless(self) -> None:
        logged = read_committed_messages(self.bench.workers.bootstrap, prefix=self.bench.workers.prefix,
                                         stream_id=self.stream_id)
        assert [m.sequence for m in logged] == list(range(1, self.head + 1))


@pytest.fixture(scope="module")
def bench(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    log_dir = tmp_path_factory.mktemp("hostile-events")
    health = log_dir / "health.json"
    with workers(kafka_bootstrap, partitions=PARTITIONS, log_dir=log_dir) as w:
        w.start(WORKER, env={"WATCHTOWER_HEALTH_FILE": str(health)})
        client = CommandClient(kafka_bootstrap, prefix=w.prefix)
        try:
            yield Bench(w, health, client, t_events=topic_name("events", w.prefix))
        finally:
            client.close()


@pytest.fixture
def stream(bench: Bench) -> Stream:
    bench.streams += 1
    s = Stream(bench, f"hostile.{bench.workers.prefix}.{bench.streams}")
    s.create()
    s.publish_next()
    s.publish_next()
    return s


def logged_events(bench: Bench, key: str) -> list[tuple[int, int, Event]]:
    """(partition, offset, event) of every committed event keyed ``key``."""
    return [(int(m.partition() or 0), int(m.offset() or 0), decode_event(m.value()))
            for m in read_committed(bench.workers.bootstrap, [bench.t_events]) if m.key() == key.encode()]


def last_event(bench: Bench, key: str, event_type: str) -> Event:
    events = [event for _, _, event in logged_events(bench, key) if event.type == event_type]
    assert events, f"no {event_type} event keyed {key}"
    return events[-1]


def inject(bench: Bench, partition: int, key: str | None, value: bytes) -> int:
    """Produce one record to the events topic, as anyone with broker access could; return its offset."""
    producer = Producer({**kafka_config(bench.workers.bootstrap), "log_level": 3})
    offsets: list[int] = []
    producer.produce(bench.t_events, key=None if key is None else key.encode(), value=value, partition=partition,
                     on_delivery=lambda err, msg: offsets.append(-1 if err else int(msg.offset())))
    producer.flush(30)
    assert offsets, "the hostile record was not delivered within 30 s"
    assert offsets[0] >= 0, "the hostile record was not written"
    return offsets[0]


def wire(event: Event) -> bytes:
    """The event's bytes as the writer's codec encodes them (a forger uses the same public schemas)."""
    return encode_event(event)


def edited(event: Event, edit: Callable[[Event], Event]) -> bytes:
    return wire(edit(event))


def rebody(event: Event, **changes: Any) -> Event:
    """`event` with some of its body's fields changed."""
    return dataclasses.replace(event, body=dataclasses.replace(event.body, **changes))


def check_restart_quarantines(bench: Bench, stream: Stream, partition: int, offset: int, reason: str) -> None:
    pid = bench.restart()
    entry = bench.wait_serving_with_quarantined(pid, partition, offset)
    assert reason in entry["reason"], entry
    stream.publish_next()
    stream.assert_gapless()


def test_a_forged_publish_at_head_plus_one_cannot_make_the_log_skip_or_repeat(bench: Bench, stream: Stream) -> None:
    # Publish events refer to their message by sequence and hash and carry no signature of their
    # own, so a forged copy at head + 1 folds; what the rebuild guarantees is a gapless head: the
    # genuine head + 1 after it is quarantined, and the next publish is head + 2. (Message
    # signatures are checked by whoever reads the messages topic, the one archive of payloads.)
    event = last_event(bench, stream.stream_id, "StreamMessagePublished")

    def next_sequence(event: Event) -> Event:
        return rebody(event, sequence=stream.head + 1)

    inject(bench, stream.partition, stream.stream_id, edited(event, next_sequence))
    # The running worker never reads it: the owner's genuine head+1 is accepted on top of it.
    stream.publish_next()
    genuine = [off for _, off, logged in logged_events(bench, stream.stream_id)
               if logged.type == "StreamMessagePublished"][-1]
    check_restart_quarantines(bench, stream, stream.partition, genuine, "does not follow head")


def test_copy_of_the_last_event_is_quarantined(bench: Bench, stream: Stream) -> None:
    event = last_event(bench, stream.stream_id, "StreamMessagePublished")
    offset = inject(bench, stream.partition, stream.stream_id, wire(event))
    check_restart_quarantines(bench, stream, stream.partition, offset, "does not follow head")


def test_feed_registration_reusing_feed_id_1_is_quarantined(bench: Bench) -> None:
    bench.streams += 1
    listed = Stream(bench, f"hostile.{bench.workers.prefix}.{bench.streams}")
    assert listed.create(feed={"name": "first"})["feed_id"] == 1
    event = last_event(bench, REGISTRY_KEY, "FeedRegistered")
    assert isinstance(event.body, FeedRegistered)
    assert event.body.feed_id == 1
    home = partition_for(REGISTRY_KEY, PARTITIONS)
    offset = inject(bench, home, REGISTRY_KEY, wire(event))
    check_restart_quarantines(bench, listed, home, offset, "feed id 1 does not follow 1")
    bench.streams += 1
    another = Stream(bench, f"hostile.{bench.workers.prefix}.{bench.streams}")
    assert another.create(feed={"name": "second"})["feed_id"] == 2


def test_random_garbage_is_quarantined(bench: Bench, stream: Stream) -> None:
    # Not the framing's magic byte 0 first: garbage that starts with it reads as a framed record of
    # an unknown schema, and is quarantined as SCHEMA_MISMATCH instead (one run in 256 did).
    garbage = bytes([1 + os.urandom(1)[0] % 255]) + os.urandom(63)
    offset = inject(bench, stream.partition, stream.stream_id, garbage)
    check_restart_quarantines(bench, stream, stream.partition, offset, "MALFORMED_RECORD")


def test_event_on_the_wrong_partition_is_quarantined(bench: Bench, stream: Stream) -> None:
    event = last_event(bench, stream.stream_id, "StreamMessagePublished")
    elsewhere = (stream.partition + 1) % PARTITIONS
    offset = inject(bench, elsewhere, stream.stream_id, wire(event))
    check_restart_quarantines(bench, stream, elsewhere, offset, f"belong on partition {stream.partition}")


def test_event_under_another_key_is_quarantined(bench: Bench, stream: Stream) -> None:
    event = last_event(bench, stream.stream_id, "StreamMessagePublished")

    def next_sequence(event: Event) -> Event:
        return rebody(event, sequence=stream.head + 1)

    offset = inject(bench, stream.partition, None, edited(event, next_sequence))
    stream.publish_next()
    check_restart_quarantines(bench, stream, stream.partition, offset, "record key None")


def test_forged_nonce_from_the_future_does_not_lock_the_owner_out(bench: Bench, stream: Stream) -> None:
    """A forged last event with nonce 2**62, stamped with a far-future block so that its own nonce
    ceiling allows it: after a restart the owner's ordinary next nonce must still be accepted."""
    event = last_event(bench, stream.stream_id, "StreamMessagePublished")

    def lockout(event: Event) -> Event:
        return dataclasses.replace(event, body=SubscriptionPolicyChanged(stream_id=stream.stream_id, policy="PUBLIC"),
                                   nonce=2**62, block_height=2**50)  # its ceiling then allows 2**62

    offset = inject(bench, stream.partition, stream.stream_id, edited(event, lockout))
    check_restart_quarantines(bench, stream, stream.partition, offset, "more than a day after the current block")


def forged_rotation(stream: Stream, attacker: nacl.signing.SigningKey, *, with_command: bool = True) -> Event:
    """A PublisherKeyRotated putting `attacker`'s key in force at head + 1, as a forger with broker
    access can write it: its own signed rotate command (it cannot sign as the owner), or none."""
    cmd = sign_command(attacker, "rotate_publisher_key", stream.stream_id, 1, {"new_key": bytes(attacker.verify_key)})
    return Event(
        stream_id=stream.stream_id, block_height=1, caller=cmd.caller, nonce=cmd.nonce, digest=command_digest(cmd),
        reply={"old_signing_key_id": 1, "signing_key_id": 2, "effective_sequence": stream.head + 1},
        body=PublisherKeyRotated(
            stream_id=stream.stream_id, old_key=bytes(stream.publisher.verify_key), new_key=bytes(attacker.verify_key),
            old_signing_key_id=1, new_signing_key_id=2, effective_sequence=stream.head + 1,
            command=command_json(cmd) if with_command else None))


def test_a_forged_key_rotation_is_quarantined_and_the_owner_keeps_publishing(bench: Bench, stream: Stream) -> None:
    # The rotation is the attacker's own signed command (it cannot sign as the owner): the fold
    # checks the carried command against the owner and refuses it, so the owner's key stays in force.
    attacker = nacl.signing.SigningKey.generate()
    offset = inject(bench, stream.partition, stream.stream_id, encode_event(forged_rotation(stream, attacker)))
    check_restart_quarantines(bench, stream, stream.partition, offset, "INVALID_SIGNATURE")
    unsigned = inject(bench, stream.partition, stream.stream_id,
                      encode_event(forged_rotation(stream, attacker, with_command=False)))
    check_restart_quarantines(bench, stream, stream.partition, unsigned, "carries no owner-signed command")
