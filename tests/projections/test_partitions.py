"""Projection state per partition: fold scope, the stored position, serving, and reads across a rebalance."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from waiting import let_time_pass

from watchtower.projections.partitions import OwnedPartitions, standing_in
from watchtower.protocol.errors import NotReadyError, StreamNotFoundError

EV, MSG = "t.events", "t.messages"


def _owned(*partitions: int) -> OwnedPartitions:
    owned = OwnedPartitions(("streams", "registry"))
    generation = owned.assign(partitions)
    for p in partitions:
        owned.caught_up(p, generation)
    return owned


def test_a_fold_sees_and_changes_only_its_own_partition() -> None:
    owned = _owned(0, 1)
    streams = owned.table("streams")
    with owned.folding(EV, 0, 5):
        streams["a"] = {"n": 1}
        assert "b" not in streams
    with owned.folding(EV, 1, 7):
        streams["b"] = {"n": 2}
        assert "a" not in streams  # as if partition 1 were alone: the offline rebuild's view
        assert list(streams) == ["b"]
    assert dict(streams.items()) == {"a": {"n": 1}, "b": {"n": 2}}  # a read sees every serving partition


def test_tables_change_only_inside_a_fold() -> None:
    streams = _owned(0).table("streams")
    with pytest.raises(RuntimeError, match="inside a fold"):
        streams["a"] = 1


def test_the_position_is_stored_with_the_state_and_a_redelivery_is_not_fresh() -> None:
    owned = _owned(3)
    assert owned.next_offset(EV, 3) is None  # nothing folded: read from the beginning
    with pytest.raises(ValueError, match="poison"), owned.folding(EV, 3, 41):
        raise ValueError("poison")  # a record the fold rejects still counts as folded
    with owned.folding(MSG, 3, 9):
        pass
    assert (owned.next_offset(EV, 3), owned.next_offset(MSG, 3)) == (42, 10)
    assert not owned.fresh(EV, 3, 41)
    assert owned.fresh(EV, 3, 42)
    assert owned.fresh(MSG, 3, 10)
    assert not owned.fresh(EV, 4, 0)  # not owned


def test_a_partition_kept_across_a_rebalance_keeps_its_state_and_a_lost_one_is_dropped() -> None:
    owned = _owned(0, 1)
    streams = owned.table("streams")
    for p, key in ((0, "a"), (1, "b")):
        with owned.folding(EV, p, 3):
            streams[key] = p
    before = owned.generation
    assert owned.revoke() == before
    assert owned.serves(0)
    assert owned.serves(1)
    assert dict(streams.items()) == {"a": 0, "b": 1}
    generation = owned.assign([0, 2])
    assert generation != before
    assert owned.next_offset(EV, 0) == 4
    assert owned.next_offset(EV, 1) is None
    assert owned.serves(0)  # kept: it never stopped serving
    assert not owned.serves(1)
    assert not owned.serves(2)
    assert not owned.caught_up(0, generation)  # already serving
    assert dict(streams.items()) == {"a": 0}
    assert owned.health() == {"partitions": [0, 2], "catching_up": [2], "recovered": False,
                              "caught_up_in_s": None, "standby": [], "standby_catching_up": []}
    owned.caught_up(2, generation)
    health = owned.health()
    assert health["recovered"]
    assert isinstance(health["caught_up_in_s"], float)


def test_a_catch_up_of_an_older_generation_never_serves() -> None:
    owned = OwnedPartitions(("streams",))
    old = owned.assign([0])
    owned.revoke()
    owned.assign([1])
    owned.assign([0])  # moved away and back: state from scratch, a new catch-up
    assert not owned.caught_up(0, old)
    assert not owned.serves(0)


def test_a_rebalance_that_leaves_the_partitions_as_they_were_changes_nothing() -> None:
    owned = _owned(0, 1)
    generation = owned.generation
    epoch = owned.serving_epoch(0)
    owned.revoke()
    assert owned.assign([1, 0]) == generation  # the same generation: the running catch-up goes on
    assert owned.serving_epoch(0) == epoch
    assert owned.serves(1)
    assert owned.health()["recovered"]


def test_the_live_fold_waits_for_the_catch_up_and_skips_what_is_folded_or_foreign() -> None:
    async def scenario() -> list[object]:
        owned = OwnedPartitions(("streams",))
        waiting = asyncio.ensure_future(owned.admit(EV, 1, 5))  # delivered before any assignment
        await asyncio.sleep(0.01)
        assert not waiting.done()
        generation = owned.assign([1])
        await asyncio.sleep(0.01)
        assert not waiting.done()  # still catching up
        with owned.folding(EV, 1, 6):  # the catch-up folds past the waiting record
            pass
        owned.caught_up(1, generation)
        return [await waiting, await owned.admit(EV, 1, 7), await owned.admit(EV, 2, 0)]

    assert asyncio.run(scenario()) == [False, True, False]


def test_a_read_answers_not_ready_unless_its_partition_served_from_start_to_end() -> None:
    async def read(owned: OwnedPartitions, during: object = None, error: Exception | None = None) -> str:
        async with owned.reading(0):
            if callable(during):
                during()
            if error is not None:
                raise error
            return "answer"

    async def scenario() -> None:
        owned = _owned(0)
        assert await read(owned) == "answer"
        with pytest.raises(StreamNotFoundError):
            await read(owned, error=StreamNotFoundError("no such stream"))
        assert await read(owned, during=owned.revoke) == "answer"  # a rebalance began: still ours
        with pytest.raises(NotReadyError):  # the partition moved away mid-read
            await read(owned, during=lambda: owned.assign([1]))
        with pytest.raises(NotReadyError):  # not serving when the read starts
            await read(owned)
        generation = owned.assign([0])
        owned.caught_up(0, generation)

        def rebuilt() -> None:  # lost and won back mid-read: the state was rebuilt under the read
            owned.assign([1])
            owned.assign([0])
            owned.caught_up(0, owned.generation)
        with pytest.raises(NotReadyError):
            await read(owned, during=rebuilt, error=StreamNotFoundError("stale"))

    asyncio.run(scenario())


def test_a_standby_partition_is_folded_and_read_only_when_standing_in_for_its_owner() -> None:
    async def scenario() -> None:
        owned = OwnedPartitions(("streams",))
        generation = owned.assign([0], standby=[1])
        streams = owned.table("streams")
        for p, key in ((0, "mine"), (1, "theirs")):
            with owned.folding(EV, p, 0):
                streams[key] = p
        owned.caught_up(0, generation)
        assert not owned.stands_by(1)  # still folding the log
        owned.caught_up(1, generation)
        assert owned.serves(0)
        assert not owned.serves(1)
        assert owned.stands_by(1)
        assert dict(streams.items()) == {"mine": 0}  # a standby is no part of this worker's own reads
        assert owned.health()["standby"] == [1]
        assert owned.health()["recovered"]
        with pytest.raises(NotReadyError):  # not asked to stand in: only the owner answers
            async with owned.reading(1):
                pass
        with standing_in():
            async with owned.reading(1):
                assert dict(streams.items()) == {"theirs": 1}  # that partition alone
            async with owned.reading(0):  # its own partition reads as ever
                assert dict(streams.items()) == {"mine": 0}
        # The owner left for good: the standby is promoted, keeps its state and serves at once.
        owned.assign([0, 1])
        assert owned.serves(1)
        assert dict(streams.items()) == {"mine": 0, "theirs": 1}
        # The partition moves back to its owner: this worker keeps it as its standby.
        owned.assign([0], standby=[1])
        assert owned.stands_by(1)
        assert not owned.serves(1)

    asyncio.run(scenario())


def one_batch_reader(batch: list[Any]) -> type:
    """A stand-in for the catch-up's `PartitionReader` that hands over `batch`, then nothing."""

    class OneBatch:
        def __init__(self, *_: object, **__: object) -> None:
            self.pending: set[tuple[str, int]] = set()
            self.lag = None
            self.batches = [batch]

        def poll(self) -> list[Any]:
            return self.batches.pop() if self.batches else []

        def close(self) -> None: ...

    return OneBatch


