"""The transactional floor: what Kafka's consume -> produce -> commit cycle costs with no Python work.

The stream worker acknowledges a publish only once the transaction holding its event, its message,
its reply and the consumed offset has committed (DESIGN.md section 3). This benchmark runs that
cycle alone, on the same embedded KRaft broker and client settings, with every protocol step left
out (no decode, no verify, no encode): the latency it measures is the lowest any worker built on
confluent-kafka transactions can reach here, and the quick benchmark's figures are read against it.

Per offered rate (open-loop pacing, `--seconds` each), one leg after the other:

- **floor**: a producer writes 512 B commands keyed over `--streams` keys; one loop consumes what
  is fetched (read_committed), and in ONE transaction produces 3 records per command (an "event"
  and a "message" to the command's partition, a "reply" to partition 0), sends the offsets and
  commits. A read_committed follower of the replies times each command from its scheduled send
  to its reply being readable (the worker's acknowledgement). Each transaction is timed by phase:
  ``send_offsets`` (AddOffsetsToTxn + TxnOffsetCommit), ``flush`` (AddPartitionsToTxn and one
  Produce request per partition, acknowledged) and ``end`` (EndTxn).
- **raw**: the same commands produced (idempotent, acks=all) and consumed, no transaction.

``--verification off`` turns the broker's transaction verification (KIP-890 part 1,
``transaction.partition.verification.enable``) off for the run, to measure its share; it protects
against hanging transactions and stays on in every deployment.

    .venv/bin/python bench/bench_txn_floor.py [--rates 500,250,100] [--partitions 6] [--json out.json]

A script, not a test (pytest only collects `tests/`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from kafka_fixture import embedded_spec

from watchtower.local.broker import LocalKafka
from watchtower.workers.host import consumer_config, producer_config

PAYLOAD = 512
KEY_BYTES = 8


def pct(values: list[float], q: float) -> float:
    """The `q` quantile of `values` (nearest rank), NaN when there are none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Paced:
    """Produces `n` commands at `rate`/s from a fixed schedule; `sent[key]` is each one's scheduled time."""

    def __init__(self, bootstrap: str, topic: str, streams: int) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all",
                                  "enable.idempotence": True})
        self.topic, self.streams = topic, streams
        self.sent: dict[bytes, float] = {}

    def run(self, rate: float, n: int, *, first: int = 0, timed: bool = True) -> None:
        """Commands `first` .. `first + n - 1`; only `timed` ones are recorded in `sent`."""
        start = time.time()
        for i in range(first, first + n):
            due = start + (i - first) / rate
            while (left := due - time.time()) > 0:
                time.sleep(left)
            key = i.to_bytes(KEY_BYTES, "big")
            if timed:
                self.sent[key] = due
            self.producer.produce(self.topic, key + b"x" * (PAYLOAD - KEY_BYTES), key=str(i % self.streams).encode())
            self.producer.poll(0)
        self.producer.flush(10)


