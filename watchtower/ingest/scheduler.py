"""The ingestion scheduler: a reader thread folds ``events`` (which streams ingest, which runners are
registered) and a loop on the block clock writes each due (stream, tick) to ``ingest.tasks``
exactly once.

Exactly once, across restarts and rebalances, without trusting any local state:

- one transactional producer (``transactional.id = wt-<prefix>.ingest-scheduler``): a new
  scheduler's ``init_transactions`` fences the old one and aborts whatever it left open, so two
  schedulers never both write;
- only then does it read ``ingest.tasks`` read_committed to its end: the last tick written per
  stream is whatever the log holds (`TaskWriter.last`);
- each round's tasks are one transaction, and ``last`` moves only after its commit. A scheduler
  killed mid-round leaves an aborted transaction that no reader sees; its successor writes those
  ticks again, once;
- a round whose commit failed with its outcome unknown (the brokers went away mid-commit) restarts
  the producer and reads ``last`` from the log again (`workers.tx_writer`): the next round writes
  exactly what did not commit, and the scheduler never wedges on a half-finished commit.

After an outage longer than ``max_catch_up`` ticks the older ticks are written as one skip notice
(`protocol.ingestion.due_ticks`), which the aggregator records as IngestFailed(TICKS_SKIPPED).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, Final

import nacl.signing

from watchtower.ingest.runner import now_height
from watchtower.ingest.view import IngestionView
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.constants import BLOCK_INTERVAL_MS, GENESIS_UNIX_MS
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.ingestion import (
    DEFAULT_MAX_CATCH_UP,
    due_ticks,
    latest_tick,
    tick_height,
)
from watchtower.protocol.ingestion.records import MAX_BATCH, IngestTask, new_task, verify_task_batch
from watchtower.protocol.partitioning import partition_for_key
from watchtower.schemas.ingest_records import batch_tasks, decode_tasks, encode_task_batch
from watchtower.topics.assigned_reader import FROM_BEGINNING, AssignedReader
from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.metadata import partitions
from watchtower.topics.records import Record, RecordProducer, committed_records
from watchtower.workers.host import FencedError
from watchtower.workers.tx_writer import TransactionalWriter, WriteFailedError

log = logging.getLogger("watchtower.ingest.scheduler")

#: A round's commit waits this long (the watchdog a little longer) before its outcome counts as unknown.
COMMIT_TIMEOUT_S: Final = 30.0


INGEST_PARTITIONER: Final = "murmur2_random"
"""Tasks and results are placed by stream id with Kafka's own partitioner (the one Java clients
and `protocol.partitioning.partition_for_key` use), so a stream's tasks and results share a
partition number and the aggregators' range assignment gives both to the same member."""


