"""The replay status fold: accepted life cycles, every quarantine rule, the ICRC-77 JSON and the digest."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from protocol_strategies import PROPERTY

from watchtower.protocol.replay.records import (
    ReplayCanceled,
    ReplayCancelRequest,
    ReplayCompleted,
    ReplayErrored,
    ReplayProgress,
    ReplayRecord,
    ReplayRegistration,
)
from watchtower.protocol.replay.status import (
    STATUSES,
    ReplayRuleError,
    ReplayView,
    apply_replay_record,
    replay_digest,
    replay_status_json,
    view_from_dict,
    view_to_dict,
)
from watchtower.schemas.replay_records import decode_replay_record, encode_replay_record

S = "stream-a"
ALICE, MALLORY = "alice", "mallory"


def reg(rid: int = 7, *, first: int = 1, end: int = 101, to: int | None = 101, skip: list[int] | None = None,
        stream: str = S, requester: str = ALICE, flt: str | None = None) -> ReplayRegistration:
    return ReplayRegistration(v=1, replay_id=rid, stream_id=stream, namespace=stream, requester=requester,
                            from_sequence=first, to_sequence=to, first=first, end_exclusive=end,
                            end_id=None if to is not None else end - 1, filter=flt, skip=skip, memo_hex="ab",
                            price_cby=0, block_height=3, caller=requester, nonce=1, digest_hex="00" * 32)


def prog(rid: int = 7, *, seq: int, off: int, d: int = 0, f: int = 0, s: int = 0, engine: str = "service",
         partition: int = 0, stream: str = S) -> ReplayProgress:
    return ReplayProgress(v=1, replay_id=rid, stream_id=stream, engine=engine, partition=partition, next_offset=off,
                          next_sequence=seq, delivered=d, filtered=f, skipped=s, at_ms=1000 + seq)


def cancel(rid: int = 7, who: str = ALICE, stream: str = S) -> ReplayCancelRequest:
    return ReplayCancelRequest(v=1, replay_id=rid, stream_id=stream, requester=who, block_height=4, nonce=2,
                                 digest_hex="11" * 32)


def done(rid: int = 7, d: int = 100, f: int = 0, s: int = 0) -> ReplayCompleted:
    return ReplayCompleted(v=1, replay_id=rid, stream_id=S, engine="service", delivered=d, filtered=f, skipped=s,
                           at_ms=5000)


def fold(records: Iterable[ReplayRecord]) -> dict[int, ReplayView]:
    views: dict[int, ReplayView] = {}
    for record in records:
        views.update(apply_replay_record(views, record) or {})
    return views


def test_registration_starts_pending_at_the_first_sequence() -> None:
    view = fold([reg(skip=[3])])[7]
    assert (view.status, view.next_sequence, view.delivered, view.skip, view.engine) == ("pending", 1, 0, (3, 0),
                                                                                       "service")
    assert view.partition is None
    assert view.next_offset is None
    assert not view.cancel_requested


def test_progress_then_completion() -> None:
    views = fold([reg(), prog(seq=40, off=39, d=39), prog(seq=101, off=100, d=100)])
    assert views[7].status == "running"
    assert views[7].next_offset == 100
    views = fold([reg(), prog(seq=40, off=39, d=39), done(d=100)])
    assert views[7].status == "completed"
    assert views[7].next_sequence == 101
    assert views[7].updated_at_ms == 5000


def test_an_unchanged_checkpoint_is_accepted() -> None:
    views = fold([reg(), prog(seq=1, off=0, engine="spark")])
    assert apply_replay_record(views, prog(seq=1, off=0, engine="spark")) is not None
    assert views[7].engine == "spark"


def test_cancel_by_the_requester_is_honoured_then_canceled() -> None:
    views = fold([reg(), prog(seq=10, off=9, d=9), cancel()])
    assert views[7].cancel_requested
    assert views[7].status == "running"
    assert apply_replay_record(views, cancel()) == {}  # a repeat changes nothing
    views = fold([reg(), prog(seq=10, off=9, d=9), cancel(),
                  ReplayCanceled(v=1, replay_id=7, stream_id=S, delivered=12, at_ms=9)])
    assert views[7].status == "canceled"
    assert views[7].delivered == 12


def test_a_cancel_from_a_stranger_is_ignored_not_quarantined() -> None:
    views = fold([reg(), prog(seq=10, off=9, d=9)])
    assert apply_replay_record(views, cancel(who=MALLORY)) == {}
    with pytest.raises(ReplayRuleError, match="never asked"):
        apply_replay_record(views, ReplayCanceled(v=1, replay_id=7, stream_id=S, delivered=9, at_ms=9))


def test_errored_records_the_reason() -> None:
    views = fold([reg(), ReplayErrored(v=1, replay_id=7, stream_id=S, reason="sequence 5 is missing", delivered=3,
                                       at_ms=1)])
    assert views[7].status == "errored"
    assert views[7].error == "sequence 5 is missing"


QUARANTINED: dict[str, tuple[list[ReplayRecord], ReplayRecord, str]] = {
    "second registration": ([reg()], reg(), "already registered"),
    "unknown id (progress)": ([reg()], prog(8, seq=2, off=1), "never registered"),
    "unknown id (cancel)": ([], cancel(), "never registered"),
    "unknown id (completed)": ([], done(), "never registered"),
    "another stream": ([reg()], prog(seq=2, off=1, stream="stream-b"), "belongs to stream"),
    "after completed": ([reg(), done()], prog(seq=101, off=100, d=100), "already completed"),
    "cancel after completed": ([reg(), done()], cancel(), "already completed"),
    "after errored": ([reg(), ReplayErrored(v=1, replay_id=7, stream_id=S, reason="x", delivered=0, at_ms=1)],
                      done(), "already errored"),
    "sequence backwards": ([reg(), prog(seq=50, off=49, d=49)], prog(seq=49, off=60, d=49), "backwards"),
    "offset backwards": ([reg(), prog(seq=50, off=49, d=49)], prog(seq=50, off=48, d=49), "backwards"),
    "counters backwards": ([reg(), prog(seq=50, off=49, d=49)], prog(seq=60, off=59, d=40), "backwards"),
    "completed with fewer": ([reg(), prog(seq=50, off=49, d=49)], done(d=10), "backwards"),
    "progress past the plan": ([reg()], prog(seq=102, off=101), "past its plan"),
    "partition switch": ([reg(), prog(seq=5, off=4, d=4)], prog(seq=6, off=5, d=5, partition=2), "partition"),
    "unknown engine": ([reg()], prog(seq=5, off=4, engine="flink"), "engine"),
    "canceled without cancel": ([reg()], ReplayCanceled(v=1, replay_id=7, stream_id=S, delivered=0, at_ms=1),
                                "never asked"),
    "impossible plan": ([], reg(first=9, end=3), "impossible plan"),
    "invalid skip": ([], reg(skip=[3, 3]), "invalid skip"),
}


@pytest.mark.parametrize("case", sorted(QUARANTINED))
def test_records_that_break_a_rule_raise_and_leave_the_state(case: str) -> None:
    before, record, reason = QUARANTINED[case]
    views = fold(before)
    digest = replay_digest(views)
    with pytest.raises(ReplayRuleError, match=reason):
        apply_replay_record(views, record)
    assert replay_digest(views) == digest


def test_status_json_follows_icrc77() -> None:
    pending = replay_status_json(fold([reg(to=None, end=51, flt='{"eq":["k","v"]}', skip=[2, 1])])[7])
    assert pending["status"] == {"pending": None}
    assert pending["range"] == [1, None]
    assert pending["end_id"] == 50
    assert pending["config"]["skip"] == [2, 1]
    assert pending["config"]["filter"] == {"eq": ["k", "v"]}
    assert pending["stats"]["total"] == 50
    assert pending["percent"] == 0.0
    assert pending["replayId"] == 7
    running = replay_status_json(fold([reg(), prog(seq=26, off=25, d=20, f=5)])[7])
    assert running["status"] == {"running": None}
    assert running["percent"] == 25.0
    assert running["stats"] == {"delivered": 20, "filtered": 5, "skipped": 0, "next_sequence": 26, "total": 100,
                                "engine": "service"}
    assert replay_status_json(fold([reg(), done(d=90, f=10)])[7])["status"] == {"completed": 90}
    assert replay_status_json(fold([reg(), done()])[7])["percent"] == 100.0
    errored = fold([reg(), ReplayErrored(v=1, replay_id=7, stream_id=S, reason="gone", delivered=0, at_ms=1)])
    assert replay_status_json(errored[7])["status"] == {"errored": "gone"}
    empty = replay_status_json(fold([reg(first=5, end=5, to=5)])[7])
    assert empty["percent"] == 100.0
    assert empty["stats"]["total"] == 0
    assert set(STATUSES) >= {next(iter(replay_status_json(v)["status"])) for v in errored.values()}


def test_view_dict_round_trip() -> None:
    view = fold([reg(skip=[4, 1]), prog(seq=9, off=8, d=2, s=6)])[7]
    assert view_from_dict(view_to_dict(view)) == view


def test_digest_ignores_map_order_but_not_facts() -> None:
    a = fold([reg(1), reg(2, stream="stream-b"), prog(1, seq=3, off=2, d=2)])
    b = fold([reg(2, stream="stream-b"), reg(1), prog(1, seq=3, off=2, d=2)])
    assert list(a) != list(b)
    assert replay_digest(a) == replay_digest(b)
    c = fold([reg(1), reg(2, stream="stream-b"), prog(1, seq=4, off=3, d=3)])
    assert replay_digest(a) != replay_digest(c)
    assert replay_digest({}) == replay_digest({})


def test_fold_order_matters_where_the_rules_do() -> None:
    # progress before its registration is quarantined, so the two orders fold to different states
    ordered = fold([reg(), prog(seq=3, off=2, d=2)])
    views: dict[int, ReplayView] = {}
    with pytest.raises(ReplayRuleError):
        apply_replay_record(views, prog(seq=3, off=2, d=2))
    views.update(apply_replay_record(views, reg()) or {})
    assert replay_digest(views) != replay_digest(ordered)


@st.composite
def life_cycles(draw: st.DrawFn) -> list[ReplayRecord]:
    """A valid random life cycle of a few replays, with stranger cancels mixed in."""
    out: list[ReplayRecord] = []
    for rid in range(1, draw(st.integers(1, 4)) + 1):
        first = draw(st.integers(1, 50))
        end = first + draw(st.integers(0, 200))
        out.append(reg(rid, first=first, end=end, to=end))
        seq, off, delivered = first, 0, 0
        for _ in range(draw(st.integers(0, 4))):
            step = draw(st.integers(0, end - seq))
            seq, off, delivered = seq + step, off + step + draw(st.integers(0, 5)), delivered + step
            out.append(prog(rid, seq=seq, off=off, d=delivered))
            if draw(st.booleans()):
                out.append(cancel(rid, who=MALLORY))
        asked = draw(st.booleans())
        if asked:
            out.append(cancel(rid))
        ending = draw(st.sampled_from(["none", "completed", "errored"] + (["canceled"] if asked else [])))
        if ending == "completed":
            out.append(done(rid, d=end - first))
        elif ending == "errored":
            out.append(ReplayErrored(v=1, replay_id=rid, stream_id=S, reason="gap", delivered=delivered, at_ms=1))
        elif ending == "canceled":
            out.append(ReplayCanceled(v=1, replay_id=rid, stream_id=S, delivered=delivered, at_ms=1))
    return out


@PROPERTY
@given(life_cycles())
def test_folding_a_valid_life_cycle_twice_gives_the_same_digest(records: list[ReplayRecord]) -> None:
    wire = [decode_replay_record(encode_replay_record(r)) for r in records]  # the fold sees decoded records
    first, second = fold(wire), fold(wire)
    assert replay_digest(first) == replay_digest(second)
    assert all(v.status in STATUSES for v in first.values())
    assert {v.replay_id for v in first.values()} == {r.replay_id for r in records}
