"""A stream a reader waits on has its publishes folded first, and the tables end exactly as the
in-order fold leaves them.

The catch-up runs here against a stand-in for its `PartitionReader` that serves a genuine log of
one partition (three streams written with the writer's own `decide`, one of them with a key
rotation and forged records) in batches of any size; the fold is the real `Folder`.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import nacl.signing
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from recording_folder import RecordingFolder
from waiting import let_time_pass

from watchtower.projections import catch_up, quarantine
from watchtower.projections.fold import publishes_first
from watchtower.projections.longpoll import HeadWaiters
from watchtower.projections.partitions import OwnedPartitions
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.signing import sign_message
from watchtower.protocol.stream.actor import StreamState, decide, evolve
from watchtower.protocol.stream.views import TABLE_NAMES, views_digest
from watchtower.schemas.records import encode_message
from watchtower.schemas.wire import encode_event
from watchtower.topics.records import Record

EV, MSG, REPLAY = "t.events", "t.messages", "t.replay"
TOPICS = (EV, MSG, REPLAY)
OWNER = nacl.signing.SigningKey(b"\x01" * 32)
KEYS = [nacl.signing.SigningKey(bytes([0x20 + i]) * 32) for i in range(2)]
STRANGER = nacl.signing.SigningKey(b"\x07" * 32)
STREAMS = ("rotating", "steady", "quiet")


def _stream(sid: str, publishes: int, rotate_at: int | None) -> list[tuple[str, bytes]]:
    """(topic, value) records of one stream in the order the writer commits them."""
    state, nonce, out = StreamState.initial(sid), 0, []

    def run(method: str, body: dict[str, Any]) -> None:
        nonlocal state, nonce
        nonce += 1
        decision = decide(state, sign_command(OWNER, method, sid, nonce, body), block_height=5)
        for event in decision.events:
            state = evolve(state, event)
            out.append((EV, encode_event(event)))
        out.extend((MSG, encode_message(m)) for m in decision.messages)

    run("create_stream", {"publisher_key_hex": bytes(KEYS[0].verify_key).hex()})
    for seq in range(1, publishes + 1):
        rotated = rotate_at is not None and seq >= rotate_at
        if seq == rotate_at:
            run("rotate_publisher_key", {"new_key": bytes(KEYS[1].verify_key)})
        message = sign_message(stream_id=sid, sequence=seq, timestamp_unix_ms=seq, kind="t", payload=b"{}",
                               signing_key=KEYS[rotated], signing_key_id=1 + rotated)
        run("publish", message.to_json_dict())
        if 2 <= seq < publishes:  # a stranger's copy of the next sequence, to be refused
            forged = sign_message(stream_id=sid, sequence=seq + 1, timestamp_unix_ms=seq + 1, kind="t",
                                  payload=b"{}", signing_key=STRANGER)
            out.append((MSG, encode_message(forged)))
        if seq == 2:  # and garbage
            out.append((EV, b"\x00not an event"))
    return out


def _partition_log() -> list[Record]:
    """One partition's events and messages, the three streams' records interleaved as their
    commits would interleave them, with offsets per topic."""
    streams = {"rotating": _stream("rotating", 6, rotate_at=4), "steady": _stream("steady", 8, None),
               "quiet": _stream("quiet", 3, None)}
    records, offsets = [], {EV: 0, MSG: 0}
    while any(streams.values()):
        for sid in STREAMS:
            for _ in range(2):
                if streams[sid]:
                    topic, value = streams[sid].pop(0)
                    records.append(Record(topic, 0, offsets[topic], sid.encode(), value, (), 0))
                    offsets[topic] += 1
    return records


LOG = _partition_log()


Starts = dict[tuple[str, int], int | None]


def _batched_reader(log: list[Record], sizes: list[int], opened: list[Starts] | None = None) -> type:
    """A stand-in for `PartitionReader`: serves `log` from the offsets it is opened at, in batches
    of `sizes` (cycled), then nothing; each opening's offsets go to `opened`."""

    class Batched:
        def __init__(self, _bootstrap: str, starts: Starts, *_: object, **__: object) -> None:
            if opened is not None:
                opened.append(dict(starts))
            self.pending: set[tuple[str, int]] = set()
            self.lag = None
            self.left = [r for r in log if r.offset >= (starts.get((r.topic, r.partition)) or 0)]
            self.turn = 0

        def poll(self, max_records: int = 2000, _timeout_s: float = 0.2) -> list[Record]:
            size = min(sizes[self.turn % len(sizes)], max_records)
            self.turn += 1
            batch, self.left = self.left[:size], self.left[size:]
            return batch

        def close(self) -> None: ...

    return Batched