class Follower(threading.Thread):
    """Records when each command's key first becomes readable (read_committed) on `topic`."""

    def __init__(self, bootstrap: str, group: str, topic: str, partitions: int) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer(consumer_config(bootstrap, group, f"{group}-follower"))
        self.consumer.assign([TopicPartition(topic, p, -1) for p in range(partitions)])  # from the end
        self.seen: dict[bytes, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            msg = self.consumer.poll(0.05)
            if msg is not None and msg.error() is None:
                self.seen.setdefault(msg.value()[:KEY_BYTES], time.time())
        self.consumer.close()


class FloorLoop(threading.Thread):
    """The worker's cycle with nothing decided: fetch, 3 records per command, offsets, commit."""

    def __init__(self, bootstrap: str, group: str, topics: dict[str, str], **producer: Any) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer(consumer_config(bootstrap, group, f"{group}-loop"))
        self.producer = Producer(producer_config(bootstrap, f"{group}-txn", f"{group}-loop",
                                                 **{"linger.ms": 2, **producer}))
        self.producer.init_transactions(30)
        self.topics = topics
        self.consumer.subscribe([topics["commands"]])
        self.phases: dict[str, list[float]] = {"send_offsets": [], "flush": [], "end": []}
        self.batches: list[int] = []
        self.stop = threading.Event()

    def wait_assigned(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.consumer.assignment():
            if time.monotonic() > deadline:
                raise RuntimeError("the floor loop was never assigned the commands partitions")
            self.consumer.poll(0.1)

    def run(self) -> None:
        while not self.stop.is_set():
            first = self.consumer.poll(0.1)
            if first is None:
                continue
            batch = [m for m in [first, *self.consumer.consume(499, timeout=0)] if m.error() is None]
            if batch:
                self._transaction(batch)
        self.consumer.close()

    def _transaction(self, batch: list[Any]) -> None:
        t = self.topics
        self.producer.begin_transaction()
        last: dict[int, int] = {}
        for msg in batch:
            p = msg.partition()
            self.producer.produce(t["events"], msg.value(), partition=p)
            self.producer.produce(t["messages"], msg.value(), partition=p)
            self.producer.produce(t["replies"], msg.value(), partition=0)
            last[p] = msg.offset()
        t0 = time.perf_counter()
        offsets = [TopicPartition(t["commands"], p, o + 1) for p, o in last.items()]
        self.producer.send_offsets_to_transaction(offsets, self.consumer.consumer_group_metadata(), 10)
        t1 = time.perf_counter()
        self.producer.flush(10)
        t2 = time.perf_counter()
        self.producer.commit_transaction(10)
        t3 = time.perf_counter()
        for name, ms in (("send_offsets", t1 - t0), ("flush", t2 - t1), ("end", t3 - t2)):
            self.phases[name].append(ms * 1000)
        self.batches.append(len(batch))


def latency(sent: dict[bytes, float], seen: dict[bytes, float]) -> dict[str, float]:
    lat = [(seen[k] - s) * 1000 for k, s in sent.items() if k in seen]
    return {"n": len(lat), "missing": len(sent) - len(lat), "p50": pct(lat, 0.5), "p90": pct(lat, 0.9),
            "p99": pct(lat, 0.99)}


def drain(sent: dict[bytes, float], seen: dict[bytes, float], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while any(k not in seen for k in sent) and time.monotonic() < deadline:
        time.sleep(0.05)


def warmed(bootstrap: str, topic: str, streams: int, rate: float, seen: dict[bytes, float]) -> Paced:
    """A paced producer whose first second of commands (not timed) has been seen end to end: the
    clients' connections, the follower's position and the transaction coordinator are warm."""
    paced = Paced(bootstrap, topic, streams)
    warm = max(10, int(rate))
    paced.run(rate, warm, first=10**9, timed=False)
    keys = {(10**9 + i).to_bytes(KEY_BYTES, "big"): 0.0 for i in range(warm)}
    drain(keys, seen, timeout_s=30.0)
    return paced


def floor_leg(bootstrap: str, topics: dict[str, str], partitions: int, rate: float, n: int, streams: int,
              **producer: Any) -> dict[str, Any]:
    group = f"floor-{uuid.uuid4().hex[:6]}"
    loop = FloorLoop(bootstrap, group, topics, **producer)
    loop.wait_assigned()
    follower = Follower(bootstrap, f"{group}-r", topics["replies"], partitions)
    loop.start()
    follower.start()
    paced = warmed(bootstrap, topics["commands"], streams, rate, follower.seen)
    loop.phases = {k: [] for k in loop.phases}
    loop.batches = []
    paced.run(rate, n)
    drain(paced.sent, follower.seen)
    loop.stop.set()
    follower.stop.set()
    loop.join(5)
    follower.join(5)
    return {"visible_ms": latency(paced.sent, follower.seen), "transactions": len(loop.batches),
            "commands_per_transaction": statistics.mean(loop.batches) if loop.batches else 0.0,
            "phases_ms": {k: {"p50": pct(v, 0.5), "p90": pct(v, 0.9)} for k, v in loop.phases.items()}}


def raw_leg(bootstrap: str, topic: str, partitions: int, rate: float, n: int, streams: int) -> dict[str, Any]:
    follower = Follower(bootstrap, f"raw-{uuid.uuid4().hex[:6]}", topic, partitions)
    follower.start()
    paced = warmed(bootstrap, topic, streams, rate, follower.seen)
    paced.run(rate, n)
    drain(paced.sent, follower.seen)
    follower.stop.set()
    follower.join(5)
    return {"visible_ms": latency(paced.sent, follower.seen)}


def set_verification(bootstrap: str, enabled: bool) -> None:
    """Toggle the broker's transaction verification (a dynamic per-broker setting; node 1)."""
    entry = ConfigEntry("transaction.partition.verification.enable", "true" if enabled else "false",
                        incremental_operation=AlterConfigOpType.SET)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource("BROKER", "1", incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="500,250,100", help="offered commands/s, comma-separated")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per leg")
    parser.add_argument("--partitions", type=int, default=6, help="partitions per topic (default 6, as the catalogue)")
    parser.add_argument("--streams", type=int, default=10, help="distinct command keys (default 10)")
    parser.add_argument("--verification", choices=("on", "off"), default="on")
    parser.add_argument("--retry-backoff-ms", type=int, default=None,
                        help="the loop producer's retry.backoff.ms (default: the workers' own, workers.host)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="wt-txn-floor-"))
    lk = LocalKafka(embedded_spec(tmp / "kafka", secure=False))
    lk.up()
    results: list[dict[str, Any]] = []
    try:
        bootstrap = lk.spec.bootstrap
        if args.verification == "off":
            set_verification(bootstrap, False)
        prefix = f"floor{uuid.uuid4().hex[:6]}"
        topics = {n: f"{prefix}.{n}" for n in ("commands", "events", "messages", "replies", "raw")}
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic(t, args.partitions, 1) for t in topics.values()]).values():
            future.result(30)
        for rate in (float(r) for r in args.rates.split(",")):
            n = int(rate * args.seconds)
            producer = {} if args.retry_backoff_ms is None else {"retry.backoff.ms": args.retry_backoff_ms}
            floor = floor_leg(bootstrap, topics, args.partitions, rate, n, args.streams, **producer)
            raw = raw_leg(bootstrap, topics["raw"], args.partitions, rate, n, args.streams)
            results.append({"rate": rate, "floor": floor, "raw": raw})
            print_row(rate, floor, raw)
    finally:
        lk.down()
    if args.json:
        Path(args.json).write_text(json.dumps({"config": vars(args), "results": results}, indent=1))


def print_row(rate: float, floor: dict[str, Any], raw: dict[str, Any]) -> None:
    f, r, ph = floor["visible_ms"], raw["visible_ms"], floor["phases_ms"]
    print(f"@{rate:g}/s  floor visible p50/p90/p99 {f['p50']:.1f}/{f['p90']:.1f}/{f['p99']:.1f} ms "
          f"(missing {f['missing']}) | raw {r['p50']:.1f}/{r['p90']:.1f}/{r['p99']:.1f} ms | "
          f"{floor['commands_per_transaction']:.1f} commands/txn; phase p50 send_offsets "
          f"{ph['send_offsets']['p50']:.1f}, flush {ph['flush']['p50']:.1f}, end {ph['end']['p50']:.1f} ms",
          flush=True)


if __name__ == "__main__":
    main()
