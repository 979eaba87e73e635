"""Projection state split by events partition, each part stored with the log position it has folded.

A projection worker owns some partitions of the co-partitioned ``events`` and ``messages``
topics. For each one it keeps that partition's share of every table, plus the offset of the last
record it folded from each of the two topics (the position is stored with the state, so a record
delivered twice — after a rebalance or an uncommitted consumer offset — is folded once, whatever
the fold does with it).

A partition *serves* reads only once it has folded the committed log up to the end it saw at
assignment (see `catch_up`); until then reads of its keys answer NOT_READY. A rebalance does not
stop the partitions that stay with this worker: they keep serving while the group agrees on the
next assignment and after it (their state is a fold of the log, which no other worker can serve
sooner: a new owner first folds the log to its end). Only a partition that moves away stops
serving (when the new assignment arrives), and one that arrives serves once it has caught up. A
read checks its partition serves before it starts and still serves, in the same epoch, when it ends
(`reading`), so a read that overlapped a move — a long poll, a log scan — is never answered from
state that stopped being this worker's, or that was rebuilt, in the middle.

A worker may also hold *standby* partitions (the group's assignor names, for each partition, a
standby worker besides its owner): it folds them exactly as its own, but answers reads of them only
when asked to stand in for their owner (`standing_in`: the owner cannot be reached, or answers
NOT_READY), so a worker that restarts, or a partition whose owner is still folding it, is read from
the standby meanwhile. A standby that becomes the owner (the assignor promotes standbys first) keeps
its state and serves at once; an owner whose partition moves to the worker it was standby for
keeps it as that partition's standby.

Tables are `PartitionTable` mappings. Inside a fold (`folding`) they see and change exactly the
partition being folded, as if it were the only one; outside (HTTP reads) they see every serving
partition, read-only. Which partition is being folded is a context variable, so an HTTP handler
running between two folds, or a log scan in a worker thread, never sees the fold's scope.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import AsyncIterator, Iterable, Iterator, MutableMapping
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from watchtower.protocol.errors import NotReadyError

_FOLDING: ContextVar[int | None] = ContextVar("watchtower_folding_partition", default=None)
_STANDING_IN: ContextVar[bool] = ContextVar("watchtower_standing_in", default=False)
_READING_STANDBY: ContextVar[int | None] = ContextVar("watchtower_reading_standby", default=None)


@contextmanager
def _scoped_to(partition: int) -> Iterator[None]:
    """The tables see and change only `partition` inside (`PartitionTable`)."""
    token = _FOLDING.set(partition)
    try:
        yield
    finally:
        _FOLDING.reset(token)


@dataclass
class PartitionState:
    """One events partition's share of every table and the offsets folded into it."""

    tables: dict[str, dict[str, Any]]
    applied: dict[str, int] = field(default_factory=dict)  # topic -> offset of the last folded record
    # topic -> offsets past `applied` already folded out of log order (`OwnedPartitions.folding_ahead`),
    # as a set (is one of them?) and a heap (which are passed?: a stream's burst can put thousands here)
    ahead: dict[str, set[int]] = field(default_factory=dict)
    ahead_heap: dict[str, list[int]] = field(default_factory=dict)
    serving: bool = False
    epoch: int = 0  # changes every time the partition starts serving
    standby: bool = False  # folded here, but owned by another worker