Refusals = tuple[list[tuple[str, int, str]], dict[str, Any]]


def _fold_all(monkeypatch: pytest.MonkeyPatch, sizes: list[int], waited: frozenset[str],
              restart_at_batch: int | None, opened: list[Starts] | None = None, slice_s: float = 0.0,
              ) -> tuple[str, Refusals, dict[tuple[str, int], int], int]:
    """Fold `LOG` through a live catch-up; returns (the tables' digest, every quarantine decision
    sorted, how often each record was folded, how many records were picked to go first)."""
    tables: dict[str, dict[str, Any]] = {name: {} for name in TABLE_NAMES}
    folder = RecordingFolder(tables, {}, t_events=EV, t_messages=MSG, partitions=1)
    folds: dict[tuple[str, int], int] = {}
    monkeypatch.setattr(catch_up, "PartitionReader", _batched_reader(LOG, sizes, opened))
    # By default every record ends a slice: at each, what was committed since the batch was fetched
    # joins it, and the waited publishes among it fold first.
    monkeypatch.setattr(catch_up, "FOLD_SLICE_S", slice_s)
    owned = OwnedPartitions(("streams",))
    batches = picks = 0

    def fold(r: Record) -> None:
        folds[(r.topic, r.offset)] = folds.get((r.topic, r.offset), 0) + 1
        (folder.fold_event if r.topic == EV else folder.fold_message)(r.partition, r.offset, r.key, r.value)

    def first(records: list[Record]) -> list[Record]:
        nonlocal batches, picks
        batches += 1
        picked = publishes_first(records, {s.encode() for s in waited}, t_events=EV, t_messages=MSG)
        picks += len(picked)
        if batches == restart_at_batch:
            # A rebalance that keeps partition 0 here lands right after the records picked to go
            # first are folded: the next reader starts from the in-order position.
            asyncio.get_running_loop().call_soon(runner.assign, {(t, p) for t in TOPICS for p in (0, 1)})
        return picked

    runner = catch_up.CatchUp("127.0.0.1:1", TOPICS, owned, fold, answers_due=lambda: True, first=first,
                              waiting=lambda: bool(waited))

    async def main() -> None:
        runner.assign({(t, 0) for t in TOPICS})
        while (owned.next_offset(EV, 0), owned.next_offset(MSG, 0)) != _ends():
            await asyncio.sleep(0.001)
        owned.assign([])  # a new generation stops the fold

    asyncio.run(asyncio.wait_for(main(), 10))
    digest = views_digest({k: v.items() for k, v in tables.items()})
    return digest, _refusals(folder), folds, picks


def _ends() -> tuple[int, int]:
    return (sum(r.topic == EV for r in LOG), sum(r.topic == MSG for r in LOG))


def _in_order() -> tuple[str, Refusals]:
    tables: dict[str, dict[str, Any]] = {name: {} for name in TABLE_NAMES}
    folder = RecordingFolder(tables, {}, t_events=EV, t_messages=MSG, partitions=1)
    for r in LOG:
        (folder.fold_event if r.topic == EV else folder.fold_message)(r.partition, r.offset, r.key, r.value)
    return views_digest({k: v.items() for k, v in tables.items()}), _refusals(folder)


def _refusals(folder: RecordingFolder) -> Refusals:
    """Every quarantine decision, and the quarantine's summary as health reports it (its last few
    per partition: more than `quarantine.RECENT` are refused here, so their order counts)."""
    return sorted(folder.decisions), quarantine.summary(folder.refused.items())


IN_ORDER = _in_order()


def test_the_log_refuses_what_it_should_and_publishes_every_stream() -> None:
    _digest, (decisions, summary) = IN_ORDER
    # The stranger's copies (4 + 6 + 1) and one garbage event per stream: more messages refused in
    # one partition than the quarantine's summary keeps, so the order they are decided in counts.
    assert sorted(Counter(d[0] for d in decisions).items()) == [(EV, 3), (MSG, 11)], decisions
    assert summary["count"] == 14


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(1, 40), min_size=1, max_size=6),
       waited=st.frozensets(st.sampled_from(STREAMS)),
       restart_at_batch=st.one_of(st.none(), st.integers(1, 6)))
