"""Publisher key schedule (DESIGN §7.3)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from protocol_strategies import PROPERTY

from watchtower.protocol import KeySchedule, KeyScheduleEntry, get_key_at_sequence, get_key_history
from watchtower.protocol.errors import InvalidArgumentError, LimitExceededError


def key(i: int) -> bytes:
    return bytes([i % 256]) * 32


def test_first_key_is_id_1_from_sequence_1() -> None:
    schedule = KeySchedule.initial(key(1))
    assert schedule.current == KeyScheduleEntry(1, key(1), 1)
    assert get_key_at_sequence(schedule, 1).signing_key_id == 1
    assert get_key_at_sequence(schedule, 10**9).signing_key_id == 1


def test_rotation_at_head_h_is_effective_at_h_plus_1() -> None:
    schedule = KeySchedule.initial(key(1)).rotate(key(2), head_sequence=5)
    assert [(e.signing_key_id, e.effective_sequence) for e in schedule.entries] == [(1, 1), (2, 6)]
    assert schedule.key_at_sequence(5).signing_key_id == 1
    assert schedule.key_at_sequence(6).public_key == key(2)


def test_rotations_at_the_same_head_resolve_to_the_greatest_id() -> None:
    schedule = KeySchedule.initial(key(1)).rotate(key(2), head_sequence=3).rotate(key(3), head_sequence=3)
    assert schedule.key_at_sequence(4).signing_key_id == 3
    assert schedule.key_at_sequence(3).signing_key_id == 1


def test_rotation_before_any_publish_supersedes_key_1_at_sequence_1() -> None:
    schedule = KeySchedule.initial(key(1)).rotate(key(2), head_sequence=0)
    assert schedule.key_at_sequence(1).signing_key_id == 2


def test_invalid_queries_and_rotations() -> None:
    schedule = KeySchedule.initial(key(1)).rotate(key(2), head_sequence=10)
    with pytest.raises(InvalidArgumentError):
        schedule.key_at_sequence(0)
    with pytest.raises(InvalidArgumentError, match="behind"):
        schedule.rotate(key(3), head_sequence=9)
    with pytest.raises(InvalidArgumentError):
        schedule.rotate(b"short", head_sequence=10)
    with pytest.raises(InvalidArgumentError):
        KeySchedule((KeyScheduleEntry(2, key(1), 1),))
    with pytest.raises(InvalidArgumentError):
        KeySchedule((KeyScheduleEntry(1, key(1), 1), KeyScheduleEntry(2, key(2), 5), KeyScheduleEntry(3, key(3), 4)))


def test_history_pages_in_id_order() -> None:
    schedule = KeySchedule.initial(key(1))
    for i in range(2, 8):
        schedule = schedule.rotate(key(i), head_sequence=i * 10)
    first = get_key_history(schedule, 1, 3)
    assert [e.signing_key_id for e in first.entries] == [1, 2, 3]
    assert first.next_from_signing_key_id == 4
    last = get_key_history(schedule, 7, 3)
    assert [e.signing_key_id for e in last.entries] == [7]
    assert last.next_from_signing_key_id is None
    assert get_key_history(schedule, 50, 3).entries == ()
    with pytest.raises(LimitExceededError):
        get_key_history(schedule, 1, 0)
    with pytest.raises(LimitExceededError):
        get_key_history(schedule, 1, 501)
    with pytest.raises(InvalidArgumentError):
        get_key_history(schedule, 0, 10)


def test_json_round_trip() -> None:
    schedule = KeySchedule.initial(key(1)).rotate(key(2), head_sequence=4)
    assert KeySchedule.from_dict(schedule.to_dict()) == schedule


@PROPERTY
@given(st.lists(st.one_of(st.integers(0, 20), st.none()), max_size=30), st.lists(st.integers(1, 400), max_size=20))
def test_resolution_matches_the_definition(ops: list[int | None], queries: list[int]) -> None:
    """None rotates; a number publishes that many messages."""
    schedule = KeySchedule.initial(key(1))
    head = 0
    for op in ops:
        if op is None:
            schedule = schedule.rotate(key(schedule.current.signing_key_id + 1), head_sequence=head)
        else:
            head += op
    for s in queries:
        candidates = [e for e in schedule.entries if e.effective_sequence <= s]
        expected = max(candidates, key=lambda e: (e.effective_sequence, e.signing_key_id))
        assert schedule.key_at_sequence(s) == expected
