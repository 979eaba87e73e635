"""End-to-end benchmark of the stream actor against raw confluent-kafka, measured in one run.

Starts an embedded KRaft broker, the catalogue's topics under a fresh prefix, one stream-actor
worker and one projection/API worker (as `watchtower up` does), then measures, each beside a raw
confluent-kafka baseline on the same broker:

1. sustained publish throughput: client-signed 512 B messages, verified by the worker and
   acknowledged (reply committed in the worker's transaction), `--streams` x `--msgs-per-stream`,
   all submitted at once. Baseline: an idempotent acks=all producer writing 512 B records to a
   plain topic and a consumer reading them back (produce -> consume).
2. publish -> visible in get_since at a fixed offered load (`--rates`, first one is the target's;
   open-loop pacing for `--seconds`): one subscriber per stream follows it with long-polls
   (`GET .../messages?cursor=C&limit=500&min_head=C+1&wait_ms=...`); every message is timed from
   its *scheduled* send to the response that holds it. Baseline: raw produce -> consume at the
   same pacing, timed the same way (scheduled send time carried in the payload).
3. get_since(limit 500) latency at random cursors inside the windows of phase 1's streams, warm
   (payloads still in the projection's cache) and cold (after more than the cache size has been
   written since, so every payload is read back from the messages topic). Baseline: a raw
   consumer assign + read of 500 consecutive records of the same messages-topic region.
4. memory: `--rss-streams` streams with full `--rss-window` windows of `--rss-payload` byte
   messages; VmRSS/VmHWM of the worker and of the projection after loading, beside the payload
   bytes those windows hold (the ratio shows whether memory grows with payload x window).

Where the cost goes, for phase 1 and each rate of phase 2, ours beside the raw baseline's own leg:

- CPU µs per acknowledged message of the worker, the projection, the broker and this client, and
  their total (a raw leg totals the broker and this client: its consumer and producer live here);
- the broker's requests per acknowledged message by type (Produce, Fetch, AddPartitionsToTxn,
  EndTxn, TxnOffsetCommit, WriteTxnMarkers, Heartbeat, ...), read from the broker itself: it runs
  with the Jolokia JVM agent (``ClusterSpec.metrics_port``), and the JMX Meters
  ``kafka.network:type=RequestMetrics,name=RequestsPerSec,request=<Type>`` (their ``Count``) are
  sampled before and after each leg (bench/broker_requests.py). A quiet window before phase 1
  gives the background per second (group heartbeats, idle fetch long-polls) beside them.
- ``--profile DIR``: py-spy samples the worker and the projection (100 Hz) during phase 2's first
  rate; DIR gets per process the collapsed stacks (``*.raw.txt``), a speedscope file, an SVG flame
  graph and a top-frames summary by self and total samples (``*.top.txt``; bench/profiles.py).
  py-spy pauses a process for each sample, so that leg's latencies carry the profiler's cost.

Both are in the printed tables and under ``costs`` (and ``profiles``) in ``--json``.

Commands are signed before each timed phase (the signing rate is reported on its own line); the
phase-4 load signs in a process pool while submitting, since it is not timed against a target.
Per-phase CPU seconds of the worker, projection, broker and this process show where time goes;
before each phase the worker and projection are let go idle ("settle"), so no backlog leaks over.

    .venv/bin/python bench/bench_stream_actor.py --quick            # smoke run, about 2-3 minutes
    .venv/bin/python bench/bench_stream_actor.py [--json out.json] [--plot out.png]
    .venv/bin/python bench/bench_stream_actor.py --quick --security  # plaintext beside secure
    .venv/bin/python bench/bench_stream_actor.py --quick --profile artifacts/profile  # + flame graphs

``--security`` measures phases 1 and 2 only, on a plaintext broker and then on a secure one
(SASL/SCRAM-SHA-512 and ACLs; services as the service principal, this client as the client
principal), one after the other in the same run, and prints them side by side with the ratio.

A script, not a test (pytest only collects `tests/`).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import multiprocessing as mp
import os
import random
import sys
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import aiohttp
import nacl.signing
from broker_requests import (
    PROJECT_PARTS,
    count_delta,
    cpu_table,
    leg_cost,
    read_request_counts,
    requests_table,
    transactions_note,
)
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_fixture import embedded_spec, free_ports
from profiles import SpyRecorder, ptrace_problem
from tqdm import tqdm

from watchtower.gateway.transport import CommandClient
from watchtower.local.broker import LocalKafka
from watchtower.local.config import ADMIN_PRINCIPAL
from watchtower.local.errors import LocalStackError
from watchtower.local.jars import jolokia_agent_jar
from watchtower.local.security import CLIENT_PRINCIPAL, SERVICE_PRINCIPAL, credentials_file
from watchtower.local.stack import ServiceSet
from watchtower.protocol.signed_command import Command, sign_command
from watchtower.protocol.signing import sign_message
from watchtower.schemas.records import encode_message
from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import catalogue, topic_name
from watchtower.topics.connection import ENV_CREDENTIALS, ENV_PRINCIPAL, kafka_config

T = TypeVar("T")
GET_SINCE_LIMIT = 500
TARGETS = {
    "publish_msg_per_s": 5_000.0,
    "visible_p99_ms": 50.0,
    "get_since_p99_ms": 50.0,
    "rss_mb": 500.0,
}
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ----------------------------------------------------------------------------- statistics
def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of unsorted values; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def dist_ms(seconds: Sequence[float]) -> dict[str, float]:
    """n, p50/p90/p99/max and mean in milliseconds."""
    ms = [s * 1000 for s in seconds]
    return {"n": len(ms), "p50": pct(ms, 50), "p90": pct(ms, 90), "p99": pct(ms, 99),
            "max": max(ms) if ms else math.nan, "mean": sum(ms) / len(ms) if ms else math.nan}


# ----------------------------------------------------------------------------- processes
def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of `pid` in bytes."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            out[name] = int(rest.split()[0]) * 1024
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of `pid` (all its threads) and of its reaped children (signing pools)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return sum(int(f) for f in fields[11:15]) / CLK_TCK


def runqueue_wait_seconds(pid: int) -> float:
    """Seconds the threads of `pid` alive now have spent runnable but waiting for a CPU (schedstat)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue  # the thread ended meanwhile
    return total / 1e9


