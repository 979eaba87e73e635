"""``watchtower runner``: one ingestion runner, an ed25519 identity that executes the tasks it is
selected for and writes signed results.

It registers itself with a signed ``register_runner`` command, then reads ``ingest.tasks``
(read_committed, its own consumer group) and for every task that the deployment's scheduler signed,
that selects it, and whose deadline has not passed, runs the task definition and produces an
`IngestResult` to ``ingest.results``. A forged, unsigned or malformed task is quarantined: logged
with partition and offset, counted in the health file, never run. ``--lie`` (the demo's and the
tests' liar) adds 1 to every number it returns; it exists to show that QUORUM outvotes it.

Tasks run on a `dispatch.Dispatcher`: bounded per source and per host, identical sources of one tick
fetched once, each fetch under one deadline (`fetch`), so no feed can take the threads another
feed needs; a stopped runner returns at once, abandoning what its sources still hold.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import nacl.signing

from watchtower.ingest import priority
from watchtower.ingest.dispatch import DEFAULT_WORKERS, Dispatcher, deadline_at
from watchtower.ingest.fetch import Fetcher, FetchError, Network, fetch_json, select_result
from watchtower.ingest.kafka_source import run_kafka_task
from watchtower.ingest.secrets import SecretStore
from watchtower.ingest.task_reader import task_reader
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.constants import BLOCK_INTERVAL_MS, GENESIS_UNIX_MS
from watchtower.protocol.errors import MalformedRecordError, WatchtowerError
from watchtower.protocol.ingestion import HttpJsonTask, IngestReason, TaskSpec, parse_task_definition
from watchtower.protocol.ingestion.records import (
    MAX_BATCH,
    IngestResult,
    IngestTask,
    new_result,
    verify_task,
    verify_task_batch,
)
from watchtower.protocol.ingestion.results import canonical_json, parse_result
from watchtower.protocol.ingestion.runners import RUNNERS_KEY
from watchtower.protocol.ledger.billing import block_height_at
from watchtower.protocol.partitioning import partition_for_key
from watchtower.protocol.signed_command import Command, sign_command
from watchtower.protocol.validation import is_number
from watchtower.schemas.ingest_records import batch_tasks, decode_tasks, encode_result_batch
from watchtower.topics.catalogue import topic_name
from watchtower.topics.partition_writer import PartitionWriter
from watchtower.topics.records import Record

log = logging.getLogger("watchtower.ingest.runner")


def block_ms(height: int) -> int:
    """When block `height` starts (Unix ms): the start of a tick at that height."""
    return GENESIS_UNIX_MS + height * BLOCK_INTERVAL_MS


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
                 lie: bool = False, bootstrap: str | None = None, prefix: str | None = None,
                 secrets: SecretStore | None = None) -> None:
        self.key = key
        self.address = address_from_public_key(bytes(key.verify_key))
        self.scheduler = scheduler
        self.allow = allow
        self.lie = lie
        self.bootstrap = bootstrap  # for kafka_topic tasks
        self.prefix = prefix
        self.secrets = SecretStore.from_env() if secrets is None else secrets  # what task headers name
        self.quarantined: Counter[str] = Counter()
        self.results = 0
        self.skipped = 0
        self._count = threading.Lock()
        self.batched = False
        """Results are left unsigned for a `ResultBatcher`, which signs each batch (`serve` sets it)."""

    def accept(self, value: bytes | None, where: str = "") -> IngestTask | None:
        """The task in one single-task ``ingest.tasks`` record if this runner is to run it now (see
        `accept_all`, which also reads batches)."""
        tasks = self.accept_all(value, where)
        return tasks[0] if tasks else None

    def accept_all(self, value: bytes | None, where: str = "") -> list[IngestTask]:
        """The tasks of one ``ingest.tasks`` record (a task, or a batch of them) this runner is to
        run now; none when they are not ours, late, or quarantined (a forged or malformed record
        or batch entry: counted, never run)."""
        try:
            record = decode_tasks(value)
            if isinstance(record, IngestTask):
                verify_task(record, self.scheduler)
                tasks = [record]
            else:
                verify_task_batch(record, self.scheduler)
                tasks = batch_tasks(record)
        except WatchtowerError as exc:
            self._quarantine(exc, where)
            return []
        height = now_height()
        batched = not isinstance(record, IngestTask)
        out: list[IngestTask] = []
        late = 0
        for task in tasks:
            if batched:
                try:
                    verify_task(task, self.scheduler, batch_verified=True)
                except WatchtowerError as exc:
                    self._quarantine(exc, where)
                    continue
            if task.skip_from is not None or self.address not in task.runners:
                continue
            if height > task.deadline_height:
                late += 1
                continue
            out.append(task)
        if late:
            self.count_late(late)
        return out

    def _quarantine(self, exc: WatchtowerError, where: str) -> None:
        self.quarantined[exc.code] += 1
        log.warning("quarantined ingest.tasks record %s: %s: %s", where, exc.code, exc.message)

    def count_late(self, n: int) -> None:
        with self._count:
            self.skipped += n

    def spec(self, task: IngestTask) -> TaskSpec:
        """`task`'s parsed definition (INVALID_ARGUMENT if it does not parse), parsed once per
        distinct definition text: a feed's tasks all carry the same one."""
        return _parse_definition(task.task_definition_json)

    def handle(self, value: bytes | None, where: str = "") -> IngestResult | None:
        """`accept` then `run_task`, in the caller's thread."""
        task = self.accept(value, where)
        return None if task is None else self.run_task(task)

    def run_task(self, task: IngestTask, fetcher: Fetcher | None = None) -> IngestResult:
        """Run `task` in the caller's thread and sign the result."""
        try:
            spec = self.spec(task)
        except WatchtowerError as exc:  # the task definition itself does not parse
            return self.failed(task, FetchError(IngestReason.SOURCE_UNAVAILABLE, exc.message))
        try:
            outcome = self.fetch(spec, task.tick_height, deadline_at(task), fetcher)
        except FetchError as exc:
            outcome = exc
        return self.finish(task, spec, outcome)

    def fetch(self, spec: TaskSpec, tick_height: int, deadline: float, fetcher: Fetcher | None = None) -> Any:
        """What `spec`'s source answers: the JSON document of an http_json source, the result bytes
        of a kafka_topic one (FetchError when it cannot)."""
        if isinstance(spec.source, HttpJsonTask):
            headers, private = self.secrets.resolve(spec.source.headers)
            return fetch_json(spec.source, allow=self.allow, client=fetcher, deadline=deadline, headers=headers,
                              secret_headers=private)
        if self.bootstrap is None:
            raise FetchError(IngestReason.SOURCE_UNAVAILABLE, "this runner has no Kafka to read topics from")
        return run_kafka_task(spec.source, tick_height, self.bootstrap, self.prefix)

    def finish(self, task: IngestTask, spec: TaskSpec, outcome: Any) -> IngestResult:
        """`task`'s signed result from what its source answered (`fetch`), or from its failure."""
        if isinstance(outcome, FetchError):
            return self.failed(task, outcome)
        try:
            result = select_result(spec.source, outcome) if isinstance(spec.source, HttpJsonTask) else outcome
            if self.lie:
                result = canonical_json(_lie(parse_result(result)))
        except FetchError as exc:
            return self.failed(task, exc)
        with self._count:
            self.results += 1
        return new_result(task, self.key, result=result, runner=self.address, for_batch=self.batched)

    def failed(self, task: IngestTask, error: FetchError) -> IngestResult:
        return new_result(task, self.key, error=error.reason, detail=error.detail, runner=self.address,
                          for_batch=self.batched)

    def health(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "runner": self.address, "results": self.results, "late": self.skipped,
                "quarantined": dict(self.quarantined), "priority": priority.describe()}


