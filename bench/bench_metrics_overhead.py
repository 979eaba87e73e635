"""The stream worker's acknowledged publish throughput with its metrics on and off, beside raw Kafka.

Starts an embedded KRaft broker, then, for each of `--rounds` rounds, three legs on it (the order of
the two worker legs alternates from round to round, so neither always runs on a warmer broker):

- ``on``: one stream-actor worker serving ``/metrics`` (``WATCHTOWER_METRICS_PORT=0``, as
  `watchtower up` runs it: the commands counter, batch histograms, consumer lag and the group lag
  exporter's thread all live);
- ``off``: the same worker with ``WATCHTOWER_METRICS_PORT=off`` (no endpoint, no group lag thread;
  the counters are still kept in memory: what "off" removes is what serving and exporting cost);
- ``raw``: confluent-kafka alone, an idempotent acks=all producer and a consumer on a plain topic
  (`bench_stream_actor.raw_burst`), the same record count and payload size.

Each worker leg uses a fresh topic prefix and worker, creates `--streams` streams, warms the path
with a short burst, then times a burst of `--streams` x `--msgs-per-stream` client-signed publishes
(`bench_stream_actor.publish_burst`: first submit to last acknowledgement). Tracing stays off.

    .venv/bin/python bench/bench_metrics_overhead.py [--rounds 3] [--json out.json]

Prints every leg's msg/s, then per mode the median and the spread (min..max) and the ratios
on/off (per round) and to raw. A script, not a test (pytest only collects `tests/`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench_stream_actor import Keys, create_plain_topic, create_streams, presign, publish_burst, raw_burst
from confluent_kafka import KafkaException
from kafka_fixture import embedded_spec, free_ports

from watchtower.gateway.transport import CommandClient
from watchtower.local.broker import LocalKafka
from watchtower.local.stack import ServiceSet
from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import catalogue


def _client(bootstrap: str, prefix: str) -> CommandClient:
    """A command client, once the fresh topics' partitions have their leaders."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return CommandClient(bootstrap, prefix=prefix)
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def worker_leg(bootstrap: str, tmp: Path, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """One worker with metrics `mode` (``on``/``off``) on a fresh prefix: its burst's rates."""
    prefix = f"bm{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, catalogue(prefix, partitions=args.partitions))
    services = ServiceSet(bootstrap, prefix, tmp / f"logs-{prefix}", api_port=free_ports(1)[0])
    services.start_worker("w1", {"WATCHTOWER_METRICS_PORT": "off"} if mode == "off" else None)
    client = _client(bootstrap, prefix)
    try:
        keys = Keys(os.urandom(32), os.urandom(32))
        sids = [f"bench.{mode}.{prefix}.{i:03d}" for i in range(args.streams)]
        warm = [f"bench.warm.{prefix}"]
        create_streams(client, keys, sids + warm, args.msgs_per_stream + 10)  # waits for the worker to serve
        served = services.metrics_url("worker-w1")
        if (served is None) != (mode == "off"):
            raise RuntimeError(f"the {mode} leg's worker {'serves' if served else 'serves no'} /metrics")
        warm_items, _ = presign(keys, warm, args.warm_up, args.payload, "warm-up signing")
        publish_burst(client, warm_items)
        items, _ = presign(keys, sids, args.msgs_per_stream, args.payload, f"{mode} signing (untimed)")
        return publish_burst(client, items)
    finally:
        client.close()
        services.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--streams", type=int, default=20)
    parser.add_argument("--msgs-per-stream", type=int, default=100)
    parser.add_argument("--warm-up", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--payload", type=int, default=512)
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()
    os.environ.pop("WATCHTOWER_TRACES", None)
    tmp = Path(tempfile.mkdtemp(prefix="wt-bench-metrics-"))
    lk = LocalKafka(embedded_spec(tmp / "kafka"))
    legs: dict[str, list[float]] = {"on": [], "off": [], "raw": []}
    n = args.streams * args.msgs_per_stream
    try:
        lk.up()
        bootstrap = lk.spec.bootstrap
        for r in range(args.rounds):
            for mode in (("on", "off") if r % 2 == 0 else ("off", "on")):
                rate = worker_leg(bootstrap, tmp, mode, args)["msg_per_s"]
                legs[mode].append(rate)
                print(f"round {r + 1} {mode:3s} {rate:10.0f} msg/s", flush=True)
            topic = f"bench-raw-{uuid.uuid4().hex[:8]}"
            create_plain_topic(bootstrap, topic, args.partitions)
            rate = raw_burst(bootstrap, topic, args.partitions, n, args.payload, args.streams)["msg_per_s"]
            legs["raw"].append(rate)
            print(f"round {r + 1} raw {rate:10.0f} msg/s", flush=True)
            time.sleep(1)
    finally:
        lk.down()
    print(f"\n{n} acknowledged publishes of {args.payload} B per leg, {args.rounds} rounds")
    for mode, rates in legs.items():
        print(f"  {mode:3s} median {statistics.median(rates):8.0f} msg/s, spread {min(rates):.0f}..{max(rates):.0f}")
    per_round = [on / off for on, off in zip(legs["on"], legs["off"], strict=True)]
    print(f"  on/off per round: {', '.join(f'{x:.3f}' for x in per_round)} (median {statistics.median(per_round):.3f})")
    for mode in ("on", "off"):
        to_raw = [x / raw for x, raw in zip(legs[mode], legs["raw"], strict=True)]
        print(f"  {mode}/raw per round: {', '.join(f'{x:.3f}' for x in to_raw)}")
    if args.json:
        Path(args.json).write_text(json.dumps({"config": vars(args), "msg_per_s": legs, "on_off": per_round},
                                              indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
