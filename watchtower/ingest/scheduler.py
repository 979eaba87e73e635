"""The ingestion scheduler: a Faust agent folds ``events`` (which streams ingest, which runners are
registered) and a Faust timer on the block clock writes each due (stream, tick) to
``ingest.tasks`` exactly once.

Exactly once, across restarts and rebalances, without trusting any local state:

- one transactional producer (``transactional.id = wt-<prefix>.ingest-scheduler``): a new
  scheduler's ``init_transactions`` fences the old one and aborts whatever it left open, so two
  schedulers never both write;
- only then does it read ``ingest.tasks`` read_committed to its end: the last tick written per
  stream is whatever the log holds (`TaskWriter.last`);
- each round's tasks are one transaction, and ``last`` moves only after its commit. A scheduler
  killed mid-round leaves an aborted transaction that no reader sees; its successor writes those
  ticks again, once.

After an outage longer than ``max_catch_up`` ticks the older ticks are written as one skip notice
(`protocol.ingestion.due_ticks`), which the aggregator records as IngestFailed(TICKS_SKIPPED).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import tempfile
import time
import uuid
from typing import Any, Final

import faust
import nacl.signing
from confluent_kafka import Producer
from faust.transport.drivers import aiokafka as faust_aiokafka

from watchtower.ingest.runner import now_height
from watchtower.ingest.view import IngestionView
from watchtower.logs import faust_logging_config, faust_worker_argv
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.constants import BLOCK_INTERVAL_MS, GENESIS_UNIX_MS
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.ingestion import (
    DEFAULT_MAX_CATCH_UP,
    due_ticks,
    latest_tick,
    tick_height,
)
from watchtower.protocol.ingestion_records import IngestTask, new_task
from watchtower.schemas.ingest_records import decode_task, encode_task
from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.faust_settings import faust_broker_settings
from watchtower.topics.reader import read_committed

log = logging.getLogger("watchtower.ingest.scheduler")


INGEST_PARTITIONER: Final = "murmur2_random"
"""Tasks and results are placed by stream id with Kafka's own partitioner (the one Java clients
and `protocol.partitioning.partition_for_key` use), so a stream's tasks and results share a
partition number and the aggregators' range assignment gives both to the same member."""


class TaskWriter:
    """The one writer of ``ingest.tasks`` (see the module docstring)."""

    def __init__(self, bootstrap: str, prefix: str | None) -> None:
        self.topic = topic_name("ingest-tasks", prefix)
        self.producer = Producer(kafka_config(bootstrap, **{
            "transactional.id": f"wt-{prefix or 'wt'}.ingest-scheduler", "enable.idempotence": True,
            "linger.ms": 2, "partitioner": INGEST_PARTITIONER}))
        self.producer.init_transactions(60)
        self.last: dict[str, int] = {}
        for msg in read_committed(bootstrap, [self.topic]):
            try:
                task = decode_task(msg.value())
            except WatchtowerError as exc:  # not a task: it moves no stream
                log.warning("ingest.tasks record p%s@%s is not a task: %s", msg.partition(), msg.offset(), exc.message)
                continue
            self.last[task.stream_id] = max(self.last.get(task.stream_id, 0), task.tick)
        self.written = 0

    def write(self, tasks: list[IngestTask]) -> None:
        if not tasks:
            return
        self.producer.begin_transaction()
        for task in tasks:
            self.producer.produce(self.topic, key=task.stream_id.encode(), value=encode_task(task))
        self.producer.commit_transaction(30)
        for task in tasks:
            self.last[task.stream_id] = max(self.last.get(task.stream_id, 0), task.tick)
        self.written += len(tasks)


