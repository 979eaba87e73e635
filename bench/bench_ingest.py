"""Timer-driven ingestion under load, beside the plain publish path, in one run.

Starts an embedded broker, one stream-actor worker, one projection worker (the API), the command
gateway (in a process of its own, as `watchtower up` runs it; ``--gateway api``: in the API's), the
ingestion service (scheduler + aggregator, or with ``--aggregators N`` a scheduler and N
aggregators), `--runners` runners (the last one lying with ``--liar``) and a local HTTP source.
Creates `--streams` feeds ticking every block (``interval_blocks=1``) with `--proof` over
`--num-runners` runners, and one plain feed. Then, in three windows:

1. the plain path alone: `--plain-rate` publishes a second through the SDK, at random moments
   (`--plain-seconds`), from a process of its own (`PlainProbe`), as a user's publisher is;
2. ingestion starts, and is left `--warmup` seconds to reach its steady state (the first tick of
   each feed is a catch-up over the blocks since its creation);
3. the measured window (`--seconds`): ingestion and the plain path together.

It reports, for the measured window:

- offered ticks/s (streams × blocks) and sustained ticks/s (ticks finished: published + failed),
  the ticks still pending at the end, and failures by reason;
- tick → visible p50/p99 for a sample of `--sample` ingesting feeds (the moment a message is first
  readable through a long-polling ``get_since``, minus the start of its tick's block, which is the
  message's timestamp); beside it the plain path's publish → visible p50/p99, alone and during
  ingestion (the baseline, measured in the same run), and their p99 ratio with its 90% bootstrap
  interval (`plain_p99_ratio`, bench/tail_ratio.py: how far one run can place it);
- where the plain publishes' time went, stage by stage (`stage_trace`), alone and during ingestion;
- CPU per tick of every process (µs of user + system time per finished tick): scheduler and
  aggregator (the ``ingest`` processes), runners, worker, projection, broker, this client (the
  ingesting feeds' readers) and the plain path's;
- with ``--broker-requests`` (the broker's Jolokia agent), the broker's requests per tick by type.
- with ``--profile DIR``, py-spy profiles of every process over the window (bench/profiles.py);
- the broker's garbage-collector pauses in each phase (its GC log, `broker_gc`), and how long the
  broker was paused on each slowest plain publish's way.

A run in which no tick finished reports an ``error`` and exits 1: its plain-path figures were not
measured beside ingestion. Its directory (the broker's data, every process's log) is kept then, and
with ``--keep``; otherwise it is removed.

    .venv/bin/python bench/bench_ingest.py --streams 500 --seconds 60
    .venv/bin/python bench/bench_ingest.py --streams 200 --proof QUORUM --num-runners 3 --runners 3 --liar

A script, not a test. Every figure is printed beside its baseline.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import multiprocessing
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "ingest"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import broker_gc
import nacl.signing
from bench_stream_actor import cpu_seconds
from broker_requests import count_delta, read_error_counts, read_request_counts
from ingest_harness import PriceSource, health, serve_source
from kafka_fixture import embedded_spec, free_ports
from profiles import SpyRecorder
from tail_ratio import quantile, ratio_interval

from watchtower.client.account import Account
from watchtower.client.http import ApiClient
from watchtower.client.sdk import Publisher, create_feed, wait_until_visible
from watchtower.ingest import keys
from watchtower.ingest.priority import HostIdle, niceness_steps, yield_mode
from watchtower.local import priority
from watchtower.local.broker import LocalKafka
from watchtower.local.errors import LocalStackError
from watchtower.local.jars import jolokia_agent_jar
from watchtower.local.stack import ServiceSet
from watchtower.protocol.constants import BLOCK_INTERVAL_MS, GENESIS_UNIX_MS
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.signed_command import Command
from watchtower.schemas.records import decode_message
from watchtower.schemas.wire import decode_command
from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import catalogue, topic_name
from watchtower.topics.partitioning import partition_for_key
from watchtower.topics.reader import read_committed


def pct(values: list[float], q: float) -> float | None:
    return round(quantile(values, q), 1) if values else None


def dist(values: list[float]) -> dict[str, Any]:
    return {"p50": pct(values, 0.5), "p99": pct(values, 0.99), "n": len(values)}


def watch(api: ApiClient, stream_id: str, stop: threading.Event, seen: dict[int, tuple[float, float]]) -> None:
    """Long-poll `stream_id`; record, per sequence, (first readable, the message's timestamp)."""
    cursor = 0
    while not stop.is_set():
        try:
            page = api.get_since(stream_id, cursor, 100, min_head=cursor + 1, wait_ms=1000)
        except Exception as exc:  # a benchmark keeps measuring through a slow answer
            print(f"watch {stream_id}: {exc}", file=sys.stderr)
            time.sleep(0.2)
            continue
        now = time.time()
        for m in page.get("messages", []):
            seen.setdefault(m["sequence"], (now, m["timestamp_unix_ms"] / 1000))
            cursor = max(cursor, m["sequence"])


def finished(h: dict[str, Any]) -> int:
    return int(h.get("published", 0)) + sum(h.get("failed", {}).values())


def ingest_totals(healths: list[dict[str, Any]]) -> dict[str, Any]:
    """The aggregators' counters added up."""
    failed: dict[str, int] = {}
    for h in healths:
        for reason, n in h.get("failed", {}).items():
            failed[reason] = failed.get(reason, 0) + int(n)
    return {"published": sum(int(h.get("published", 0)) for h in healths), "failed": failed,
            "pending": sum(int(h.get("pending", 0)) for h in healths),
            "tasks": sum(int(h.get("tasks", 0)) for h in healths)}


def sample_windows(services: ServiceSet, names: list[str], stop: threading.Event,
                   out: list[dict[str, Any]]) -> None:
    """Every half second, each aggregator's send window (limit, in flight, held) from its health file."""
    while not stop.wait(0.5):
        for name in names:
            window = health(services.health_file(name)).get("window")
            if window:
                out.append(window)


def sample_groups(procs: dict[str, int], stop: threading.Event, out: dict[str, list[int]]) -> None:
    """Every half second, each ingestion process's session group nice value (`local.priority`)."""
    while not stop.wait(0.5):
        for name, pid in procs.items():
            nice = priority.group_niceness(pid)
            if nice is not None:
                out[name].append(nice)


def window_summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The aggregators' send windows over the measured window: limit, in flight and held, p50/max."""
    out: dict[str, Any] = {}
    for k in ("limit", "in_flight", "held", "base_rtt_ms"):
        values = [float(w[k]) for w in samples if w.get(k) is not None]  # a sample may lack one (no round trip yet)
        if values:
            out[k] = {"p50": pct(values, 0.5), "max": max(values)}
    return out


@dataclasses.dataclass
class PlainPath:
    """The baseline: SDK publishes on a plain feed at random moments; publish → first readable."""

    publisher: Publisher | None
    seen: dict[int, tuple[float, float]]
    sent: dict[int, float] = dataclasses.field(default_factory=dict)
    acked: dict[int, float] = dataclasses.field(default_factory=dict)

    def run(self, seconds: float, rate: float) -> list[int]:
        """Publishes at random moments, `rate` a second on average (a Poisson process).

        Blocks tick on the second, and a block's ingested publishes reach the stream worker
        together; a fixed phase would measure either always that burst or never it. Poisson arrivals
        sample every phase of the block alike, so the percentiles say what a publisher at any moment
        sees. The default of 5 a second gives some 300 samples in a 60-s window, so p99 is not
        simply the largest of 60 (as at one a block); the load it adds is 1% of 500 feeds'."""
        sequences = []
        start = time.time()
        rng = random.Random(len(self.sent))
        due = start
        while True:
            due += rng.expovariate(rate)
            if due - start >= seconds:
                return sequences
            time.sleep(max(0.0, due - time.time()))
            t = time.time()
            assert self.publisher is not None, "a path made from a probe's results does not publish"
            reply = self.publisher.publish("price", b'{"p": 1}')
            sequence = int(reply["sequence"])
            self.sent[sequence] = t
            self.acked[sequence] = time.time()
            sequences.append(sequence)

    def latencies(self, sequences: list[int]) -> list[float]:
        return [(self.seen[s][0] - self.sent[s]) * 1000 for s in sequences if s in self.seen]

    def ack_latencies(self, sequences: list[int]) -> list[float]:
        """Publish → the stream actor's acknowledgement (the worker's share of the latency)."""
        return [(self.acked[s] - self.sent[s]) * 1000 for s in sequences]

    def slowest(self, sequences: list[int], n: int = 5) -> list[dict[str, float]]:
        """The `n` slowest publishes (→ visible): their latencies, acknowledgement, and how far into
        its block (ms since the block started) and when each was sent, to tell a block's burst from a
        stall and to find it in the processes' logs."""
        rows = [{"visible_ms": round((self.seen[s][0] - self.sent[s]) * 1000, 1),
                 "ack_ms": round((self.acked[s] - self.sent[s]) * 1000, 1),
                 "block_phase_ms": round((self.sent[s] * 1000 - GENESIS_UNIX_MS) % BLOCK_INTERVAL_MS, 1),
                 "sent_unix_ms": int(self.sent[s] * 1000)}
                for s in sequences if s in self.seen]
        return sorted(rows, key=lambda r: -r["visible_ms"])[:n]


def _plain_probe(conn: Connection, api_url: str, commands_url: str | None, stream_id: str, owner_seed: bytes,
                 publisher_seed: bytes, home: str) -> None:
    """The plain path's publisher and its reader (`PlainPath`, `watch`), in a process of their own.

    A user publishing on a plain feed is a process of its own; in this client's process the plain
    path's sends and reads would wait for the interpreter behind the ingesting feeds' readers, which
    all wake at each block's burst. Answers ``("run", seconds, rate)`` with the sequences published,
    ``("data",)`` with (sent, acked, seen), and ends at ``("stop",)``."""
    api = ApiClient(api_url, commands_url=commands_url)
    owner = Account(nacl.signing.SigningKey(owner_seed), home=Path(home))
    path = PlainPath(Publisher(api, owner, stream_id, nacl.signing.SigningKey(publisher_seed)), {})
    stop = threading.Event()
    threading.Thread(target=watch, args=(api, stream_id, stop, path.seen), daemon=True).start()
    while True:
        request = conn.recv()
        if request[0] == "run":
            conn.send(path.run(request[1], request[2]))
        elif request[0] == "data":
            conn.send((path.sent, path.acked, dict(path.seen)))
        else:
            stop.set()
            return


class PlainProbe:
    """The main process's end of `_plain_probe`."""

    def __init__(self, api: ApiClient, commands_url: str | None, stream_id: str, owner: Account,
                 publisher_key: nacl.signing.SigningKey, home: Path) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_plain_probe, name="plain-probe", daemon=True, args=(
            child, api.base_url, commands_url, stream_id, bytes(owner.signing_key), bytes(publisher_key), str(home)))
        self.process.start()
        child.close()

    def run(self, seconds: float, rate: float) -> list[int]:
        self.conn.send(("run", seconds, rate))
        return list(self.conn.recv())

    def results(self) -> PlainPath:
        """What the probe sent, had acknowledged and saw, as a `PlainPath` to report from."""
        self.conn.send(("data",))
        sent, acked, seen = self.conn.recv()
        return PlainPath(None, seen, sent, acked)

    def stop(self) -> None:
        if self.process.is_alive():
            with contextlib.suppress(OSError, BrokenPipeError):
                self.conn.send(("stop",))
            self.process.join(5)
        if self.process.is_alive():
            self.process.kill()


