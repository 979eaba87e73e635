"""tests/waiting.wait_until: returns the first truthy value, fails naming what it waited for."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from tests.waiting import let_time_pass, wait_until


def test_returns_the_first_truthy_value() -> None:
    values: Iterator[object] = iter([None, 0, False, [], {"ready": True}])
    assert wait_until("a ready body", lambda: next(values), timeout_s=10, every_s=0.001) == {"ready": True}


def test_fails_naming_what_the_timeout_and_the_last_value() -> None:
    counter = itertools.count()
    with pytest.raises(AssertionError) as err:
        wait_until("the head to reach 5", lambda: next(counter) < 0 and None, timeout_s=0.05, every_s=0.01)
    message = str(err.value)
    assert "the head to reach 5" in message
    assert "0.05s" in message
    assert "last: False" in message


def test_an_unexpected_exception_propagates_at_once() -> None:
    calls = []

    def boom() -> None:
        calls.append(1)
        raise KeyError("missing")

    with pytest.raises(KeyError):
        wait_until("never", boom, timeout_s=10, every_s=0.001)
    assert len(calls) == 1


def test_a_retried_exception_is_reported_when_time_runs_out() -> None:
    def refused() -> None:
        raise ConnectionError("refused")

    with pytest.raises(AssertionError, match=r"the API.*ConnectionError\('refused'\)"):
        wait_until("the API", refused, timeout_s=0.05, every_s=0.01, retry_on=(ConnectionError,))


def test_a_retried_exception_then_success_returns_the_value() -> None:
    attempts: Iterator[BaseException | int] = iter([ConnectionError("refused"), ConnectionError("refused"), 7])

    def check() -> int:
        item = next(attempts)
        if isinstance(item, BaseException):
            raise item
        return item

    assert wait_until("the port", check, timeout_s=10, every_s=0.001, retry_on=(ConnectionError,)) == 7


def test_a_callable_what_is_asked_only_when_time_runs_out() -> None:
    seen: list[int] = []
    asked: list[int] = []

    def what() -> str:
        asked.append(1)
        return f"5 records, read {seen}"

    def check() -> bool:
        seen.append(len(seen))
        return False

    with pytest.raises(AssertionError, match=r"5 records, read \[0, 1"):
        wait_until(what, check, timeout_s=0.05, every_s=0.01)
    assert asked == [1]


def test_let_time_pass_needs_a_reason_then_sleeps_the_time_given(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr("tests.waiting.time.sleep", slept.append)
    with pytest.raises(ValueError, match="reason"):
        let_time_pass(0.01, " ")
    let_time_pass(2.5, "the window in which nothing may happen")
    assert slept == [2.5]