def plan(view: IngestionView, last: dict[str, int], height: int, key: nacl.signing.SigningKey,
         max_catch_up: int = DEFAULT_MAX_CATCH_UP) -> list[IngestTask]:
    """The signed tasks due at `height` for every ingesting stream after its `last` written tick.

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
                                scheduler_address=address))
        out.extend(new_task(stream_id=stream.stream_id, tick=t,
                            tick_height=tick_height(stream.anchor, cfg.interval_blocks, t),
                            timeout_blocks=timeout_blocks, config=template, runner_keys=keys, scheduler=key,
                            scheduler_address=address)
                   for t in due.ticks)
    return out


class _ReadCommittedThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        consumer._isolation_level = "read_committed"  # an aborted StreamCreated must not schedule anything
        return consumer


class _Consumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> _ReadCommittedThread:
        return _ReadCommittedThread(self, loop=self.loop, beacon=self.beacon)


class _Transport(faust_aiokafka.Transport):
    Consumer = _Consumer


class SchedulerApp(faust.App):
    """At least once, read_committed; the fold is idempotent, so a redelivered event changes nothing."""

    def _new_transport(self) -> Any:
        return _Transport(self.conf.broker_consumer, self)


BLOCK_START_MARGIN_MS: Final = 2
"""How long after a block starts the scheduler plans it (the clock's own jitter)."""


def build_app(bootstrap: str, prefix: str | None, key: nacl.signing.SigningKey, *, tick_s: float = 0.25,
              max_catch_up: int = DEFAULT_MAX_CATCH_UP) -> SchedulerApp:
    """The scheduler's Faust app (see the module docstring).

    Its group is new at every start, so the agent folds ``events`` from the beginning: the view is
    rebuilt from the log each time, never trusted from a previous run.
    """
    app = SchedulerApp(
        f"wt-{prefix or 'wt'}.ingest-scheduler-{uuid.uuid4().hex[:8]}",
        broker=f"kafka://{bootstrap}", **faust_broker_settings(), store="memory://",
        datadir=os.environ.get("WATCHTOWER_FAUST_DATADIR") or tempfile.mkdtemp(prefix="wt-ingest-faust-"),
        processing_guarantee="at_least_once", web_enabled=False, topic_disable_leader=True,
        consumer_auto_offset_reset="earliest", topic_allow_declare=False,
    )
    view = IngestionView(heads=False)
    state: dict[str, Any] = {"writer": None}
    events = app.topic(topic_name("events", prefix), value_type=bytes, value_serializer="raw", key_serializer="raw")

    @app.agent(events)
    async def fold(stream: Any) -> None:
        async for value in stream:
            view.fold(value)

    @app.task
    async def start_writer() -> None:
        state["writer"] = await asyncio.get_running_loop().run_in_executor(None, TaskWriter, bootstrap, prefix)
        log.info("ingest scheduler ready: %d streams already have ticks", len(state["writer"].last))

    def _round(writer: TaskWriter) -> None:
        writer.write(plan(view, writer.last, now_height(), key, max_catch_up))

    @app.task
    async def tick() -> None:
        # Ticks fall due at block starts: wake just after each one (and at least every `tick_s`, for
        # streams created meanwhile), rather than polling on a timer that is late by up to its interval.
        loop = asyncio.get_running_loop()
        while True:
            now_ms = time.time_ns() // 1_000_000
            await asyncio.sleep(min(tick_s, (BLOCK_INTERVAL_MS - (now_ms - GENESIS_UNIX_MS) % BLOCK_INTERVAL_MS
                                             + BLOCK_START_MARGIN_MS) / 1000))
            writer: TaskWriter | None = state["writer"]
            if writer is None:
                continue
            # Planned and written off the event loop: signing a block's tasks would otherwise hold up
            # the agent that folds events.
            try:
                await loop.run_in_executor(None, _round, writer)
            except Exception:  # the next round writes what this one did not (`TaskWriter.last`)
                log.exception("ingest scheduler round failed; the next block tries again")
                await asyncio.sleep(tick_s)

    app.ingestion_view = view  # type: ignore[attr-defined]
    return app


def run(bootstrap: str, prefix: str | None, key: nacl.signing.SigningKey) -> None:
    """Run the scheduler worker in the foreground until it is stopped."""
    app = build_app(bootstrap, prefix, key)
    logging_config = faust_logging_config("ingest", default_level="INFO")  # JSON lines when chosen
    if logging_config is not None:
        app.conf.logging_config = logging_config
    sys.argv = faust_worker_argv(app, "--loglevel", "warn", "--without-web")  # no banner, no spinner
    app.main()
