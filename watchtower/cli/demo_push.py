"""The demo's push story: push and push-with-pull-fallback subscribers through an SSE gateway that dies.

1. A feed with a PUSH subscriber and a PUSH_WITH_PULL_FALLBACK subscriber, both reading their push
   deliveries over Server-Sent Events from a standalone gateway (``watchtower gateway``), each with
   `Subscriber.stream` (every message verified against the owner's key chain, deduplicated, handed
   out once in ascending order).
2. Messages flow until both subscribers hold the first `KILL_AT`; the gateway is killed (kill -9)
   and the next messages are published while it is down. The fallback subscriber pulls them
   (get_since); the push subscriber waits. The gateway is started again on the same port and the
   push subscriber's SSE connection resumes with ``Last-Event-ID``, so the gateway resends what it
   missed; the last messages flow live.
3. Both end with the same messages 1..N, verified; the fallback one shows what it pulled.
4. The per-block bound: 30 PUSH subscribers on a feed allowing 10 deliveries per block get one
   message over 3 blocks of the block clock (1 s each), round-robin, none lost: each subscriber's
   own `PushConsumer` sees its delivery arrive, and the delivery worker's health file counts 30
   deliveries committed in 3 blocks.

Every step waits for what it needs, never for a fixed time (`demo_wait`): the delivery worker's
health file showing every partition restored before the first subscriber, the gateway's health
before a client connects, each subscriber holding the messages so far before the next phase, and
each wait is bounded, failing with the step's name.

`run_push_demo` starts its own stack (stream worker, projection/API, delivery worker, gateway) on a
running broker, so it also runs alone (`run_push_demo(bootstrap, prefix)`).
"""

from __future__ import annotations

import json
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import nacl.signing

from watchtower.cli.demo_wait import (
    STEP_TIMEOUT_S,
    DemoStepError,
    demo_step,
    read_health,
    wait_for,
    wait_worker_serving,
)
from watchtower.client.account import Account
from watchtower.client.http import ApiClient
from watchtower.client.push import PushConsumer
from watchtower.client.sdk import Publisher, create_feed, wait_until_visible
from watchtower.client.sse import SseSource
from watchtower.client.stream_modes import StreamStats
from watchtower.client.subscriber import Subscriber
from watchtower.local.stack import ServiceSet
from watchtower.protocol.stream.message import StreamMessage
from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import catalogue, topic_name, topic_prefix

PUBLISHED = 40
#: The gateway is killed after this many publishes and started again after `RESTART_AT`.
KILL_AT, RESTART_AT = 12, 28
BOUND, BOUNDED_SUBSCRIBERS = 10, 30


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_push_demo(bootstrap: str, prefix: str | None = None) -> None:
    """Start a stack for `prefix` (default: the deployment's) on `bootstrap`, tell the story, stop it."""
    prefix = prefix or topic_prefix()
    topics = ensure_topics(bootstrap, catalogue(prefix))
    partitions = next(t.partitions for t in topics if t.name == topic_name("messages", prefix))
    home = Path(tempfile.mkdtemp(prefix="wt-demo-push-"))
    logs = home / "logs"
    services = ServiceSet(bootstrap, prefix, logs, api_port=_free_port())
    services.start_worker("push-w1")
    services.start_projection("push-p1")
    delivery = services.start_delivery("push-d1")
    gateway_port = _free_port()
    try:
        t0 = time.monotonic()
        with demo_step("push: start the stream worker and the HTTP API", logs=logs):
            services.wait_ready(STEP_TIMEOUT_S)
        with demo_step("push: start the SSE gateway", logs=logs):
            gateway = services.start_gateway("push-sse", gateway_port)
            services.wait_ready(STEP_TIMEOUT_S, api_url=gateway)
        # Deliveries are only made once the worker has restored its partitions: wait for its health file.
        health = wait_worker_serving("push: the delivery worker takes its partitions", services.health_file(delivery),
                                     partitions, logs=logs)
        click.echo(f"  stream worker, API {services.api_url}, SSE gateway {gateway} and delivery worker "
                   f"(partitions {health['partitions']}) up after {time.monotonic() - t0:.1f}s")
        api = ApiClient(services.api_url)
        with demo_step("push: the PUSH and fallback subscribers through a gateway kill", logs=logs):
            show_push(api, services, gateway_port, home)
        with demo_step("push: the per-block bound", logs=logs):
            show_bound(api, services, delivery, home)
    finally:
        services.stop()


