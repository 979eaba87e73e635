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
from watchtower.gateway.transport import CommandClient
from watchtower.local.stack import ServiceSet

#: Gateway settings the tests exercise: a small per-connection buffer and a small connection cap.
#: From this many messages `Feed.publish` pipelines through the command topic.
PIPELINE_FROM = 50

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
        self.services = services
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
        shows it (so "live from now" and catch-ups in the tests have a definite starting point).

        Up to `PIPELINE_FROM` messages go one by one through the API, as a publisher would send them;
        more are pipelined through the command topic (each acknowledged), which is how a bulk
        publisher would send them and keeps a 600-message backlog from costing a minute of round trips.
        """
        if n >= PIPELINE_FROM:
            return self._publish_pipelined(n, tags)
        seq = 0
        for _ in range(n):
            seq = (self.publisher.head or 0) + 1
            self.publisher.publish("tick", b'{"i": %d}' % seq, {"n": float(seq), **tags})
        wait_until_visible(self.api, self.stream_id, min_head=seq, timeout_s=120)
        return seq

    def _publish_pipelined(self, n: int, tags: dict[str, Any]) -> int:
        first = self.publisher.sync() + 1
        client = CommandClient(self.services.bootstrap, prefix=self.services.prefix)
        try:
            futures = [client.submit(self.publisher.publish_command(
                seq, self.publisher.signing_key_id or 1, "tick", b'{"i": %d}' % seq, {"n": float(seq), **tags},
                "application/json")) for seq in range(first, first + n)]
            client.flush()
            for future in futures:
                future.result(300)
        finally:
            client.close()
        last = first + n - 1
        wait_until_visible(self.api, self.stream_id, min_head=last, timeout_s=120)
        assert self.publisher.sync() == last
        return last