class TaskWriter:
    """The one writer of ``ingest.tasks`` (see the module docstring). A round's tasks leave as
    signed batches, one or more per partition (`protocol.ingestion.records.MAX_BATCH` tasks at most
    each), each in the partition its streams' keys place them in: one signature and one record for
    a partition's share of the block instead of one per tick.

    `factory` makes the transactional producer from its settings (the client's own when None; a
    test passes one that fails on cue)."""

    def __init__(self, bootstrap: str, prefix: str | None, key: nacl.signing.SigningKey,
                 stop: threading.Event | None = None, *,
                 factory: Callable[[dict[str, Any]], Any] | None = None) -> None:
        self.bootstrap = bootstrap
        self.topic = topic_name("ingest-tasks", prefix)
        self.key = key
        self.address = address_from_public_key(bytes(key.verify_key))
        options: dict[str, Any] = {} if factory is None else {"factory": factory}
        self.writer = TransactionalWriter(kafka_config(bootstrap, **{
            "transactional.id": f"wt-{prefix or 'wt'}.ingest-scheduler", "enable.idempotence": True,
            "linger.ms": 2, "partitioner": INGEST_PARTITIONER, "log_level": 3}),
            name="ingest-scheduler", stop=stop or threading.Event(), on_restart=self._read_last,
            call_timeout_s=COMMIT_TIMEOUT_S, **options)
        self.writer.open()
        self.partitions = len(partitions(self.writer.producer, self.topic))
        self.last: dict[str, int] = {}
        self._read_last()
        self.written = 0

    def close(self) -> None:
        self.writer.close()

    def _read_last(self) -> None:
        """The last tick written per stream: whatever ``ingest.tasks`` holds, read_committed, after
        ``init_transactions`` settled any transaction an earlier producer left open."""
        last: dict[str, int] = {}
        for record in committed_records(self.bootstrap, [self.topic]):
            try:
                tasks = self._tasks(record.value)
            except WatchtowerError as exc:  # not a task of ours: it moves no stream
                log.warning("ingest.tasks record p%s@%s is not a task: %s", record.partition, record.offset,
                            exc.message)
                continue
            for task in tasks:
                last[task.stream_id] = max(last.get(task.stream_id, 0), task.tick)
        self.last = last

    def _tasks(self, value: bytes | None) -> list[IngestTask]:
        record = decode_tasks(value)
        if isinstance(record, IngestTask):
            return [record]
        verify_task_batch(record, self.address)
        return batch_tasks(record)

    def write(self, tasks: list[IngestTask]) -> None:
        """Write `tasks` (unsigned: `new_task(for_batch=True)`) in one transaction; `last` moves only
        once it committed. `WriteFailedError` when it did not (or may not have: `last` was then read
        again from the log), `FencedError` when another scheduler took over."""
        if not tasks:
            return
        by_partition: dict[int, list[IngestTask]] = {}
        for task in tasks:
            by_partition.setdefault(partition_for_key(task.stream_id.encode(), self.partitions), []).append(task)
        def produce(producer: RecordProducer) -> None:
            for partition, share in by_partition.items():
                for i in range(0, len(share), MAX_BATCH):
                    producer.produce(self.topic, partition=partition,
                                     value=encode_task_batch(share[i:i + MAX_BATCH], self.key))

        # A failure raises WriteFailedError with `last` as the log has it: the next round plans again.
        self.writer.write(produce)
        for task in tasks:
            self.last[task.stream_id] = max(self.last.get(task.stream_id, 0), task.tick)
        self.written += len(tasks)


def plan(view: IngestionView, last: dict[str, int], height: int, key: nacl.signing.SigningKey,
         max_catch_up: int = DEFAULT_MAX_CATCH_UP) -> list[IngestTask]:
    """The tasks due at `height` for every ingesting stream after its `last` written tick, unsigned
    (`TaskWriter.write` signs them in batches).

    One pass over the streams per round; a stream with nothing due costs one comparison."""
    out: list[IngestTask] = []
    keys: tuple[bytes, ...] | None = None
    address = address_from_public_key(bytes(key.verify_key))
    for stream in list(view.streams.values()):  # a snapshot: the fold adds streams from another thread
        cfg = stream.config
        if latest_tick(stream.anchor, cfg.interval_blocks, height) <= last.get(stream.stream_id, 0):
            continue
        due = due_ticks(last.get(stream.stream_id, 0), stream.anchor, cfg.interval_blocks, height, max_catch_up)
        timeout_blocks, template = view.timeout_and_template(stream)
        if keys is None:
            keys = view.runner_keys()
        if due.skipped is not None:
            first, last_skipped = due.skipped
            out.append(new_task(stream_id=stream.stream_id, tick=last_skipped, skip_from=first,
                                tick_height=tick_height(stream.anchor, cfg.interval_blocks, last_skipped),
                                timeout_blocks=0, config=template, runner_keys=(), scheduler=key,
                                scheduler_address=address, for_batch=True))
        out.extend(new_task(stream_id=stream.stream_id, tick=t,
                            tick_height=tick_height(stream.anchor, cfg.interval_blocks, t),
                            timeout_blocks=timeout_blocks, config=template, runner_keys=keys, scheduler=key,
                            scheduler_address=address, for_batch=True)
                   for t in due.ticks)
    return out