@dataclass
class _Reader:
    """One subscriber's `Subscriber.stream` over SSE, run in a thread until it has `PUBLISHED` messages."""

    label: str
    mode: str
    sub: Subscriber
    source: SseSource
    got: list[StreamMessage] = field(default_factory=list)
    error: BaseException | None = None
    done: bool = False
    changed: threading.Condition = field(default_factory=threading.Condition)

    @property
    def stats(self) -> StreamStats:
        """What `Subscriber.stream` counted (pushed, pulled, duplicates, pulls by cause)."""
        return self.sub.stream_stats or StreamStats()

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self._run, name=f"demo-{self.label}", daemon=True)
        thread.start()
        return thread

    def _run(self) -> None:
        try:
            # The main thread bounds each phase; the idle bound only ends a reader left behind by a failure.
            for msg in self.sub.stream(self.mode, self.source, pull_interval_s=2.0,
                                       idle_timeout_s=3 * STEP_TIMEOUT_S):
                with self.changed:
                    self.got.append(msg)
                    self.changed.notify_all()
                if len(self.got) >= PUBLISHED:
                    return
        except Exception as exc:  # shown by show_push, in the main thread
            self.error = exc
        finally:
            self.source.close()
            with self.changed:
                self.done = True
                self.changed.notify_all()

    def wait_for(self, count: int, step: str) -> None:
        """Block until this subscriber holds `count` messages; DemoStepError naming `step` otherwise."""
        with self.changed:
            self.changed.wait_for(lambda: len(self.got) >= count or self.done, STEP_TIMEOUT_S)
        if self.error is not None:
            raise DemoStepError(step, f"the {self.label} subscriber failed: {self.error}")
        if len(self.got) < count:
            sse = self.source.stats
            raise DemoStepError(step, f"the {self.label} subscriber holds {len(self.got)} of {count} messages "
                                      f"after {STEP_TIMEOUT_S:.0f}s (stream {self.stats}; SSE {sse})")


