"""What trace propagation costs per record with tracing off, beside a plain produce, in one run.

With ``WATCHTOWER_TRACES`` unset no tracer provider is installed, and every hop pays, per record:
`tracing.span` (the worker, the projection and the delivery worker: one per record handled) and
`tracing.inject` (the worker: one per record written; the command client: one per command). This
times those calls as the hops make them, beside ``Producer.produce`` of a 512 B record with the
same headers to a local producer (librdkafka queues it; nothing is sent: the client-side cost a
hop pays per record written anyway), each the best of `--repeat` rounds of `--n` calls.

    .venv/bin/python bench/bench_tracing_off.py [--n 200000] [--repeat 5] [--json out.json]

A script, not a test (pytest only collects `tests/`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable

from confluent_kafka import Producer

from watchtower import tracing


def per_call_ns(fn: Callable[[], object], n: int, repeat: int) -> list[float]:
    """Nanoseconds per call of `fn`, one value per round of `n` calls."""
    out = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        for _ in range(n):
            fn()
        out.append((time.perf_counter_ns() - start) / n)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()
    os.environ.pop(tracing.ENV, None)
    assert not tracing.configure("bench")  # off: nothing installed
    headers_in = [("wt-correlation", b"c" * 32), ("wt-reply-partition", b"3")]
    headers_out: dict[str, str | bytes | None] = {"wt-correlation": "c" * 32, "wt-reply-partition": "3"}
    value = os.urandom(512)
    # Nothing listens there: produce() only queues (queue.buffering.max.messages is raised so the
    # rounds never fill it); the producer is dropped unflushed at the end.
    producer = Producer({"bootstrap.servers": "127.0.0.1:9", "queue.buffering.max.messages": 10_000_000,
                         "queue.buffering.max.kbytes": 8_000_000, "log_level": 0})

    def produce() -> None:
        producer.produce("bench", key=b"stream-0001", value=value, partition=0, headers=headers_out)

    def hop() -> None:  # what a hop adds per record: a span that is None, and an inject
        span = tracing.span("hop", headers_in, partition=0)
        if span is None:
            tracing.inject(headers_out)

    legs = {
        "inject (per record written)": lambda: tracing.inject(headers_out),
        "span (per record handled)": lambda: tracing.span("hop", headers_in, partition=0),
        "span + inject (one hop, one record)": hop,
        "plain produce, 512 B + 2 headers": produce,
    }
    results = {name: per_call_ns(fn, args.n, args.repeat) for name, fn in legs.items()}
    base = min(results["plain produce, 512 B + 2 headers"])
    print(f"tracing off, {args.n} calls x {args.repeat} rounds (ns per call: best, median, worst; ratio to the "
          "best produce)")
    for name, rounds in results.items():
        print(f"  {name:38s} {min(rounds):8.1f} {statistics.median(rounds):8.1f} {max(rounds):8.1f}"
              f"   {min(rounds) / base:6.3f}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"n": args.n, "repeat": args.repeat, "ns_per_call": results}, out, indent=2)


if __name__ == "__main__":
    main()
