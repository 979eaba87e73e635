"""``watchtower ingest serve``: the ingestion service process — the scheduler and the aggregator,
each a thread with its own Kafka readers and producer (or one of them alone, `ROLES`).

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
from pathlib import Path
from typing import Any, Final

import nacl.signing

from watchtower.gateway.transport import CommandClient
from watchtower.http.keymgr_client import ENV_KEYMGR, KeyManagerApi
from watchtower.ingest import priority
from watchtower.ingest.aggregator import Aggregator
from watchtower.ingest.runner import now_height
from watchtower.ingest.sink import KafkaSink
from watchtower.ingest.view import IngestionView
from watchtower.metrics.exposition import start_metrics
from watchtower.metrics.ingest import AggregatorCollector
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.constants import BLOCK_INTERVAL_MS
from watchtower.protocol.ingestion import MAX_TIMEOUT_BLOCKS
from watchtower.topics.assigned_reader import FROM_BEGINNING, AssignedReader
from watchtower.topics.catalogue import topic_name
from watchtower.topics.group_reader import GroupReader, Partitions
from watchtower.topics.groups import wait_commands_decided
from watchtower.topics.records import EndOfPartition, Record, committed_records

log = logging.getLogger("watchtower.ingest.service")
LOOKBACK_MS: Final = (MAX_TIMEOUT_BLOCKS + 60) * BLOCK_INTERVAL_MS
COMMAND_LINGER_MS: Final = 10
"""A block's decisions leave within a few ms of each other: gathering them costs little latency and
saves the broker a request per publish."""
EVENTS_FETCH_WAIT_MS: Final = 50
"""The events fold waits up to 50 ms for a fuller fetch (`EVENTS_FETCH_MIN_BYTES`): it needs the log
for new streams and after a moved head, never on the way of a tick, and the broker answers a few
fetches a second, not one per publish."""
EVENTS_FETCH_MIN_BYTES: Final = 65536
RELEASE_TIMEOUT_S: Final = 45.0
"""Longest a revoke waits for the released streams' publishes in flight (a reply's timeout and more)."""


def aggregator_group(prefix: str | None) -> str:
    """The aggregators' consumer group on ``ingest.tasks`` and ``ingest.results``."""
    return f"wt-{topic_name('events', prefix).rsplit('.', 1)[0]}.ingest-aggregator"


