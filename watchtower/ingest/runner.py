"""``watchtower runner``: one ingestion runner, an ed25519 identity that executes the tasks it is
selected for and writes signed results.

It registers itself with a signed ``register_runner`` command, then reads ``ingest.tasks``
(read_committed, its own consumer group) and for every task that the deployment's scheduler signed,
that selects it, and whose deadline has not passed, runs the task definition and produces an
`IngestResult` to ``ingest.results``. A forged, unsigned or malformed task is quarantined: logged
with partition and offset, counted in the health file, never run. ``--lie`` (the demo's and the
tests' liar) adds 1 to every number it returns; it exists to show that QUORUM outvotes it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import nacl.signing
from confluent_kafka import Consumer, KafkaError, Producer

from watchtower.ingest.fetch import FetchError, Network, run_http_task
from watchtower.ingest.kafka_source import run_kafka_task
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.billing import block_height_at
from watchtower.protocol.constants import GENESIS_UNIX_MS
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.ingestion import HttpJsonTask, IngestReason, parse_task_definition
from watchtower.protocol.ingestion_records import IngestResult, IngestTask, new_result, verify_task
from watchtower.protocol.ingestion_results import canonical_json, parse_result
from watchtower.protocol.ingestion_runners import RUNNERS_KEY
from watchtower.protocol.signed_command import Command, sign_command
from watchtower.protocol.validation import is_number
from watchtower.schemas.ingest_records import decode_task, encode_result
from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config

log = logging.getLogger("watchtower.ingest.runner")


def now_height() -> int:
    return block_height_at(max(time.time_ns() // 1_000_000, GENESIS_UNIX_MS))


def registration_command(key: nacl.signing.SigningKey, label: str) -> Command:
    """The signed register_runner command of the runner `key` (open registration)."""
    return sign_command(key, "register_runner", RUNNERS_KEY, time.time_ns() // 1000, {"label": label})


def admission_command(registrar: nacl.signing.SigningKey, runner: str, label: str) -> Command:
    """The registrar's signed register_runner admitting the runner at address `runner`."""
    return sign_command(registrar, "register_runner", RUNNERS_KEY, time.time_ns() // 1000,
                        {"runner": runner, "label": label})


def dismissal_command(registrar: nacl.signing.SigningKey, runner: str) -> Command:
    """The registrar's signed retire_runner retiring the runner at address `runner`."""
    return sign_command(registrar, "retire_runner", RUNNERS_KEY, time.time_ns() // 1000, {"runner": runner})


def _lie(value: Any) -> Any:
    if is_number(value):
        return value + 1
    if isinstance(value, dict):
        return {k: _lie(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_lie(v) for v in value]
    return value


class Runner:
    """Runs the tasks it is selected for (see the module docstring)."""

    def __init__(self, key: nacl.signing.SigningKey, scheduler: str, *, allow: tuple[Network, ...] = (),
                 lie: bool = False, bootstrap: str | None = None, prefix: str | None = None) -> None:
        self.key = key
        self.address = address_from_public_key(bytes(key.verify_key))
        self.scheduler = scheduler
        self.allow = allow
        self.lie = lie
        self.bootstrap = bootstrap  # for kafka_topic tasks
        self.prefix = prefix
        self.quarantined: Counter[str] = Counter()
        self.results = 0
        self.skipped = 0

    def accept(self, value: bytes | None, where: str = "") -> IngestTask | None:
        """The task in one ``ingest.tasks`` record if this runner is to run it now; None when it is
        not ours, late, or quarantined (forged or malformed: counted, never run)."""
        try:
            task = decode_task(value)
            verify_task(task, self.scheduler)
        except WatchtowerError as exc:
            self.quarantined[exc.code] += 1
            log.warning("quarantined ingest.tasks record %s: %s: %s", where, exc.code, exc.message)
            return None
        if task.skip_from is not None or self.address not in task.runners:
            return None
        if now_height() > task.deadline_height:
            self.skipped += 1
            return None
        return task

    def handle(self, value: bytes | None, where: str = "") -> IngestResult | None:
        """`accept` then `run_task`, in the caller's thread."""
        task = self.accept(value, where)
        return None if task is None else self.run_task(task)

    def run_task(self, task: IngestTask, client: httpx.Client | None = None) -> IngestResult:
        """Run `task` (thread-safe: `serve` runs several at once) and sign the result."""
        try:
            spec = parse_task_definition(task.task_definition)
            if isinstance(spec.source, HttpJsonTask):
                result = run_http_task(spec.source, allow=self.allow, client=client)
            elif self.bootstrap is None:
                raise FetchError(IngestReason.SOURCE_UNAVAILABLE, "this runner has no Kafka to read topics from")
            else:
                result = run_kafka_task(spec.source, task.tick_height, self.bootstrap, self.prefix)
            if self.lie:
                result = canonical_json(_lie(parse_result(result)))
            self.results += 1
            return new_result(task, self.key, result=result)
        except FetchError as exc:
            return new_result(task, self.key, error=exc.reason, detail=exc.detail)
        except WatchtowerError as exc:  # the task definition itself does not parse
            return new_result(task, self.key, error=IngestReason.SOURCE_UNAVAILABLE, detail=exc.message)

    def health(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "runner": self.address, "results": self.results, "late": self.skipped,
                "quarantined": dict(self.quarantined)}


def serve(runner: Runner, bootstrap: str, prefix: str | None, stop: threading.Event,
          health_file: Path | None = None, concurrency: int = 16) -> None:
    """The runner's loop until `stop`: tasks in, results out (at least once; the aggregator counts
    the first result of each runner). Up to `concurrency` tasks run at once on one shared HTTP
    client (its connection pool), so one slow source does not hold back every other stream."""
    consumer = Consumer(kafka_config(bootstrap, **{
        "group.id": f"wt-{prefix or 'wt'}.ingest-runner-{runner.address[2:18]}",
        "auto.offset.reset": "earliest", "isolation.level": "read_committed", "enable.auto.commit": True}))
    producer = Producer(kafka_config(bootstrap, **{"enable.idempotence": True, "linger.ms": 2}))
    results_topic = topic_name("ingest-results", prefix)
    consumer.subscribe([topic_name("ingest-tasks", prefix)])
    last_health = 0.0
    pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="runner-task")
    client = httpx.Client(follow_redirects=False, trust_env=False,
                          limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency))
    in_flight = threading.BoundedSemaphore(concurrency * 4)

    def send(future: Future[IngestResult]) -> None:
        in_flight.release()
        result = future.result()
        producer.produce(results_topic, key=result.stream_id.encode(), value=encode_result(result))

    try:
        while not stop.is_set():
            msg = consumer.poll(0.2)
            producer.poll(0)
            error = None if msg is None else msg.error()
            if msg is not None and error is None:
                task = runner.accept(msg.value(), f"p{msg.partition()}@{msg.offset()}")
                if task is not None:
                    in_flight.acquire()
                    pool.submit(runner.run_task, task, client).add_done_callback(send)
            elif error is not None and error.code() != KafkaError._PARTITION_EOF:
                log.warning("ingest.tasks: %s", error)
            if health_file is not None and time.monotonic() - last_health > 0.5:
                last_health = time.monotonic()
                tmp = health_file.with_suffix(".tmp")
                tmp.write_text(json.dumps(runner.health()))
                tmp.replace(health_file)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        client.close()
        producer.flush(5)
        consumer.close()
