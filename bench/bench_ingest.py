"""Timer-driven ingestion under load, beside the plain publish path, in one run.

Starts an embedded broker, one stream-actor worker, one projection worker (API + gateway), the
ingestion service (one scheduler + aggregator) and ONE runner, plus a local HTTP source. Creates
`--streams` feeds with ``interval_blocks=1``, ``NONE`` proof and one runner (the cheapest proof:
it measures the pipeline, not a quorum), and one plain feed published by a `Publisher` once a
block. Runs for `--seconds`, then reports:

- ingestion, offered: streams × blocks; sustained: ticks finished per second (published + failed)
  and what was still pending at the end (a growing backlog means one scheduler + one runner do not
  keep up);
- ingestion tick-to-visible latency, p50/p99: for a sample of `--sample` ingesting streams, the
  moment a message is first readable through ``get_since`` minus its tick's block start (the
  message's ``timestamp_unix_ms``);
- the aggregator's own tick-to-acknowledged latency (its health file);
- baseline, the plain path in the same run: publish sent to first readable, p50/p99.

    .venv/bin/python bench/bench_ingest.py [--streams 1000] [--seconds 60] [--sample 20] [--json]

A script, not a test. Every figure is printed beside its baseline.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "ingest"))

import nacl.signing
from ingest_harness import PriceSource, health, serve_source
from kafka_fixture import embedded_spec, free_ports

from watchtower.client.account import Account
from watchtower.client.http import ApiClient
from watchtower.client.sdk import Publisher, create_feed, wait_until_visible
from watchtower.ingest import keys
from watchtower.local.broker import LocalKafka
from watchtower.local.stack import ServiceSet
from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import catalogue


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def watch(api: ApiClient, stream_id: str, stop: threading.Event, seen: dict[int, float]) -> None:
    """Long-poll `stream_id`; record when each sequence is first readable."""
    cursor = 0
    while not stop.is_set():
        try:
            page = api.get_since(stream_id, cursor, 100, min_head=cursor + 1, wait_ms=1000)
        except Exception as exc:  # a benchmark keeps measuring through a slow answer
            print(f"watch {stream_id}: {exc}", file=sys.stderr)
            continue
        now = time.time()
        for m in page.get("messages", []):
            seen.setdefault(m["sequence"], now)
            seen.setdefault(-m["sequence"], m["timestamp_unix_ms"] / 1000)  # the tick's block start
            cursor = max(cursor, m["sequence"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--sample", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="wt-bench-ingest-"))
    home = tmp / "home"
    lk = LocalKafka(embedded_spec(tmp / "kafka"))
    services: ServiceSet | None = None
    source = PriceSource()
    try:
        lk.up()
        bootstrap = lk.spec.bootstrap
        prefix = f"bench{uuid.uuid4().hex[:8]}"
        ensure_topics(bootstrap, catalogue(prefix, partitions=3))
        (api_port,) = free_ports(1)
        services = ServiceSet(bootstrap, prefix, tmp / "logs", api_port=api_port)
        services.start_worker("w1")
        services.start_projection("p1")
        services.wait_ready()
        keys.scheduler_key(home)
        delegated = keys.ingestion_publisher_key(home)
        extra = {"WATCHTOWER_HOME": str(home), "WATCHTOWER_INGEST_ALLOW_NETS": "127.0.0.1/32"}
        api = ApiClient(services.api_url)
        with serve_source(source) as url:
            services.start_runner("r1", extra_env=extra)
            owner = Account(nacl.signing.SigningKey.generate(), home=home)
            ingestion = {"enabled": True, "interval_blocks": 1, "num_runners": 1, "proof_type": "NONE",
                         "result_schema": {"type": "object"},
                         "task_definition": {"kind": "http_json", "url": url, "select": {"p": "$.data.price"}}}
            t0 = time.time()
            streams = [create_feed(api, owner, name=f"ingest-{i}", ingestion=ingestion,
                                   publisher_key_hex=bytes(delegated.verify_key).hex())["stream_id"]
                       for i in range(args.streams)]
            plain_key = nacl.signing.SigningKey.generate()
            plain = create_feed(api, owner, name="plain", publisher_key_hex=bytes(plain_key.verify_key).hex())
            wait_until_visible(api, plain["stream_id"])
            print(f"created {args.streams} ingesting feeds in {time.time() - t0:.1f}s", flush=True)
            services.start_ingest(extra_env=extra)
            stop = threading.Event()
            seen: dict[str, dict[int, float]] = {sid: {} for sid in streams[: args.sample]}
            plain_seen: dict[int, float] = {}
            threads = [threading.Thread(target=watch, args=(api, sid, stop, seen[sid]), daemon=True) for sid in seen]
            threads.append(threading.Thread(target=watch, args=(api, plain["stream_id"], stop, plain_seen),
                                            daemon=True))
            for t in threads:
                t.start()
            publisher = Publisher(api, owner, plain["stream_id"], plain_key)
            sent: dict[int, float] = {}
            start = time.time()
            first = health(services.health_file("ingest"))
            while time.time() - start < args.seconds:
                t = time.time()
                reply = publisher.publish("price", b'{"p": 1}')
                sent[int(reply["sequence"])] = t
                time.sleep(max(0.0, 1.0 - (time.time() - t)))
            end = health(services.health_file("ingest"))
            elapsed = time.time() - start
            time.sleep(3)
            stop.set()
        finished = lambda h: int(h.get("published", 0)) + sum(h.get("failed", {}).values())  # noqa: E731
        ingest_lat = [(s[seq] - s[-seq]) * 1000 for s in seen.values() for seq in s if seq > 0 and -seq in s]
        plain_lat = [(plain_seen[seq] - t) * 1000 for seq, t in sent.items() if seq in plain_seen]
        report: dict[str, Any] = {
            "streams": args.streams, "seconds": round(elapsed, 1),
            "offered_ticks_per_s": args.streams,
            "sustained_ticks_per_s": round((finished(end) - finished(first)) / elapsed, 1),
            "scheduler_tasks_per_s": round((int(end.get("tasks", 0)) - int(first.get("tasks", 0))) / elapsed, 1),
            "pending_at_end": end.get("pending"), "failed": end.get("failed"),
            "ingest_tick_to_visible_ms": {"p50": pct(ingest_lat, 0.5), "p99": pct(ingest_lat, 0.99),
                                          "n": len(ingest_lat)},
            "ingest_tick_to_ack_ms (aggregator)": end.get("tick_to_ack_ms"),
            "baseline_plain_publish_to_visible_ms": {"p50": pct(plain_lat, 0.5), "p99": pct(plain_lat, 0.99),
                                                     "n": len(plain_lat)},
            "runner": health(services.health_file("runner-r1")),
        }
        print(json.dumps(report, indent=None if args.json else 2, default=str))
    finally:
        if services is not None:
            services.stop()
        lk.down()


if __name__ == "__main__":
    main()
