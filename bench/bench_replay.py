"""Benchmark of the ICRC-77 replay worker against a raw confluent-kafka copy, measured in one run.

Starts an embedded KRaft broker, the catalogue's topics under a fresh prefix and one stream-actor
worker (as `watchtower up` does), publishes `--messages` client-signed messages on one stream
(ring window 100, so every replay reads the archive), then measures, round after round
(`--rounds`, the two cases alternated so both see the same machine load):

1. re-emit rate: a replay of the whole stream (from writing its registration to reading its
   ``completed`` record), in records/s, beside a raw confluent-kafka consume -> produce copy of
   the same ``messages`` partition (read_committed consumer, transactional producer, one
   transaction per `--slice` records: the same work and guarantees without the protocol). The
   ratio replay/raw is judged against the target (>= 0.5).
2. back-pressure: publish acknowledgement latency (submit -> committed reply) at a fixed offered
   load (`--publish-rate` for `--seconds`) on a second stream, without a replay, then while
   replays of the big stream run back to back (uncapped, then with the worker capped at
   `--capped-rate` records/s): p50/p90/p99 of each and the p99 ratios.

    .venv/bin/python bench/bench_replay.py --quick                 # smoke run
    .venv/bin/python bench/bench_replay.py [--json out.json] [--plot out.png]

A script, not a test (pytest only collects `tests/`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import statistics
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

import nacl.signing
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_fixture import embedded_spec, free_ports

from watchtower.gateway.transport import CommandClient
from watchtower.local.broker import LocalKafka
from watchtower.local.stack import ServiceSet
from watchtower.protocol.replay.records import ReplayCanceled, ReplayCompleted, ReplayErrored, ReplayRegistration
from watchtower.protocol.replay.rules import plan_replay, replay_id_for
from watchtower.protocol.signed_command import Command, command_digest, sign_command
from watchtower.protocol.signing import sign_message
from watchtower.replay.worker import group_id
from watchtower.schemas.replay_records import decode_replay_record, encode_replay_record
from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import catalogue, topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.partitioning import partition_for_key

TARGET_RATIO = 0.5
TERMINAL: dict[type, str] = {ReplayCompleted: "completed", ReplayCanceled: "canceled", ReplayErrored: "errored"}


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


# ----------------------------------------------------------------------------- setup
class Stream:
    def __init__(self) -> None:
        self.stream_id = "s-" + secrets.token_hex(8)
        self.owner = nacl.signing.SigningKey.generate()
        self.publisher = nacl.signing.SigningKey.generate()
        self.head = 0

    def create(self, client: CommandClient) -> None:
        body = {"publisher_key_hex": bytes(self.publisher.verify_key).hex(), "ring_buffer_capacity": 100}
        client.submit(sign_command(self.owner, "create_stream", self.stream_id, 1, body)).result(120)

    def publish_cmd(self, size: int) -> Command:
        self.head += 1
        seq = self.head
        msg = sign_message(stream_id=self.stream_id, sequence=seq, timestamp_unix_ms=int(time.time() * 1000),
                           kind="bench", payload=seq.to_bytes(8, "big") + os.urandom(max(0, size - 8)),
                           signing_key=self.publisher, content_type="application/octet-stream")
        return sign_command(self.owner, "publish", self.stream_id, seq + 1, msg.to_json_dict())


def publish_all(client: CommandClient, stream: Stream, count: int, size: int) -> float:
    cmds = [stream.publish_cmd(size) for _ in range(count)]
    t0 = time.perf_counter()
    for start in range(0, count, 5000):
        futures = [client.submit(c) for c in cmds[start:start + 5000]]
        client.flush()
        for f in futures:
            f.result(600)
    return count / (time.perf_counter() - t0)


# ----------------------------------------------------------------------------- 1. re-emit rate
def raw_copy(bootstrap: str, source: str, partition: int, target: str, slice_size: int, expect: int) -> float:
    """records/s of a read_committed consume -> transactional produce copy, `slice_size` per transaction."""
    consumer = Consumer(kafka_config(bootstrap, **{"group.id": f"wt-bench-raw-{uuid.uuid4().hex}",
                                                   "enable.auto.commit": False, "isolation.level": "read_committed",
                                                   "log_level": 3}))
    producer = Producer(kafka_config(bootstrap, **{"transactional.id": f"wt-bench-raw-{uuid.uuid4().hex}",
                                                   "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                                                   "log_level": 3}))
    producer.init_transactions(30)
    consumer.assign([TopicPartition(source, partition, 0)])
    copied = 0
    t0 = time.perf_counter()
    while copied < expect:
        batch = [m for m in consumer.consume(slice_size, 1.0) if m.error() is None]
        if not batch:
            continue
        producer.begin_transaction()
        for m in batch:
            producer.produce(target, key=m.key(), value=m.value(), headers=m.headers())
        offsets = [TopicPartition(source, partition, int(batch[-1].offset() or 0) + 1)]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        copied += len(batch)
    elapsed = time.perf_counter() - t0
    consumer.close()
    return copied / elapsed


def register(bootstrap: str, prefix: str, stream: Stream) -> ReplayRegistration:
    """The ``registered`` record a stream's writer writes for a fresh requester's signed
    register_replay of the whole stream (the replay worker fulfils nothing else)."""
    key = nacl.signing.SigningKey.generate()
    cmd = sign_command(key, "register_replay", stream.stream_id, 1, {"namespace": stream.stream_id, "from": 1})
    digest = command_digest(cmd)
    rid = replay_id_for(digest)
    plan = plan_replay(replay_id=rid, from_sequence=1, to_sequence=None, head=stream.head)
    rec = ReplayRegistration(v=1, replay_id=rid, stream_id=stream.stream_id, namespace=stream.stream_id,
                            requester=cmd.caller, from_sequence=1, to_sequence=None, first=plan.first,
                            end_exclusive=plan.end_exclusive, end_id=plan.end_id, filter=None, skip=None, memo_hex="",
                            price_cby=0, block_height=1, caller=cmd.caller, nonce=cmd.nonce, digest_hex=digest.hex(),
                            command=cmd.to_dict())
    producer = Producer(kafka_config(bootstrap, **{"partitioner": "murmur2_random", "log_level": 3}))
    producer.produce(topic_name("replay", prefix), key=stream.stream_id.encode(), value=encode_replay_record(rec))
    producer.flush(30)
    return rec


class ReplayWatch:
    """Follows the ``replay`` topic; `wait_done(id)` returns when that replay's terminal record is read."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.done: dict[int, str] = {}
        self._cond = threading.Condition()
        self._stop = threading.Event()
        topic = topic_name("replay", prefix)
        self.consumer = Consumer(kafka_config(bootstrap, **{"group.id": f"wt-bench-watch-{uuid.uuid4().hex}",
                                                            "isolation.level": "read_committed",
                                                            "auto.offset.reset": "latest",
                                                            "fetch.wait.max.ms": 10, "log_level": 3}))
        parts = self.consumer.list_topics(topic, timeout=30).topics[topic].partitions
        lows_highs = [self.consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30) for p in parts]
        self.consumer.assign([TopicPartition(topic, p, hi) for p, (_lo, hi) in zip(parts, lows_highs, strict=True)])
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for m in self.consumer.consume(500, 0.1):
                if m.error() is not None:
                    continue
                try:
                    rec = decode_replay_record(m.value())
                except Exception:  # noqa: S112 (not ours to judge here)
                    continue
                outcome = TERMINAL.get(type(rec))
                if outcome is not None:
                    with self._cond:
                        self.done[rec.replay_id] = outcome
                        self._cond.notify_all()

    def wait_done(self, replay_id: int, timeout_s: float = 1800) -> str:
        with self._cond:
            if not self._cond.wait_for(lambda: replay_id in self.done, timeout_s):
                raise TimeoutError(f"replay {replay_id} did not finish within {timeout_s:.0f}s")
            return self.done[replay_id]

    def close(self) -> None:
        self._stop.set()
        self.thread.join(5)
        self.consumer.close()


