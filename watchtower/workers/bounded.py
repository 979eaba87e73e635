"""Blocking client calls with a deadline the caller can rely on.

librdkafka's transactional calls take a timeout, but not all of them honour it: a
``send_offsets_to_transaction`` whose group coordinator went away can block far past its timeout
(librdkafka issues #5456 and #5511; that is how a broker restart used to wedge the worker for
good). So each such call runs on a helper thread, and the caller waits at most ``timeout_s``.
When the call overruns, :class:`CallStuckError` is raised and the helper thread is abandoned: it keeps
its client object alive until the call returns (so the client is never destroyed under a running
call), the caller replaces the client (a new transactional producer with the same
``transactional.id`` fences the old one), and a fresh helper thread serves the next call.

Helper threads are daemons, so an abandoned one never keeps the process from exiting.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future, wait
from typing import Any, TypeVar

log = logging.getLogger("watchtower.worker")

T = TypeVar("T")

_Job = tuple[Callable[[], Any], "Future[Any]"] | None


class CallStuckError(Exception):
    """A client call did not return within its deadline; the client must be replaced."""


class BoundedCaller:
    """Runs one blocking call at a time on a daemon thread; waits for it at most a deadline."""

    def __init__(self, name: str = "wt-client-call") -> None:
        self.name = name
        self.abandoned = 0
        self._queue: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._thread = self._start(self._queue)

    def _start(self, jobs: queue.SimpleQueue[_Job]) -> threading.Thread:
        thread = threading.Thread(target=_serve, args=(jobs,), name=self.name, daemon=True)
        thread.start()
        return thread

    def call(self, fn: Callable[[], T], timeout_s: float, *, what: str = "client call",
             while_waiting: Callable[[], None] | None = None) -> T:
        """``fn()``'s result or exception; CallStuckError when it has not returned after ``timeout_s``.

        ``while_waiting`` (if given) runs on the calling thread about every 0.2 s during the wait,
        e.g. to serve another client's callbacks.
        """
        fut: Future[T] = Future()
        self._queue.put((fn, fut))
        remaining = timeout_s
        while remaining > 0:
            step = min(0.2, remaining)
            done, _ = wait([fut], timeout=step)
            if done:
                return fut.result()  # the call's own exception, if it raised one
            remaining -= step
            if while_waiting is not None:
                while_waiting()
        # Abandon the stuck thread: it exits after its call returns (it finds the stop mark).
        self._queue.put(None)
        self._queue = queue.SimpleQueue()
        self._thread = self._start(self._queue)
        self.abandoned += 1
        log.error("%s did not return within %.0fs; abandoning it (%d abandoned so far)",
                  what, timeout_s, self.abandoned)
        raise CallStuckError(f"{what} did not return within {timeout_s:g}s")

    def close(self) -> None:
        """Let the helper thread end once its current call (if any) returns."""
        self._queue.put(None)


def _serve(jobs: queue.SimpleQueue[_Job]) -> None:
    while True:
        job = jobs.get()
        if job is None:
            return
        _run(job)
        # An idle thread holds no client (the job is gone with `_run`'s frame): the last call, a bound
        # method of a producer, would keep it alive until the process exits, and a client destroyed
        # at interpreter shutdown can crash it.
        job = None


def _run(job: tuple[Callable[[], Any], Future[Any]]) -> None:
    fn, fut = job
    try:
        result = fn()
    except BaseException as exc:
        fut.set_exception(exc)
    else:
        fut.set_result(result)