BLOCK_START_MARGIN_MS: Final = 2
"""How long after a block starts the scheduler plans it (the clock's own jitter)."""
EVENTS_FETCH_WAIT_MS: Final = 100
"""The events fold waits for a fuller fetch (`EVENTS_FETCH_MIN_BYTES`): a new stream or runner is
picked up within 100 ms, and the broker answers a few fetches a second instead of one per publish."""
EVENTS_FETCH_MIN_BYTES: Final = 65536


def fold_events(bootstrap: str, prefix: str | None, view: IngestionView, stop: threading.Event) -> None:
    """Fold ``events`` into `view` from the beginning, read_committed (an aborted StreamCreated must
    not schedule anything), until `stop`. The view skips every record that is neither a creation nor
    a runner event from its header alone, so the ingested feeds' own messages cost no decode."""
    events = AssignedReader(bootstrap, topic_name("events", prefix),
                            group_prefix=f"wt-{prefix or 'wt'}.ingest-scheduler-fold",
                            settings={"auto.offset.reset": "earliest", "fetch.wait.max.ms": EVENTS_FETCH_WAIT_MS,
                                      "fetch.min.bytes": EVENTS_FETCH_MIN_BYTES})
    try:
        events.assign(dict.fromkeys(events.partitions(), FROM_BEGINNING))
        while not stop.is_set():
            for record in events.take(1000, 0.2):
                if isinstance(record, Record):  # the reader asks for no ends of partition
                    view.fold(record.value, record.key)
    finally:
        events.close()


def _sleep_to_next_block(stop: threading.Event, tick_s: float) -> None:
    # Ticks fall due at block starts: wake just after each one (and at least every `tick_s`, for
    # streams created meanwhile), rather than polling on a timer that is late by up to its interval.
    now_ms = time.time_ns() // 1_000_000
    stop.wait(min(tick_s, (BLOCK_INTERVAL_MS - (now_ms - GENESIS_UNIX_MS) % BLOCK_INTERVAL_MS
                           + BLOCK_START_MARGIN_MS) / 1000))


def schedule(bootstrap: str, prefix: str | None, key: nacl.signing.SigningKey, stop: threading.Event, *,
             tick_s: float = 0.25, max_catch_up: int = DEFAULT_MAX_CATCH_UP) -> None:
    """The scheduler until `stop` (see the module docstring): a thread folds ``events``; this one
    writes each block's due tasks in one transaction just after the block starts.

    Returns early when another scheduler fenced this one (its transactional id was taken over):
    the newer one writes from then on."""
    view = IngestionView(heads=False)
    fold = threading.Thread(target=fold_events, args=(bootstrap, prefix, view, stop), name="ingest-scheduler-fold",
                            daemon=True)
    fold.start()
    try:
        writer = TaskWriter(bootstrap, prefix, key, stop)
    except FencedError as exc:
        log.error("ingest scheduler cannot start: %s", exc)
        return
    log.info("ingest scheduler ready: %d streams already have ticks", len(writer.last))
    try:
        _write_rounds(writer, view, key, stop, tick_s, max_catch_up)
    finally:
        writer.close()


def _write_rounds(writer: TaskWriter, view: IngestionView, key: nacl.signing.SigningKey, stop: threading.Event,
                  tick_s: float, max_catch_up: int) -> None:
    while not stop.is_set():
        _sleep_to_next_block(stop, tick_s)
        if stop.is_set():
            break
        try:
            writer.write(plan(view, writer.last, now_height(), key, max_catch_up))
        except FencedError as exc:
            log.error("ingest scheduler fenced: %s; a newer scheduler writes the tasks now", exc)
            return
        except WriteFailedError as exc:  # `last` is what the log holds: the next round writes the rest
            log.warning("ingest scheduler round not written (%s); the next block tries again", exc)
        except Exception:  # the next round writes what this one did not (`TaskWriter.last`)
            log.exception("ingest scheduler round failed; the next block tries again")


def run(bootstrap: str, prefix: str | None, key: nacl.signing.SigningKey) -> None:
    """Run the scheduler in the foreground until SIGTERM or SIGINT."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    schedule(bootstrap, prefix, key, stop)
