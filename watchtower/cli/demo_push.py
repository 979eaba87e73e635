"""The demo's push story: push and push-with-pull-fallback subscribers through an SSE gateway that dies.

1. A feed with a PUSH subscriber and a PUSH_WITH_PULL_FALLBACK subscriber, both reading their push
   deliveries over Server-Sent Events from a standalone gateway (``watchtower gateway``), each with
   `Subscriber.stream` (every message verified against the owner's key chain, deduplicated, handed
   out once in ascending order).
2. Messages flow; the gateway is killed (kill -9) mid-stream and started again on the same port.
   The fallback subscriber pulls (get_since) while it is down; the push subscriber waits, and its
   SSE connection resumes with ``Last-Event-ID``, so the gateway resends what it missed.
3. Both end with the same messages 1..N, verified; the fallback one shows what it pulled.
4. The per-block bound: 30 PUSH subscribers on a feed allowing 10 deliveries per block get one
   message over 3 blocks of the block clock (1 s each), round-robin, none lost: each subscriber's
   own `PushConsumer` sees its delivery arrive, and the delivery worker's health file counts 30
   deliveries committed in 3 blocks.

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

from watchtower.client.account import Account
from watchtower.client.http import ApiClient
from watchtower.client.push import PushConsumer
from watchtower.client.sdk import Publisher, Subscriber, create_feed, wait_until_visible
from watchtower.client.sse import SseSource
from watchtower.client.stream_modes import StreamStats
from watchtower.local.stack import ServiceSet
from watchtower.protocol.message import StreamMessage
from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import catalogue, topic_prefix

PUBLISHED = 40
#: The gateway is killed after this many publishes and started again after `RESTART_AT`.
KILL_AT, RESTART_AT = 12, 28
BOUND, BOUNDED_SUBSCRIBERS = 10, 30
WAIT_S = 60.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_push_demo(bootstrap: str, prefix: str | None = None) -> None:
    """Start a stack for `prefix` (default: the deployment's) on `bootstrap`, tell the story, stop it."""
    prefix = prefix or topic_prefix()
    ensure_topics(bootstrap, catalogue(prefix))
    home = Path(tempfile.mkdtemp(prefix="wt-demo-push-"))
    services = ServiceSet(bootstrap, prefix, home / "logs", api_port=_free_port())
    services.start_worker("push-w1")
    services.start_projection("push-p1")
    delivery = services.start_delivery("push-d1")
    gateway_port = _free_port()
    try:
        t0 = time.monotonic()
        services.wait_ready()
        gateway = services.start_gateway("push-sse", gateway_port)
        services.wait_ready(api_url=gateway)
        click.echo(f"  stream worker, API {services.api_url}, delivery worker and SSE gateway {gateway} up "
                   f"after {time.monotonic() - t0:.1f}s")
        api = ApiClient(services.api_url)
        show_push(api, services, gateway_port, home)
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
            for msg in self.sub.stream(self.mode, self.source, pull_interval_s=2.0, idle_timeout_s=WAIT_S):
                self.got.append(msg)
                if len(self.got) >= PUBLISHED:
                    return
        except Exception as exc:  # shown by show_push, in the main thread
            self.error = exc
        finally:
            self.source.close()


def show_push(api: ApiClient, services: ServiceSet, gateway_port: int, home: Path) -> None:
    """Steps 1-3 of the module docstring."""
    owner = Account(nacl.signing.SigningKey.generate(), name="push-owner", home=home)
    key = nacl.signing.SigningKey.generate()
    created = create_feed(api, owner, name="live-ticks", publisher_key_hex=bytes(key.verify_key).hex())
    sid, feed_id = created["stream_id"], created["feed_id"]
    wait_until_visible(api, sid, feed_id=feed_id)
    gateway = services.url_for(gateway_port)
    click.secho(f"  -- feed {feed_id}: a PUSH and a PUSH_WITH_PULL_FALLBACK subscriber, over SSE from {gateway}",
                bold=True)
    readers = []
    for label, mode in (("push", "PUSH"), ("fallback", "PUSH_WITH_PULL_FALLBACK")):
        account = Account(nacl.signing.SigningKey.generate(), name=f"push-{label}", home=home)
        api.command(account.sign("subscribe", sid, {"mode": mode}))
        source = SseSource(gateway, feed_id, subscriber=account.address, heartbeat_s=1)
        if not source.wait_connected(WAIT_S):
            raise click.ClickException(f"the SSE gateway at {gateway} did not stream within {WAIT_S:.0f}s")
        sub = Subscriber(api, sid, expected_owner=owner.address)
        readers.append(_Reader(label, mode.lower().replace("_", "-"), sub, source))
        click.echo(f"  {label:8} {account.address[:14]}… subscribed {mode}; "
                   f"$ watchtower feed {feed_id} subscribe --mode {mode.lower().replace('_', '-')}")
    threads = [r.start() for r in readers]

    publisher = Publisher(api, owner, sid, key)
    t0 = time.monotonic()
    for i in range(1, PUBLISHED + 1):
        publisher.publish("tick", json.dumps({"i": i}).encode(), {"n": float(i)})
        if i == KILL_AT:
            services.kill9("gateway-push-sse")
            click.echo(f"  [{time.monotonic() - t0:4.1f}s] published {i}; the SSE gateway is killed (kill -9)")
        elif i == RESTART_AT:
            services.start_gateway("push-sse", gateway_port)
            click.echo(f"  [{time.monotonic() - t0:4.1f}s] published {i}; the gateway is started again")
    click.echo(f"  [{time.monotonic() - t0:4.1f}s] published {PUBLISHED} messages")
    for thread in threads:
        thread.join(WAIT_S * 2)
    expected = list(range(1, PUBLISHED + 1))
    for r in readers:
        if r.error is not None:
            raise click.ClickException(f"the {r.label} subscriber failed: {r.error}")
        seqs = [m.sequence for m in r.got]
        stats, sse = r.stats, r.source.stats
        resumed = (f"{sse.connects} SSE connections, the later ones resumed with Last-Event-ID" if sse.connects > 1
                   else "its SSE connection was still reconnecting when it was done")
        click.echo(f"  {r.label:8} received {len(seqs)} messages, 1..{PUBLISHED} exactly once, ascending and "
                   f"verified: {seqs == expected}; pushed {stats.pushed}, pulled {stats.pulled}, duplicates "
                   f"dropped {stats.duplicates}; {resumed}")
    push, fallback = readers
    same = [(m.sequence, m.publisher_sig) for m in push.got] == [(m.sequence, m.publisher_sig) for m in fallback.got]
    fb = fallback.stats
    click.echo(f"  both subscribers hold the same signed messages: {same}; the fallback one pulled {fb.pulled} "
               f"of them with get_since ({fb.fallback_pulls} pulls while its SSE connection was down, "
               f"{fb.gap_pulls} on a gap, {fb.timer_pulls} on the timer) and took the other {fb.pushed} pushed")
    if not same or [m.sequence for m in push.got] != expected:
        raise click.ClickException("the push and fallback subscribers did not end with the same messages")


def show_bound(api: ApiClient, services: ServiceSet, delivery: str, home: Path) -> None:
    """Step 4 of the module docstring."""
    owner = Account(nacl.signing.SigningKey.generate(), name="bound-owner", home=home)
    key = nacl.signing.SigningKey.generate()
    created = create_feed(api, owner, name="bounded-push", publisher_key_hex=bytes(key.verify_key).hex(),
                          max_push_deliveries_per_block=BOUND)
    sid, feed_id = created["stream_id"], created["feed_id"]
    wait_until_visible(api, sid, feed_id=feed_id)
    click.secho(f"  -- feed {feed_id}: {BOUNDED_SUBSCRIBERS} PUSH subscribers, max_push_deliveries_per_block "
                f"{BOUND}", bold=True)
    accounts = [Account(nacl.signing.SigningKey.generate(), home=home) for _ in range(BOUNDED_SUBSCRIBERS)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda a: api.command(a.sign("subscribe", sid, {"mode": "PUSH"})), accounts))
    # Each subscriber's own push consumer (its partition of `deliveries`, read_committed) shows that
    # every one is served; the delivery worker's health file counts the deliveries and the blocks
    # whose budget paid for them.
    health = services.health_file(delivery)
    before = _health(health, newer_than_ms=int(time.time() * 1000), ready=lambda h: h.get("pending") == 0)
    consumers = [PushConsumer(services.bootstrap, a.address, sid, prefix=services.prefix) for a in accounts]
    arrived: dict[str, float] = {}
    try:
        Publisher(api, owner, sid, key).publish("tick", b'{"hello":"everyone"}')
        deadline = time.monotonic() + WAIT_S
        while len(arrived) < len(consumers) and time.monotonic() < deadline:
            for c in consumers:
                if c.subscriber_address not in arrived and c.poll(0):
                    arrived[c.subscriber_address] = time.time()
            time.sleep(0.01)
    finally:
        for c in consumers:
            c.close()
    if len(arrived) != BOUNDED_SUBSCRIBERS:
        raise click.ClickException(f"only {len(arrived)} of {BOUNDED_SUBSCRIBERS} subscribers got the message")
    after = _health(health, newer_than_ms=int(max(arrived.values()) * 1000),
                    ready=lambda h: h.get("delivered", 0) >= before.get("delivered", 0) + BOUNDED_SUBSCRIBERS)
    delivered = after["delivered"] - before.get("delivered", 0)
    blocks = after["blocks"] - before.get("blocks", 0)
    span = max(arrived.values()) - min(arrived.values())
    click.echo(f"  one publish: all {len(arrived)} subscribers received it, the first and the last "
               f"{span:.1f}s apart; the delivery worker committed {delivered} deliveries in {blocks} blocks "
               f"(at most {BOUND} a block: at least {-(-BOUNDED_SUBSCRIBERS // BOUND)} blocks)")
    click.echo("  the subscribers not reached in a block stayed pending for the next ones, visited round-robin "
               "by address; none was lost")
    if delivered != BOUNDED_SUBSCRIBERS or blocks < -(-BOUNDED_SUBSCRIBERS // BOUND):
        raise click.ClickException(f"expected {BOUNDED_SUBSCRIBERS} deliveries over at least "
                                   f"{-(-BOUNDED_SUBSCRIBERS // BOUND)} blocks; the worker counted {delivered} "
                                   f"in {blocks}")


def _health(path: Path, *, newer_than_ms: int, ready: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The delivery worker's health (docs/push.md) once written after `newer_than_ms` and `ready`."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            current = json.loads(path.read_text())
        except (OSError, ValueError):  # not written yet, or replaced while read
            current = {}
        if isinstance(current, dict) and current.get("updated_ms", 0) > newer_than_ms and ready(current):
            return current
        if time.monotonic() > deadline:
            raise click.ClickException(f"the delivery worker's health file {path} did not show the deliveries "
                                       f"within {WAIT_S:.0f}s (last: {current})")
        time.sleep(0.2)