def quiesce(pids: dict[str, int], cores: float = 0.1, window_s: float = 1.0, timeout_s: float = 600.0) -> float:
    """Wait until every process in `pids` uses under `cores` CPUs over `window_s`: the previous
    phase's backlog (e.g. the projection folding events) must not leak into the next measurement.
    Returns the seconds waited."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        before = {n: cpu_seconds(p) for n, p in pids.items()}
        time.sleep(window_s)
        if all(cpu_seconds(p) - before[n] < cores * window_s for n, p in pids.items()):
            break
    return time.perf_counter() - t0


@dataclass
class CpuMeter:
    """CPU seconds and CPU-wait seconds per process over named phases, to show where time goes.

    With `requests` (a reader of the broker's request counters by type), each phase also records
    the requests the broker handled during it (``broker_requests``).
    """

    pids: dict[str, int]
    phases: list[dict[str, Any]] = field(default_factory=list)
    requests: Callable[[], dict[str, int]] | None = None

    def _requests(self) -> dict[str, int] | None:
        if self.requests is None:
            return None
        try:
            return self.requests()
        except (OSError, ValueError) as exc:  # a missed sample leaves the phase without request counts
            print(f"reading the broker's request counters failed: {exc}", file=sys.stderr)
            return None

    def measure(self, phase: str, fn: Callable[..., T], *args: Any, settle: bool = True) -> T:
        idle = {n: p for n, p in self.pids.items() if n in ("worker", "projection")}
        settled = quiesce(idle) if settle else 0.0
        requests_before = self._requests()
        before = {n: cpu_seconds(p) for n, p in self.pids.items()}
        waited = {n: runqueue_wait_seconds(p) for n, p in self.pids.items()}
        t0 = time.perf_counter()
        result = fn(*args)
        wall = time.perf_counter() - t0
        used = {n: cpu_seconds(p) - before[n] for n, p in self.pids.items()}
        wait = {n: runqueue_wait_seconds(p) - waited[n] for n, p in self.pids.items()}
        requests_after = self._requests()
        entry = {"phase": phase, "wall_s": wall, "settle_s": settled, "cpu_s": used, "runqueue_wait_s": wait,
                 "cores": {n: u / wall for n, u in used.items()}}
        if requests_before is not None and requests_after is not None:
            entry["broker_requests"] = count_delta(requests_before, requests_after)
        self.phases.append(entry)
        return result

    def phase(self, name: str) -> dict[str, Any]:
        """The last measured phase called `name`."""
        return next(ph for ph in reversed(self.phases) if ph["phase"] == name)

    def idle(self, seconds: float) -> dict[str, Any]:
        """CPU seconds per process and broker requests by type per second over `seconds` of quiet."""
        quiesce({n: p for n, p in self.pids.items() if n in ("worker", "projection")})
        requests_before = self._requests()
        before = {n: cpu_seconds(p) for n, p in self.pids.items()}
        t0 = time.perf_counter()
        time.sleep(seconds)
        wall = time.perf_counter() - t0
        used = {n: cpu_seconds(p) - before[n] for n, p in self.pids.items()}
        requests_after = self._requests()
        out: dict[str, Any] = {"wall_s": wall, "cpu_cores": {n: u / wall for n, u in used.items()}}
        if requests_before is not None and requests_after is not None:
            out["broker_requests_per_s"] = {t: v / wall for t, v in
                                            count_delta(requests_before, requests_after).items()}
        return out


# ----------------------------------------------------------------------------- signing
@dataclass(frozen=True)
class Keys:
    owner_seed: bytes
    publisher_seed: bytes

    @property
    def publisher_hex(self) -> str:
        return bytes(nacl.signing.SigningKey(self.publisher_seed).verify_key).hex()


def _payload(sequence: int, size: int) -> bytes:
    return sequence.to_bytes(8, "big") + os.urandom(max(0, size - 8))


def _signed_publish(owner: nacl.signing.SigningKey, publisher: nacl.signing.SigningKey, stream_id: str,
                    sequence: int, size: int) -> Command:
    msg = sign_message(stream_id=stream_id, sequence=sequence, timestamp_unix_ms=int(time.time() * 1000),
                       kind="bench", payload=_payload(sequence, size), signing_key=publisher,
                       content_type="application/octet-stream")
    # One owner key per run: nonces only need to increase per (caller, stream); 1 was create_stream.
    return sign_command(owner, "publish", stream_id, sequence + 1, msg.to_json_dict())


def sign_range(task: tuple[bytes, bytes, str, int, int, int]) -> list[Command]:
    """Publishes first..first+count-1 of one stream (a process-pool task)."""
    owner_seed, publisher_seed, stream_id, first, count, size = task
    owner, publisher = nacl.signing.SigningKey(owner_seed), nacl.signing.SigningKey(publisher_seed)
    return [_signed_publish(owner, publisher, stream_id, s, size) for s in range(first, first + count)]


def presign(keys: Keys, stream_ids: list[str], per_stream: int, size: int,
            desc: str) -> tuple[list[tuple[str, int, Command]], float]:
    """(stream, seq, command) interleaved round-robin over streams, and the signing rate (msg/s)."""
    owner, publisher = nacl.signing.SigningKey(keys.owner_seed), nacl.signing.SigningKey(keys.publisher_seed)
    out = []
    t0 = time.perf_counter()
    with tqdm(total=per_stream * len(stream_ids), desc=desc, unit="msg", leave=False) as bar:
        for seq in range(1, per_stream + 1):
            for sid in stream_ids:
                out.append((sid, seq, _signed_publish(owner, publisher, sid, seq, size)))
            bar.update(len(stream_ids))
    return out, len(out) / (time.perf_counter() - t0)


def record_bytes(size: int) -> int:
    """Length of one messages-topic value (what the projection's payload cache holds) for `size`."""
    key = nacl.signing.SigningKey.generate()
    msg = sign_message(stream_id="bench.tput.abcdef.000", sequence=1, timestamp_unix_ms=1, kind="bench",
                       payload=bytes(size), signing_key=key, content_type="application/octet-stream")
    return len(encode_message(msg))


# ----------------------------------------------------------------------------- HTTP
class Http:
    """An aiohttp session on its own event-loop thread, callable from plain threads."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="bench-http", daemon=True)
        self.thread.start()
        self.session: aiohttp.ClientSession = self.call(self._open())

    async def _open(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=512),
                                     timeout=aiohttp.ClientTimeout(total=120))

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def spawn(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def get_json(self, path: str, **params: Any) -> tuple[int, Any]:
        async with self.session.get(self.base + path, params=params) as resp:
            return resp.status, await resp.json()

    async def heads(self, stream_ids: list[str]) -> dict[str, int]:
        async def one(sid: str) -> tuple[str, int]:
            status, body = await self.get_json(f"/v1/streams/{sid}/head")
            return sid, int(body["head"]) if status == 200 else -1

        return dict(await asyncio.gather(*(one(s) for s in stream_ids)))

    def wait_heads(self, expected: dict[str, int], timeout_s: float = 900.0, desc: str = "projection") -> float:
        """Block until the projection shows every stream at its expected head; returns the wait."""
        t0 = time.perf_counter()
        total = sum(expected.values())
        with tqdm(total=total, desc=f"{desc}: waiting for the projection", unit="msg", leave=False) as bar:
            while True:
                heads = self.call(self.heads(list(expected)))
                seen = sum(min(heads[s], expected[s]) for s in expected if heads[s] > 0)
                bar.update(seen - bar.n)
                if all(heads[s] >= expected[s] for s in expected):
                    return time.perf_counter() - t0
                if time.perf_counter() - t0 > timeout_s:
                    raise TimeoutError(f"projection still behind after {timeout_s:.0f}s ({seen}/{total})")
                time.sleep(0.2)

    def close(self) -> None:
        self.call(self.session.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


# ----------------------------------------------------------------------------- stream actor phases
def create_streams(client: CommandClient, keys: Keys, stream_ids: list[str], capacity: int) -> None:
    owner = nacl.signing.SigningKey(keys.owner_seed)
    body = {"publisher_key_hex": keys.publisher_hex, "ring_buffer_capacity": capacity}
    futures = [client.submit(sign_command(owner, "create_stream", sid, 1, body)) for sid in stream_ids]
    client.flush()
    for f in futures:
        f.result(180)


class Acks:
    """Counts acknowledgements from the client's reply thread; records per-command ack times."""

    def __init__(self, n: int, bar: tqdm[Any] | None = None) -> None:
        self.sent = [0.0] * n
        self.acked = [0.0] * n
        self.errors: list[str] = []
        self._left = n
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._bar = bar
        if n == 0:
            self._done.set()

    def track(self, i: int, fut: Future[dict[str, Any]]) -> None:
        def done(f: Future[dict[str, Any]]) -> None:
            self.acked[i] = time.perf_counter()
            exc = f.exception()
            with self._lock:
                if exc is not None:
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                self._left -= 1
                if self._bar is not None:
                    self._bar.update(1)
                if self._left == 0:
                    self._done.set()

        fut.add_done_callback(done)

    def wait(self, timeout_s: float) -> None:
        if not self._done.wait(timeout_s):
            raise TimeoutError(f"{self._left} commands still unacknowledged after {timeout_s:.0f}s")
        if self.errors:
            raise RuntimeError(f"{len(self.errors)} commands were refused, first: {self.errors[0]}")


def publish_burst(client: CommandClient, items: list[tuple[str, int, Command]]) -> dict[str, Any]:
    """Submit everything at once; throughput from first submit to last acknowledgement."""
    with tqdm(total=len(items), desc="1. publish burst (acks)", unit="msg", leave=False) as bar:
        acks = Acks(len(items), bar)
        for i, (_sid, _seq, cmd) in enumerate(items):
            acks.sent[i] = time.perf_counter()
            acks.track(i, client.submit(cmd))
        client.flush()
        acks.wait(900)
    return _rates(acks.sent, acks.acked, [a - s for s, a in zip(acks.sent, acks.acked, strict=True)])


def _rates(sent: list[float], received: list[float], latencies: list[float]) -> dict[str, Any]:
    n = len(sent)
    span = max(received) - min(sent)
    done = sorted(received)
    lo, hi = done[n // 10], done[(9 * n) // 10]
    steady = (0.8 * n) / (hi - lo) if hi > lo else math.nan
    return {"n": n, "span_s": span, "msg_per_s": n / span, "steady_msg_per_s": steady,
            "latency_ms": dist_ms(latencies)}


def publish_paced(client: CommandClient, http: Http, items: list[tuple[str, int, Command]], rate: float,
                  wait_ms: int) -> dict[str, Any]:
    """Open-loop publishes at `rate`, watched by one long-polling get_since subscriber per stream.

    Each subscriber loops on ``get_since(cursor, 500, min_head=cursor+1, wait_ms)`` like a real
    client following the stream; every message it receives is timed from its *scheduled* send.
    """
    t0 = time.perf_counter() + 0.5
    due: dict[tuple[str, int], float] = {(sid, seq): t0 + i / rate for i, (sid, seq, _c) in enumerate(items)}
    last: dict[str, int] = {}
    for sid, seq, _c in items:
        last[sid] = max(seq, last.get(sid, 0))
    seen: list[float] = []
    polls = [0]

    async def follow(sid: str) -> None:
        cursor, deadline = 0, t0 + len(items) / rate + 300
        while cursor < last[sid] and time.perf_counter() < deadline:
            async with http.session.get(f"{http.base}/v1/streams/{sid}/messages",
                                        params={"cursor": cursor, "limit": GET_SINCE_LIMIT,
                                                "min_head": cursor + 1, "wait_ms": wait_ms}) as resp:
                raw_body = await resp.read()
                status = resp.status
            now = time.perf_counter()
            polls[0] += 1
            if status != 200:
                await asyncio.sleep(0.05)
                continue
            body = json.loads(raw_body)
            for m in body["messages"]:
                seen.append(now - due[(sid, int(m["sequence"]))])
            cursor = max(cursor, int(body["next_cursor"]))

    followers = [http.spawn(follow(sid)) for sid in last]
    lag: list[float] = []
    with tqdm(total=len(items), desc=f"2. paced publish @{rate:,.0f}/s", unit="msg", leave=False) as bar:
        acks = Acks(len(items))
        for i, (sid, seq, cmd) in enumerate(items):
            when = due[(sid, seq)]
            delay = when - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            lag.append(time.perf_counter() - when)
            acks.sent[i] = when
            acks.track(i, client.submit(cmd))
            if i % 100 == 0:
                bar.update(i - bar.n)
        bar.update(len(items) - bar.n)
        client.flush()
        acks.wait(600)
    for f in followers:
        f.result(600)
    return {"offered_msg_per_s": rate, "n": len(items), "subscribers": len(followers), "polls": polls[0],
            "not_visible": len(items) - len(seen), "visible_ms": dist_ms(seen),
            "visible_samples_ms": [round(x * 1000, 3) for x in seen],
            "ack_ms": dist_ms([a - w for w, a in zip(acks.sent, acks.acked, strict=True)]),
            "achieved_msg_per_s": len(items) / max(len(items) / rate, max(acks.acked) - t0),
            "sender_lag_ms": dist_ms(lag)}


def load_windows(client: CommandClient, keys: Keys, stream_ids: list[str], window: int, size: int,
                 procs: int, max_inflight: int, chunk: int = 250) -> dict[str, Any]:
    """Fill every stream's window, signing in a process pool while submitting (bounded in flight)."""
    tasks = [(keys.owner_seed, keys.publisher_seed, sid, first, min(chunk, window - first + 1), size)
             for first in range(1, window + 1, chunk) for sid in stream_ids]
    total = window * len(stream_ids)
    slots = threading.BoundedSemaphore(max_inflight)
    acks_left = [total]
    done = threading.Event()
    lock = threading.Lock()
    errors: list[str] = []
    t0 = time.perf_counter()
    with tqdm(total=total, desc="4. loading windows (acks)", unit="msg", leave=False) as bar:

        def acked(f: Future[dict[str, Any]]) -> None:
            slots.release()
            exc = f.exception()
            with lock:
                if exc is not None:
                    errors.append(f"{type(exc).__name__}: {exc}")
                acks_left[0] -= 1
                bar.update(1)
                if acks_left[0] == 0:
                    done.set()

        # spawn, not fork: this process already runs librdkafka and HTTP threads.
        with mp.get_context("spawn").Pool(procs) as pool:
            pending: deque[Any] = deque()
            feed = iter(tasks)

            def fill() -> None:
                while len(pending) < 2 * procs + 2:
                    task = next(feed, None)
                    if task is None:
                        return
                    pending.append(pool.apply_async(sign_range, (task,)))

            fill()
            while pending:
                cmds = pending.popleft().get()
                fill()
                for cmd in cmds:
                    slots.acquire()
                    client.submit(cmd).add_done_callback(acked)
        client.flush()
        if not done.wait(3600):
            raise TimeoutError(f"{acks_left[0]} publishes unacknowledged after an hour")
    if errors:
        raise RuntimeError(f"{len(errors)} publishes were refused, first: {errors[0]}")
    span = time.perf_counter() - t0
    return {"messages": total, "span_s": span, "msg_per_s": total / span}


def get_since_reads(http: Http, raw: RawSeek, windows: dict[str, int], partitions_region: dict[int, int],
                    n: int, label: str, rng: random.Random) -> dict[str, Any]:
    """n get_since(limit 500) at random cursors, alternating with n raw seek+read(500) reads."""

    async def one(sid: str, cursor: int) -> tuple[float, int]:
        t0 = time.perf_counter()
        async with http.session.get(f"{http.base}/v1/streams/{sid}/messages",
                                    params={"cursor": cursor, "limit": GET_SINCE_LIMIT}) as resp:
            raw_body = await resp.read()
            status = resp.status
        elapsed = time.perf_counter() - t0
        body = json.loads(raw_body)
        if status != 200:
            raise RuntimeError(f"get_since {sid} cursor {cursor}: HTTP {status} {body}")
        return elapsed, len(body["messages"])

    ours, theirs, sizes = [], [], []
    sids = sorted(windows)
    # Offsets also count transaction markers, so stay a full read's length clear of the region's end
    # (a partition holding one --quick stream of 1,000 messages qualifies).
    parts = [p for p, hw in partitions_region.items() if hw > 2 * GET_SINCE_LIMIT + 100]
    http.call(one(sids[0], 0))  # untimed: connections and the routed path are set up
    raw.read(parts[0], 0, 1)
    for _ in tqdm(range(n), desc=f"3. get_since(500) {label}", leave=False):
        sid = rng.choice(sids)
        head = windows[sid]
        cursor = rng.randint(0, max(0, head - GET_SINCE_LIMIT))
        elapsed, count = http.call(one(sid, cursor))
        ours.append(elapsed)
        sizes.append(count)
        p = rng.choice(parts)
        theirs.append(raw.read(p, rng.randint(0, partitions_region[p] - 2 * GET_SINCE_LIMIT), GET_SINCE_LIMIT))
    return {"project_ms": dist_ms(ours), "raw_ms": dist_ms(theirs),
            "messages_per_reply": {"min": min(sizes), "max": max(sizes)},
            "project_samples_ms": [round(s * 1000, 3) for s in ours],
            "raw_samples_ms": [round(s * 1000, 3) for s in theirs]}


# ----------------------------------------------------------------------------- raw baselines
def _raw_consumer(bootstrap: str, **extra: Any) -> Consumer:
    return Consumer({**kafka_config(bootstrap), "group.id": f"bench-raw-{uuid.uuid4().hex}",
                     "enable.auto.commit": False, "log_level": 3, **extra})


def _raw_producer(bootstrap: str) -> Producer:
    # The same reliability settings the command client and the worker use.
    return Producer({**kafka_config(bootstrap), "enable.idempotence": True, "acks": "all",
                     "linger.ms": 2, "log_level": 3})


def create_plain_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient(kafka_config(bootstrap))  # must outlive the futures
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    for f in futures.values():
        f.result(30)


def _produce(producer: Producer, topic: str, key: bytes, value: bytes) -> None:
    while True:
        try:
            producer.produce(topic, key=key, value=value)
            producer.poll(0)
            return
        except BufferError:
            producer.poll(0.05)


class _Collector:
    """Reads `n` records of a fresh topic from the beginning, timing each against its payload stamp.

    `prime` produces one unstamped record and waits until it is consumed, so the consumer's
    connection and first fetch are done before anything is timed.
    """

    def __init__(self, bootstrap: str, topic: str, partitions: int, n: int) -> None:
        self.n = n
        self.received: list[float] = []
        self.latency: list[float] = []
        self.primed = threading.Event()
        self.consumer = _raw_consumer(bootstrap)
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def prime(self, producer: Producer, topic: str) -> None:
        _produce(producer, topic, b"prime", bytes(8))
        producer.flush(30)
        if not self.primed.wait(60):
            raise TimeoutError("the raw consumer did not receive its priming record")

    def _run(self) -> None:
        deadline = time.perf_counter() + 900
        while len(self.received) < self.n and time.perf_counter() < deadline:
            # Wait for one record, then drain what is already fetched: consume(n, timeout) would
            # hold every record until n arrive or the timeout passes, inflating the latency.
            first = self.consumer.poll(0.1)
            if first is None:
                continue
            for m in [first, *self.consumer.consume(num_messages=1000, timeout=0)]:
                if m.error() is not None:
                    continue
                now = time.perf_counter_ns()
                stamp = int.from_bytes((m.value() or b"")[:8], "big")
                if stamp == 0:
                    self.primed.set()
                    continue
                self.received.append(now / 1e9)
                self.latency.append((now - stamp) / 1e9)

    def join(self) -> None:
        self.thread.join()
        self.consumer.close()
        if len(self.received) < self.n:
            raise TimeoutError(f"raw consumer got {len(self.received)} of {self.n} records")


def raw_burst(bootstrap: str, topic: str, partitions: int, n: int, size: int, keys: int) -> dict[str, Any]:
    collector = _Collector(bootstrap, topic, partitions, n)
    producer = _raw_producer(bootstrap)
    collector.prime(producer, topic)
    filler = os.urandom(size - 8)
    names = [f"raw-{i:04d}".encode() for i in range(keys)]
    sent = []
    for i in tqdm(range(n), desc="1. raw produce->consume", unit="msg", leave=False, mininterval=0.5):
        now = time.perf_counter_ns()
        sent.append(now / 1e9)
        _produce(producer, topic, names[i % keys], now.to_bytes(8, "big") + filler)
    producer.flush(120)
    collector.join()
    return _rates(sent, collector.received, collector.latency)


def raw_paced(bootstrap: str, topic: str, partitions: int, n: int, size: int, keys: int, rate: float) -> dict[str, Any]:
    collector = _Collector(bootstrap, topic, partitions, n)
    producer = _raw_producer(bootstrap)
    collector.prime(producer, topic)
    filler = os.urandom(size - 8)
    names = [f"raw-{i:04d}".encode() for i in range(keys)]
    lag = []
    t0 = time.perf_counter() + 0.2
    for i in tqdm(range(n), desc=f"2. raw paced @{rate:,.0f}/s", unit="msg", leave=False, mininterval=0.5):
        due = t0 + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        lag.append(time.perf_counter() - due)
        # Stamped with the scheduled time, like the project side, so lateness counts against it.
        _produce(producer, topic, names[i % keys], int(due * 1e9).to_bytes(8, "big") + filler)
    producer.flush(120)
    collector.join()
    return {"n": n, "latency_ms": dist_ms(collector.latency), "sender_lag_ms": dist_ms(lag),
            "latency_samples_ms": [round(s * 1000, 3) for s in collector.latency]}


class RawSeek:
    """A raw consumer that assigns a partition at an offset and reads `n` records (get_since baseline)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        # The settings the projection's log reader uses for the same job.
        self.consumer = _raw_consumer(bootstrap, **{"isolation.level": "read_committed", "fetch.wait.max.ms": 10})

    def read(self, partition: int, offset: int, n: int) -> float:
        t0 = time.perf_counter()
        self.consumer.assign([TopicPartition(self.topic, partition, offset)])
        got = 0
        deadline = t0 + 30
        while got < n and time.perf_counter() < deadline:
            got += sum(1 for m in self.consumer.consume(num_messages=n - got, timeout=1.0) if m.error() is None)
        self.consumer.unassign()
        if got < n:
            raise TimeoutError(f"raw read of {n} records at {self.topic}[{partition}]@{offset} got {got}")
        return time.perf_counter() - t0

    def close(self) -> None:
        self.consumer.close()


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = _raw_consumer(bootstrap)
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
    finally:
        consumer.close()


# ----------------------------------------------------------------------------- costs per publish
def profiled(fn: Callable[..., T], recorder: SpyRecorder | None) -> Callable[..., T]:
    """`fn`, with py-spy attached to the services just before it starts (when `recorder`)."""
    if recorder is None:
        return fn

    def run_profiled(*args: Any) -> T:
        recorder.start()
        return fn(*args)

    return run_profiled


def costs(meter: CpuMeter, report: dict[str, Any], idle: dict[str, Any]) -> dict[str, Any]:
    """CPU µs and broker requests per acknowledged message for phase 1 and each rate of phase 2,
    ours and the raw baseline's, each in its own leg."""
    tp = report["throughput"]
    legs = [leg_cost(meter.phase("1. publish burst"), "1. burst", "project", tp["project"]["n"]),
            leg_cost(meter.phase("1. raw produce->consume"), "1. burst raw", "raw", tp["raw"]["n"])]
    for v in report["visibility_by_rate"]:
        rate = v["project"]["offered_msg_per_s"]
        legs += [leg_cost(meter.phase(f"2. paced publish @{rate:g}/s"), f"2. @{rate:g}", "project",
                          v["project"]["n"]),
                 leg_cost(meter.phase(f"2. raw paced @{rate:g}/s"), f"2. @{rate:g} raw", "raw", v["raw"]["n"])]
    return {"legs": legs, "idle": idle, "broker_requests": all("per_message" in leg for leg in legs),
            "note": "cpu totals: worker+projection+broker+bench client for our pipeline, broker+bench client "
                    "for raw legs; requests: the broker's RequestMetrics RequestsPerSec Count, all API versions, "
                    "before/after each leg, divided by the messages acknowledged (raw: consumed) in the leg"}


# ----------------------------------------------------------------------------- the run
def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    keys = Keys(os.urandom(32), os.urandom(32))
    cache_mb = args.cache_mb
    os.environ["WATCHTOWER_PAYLOAD_CACHE_MB"] = str(cache_mb)  # inherited by the services
    tmp = Path(tempfile.mkdtemp(prefix="wt-bench-"))
    spec = embedded_spec(tmp / "kafka")
    if args.broker_requests:
        try:
            jolokia_agent_jar()  # fetched once; without it the run goes on without request counts
            spec = dataclasses.replace(spec, metrics_port=free_ports(1)[0])
        except LocalStackError as exc:
            print(f"no broker request counts (the Jolokia agent is unavailable: {exc})", file=sys.stderr)
    lk = LocalKafka(spec)
    report: dict[str, Any] = {"config": {k: v for k, v in vars(args).items() if k not in ("json", "plot")},
                              "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}}
    services: ServiceSet | None = None
    client: CommandClient | None = None
    http: Http | None = None
    raw_seek: RawSeek | None = None
    try:
        t0 = time.perf_counter()
        lk.up()
        bootstrap = lk.spec.bootstrap
        prefix = f"bench{uuid.uuid4().hex[:8]}"
        ensure_topics(bootstrap, catalogue(prefix, partitions=args.partitions))
        services = ServiceSet(bootstrap, prefix, tmp / "logs", api_port=free_ports(1)[0])
        services.start_worker("w1")
        services.start_projection("p1")
        services.wait_ready()
        client = CommandClient(bootstrap, prefix=prefix)
        http = Http(services.api_url)
        t_messages = topic_name("messages", prefix)
        raw_seek = RawSeek(bootstrap, t_messages)
        report["startup_s"] = time.perf_counter() - t0
        pids = services.pids()
        broker_pid = lk.status()["nodes"][0]["pid"]
        procs = {"worker": pids["worker-w1"], "projection": pids["projection-p1"], "broker": int(broker_pid),
                 "bench client": os.getpid()}
        metrics_url = lk.metrics_url()
        meter = CpuMeter(procs, requests=(lambda: read_request_counts(metrics_url)) if metrics_url else None)
        spy_problem = ptrace_problem(procs["worker"]) if args.profile else None
        if spy_problem is not None:
            print(f"--profile: py-spy cannot read the services, no profiles ({spy_problem})", file=sys.stderr)
        rss: dict[str, Any] = {"idle": {n: proc_status(procs[n]) for n in ("worker", "projection")}}
        tag = uuid.uuid4().hex[:6]

        def names(phase: str, count: int) -> list[str]:
            return [f"bench.{phase}.{tag}.{i:03d}" for i in range(count)]

        # Warm the path (first transaction, first routed GET) and the broker's JIT, for ours and for
        # raw alike, so phase 1 measures steady work: on a broker that has just started, the first
        # ~10,000 publishes cost it about 1.5x what later ones do (JIT compilation), and the raw
        # legs, which run after ours, would otherwise get a warmer broker than ours did.
        warm_streams = max(2, min(5, args.warm_up // 50))
        warm = names("warmup", warm_streams)
        per_warm = max(1, args.warm_up // warm_streams)
        create_streams(client, keys, warm, max(1000, per_warm))
        items, _ = presign(keys, warm, per_warm, args.payload, "warm-up signing")
        publish_burst(client, items)
        http.wait_heads(dict.fromkeys(warm, per_warm), desc="warm-up")
        if args.warm_up > 100:
            raw_warm = f"{prefix}.bench.raw-warm-up"
            create_plain_topic(bootstrap, raw_warm, args.partitions)
            raw_burst(bootstrap, raw_warm, args.partitions, args.warm_up, args.payload, warm_streams)
        idle = meter.idle(args.idle_seconds)  # the background every leg below also pays

        # ---- 1. sustained publish throughput
        p1 = names("tput", args.streams)
        create_streams(client, keys, p1, max(args.msgs_per_stream, 1))
        items, sign_rate = presign(keys, p1, args.msgs_per_stream, args.payload, "1. signing (untimed)")
        raw_tput = f"{prefix}.bench.raw-throughput"
        create_plain_topic(bootstrap, raw_tput, args.partitions)
        ours1 = meter.measure("1. publish burst", publish_burst, client, items)
        items = []
        catch_up = http.wait_heads(dict.fromkeys(p1, args.msgs_per_stream), desc="1.")
        theirs1 = meter.measure("1. raw produce->consume", raw_burst, bootstrap, raw_tput, args.partitions,
                                args.streams * args.msgs_per_stream, args.payload, args.streams)
        report["throughput"] = {"project": ours1, "raw": theirs1, "signing_msg_per_s": sign_rate,
                                "projection_catch_up_after_last_ack_s": catch_up,
                                "ratio": ours1["msg_per_s"] / theirs1["msg_per_s"]}
        region = high_watermarks(bootstrap, t_messages, args.partitions)  # phase-1 streams live below these

        # ---- 3a. get_since warm (phase-1 streams, all payloads still cached)
        windows = dict.fromkeys(p1, args.msgs_per_stream)
        warm3 = meter.measure("3. get_since warm", get_since_reads, http, raw_seek, windows, region,
                              args.reads, "warm", rng)

        # ---- 2. publish -> visible at fixed offered loads (the first rate is the target's)
        report["visibility_by_rate"] = []
        written_since_warm = 0
        for rate in args.rates:
            p2 = names(f"lat{rate:g}", args.latency_streams)
            per_stream = max(1, round(rate * args.seconds / len(p2)))
            create_streams(client, keys, p2, max(per_stream, 1))
            items, _ = presign(keys, p2, per_stream, args.payload, "2. signing (untimed)")
            recorder = None
            if args.profile and rate == args.rates[0] and spy_problem is None:
                recorder = SpyRecorder(Path(args.profile), {n: procs[n] for n in ("worker", "projection")},
                                       len(items) / rate + 1.0, nonblocking=args.profile_nonblocking)
            ours2 = meter.measure(f"2. paced publish @{rate:g}/s", profiled(publish_paced, recorder), client,
                                  http, items, rate, args.wait_ms)
            if recorder is not None:
                report["profiles"] = {"phase": f"2. paced publish @{rate:g}/s", "rate_hz": recorder.rate_hz,
                                      "nonblocking": recorder.nonblocking,
                                      "duration_s": recorder.duration_s, "dir": args.profile,
                                      "processes": recorder.finish()}
                ours2["profiled"] = True
            items = []
            raw_lat = f"{prefix}.bench.raw-latency-{rate:g}"
            create_plain_topic(bootstrap, raw_lat, args.partitions)
            theirs2 = meter.measure(f"2. raw paced @{rate:g}/s", raw_paced, bootstrap, raw_lat, args.partitions,
                                    per_stream * len(p2), args.payload, args.latency_streams, rate)
            report["visibility_by_rate"].append({
                "project": ours2, "raw": theirs2,
                "p99_ratio": ours2["visible_ms"]["p99"] / theirs2["latency_ms"]["p99"]})
            written_since_warm += per_stream * len(p2) * record_bytes(args.payload)
        report["visibility"] = report["visibility_by_rate"][0]
        rss["after_phases_1_3"] = {n: proc_status(procs[n]) for n in ("worker", "projection")}

        # ---- 4. memory with full windows
        p4 = names("rss", args.rss_streams)
        create_streams(client, keys, p4, args.rss_window)
        load = meter.measure("4. load windows", load_windows, client, keys, p4, args.rss_window, args.rss_payload,
                             args.sign_procs, args.max_inflight)
        load["projection_catch_up_after_last_ack_s"] = meter.measure(
            "4. projection catch-up", http.wait_heads, dict.fromkeys(p4, args.rss_window), 3600.0, settle=False)
        quiesce({"worker": procs["worker"], "projection": procs["projection"]})
        rss["loaded"] = {n: proc_status(procs[n]) for n in ("worker", "projection")}
        payload_bytes = args.rss_streams * args.rss_window * args.rss_payload
        report["memory"] = {"rss": rss, "load": load, "payload_bytes_in_windows": payload_bytes,
                            "messages_in_windows": args.rss_streams * args.rss_window,
                            "record_bytes_in_windows": args.rss_streams * args.rss_window * record_bytes(
                                args.rss_payload)}
        written_since_warm += args.rss_streams * args.rss_window * record_bytes(args.rss_payload)

        # ---- 3b. get_since cold: top up the writes past the cache so phase-1 payloads are evicted
        cache_bytes = int(cache_mb * 1024 * 1024)
        filler = 0
        if written_since_warm < 1.5 * cache_bytes:
            rec = record_bytes(args.rss_payload)
            filler = math.ceil((1.5 * cache_bytes - written_since_warm) / rec)
            fill_ids = names("evict", args.partitions)
            per = math.ceil(filler / len(fill_ids))
            create_streams(client, keys, fill_ids, per)
            meter.measure("3. eviction filler", load_windows, client, keys, fill_ids, per, args.rss_payload,
                          args.sign_procs, args.max_inflight)
            http.wait_heads(dict.fromkeys(fill_ids, per), desc="3. filler")
            filler = per * len(fill_ids)
            written_since_warm += filler * rec
        cold3 = meter.measure("3. get_since cold", get_since_reads, http, raw_seek, windows, region,
                              args.reads, "cold", rng)
        report["get_since"] = {"warm": warm3, "cold": cold3, "cache_mb": cache_mb,
                               "bytes_written_after_warm_reads": written_since_warm,
                               "eviction_filler_messages": filler,
                               "streams_per_partition_in_cold_region": args.streams / args.partitions}
        rss["end"] = {n: proc_status(procs[n]) for n in ("worker", "projection")}
        report["cpu"] = meter.phases
        report["costs"] = costs(meter, report, idle)
        return report
    except BaseException:
        for log in sorted((tmp / "logs").glob("*.log")):
            tail = log.read_text(errors="replace").splitlines()[-15:]
            print(f"--- last lines of {log}:\n" + "\n".join(tail), file=sys.stderr)
        raise
    finally:
        for closer in (raw_seek, http, client):
            if closer is not None:
                try:
                    closer.close()
                except Exception as exc:  # a failed close must not hide the result or the first error
                    print(f"close failed: {exc}", file=sys.stderr)
        if services is not None:
            services.stop()
        lk.down()
        if not args.keep:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept {tmp}", file=sys.stderr)


# ----------------------------------------------------------------------------- output
def _verdict(ok: bool) -> str:
    return "meets" if ok else "MISSES"


def tables(r: dict[str, Any]) -> str:
    tp, vis, gs, mem = r["throughput"], r["visibility"], r["get_since"], r["memory"]
    out: list[str] = []
    mb = 1024 * 1024
    worker_mb = mem["rss"]["loaded"]["worker"]["VmRSS"] / mb
    proj_mb = mem["rss"]["loaded"]["projection"]["VmRSS"] / mb
    payload_mb = mem["payload_bytes_in_windows"] / mb
    rows = [
        ("1. sustained publish, acked (msg/s)", f"{tp['project']['msg_per_s']:,.0f}",
         f"{tp['raw']['msg_per_s']:,.0f}", tp["project"]["msg_per_s"] / tp["raw"]["msg_per_s"],
         f">= {TARGETS['publish_msg_per_s']:,.0f}", tp["project"]["msg_per_s"] >= TARGETS["publish_msg_per_s"]),
        ("   steady 10-90% of acks (msg/s)", f"{tp['project']['steady_msg_per_s']:,.0f}",
         f"{tp['raw']['steady_msg_per_s']:,.0f}",
         tp["project"]["steady_msg_per_s"] / tp["raw"]["steady_msg_per_s"], "", None),
        (f"2. publish->visible p99 @{vis['project']['offered_msg_per_s']:,.0f}/s (ms)",
         f"{vis['project']['visible_ms']['p99']:.1f}", f"{vis['raw']['latency_ms']['p99']:.1f}", vis["p99_ratio"],
         f"<= {TARGETS['visible_p99_ms']:.0f}", vis["project"]["visible_ms"]["p99"] <= TARGETS["visible_p99_ms"]),
        ("3. get_since(500) p99 warm (ms)", f"{gs['warm']['project_ms']['p99']:.1f}",
         f"{gs['warm']['raw_ms']['p99']:.1f}", gs["warm"]["project_ms"]["p99"] / gs["warm"]["raw_ms"]["p99"],
         f"<= {TARGETS['get_since_p99_ms']:.0f}", gs["warm"]["project_ms"]["p99"] <= TARGETS["get_since_p99_ms"]),
        ("3. get_since(500) p99 cold (ms)", f"{gs['cold']['project_ms']['p99']:.1f}",
         f"{gs['cold']['raw_ms']['p99']:.1f}", gs["cold"]["project_ms"]["p99"] / gs["cold"]["raw_ms"]["p99"],
         f"<= {TARGETS['get_since_p99_ms']:.0f}", gs["cold"]["project_ms"]["p99"] <= TARGETS["get_since_p99_ms"]),
        ("4. worker RSS, full windows (MiB)", f"{worker_mb:,.1f}", f"{payload_mb:,.1f}", worker_mb / payload_mb,
         f"<= {TARGETS['rss_mb']:.0f}", worker_mb <= TARGETS["rss_mb"]),
        ("4. projection RSS, full windows (MiB)", f"{proj_mb:,.1f}", f"{payload_mb:,.1f}", proj_mb / payload_mb,
         f"<= {TARGETS['rss_mb']:.0f}", proj_mb <= TARGETS["rss_mb"]),
    ]
    head = f"{'measurement':<42} {'value':>10} {'baseline':>10} {'ratio':>7}  {'target':>9}  verdict"
    out += ["Results (baselines: raw confluent-kafka on the same broker; memory: payload bytes in the windows)",
            head, "-" * len(head)]
    for name, value, base, ratio, target, ok in rows:
        verdict = "" if ok is None else _verdict(ok)
        out.append(f"{name:<42} {value:>10} {base:>10} {ratio:>7.3f}  {target:>9}  {verdict}")

    def lrow(name: str, d: dict[str, float]) -> str:
        return (f"{name:<44} {d['n']:>6} {d['p50']:>8.2f} {d['p90']:>8.2f} {d['p99']:>8.2f} {d['max']:>8.2f}")

    head = f"{'latency distribution (ms)':<44} {'n':>6} {'p50':>8} {'p90':>8} {'p99':>8} {'max':>8}"
    out += ["", head, "-" * len(head),
            lrow("1. submit->ack, burst (project)", tp["project"]["latency_ms"]),
            lrow("1. produce->consume, burst (raw)", tp["raw"]["latency_ms"]),
            *[row for v in r["visibility_by_rate"] for row in (
                lrow(f"2. publish->visible @{v['project']['offered_msg_per_s']:g}/s (project)",
                     v["project"]["visible_ms"]),
                lrow(f"2. submit->ack @{v['project']['offered_msg_per_s']:g}/s (project)", v["project"]["ack_ms"]),
                lrow(f"2. produce->consume @{v['project']['offered_msg_per_s']:g}/s (raw)", v["raw"]["latency_ms"]),
                lrow("2. sender lateness vs schedule (project)", v["project"]["sender_lag_ms"]),
                lrow("2. sender lateness vs schedule (raw)", v["raw"]["sender_lag_ms"]))],
            lrow("3. get_since(500) warm (project)", gs["warm"]["project_ms"]),
            lrow("3. seek+read 500 records (raw, beside warm)", gs["warm"]["raw_ms"]),
            lrow("3. get_since(500) cold (project)", gs["cold"]["project_ms"]),
            lrow("3. seek+read 500 records (raw, beside cold)", gs["cold"]["raw_ms"])]

    head = f"{'memory (MiB)':<14} {'idle':>8} {'after 1-3':>10} {'loaded':>9} {'peak HWM':>9} {'end':>8}"
    out += ["", head, "-" * len(head)]
    for proc in ("worker", "projection"):
        rs = mem["rss"]
        out.append(f"{proc:<14} {rs['idle'][proc]['VmRSS'] / mb:>8.1f} "
                   f"{rs['after_phases_1_3'][proc]['VmRSS'] / mb:>10.1f} "
                   f"{rs['loaded'][proc]['VmRSS'] / mb:>9.1f} {rs['end'][proc]['VmHWM'] / mb:>9.1f} "
                   f"{rs['end'][proc]['VmRSS'] / mb:>8.1f}")
    out.append(f"windows: {mem['messages_in_windows']:,} messages, {payload_mb:,.1f} MiB of payload, "
               f"{mem['record_bytes_in_windows'] / mb:,.1f} MiB of messages-topic records")

    procs = list(r["cpu"][0]["cores"])
    head = (f"{'CPU cores used by phase':<28} {'settle s':>8} {'wall s':>7} "
            + " ".join(f"{p:>12}" for p in procs))
    out += ["", head, "-" * len(head)]
    for ph in r["cpu"]:
        out.append(f"{ph['phase']:<28} {ph['settle_s']:>8.1f} {ph['wall_s']:>7.1f} "
                   + " ".join(f"{ph['cores'][p]:>12.2f}" for p in procs))
    head = f"{'waiting for a CPU, s/s wall':<28} {'wall s':>7} " + " ".join(f"{p:>12}" for p in procs)
    out += ["", head, "-" * len(head)]
    for ph in r["cpu"]:
        out.append(f"{ph['phase']:<28} {ph['wall_s']:>7.1f} "
                   + " ".join(f"{ph['runqueue_wait_s'][p] / ph['wall_s']:>12.2f}" for p in procs))

    out += ["", *cost_tables(r)]

    out += ["", "Notes",
            f"- client signing (sign_message + sign_command, {r['config']['payload']} B, one process, untimed): "
            f"{tp['signing_msg_per_s']:,.0f} msg/s",
            f"- phase 1: {tp['project']['n']:,} publishes over {r['config']['streams']} streams; projection caught "
            f"up {tp['projection_catch_up_after_last_ack_s']:.1f}s after the last ack",
            *[f"- phase 2 @{v['project']['offered_msg_per_s']:g}/s: {v['project']['n']:,} publishes over "
              f"{v['project']['subscribers']} streams, each followed by one long-polling subscriber "
              f"({v['project']['polls']:,} get_since calls); {v['project']['achieved_msg_per_s']:,.0f} msg/s "
              f"acked; {v['project']['not_visible']} messages never seen" for v in r["visibility_by_rate"]],
            f"- phase 3: payload cache {gs['cache_mb']} MiB; cold reads after "
            f"{gs['bytes_written_after_warm_reads'] / mb:,.1f} MiB of records written past the warm reads "
            f"({gs['eviction_filler_messages']:,} of them filler); the cold streams share a partition with "
            f"~{gs['streams_per_partition_in_cold_region']:.1f} others, the raw read takes 500 consecutive records",
            f"- phase 4: loaded at {mem['load']['msg_per_s']:,.0f} msg/s acked while signing in "
            f"{r['config']['sign_procs']} processes on the same machine; projection caught up "
            f"{mem['load']['projection_catch_up_after_last_ack_s']:.1f}s after the last ack",
            f"- machine: {r['machine']['cpus']} CPUs; broker, worker, projection and this client share them; "
            f"stack start-up {r['startup_s']:.1f}s"]
    return "\n".join(out)


def cost_tables(r: dict[str, Any]) -> list[str]:
    """CPU µs per acknowledged message by process, and the broker's requests per message by type."""
    c = r.get("costs")
    if not c:
        return []
    legs = c["legs"]
    procs = list(PROJECT_PARTS) + [p for p in legs[0]["us_per_msg"] if p not in PROJECT_PARTS and p != "total"]
    out = [cpu_table([{**leg, "label": f"{leg['label']} ({leg['leg']})"} for leg in legs], procs),
           "(parentheses: an idle service beside a raw leg, not in its total; idle CPU cores: "
           + ", ".join(f"{p} {v:.3f}" for p, v in c["idle"]["cpu_cores"].items()) + ")"]
    if c["broker_requests"]:
        out += ["", requests_table(legs, c["idle"].get("broker_requests_per_s"))]
        out += [f"- {note}" for note in (transactions_note(leg) for leg in legs if leg["leg"] == "project") if note]
        for leg in legs:
            if leg["leg"] == "raw":
                produces = leg["requests"].get("Produce", 0)
                out.append(f"- {leg['label']}: {produces:,} Produce requests for {leg['messages']:,} records "
                           f"({leg['messages'] / max(1, produces):.1f} records per request)")
    else:
        out.append("(no broker request counts: the broker ran without the metrics agent)")
    prof = r.get("profiles")
    if prof:
        cost = "no pauses (--nonblocking)" if prof.get("nonblocking") else "that leg's latencies include its pauses"
        out += ["", f"Profiles ({prof['phase']}, py-spy {prof['rate_hz']} Hz for {prof['duration_s']} s; "
                    f"{cost}): {prof['dir']} (*.svg flame graphs, *.speedscope.json, *.top.txt)"]
        for name, p in prof["processes"].items():
            top = ", ".join(f"{f['frame']} {f['self_pct']:.1f}%" for f in p["by_self"][:5])
            out.append(f"- {name}: {p['samples']:,} samples; top self: {top or 'none'}")
    return out


def plot(r: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def cdf(ax: Any, samples: list[float], label: str, style: str) -> None:
        if not samples:
            return
        xs = sorted(samples)
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        ax.plot(xs, ys, style, label=f"{label} (p99 {pct(xs, 99):.1f} ms)")

    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 5))
    gs = r["get_since"]
    for v in r["visibility_by_rate"]:
        rate = v["project"]["offered_msg_per_s"]
        cdf(a, v["project"]["visible_samples_ms"], f"publish -> visible in get_since @{rate:g}/s", "-")
        cdf(a, v["raw"]["latency_samples_ms"], f"raw produce -> consume @{rate:g}/s", "--")
    a.axvline(TARGETS["visible_p99_ms"], color="grey", linestyle=":", label="target p99")
    a.set_title("2. publish -> visible latency at fixed offered loads")
    cdf(b, gs["warm"]["project_samples_ms"], "get_since(500) warm", "-")
    cdf(b, gs["cold"]["project_samples_ms"], "get_since(500) cold", "-")
    cdf(b, gs["warm"]["raw_samples_ms"] + gs["cold"]["raw_samples_ms"], "raw seek + read 500", "--")
    b.axvline(TARGETS["get_since_p99_ms"], color="grey", linestyle=":", label="target p99")
    b.set_title("3. get_since(limit 500) latency")
    for ax in (a, b):
        ax.set_xscale("log")
        ax.set_xlabel("ms (log scale)")
        ax.set_ylabel("fraction of requests")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def security_leg(args: argparse.Namespace, secure: bool) -> dict[str, Any]:
    """Phases 1 and 2 (first rate) on a fresh broker, plaintext or secure."""
    keys = Keys(os.urandom(32), os.urandom(32))
    tmp = Path(tempfile.mkdtemp(prefix="wt-bench-sec-"))
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    lk = LocalKafka(embedded_spec(tmp / "kafka", secure=secure))
    saved = {k: os.environ.pop(k, None) for k in (ENV_CREDENTIALS, ENV_PRINCIPAL)}
    services: ServiceSet | None = None
    client: CommandClient | None = None
    http: Http | None = None
    try:
        lk.up(prefix=prefix)
        bootstrap = lk.spec.bootstrap
        if secure:  # topics as the admin; the publishing client as the client principal
            os.environ[ENV_CREDENTIALS] = str(credentials_file(lk.spec, ADMIN_PRINCIPAL))
        ensure_topics(bootstrap, catalogue(prefix, partitions=args.partitions))
        services = ServiceSet(bootstrap, prefix, tmp / "logs", api_port=free_ports(1)[0],
                              credentials=credentials_file(lk.spec, SERVICE_PRINCIPAL) if secure else None)
        services.start_worker("w1")
        services.start_projection("p1")
        services.wait_ready()
        if secure:
            os.environ[ENV_CREDENTIALS] = str(credentials_file(lk.spec, CLIENT_PRINCIPAL))
        client = CommandClient(bootstrap, prefix=prefix)
        http = Http(services.api_url)
        tag = uuid.uuid4().hex[:6]
        warm = [f"bench.warm.{tag}.{i}" for i in range(2)]
        create_streams(client, keys, warm, 1000)
        items, _ = presign(keys, warm, 50, args.payload, "warm-up signing")
        publish_burst(client, items)
        http.wait_heads(dict.fromkeys(warm, 50), desc="warm-up")
        p1 = [f"bench.tput.{tag}.{i:03d}" for i in range(args.streams)]
        create_streams(client, keys, p1, args.msgs_per_stream)
        items, _ = presign(keys, p1, args.msgs_per_stream, args.payload, "1. signing (untimed)")
        throughput = publish_burst(client, items)
        http.wait_heads(dict.fromkeys(p1, args.msgs_per_stream), desc="1.")
        rate = args.rates[0]
        p2 = [f"bench.lat.{tag}.{i:03d}" for i in range(args.latency_streams)]
        per_stream = max(1, round(rate * args.seconds / len(p2)))
        create_streams(client, keys, p2, per_stream)
        items, _ = presign(keys, p2, per_stream, args.payload, "2. signing (untimed)")
        visible = publish_paced(client, http, items, rate, args.wait_ms)
        return {"publish_msg_per_s": throughput["msg_per_s"], "visible_p99_ms": visible["visible_ms"]["p99"],
                "visible_p50_ms": visible["visible_ms"]["p50"], "rate": rate}
    finally:
        for closer in (http, client):
            if closer is not None:
                closer.close()
        if services is not None:
            services.stop()
        for key, value in saved.items():
            os.environ.pop(key, None)
            if value is not None:
                os.environ[key] = value
        lk.down()


def security_compare(args: argparse.Namespace) -> dict[str, Any]:
    """Plaintext, then secure, in one run; the table puts them side by side."""
    plain = security_leg(args, secure=False)
    secure = security_leg(args, secure=True)
    rows = [("publish throughput (msg/s)", "publish_msg_per_s"),
            (f"publish->visible p50 @{plain['rate']:g}/s (ms)", "visible_p50_ms"),
            (f"publish->visible p99 @{plain['rate']:g}/s (ms)", "visible_p99_ms")]
    print(f"{'':40} {'plaintext':>12} {'secure':>12} {'secure/plain':>13}")
    for label, key in rows:
        print(f"{label:40} {plain[key]:12.1f} {secure[key]:12.1f} {secure[key] / plain[key]:13.2f}")
    return {"plaintext": plain, "secure": secure}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="smoke-run sizes (5x1000 msgs, 5 s, 100 reads, 10x1000 RSS, 16 MiB cache)")
    parser.add_argument("--warm-up", type=int, default=5000,
                        help="publishes (and raw records) sent before anything is measured, to warm the "
                             "broker's JIT for both (default 5000; 100 was the earlier, cold-broker setting)")
    parser.add_argument("--streams", type=int, help="phase 1 streams (default 20)")
    parser.add_argument("--msgs-per-stream", type=int, help="phase 1 messages per stream (default 1000)")
    parser.add_argument("--payload", type=int, default=512, help="payload bytes in phases 1-3 (default 512)")
    parser.add_argument("--rates", type=lambda t: [float(x) for x in t.split(",")], default=[1000.0],
                        help="phase 2 offered loads, msg/s, comma-separated; the first is judged (default 1000)")
    parser.add_argument("--seconds", type=float, help="phase 2 duration (default 10)")
    parser.add_argument("--latency-streams", type=int, help="phase 2 streams (default 20)")
    parser.add_argument("--wait-ms", type=int, default=5000, help="phase 2 long-poll wait_ms (default 5000)")
    parser.add_argument("--reads", type=int, help="phase 3 requests each warm and cold (default 300)")
    parser.add_argument("--rss-streams", type=int, help="phase 4 streams (default 100)")
    parser.add_argument("--rss-window", type=int, help="phase 4 window = messages per stream (default 10000)")
    parser.add_argument("--rss-payload", type=int, default=1024, help="phase 4 payload bytes (default 1024)")
    parser.add_argument("--cache-mb", type=float,
                        help="WATCHTOWER_PAYLOAD_CACHE_MB for the services (default: env or 64; --quick 16)")
    parser.add_argument("--partitions", type=int, default=6, help="partitions per topic (default 6)")
    parser.add_argument("--sign-procs", type=int, default=os.cpu_count() or 2, help="phase 4 signing processes")
    parser.add_argument("--max-inflight", type=int, default=20_000, help="phase 4 unacknowledged publishes cap")
    parser.add_argument("--seed", type=int, default=7, help="random cursors' seed")
    parser.add_argument("--keep", action="store_true", help="keep the broker data and service logs")
    parser.add_argument("--json", metavar="PATH", help="write every result as JSON to PATH")
    parser.add_argument("--plot", metavar="PATH", help="write latency CDFs (phases 2 and 3) as a PNG to PATH")
    parser.add_argument("--profile", metavar="DIR",
                        help="py-spy the worker and projection during phase 2's first rate: collapsed stacks, "
                             "speedscope JSON, SVG flame graph and a top-frames summary per process in DIR")
    parser.add_argument("--profile-nonblocking", action="store_true",
                        help="py-spy --nonblocking: do not pause the services per sample (less perturbation)")
    parser.add_argument("--no-broker-requests", dest="broker_requests", action="store_false",
                        help="start the broker without its metrics agent (no request counts per publish)")
    parser.add_argument("--idle-seconds", type=float, default=5.0,
                        help="quiet seconds measured before phase 1 for the idle CPU and request background")
    parser.add_argument("--security", action="store_true",
                        help="phases 1-2 on a plaintext broker, then on a secure one, side by side")
    args = parser.parse_args(argv)
    quick = {"streams": 5, "msgs_per_stream": 1000, "seconds": 5.0, "latency_streams": 10, "reads": 100,
             "rss_streams": 10, "rss_window": 1000, "cache_mb": 16.0}
    full = {"streams": 20, "msgs_per_stream": 1000, "seconds": 10.0, "latency_streams": 20, "reads": 300,
            "rss_streams": 100, "rss_window": 10_000,
            "cache_mb": float(os.environ.get("WATCHTOWER_PAYLOAD_CACHE_MB", "64"))}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.msgs_per_stream <= GET_SINCE_LIMIT:
        parser.error(f"--msgs-per-stream must exceed {GET_SINCE_LIMIT} for get_since(limit {GET_SINCE_LIMIT})")
    if args.security:
        result = security_compare(args)
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2))
        return 0
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
    raise SystemExit(main())