def replay_rate(bootstrap: str, prefix: str, stream: Stream, watch: ReplayWatch) -> float:
    t0 = time.perf_counter()
    rec = register(bootstrap, prefix, stream)
    outcome = watch.wait_done(rec.replay_id)
    if outcome != "completed":
        raise RuntimeError(f"the benchmark replay ended {outcome}")
    return stream.head / (time.perf_counter() - t0)


# ----------------------------------------------------------------------------- 2. back-pressure
def paced_publish(client: CommandClient, stream: Stream, rate: float, seconds: float, size: int) -> list[float]:
    """Ack latencies (s) of publishes sent at `rate`/s for `seconds` (open loop, from the scheduled time)."""
    n = int(rate * seconds)
    cmds = [stream.publish_cmd(size) for _ in range(n)]
    lat = [math.nan] * n
    left = threading.Semaphore(0)
    t0 = time.perf_counter()
    for i, cmd in enumerate(cmds):
        due = t0 + i / rate
        while (now := time.perf_counter()) < due:
            time.sleep(min(0.002, due - now))
        fut: Future[dict[str, Any]] = client.submit(cmd)

        def done(_f: Future[dict[str, Any]], i: int = i, due: float = due) -> None:
            lat[i] = time.perf_counter() - due
            left.release()

        fut.add_done_callback(done)
    client.flush()
    for _ in range(n):
        if not left.acquire(timeout=300):
            raise TimeoutError("publishes were not acknowledged")
    return lat


