"""PUSH_WITH_PULL_FALLBACK survives kill -9 of the delivery path during a 2,000-message stream
(10,000 in the soak tier).

A subscriber with a PUSH_WITH_PULL_FALLBACK subscription reads its pushes while the messages are
published (pipelined through the command topic), and the process that carries the pushes is killed
with SIGKILL mid-stream, while publishing goes on, then restarted:

- Kafka: the pushes come from ``deliveries`` (`PushConsumer`); the delivery worker ``delivery-d1``
  is killed and restarted;
- SSE: the pushes come through the standalone gateway (``/v1/feeds/{id}/events?subscriber=``,
  `SseSource`); the gateway is killed and restarted on the same port.

Either way the application (the loop over ``Subscriber.stream``) must receive exactly 1..COUNT:
ascending, no gap, no duplicate, every message verified by the Subscriber. Pushes must really have
carried part of the stream. In the soak tier every yield is counted until the stream has stayed
silent for 20 s (no duplicate follows the last message); at CI scale the loop ends at the last
message (the subscriber's deduplication is pinned by tests/client/test_push_stream_modes.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
from kafka_fixture import free_ports
from stack_fixture import start_stack
from tiers import SOAK, scale
from waiting import wait_until

from watchtower.cli.demo_wait import topic_partitions, wait_worker_serving
from watchtower.client.account import Account
from watchtower.client.http import ApiClient
from watchtower.client.push import PushConsumer
from watchtower.client.sdk import Publisher, create_feed, wait_until_visible
from watchtower.client.sse import SseSource
from watchtower.client.subscriber import Subscriber
from watchtower.gateway.transport import CommandClient
from watchtower.local.stack import ServiceSet
from watchtower.protocol.signing import verify_with_schedule
from watchtower.protocol.stream.message import StreamMessage
from watchtower.topics.catalogue import topic_name

pytestmark = [pytest.mark.integration, pytest.mark.soak]

COUNT = scale(2_000, 10_000)
KILL_AT = COUNT * 3 // 10  # published before the kill; the kill waits until the application has part of it
BATCH = scale(200, 500)
# Soak: after the last message the stream must stay silent this long (no duplicate follows). At CI
# scale the loop ends at the last message; this is then only the bound on a silent stream.
IDLE_S = 20.0


@pytest.fixture(scope="module")
def services(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceSet]:
    """A stack with the delivery worker, plus the standalone SSE gateway ``gateway-g1``."""
    with start_stack(kafka_bootstrap, tmp_path_factory.mktemp("push-kill-logs"), replay=False,
                     delivery=True) as stack:
        port = free_ports(1)[0]
        start_gateway(stack, port)
        stack.gateway_port = port  # type: ignore[attr-defined]
        yield stack


def wait_delivery_serving(stack: ServiceSet) -> None:
    """Until the delivery worker has restored and serves every partition (its health file says so):
    a scenario that starts while a restarted worker still restores would see its pushes late."""
    parts = topic_partitions(stack.bootstrap, topic_name("events", stack.prefix))
    wait_worker_serving("the delivery worker serving", stack.health_file("delivery-d1"), parts)


def start_gateway(stack: ServiceSet, port: int) -> str:
    url = stack.start_gateway("g1", port)  # it reads older messages from the stack's API
    stack.wait_ready(api_url=url)
    return url


class Scenario:
    """A listed feed, a PUSH_WITH_PULL_FALLBACK subscriber, and a publisher pipelining through Kafka."""

    def __init__(self, stack: ServiceSet, home: Path) -> None:
        wait_delivery_serving(stack)
        self.stack = stack
        self.api = ApiClient(stack.api_url)
        self.owner = Account(nacl.signing.SigningKey.generate(), name="owner", home=home)
        self.reader = Account(nacl.signing.SigningKey.generate(), name="reader", home=home)
        key = nacl.signing.SigningKey.generate()
        reply = create_feed(self.api, self.owner, name="ten-thousand", publisher_key_hex=bytes(key.verify_key).hex(),
                            ring_buffer_capacity=2 * COUNT)
        self.stream_id, self.feed_id = reply["stream_id"], int(reply["feed_id"])
        wait_until_visible(self.api, self.stream_id, feed_id=self.feed_id, timeout_s=60)
        self.publisher = Publisher(self.api, self.owner, self.stream_id, key)
        self.publisher.sync()
        sub = self.api.command(self.reader.sign("subscribe", self.stream_id, {"mode": "PUSH_WITH_PULL_FALLBACK"}))
        assert (sub["mode"], sub["status"]) == ("PUSH_WITH_PULL_FALLBACK", "ACTIVE")
        wait_until("the subscription to reach the read side",
                   lambda: self.reader.address in [s["subscriber"] for s in self.api.subscribers(self.stream_id)],
                   timeout_s=60, every_s=0.1)
        self.published = 0
        self.received = 0  # what the application has been handed so far (written by the reading loop)

    def publish_through(self, last: int) -> None:
        """Publish up to sequence `last`, pipelined in batches, each batch acknowledged."""
        client = CommandClient(self.stack.bootstrap, prefix=self.stack.prefix)
        try:
            while self.published < last:
                futures = []
                for seq in range(self.published + 1, min(last, self.published + BATCH) + 1):
                    cmd = self.publisher.publish_command(seq, 1, "tick", b'{"n": %d}' % seq, {"n": seq},
                                                         "application/json")
                    futures.append(client.submit(cmd))
                client.flush()
                for future in futures:
                    future.result(300)
                self.published += len(futures)
        finally:
            client.close()

    def wait_received(self, at_least: int, timeout_s: float = 600) -> None:
        wait_until(f"the application to have {at_least} messages", lambda: self.received >= at_least,
                   timeout_s=timeout_s, every_s=0.05)


def run_with_kill(scenario: Scenario, source: Any, kill: Callable[[], None], restart: Callable[[], None]) -> None:
    """Stream while a background thread publishes, kills mid-stream, publishes on, restarts, finishes."""
    sub = Subscriber(scenario.api, scenario.stream_id, 0)
    verified: set[int] = set()
    check = sub.verify

    def counting_verify(msg: StreamMessage) -> None:
        check(msg)
        verified.add(msg.sequence)

    sub.verify = counting_verify  # type: ignore[method-assign]
    failures: list[BaseException] = []
    marks: dict[str, int] = {}

    def drive() -> None:
        try:
            scenario.publish_through(KILL_AT)
            scenario.wait_received(KILL_AT // 2)  # pushes (or pulls) are flowing
            marks["received_at_kill"] = scenario.received
            kill()
            scenario.publish_through(2 * KILL_AT)  # published while the push path is dead
            restart()
            marks["received_at_restart"] = scenario.received
            scenario.publish_through(COUNT)
        except BaseException as err:  # reported by the test's thread
            failures.append(err)

    driver = threading.Thread(target=drive, name="publish-and-kill")
    driver.start()
    got: list[StreamMessage] = []
    try:
        for msg in sub.stream("push-with-pull-fallback", source, pull_interval_s=2.0, idle_timeout_s=IDLE_S):
            got.append(msg)
            scenario.received = len(got)
            if failures or (len(got) >= COUNT and not SOAK):
                break
    finally:
        driver.join(600)
    assert not failures, failures
    stats = sub.stream_stats
    print(f"\n{type(source).__name__}: {stats}; marks {marks}")
    sequences = [m.sequence for m in got]
    assert sequences == list(range(1, COUNT + 1))  # ascending, no gap, no duplicate, nothing extra
    assert verified >= set(sequences)  # each was verified before it was handed out
    schedule = sub.key_schedule()
    assert all(verify_with_schedule(m, schedule) for m in got)
    assert stats is not None
    assert stats.delivered == COUNT
    assert stats.pushed > 0  # the push path carried part of the stream
    assert marks["received_at_kill"] < COUNT  # the kill landed mid-stream


def test_fallback_subscriber_gets_exactly_every_message_when_the_delivery_worker_is_killed(
        services: ServiceSet, tmp_path: Path) -> None:
    scenario = Scenario(services, tmp_path)
    with PushConsumer(services.bootstrap, scenario.reader.address, scenario.stream_id,
                      prefix=services.prefix) as consumer:
        run_with_kill(scenario, consumer, lambda: services.kill9("delivery-d1"), lambda: services.start_delivery())
        print(f"push consumer: {consumer.stats}")
        assert consumer.stats.received > 0


def test_fallback_subscriber_gets_exactly_every_message_when_the_sse_gateway_is_killed(
        services: ServiceSet, tmp_path: Path) -> None:
    scenario = Scenario(services, tmp_path)
    port = services.gateway_port  # type: ignore[attr-defined]
    url = services.urls["gateway-g1"]
    with SseSource(url, scenario.feed_id, subscriber=scenario.reader.address, heartbeat_s=1) as source:
        assert source.wait_connected(60)
        run_with_kill(scenario, source, lambda: services.kill9("gateway-g1"), lambda: start_gateway(services, port))
        print(f"sse source: {source.stats}")
        assert source.stats.reconnects > 0  # it lost the gateway and came back