#: The stages of a plain publish, in order (`stage_trace`).
STAGES = ("to_command", "at_worker", "commit_and_back", "ack_to_visible")


def stage_trace(bootstrap: str, prefix: str, stream_id: str, partitions: int, path: PlainPath,
                sequences: list[int]) -> dict[str, Any]:
    """Where the plain publishes' time went, from the records' own timestamps (CreateTime: set when
    the record was produced, on this host's clock):

    - ``to_command``: sent → the gateway produced the publish command (HTTP, the gateway's loop);
    - ``at_worker``: → the stream worker produced its message (the wait for a fetch, for the
      transaction before it, and the decision);
    - ``commit_and_back``: → the acknowledgement (the commit, the reply, the way back);
    - ``ack_to_visible``: → first readable through the long poll (negative when the read came first).

    Each stage's p50/p99 over `sequences`, and the stages of the five slowest publishes."""
    partition = partition_for_key(stream_id.encode(), partitions)
    commanded: dict[int, float] = {}
    decided: dict[int, float] = {}
    key = stream_id.encode()
    for m in read_committed(bootstrap, [topic_name("commands", prefix)], partition=partition, timeout_s=120):
        try:
            cmd = decode_command(m.value()) if m.key() == key else None
        except WatchtowerError:
            continue
        if isinstance(cmd, Command) and cmd.method == "publish":
            commanded.setdefault(int(cmd.body["sequence"]), m.timestamp()[1] / 1000)
    for m in read_committed(bootstrap, [topic_name("messages", prefix)], partition=partition, timeout_s=120):
        if m.key() == key:
            decided.setdefault(decode_message(m.value() or b"").sequence, m.timestamp()[1] / 1000)
    rows = []
    for s in sequences:
        if s in commanded and s in decided and s in path.seen:
            marks = (path.sent[s], commanded[s], decided[s], path.acked[s], path.seen[s][0])
            stages = zip(STAGES, marks[:-1], marks[1:], strict=True)
            rows.append({"visible_ms": round((marks[-1] - marks[0]) * 1000, 1),
                         **{st: round((b - a) * 1000, 1) for st, a, b in stages}})
    return {**{st: dist([r[st] for r in rows]) for st in STAGES},
            "slowest": sorted(rows, key=lambda r: -r["visible_ms"])[:5]}