class OwnedPartitions:
    """The partitions this worker owns, their state, and whether each serves reads yet.

    Driven by the consumer's rebalances: `revoke` when a rebalance starts, `assign` with the new
    assignment, `caught_up` when a partition has folded the log to its end. The live fold asks
    `admit` before each record and folds it inside `folding`. A rebalance stops nothing by itself:
    `assign` stops exactly the partitions that left (see the module docstring).
    """

    def __init__(self, table_names: Iterable[str]) -> None:
        self.table_names = tuple(table_names)
        self.generation = 0  # one per rebalance; work for an older generation is abandoned
        self.assigned: frozenset[int] | None = None  # None before the first assignment
        self.standby: frozenset[int] = frozenset()  # the standby partitions (never among `assigned`)
        self._parts: dict[int, PartitionState] = {}
        self._epochs = 0
        self._changed = asyncio.Event()
        self._assigned_at = 0.0
        self.caught_up_in_s: float | None = None  # from the latest assignment to every partition serving

    def table(self, name: str) -> PartitionTable:
        """The mapping through which folds and reads use table `name`."""
        if name not in self.table_names:
            raise KeyError(f"no projection table named {name!r}")
        return PartitionTable(self, name)

    # ------------------------------------------------------------------ rebalances
    def revoke(self) -> int:
        """A rebalance started; returns the current generation.

        Every partition held goes on serving and folding: the consumer protocol revokes all of them
        at the start of every rebalance, but a partition that stays is served by no one else, and
        one that moves is served by its new owner only once that owner has folded the log to its
        end. `assign` stops the partitions that left.
        """
        return self.generation

    def assign(self, partitions: Iterable[int], standby: Iterable[int] = ()) -> int:
        """The new assignment (owned and standby partitions); returns its generation. State of
        partitions neither owned nor standby here any more is dropped.

        The same partitions as before keep the generation (their catch-up and live fold go on). A
        change starts a new generation: a partition kept (as owner or standby, either way) keeps its
        state, its position and its serving, so its reads never stop (catching up then only folds
        what was committed since); a partition new here serves once it has caught up.
        """
        owned = frozenset(partitions)
        standbys = frozenset(standby) - owned
        if owned == self.assigned and standbys == self.standby:
            return self.generation
        self.generation += 1
        for p in set(self._parts) - owned - standbys:
            del self._parts[p]
        for p in owned | standbys:
            state = self._parts.setdefault(p, PartitionState({name: {} for name in self.table_names}))
            state.standby = p in standbys
        self.assigned, self.standby = owned, standbys
        self._assigned_at = time.monotonic()
        self.caught_up_in_s = 0.0 if self.ready() else None
        self._notify()
        return self.generation

    def caught_up(self, partition: int, generation: int) -> bool:
        """Partition `partition` has folded the log up to its end: it serves, if still ours."""
        state = self._parts.get(partition)
        if generation != self.generation or state is None or state.serving:
            return False
        self._epochs += 1
        state.serving, state.epoch = True, self._epochs
        if self.caught_up_in_s is None and self.ready():  # a standby catching up later changes nothing
            self.caught_up_in_s = round(time.monotonic() - self._assigned_at, 3)
        self._notify()
        return True

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # ------------------------------------------------------------------ folding
    def next_offset(self, topic: str, partition: int) -> int | None:
        """The offset after the last one folded from `topic[partition]` (None: from the beginning)."""
        state = self._parts.get(partition)
        last = None if state is None else state.applied.get(topic)
        return None if last is None else last + 1

    def fresh(self, topic: str, partition: int, offset: int) -> bool:
        """True if `topic[partition]@offset` is owned here and not folded yet."""
        state = self._parts.get(partition)
        return (state is not None and offset > state.applied.get(topic, -1)
                and offset not in state.ahead.get(topic, ()))

    async def admit(self, topic: str, partition: int, offset: int) -> bool:
        """Wait until the record's partition serves here; True if the live fold should fold it.

        False for a record of a partition this worker does not own (a leftover of the previous
        assignment) and for one already folded (a redelivery, or one the catch-up folded).
        """
        while True:
            changed = self._changed
            if self.assigned is not None:
                if partition not in self.assigned:
                    return False
                if self._parts[partition].serving:
                    return self.fresh(topic, partition, offset)
            await changed.wait()

    @contextmanager
    def folding(self, topic: str, partition: int, offset: int) -> Iterator[None]:
        """Scope the tables to `partition` while folding one record, and record its offset after.

        The offset is recorded even when the fold raises: a record that cannot be folded is
        skipped for good, never retried on every redelivery.
        """
        state = self._parts[partition]
        try:
            with _scoped_to(partition):
                yield
        finally:
            self._passed(state, topic, offset)

    @contextmanager
    def folding_ahead(self, topic: str, partition: int, offset: int) -> Iterator[None]:
        """Like `folding`, for a record folded before records that precede it in its partition.

        Its offset is kept apart: `next_offset` stays the position the log is folded to in order,
        so a reader that starts over (a rebalance that keeps the partition here) reads the records
        before it again, and `fresh` refuses it there; `passed` then moves the position over it.
        """
        state = self._parts[partition]
        try:
            with _scoped_to(partition):
                yield
        finally:
            ahead = state.ahead.setdefault(topic, set())
            if offset > state.applied.get(topic, -1) and offset not in ahead:
                ahead.add(offset)
                heapq.heappush(state.ahead_heap.setdefault(topic, []), offset)

    def passed(self, topic: str, partition: int, offset: int) -> bool:
        """The in-order fold reached `topic[partition]@offset`, which was folded ahead: move the
        position over it. False if it was not folded ahead (or the partition is not owned here)."""
        state = self._parts.get(partition)
        if state is None or offset not in state.ahead.get(topic, ()):
            return False
        self._passed(state, topic, offset)
        return True

    @staticmethod
    def _passed(state: PartitionState, topic: str, offset: int) -> None:
        state.applied[topic] = applied = max(offset, state.applied.get(topic, -1))
        heap = state.ahead_heap.get(topic)
        while heap and heap[0] <= applied:
            state.ahead[topic].discard(heapq.heappop(heap))

    # ------------------------------------------------------------------ reads
    def serving_epoch(self, partition: int, *, standby: bool = False) -> int | None:
        """The partition's current serving epoch, or None when it does not serve reads here (with
        `standby`: when it is not a caught-up standby here)."""
        state = self._parts.get(partition)
        if self.assigned is None or state is None or not state.serving or state.standby != standby:
            return None
        return state.epoch

    def serves(self, partition: int) -> bool:
        """True if reads of `partition` are answered here now (as its owner)."""
        return self.serving_epoch(partition) is not None

    def stands_by(self, partition: int) -> bool:
        """True if `partition` is a standby here that has caught up: it can stand in for its owner."""
        return self.serving_epoch(partition, standby=True) is not None

    @asynccontextmanager
    async def reading(self, partition: int) -> AsyncIterator[None]:
        """Run a read of `partition`'s state; NOT_READY unless it served here from start to end.

        Whatever the read answered (a result or an error such as STREAM_NOT_FOUND) is replaced by
        NOT_READY when the partition stopped serving, or served anew, while the read ran. Inside
        `standing_in`, a caught-up standby partition serves too, and the read sees that partition only.
        """
        standby = _STANDING_IN.get() and not self.serves(partition)
        epoch = self.serving_epoch(partition, standby=standby)
        if epoch is None:
            raise NotReadyError(_NOT_READY)
        token = _READING_STANDBY.set(partition if standby else None)
        try:
            yield
        finally:
            _READING_STANDBY.reset(token)
            if self._epoch_held(partition) != epoch:
                raise NotReadyError(_NOT_READY)

    def _epoch_held(self, partition: int) -> int | None:
        """The partition's serving epoch here, as owner or standby (a promotion keeps the state)."""
        state = self._parts.get(partition)
        return None if state is None or not state.serving else state.epoch

    def ready(self) -> bool:
        """True once an assignment has arrived and every partition it owns serves (standbys aside)."""
        if self.assigned is None:
            return False
        return all(self._parts[p].serving for p in self.assigned)

    def health(self) -> dict[str, Any]:
        """This worker's part of ``/v1/health``.

        ``partitions``: the events partitions assigned to it (its share; the workers' shares are
        disjoint and cover every partition once the group is stable); ``catching_up``: those of
        them still folding the log, whose reads answer NOT_READY; ``recovered``: none is;
        ``caught_up_in_s``: how long the latest assignment took to serve (null until it does);
        ``standby``: the standby partitions it folds too, to stand in for their owners, and
        ``standby_catching_up`` those of them that cannot yet.
        """
        assigned = sorted(self.assigned or ())
        catching_up = [p for p in assigned if not self._parts[p].serving]
        standby = sorted(self.standby)
        return {"partitions": assigned, "catching_up": catching_up, "recovered": self.ready(),
                "caught_up_in_s": self.caught_up_in_s, "standby": standby,
                "standby_catching_up": [p for p in standby if not self._parts[p].serving]}

    def _scope(self) -> list[dict[str, Any]] | None:
        """Partition states a table access sees: the one being folded, or every serving one."""
        folding = _FOLDING.get()
        if folding is not None:
            return None
        standby = _READING_STANDBY.get()
        if standby is not None:  # a read standing in for the owner of this one partition
            state = self._parts.get(standby)
            return [state.tables] if state is not None and state.serving else []
        # list() copies in one step, so a scan in a worker thread never sees the dict resize.
        return [s.tables for s in list(self._parts.values()) if s.serving and not s.standby]

    def _folding_tables(self) -> dict[str, dict[str, Any]]:
        partition = _FOLDING.get()
        if partition is None:
            raise RuntimeError("projection tables change only inside a fold (OwnedPartitions.folding)")
        return self._parts[partition].tables


