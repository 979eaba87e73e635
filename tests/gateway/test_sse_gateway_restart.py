"""A gateway killed with kill -9 mid-stream and restarted: a client that resumes with
Last-Event-ID gets every message exactly once, in order, including those published while the
gateway was down; a push subscriber whose gateway died before its first push gets what was pushed
meanwhile."""

from __future__ import annotations

import contextlib
import http.client
import threading
from itertools import islice

import nacl.signing
import pytest
from sse_reader import SseClient
from sse_stack import Feed, start_sse_gateway
from waiting import wait_until

from watchtower.client.account import Account
from watchtower.client.push import PushConsumer
from watchtower.client.sse import SseSource
from watchtower.client.subscriber import Subscriber
from watchtower.local.stack import ServiceSet

pytestmark = pytest.mark.integration


def test_a_client_resuming_after_a_gateway_kill9_gets_everything_exactly_once(
        sse_stack: ServiceSet, tmp_path_factory: pytest.TempPathFactory) -> None:
    feed = Feed(sse_stack, tmp_path_factory.mktemp("restart-home"))
    url = sse_stack.urls["gateway-g1"]
    port = int(url.rsplit(":", 1)[1])
    received: list[int] = []
    with SseClient(url, f"/v1/feeds/{feed.feed_id}/events", timeout=120) as client:
        assert client.status == 200
        feed.publish(30)
        received += [int(e.id or 0) for e in client.messages(20)]
        sse_stack.kill9("gateway-g1")
        # What was already on the socket is still readable; then the stream ends without a close event.
        # A reset or cut-off chunked stream ends the reading; a half-sent event is never yielded.
        with contextlib.suppress(OSError, http.client.HTTPException):
            for e in client.events():
                if e.comment is None:
                    received.append(int(e.id or 0))
    feed.publish(15)  # while the gateway is down
    url = start_sse_gateway(sse_stack, port)
    last = received[-1]
    with SseClient(url, f"/v1/feeds/{feed.feed_id}/events", headers={"Last-Event-ID": str(last)}) as client:
        assert client.status == 200
        rest = client.messages(45 - last)
        feed.publish(5)
        rest += client.messages(5)
    received += [int(e.id or 0) for e in rest]
    assert received == list(range(1, 51))


def test_a_push_subscriber_whose_gateway_dies_before_its_first_push_gets_what_was_pushed_meanwhile(
        sse_stack: ServiceSet, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The demo's failure: the gateway was killed before the first delivery reached the PUSH
    subscriber, so its SSE connection had no Last-Event-ID, resumed live, and received 0 of 40.
    `Subscriber.stream` tells the source its cursor: the reconnect resumes from it, and the gateway
    resends what the delivery worker pushed while it was down."""
    home = tmp_path_factory.mktemp("push-restart-home")
    feed = Feed(sse_stack, home)
    url = sse_stack.urls["gateway-g1"]
    port = int(url.rsplit(":", 1)[1])
    account = Account(nacl.signing.SigningKey.generate(), home=home)
    feed.api.command(account.sign("subscribe", feed.stream_id, {"mode": "PUSH"}))
    sub = Subscriber(feed.api, feed.stream_id, expected_owner=feed.owner.address)
    got: list[int] = []
    with SseSource(url, feed.feed_id, subscriber=account.address, heartbeat_s=1, reconnect_delay_s=0.1) as source:
        assert source.wait_connected(60)
        # The application's loop runs throughout, as it would: the stream tells the source its cursor.
        reader = threading.Thread(target=lambda: got.extend(
            m.sequence for m in islice(sub.stream("push", source, idle_timeout_s=60), 5)), daemon=True)
        reader.start()
        # Pushes are made while the gateway is down: the Kafka view of the same subscriber shows them committed.
        with PushConsumer(sse_stack.bootstrap, account.address, feed.stream_id, prefix=sse_stack.prefix) as pushes:
            sse_stack.kill9("gateway-g1")
            feed.publish(5)
            seen: list[int] = []

            def five_pushed() -> bool:
                seen.extend(m.sequence for m in pushes.poll(1.0))
                return len(seen) >= 5

            wait_until(lambda: f"the delivery worker's 5 pushes (it pushed only {seen})", five_pushed,
                       timeout_s=120, every_s=0)
        start_sse_gateway(sse_stack, port)
        reader.join(90)
    assert got == [1, 2, 3, 4, 5], f"the push subscriber got {got} after the gateway restart (SSE {source.stats})"
    assert source.stats.connects >= 2
