"""Fold each assigned partition's committed log: up to its end before it serves reads, then live.

After every rebalance that changes this worker's partitions, each one is brought up to date from
the log itself (a rebalance that leaves them as they were changes nothing here):
``events[p]``, ``messages[p]`` and ``replay[p]`` are read ``read_committed`` from the offset after
the last one its state has folded (from the beginning for a partition new to this worker). When a
partition reaches the end it had when the reading started, it serves reads; the same reader then
goes on folding what is committed after that (the live fold), until the assignment changes. One reader
per assignment, folding in log order per partition, so every record is folded exactly once (the
one exception: the publishes of a stream a long poll waits on fold before the rest of their batch,
which leaves the tables as the in-order fold does; see `CatchUp`). The
fold hands the event loop back every `FOLD_SLICE_S` of folding, so a worker folding a whole log (a
restart, a standby) still answers reads, long polls and its health within a fraction of a second.

Why this reader (`topics.partition_reader.PartitionReader`) and not the Faust agent's stream for
the live fold: the agent's path costs about 2.5x as much CPU per record (aiokafka's fetcher thread,
Faust's per-event stream machinery) as confluent-kafka's C client handing over whole batches, and
on the live path that was the projection's largest cost (README, "Publish to visible"). Faust still
runs the group: it subscribes to the topics, so its assignor co-partitions them and publishes the
owners' URLs, and this reader follows its assignment (`consumer.ProjectionApp` never fetches their
records itself).

Why not Faust's changelog recovery: with several workers it loses and corrupts state. A table
write in a rebalance window goes to an aborted transaction while the writer keeps it in memory; a
changelog topic missing from the group leader's metadata snapshot makes every write to that table
fail for minutes; and recovery crashes the worker (``ConsistencyError`` on a changelog highwater of
-1 read mid-rebalance, ``ProducerFenced`` on a commit racing the rebalance). The log is the source
of truth, so it is also the recovery.

The cost is a read of the partition's log on each assignment: from offset 0 when a partition
moves to a worker, only the tail when it stays.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Final

from watchtower.metrics import projection as metrics
from watchtower.projections.partitions import OwnedPartitions
from watchtower.topics.partition_reader import PartitionReader
from watchtower.topics.records import Record

log = logging.getLogger("watchtower.projections")

#: How often a fold records its positions in the fold group (`topics.groups.projection_fold_group`).
FOLD_RECORD_EVERY_S: Final = 5.0
#: The fold gives the event loop back (reads, long polls, health) after this long of folding.
FOLD_SLICE_S: Final = 0.005
#: Turns of the event loop the fold gives a long poll it has just woken: the flush that answers it,
#: `asyncio.wait_for` handing the result on, and the handler writing its response.
ANSWER_TURNS: Final = 3
#: The least folding between two such hand-overs: when every stream has a reader waiting, the fold
#: would otherwise pay the turns after every record; this way a woken poll waits at most this long.
ANSWER_EVERY_S: Final = 0.001
#: At most this many records join a batch while it is folded: at the end of each slice, when a long
#: poll waits, the records committed since the batch was fetched are taken (a non-blocking poll) so
#: the waited stream's publishes fold at once, not after the rest of the batch (`CatchUp.first`).
TAKE_MID_BATCH: Final = 2000

TopicPartitionKey = tuple[str, int]


class CatchUp:
    """Runs the catch-up of each assignment and tells `owned` which partitions serve.

    `fold` folds one record into the tables (the live agent's fold; it must not raise for a bad
    record). `attach` connects it to a Faust app's rebalance signals. `answers_due` says whether a
    record just folded woke a long poll: the fold then yields at once, so the poll is answered
    before the rest of the batch (a block's burst of other streams) is folded. `first` picks, from a
    fetched batch, the records to fold before the others (`fold.publishes_first`: the publishes of
    the streams a long poll waits on), so that poll is answered before the records committed ahead
    of them are folded. While a batch folds, at the end of each slice, `waiting` (a long poll is
    open) makes the fold take what was committed since the batch was fetched, so a waited stream's
    publish is not held behind the batch before it either.
    """

    def __init__(self, bootstrap: str, topics: tuple[str, ...], owned: OwnedPartitions,
                 fold: Callable[[Record], None], fold_group: str | None = None, standbys: bool = True,
                 answers_due: Callable[[], bool] | None = None,
                 first: Callable[[list[Record]], list[Record]] | None = None,
                 waiting: Callable[[], bool] | None = None) -> None:
        self.bootstrap = bootstrap
        self.answers_due = answers_due
        self.first = first
        self.waiting = waiting if first is not None else None
        self.standbys = standbys  # also fold the standby partitions the group's assignor names
        self._app: Any = None
        self.fold_group = fold_group  # where the fold's positions are recorded for lag (topics.groups)
        self.topics = topics  # (events, messages, replay): co-partitioned, read together
        self.owned = owned
        self.fold = fold
        self._tasks: set[asyncio.Task[None]] = set()

    def attach(self, app: Any) -> None:
        self._app = app
        app.on_partitions_revoked.connect(self._on_revoked)
        app.on_partitions_assigned.connect(self._on_assigned)

    async def _on_revoked(self, _sender: Any, _revoked: Any, **_kw: Any) -> None:
        self.owned.revoke()  # stops nothing: the partitions that stay keep serving (`partitions`)

    async def _on_assigned(self, _sender: Any, assigned: Iterable[Any], **_kw: Any) -> None:
        standby: set[TopicPartitionKey] = set()
        if self.standbys:  # the group's assignor names them with the assignment (not a Kafka assignment)
            standby = {(tp.topic, tp.partition) for tp in self._app.assignor.assigned_standbys()}
        self.assign({(tp.topic, tp.partition) for tp in assigned}, standby)

    def assign(self, assigned: set[TopicPartitionKey], standby: set[TopicPartitionKey] | None = None) -> None:
        """Adopt a new assignment (topic, partition pairs, owned and standby) and start catching it up."""
        partitions = self._whole(assigned, "assignment")
        standbys = sorted(set(self._whole(standby or set(), "standby assignment")) - set(partitions))
        before = self.owned.generation
        generation = self.owned.assign(partitions, standbys)
        if generation == before:
            return  # the same partitions: their fold goes on, and they never stopped serving
        log.info("assigned partitions %s, standby %s (generation %d)", partitions, standbys, generation)
        task = asyncio.ensure_future(self._run(generation, sorted([*partitions, *standbys])))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _whole(self, assigned: set[TopicPartitionKey], what: str) -> list[int]:
        """The partitions of which `assigned` holds every topic (the fold needs them all)."""
        shares = [{p for t, p in assigned if t == topic} for topic in self.topics]
        partitions = sorted(set.intersection(*shares))
        if any(share != shares[0] for share in shares):
            # The fold needs every topic of a partition; one without the others never serves.
            log.error("%s splits co-partitioned topics: %s; serving only %s", what,
                      {t: sorted(s) for t, s in zip(self.topics, shares, strict=True)}, partitions)
        return partitions

    async def _run(self, generation: int, partitions: list[int]) -> None:
        started = time.monotonic()
        while generation == self.owned.generation:
            try:
                await self._fold_and_tail(generation, partitions, started)
            except Exception:  # the broker is away, say: retry from what is folded so far
                log.exception("folding partitions %s failed; retrying in 1 s from what is folded", partitions)
                await asyncio.sleep(1.0)
                continue
            return

    async def _fold_and_tail(self, generation: int, partitions: list[int], started: float) -> None:
        """Fold `partitions` to their ends (then they serve), then live, until the generation changes."""
        loop = asyncio.get_running_loop()
        starts = {(t, p): self.owned.next_offset(t, p) for p in partitions for t in self.topics}
        # The events lead the messages: a partition's messages are fetched only once its events have
        # reached the end they had at open, so the fold never holds a message waiting for a publish
        # event still to come (messages wait in memory for their publish events, and past
        # `fold.MAX_WAITING` the oldest are dropped unindexed). Read together, the messages topic
        # ran thousands of records ahead of the events one while an API worker caught up under
        # load. The offline rebuild reads in the same order (`rebuild.rebuild_all`).
        reader = await loop.run_in_executor(None, functools.partial(
            PartitionReader, self.bootstrap, starts, self.fold_group, lead=(self.topics[0], self.topics[1]),
            lag_every_s=metrics.LAG_EVERY_S))
        folded, serving = 0, False
        next_record = 0.0
        owned = sorted(self.owned.assigned or ())  # the lag metrics and the fold group's positions: these
        metrics.BOARD.assigned(owned)
        try:
            self._settle(generation, partitions, reader.pending)
            while generation == self.owned.generation:
                if not serving and not reader.pending:
                    serving = True
                    log.info("partitions %s serve after folding %d records in %.2f s", partitions, folded,
                             time.monotonic() - started)
                records = await loop.run_in_executor(None, reader.poll)
                if generation != self.owned.generation:
                    break  # a newer rebalance owns the state now
                before, taken = folded, 0
                if self.first is not None and records:
                    folded += await self._fold_first(generation, self.first(records))
                    if generation != self.owned.generation:
                        break
                yielded = time.monotonic()
                slice_ends = yielded + FOLD_SLICE_S
                for at, r in enumerate(records):  # the records taken mid-batch join this loop
                    if time.monotonic() >= slice_ends:
                        # Let the reads in: a batch of 2,000 verifies holds the event loop for
                        # seconds on a busy host. Each record folds whole, so a read between two
                        # sees a prefix of each stream's log, as it does between two batches.
                        await asyncio.sleep(0)
                        if generation != self.owned.generation:
                            break  # a newer rebalance owns the state now
                        if (taken < TAKE_MID_BATCH and self.first is not None and self.waiting is not None
                                and self.waiting()):
                            # A reader waits: what was committed since this batch was fetched joins
                            # it (this loop reaches it in order), and the waited publishes fold now.
                            # They are picked from all that is not folded yet, not from what was just
                            # taken alone: a stream's own earlier record still in this batch (a
                            # rotation, say) must fold before them.
                            more = reader.poll(TAKE_MID_BATCH - taken, 0.0)
                            if more:
                                taken += len(more)
                                records.extend(more)
                                folded += await self._fold_first(generation, self.first(records[at:]))
                                if generation != self.owned.generation:
                                    break
                        yielded = time.monotonic()
                        slice_ends = yielded + FOLD_SLICE_S
                    if self.owned.fresh(r.topic, r.partition, r.offset):
                        with self.owned.folding(r.topic, r.partition, r.offset):
                            self.fold(r)
                        folded += 1
                        if (self.answers_due is not None and self.answers_due()
                                and time.monotonic() - yielded >= ANSWER_EVERY_S):
                            for _ in range(ANSWER_TURNS):  # a waiting reader first, then the rest
                                await asyncio.sleep(0)
                            if generation != self.owned.generation:
                                break
                            yielded = time.monotonic()
                            slice_ends = yielded + FOLD_SLICE_S
                    else:
                        self.owned.passed(r.topic, r.partition, r.offset)  # if `_fold_first` folded it
                if generation != self.owned.generation:
                    break
                self._settle(generation, partitions, reader.pending)
                metrics.FOLDED.inc(folded - before)
                if reader.lag is not None:
                    metrics.BOARD.measured({tp: metrics.PartitionLag(lag.behind, lag.newest_ms)
                                            for tp, lag in reader.lag.items() if tp[1] in owned},
                                           {p for p in owned if not any((t, p) in reader.pending for t in self.topics)})
                    reader.lag = None
                if self.fold_group is not None and time.monotonic() >= next_record:
                    next_record = time.monotonic() + FOLD_RECORD_EVERY_S
                    positions = {(t, p): o for p in owned for t in self.topics
                                 if (o := self.owned.next_offset(t, p)) is not None}
                    await loop.run_in_executor(None, reader.commit_positions, positions)
        finally:
            await loop.run_in_executor(None, reader.close)

    async def _fold_first(self, generation: int, first: list[Record]) -> int:
        """Fold `first` ahead of the rest of its batch (`owned.folding_ahead`), then give the
        polls it woke their turns; the count folded."""
        folded = 0
        for r in first:
            if self.owned.fresh(r.topic, r.partition, r.offset):
                with self.owned.folding_ahead(r.topic, r.partition, r.offset):
                    self.fold(r)
                folded += 1
        if folded and self.answers_due is not None and self.answers_due():
            for _ in range(ANSWER_TURNS):
                await asyncio.sleep(0)
                if generation != self.owned.generation:
                    break
        return folded

    def _settle(self, generation: int, partitions: list[int], pending: set[TopicPartitionKey]) -> None:
        for p in partitions:
            if not any((t, p) in pending for t in self.topics):
                self.owned.caught_up(p, generation)
