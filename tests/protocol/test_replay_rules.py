"""ICRC-77 replay ranges and headers (DESIGN §7.8)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from protocol_strategies import PROPERTY

from watchtower.protocol import ReplayMarker, plan_replay, read_replay_headers, replay_headers
from watchtower.protocol.errors import ImproperConfigError, MalformedRecordError


def test_headers_are_decimal_strings() -> None:
    assert replay_headers(12) == [("icrc77:replay", b"true"), ("icrc77:replay:id", b"12")]
    assert replay_headers(12, 340)[-1] == ("icrc77:replay:end_id", b"340")


def test_open_ended_replays_announce_their_end() -> None:
    plan = plan_replay(replay_id=3, from_sequence=5, to_sequence=None, head=9)
    assert list(plan.sequences) == [5, 6, 7, 8, 9]
    assert plan.end_id == 9
    assert ("icrc77:replay:end_id", b"9") in plan.headers()


def test_bounded_replays_are_closed_open_and_clamped_to_the_head() -> None:
    plan = plan_replay(replay_id=3, from_sequence=5, to_sequence=8, head=100)
    assert list(plan.sequences) == [5, 6, 7]
    assert plan.end_id is None
    assert [name for name, _ in plan.headers()] == ["icrc77:replay", "icrc77:replay:id"]
    assert list(plan_replay(replay_id=1, from_sequence=5, to_sequence=80, head=6).sequences) == [5, 6]
    assert list(plan_replay(replay_id=1, from_sequence=5, to_sequence=5, head=6).sequences) == []
    assert list(plan_replay(replay_id=1, from_sequence=9, to_sequence=None, head=6).sequences) == []


@pytest.mark.parametrize(("start", "end"), [(0, None), (5, 4), (True, None), (1, "9")])
def test_improper_ranges(start: object, end: object) -> None:
    with pytest.raises(ImproperConfigError):
        plan_replay(replay_id=1, from_sequence=start, to_sequence=end, head=10)  # type: ignore[arg-type]


def test_reading_headers_back() -> None:
    assert read_replay_headers(None) is None
    assert read_replay_headers([("other", b"x")]) is None
    assert read_replay_headers([*replay_headers(7, 99), ("trace", b"t")]) == ReplayMarker(7, 99)
    assert read_replay_headers(replay_headers(7)) == ReplayMarker(7, None)
    with pytest.raises(MalformedRecordError):
        read_replay_headers([("icrc77:replay", b"true"), ("icrc77:replay:id", b"-1")])
    with pytest.raises(MalformedRecordError):
        read_replay_headers([("icrc77:replay", b"true")])


@PROPERTY
@given(st.integers(1, 500), st.none() | st.integers(1, 600), st.integers(0, 500))
def test_plans_stay_inside_the_log_and_the_request(start: int, end: int | None, head: int) -> None:
    if end is not None and end < start:
        return
    plan = plan_replay(replay_id=1, from_sequence=start, to_sequence=end, head=head)
    seqs = list(plan.sequences)
    assert all(start <= s <= head for s in seqs)
    if end is not None:
        assert all(s < end for s in seqs)
        assert len(seqs) == max(0, min(end, head + 1) - start)
    else:
        assert len(seqs) == max(0, head + 1 - start)
