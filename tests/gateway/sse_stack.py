"""The SSE and feed-page tests' stack: an API that serves the live feeds, a standalone gateway
beside it, and feeds with a publisher."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import nacl.signing

from watchtower.client.account import Account
from watchtower.client.http import ApiClient
from watchtower.client.sdk import Publisher, create_feed, wait_until_visible
from watchtower.local.stack import ServiceSet

#: Gateway settings the tests exercise: a small per-connection buffer and a small connection cap.
GATEWAY_ENV = {"WATCHTOWER_SSE_QUEUE": "8", "WATCHTOWER_SSE_MAX_CONNECTIONS": "4"}


def start_sse_gateway(services: ServiceSet, port: int) -> str:
    """The standalone gateway ``gateway-g1`` on `port`, reading from the stack's API; returns its URL.

    The stack passes ``WATCHTOWER_API_URL`` to a gateway itself; it is set here too (processes
    inherit this environment), so the test does not depend on it.
    """
    saved = {k: os.environ.get(k) for k in (*GATEWAY_ENV, "WATCHTOWER_API_URL")}
    os.environ.update({**GATEWAY_ENV, "WATCHTOWER_API_URL": services.api_url})
    try:
        url = services.start_gateway("g1", port)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    services.wait_ready(api_url=url)
    return url


class Feed:
    """A listed feed and a publisher of it."""

    def __init__(self, services: ServiceSet, home: Path, *, name: str = "live", **config: Any) -> None:
        self.api = ApiClient(services.api_url)
        self.owner = Account(nacl.signing.SigningKey.generate(), home=home)
        self.key = nacl.signing.SigningKey.generate()
        reply = create_feed(self.api, self.owner, name=name, description="SSE test feed",
                            publisher_key_hex=self.public_key.hex(), **config)
        self.stream_id, self.feed_id = reply["stream_id"], int(reply["feed_id"])
        wait_until_visible(self.api, self.stream_id, feed_id=self.feed_id, timeout_s=60)
        self.publisher = Publisher(self.api, self.owner, self.stream_id, self.key)

    @property
    def public_key(self) -> bytes:
        return bytes(self.key.verify_key)

    def publish(self, n: int, **tags: Any) -> int:
        """Publish `n` messages (payload ``{"i": sequence}``); returns the last sequence once the API
        shows it (so "live from now" and catch-ups in the tests have a definite starting point)."""
        seq = 0
        for _ in range(n):
            seq = (self.publisher.head or 0) + 1
            self.publisher.publish("tick", b'{"i": %d}' % seq, {"n": float(seq), **tags})
        wait_until_visible(self.api, self.stream_id, min_head=seq, timeout_s=120)
        return seq