@functools.lru_cache(maxsize=4096)
def _parse_definition(text: str) -> TaskSpec:
    try:
        definition = json.loads(text)
    except (ValueError, RecursionError):
        definition = None
    if not isinstance(definition, dict):
        raise MalformedRecordError("a task definition is a JSON object")
    return parse_task_definition(definition)


def register(send: Callable[[Command], Any], runner: Runner, label: str, deadline_s: float = 60.0) -> bool:
    """Register `runner` itself (open registration) through `send` (the API's ``command``): True
    once registered, False when refused (logged with its code: on a deployment with a runner
    registrar that is UNAUTHORIZED, and the runner serves anyway, selected once admitted). A
    transient refusal is retried until `deadline_s`, then raised."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            send(registration_command(runner.key, label))
            return True
        except WatchtowerError as exc:
            if exc.code == "UNAUTHORIZED":
                log.warning("runner %s: registration refused (%s): %s; it runs the tasks it is selected for once "
                            "the registrar admits it", runner.address, exc.code, exc.message)
                return False
            if time.monotonic() > end:
                log.error("runner %s: registration refused (%s): %s", runner.address, exc.code, exc.message)
                raise
            log.info("runner %s: registration waits (%s): %s", runner.address, exc.code, exc.message)
            time.sleep(0.5)


def dispatcher(runner: Runner, emit: Callable[[IngestResult], None], fetcher: Fetcher, *,
               workers: int = DEFAULT_WORKERS) -> Dispatcher:
    """A `Dispatcher` running `runner`'s tasks on `fetcher`'s connections, each result to `emit`."""
    return Dispatcher(lambda job: runner.fetch(job.spec, job.tick_height, job.deadline, fetcher), runner.finish,
                      emit, late=runner.count_late, workers=workers)


def submit(runner: Runner, pool: Dispatcher, task: IngestTask, emit: Callable[[IngestResult], None]) -> None:
    """Hand `task` to `pool`; a task whose definition does not parse is answered at once."""
    try:
        spec = runner.spec(task)
    except WatchtowerError as exc:
        emit(runner.failed(task, FetchError(IngestReason.SOURCE_UNAVAILABLE, exc.message)))
        return
    pool.submit(task, spec)


RESULT_LINGER_MS: Final = 10
"""Results finished within a few ms of each other leave in one produce request: a block's fetches
end together, and the broker answers one request for them instead of one each."""
MAX_WAITING: Final = 10_000
"""Jobs queued in the dispatcher beyond which the runner stops reading tasks for a moment."""


def serve(runner: Runner, bootstrap: str, prefix: str | None, stop: threading.Event,
          health_file: Path | None = None, concurrency: int = DEFAULT_WORKERS) -> None:
    """The runner's loop until `stop`: tasks in, results out (at least once; the aggregator counts
    the first result of each runner). Tasks run on a `Dispatcher` (no feed takes another's
    threads), over one pool of keep-alive connections; results are produced in batches.

    On `stop` it returns within about two seconds whatever its sources do: running fetches are
    abandoned on their daemon threads and their results dropped."""
    # The runner's own group has one member, and static (`task_reader`).
    tasks = task_reader(bootstrap, topic_name("ingest-tasks", prefix),
                        f"wt-{prefix or 'wt'}.ingest-runner-{runner.address[2:18]}")
    # Placed as the scheduler places tasks (scheduler.INGEST_PARTITIONER): a result shares its task's partition.
    writer = PartitionWriter(bootstrap, linger_ms=RESULT_LINGER_MS)
    results_topic = topic_name("ingest-results", prefix)
    fetcher = Fetcher(runner.allow, max_connections=concurrency)

    partitions = len(writer.partitions(results_topic))
    runner.batched = True
    batcher = ResultBatcher(runner.key, lambda partition, value: writer.write(results_topic, partition, value),
                            partitions)
    batcher.start()
    pool = dispatcher(runner, batcher.add, fetcher, workers=concurrency)
    last_health = 0.0
    try:
        while not stop.is_set():
            if pool.waiting() > MAX_WAITING:
                writer.poll()
                stop.wait(0.05)
                continue
            for record in tasks.poll(500, 0.1):
                if isinstance(record, Record):  # the reader answers no ends of partition
                    for task in runner.accept_all(record.value, f"p{record.partition}@{record.offset}"):
                        submit(runner, pool, task, batcher.add)
            writer.poll()
            if health_file is not None and time.monotonic() - last_health > 0.5:
                last_health = time.monotonic()
                tmp = health_file.with_suffix(".tmp")
                tmp.write_text(json.dumps(runner.health()))
                tmp.replace(health_file)
    finally:
        pool.close()  # never joins a thread a source holds
        batcher.close()
        writer.flush(2)
        tasks.close()


class ResultBatcher:
    """Gathers a runner's results for `RESULT_LINGER_MS` and hands each partition's share to `send`
    as signed result batches (`MAX_BATCH` results at most each): one signature and one record for
    the results a block's fetches finish together, instead of one per tick.

    A result goes to the partition its stream id's key places it in, the partition of its task
    (`partition_for_key`, the scheduler's placement), so one aggregator reads both."""

    def __init__(self, key: nacl.signing.SigningKey, send: Callable[[int, bytes], None], partitions: int, *,
                 linger_ms: int = RESULT_LINGER_MS) -> None:
        self.key, self.send, self.partitions, self.linger_s = key, send, partitions, linger_ms / 1000
        self._items: list[IngestResult] = []
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="runner-results", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def add(self, result: IngestResult) -> None:
        with self._cond:
            self._items.append(result)
            if len(self._items) == 1:
                self._cond.notify()

    def close(self) -> None:
        """Send what is gathered, then stop."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(5)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._items and not self._closed:
                    self._cond.wait()
                closed = self._closed
            if not closed:
                time.sleep(self.linger_s)  # let the rest of the block's results come in
            with self._cond:
                items, self._items = self._items, []
            self.flush(items)
            if closed:
                return

    def flush(self, items: list[IngestResult]) -> None:
        by_partition: dict[int, list[IngestResult]] = {}
        for result in items:
            by_partition.setdefault(partition_for_key(result.stream_id.encode(), self.partitions), []).append(result)
        for partition, share in by_partition.items():
            for i in range(0, len(share), MAX_BATCH):
                try:
                    self.send(partition, encode_result_batch(share[i:i + MAX_BATCH], self.key))
                except Exception:  # a result not sent is a tick its aggregator times out, not a dead runner
                    log.exception("could not send %d results to partition %d", len(share[i:i + MAX_BATCH]), partition)
