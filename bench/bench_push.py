"""Benchmark of push delivery and the SSE gateway, each beside a raw confluent-kafka baseline in one run.

Starts an embedded KRaft broker, the catalogue's topics under a fresh prefix, one stream-actor
worker, one projection/API worker, the push delivery worker and a standalone SSE gateway (as
`watchtower up` does), then measures:

1. fan-out rate: `--fanout-subscribers` PUSH subscribers on a feed whose per-block bounds do not
   bind, `--fanout-messages` messages published while the delivery worker is stopped, then the
   worker started: deliveries/s from the first delivery's record timestamp on ``deliveries`` to
   the moment the last one is read by a read_committed consumer (so the worker's commits count;
   its process start, group join and fold do not, and are shown apart). Baseline: the very
   same records (keys, values, headers, read back from ``deliveries``) produced raw to a topic
   with as many partitions by an idempotent acks=all producer, timed from the first produce to
   the last acknowledgement. Ratio worker/raw.
2. SSE end to end: `--sse-connections` concurrent SSE connections (aiohttp clients in this
   process) to ``GET /v1/feeds/{id}/events`` on the gateway while messages are published at
   `--sse-rate` msg/s (open loop, signed commands through the command transport) for
   `--seconds`; the connections follow the feed's messages (no ``subscriber=``: the page's use).
   Every event is timed from its publish's *scheduled* send to its receipt on each connection;
   beside it the publish's acknowledgement and the first connection's receipt (where the time
   goes), the connections the gateway closed as ``lagged`` and the CPU seconds per process.
   Baseline: raw produce -> consume at the same rate and size, timed the same way.
3. publish latency vs. subscriber count: one feed per count in `--subscribers` (default 10,
   1,000, 10,000 PUSH subscribers, created with signed subscribe commands sent concurrently),
   then acknowledged publishes through the SDK (`Publisher.publish`, HTTP API) at
   `--publish-rate` msg/s for `--seconds` on each feed in turn, timed from the scheduled send
   (so a slow reply delays the next send and counts against it). The delivery worker fans out
   meanwhile, so this shows whether fan-out slows the publish path. p99 ratio of each count to
   the first (target <= 1.2). Then the largest count once more with the delivery worker stopped,
   and the CPU seconds of every process per leg, to show where the time goes.

    .venv/bin/python bench/bench_push.py                      # default sizes, a few minutes on 2 cores
    .venv/bin/python bench/bench_push.py --full [--json out.json] [--plot out.png]

A script, not a test (pytest only collects `tests/`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import aiohttp
import nacl.signing
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_fixture import embedded_spec, free_ports
from tqdm import tqdm

from watchtower.client.account import Account
from watchtower.client.http import ApiClient
from watchtower.client.sdk import Publisher, create_feed, wait_until_visible
from watchtower.gateway.transport import CommandClient
from watchtower.local.broker import LocalKafka
from watchtower.local.stack import ServiceSet
from watchtower.protocol.constants import MAX_UINT32
from watchtower.protocol.signed_command import Command, sign_command
from watchtower.protocol.signing import sign_message
from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import catalogue, topic_name
from watchtower.topics.connection import kafka_config

TARGET_P99_RATIO = 1.2
#: Phase 2 stops waiting for events after this long without a new one.
STALL_S = 30.0
#: A cycle bound no fan-out in this benchmark reaches (phase 1 measures the worker, not the bound).
UNBOUNDED_CYCLES = 10**15


def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of unsorted values; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def dist_ms(seconds: Sequence[float]) -> dict[str, float]:
    ms = [s * 1000 for s in seconds]
    return {"n": len(ms), "p50": pct(ms, 50), "p90": pct(ms, 90), "p99": pct(ms, 99),
            "max": max(ms) if ms else math.nan}


def header(headers: Sequence[Any] | None, name: str) -> str | None:
    for key, value in headers or ():
        if key == name and value is not None:
            return value.decode()
    return None


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (Linux /proc), 0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_by_process(services: ServiceSet) -> dict[str, float]:
    return {**{name: cpu_s(pid) for name, pid in services.pids().items()}, "bench client": cpu_s(os.getpid())}


# ----------------------------------------------------------------------------- feeds
class Feed:
    """A feed created through the SDK; publishes either through `Publisher` (HTTP) or pre-signed commands."""

    def __init__(self, api: ApiClient, home: Path, name: str, **config: Any) -> None:
        self.owner = Account(nacl.signing.SigningKey.generate(), name=f"{name}-owner", home=home)
        self.key = nacl.signing.SigningKey.generate()
        created = create_feed(api, self.owner, name=name, publisher_key_hex=bytes(self.key.verify_key).hex(),
                              timeout_s=120, **config)
        self.stream_id: str = created["stream_id"]
        self.feed_id: int = created["feed_id"]
        wait_until_visible(api, self.stream_id, feed_id=self.feed_id, timeout_s=120)
        self.publisher = Publisher(api, self.owner, self.stream_id, self.key, timeout_s=120)
        self.head = 0

    def publish_cmd(self, size: int) -> Command:
        """The next publish as a signed command (for the command transport); advances the local head."""
        self.head += 1
        msg = sign_message(stream_id=self.stream_id, sequence=self.head, timestamp_unix_ms=int(time.time() * 1000),
                           kind="bench", payload=self.head.to_bytes(8, "big") + os.urandom(max(0, size - 8)),
                           signing_key=self.key, content_type="application/octet-stream")
        return self.owner.sign("publish", self.stream_id, msg.to_json_dict())


def subscribe_many(client: CommandClient, stream_id: str, n: int, mode: str = "PUSH") -> None:
    """`n` fresh accounts subscribe to `stream_id` with signed commands, all in flight at once."""
    keys = [nacl.signing.SigningKey.generate() for _ in range(n)]
    cmds = [sign_command(k, "subscribe", stream_id, 1, {"mode": mode}) for k in keys]
    with tqdm(total=n, desc=f"subscribing {n:,} ({mode})", unit="sub", leave=False) as bar:
        for start in range(0, n, 2000):
            futures = [client.submit(c) for c in cmds[start:start + 2000]]
            client.flush()
            for f in futures:
                f.result(600)
                bar.update()


def submit_all(client: CommandClient, cmds: list[Command], desc: str) -> None:
    with tqdm(total=len(cmds), desc=desc, unit="msg", leave=False, mininterval=0.5) as bar:
        for start in range(0, len(cmds), 2000):
            futures = [client.submit(c) for c in cmds[start:start + 2000]]
            client.flush()
            for f in futures:
                f.result(600)
                bar.update()


# ----------------------------------------------------------------------------- 1. fan-out rate
def read_deliveries(bootstrap: str, topic: str, stream_id: str, expect: int,
                    timeout_s: float) -> list[tuple[Any, ...]]:
    """Every push delivery of `stream_id` on `topic` (read_committed), until `expect` are read:
    (key, value, headers, record timestamp ms, local receipt time)."""
    consumer = Consumer(kafka_config(bootstrap, **{"group.id": f"wt-bench-push-{uuid.uuid4().hex}",
                                                   "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                                   "isolation.level": "read_committed", "log_level": 3}))
    parts = consumer.list_topics(topic, timeout=30).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    got: list[tuple[Any, ...]] = []
    deadline = time.monotonic() + timeout_s
    try:
        with tqdm(total=expect, desc="1. deliveries read back", unit="rec", leave=False) as bar:
            while len(got) < expect:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{len(got)} of {expect} deliveries appeared within {timeout_s:.0f}s")
                for m in consumer.consume(1000, 0.5):
                    if m.error() is not None:
                        continue
                    hs = list(m.headers() or [])
                    if header(hs, "wt:push") != "1" or header(hs, "wt:push:stream") != stream_id:
                        continue
                    got.append((m.key(), m.value(), hs, m.timestamp()[1], time.time()))
                    bar.update()
    finally:
        consumer.close()
    return got


def raw_produce(bootstrap: str, topic: str, records: Sequence[tuple[Any, ...]]) -> float:
    """records/s of an idempotent acks=all produce of `records` (key, value, headers), first send to last ack."""
    producer = Producer(kafka_config(bootstrap, **{"enable.idempotence": True, "acks": "all", "linger.ms": 5,
                                                   "partitioner": "murmur2_random", "log_level": 3}))
    acked = [0]

    def done(err: Any, _msg: Any) -> None:
        if err is None:
            acked[0] += 1

    t0 = time.perf_counter()
    for key, value, hs, *_ in records:
        while True:
            try:
                producer.produce(topic, key=key, value=value, headers=hs, on_delivery=done)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    producer.flush(300)
    elapsed = time.perf_counter() - t0
    if acked[0] != len(records):
        raise RuntimeError(f"raw produce acknowledged {acked[0]} of {len(records)} records")
    return len(records) / elapsed


def fanout(args: argparse.Namespace, services: ServiceSet, api: ApiClient, client: CommandClient,
           home: Path, partitions: int) -> dict[str, Any]:
    feed = Feed(api, home, "bench-fanout", max_push_deliveries_per_block=MAX_UINT32,
                max_push_cycles_per_block=UNBOUNDED_CYCLES)
    m, n = args.fanout_subscribers, args.fanout_messages
    subscribe_many(client, feed.stream_id, m)
    services.kill9("delivery-d1")  # the backlog is built first, so the worker's rate is not the publisher's
    submit_all(client, [feed.publish_cmd(args.payload) for _ in range(n)], f"1. publishing {n:,}")
    t_start = time.time()
    services.start_delivery("d1")
    topic = topic_name("deliveries", services.prefix)
    got = read_deliveries(services.bootstrap, topic, feed.stream_id, m * n, timeout_s=args.timeout)
    stamps = sorted(g[3] for g in got)
    span_s = max(1e-3, (stamps[-1] - stamps[0]) / 1000)
    last_seen = max(g[4] for g in got)
    # From the first delivery's produce to the last one visible to a read_committed reader: the
    # worker's work including its commits (process start, group join and fold are before it).
    worker_rate = len(got) / max(1e-3, last_seen - stamps[0] / 1000)
    produce_rate = (len(got) - 1) / span_s
    wall_rate = len(got) / (last_seen - t_start)
    raw_topic = f"{services.prefix}.bench.raw-deliveries"
    admin = AdminClient(kafka_config(services.bootstrap))
    admin.create_topics([NewTopic(raw_topic, partitions, 1)])[raw_topic].result(30)
    raw_rate = raw_produce(services.bootstrap, raw_topic, got)
    unique = len({(g[2] and header(g[2], "wt:push:sequence"), g[0]) for g in got})
    return {"subscribers": m, "messages": n, "deliveries": len(got), "unique_deliveries": unique,
            "value_bytes_mean": sum(len(g[1] or b"") for g in got) / len(got),
            "worker_deliveries_per_s": worker_rate, "worker_produce_span_per_s": produce_rate,
            "worker_deliveries_per_s_wall": wall_rate,
            "raw_produce_rec_per_s": raw_rate, "ratio": worker_rate / raw_rate}


# ----------------------------------------------------------------------------- 2. SSE end to end
async def _sse_reader(session: aiohttp.ClientSession, url: str, ready: asyncio.Event, expect: set[int],
                      received: dict[int, list[float]], stop: asyncio.Event, lagged: list[str]) -> None:
    async with session.get(url, headers={"Accept": "text/event-stream"}) as resp:
        if resp.status != 200:
            raise RuntimeError(f"SSE {url} answered {resp.status}: {(await resp.text())[:300]}")
        ready.set()
        # Chunks, not lines: 100 connections x 100 events/s is 40,000 lines/s, and this one process
        # must not be what the benchmark measures. Only the `id:` field (the sequence) is needed.
        buf = b""
        async for chunk in resp.content.iter_any():
            now = time.perf_counter()
            buf += chunk
            *events, buf = buf.split(b"\n\n")
            for event in events:
                if b"event: lagged" in event or b"event:lagged" in event:
                    lagged.append(url)
                    return
                at = event.find(b"id:")
                if at < 0 or (at > 0 and event[at - 1:at] != b"\n"):
                    continue  # a heartbeat comment or a non-message event
                end = event.find(b"\n", at)
                seq = int(event[at + 3:end if end >= 0 else len(event)].strip())
                if seq in expect:
                    received.setdefault(seq, []).append(now)
            if stop.is_set():
                return


def _stamp(into: dict[int, float], seq: int) -> Any:
    def done(_f: Future[dict[str, Any]]) -> None:
        into[seq] = time.perf_counter()

    return done


async def _sse_run(url: str, conns: int, feed: Feed, client: CommandClient, rate: float, seconds: float,
                   size: int, timeout_s: float) -> tuple[list[float], list[float], list[float], int, int, int]:
    n = int(rate * seconds)
    first = feed.head + 1
    expect = set(range(first, first + n))
    received: dict[int, list[float]] = {}
    lagged: list[str] = []
    stop = asyncio.Event()
    readies = [asyncio.Event() for _ in range(conns)]
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tasks = [asyncio.create_task(_sse_reader(session, url, readies[i], expect, received, stop, lagged))
                 for i in range(conns)]
        all_ready: asyncio.Future[Any] = asyncio.ensure_future(asyncio.gather(*(r.wait() for r in readies)))
        waited: list[asyncio.Future[Any]] = [all_ready, *tasks]
        done, _ = await asyncio.wait(waited, timeout=120, return_when=asyncio.FIRST_COMPLETED)
        if all_ready not in done:  # a connection was refused (or none answered): say why
            all_ready.cancel()
            for t in tasks:
                t.cancel()
            failed = [t.exception() for t in done if t is not all_ready and not t.cancelled() and t.exception()]
            raise RuntimeError(f"the SSE connections did not all start: {failed[:1] or 'timeout'}")
        await asyncio.sleep(1.0)  # every connection subscribed to the live tail
        cmds = [feed.publish_cmd(size) for _ in range(n)]
        due: dict[int, float] = {}
        acked: dict[int, float] = {}
        t0 = time.perf_counter() + 0.2
        bar = tqdm(cmds, desc=f"2. SSE publishes @{rate:g}/s", unit="msg", leave=False, mininterval=0.5)
        for i, cmd in enumerate(bar):
            due[first + i] = t0 + i / rate
            delay = due[first + i] - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            fut: Future[dict[str, Any]] = client.submit(cmd)
            fut.add_done_callback(_stamp(acked, first + i))
            client.producer.poll(0)
        client.flush()
        # Wait for every connection to see every message; stop early when they all ended (e.g. a
        # `lagged` close) or nothing more arrived for STALL_S (what is missing is reported).
        deadline = time.monotonic() + timeout_s
        seen, last_change = 0, time.monotonic()
        with tqdm(total=n * conns, desc="2. SSE events received", unit="ev", leave=False, mininterval=0.5) as wait:
            while seen < n * conns and time.monotonic() < deadline and time.monotonic() - last_change < STALL_S:
                if all(t.done() for t in tasks):
                    break
                await asyncio.sleep(0.2)
                now_seen = sum(len(v) for v in received.values())
                if now_seen != seen:
                    wait.update(now_seen - seen)
                    seen, last_change = now_seen, time.monotonic()
        stop.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    lat = [t - due[seq] for seq, times in received.items() for t in times]
    # Where the time goes: the publish's acknowledgement, and the first connection to see each message.
    ack = [t - due[seq] for seq, t in acked.items()]
    first_seen = [min(times) - due[seq] for seq, times in received.items()]
    return lat, ack, first_seen, sum(len(v) for v in received.values()), n * conns, len(lagged)


def raw_paced(bootstrap: str, topic: str, rate: float, seconds: float, size: int) -> list[float]:
    """produce -> consume latencies at `rate`/s, from each record's scheduled send (carried in the value)."""
    n = int(rate * seconds)
    consumer = Consumer(kafka_config(bootstrap, **{"group.id": f"wt-bench-raw-{uuid.uuid4().hex}",
                                                   "enable.auto.commit": False, "fetch.wait.max.ms": 10,
                                                   "log_level": 3}))
    consumer.assign([TopicPartition(topic, 0, 0)])
    producer = Producer(kafka_config(bootstrap, **{"enable.idempotence": True, "acks": "all", "linger.ms": 2,
                                                   "log_level": 3}))
    lat: list[float] = []
    stop = threading.Event()

    def consume() -> None:
        while not stop.is_set() and len(lat) < n:
            for m in consumer.consume(100, 0.1):
                if m.error() is None:
                    lat.append(time.perf_counter() - int.from_bytes((m.value() or b"")[:8], "big") / 1e9)

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    filler = os.urandom(max(0, size - 8))
    t0 = time.perf_counter() + 0.5
    for i in tqdm(range(n), desc=f"2. raw paced @{rate:g}/s", unit="msg", leave=False, mininterval=0.5):
        due = t0 + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        producer.produce(topic, key=b"raw", value=int(due * 1e9).to_bytes(8, "big") + filler, partition=0)
        producer.poll(0)
    producer.flush(60)
    thread.join(60)
    stop.set()
    consumer.close()
    return lat