def test_a_long_fold_hands_the_event_loop_back_between_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch whose fold outlasts `FOLD_SLICE_S` lets other tasks (reads, health) run inside it."""

    from watchtower.projections import catch_up
    from watchtower.topics.records import Record

    topics = ("t.events", "t.messages", "t.replay")
    batch = [Record("t.events", 0, i, b"k", b"v", (), 0) for i in range(40)]

    monkeypatch.setattr(catch_up, "PartitionReader", one_batch_reader(batch))
    order: list[str] = []

    def fold(record: Record) -> None:
        let_time_pass(0.005, "a fold costs about what a record's verify costs on a busy host")
        order.append(f"fold {record.offset}")

    async def main() -> None:
        owned = OwnedPartitions(("streams",))
        runner = catch_up.CatchUp("127.0.0.1:1", topics, owned, fold)
        runner.assign({(t, 0) for t in topics})

        async def other_task() -> None:
            while len([o for o in order if o.startswith("fold")]) < len(batch):
                order.append("other")
                await asyncio.sleep(0)

        await asyncio.wait_for(other_task(), 30)
        owned.assign([])  # a new generation stops the fold

    asyncio.run(main())
    folds = [i for i, o in enumerate(order) if o.startswith("fold")]
    assert len(folds) == len(batch)
    assert "other" in order[folds[0]:folds[-1]], "nothing else ran while the batch was folded"


def test_a_long_poll_woken_by_the_fold_is_answered_before_the_rest_of_the_batch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader waiting on one stream is not kept waiting while a burst of other streams' records,
    fetched in the same batch, is folded (the slice alone would let it wait up to `FOLD_SLICE_S`)."""

    from watchtower.projections import catch_up
    from watchtower.projections.longpoll import HeadWaiters
    from watchtower.topics.records import Record

    topics = ("t.events", "t.messages", "t.replay")
    batch = [Record("t.messages", 0, i, b"k", b"v", (), 0) for i in range(40)]

    monkeypatch.setattr(catch_up, "PartitionReader", one_batch_reader(batch))
    monkeypatch.setattr(catch_up, "FOLD_SLICE_S", 3600.0)  # no slice ends inside the batch
    order: list[str] = []
    waiters = HeadWaiters()
    head = {"watched": 0}

    def fold(record: Record) -> None:
        let_time_pass(catch_up.ANSWER_EVERY_S, "folding takes time: the hand-over waits for some")
        order.append(f"fold {record.offset}")
        if record.offset == 5:  # the watched stream's message, amid the burst
            head["watched"] = 1
            waiters.wake("watched", 1)
        else:
            waiters.wake("unwatched", record.offset)  # nobody waits there: no answer due

    async def main() -> None:
        owned = OwnedPartitions(("streams",))
        runner = catch_up.CatchUp("127.0.0.1:1", topics, owned, fold, answers_due=lambda: waiters.answers_due)

        async def reader() -> None:
            await waiters.wait("watched", 1, 30_000, lambda: head["watched"])
            order.append("answered")

        polling = asyncio.ensure_future(reader())
        await asyncio.sleep(0)  # the poll is parked
        runner.assign({(t, 0) for t in topics})
        await asyncio.wait_for(polling, 30)
        while len(order) < len(batch) + 1:
            await asyncio.sleep(0.01)
        owned.assign([])  # a new generation stops the fold

    asyncio.run(main())
    assert order.index("answered") == order.index("fold 5") + 1, order[:10]
    assert order.count("answered") == 1
    assert len(order) == len(batch) + 1