def with_replays(bootstrap: str, prefix: str, big: Stream, watch: ReplayWatch, fn: Any) -> tuple[Any, int]:
    """Run `fn()` while replays of `big` run back to back; (its result, replays completed meanwhile)."""
    stop = threading.Event()
    count = [0]

    def loop() -> None:
        while not stop.is_set():
            rec = register(bootstrap, prefix, big)
            watch.wait_done(rec.replay_id)
            count[0] += 1

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    time.sleep(1.0)  # the first replay is under way
    try:
        return fn(), count[0]
    finally:
        stop.set()
        thread.join(1800)


# ----------------------------------------------------------------------------- driver
def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="wt-bench-replay-"))
    lk = LocalKafka(embedded_spec(tmp / "kafka"))
    report: dict[str, Any] = {"config": {k: v for k, v in vars(args).items() if k not in ("json", "plot")},
                              "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}}
    services: ServiceSet | None = None
    client: CommandClient | None = None
    watch: ReplayWatch | None = None
    try:
        lk.up()
        bootstrap = lk.spec.bootstrap
        prefix = f"bench{uuid.uuid4().hex[:8]}"
        ensure_topics(bootstrap, catalogue(prefix, partitions=args.partitions))
        services = ServiceSet(bootstrap, prefix, tmp / "logs", api_port=free_ports(1)[0])
        services.start_worker("w1")
        client = _client(bootstrap, prefix)
        big, small = Stream(), Stream()
        big.create(client)
        small.create(client)
        print(f"publishing {args.messages:,} messages of {args.payload} B ...", flush=True)
        report["publish_burst_msg_per_s"] = publish_all(client, big, args.messages, args.payload)
        services.start_replay("r1", {"WATCHTOWER_REPLAY_SLICE": str(args.slice), "WATCHTOWER_REPLAY_RATE": "0"})
        watch = ReplayWatch(bootstrap, prefix)
        partition = partition_for_key(big.stream_id.encode(), args.partitions)
        raw_topic = f"{prefix}.bench.raw-copy"
        admin = AdminClient(kafka_config(bootstrap))
        admin.create_topics([NewTopic(raw_topic, args.partitions, 1)])[raw_topic].result(30)
        # Warm-up: the replay worker's group join and first fold are not part of the rate.
        replay_rate(bootstrap, prefix, big, watch)
        raw_rates, replay_rates = [], []
        for r in range(args.rounds):
            raw_rates.append(raw_copy(bootstrap, topic_name("messages", prefix), partition, raw_topic, args.slice,
                                      args.messages))
            replay_rates.append(replay_rate(bootstrap, prefix, big, watch))
            print(f"round {r + 1}: raw copy {raw_rates[-1]:,.0f} rec/s, replay {replay_rates[-1]:,.0f} rec/s",
                  flush=True)
        report["reemit"] = {"raw_copy_rec_per_s": raw_rates, "replay_rec_per_s": replay_rates,
                            "raw_median": statistics.median(raw_rates),
                            "replay_median": statistics.median(replay_rates),
                            "ratio": statistics.median(replay_rates) / statistics.median(raw_rates),
                            "target_ratio": TARGET_RATIO, "slice": args.slice,
                            "replay_group": group_id(prefix)}
        paced_publish(client, small, args.publish_rate, 2.0, args.payload)  # warm
        alone = paced_publish(client, small, args.publish_rate, args.seconds, args.payload)
        during, replays = with_replays(bootstrap, prefix, big, watch,
                                       lambda: paced_publish(client, small, args.publish_rate, args.seconds,
                                                             args.payload))
        # The back-pressure knob: the same load beside a replay worker capped at --capped-rate records/s.
        services.kill9("replay-r1")
        services.start_replay("r1", {"WATCHTOWER_REPLAY_SLICE": str(args.slice),
                                     "WATCHTOWER_REPLAY_RATE": str(int(args.capped_rate))})
        capped, capped_replays = with_replays(bootstrap, prefix, big, watch,
                                              lambda: paced_publish(client, small, args.publish_rate, args.seconds,
                                                                    args.payload))
        report["publish_latency"] = {"offered_msg_per_s": args.publish_rate, "alone": dist_ms(alone),
                                     "during_replay": dist_ms(during), "replays_completed_meanwhile": replays,
                                     "during_capped_replay": dist_ms(capped), "capped_rate": args.capped_rate,
                                     "capped_replays_completed_meanwhile": capped_replays,
                                     "p99_ratio": pct(during, 99) / pct(alone, 99),
                                     "p99_ratio_capped": pct(capped, 99) / pct(alone, 99),
                                     "alone_samples_ms": [x * 1000 for x in alone],
                                     "during_samples_ms": [x * 1000 for x in during],
                                     "capped_samples_ms": [x * 1000 for x in capped]}
        return report
    finally:
        if watch is not None:
            watch.close()
        if client is not None:
            client.close()
        if services is not None:
            services.stop()
        lk.down()


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


def tables(r: dict[str, Any]) -> str:
    e, p = r["reemit"], r["publish_latency"]
    verdict = "meets" if e["ratio"] >= e["target_ratio"] else "MISSES"
    lines = [
        f"publish burst (setup): {r['publish_burst_msg_per_s']:,.0f} msg/s",
        f"1. re-emit rate ({r['config']['messages']:,} records, slice {e['slice']}, "
        f"median of {len(e['raw_copy_rec_per_s'])} rounds):",
        f"   raw consume->produce copy (txn per slice): {e['raw_median']:>10,.0f} rec/s",
        f"   replay worker:                             {e['replay_median']:>10,.0f} rec/s",
        f"   ratio replay/raw: {e['ratio']:.2f} ({verdict} the >= {e['target_ratio']:.0%} target)",
        f"2. publish ack latency at {p['offered_msg_per_s']:g} msg/s (ms):",
        "                         n      p50      p90      p99      max",
    ]
    for name in ("alone", "during_replay", "during_capped_replay"):
        d = p[name]
        lines.append(f"   {name:<21}{d['n']:>5} {d['p50']:>8.1f} {d['p90']:>8.1f} {d['p99']:>8.1f} {d['max']:>8.1f}")
    lines.append(f"   p99 during/alone: {p['p99_ratio']:.2f}x uncapped ({p['replays_completed_meanwhile']} replays "
                 f"completed meanwhile), {p['p99_ratio_capped']:.2f}x capped at {p['capped_rate']:g} rec/s")
    return "\n".join(lines)


def plot(r: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    e, p = r["reemit"], r["publish_latency"]
    a.bar(["raw copy", "replay"], [e["raw_median"], e["replay_median"]], color=["grey", "tab:blue"])
    a.set_ylabel("records/s")
    a.set_title(f"1. re-emit rate (ratio {e['ratio']:.2f}, target >= {e['target_ratio']})")
    for label, samples in (("alone", p["alone_samples_ms"]), ("during replay", p["during_samples_ms"]),
                           (f"during replay capped at {p['capped_rate']:g}/s", p["capped_samples_ms"])):
        xs = sorted(samples)
        b.plot(xs, [(i + 1) / len(xs) for i in range(len(xs))], label=f"{label} (p99 {pct(xs, 99):.1f} ms)")
    b.set_xscale("log")
    b.set_xlabel("publish ack latency, ms (log scale)")
    b.set_ylabel("fraction of publishes")
    b.set_title(f"2. publish latency at {p['offered_msg_per_s']:g} msg/s")
    b.grid(True, which="both", alpha=0.3)
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke-run sizes (10,000 messages, 1 round, 5 s)")
    parser.add_argument("--messages", type=int, help="messages on the replayed stream (default 50,000)")
    parser.add_argument("--payload", type=int, default=512, help="payload bytes (default 512)")
    parser.add_argument("--slice", type=int, default=1000, help="records per slice / raw transaction (default 1000)")
    parser.add_argument("--rounds", type=int, help="alternated raw/replay rounds (default 3)")
    parser.add_argument("--publish-rate", type=float, default=200.0, help="phase 2 offered load, msg/s (default 200)")
    parser.add_argument("--seconds", type=float, help="phase 2 duration of each leg (default 15)")
    parser.add_argument("--capped-rate", type=float, default=2000.0,
                        help="WATCHTOWER_REPLAY_RATE of the capped leg of phase 2 (default 2000)")
    parser.add_argument("--partitions", type=int, default=3, help="partitions per topic (default 3)")
    parser.add_argument("--json", metavar="PATH", help="write every result as JSON to PATH")
    parser.add_argument("--plot", metavar="PATH", help="write the rates and latency CDFs as a PNG to PATH")
    args = parser.parse_args(argv)
    defaults = ({"messages": 10_000, "rounds": 1, "seconds": 5.0} if args.quick
                else {"messages": 50_000, "rounds": 3, "seconds": 15.0})
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