def show_push(api: ApiClient, services: ServiceSet, gateway_port: int, home: Path) -> None:
    """Steps 1-3 of the module docstring."""
    owner = Account(nacl.signing.SigningKey.generate(), name="push-owner", home=home)
    key = nacl.signing.SigningKey.generate()
    created = create_feed(api, owner, name="live-ticks", publisher_key_hex=bytes(key.verify_key).hex())
    sid, feed_id = created["stream_id"], created["feed_id"]
    wait_until_visible(api, sid, feed_id=feed_id, timeout_s=STEP_TIMEOUT_S)
    gateway = services.url_for(gateway_port)
    click.secho(f"  -- feed {feed_id}: a PUSH and a PUSH_WITH_PULL_FALLBACK subscriber, over SSE from {gateway}",
                bold=True)
    readers = []
    for label, mode in (("push", "PUSH"), ("fallback", "PUSH_WITH_PULL_FALLBACK")):
        account = Account(nacl.signing.SigningKey.generate(), name=f"push-{label}", home=home)
        api.command(account.sign("subscribe", sid, {"mode": mode}))
        source = SseSource(gateway, feed_id, subscriber=account.address, heartbeat_s=1)
        if not source.wait_connected(STEP_TIMEOUT_S):
            source.close()
            raise DemoStepError(f"push: the {label} subscriber connects", f"the SSE gateway at {gateway} did not "
                                f"stream within {STEP_TIMEOUT_S:.0f}s", logs=services.log_dir)
        sub = Subscriber(api, sid, expected_owner=owner.address)
        readers.append(_Reader(label, mode.lower().replace("_", "-"), sub, source))
        click.echo(f"  {label:8} {account.address[:14]}… subscribed {mode}; "
                   f"$ watchtower feed {feed_id} subscribe --mode {mode.lower().replace('_', '-')}")
    threads = [r.start() for r in readers]
    push, fallback = readers
    try:
        _publish_through_a_gateway_kill(api, services, gateway_port, owner, sid, key, readers)
    except BaseException:
        for r in readers:
            r.source.close()
        raise
    for thread in threads:  # each reader returned once it held every message (wait_for above)
        thread.join(STEP_TIMEOUT_S)
    expected = list(range(1, PUBLISHED + 1))
    for r in readers:
        seqs = [m.sequence for m in r.got]
        stats, sse = r.stats, r.source.stats
        resumed = (f"{sse.connects} SSE connections, the later ones resumed with Last-Event-ID" if sse.connects > 1
                   else "its SSE connection was still reconnecting when it was done")
        click.echo(f"  {r.label:8} received {len(seqs)} messages, 1..{PUBLISHED} exactly once, ascending and "
                   f"verified: {seqs == expected}; pushed {stats.pushed}, pulled {stats.pulled}, duplicates "
                   f"dropped {stats.duplicates}; {resumed}")
    same = [(m.sequence, m.publisher_sig) for m in push.got] == [(m.sequence, m.publisher_sig) for m in fallback.got]
    fb = fallback.stats
    click.echo(f"  both subscribers hold the same signed messages: {same}; the fallback one pulled {fb.pulled} "
               f"of them with get_since ({fb.fallback_pulls} pulls while its SSE connection was down, "
               f"{fb.gap_pulls} on a gap, {fb.timer_pulls} on the timer) and took the other {fb.pushed} pushed")
    if not same or [m.sequence for m in push.got] != expected:
        raise DemoStepError("push: both subscribers end with the same messages",
                            f"push got {[m.sequence for m in push.got]}, fallback {[m.sequence for m in fallback.got]}",
                            logs=services.log_dir)


def _publish_through_a_gateway_kill(api: ApiClient, services: ServiceSet, gateway_port: int, owner: Account,
                                    sid: str, key: nacl.signing.SigningKey, readers: list[_Reader]) -> None:
    """Step 2 of the module docstring: each phase starts once the previous one reached the subscribers."""
    push, fallback = readers
    publisher = Publisher(api, owner, sid, key)
    t0 = time.monotonic()

    def publish(first: int, last: int) -> None:
        for i in range(first, last + 1):
            publisher.publish("tick", json.dumps({"i": i}).encode(), {"n": float(i)})

    publish(1, KILL_AT)
    for r in readers:
        r.wait_for(KILL_AT, f"push: the first {KILL_AT} messages reach the {r.label} subscriber")
    services.kill9("gateway-push-sse")
    click.echo(f"  [{time.monotonic() - t0:4.1f}s] published {KILL_AT}, both subscribers hold them; the SSE "
               f"gateway is killed (kill -9)")
    publish(KILL_AT + 1, RESTART_AT)
    fallback.wait_for(RESTART_AT, "push: the fallback subscriber pulls while the gateway is down")
    click.echo(f"  [{time.monotonic() - t0:4.1f}s] published {RESTART_AT}: the fallback subscriber pulled them, "
               f"the push one waits with {len(push.got)}")
    gateway = services.start_gateway("push-sse", gateway_port)
    with demo_step("push: restart the SSE gateway", logs=services.log_dir):
        services.wait_ready(STEP_TIMEOUT_S, api_url=gateway)
    click.echo(f"  [{time.monotonic() - t0:4.1f}s] the gateway is started again on the same port")
    push.wait_for(RESTART_AT, "push: the push subscriber resumes with Last-Event-ID after the gateway restart")
    publish(RESTART_AT + 1, PUBLISHED)
    for r in readers:
        r.wait_for(PUBLISHED, f"push: all {PUBLISHED} messages reach the {r.label} subscriber")
    click.echo(f"  [{time.monotonic() - t0:4.1f}s] published {PUBLISHED} messages; both subscribers hold them")