def sse_e2e(args: argparse.Namespace, services: ServiceSet, gateway_url: str, api: ApiClient,
            client: CommandClient, home: Path) -> dict[str, Any]:
    feed = Feed(api, home, "bench-sse")
    url = f"{gateway_url}/v1/feeds/{feed.feed_id}/events?heartbeat_s=5"
    cpu0 = cpu_by_process(services)
    lat, ack, first_seen, got, expected, lagged = asyncio.run(_sse_run(
        url, args.sse_connections, feed, client, args.sse_rate, args.seconds, args.payload, args.timeout))
    cpu = {name: round(spent - cpu0.get(name, 0.0), 1) for name, spent in cpu_by_process(services).items()}
    raw_topic = f"{services.prefix}.bench.raw-sse"
    admin = AdminClient(kafka_config(services.bootstrap))
    admin.create_topics([NewTopic(raw_topic, 1, 1)])[raw_topic].result(30)
    raw = raw_paced(services.bootstrap, raw_topic, args.sse_rate, args.seconds, args.payload)
    return {"connections": args.sse_connections, "rate": args.sse_rate, "events_received": got,
            "events_expected": expected, "connections_lagged": lagged, "sse": dist_ms(lat), "publish_ack": dist_ms(ack),
            "first_connection": dist_ms(first_seen), "raw": dist_ms(raw), "cpu_s": cpu,
            "p99_ratio": pct(lat, 99) / pct(raw, 99),
            "sse_samples_ms": [round(x * 1000, 3) for x in lat[:: max(1, len(lat) // 20_000)]],
            "raw_samples_ms": [round(x * 1000, 3) for x in raw]}


# ----------------------------------------------------------------------------- 3. publish p99 vs subscribers
def paced_sdk_publish(feed: Feed, rate: float, seconds: float, size: int, desc: str) -> list[float]:
    """Ack latencies (s) of `Publisher.publish` at `rate`/s, each from its scheduled send."""
    n = int(rate * seconds)
    filler = os.urandom(max(0, size - 8))
    lat = []
    t0 = time.perf_counter() + 0.1
    for i in tqdm(range(n), desc=desc, unit="msg", leave=False, mininterval=0.5):
        due = t0 + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        feed.publisher.publish("bench", i.to_bytes(8, "big") + filler, content_type="application/octet-stream")
        lat.append(time.perf_counter() - due)
    return lat


def publish_vs_subscribers(args: argparse.Namespace, services: ServiceSet, api: ApiClient, client: CommandClient,
                           home: Path) -> dict[str, Any]:
    feeds: list[tuple[int, Feed]] = []
    for count in args.subscribers:
        feed = Feed(api, home, f"bench-subs-{count}", max_subscribers=max(count, 1))
        subscribe_many(client, feed.stream_id, count)
        feed.publisher.sync()
        feeds.append((count, feed))
    samples: dict[int, list[float]] = {count: [] for count, _ in feeds}
    cpu: dict[int, dict[str, float]] = {count: {} for count, _ in feeds}
    for count, feed in feeds:  # warm-up: the first publishes of a feed load its state
        paced_sdk_publish(feed, args.publish_rate, 1.0, args.payload, f"3. warm-up, {count:,} subscribers")
    for r in range(args.rounds):
        for count, feed in feeds:
            before = cpu_by_process(services)
            samples[count] += paced_sdk_publish(feed, args.publish_rate, args.seconds, args.payload,
                                                f"3. round {r + 1}, {count:,} subscribers")
            for name, spent in cpu_by_process(services).items():
                cpu[count][name] = round(cpu[count].get(name, 0.0) + spent - before.get(name, 0.0), 1)
    # Where the time goes: the largest count once more with the delivery worker stopped (no fan-out).
    largest, feed = feeds[-1]
    services.kill9("delivery-d1")
    alone = paced_sdk_publish(feed, args.publish_rate, args.seconds, args.payload,
                              f"3. {largest:,} subscribers, delivery worker stopped")
    base = pct(samples[feeds[0][0]], 99)
    return {"offered_msg_per_s": args.publish_rate, "target_p99_ratio": TARGET_P99_RATIO,
            "by_subscribers": {str(c): {**dist_ms(samples[c]), "p99_ratio": pct(samples[c], 99) / base,
                                        "cpu_s": cpu[c], "samples_ms": [round(x * 1000, 3) for x in samples[c]]}
                               for c, _ in feeds},
            "largest_without_delivery_worker": {"subscribers": largest, **dist_ms(alone),
                                                "p99_ratio": pct(alone, 99) / base}}


# ----------------------------------------------------------------------------- driver
def _client(bootstrap: str, prefix: str, timeout_s: float = 120.0) -> CommandClient:
    """A command client, asking again while fresh topics have no leader yet (NOT_LEADER_FOR_PARTITION)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return CommandClient(bootstrap, prefix=prefix)
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="wt-bench-push-"))
    lk = LocalKafka(embedded_spec(tmp / "kafka"))
    config = {k: sorted(v) if isinstance(v, set) else v for k, v in vars(args).items() if k not in ("json", "plot")}
    report: dict[str, Any] = {"config": config,
                              "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}}
    services: ServiceSet | None = None
    client: CommandClient | None = None
    try:
        lk.up()
        bootstrap = lk.spec.bootstrap
        prefix = f"bench{uuid.uuid4().hex[:8]}"
        ensure_topics(bootstrap, catalogue(prefix, partitions=args.partitions))
        api_port, gw_port = free_ports(2)
        services = ServiceSet(bootstrap, prefix, tmp / "logs", api_port=api_port)
        services.start_worker("w1")
        services.start_projection("p1")
        services.start_delivery("d1")
        services.wait_ready()
        client = _client(bootstrap, prefix)
        api = ApiClient(services.api_url)
        home = tmp / "home"
        print(f"stack up; logs in {tmp / 'logs'}", flush=True)
        if 1 in args.phases:
            report["fanout"] = fanout(args, services, api, client, home, args.partitions)
            print(f"1. fan-out: worker {report['fanout']['worker_deliveries_per_s']:,.0f} deliveries/s, "
                  f"raw {report['fanout']['raw_produce_rec_per_s']:,.0f} rec/s", flush=True)
        if 2 in args.phases:
            gateway_url = services.start_gateway("sse", gw_port)
            services.wait_ready(api_url=gateway_url)
            report["sse"] = sse_e2e(args, services, gateway_url, api, client, home)
            print(f"2. SSE p99 {report['sse']['sse']['p99']:.1f} ms, raw {report['sse']['raw']['p99']:.1f} ms",
                  flush=True)
        if 3 in args.phases:
            report["publish"] = publish_vs_subscribers(args, services, api, client, home)
        return report
    finally:
        if client is not None:
            client.close()
        if services is not None:
            services.stop()
        lk.down()


def tables(r: dict[str, Any]) -> str:
    lines: list[str] = []
    if "fanout" in r:
        lines += _fanout_lines(r["fanout"])
    if "sse" in r:
        lines += _sse_lines(r["sse"])
    if "publish" in r:
        lines += _publish_lines(r["publish"])
    return "\n".join(lines)


def _fanout_lines(f: dict[str, Any]) -> list[str]:
    return [
        f"1. fan-out: {f['messages']:,} messages x {f['subscribers']:,} PUSH subscribers = {f['deliveries']:,} "
        f"deliveries ({f['unique_deliveries']:,} distinct), {f['value_bytes_mean']:.0f} B values",
        f"   delivery worker, first produced -> last committed and read: {f['worker_deliveries_per_s']:>9,.0f} /s",
        f"     (first -> last record timestamp {f['worker_produce_span_per_s']:,.0f} /s; from the process start, "
        f"join and fold included, {f['worker_deliveries_per_s_wall']:,.0f} /s)",
        f"   raw idempotent produce of the same records, first send -> last ack:  {f['raw_produce_rec_per_s']:>9,.0f}"
        " /s",
        f"   ratio worker/raw: {f['ratio']:.2f}",
    ]


def _sse_lines(s: dict[str, Any]) -> list[str]:
    lines = [
        f"2. SSE end to end at {s['rate']:g} msg/s, {s['connections']} connections "
        f"({s['events_received']:,}/{s['events_expected']:,} events received, {s['connections_lagged']} connections "
        f"closed as lagged), ms:",
        "                         n      p50      p90      p99      max",
    ]
    for name, d in (("SSE publish->receipt", s["sse"]), ("  publish acked", s["publish_ack"]),
                    ("  first connection", s["first_connection"]), ("raw produce->consume", s["raw"])):
        lines.append(f"   {name:<21}{d['n']:>6} {d['p50']:>8.1f} {d['p90']:>8.1f} {d['p99']:>8.1f} {d['max']:>8.1f}")
    lines.append(f"   p99 SSE/raw: {s['p99_ratio']:.1f}x; CPU seconds during the SSE leg: "
                 + ", ".join(f"{name} {spent:g}" for name, spent in s["cpu_s"].items()))
    return lines


def _publish_lines(p: dict[str, Any]) -> list[str]:
    lines = [f"3. publish ack latency through the SDK at {p['offered_msg_per_s']:g} msg/s (ms):",
              "   subscribers      n      p50      p90      p99      max   p99 ratio"]
    for count, d in p["by_subscribers"].items():
        verdict = "meets" if d["p99_ratio"] <= p["target_p99_ratio"] else "MISSES"
        lines.append(f"   {int(count):>11,} {d['n']:>6} {d['p50']:>8.1f} {d['p90']:>8.1f} {d['p99']:>8.1f} "
                     f"{d['max']:>8.1f}   {d['p99_ratio']:.2f} ({verdict} <= {p['target_p99_ratio']})")
    w = p["largest_without_delivery_worker"]
    lines.append(f"   {w['subscribers']:>11,} {w['n']:>6} {w['p50']:>8.1f} {w['p90']:>8.1f} {w['p99']:>8.1f} "
                 f"{w['max']:>8.1f}   {w['p99_ratio']:.2f} (the delivery worker stopped: no fan-out)")
    for count, d in p["by_subscribers"].items():
        lines.append(f"   CPU s during the {int(count):,} legs: "
                     + ", ".join(f"{name} {spent:g}" for name, spent in d["cpu_s"].items()))
    return lines


def plot(r: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [k for k in ("fanout", "sse", "publish") if k in r]
    fig, axes = plt.subplots(1, len(names), figsize=(5.7 * len(names), 4.5), squeeze=False)
    ax = dict(zip(names, axes[0], strict=True))
    if "fanout" in r:
        _plot_fanout(ax["fanout"], r["fanout"])
    if "sse" in r:
        _plot_sse(ax["sse"], r["sse"])
    if "publish" in r:
        _plot_publish(ax["publish"], r["publish"])
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _plot_fanout(a: Any, f: dict[str, Any]) -> None:
    a.bar(["raw produce", "delivery worker"], [f["raw_produce_rec_per_s"], f["worker_deliveries_per_s"]],
          color=["grey", "tab:blue"])
    a.set_ylabel("records/s")
    a.set_title(f"1. fan-out ({f['messages']} x {f['subscribers']}), ratio {f['ratio']:.2f}")


def _plot_sse(b: Any, s: dict[str, Any]) -> None:
    for label, samples in (("SSE", s["sse_samples_ms"]), ("raw Kafka", s["raw_samples_ms"])):
        xs = sorted(samples)
        b.plot(xs, [(i + 1) / len(xs) for i in range(len(xs))], label=f"{label} (p99 {pct(xs, 99):.1f} ms)")
    b.set_xscale("log")
    b.set_xlabel("publish -> receipt, ms (log scale)")
    b.set_title(f"2. SSE, {s['rate']:g} msg/s x {s['connections']} connections")
    b.legend()
    b.grid(True, which="both", alpha=0.3)


def _plot_publish(c: Any, p: dict[str, Any]) -> None:
    for count, d in p["by_subscribers"].items():
        xs = sorted(d["samples_ms"])
        c.plot(xs, [(i + 1) / len(xs) for i in range(len(xs))], label=f"{int(count):,} subs (p99 {d['p99']:.1f} ms)")
    c.set_xscale("log")
    c.set_xlabel("publish ack latency, ms (log scale)")
    c.set_title(f"3. publish at {p['offered_msg_per_s']:g} msg/s vs PUSH subscribers")
    c.legend()
    c.grid(True, which="both", alpha=0.3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--full", action="store_true",
                        help="full sizes (1,000 x 1,000 fan-out, 30 s legs, 3 rounds of phase 3)")
    parser.add_argument("--fanout-subscribers", type=int, help="phase 1 PUSH subscribers (default 200)")
    parser.add_argument("--fanout-messages", type=int, help="phase 1 messages (default 100)")
    parser.add_argument("--sse-connections", type=int, default=100, help="phase 2 SSE connections (default 100)")
    parser.add_argument("--sse-rate", type=float, default=100.0, help="phase 2 publishes/s (default 100)")
    parser.add_argument("--subscribers", type=lambda s: [int(x) for x in s.split(",")],
                        default=[10, 1_000, 10_000], help="phase 3 subscriber counts, first is the baseline "
                                                          "(default 10,1000,10000)")
    # One SDK publisher is sequential (each publish waits for its acknowledgement), so the offered
    # load stays well under what one publisher can do; above it the backlog, not the feed, is measured.
    parser.add_argument("--publish-rate", type=float, default=5.0, help="phase 3 offered load, msg/s (default 5)")
    parser.add_argument("--seconds", type=float, help="duration of each timed leg (default 20)")
    parser.add_argument("--rounds", type=int, help="phase 3 rounds over the feeds (default 1)")
    parser.add_argument("--payload", type=int, default=256, help="payload bytes (default 256)")
    parser.add_argument("--phases", type=lambda s: {int(x) for x in s.split(",")}, default={1, 2, 3},
                        help="phases to run (default 1,2,3)")
    parser.add_argument("--partitions", type=int, default=3, help="partitions per topic (default 3)")
    parser.add_argument("--timeout", type=float, default=900.0, help="safety net for each wait, s (default 900)")
    parser.add_argument("--json", metavar="PATH", help="write every result as JSON to PATH")
    parser.add_argument("--plot", metavar="PATH", help="write the rates and latency CDFs as a PNG to PATH")
    args = parser.parse_args(argv)
    defaults = ({"fanout_subscribers": 1_000, "fanout_messages": 1_000, "seconds": 30.0, "rounds": 3} if args.full
                else {"fanout_subscribers": 200, "fanout_messages": 100, "seconds": 20.0, "rounds": 1})
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    report = run(args)
    print(tables(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
        print(f"\nwrote {args.json}")
    if args.plot:
        plot(report, args.plot)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