def test_folding_a_waited_streams_publishes_first_leaves_the_tables_as_the_in_order_fold(
        sizes: list[int], waited: frozenset[str], restart_at_batch: int | None) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        digest, decisions, folds, _picks = _fold_all(monkeypatch, sizes, waited, restart_at_batch)
    assert (digest, decisions) == IN_ORDER
    assert set(folds) == {(r.topic, r.offset) for r in LOG}
    assert set(folds.values()) == {1}, "a record was folded twice"


@pytest.mark.parametrize(("sizes", "slice_s"), [([1], 0.0), ([3], 3600.0)])
def test_refusals_decided_ahead_leave_the_quarantine_as_the_in_order_fold(
        monkeypatch: pytest.MonkeyPatch, sizes: list[int], slice_s: float) -> None:
    """"rotating"'s forged copies are refused ahead of other streams' records before them: the
    quarantine's summary (its highest offsets) still ends as the in-order fold's."""
    digest, refusals, folds, picks = _fold_all(monkeypatch, sizes, frozenset({"rotating"}), None, slice_s=slice_s)
    assert picks > 0
    assert (digest, refusals) == IN_ORDER
    assert set(folds.values()) == {1}


def test_a_rebalance_after_the_first_records_rereads_from_the_in_order_position(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The first batch holds the streams' creations and first publish events (nothing goes first
    # there); the second, all the rest, "quiet"'s messages among it, and the rebalance lands right
    # after those are folded. No slice ends inside a batch, so nothing joins one mid-fold.
    opened: list[Starts] = []
    digest, decisions, folds, picks = _fold_all(monkeypatch, [6, len(LOG)], frozenset({"quiet"}),
                                                restart_at_batch=2, opened=opened, slice_s=3600.0)
    assert picks > 0
    assert (digest, decisions) == IN_ORDER
    assert set(folds.values()) == {1}
    assert len(opened) == 2
    # The second reader started where the in-order fold stood (no messages record folded in order
    # yet), not past the records folded first.
    assert opened[1][(MSG, 0)] in (None, 0)
    assert opened[1][(EV, 0)] == 6


def _rec(topic: str, offset: int, key: bytes | None, value: bytes | None) -> Record:
    return Record(topic, 0, offset, key, value, (), 0)


def test_only_a_waited_streams_publishes_go_first_and_only_up_to_its_first_other_record() -> None:
    by_stream: dict[bytes | None, list[Record]] = {}
    for r in LOG:
        by_stream.setdefault(r.key, []).append(r)
    # A batch that opens with the streams' creations: a creation is not a publish, so nothing of
    # a stream goes first once it has been met.
    assert publishes_first(LOG, {b"rotating", b"steady"}, t_events=EV, t_messages=MSG) == []
    # A later batch, past the creations: "steady"'s publishes go first up to its garbage event.
    creations = {stream[0] for stream in by_stream.values()}
    later = [r for r in LOG if r not in creations]
    picked = publishes_first(later, {b"steady"}, t_events=EV, t_messages=MSG)
    steady = by_stream[b"steady"]
    garbage = next(i for i, r in enumerate(steady) if r.value == b"\x00not an event")
    assert picked == steady[1:garbage]
    assert {r.topic for r in picked} == {EV, MSG}
    # "rotating": its publishes before the rotation event, and not one after it.
    rotating = by_stream[b"rotating"]
    picked = publishes_first(later, {b"rotating"}, t_events=EV, t_messages=MSG)
    assert picked == rotating[1:garbage]  # its garbage event comes before its rotation
    # Nobody waits: nothing goes first. A record without a key never does.
    assert publishes_first(later, set(), t_events=EV, t_messages=MSG) == []
    assert publishes_first([_rec(MSG, 0, None, b"x")], {b""}, t_events=EV, t_messages=MSG) == []
    # A replay record of a waited stream stops its publishes from going first.
    replay = _rec(REPLAY, 0, b"steady", b"x")
    assert publishes_first([replay, *later], {b"steady"}, t_events=EV, t_messages=MSG) == []


def _watch_while_folding(log: list[Record], fold_s: float) -> list[str]:
    """A long poll waits on stream "watched" while the catch-up folds `log` (each fold takes
    `fold_s`); the order of the folds (``fold <offset>``) and of the poll's answer (``answered``)."""
    order: list[str] = []
    waiters = HeadWaiters()
    head = {"watched": 0}

    def fold(record: Record) -> None:
        let_time_pass(fold_s, "folding takes time: slices end inside a batch")
        order.append(f"fold {record.offset}")
        if record.key == b"watched":
            head["watched"] = 1
            waiters.wake("watched", 1)

    def first(records: list[Record]) -> list[Record]:
        return publishes_first(records, waiters.waited_keys(), t_events=EV, t_messages=MSG)

    async def main() -> None:
        owned = OwnedPartitions(("streams",))
        runner = catch_up.CatchUp("127.0.0.1:1", TOPICS, owned, fold, answers_due=lambda: waiters.answers_due,
                                  first=first, waiting=lambda: len(waiters) > 0)

        async def reader() -> None:
            await waiters.wait("watched", 1, 30_000, lambda: head["watched"])
            order.append("answered")

        polling = asyncio.ensure_future(reader())
        await asyncio.sleep(0)  # the poll is parked
        runner.assign({(t, 0) for t in TOPICS})
        await asyncio.wait_for(polling, 30)
        while owned.next_offset(MSG, 0) != len(log):
            await asyncio.sleep(0.01)
        owned.assign([])  # a new generation stops the fold

    asyncio.run(main())
    return order


def test_a_waiting_reader_is_answered_before_the_burst_committed_ahead_of_its_message(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Its message is the last of a batch of 40: the poll is answered after one fold, not forty."""
    batch = [_rec(MSG, i, b"other", b"v") for i in range(39)] + [_rec(MSG, 39, b"watched", b"v")]
    monkeypatch.setattr(catch_up, "PartitionReader", _batched_reader(batch, [len(batch)]))
    monkeypatch.setattr(catch_up, "FOLD_SLICE_S", 3600.0)  # no slice ends inside the batch
    order = _watch_while_folding(batch, catch_up.ANSWER_EVERY_S)
    assert order[:2] == ["fold 39", "answered"], order[:5]
    assert sorted(order[2:]) == sorted(f"fold {i}" for i in range(39))


def test_a_record_folded_ahead_is_not_fresh_and_the_position_moves_over_it_in_order() -> None:
    owned = OwnedPartitions(("streams",))
    owned.caught_up(0, owned.assign([0]))
    with owned.folding(EV, 0, 4):
        pass
    with owned.folding_ahead(EV, 0, 9):
        pass
    assert not owned.fresh(EV, 0, 9)
    assert owned.fresh(EV, 0, 5)
    assert owned.next_offset(EV, 0) == 5  # a reader starting over reads 5..8 again
    assert not owned.passed(EV, 0, 5)  # not folded ahead
    with owned.folding(EV, 0, 8):
        pass
    assert owned.passed(EV, 0, 9)
    assert owned.next_offset(EV, 0) == 10
    assert not owned.passed(EV, 0, 9)
    with owned.folding_ahead(EV, 0, 12):
        pass
    with owned.folding(EV, 0, 13):  # folding past it in order forgets it too
        pass
    assert owned.next_offset(EV, 0) == 14
    assert not owned.passed(EV, 0, 12)
    # Folded ahead out of order among themselves (another stream's publishes became waited later).
    for offset in (20, 17, 25, 18):
        with owned.folding_ahead(EV, 0, offset):
            pass
    with owned.folding_ahead(EV, 0, 3):  # already passed in order: nothing to keep
        pass
    assert [owned.fresh(EV, 0, o) for o in (14, 17, 18, 19, 20, 25, 26)] == [True, False, False, True, False,
                                                                             False, True]
    with owned.folding(EV, 0, 19):
        pass
    assert owned.fresh(EV, 0, 21)
    assert [owned.passed(EV, 0, o) for o in (17, 18, 20, 25)] == [False, False, True, True]
    assert owned.next_offset(EV, 0) == 26


def test_a_waited_publish_committed_while_a_batch_folds_is_taken_and_folded_before_the_batch_ends(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch being folded was fetched before the watched stream's message was committed: the
    fold takes it at the end of a slice, instead of after the 40 records before it."""
    log = [*(_rec(MSG, i, b"other", b"v") for i in range(40)), _rec(MSG, 40, b"watched", b"v")]
    monkeypatch.setattr(catch_up, "PartitionReader", _batched_reader(log, [40, 1]))
    monkeypatch.setattr(catch_up, "FOLD_SLICE_S", 0.001)
    order = _watch_while_folding(log, 0.002)
    at = order.index("fold 40")
    assert at < 5, order[:8]  # the first slice's end, not the batch's
    assert order[at + 1] == "answered"
    assert sorted(o for o in order if o != "answered") == sorted(f"fold {i}" for i in range(41))
