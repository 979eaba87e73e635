"""How every step of `watchtower demo` waits: on a condition, within a bound, failing with the step's name.

No step sleeps a fixed time hoping something is ready. A step waits for what it needs (partitions
assigned, as a worker's health file shows; the HTTP API ready; a subscriber's first delivery; a
read side that shows a write) and gives up after `STEP_TIMEOUT_S` (``WATCHTOWER_DEMO_STEP_TIMEOUT_S``,
default 180 s: generous, because a busy laptop is slow, and bounded, because a demo that hangs is
worse than one that fails) with a `DemoStepError` that names the step and says what to do.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import click

from watchtower.local.errors import LocalStackError
from watchtower.protocol.errors import WatchtowerError
from watchtower.topics.errors import BROKER_ERRORS, TopicUnavailableError
from watchtower.topics.metadata import partition_count

T = TypeVar("T")


def _step_timeout() -> float:
    try:
        return max(1.0, float(os.environ.get("WATCHTOWER_DEMO_STEP_TIMEOUT_S", "180")))
    except ValueError:
        return 180.0


#: The longest any single demo step waits for what it needs.
STEP_TIMEOUT_S = _step_timeout()
#: How often a condition that cannot notify (a file, an HTTP read) is looked at again.
POLL_S = 0.1
#: What fails a step with its name: a product error, the local stack's, the broker's, a timeout.
_STEP_FAILURES: tuple[type[Exception], ...] = (WatchtowerError, LocalStackError, *BROKER_ERRORS, TimeoutError)


class DemoStepError(click.ClickException):
    """A demo step that did not complete: its name, what was seen, and what to do."""

    def __init__(self, step: str, what: str, *, logs: Path | None = None) -> None:
        hint = f"see the service logs in {logs}" if logs is not None else "see the output above"
        super().__init__(f"demo step '{step}' failed: {what}. {hint}; the machine may be overloaded: "
                         f"rerun `./run demo`, or give each step longer with WATCHTOWER_DEMO_STEP_TIMEOUT_S "
                         f"(now {STEP_TIMEOUT_S:.0f}s)")
        self.step = step


def wait_for(step: str, ready: Callable[[], T | None], *, seen: Callable[[], str] | None = None,
             timeout_s: float | None = None, logs: Path | None = None) -> T:
    """Return `ready()`'s first truthy value; `DemoStepError` naming `step` after `timeout_s`.

    `seen` describes the last state for the error. An exception `ready` raises ends the wait at once.
    """
    bound = STEP_TIMEOUT_S if timeout_s is None else timeout_s
    deadline = time.monotonic() + bound
    pause = threading.Event()  # never set: wait() is the poll interval, not a guess at readiness
    while True:
        value = ready()
        if value:
            return value
        if time.monotonic() >= deadline:
            last = f" (last seen: {seen()})" if seen is not None else ""
            raise DemoStepError(step, f"not done within {bound:.0f}s{last}", logs=logs)
        pause.wait(POLL_S)


@contextlib.contextmanager
def demo_step(step: str, *, logs: Path | None = None) -> Iterator[None]:
    """Run a block as the named step: a product error or timeout in it fails the demo naming the step."""
    try:
        yield
    except DemoStepError:
        raise
    except _STEP_FAILURES as err:
        raise DemoStepError(step, f"{type(err).__name__}: {err}", logs=logs) from err


def read_health(path: Path) -> dict[str, Any]:
    """A worker's health file (docs/push.md, docs/replay.md); {} while it is not written yet."""
    try:
        current = json.loads(path.read_text())
    except (OSError, ValueError):  # not written yet, or replaced while read
        return {}
    return current if isinstance(current, dict) else {}


def wait_worker_serving(step: str, path: Path, partitions: int, *, since_ms: int = 0,
                        logs: Path | None = None) -> dict[str, Any]:
    """Wait until the worker whose health file is `path` serves and owns all `partitions` partitions
    (its restore done: it writes them only then), in a file written after `since_ms`."""

    def ready() -> dict[str, Any] | None:
        h = read_health(path)
        owned = h.get("partitions") or []
        fresh = int(h.get("updated_ms", 0)) > since_ms
        return h if fresh and h.get("state") == "serving" and len(owned) >= partitions else None

    return wait_for(step, ready, seen=lambda: json.dumps(read_health(path))[:300] or "no health file yet",
                    logs=logs)


def topic_partitions(bootstrap: str, topic: str) -> int:
    """How many partitions `topic` has (a worker that owns them all is ready to serve every stream)."""
    try:
        return partition_count(bootstrap, topic)
    except TopicUnavailableError:
        raise DemoStepError(f"read the partitions of {topic}",
                            "the topic does not exist; run `watchtower init`") from None
