"""``watchtower ingest serve``: the ingestion service process — the scheduler and the aggregator,
each a thread with its own confluent-kafka readers and producer (or one of them alone, `ROLES`).

Aggregators scale out by stream: they share one consumer group on ``ingest.tasks`` and
``ingest.results`` (both keyed by stream id, with the same partitions, so the range assignor gives
a stream's tasks and results to the same member), and each folds the whole ``events`` log
(`IngestionView`). A member finishes only the ticks of the partitions it holds:

- on revoke it drops those streams' pending ticks and waits for their publishes in flight to be
  answered, so the next owner never races one of them;
- on assign it first waits until the stream workers have decided every command already on
  ``ingest.commands`` and ``commands`` (`topics.groups.wait_commands_decided`: a predecessor killed
  with kill -9 may have left publishes nobody has decided yet), then folds ``events`` to its end,
  and only then reads the new partitions' tasks and results from `LOOKBACK_MS` before now (every
  task whose deadline can still matter: timeout_blocks is at most 600). What was finished is
  whatever the log says: a tick at or below a stream's last finished tick is never finished again.

It keeps no state of its own between runs: the log is its memory (`aggregator`). Decisions leave as
signed commands on ``ingest.commands`` (`sink.KafkaSink`), a lane of their own that the stream
workers serve after clients' commands, a few dozen in flight at once (`window`).

Keys (`keys`): the scheduler key signs tasks; the publisher key is the one owners delegate to.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Final

import nacl.signing
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from watchtower.gateway.transport import CommandClient
from watchtower.http.keymgr_client import ENV_KEYMGR, KeyManagerApi
from watchtower.ingest.aggregator import Aggregator
from watchtower.ingest.runner import now_height
from watchtower.ingest.sink import KafkaSink
from watchtower.ingest.view import IngestionView
from watchtower.metrics.exposition import start_metrics
from watchtower.metrics.ingest import AggregatorCollector
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.constants import BLOCK_INTERVAL_MS
from watchtower.protocol.ingestion import MAX_TIMEOUT_BLOCKS
from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import GroupTimeouts, kafka_config
from watchtower.topics.groups import wait_commands_decided
from watchtower.topics.reader import read_committed

log = logging.getLogger("watchtower.ingest.service")
LOOKBACK_MS: Final = (MAX_TIMEOUT_BLOCKS + 60) * BLOCK_INTERVAL_MS
COMMAND_LINGER_MS: Final = 10
"""A block's decisions leave within a few ms of each other: gathering them costs little latency and
saves the broker a request per publish."""
EVENTS_FETCH: Final = {"fetch.wait.max.ms": 50, "fetch.min.bytes": 65536}
"""The events fold waits up to 50 ms for a fuller fetch: it needs the log for new streams and after a
moved head, never on the way of a tick, and the broker answers a few fetches a second, not one
per publish."""
RELEASE_TIMEOUT_S: Final = 45.0
"""Longest a revoke waits for the released streams' publishes in flight (a reply's timeout and more)."""


def aggregator_group(prefix: str | None) -> str:
    """The aggregators' consumer group on ``ingest.tasks`` and ``ingest.results``."""
    return f"wt-{topic_name('events', prefix).rsplit('.', 1)[0]}.ingest-aggregator"


def _partitions(consumer: Consumer, topic: str) -> list[int]:
    meta = consumer.list_topics(topic, timeout=30)
    return sorted(meta.topics[topic].partitions)