_NOT_READY = ("This worker does not serve the partition of this key right now (a rebalance is moving it, "
              "or the worker is still folding the log for it); retry in a moment.")


class PartitionTable(MutableMapping[str, Any]):
    """One projection table across the owned partitions (see the module docstring for the scopes)."""

    def __init__(self, owner: OwnedPartitions, name: str) -> None:
        self._owner = owner
        self.name = name

    def _parts(self) -> list[dict[str, Any]]:
        scope = self._owner._scope()
        if scope is None:
            return [self._owner._folding_tables()[self.name]]
        return [tables[self.name] for tables in scope]

    def __getitem__(self, key: str) -> Any:
        for part in self._parts():
            if key in part:
                return part[key]
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return any(key in part for part in self._parts())

    def __setitem__(self, key: str, value: Any) -> None:
        self._owner._folding_tables()[self.name][key] = value

    def __delitem__(self, key: str) -> None:
        del self._owner._folding_tables()[self.name][key]

    def __iter__(self) -> Iterator[str]:
        for part in self._parts():
            yield from list(part)

    def __len__(self) -> int:
        return sum(len(part) for part in self._parts())


@contextmanager
def standing_in() -> Iterator[None]:
    """Within it, `OwnedPartitions.reading` also serves a caught-up standby partition: the read
    stands in for the partition's owner, which could not answer it."""
    token = _STANDING_IN.set(True)
    try:
        yield
    finally:
        _STANDING_IN.reset(token)
