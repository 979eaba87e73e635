"""Ring-buffer pruning and get_since (DESIGN §7.5)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from protocol_strategies import PROPERTY, vectors_of_type

from watchtower.protocol import RingWindow, floor_for, get_since_range
from watchtower.protocol.errors import CursorTooOldError, InvalidArgumentError, LimitExceededError, WatchtowerError
from watchtower.protocol.stream.ring_window import replay_request


@pytest.mark.parametrize("vector", vectors_of_type("get_since"), ids=lambda v: v["id"])
def test_get_since_vectors(vector: dict[str, Any]) -> None:
    inp, expect = vector["input"], vector["expect"]
    args = (inp["head"], inp["ring_buffer_capacity"], inp["cursor"], inp["limit"])
    if "error" in expect:
        with pytest.raises(WatchtowerError) as caught:
            get_since_range(*args)
        assert caught.value.code == expect["error"]
    else:
        assert list(get_since_range(*args)) == expect["sequences"]


def test_floor() -> None:
    assert floor_for(0, 10) == 1
    assert floor_for(5, 10) == 1
    assert floor_for(10, 10) == 1
    assert floor_for(11, 10) == 2
    assert floor_for(12000, 10000) == 2001


def test_limit_is_checked_before_the_cursor() -> None:
    with pytest.raises(LimitExceededError):
        get_since_range(12000, 10000, -5, 0)
    with pytest.raises(LimitExceededError):
        get_since_range(12000, 10000, 0, True)  # a bool is not a limit


def test_negative_cursor_is_an_argument_error() -> None:
    with pytest.raises(InvalidArgumentError):
        get_since_range(10, 10, -1, 5)


def test_cursor_too_old_says_where_to_resume() -> None:
    with pytest.raises(CursorTooOldError) as caught:
        get_since_range(12000, 10000, 1999, 10)
    assert "floor 2001" in caught.value.message
    assert "cursor 2000" in caught.value.message
    assert "replay" in caught.value.message
    assert caught.value.details == {"cursor": 1999, "floor": 2001, "head": 12000}


def test_cursor_too_old_carries_the_ready_replay_request_of_the_pruned_range_with_its_price() -> None:
    with pytest.raises(CursorTooOldError) as caught:
        get_since_range(50, 10, 7, 10, stream_id="s-1", replay_price_per_event_cby=3)
    err = caught.value
    # The window is 41..50: the reader at 7 missed [8, 41), 33 events at 3 CBY.
    assert err.details["replay"] == {
        "method": "register_replay", "stream_id": "s-1",
        "body": {"namespace": "s-1", "from": 8, "to": 41,
                 "config": {"filter": None, "skip": None, "max_payment_cby": 99}, "memo_hex": ""},
        "price_cby": 99, "per_event_cby": 3}
    assert {k: err.details[k] for k in ("cursor", "floor", "head")} == {"cursor": 7, "floor": 41, "head": 50}
    assert "details.replay" in err.message
    assert "[8, 41)" in err.message
    assert "99 CBY" in err.message
    # It crosses HTTP as JSON and comes back whole.
    assert WatchtowerError.from_dict(err.to_dict()).details["replay"] == err.details["replay"]


def test_a_free_stream_offers_its_replay_for_nothing() -> None:
    assert replay_request("s-2", 0, 5) == {
        "method": "register_replay", "stream_id": "s-2",
        "body": {"namespace": "s-2", "from": 1, "to": 5,
                 "config": {"filter": None, "skip": None, "max_payment_cby": 0}, "memo_hex": ""},
        "price_cby": 0, "per_event_cby": 0}


def test_publish_prunes_exactly_the_floor() -> None:
    window = RingWindow(capacity=3)
    pruned = []
    for _ in range(5):
        window, gone = window.publish()
        pruned.append(gone)
    assert (window.head, window.floor, window.size) == (5, 3, 3)
    assert pruned == [None, None, None, 1, 2]
    assert window.contains(3)
    assert not window.contains(2)
    assert not window.contains(6)
    assert list(window.since(2, 10)) == [3, 4, 5]


def test_empty_window() -> None:
    window = RingWindow(capacity=5)
    assert (window.head, window.floor, window.size) == (0, 1, 0)
    assert not window.contains(1)
    assert list(window.since(0, 500)) == []


@PROPERTY
@given(st.integers(1, 50), st.integers(0, 200))
def test_publishing_matches_the_closed_form(capacity: int, publishes: int) -> None:
    window = RingWindow(capacity=capacity)
    for _ in range(publishes):
        window, _ = window.publish()
    assert window == RingWindow(capacity=capacity, head=publishes)
    assert window.floor == (1 if publishes == 0 else max(1, publishes - capacity + 1))
    assert window.size == min(publishes, capacity)


@PROPERTY
@given(st.integers(0, 10_000), st.integers(1, 5_000), st.integers(0, 12_000), st.integers(1, 500))
def test_get_since_is_contiguous_bounded_and_starts_after_the_cursor(
    head: int, capacity: int, cursor: int, limit: int
) -> None:
    floor = floor_for(head, capacity)
    try:
        result = get_since_range(head, capacity, cursor, limit)
    except CursorTooOldError:
        assert head > 0
        assert cursor < floor - 1
        return
    sequences = list(result)
    assert len(sequences) <= limit
    assert sequences == list(range(cursor + 1, cursor + 1 + len(sequences)))
    assert all(floor <= s <= head for s in sequences)
    # Nothing available was withheld: either the page is full or it reaches the head.
    assert len(sequences) == limit or not sequences or sequences[-1] == head
    if cursor < head:
        assert sequences, "a cursor behind the head must get at least one message"
