"""Process entry points: ``python -m watchtower.ingest.main serve|runner`` (what `watchtower ingest
serve`, `watchtower runner start` and `watchtower up` start).

Configuration comes from the environment, like every other Watchtower worker:
``WATCHTOWER_BOOTSTRAP``, ``WATCHTOWER_TOPIC_PREFIX``, ``WATCHTOWER_API`` (the API URL a runner
registers through; the aggregator writes its commands to Kafka itself), ``WATCHTOWER_HOME`` (key
files), ``WATCHTOWER_INGEST_HEALTH`` (a JSON health file), ``WATCHTOWER_INGEST_ALLOW_NETS``
(non-public networks runners may fetch from), ``WATCHTOWER_INGEST_YIELD`` and ``WATCHTOWER_INGEST_NICE``
(when and how far the scheduler, aggregator and runners step back from the CPU for the serving path
on a shared host: `watchtower.ingest.priority`).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from watchtower.http.api_client import ApiTransport
from watchtower.ingest import keys, priority
from watchtower.ingest.fetch import allowed_nets
from watchtower.ingest.runner import Runner, register, serve
from watchtower.logs import setup_logging
from watchtower.metrics import gc_pauses
from watchtower.metrics.exposition import start_metrics
from watchtower.metrics.ingest import PriorityCollector, RunnerCollector
from watchtower.topics.catalogue import topic_prefix

log = logging.getLogger("watchtower.ingest")


def _health() -> Path | None:
    raw = os.environ.get("WATCHTOWER_INGEST_HEALTH")
    return Path(raw) if raw else None


def _log_priority(how: dict[str, object]) -> None:
    if how["mode"] == "auto":
        log.info("steps back from the CPU (session group niceness %s) while the host has room (%s=auto)",
                 how["nice"], priority.ENV_YIELD)
    elif how["mode"] == "always":
        log.info("runs at niceness %s (%s=always): the serving path gets the CPU first", how["nice"],
                 priority.ENV_YIELD)
    elif "why" in how:
        log.info("runs at the priority it was given: %s", how["why"])


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
    # Before any other thread: with `always` they inherit the niceness.
    stepping_back = priority.start(runner=args.what == "runner")
    gc_pauses.install()
    setup_logging("ingest" if args.what == "serve" else "runner", None if args.what == "serve" else args.name,
                  default_level="INFO")
    # Build info and the process metrics (CPU, memory, open files) on this process's /metrics; the
    # aggregator and the runner add their own counters (metrics.ingest) once they exist.
    start_metrics("ingest" if args.what == "serve" else "runner", [PriorityCollector(priority.describe)])
    _log_priority(stepping_back)
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