def positive_rate(text: str) -> float:
    """A rate a second above 0 (a Poisson process of rate 0 never publishes)."""
    rate = float(text)
    if not 0 < rate <= 1000:
        raise argparse.ArgumentTypeError(f"need a rate above 0 and at most 1000 a second, got {text}")
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=60.0, help="the measured window")
    parser.add_argument("--warmup", type=float, default=15.0)
    parser.add_argument("--plain-seconds", type=float, default=60.0, help="the plain path alone, before ingestion")
    # 20 a second: each p99 then rests on the dozen slowest of some 1,200 publishes, not on two or
    # three of 300 (at 5), and its bootstrap interval is a third as wide.
    parser.add_argument("--plain-rate", type=positive_rate, default=20.0,
                        help="plain publishes a second, at random moments (1 = the earlier one a block)")
    parser.add_argument("--sample", type=int, default=20, help="ingesting feeds whose latency is measured")
    parser.add_argument("--proof", default="NONE", choices=("NONE", "QUORUM", "MEDIAN"))
    parser.add_argument("--num-runners", type=int, default=1, help="runners each tick asks for")
    parser.add_argument("--runners", type=int, default=1, help="runner processes")
    parser.add_argument("--liar", action="store_true", help="the last runner adds 1 to every number")
    parser.add_argument("--aggregators", type=int, default=1, help="aggregator members")
    parser.add_argument("--split", action="store_true",
                        help="the scheduler in a process of its own (by default it shares one with an aggregator)")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--gateway", choices=("api", "own"), default="own",
                        help="the command gateway in a process of its own (as `watchtower up` and compose.yaml "
                             "run it) or in the API process, sharing its event loop with the fold")
    parser.add_argument("--ingest-nice", type=int, default=None,
                        help="WATCHTOWER_INGEST_NICE for the ingestion processes (unset: the product's default, 10)")
    parser.add_argument("--ingest-yield", choices=("auto", "always"), default=None,
                        help="WATCHTOWER_INGEST_YIELD: step back while the host has room (auto, the default) or always")
    parser.add_argument("--broker-requests", action="store_true", help="the broker's requests per tick (Jolokia)")
    parser.add_argument("--profile", type=Path, default=None, help="py-spy profiles of every process into DIR")
    parser.add_argument("--keep", action="store_true",
                        help="keep the run's directory (broker data, every process's log) when it succeeds")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="wt-bench-ingest-"))
    home = tmp / "home"
    spec = embedded_spec(tmp / "kafka")
    if args.broker_requests:
        try:
            jolokia_agent_jar()
            spec = dataclasses.replace(spec, metrics_port=free_ports(1)[0])
        except LocalStackError as exc:
            print(f"no broker request counts (the Jolokia agent is unavailable: {exc})", file=sys.stderr)
    lk = LocalKafka(spec)
    broken = True  # until a report with ticks in it is printed: the run's logs are kept
    services: ServiceSet | None = None
    probe: PlainProbe | None = None
    source = PriceSource()
    stop = threading.Event()
    try:
        lk.up()
        bootstrap = lk.spec.bootstrap
        prefix = f"bench{uuid.uuid4().hex[:8]}"
        ensure_topics(bootstrap, catalogue(prefix, partitions=args.partitions))
        (api_port,) = free_ports(1)
        services = ServiceSet(bootstrap, prefix, tmp / "logs", api_port=api_port)
        services.start_worker("w1")
        services.start_projection("p1", gateway=args.gateway == "api")
        commands_url = None
        if args.gateway == "own":  # the command gateway in a process of its own, as `watchtower up` runs it
            (gateway_port,) = free_ports(1)
            commands_url = services.start_gateway("g1", gateway_port)
        services.wait_ready()
        keys.scheduler_key(home)
        delegated = keys.ingestion_publisher_key(home)
        extra = {"WATCHTOWER_HOME": str(home), "WATCHTOWER_INGEST_ALLOW_NETS": "127.0.0.1/32"}
        if args.ingest_nice is not None:
            extra["WATCHTOWER_INGEST_NICE"] = str(args.ingest_nice)
        if args.ingest_yield is not None:
            extra["WATCHTOWER_INGEST_YIELD"] = args.ingest_yield
        if commands_url is not None:  # a runner registers itself with a command
            extra["WATCHTOWER_COMMANDS_API"] = commands_url
        api = ApiClient(services.api_url, commands_url=commands_url)
        with serve_source(source) as url:
            runner_names = [f"r{i + 1}" for i in range(args.runners)]
            for i, name in enumerate(runner_names):
                services.start_runner(name, lie=args.liar and i == len(runner_names) - 1, extra_env=extra)
            owner = Account(nacl.signing.SigningKey.generate(), home=home)
            ingestion = {"enabled": True, "interval_blocks": 1, "num_runners": args.num_runners,
                         "proof_type": args.proof, "result_schema": {"type": "object"},
                         "task_definition": {"kind": "http_json", "url": url, "select": {"p": "$.data.price"}}}
            plain_key = nacl.signing.SigningKey.generate()
            plain = create_feed(api, owner, name="plain", publisher_key_hex=bytes(plain_key.verify_key).hex())
            wait_until_visible(api, plain["stream_id"])
            probe = PlainProbe(api, commands_url, plain["stream_id"], owner, plain_key, home)
            print(f"plain path alone for {args.plain_seconds:.0f}s", file=sys.stderr, flush=True)
            alone_started = time.time()
            plain_alone = probe.run(args.plain_seconds, args.plain_rate)
            alone_span = (alone_started * 1000, time.time() * 1000)

            # Ingestion runs before the feeds exist, so each feed ticks from its creation on (no
            # catch-up burst at the start).
            ingest_names = ["ingest"]
            services.start_ingest(extra_env=extra, role="aggregator" if args.split else "all")
            if args.split:
                services.start_ingest(extra_env=extra, name="scheduler", role="scheduler")
            for i in range(1, args.aggregators):
                ingest_names.append(services.start_ingest(extra_env=extra, name=f"ingest-{i + 1}", role="aggregator"))
            t0 = time.time()
            with ThreadPoolExecutor(16) as pool:
                streams = list(pool.map(lambda i: create_feed(
                    api, owner, name=f"ingest-{i}", ingestion=ingestion,
                    publisher_key_hex=bytes(delegated.verify_key).hex())["stream_id"], range(args.streams)))
            print(f"created {args.streams} ingesting feeds in {time.time() - t0:.1f}s", file=sys.stderr, flush=True)
            seen: dict[str, dict[int, tuple[float, float]]] = {sid: {} for sid in streams[: args.sample]}
            for sid in seen:
                threading.Thread(target=watch, args=(api, sid, stop, seen[sid]), daemon=True).start()
            print(f"ingestion warming up for {args.warmup:.0f}s", file=sys.stderr, flush=True)
            probe.run(args.warmup, args.plain_rate)

            pids = services.pids()
            procs = {name: pids[name] for name in [*ingest_names, *(["scheduler"] if args.split else []),
                                                   *(f"runner-{r}" for r in runner_names)]}
            if commands_url is not None:
                procs["gateway"] = pids["gateway-g1"]
            procs |= {"worker": pids["worker-w1"], "projection": pids["projection-p1"],
                      "broker": int(lk.status()["nodes"][0]["pid"]), "bench client": os.getpid(),
                      "plain client": int(probe.process.pid or 0)}
            metrics_url = lk.metrics_url()
            spy = (SpyRecorder(args.profile, {n: p for n, p in procs.items() if n != "broker"}, args.seconds)
                   if args.profile else None)
            first = [health(services.health_file(n)) for n in ingest_names]
            cpu0 = {n: cpu_seconds(p) for n, p in procs.items()}
            req0 = read_request_counts(metrics_url) if metrics_url else None
            err0 = read_error_counts(metrics_url) if metrics_url else None
            window_start = time.time()
            if spy is not None:
                spy.start()
            print(f"measuring for {args.seconds:.0f}s", file=sys.stderr, flush=True)
            windows: list[dict[str, Any]] = []
            sampler = threading.Thread(target=sample_windows, args=(services, ingest_names, stop, windows), daemon=True)
            sampler.start()
            ingest_procs = {n: p for n, p in procs.items()
                            if n in ingest_names or n == "scheduler" or n.startswith("runner-")}
            groups: dict[str, list[int]] = {n: [] for n in ingest_procs}
            window_over = threading.Event()
            threading.Thread(target=sample_groups, args=(ingest_procs, window_over, groups), daemon=True).start()
            host_idle = HostIdle()
            plain_during = probe.run(args.seconds, args.plain_rate)
            elapsed = time.time() - window_start
            idle_in_window = host_idle.sample()
            window_over.set()
            cpu1 = {n: cpu_seconds(p) for n, p in procs.items()}
            # What the kernel applied: each ingestion process's niceness and its session group's.
            applied = {n: {"nice": os.getpriority(os.PRIO_PROCESS, p), "group": priority.group_niceness(p)}
                       for n, p in procs.items() if n in ingest_names or n == "scheduler" or n.startswith("runner-")}
            req1 = read_request_counts(metrics_url) if metrics_url else None
            err1 = read_error_counts(metrics_url) if metrics_url else None
            end = [health(services.health_file(n)) for n in ingest_names]
            time.sleep(3)
            plain_path = probe.results()
            stop.set()
            profiles = spy.finish() if spy is not None else None
            trace = {"alone": stage_trace(bootstrap, prefix, plain["stream_id"], args.partitions, plain_path,
                                          plain_alone),
                     "during_ingestion": stage_trace(bootstrap, prefix, plain["stream_id"], args.partitions,
                                                     plain_path, plain_during)}

        before, after = ingest_totals(first), ingest_totals(end)
        gc_log = lk.spec.node_specs[0].gc_log_file
        gc_alone = broker_gc.pauses(gc_log, *alone_span)
        gc_during = broker_gc.pauses(gc_log, window_start * 1000, (window_start + elapsed) * 1000)
        slowest = plain_path.slowest(plain_during)
        for row in slowest:
            row["broker_paused_ms"] = broker_gc.overlap(gc_during, row["sent_unix_ms"],
                                                        row["sent_unix_ms"] + row["visible_ms"])
        ticks = sum(finished(h) for h in end) - sum(finished(h) for h in first)
        failed = {r: n - before["failed"].get(r, 0) for r, n in after["failed"].items()
                  if n - before["failed"].get(r, 0)}
        ingest_lat = [(now - stamp) * 1000 for s in seen.values() for now, stamp in s.values()
                      if window_start <= stamp <= window_start + elapsed]
        report: dict[str, Any] = {
            "streams": args.streams, "proof": args.proof, "num_runners": args.num_runners, "runners": args.runners,
            "liar": args.liar, "aggregators": args.aggregators, "split": args.split, "gateway": args.gateway,
            "ingest_nice": niceness_steps({**os.environ, **extra}),  # how far the ingestion processes step back
            "ingest_yield": yield_mode({**os.environ, **extra}),  # ... and when (ingest.priority)
            "ingest_priority_applied": applied,
            # The share of the window each ingestion process had its session group stepped back, and
            # the host's idle CPU over the window (what `auto` decides by).
            "ingest_stepped_back_share": {n: round(sum(1 for g in v if g) / len(v), 3) if v else None
                                          for n, v in groups.items()},
            "host_idle_share": None if idle_in_window is None else round(idle_in_window, 3),
            "ingest_priority_at_end": {n: h.get("priority") for n, h in zip(ingest_names, end, strict=True)},
            "seconds": round(elapsed, 1),
            "offered_ticks_per_s": args.streams,
            "sustained_ticks_per_s": round(ticks / elapsed, 1),
            "scheduler_tasks_per_s": round((after["tasks"] - before["tasks"]) / elapsed, 1),
            "pending_at_end": after["pending"], "failed_in_window": failed,
            "ingest_tick_to_visible_ms": dist(ingest_lat),
            "send_window": window_summary(windows),
            "plain_rate_per_s": args.plain_rate,
            "plain_publish_to_visible_ms": {"alone": dist(plain_path.latencies(plain_alone)),
                                             "during_ingestion": dist(plain_path.latencies(plain_during))},
            # beside ÷ alone with its 90% bootstrap interval: a p99 of a few hundred samples is noisy.
            "plain_p99_ratio": ratio_interval(plain_path.latencies(plain_alone), plain_path.latencies(plain_during)),
            "plain_publish_to_ack_ms": {"alone": dist(plain_path.ack_latencies(plain_alone)),
                                        "during_ingestion": dist(plain_path.ack_latencies(plain_during))},
            "plain_slowest_during_ingestion": slowest,
            # The broker's stop-the-world pauses (its GC log) in each phase, and above, in each slowest
            # publish's way from sent to visible: a stall that is the broker's shows there.
            "broker_gc_pauses": {"alone": broker_gc.summary(gc_alone, (alone_span[1] - alone_span[0]) / 1000),
                                 "during_ingestion": broker_gc.summary(gc_during, elapsed)},
            "plain_stages_ms": trace,
            "cpu_us_per_tick": {n: round((cpu1[n] - cpu0[n]) * 1e6 / max(ticks, 1)) for n in procs},
            "cores": {n: round((cpu1[n] - cpu0[n]) / elapsed, 2) for n in procs},
            "runners_health": {r: health(services.health_file(f"runner-{r}")) for r in runner_names},
            # Lane transactions the stream worker ended early for a plain publish (over the whole run).
            "worker_lane_yields": health(services.health_file("worker-w1")).get("lane_yields"),
        }
        if req0 is not None and req1 is not None:
            delta = count_delta(req0, req1)
            report["broker_requests_per_tick"] = {t: round(v / max(ticks, 1), 3) for t, v in
                                                  sorted(delta.items(), key=lambda kv: -kv[1]) if v}
        if err0 is not None and err1 is not None:  # refusals the clients retry, e.g. CONCURRENT_TRANSACTIONS
            report["broker_errors_per_tick"] = {t: round(v / max(ticks, 1), 4) for t, v in
                                                sorted(count_delta(err0, err1).items(), key=lambda kv: -kv[1])}
        if profiles is not None:  # the files: NAME.svg, NAME.speedscope.json, NAME.top.txt
            report["profiles"] = {"dir": str(args.profile), "processes": sorted(profiles)}
        broken = ticks == 0  # nothing to set the plain path beside: its ratio would mean nothing
        if broken:
            report["error"] = ("no tick finished in the window: ingestion did not run, so the plain path's "
                               f"figures are not beside it (the processes' logs: {tmp / 'logs'})")
        print(json.dumps(report, indent=None if args.json else 2, default=str))
    finally:
        stop.set()
        if probe is not None:
            probe.stop()
        if services is not None:
            services.stop()
        lk.down()
        if broken or args.keep:
            print(f"the run's directory is kept: {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if broken:
        sys.exit(1)


if __name__ == "__main__":
    main()