def show_bound(api: ApiClient, services: ServiceSet, delivery: str, home: Path) -> None:
    """Step 4 of the module docstring."""
    owner = Account(nacl.signing.SigningKey.generate(), name="bound-owner", home=home)
    key = nacl.signing.SigningKey.generate()
    created = create_feed(api, owner, name="bounded-push", publisher_key_hex=bytes(key.verify_key).hex(),
                          max_push_deliveries_per_block=BOUND)
    sid, feed_id = created["stream_id"], created["feed_id"]
    wait_until_visible(api, sid, feed_id=feed_id, timeout_s=STEP_TIMEOUT_S)
    click.secho(f"  -- feed {feed_id}: {BOUNDED_SUBSCRIBERS} PUSH subscribers, max_push_deliveries_per_block "
                f"{BOUND}", bold=True)
    accounts = [Account(nacl.signing.SigningKey.generate(), home=home) for _ in range(BOUNDED_SUBSCRIBERS)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda a: api.command(a.sign("subscribe", sid, {"mode": "PUSH"})), accounts))
    # Each subscriber's own push consumer (its partition of `deliveries`, read_committed) shows that
    # every one is served; the delivery worker's health file counts the deliveries and the blocks
    # whose budget paid for them.
    health = services.health_file(delivery)
    before = _health(health, "push: the delivery worker settles before the bounded publish",
                     newer_than_ms=int(time.time() * 1000), ready=lambda h: h.get("pending") == 0,
                     logs=services.log_dir)
    consumers = [PushConsumer(services.bootstrap, a.address, sid, prefix=services.prefix) for a in accounts]
    arrived: dict[str, float] = {}

    def everyone_served() -> bool:
        for c in consumers:
            if c.subscriber_address not in arrived and c.poll(0):
                arrived[c.subscriber_address] = time.time()
        return len(arrived) == len(consumers)

    try:
        Publisher(api, owner, sid, key).publish("tick", b'{"hello":"everyone"}')
        wait_for(f"push: one message reaches all {BOUNDED_SUBSCRIBERS} bounded subscribers", everyone_served,
                 seen=lambda: f"{len(arrived)} of {BOUNDED_SUBSCRIBERS} got it", logs=services.log_dir)
    finally:
        for c in consumers:
            c.close()
    after = _health(health, "push: the delivery worker counts the bounded deliveries",
                    newer_than_ms=int(max(arrived.values()) * 1000),
                    ready=lambda h: h.get("delivered", 0) >= before.get("delivered", 0) + BOUNDED_SUBSCRIBERS,
                    logs=services.log_dir)
    delivered = after["delivered"] - before.get("delivered", 0)
    blocks = after["blocks"] - before.get("blocks", 0)
    span = max(arrived.values()) - min(arrived.values())
    click.echo(f"  one publish: all {len(arrived)} subscribers received it, the first and the last "
               f"{span:.1f}s apart; the delivery worker committed {delivered} deliveries in {blocks} blocks "
               f"(at most {BOUND} a block: at least {-(-BOUNDED_SUBSCRIBERS // BOUND)} blocks)")
    click.echo("  the subscribers not reached in a block stayed pending for the next ones, visited round-robin "
               "by address; none was lost")
    if delivered != BOUNDED_SUBSCRIBERS or blocks < -(-BOUNDED_SUBSCRIBERS // BOUND):
        raise DemoStepError("push: the per-block bound", f"expected {BOUNDED_SUBSCRIBERS} deliveries over at "
                            f"least {-(-BOUNDED_SUBSCRIBERS // BOUND)} blocks; the worker counted {delivered} "
                            f"in {blocks}", logs=services.log_dir)


def _health(path: Path, step: str, *, newer_than_ms: int, ready: Callable[[dict[str, Any]], bool],
            logs: Path) -> dict[str, Any]:
    """The delivery worker's health (docs/push.md) once written after `newer_than_ms` and `ready`."""

    def check() -> dict[str, Any] | None:
        current = read_health(path)
        return current if current.get("updated_ms", 0) > newer_than_ms and ready(current) else None

    return wait_for(step, check, seen=lambda: f"{path}: {json.dumps(read_health(path))[:300]}", logs=logs)
