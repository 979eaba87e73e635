"""Process entry points: ``python -m watchtower.ingest.main serve|runner`` (what `watchtower ingest
serve`, `watchtower runner start` and `watchtower up` start).

Configuration comes from the environment, like every other Watchtower worker:
``WATCHTOWER_BOOTSTRAP``, ``WATCHTOWER_TOPIC_PREFIX``, ``WATCHTOWER_API`` (the API URL a runner
registers through; the aggregator writes its commands to Kafka itself), ``WATCHTOWER_HOME`` (key
files), ``WATCHTOWER_INGEST_HEALTH`` (a JSON health file), ``WATCHTOWER_INGEST_ALLOW_NETS``
(non-public networks runners may fetch from), ``WATCHTOWER_INGEST_NICE`` (how much lower than the
serving path the scheduler, aggregator and runners run on a shared host: `lower_priority`).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

from watchtower.http.api_client import ApiTransport
from watchtower.ingest import keys
from watchtower.ingest.fetch import allowed_nets
from watchtower.ingest.runner import Runner, register, serve
from watchtower.logs import setup_logging
from watchtower.metrics import gc_pauses
from watchtower.metrics.exposition import start_metrics
from watchtower.metrics.ingest import RunnerCollector
from watchtower.topics.catalogue import topic_prefix

log = logging.getLogger("watchtower.ingest")


def _health() -> Path | None:
    raw = os.environ.get("WATCHTOWER_INGEST_HEALTH")
    return Path(raw) if raw else None


ENV_NICE = "WATCHTOWER_INGEST_NICE"
#: Unset: the priority stays as it is. On 2 cores, 10 (with the session group lowered too) brought a
#: client's publish p99 beside 500 feeds from 1.5-1.9x of its own to 1.3-1.6x, and at 1,000 feeds,
#: near the host's capacity, starved ingestion (its backlog grew): so it is a setting
#: (docs/ingestion.md, "Niceness").
DEFAULT_NICE = 0


def niceness_steps(env: Mapping[str, str] | None = None) -> int:
    """How much lower than the serving path the ingestion processes run: ``WATCHTOWER_INGEST_NICE``
    (0 to 19; unset: `DEFAULT_NICE`; 0 leaves the priority as it is). Anything else is refused."""
    raw = (env if env is not None else os.environ).get(ENV_NICE, "").strip()
    if not raw:
        return DEFAULT_NICE
    # ASCII and at most two digits: str.isdigit alone passes "²" and 5,000-digit strings, on which
    # int() fails without naming the setting.
    if raw.isascii() and raw.isdigit() and len(raw) <= 2 and int(raw) <= 19:
        return int(raw)
    raise ValueError(f"{ENV_NICE} must be a whole number from 0 to 19, got {raw!r}")


def lower_priority(env: Mapping[str, str] | None = None) -> int:
    """Lower this process's CPU priority by `niceness_steps`; the niceness it runs at. Call it before
    the process starts a thread: threads made later (librdkafka's too) inherit it.

    A tick has a block to become a message, a client's publish wants milliseconds. On a host the
    ingestion processes share with the stream worker, the projection and the broker, the kernel
    then gives those the CPU first while ingestion's burst at each block start and a client's
    publish want it at once; on a host of its own nothing changes. Raising niceness needs no
    privilege (a container's too). Where the kernel groups the CPU by session, a niceness orders a
    process only among its session's; whoever starts the process in a session of its own lowers
    that session's group as well (`watchtower up` does: `local.priority`)."""
    steps = niceness_steps(env)
    return os.nice(steps) if steps else os.nice(0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="watchtower.ingest.main")
    sub = parser.add_subparsers(dest="what", required=True)
    serve_cmd = sub.add_parser("serve")
    serve_cmd.add_argument("--role", choices=("all", "aggregator", "scheduler"), default="all",
                           help="run both parts (default), or only the aggregator (scale-out) or the scheduler")
    run = sub.add_parser("runner")
    run.add_argument("name")
    run.add_argument("--lie", action="store_true")
    args = parser.parse_args(argv)
    niceness = lower_priority()
    gc_pauses.install()
    setup_logging("ingest" if args.what == "serve" else "runner", None if args.what == "serve" else args.name,
                  default_level="INFO")
    # Build info and the process metrics (CPU, memory, open files) on this process's /metrics; the
    # aggregator and the runner add their own counters (metrics.ingest) once they exist.
    start_metrics("ingest" if args.what == "serve" else "runner")
    if niceness:
        log.info("running at niceness %d (%s): the serving path gets the CPU first", niceness, ENV_NICE)
    bootstrap = os.environ.get("WATCHTOWER_BOOTSTRAP", "127.0.0.1:9092")
    prefix = topic_prefix()
    api = ApiTransport(os.environ.get("WATCHTOWER_API"))
    if args.what == "serve":
        from watchtower.ingest.service import serve as serve_ingest

        serve_ingest(bootstrap, prefix, keys.scheduler_key(), keys.ingestion_publisher_key(), _health(),
                     role=args.role)
        return
    key = keys.runner_key(args.name)
    runner = Runner(key, keys.scheduler_address(), allow=allowed_nets(), lie=args.lie, bootstrap=bootstrap,
                    prefix=prefix)
    register(api.command, runner, args.name)
    start_metrics("runner", [RunnerCollector(runner)])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    log.info("runner %s (%s) started", args.name, runner.address)
    serve(runner, bootstrap, prefix, stop, _health())
    sys.exit(0)


if __name__ == "__main__":
    main()
