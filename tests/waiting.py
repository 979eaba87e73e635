"""One way for tests to wait: poll a check until it holds, or fail naming what never happened.

A deadline here is a safety net, not a timing claim: `timeout_s` bounds how long a test may hang
on a condition that never arrives. Nothing here sleeps once the check holds.

A sleep that is not a wait, time let pass because passing time is what a test is about (a window in
which something must not happen, a pace, a timeout left to expire), goes through `let_time_pass`
with the reason, so it never reads as a wait for something.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    what: str | Callable[[], str],
    check: Callable[[], T | bool | None],
    timeout_s: float = 60.0,
    every_s: float = 0.1,
    retry_on: tuple[type[BaseException], ...] = (),
) -> T:
    """Call `check` every `every_s` until it returns a truthy value, and return that value.

    `check` runs at least once and once more at the deadline. An exception from `check` propagates,
    unless it is one of `retry_on`: then it counts as "not yet" and is reported if time runs out.
    After `timeout_s` raises AssertionError naming `what`, the timeout and the last value or
    exception seen. `what` may be a callable, asked only then: for a message that shows the state
    the check saw (what was read so far, a log tail).
    """
    deadline = time.monotonic() + timeout_s
    last: object = None
    while True:
        try:
            value = check()
        except retry_on as err:
            last = err
        else:
            if value:
                return value  # type: ignore[return-value]
            last = value
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            named = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout_s:g}s waiting for {named} (last: {last!r})")
        time.sleep(min(every_s, remaining))


def let_time_pass(seconds: float, why: str) -> None:
    """Sleep `seconds` on purpose: time passing is the point (`why` says how), not a wait for an event."""
    if not why.strip():
        raise ValueError("let_time_pass needs the reason the time must pass")
    time.sleep(seconds)