class AggregatorService:
    """One aggregator member (see the module docstring). `run` drives it until `stop`."""

    def __init__(self, bootstrap: str, prefix: str | None, scheduler: str, publisher: nacl.signing.SigningKey,
                 stop: threading.Event, health_file: Path | None = None, *, group: str | None = None) -> None:
        self.bootstrap, self.prefix, self.stop, self.health_file = bootstrap, prefix, stop, health_file
        self.group = group or aggregator_group(prefix)
        self.t_events, self.t_tasks, self.t_results = (
            topic_name(r, prefix) for r in ("events", "ingest-tasks", "ingest-results"))
        self.view = IngestionView()
        self.events_next: dict[int, int] = {}
        # Its own lane: the stream workers serve clients' commands first (docs/ingestion.md).
        self.commands = CommandClient(bootstrap, prefix=prefix, linger_ms=COMMAND_LINGER_MS, topic="ingest-commands")
        keymgr_url = os.environ.get(ENV_KEYMGR)
        keymgr = KeyManagerApi(keymgr_url) if keymgr_url else None
        self.aggregator = Aggregator(self.view, scheduler, KafkaSink(self.commands, self.view, publisher, keymgr))
        priority.watch(self.aggregator.take_lateness)  # late publishes take the CPU back
        self.stream_partition: dict[str, int] = {}
        self.owned: set[int] = set()
        self.read_to: dict[int, int] = {}
        """Per results partition: the instant (Unix ms) up to which its results are all read."""
        self.at_end: set[int] = set()

    # --- the events fold -------------------------------------------------------------------------

    def _fold(self, record: Record) -> None:
        if record.offset < self.events_next.get(record.partition, 0):
            return  # read already (the catch-up scan and the tail overlap)
        self.view.fold(record.value, record.key)
        self.events_next[record.partition] = record.offset + 1

    def catch_up(self) -> None:
        """Fold ``events`` to its current end."""
        for record in committed_records(self.bootstrap, [self.t_events], start=dict(self.events_next)):
            self._fold(record)

    # --- partitions ------------------------------------------------------------------------------

    def _on_assign(self, partitions: Partitions) -> int | None:
        """Ready the member for `partitions`; the instant their tasks and results are read from
        (None, when stopped meanwhile: the client places them itself)."""
        mine = sorted({p for _topic, p in partitions})
        log.info("aggregator takes partitions %s: waiting for the commands already sent to be decided", mine)
        if not wait_commands_decided(self.bootstrap, self.prefix, stop=self.stop, log=log):
            return None
        self.catch_up()
        self.aggregator.forget_finished()
        for partition in mine:
            self.at_end.discard(partition)
            self.read_to.pop(partition, None)
        self.owned = set(mine)
        log.info("aggregator holds partitions %s", mine)
        return int(time.time() * 1000) - LOOKBACK_MS

    def _on_revoke(self, partitions: Partitions) -> None:
        gone = {p for _topic, p in partitions}
        streams = {sid for sid, p in self.stream_partition.items() if p in gone}
        self.owned -= gone
        if not self.aggregator.release(streams, RELEASE_TIMEOUT_S):
            log.error("publishes of released streams were still in flight after %.0f s", RELEASE_TIMEOUT_S)
        log.info("aggregator released partitions %s (%d streams)", sorted(gone), len(streams))

    # --- the loop --------------------------------------------------------------------------------

    def run(self) -> None:
        self.catch_up()
        events = AssignedReader(self.bootstrap, self.t_events, group_prefix=f"wt-{self.prefix or 'wt'}.ingest-fold",
                                settings={"auto.offset.reset": "earliest", "fetch.wait.max.ms": EVENTS_FETCH_WAIT_MS,
                                          "fetch.min.bytes": EVENTS_FETCH_MIN_BYTES})
        try:  # the tail goes on where the catch-up stopped
            events.assign({p: self.events_next.get(p, FROM_BEGINNING) for p in events.partitions()})
        except BaseException:
            events.close()
            raise
        # A member killed with kill -9 hands its feeds on within the session (`GroupTimeouts`).
        work = GroupReader(self.bootstrap, [self.t_tasks, self.t_results], group=self.group, auto_commit=False,
                           range_assignor=True, partition_ends=True, on_assign=self._on_assign,
                           on_revoke=self._on_revoke)
        start_metrics("ingest", [AggregatorCollector(self.aggregator)])
        last_health = 0.0
        try:
            while not self.stop.is_set():
                for record in events.take(1000, 0):
                    if isinstance(record, Record):  # the reader asks for no ends of partition
                        self._fold(record)
                for item in work.poll(1000, 0.02):  # short: answers that came back are landed each turn
                    self._handle(item)
                self.aggregator.step(now_height(), self.results_read_to)
                self.commands.poll()  # the step's commands were sent without a poll each
                if self.health_file is not None and time.monotonic() - last_health > 0.5:
                    last_health = time.monotonic()
                    self._write_health()
        finally:
            work.close()
            events.close()
            self.commands.close()

    def _handle(self, item: Record | EndOfPartition) -> None:
        if isinstance(item, EndOfPartition):
            if item.topic == self.t_results:
                self.at_end.add(item.partition)
            return
        if item.partition not in self.owned:
            return  # read before a revoke took effect
        if item.topic == self.t_results:
            self.at_end.discard(item.partition)
            # A runner's clock cannot push the mark past now (it would time out others' ticks early).
            self.read_to[item.partition] = max(self.read_to.get(item.partition, 0),
                                               min(item.timestamp_ms, time.time_ns() // 1_000_000))
        where = f"{item.topic}[{item.partition}]@{item.offset}"
        if item.topic == self.t_tasks:
            for stream_id in self.aggregator.on_tasks(item.value, where):
                self.stream_partition[stream_id] = item.partition
        else:
            self.aggregator.on_results(item.value, where)

    def results_read_to(self, stream_id: str) -> int:
        """The instant up to which `stream_id`'s results are all read: now when its partition is
        read to its end, else the newest result read there (`Aggregator.step`)."""
        partition = self.stream_partition.get(stream_id)
        if partition is None or partition in self.at_end:
            return time.time_ns() // 1_000_000
        return self.read_to.get(partition, 0)

    def health(self) -> dict[str, Any]:
        return {"pid": os.getpid(), **self.aggregator.health(), "streams": sorted(self.view.streams),
                "runners": sorted(self.view.registered()), "partitions": sorted(self.owned),
                "priority": priority.describe()}

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
