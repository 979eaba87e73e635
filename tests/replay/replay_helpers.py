"""Helpers of the replay worker's integration tests: publish through the real stack, register a
replay on the ``replay`` topic (as the stream's writer does), read deliveries and replay status."""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import nacl.signing
from confluent_kafka import Producer
from deliveries_reader import CommittedDeliveries
from waiting import wait_until

from watchtower.gateway.transport import CommandClient
from watchtower.protocol.replay.records import ReplayRegistration
from watchtower.protocol.replay.rules import canonical_filter, parse_replay_filter, plan_replay, replay_id_for
from watchtower.protocol.replay.status import ReplayRuleError, ReplayView, apply_replay_record
from watchtower.protocol.signed_command import command_digest, sign_command
from watchtower.protocol.signing import sign_message
from watchtower.schemas.replay_records import decode_replay_record, encode_replay_record
from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.reader import read_committed

KINDS = ("trade", "quote", "news")


@dataclass
class Stream:
    stream_id: str
    owner: nacl.signing.SigningKey
    publisher: nacl.signing.SigningKey
    head: int = 0

    @property
    def publisher_key(self) -> bytes:
        return bytes(self.publisher.verify_key)


def kind_of(sequence: int) -> str:
    return KINDS[sequence % len(KINDS)]


def create_and_publish(client: CommandClient, count: int, *, capacity: int = 100, batch: int = 5000) -> Stream:
    """A new stream (ring window `capacity`) with `count` messages published through the stack and
    acknowledged; message s has kind ``kind_of(s)`` and tag ``n = s``."""
    stream = Stream("s-" + secrets.token_hex(8), nacl.signing.SigningKey.generate(), nacl.signing.SigningKey.generate())
    body = {"publisher_key_hex": stream.publisher_key.hex(), "ring_buffer_capacity": capacity}
    client.submit(sign_command(stream.owner, "create_stream", stream.stream_id, 1, body)).result(120)
    for start in range(1, count + 1, batch):
        futures = []
        for seq in range(start, min(count, start + batch - 1) + 1):
            msg = sign_message(stream_id=stream.stream_id, sequence=seq, timestamp_unix_ms=1_700_000_000_000 + seq,
                               kind=kind_of(seq), payload=seq.to_bytes(8, "big"), signing_key=stream.publisher,
                               content_type="application/octet-stream", tags={"n": seq})
            futures.append(client.submit(sign_command(stream.owner, "publish", stream.stream_id, seq + 1,
                                                      msg.to_json_dict())))
        client.flush()
        for f in futures:
            f.result(600)
    stream.head = count
    return stream


def register(bootstrap: str, prefix: str, stream: Stream, *, start: int = 1, to: int | None = None,
             flt: Any = None, skip: list[int] | None = None, requester: str | None = None,
             replay_id: int | None = None, key: nacl.signing.SigningKey | None = None,
             nonce: int = 1) -> ReplayRegistration:
    """Write a ``registered`` record for a replay of `stream` to its partition of ``replay``, as the
    stream's writer does: with the signed register_replay of a fresh requester it was decided from
    (the replay worker fulfils nothing else). `requester` or `replay_id` make the record disagree
    with its command (a forgery). `key` and `nonce` sign it as a given requester (default: a fresh one)."""
    key = key or nacl.signing.SigningKey.generate()
    config = {name: value for name, value in (("filter", flt), ("skip", skip)) if value is not None}
    body: dict[str, Any] = {"namespace": stream.stream_id, "from": start, **({} if to is None else {"to": to}),
                            **({"config": config} if config else {})}
    cmd = sign_command(key, "register_replay", stream.stream_id, nonce, body)
    digest = command_digest(cmd)
    rid = replay_id or replay_id_for(digest)
    plan = plan_replay(replay_id=rid, from_sequence=start, to_sequence=to, head=stream.head)
    who = requester or cmd.caller
    record = ReplayRegistration(
        v=1, replay_id=rid, stream_id=stream.stream_id, namespace=stream.stream_id, requester=who,
        from_sequence=start, to_sequence=to, first=plan.first, end_exclusive=plan.end_exclusive, end_id=plan.end_id,
        filter=canonical_filter(parse_replay_filter(flt)), skip=skip, memo_hex="", price_cby=0, block_height=1,
        caller=cmd.caller, nonce=cmd.nonce, digest_hex=digest.hex(), command=cmd.to_dict())
    produce_replay(bootstrap, prefix, stream.stream_id, encode_replay_record(record))
    return record


def produce_replay(bootstrap: str, prefix: str, key: str, value: bytes, partition: int | None = None) -> None:
    """Any bytes on the ``replay`` topic, keyed (and so partitioned) like the stream's records."""
    producer = Producer(kafka_config(bootstrap, **{"partitioner": "murmur2_random", "enable.idempotence": True,
                                                   "log_level": 3}))
    kwargs: dict[str, Any] = {} if partition is None else {"partition": partition}
    producer.produce(topic_name("replay", prefix), key=key.encode(), value=value, **kwargs)
    assert producer.flush(30) == 0


def replay_views(bootstrap: str, prefix: str) -> dict[int, ReplayView]:
    """Fold the whole ``replay`` topic (committed records) as every reader does."""
    views: dict[int, ReplayView] = {}
    for msg in read_committed(bootstrap, [topic_name("replay", prefix)], timeout_s=120):
        try:
            views.update(apply_replay_record(views, decode_replay_record(msg.value())) or {})
        except (ReplayRuleError, Exception):  # noqa: S112 (hostile records are part of some tests)
            continue
    return views


def wait_status(bootstrap: str, prefix: str, replay_id: int, statuses: set[str], timeout_s: float = 600) -> ReplayView:
    view: ReplayView | None = None

    def reached() -> ReplayView | None:
        nonlocal view
        view = replay_views(bootstrap, prefix).get(replay_id)
        return view if view is not None and view.status in statuses else None

    wanted = " or ".join(sorted(statuses))
    return wait_until(lambda: f"replay {replay_id} to be {wanted} (it is {view and view.status})", reached,
                      timeout_s=timeout_s, every_s=0.5)


class DeliveryReader(CommittedDeliveries):
    """Reads ``deliveries`` (read_committed) from the beginning; keeps the records of the replays asked for."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        super().__init__(bootstrap, prefix)
        self.by_replay: dict[int, list[Any]] = {}

    def poll(self, timeout: float = 0.5) -> int:
        got = 0
        for m in self.records(timeout):
            raw = dict(m.headers() or []).get("icrc77:replay:id")
            rid = int(raw) if isinstance(raw, bytes) else 0
            self.by_replay.setdefault(rid, []).append(m)
            got += 1
        return got

    def count(self, replay_id: int) -> int:
        return len(self.by_replay.get(replay_id, []))

    def drain(self, quiet_s: float = 2.0) -> None:
        """Read until nothing new arrives for `quiet_s`."""
        last = time.monotonic()
        while time.monotonic() - last < quiet_s:
            if self.poll(0.3):
                last = time.monotonic()


def header_map(msg: Any) -> Mapping[str, bytes]:
    return dict(msg.headers() or [])
