"""Helpers of the delivery worker's integration tests: a push feed with many subscribers, publishing
through the real stack, and a reader of the push records on ``deliveries``."""

from __future__ import annotations

import json
import secrets
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nacl.signing
from deliveries_reader import CommittedDeliveries

from watchtower.gateway.transport import CommandClient
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.signing import sign_message
from watchtower.schemas.records import decode_message


@dataclass
class PushFeed:
    stream_id: str
    owner: nacl.signing.SigningKey
    publisher: nacl.signing.SigningKey
    subscribers: list[str] = field(default_factory=list)
    head: int = 0


def create_push_feed(client: CommandClient, n_subscribers: int, *, per_block: int,
                     mode: str = "PUSH") -> PushFeed:
    """A stream whose bound is `per_block` deliveries a block, and `n_subscribers` accounts subscribed
    with `mode` (signed subscribe commands sent concurrently, every reply awaited)."""
    feed = PushFeed("push-" + secrets.token_hex(6), nacl.signing.SigningKey.generate(),
                    nacl.signing.SigningKey.generate())
    body = {"publisher_key_hex": bytes(feed.publisher.verify_key).hex(), "max_push_deliveries_per_block": per_block,
            "max_subscribers": max(10_000, n_subscribers)}
    client.submit(sign_command(feed.owner, "create_stream", feed.stream_id, 1, body)).result(120)
    keys = [nacl.signing.SigningKey.generate() for _ in range(n_subscribers)]
    futures = [client.submit(sign_command(k, "subscribe", feed.stream_id, 1, {"mode": mode})) for k in keys]
    client.flush()
    for f in futures:
        f.result(300)
    feed.subscribers = sorted(address_from_public_key(bytes(k.verify_key)) for k in keys)
    return feed


def publish(client: CommandClient, feed: PushFeed, count: int) -> None:
    """`count` more messages, each acknowledged."""
    futures = []
    for seq in range(feed.head + 1, feed.head + count + 1):
        msg = sign_message(stream_id=feed.stream_id, sequence=seq, timestamp_unix_ms=1_700_000_000_000 + seq,
                           kind="tick", payload=json.dumps({"n": seq}).encode(), signing_key=feed.publisher,
                           tags={"n": seq})
        futures.append(client.submit(sign_command(feed.owner, "publish", feed.stream_id, seq + 1,
                                                  msg.to_json_dict())))
    client.flush()
    for f in futures:
        f.result(120)
    feed.head += count


@dataclass(frozen=True)
class Push:
    subscriber: str
    stream_id: str
    sequence: int
    block: int
    cycles: int
    value_sequence: int
    value_len: int


class PushReader(CommittedDeliveries):
    """Reads every committed record of ``deliveries`` from the beginning; keeps the ``wt:push`` ones."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        super().__init__(bootstrap, prefix)
        self.pushes: list[Push] = []

    def poll(self, timeout: float = 0.5) -> None:
        for m in self.records(timeout):
            headers = {k: (v or b"").decode() for k, v in (m.headers() or [])}
            if headers.get("wt:push") != "1":
                continue
            msg = decode_message(m.value() or b"")
            self.pushes.append(Push((m.key() or b"").decode(), headers["wt:push:stream"],
                                    int(headers["wt:push:sequence"]), int(headers["wt:push:block"]),
                                    int(headers["wt:push:cycles"]), msg.sequence, len(m.value() or b"")))

    def of(self, feed: PushFeed) -> list[Push]:
        return [p for p in self.pushes if p.stream_id == feed.stream_id]


def served_everything(reader: PushReader, feed: PushFeed) -> Callable[[], bool]:
    want = len(feed.subscribers) * feed.head

    def done() -> bool:
        return len({(p.subscriber, p.sequence) for p in reader.of(feed)}) >= want
    return done


def per_block_counts(pushes: list[Push]) -> Counter[tuple[str, int]]:
    return Counter((p.stream_id, p.block) for p in pushes)


def health(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}