class AggregatorService:
    """One aggregator member (see the module docstring). `run` drives it until `stop`."""

    def __init__(self, bootstrap: str, prefix: str | None, scheduler: str, publisher: nacl.signing.SigningKey,
                 stop: threading.Event, health_file: Path | None = None, *, group: str | None = None) -> None:
        self.bootstrap, self.prefix, self.stop, self.health_file = bootstrap, prefix, stop, health_file
        self.t_events, self.t_tasks, self.t_results = (
            topic_name(r, prefix) for r in ("events", "ingest-tasks", "ingest-results"))
        self.view = IngestionView()
        self.events_next: dict[int, int] = {}
        # Its own lane: the stream workers serve clients' commands first (docs/ingestion.md).
        self.commands = CommandClient(bootstrap, prefix=prefix, linger_ms=COMMAND_LINGER_MS, topic="ingest-commands")
        keymgr_url = os.environ.get(ENV_KEYMGR)
        keymgr = KeyManagerApi(keymgr_url) if keymgr_url else None
        self.aggregator = Aggregator(self.view, scheduler, KafkaSink(self.commands, self.view, publisher, keymgr))
        self.stream_partition: dict[str, int] = {}
        self.owned: set[int] = set()
        self.read_to: dict[int, int] = {}
        """Per results partition: the instant (Unix ms) up to which its results are all read."""
        self.at_end: set[int] = set()
        self.events = Consumer(kafka_config(bootstrap, **{
            "group.id": f"wt-{prefix or 'wt'}.ingest-fold-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
            "isolation.level": "read_committed", "auto.offset.reset": "earliest", **EVENTS_FETCH}))
        timeouts = GroupTimeouts.from_env()  # a member killed with kill -9 hands its feeds on within this
        self.work = Consumer(kafka_config(bootstrap, **{
            "group.id": group or aggregator_group(prefix), "enable.auto.commit": False,
            "session.timeout.ms": timeouts.session_ms, "heartbeat.interval.ms": timeouts.heartbeat_ms,
            "isolation.level": "read_committed", "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "range", "enable.partition.eof": True}))

    # --- the events fold -------------------------------------------------------------------------

    def _fold(self, msg: Message) -> None:
        partition, offset = msg.partition(), msg.offset()
        if partition is None or offset is None or offset < self.events_next.get(partition, 0):
            return  # read already (the catch-up scan and the tail overlap)
        self.view.fold(msg.value(), msg.key())
        self.events_next[partition] = offset + 1

    def catch_up(self) -> None:
        """Fold ``events`` to its current end."""
        for msg in read_committed(self.bootstrap, [self.t_events], start=dict(self.events_next)):
            self._fold(msg)

    # --- partitions ------------------------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        mine = sorted({tp.partition for tp in partitions})
        log.info("aggregator takes partitions %s: waiting for the commands already sent to be decided", mine)
        if not wait_commands_decided(self.bootstrap, self.prefix, stop=self.stop, log=log):
            return
        self.catch_up()
        self.aggregator.forget_finished()
        for partition in mine:
            self.at_end.discard(partition)
            self.read_to.pop(partition, None)
        since = int(time.time() * 1000) - LOOKBACK_MS
        wanted = [TopicPartition(tp.topic, tp.partition, since) for tp in partitions]
        placed = consumer.offsets_for_times(wanted, timeout=30) if wanted else []
        consumer.assign(placed)
        self.owned = set(mine)
        log.info("aggregator holds partitions %s", mine)

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        gone = {tp.partition for tp in partitions}
        streams = {sid for sid, p in self.stream_partition.items() if p in gone}
        self.owned -= gone
        if not self.aggregator.release(streams, RELEASE_TIMEOUT_S):
            log.error("publishes of released streams were still in flight after %.0f s", RELEASE_TIMEOUT_S)
        log.info("aggregator released partitions %s (%d streams)", sorted(gone), len(streams))

    # --- the loop --------------------------------------------------------------------------------

    def run(self) -> None:
        self.catch_up()
        self.events.assign([TopicPartition(self.t_events, p, self.events_next.get(p, OFFSET_BEGINNING))
                            for p in _partitions(self.events, self.t_events)])
        self.work.subscribe([self.t_tasks, self.t_results], on_assign=self._on_assign, on_revoke=self._on_revoke)
        start_metrics("ingest", [AggregatorCollector(self.aggregator)])
        last_health = 0.0
        try:
            while not self.stop.is_set():
                for msg in self.events.consume(1000, 0):
                    error = msg.error()
                    if error is None:
                        self._fold(msg)
                    elif error.code() != KafkaError._PARTITION_EOF:
                        log.warning("events reader: %s", error)
                for msg in self.work.consume(1000, 0.02):  # short: answers that came back are landed each turn
                    self._handle(msg)
                self.aggregator.step(now_height(), self.results_read_to)
                self.commands.poll()  # the step's commands were sent without a poll each
                if self.health_file is not None and time.monotonic() - last_health > 0.5:
                    last_health = time.monotonic()
                    self._write_health()
        finally:
            self.work.close()
            self.events.close()
            self.commands.close()

    def _handle(self, msg: Message) -> None:
        error = msg.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                if msg.topic() == self.t_results:
                    self.at_end.add(int(msg.partition() or 0))
            else:
                log.warning("ingest reader: %s", error)
            return
        if msg.partition() not in self.owned:
            return  # read before a revoke took effect
        if msg.topic() == self.t_results:
            partition = int(msg.partition() or 0)
            self.at_end.discard(partition)
            _, stamp = msg.timestamp()
            # A runner's clock cannot push the mark past now (it would time out others' ticks early).
            self.read_to[partition] = max(self.read_to.get(partition, 0), min(stamp, time.time_ns() // 1_000_000))
        where = f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"
        if msg.topic() == self.t_tasks:
            partition = int(msg.partition() or 0)
            for stream_id in self.aggregator.on_tasks(msg.value(), where):
                self.stream_partition[stream_id] = partition
        else:
            self.aggregator.on_results(msg.value(), where)

    def results_read_to(self, stream_id: str) -> int:
        """The instant up to which `stream_id`'s results are all read: now when its partition is
        read to its end, else the newest result read there (`Aggregator.step`)."""
        partition = self.stream_partition.get(stream_id)
        if partition is None or partition in self.at_end:
            return time.time_ns() // 1_000_000
        return self.read_to.get(partition, 0)

    def health(self) -> dict[str, Any]:
        return {"pid": os.getpid(), **self.aggregator.health(), "streams": sorted(self.view.streams),
                "runners": sorted(self.view.registered()), "partitions": sorted(self.owned)}

    def _write_health(self) -> None:
        assert self.health_file is not None
        tmp = self.health_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.health()))
        tmp.replace(self.health_file)


def run_aggregator(bootstrap: str, prefix: str | None, scheduler: str, publisher: nacl.signing.SigningKey,
                   stop: threading.Event, health_file: Path | None = None) -> None:
    """The aggregator loop until `stop` (see the module docstring)."""
    AggregatorService(bootstrap, prefix, scheduler, publisher, stop, health_file).run()


ROLES: Final = ("all", "aggregator", "scheduler")
"""What one ``ingest serve`` process runs: both parts (the default), or one of them. Aggregators
scale out (any number share the feeds); one scheduler writes at a time (a second fences the first)."""


def serve(bootstrap: str, prefix: str | None, scheduler_key: nacl.signing.SigningKey,
          publisher_key: nacl.signing.SigningKey, health_file: Path | None = None, role: str = "all") -> None:
    """Run the aggregator and the scheduler until SIGTERM or SIGINT; `role` runs one of them alone
    (`ROLES`). A scheduler fenced by a newer one stops writing; an aggregator beside it goes on."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    from watchtower.ingest.scheduler import schedule

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    scheduler = address_from_public_key(bytes(scheduler_key.verify_key))
    if role == "scheduler":
        schedule(bootstrap, prefix, scheduler_key, stop)
        return
    if role == "aggregator":
        run_aggregator(bootstrap, prefix, scheduler, publisher_key, stop, health_file)
        return
    thread = threading.Thread(target=run_aggregator, name="ingest-aggregator", daemon=True,
                              args=(bootstrap, prefix, scheduler, publisher_key, stop, health_file))
    thread.start()
    try:
        schedule(bootstrap, prefix, scheduler_key, stop)
        while thread.is_alive() and not stop.is_set():  # fenced: the aggregator goes on alone
            stop.wait(1)
    finally:
        stop.set()
        thread.join(10)
        os._exit(0)
