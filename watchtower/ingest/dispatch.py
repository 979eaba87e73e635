"""How a runner shares its worker threads between feeds, so one feed cannot stall the others.

A task becomes a *job*: one fetch of one source for one tick. Tasks of the same tick whose sources
are identical (kind, method, URL, headers — secret references by name —, body and bounds) share
one job, so many feeds on one source cost one fetch a tick; each task applies its own selection.

A job runs on one of `workers` daemon threads when:

- its source has fewer than `per_source` fetches in flight (a feed's ticks all name one source, so
  a wedged feed holds at most that many threads; its next tick waits, it does not pile up), and
- its host (scheme, host, port; all ``kafka_topic`` jobs count as one host) has fewer than
  `per_host` in flight;

waiting jobs are taken host by host in turn, oldest first. A job whose tasks' deadlines all pass
while it waits is dropped (counted late): its result would come after the tick was decided. A
fetch itself never outlives its deadline (`fetch`), so a slot is always given back.

`close` does not wait for running jobs: their threads are daemons, and what they finish after it
is dropped (the aggregator counts a missing result as that runner's silence).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
import urllib.parse
from collections import Counter, deque
from collections.abc import Callable, Hashable
from typing import Any, Final

from watchtower.ingest.fetch import FetchError
from watchtower.protocol.constants import BLOCK_INTERVAL_MS, GENESIS_UNIX_MS
from watchtower.protocol.ingestion import HttpJsonTask, IngestReason, TaskSpec
from watchtower.protocol.ingestion.records import IngestTask

log = logging.getLogger("watchtower.ingest.runner")

DEFAULT_WORKERS: Final = 32
DEFAULT_PER_SOURCE: Final = 2
DEFAULT_PER_HOST: Final = 8

Outcome = Any  # a fetched JSON document (http_json), result bytes (kafka_topic), or a FetchError


def deadline_at(task: IngestTask) -> float:
    """The monotonic instant `task`'s deadline block ends (its result is useless after it)."""
    end_ms = GENESIS_UNIX_MS + (task.deadline_height + 1) * BLOCK_INTERVAL_MS
    return time.monotonic() + (end_ms - time.time() * 1000) / 1000


def source_key(spec: TaskSpec) -> tuple[Hashable, str]:
    """(what identifies the source, its host) for bounding and coalescing (module docstring)."""
    src = spec.source
    if isinstance(src, HttpJsonTask):
        parts = urllib.parse.urlsplit(src.url)
        host = f"{parts.scheme}://{(parts.hostname or '').lower()}:{parts.port or ''}"
        return ("http", src.method, src.url, src.headers, src.body, src.timeout_ms, src.max_bytes), host
    select = json.dumps(src.select, sort_keys=True)
    return ("kafka", src.topic, src.window_blocks, src.max_records, select), "kafka"


@dataclasses.dataclass(eq=False, slots=True)
class Job:
    """One fetch for one tick, and the tasks waiting for it."""

    key: tuple[Hashable, int]  # (source, tick height)
    host: str
    spec: TaskSpec
    tick_height: int
    tasks: list[tuple[IngestTask, TaskSpec]]
    deadline: float
    done: bool = False


class Dispatcher:
    """Runs submitted tasks on worker threads under the bounds of the module docstring.

    `execute(job)` fetches (any exception is that job's failure); `finish(task, spec, outcome)`
    turns each task's outcome into its result for `emit`; `late` is told of each dropped task."""

    def __init__(self, execute: Callable[[Job], Outcome], finish: Callable[[IngestTask, TaskSpec, Outcome], Any],
                 emit: Callable[[Any], None], *, late: Callable[[int], None] = lambda _n: None,
                 workers: int = DEFAULT_WORKERS, per_source: int = DEFAULT_PER_SOURCE,
                 per_host: int = DEFAULT_PER_HOST) -> None:
        self._execute, self._finish, self._emit, self._late = execute, finish, emit, late
        self.per_source, self.per_host = per_source, per_host
        self._cond = threading.Condition()
        self._jobs: dict[tuple[Hashable, int], Job] = {}  # waiting or running, by key: to coalesce
        self._waiting: dict[str, deque[Job]] = {}  # by host, hosts in turn order
        self._waiting_count = 0
        self._by_source: Counter[Hashable] = Counter()  # running
        self._by_host: Counter[str] = Counter()  # running
        self._closed = False
        for i in range(workers):
            threading.Thread(target=self._work, name=f"runner-task-{i}", daemon=True).start()

    def submit(self, task: IngestTask, spec: TaskSpec) -> None:
        """Queue `task` (never blocks; see `waiting` for back-pressure)."""
        source, host = source_key(spec)
        key = (source, task.tick_height)
        deadline = deadline_at(task)
        with self._cond:
            if self._closed:
                return
            job = self._jobs.get(key)
            if job is not None:  # the same source at the same tick: one fetch serves both
                job.tasks.append((task, spec))
                job.deadline = max(job.deadline, deadline)
                return
            job = Job(key, host, spec, task.tick_height, [(task, spec)], deadline)
            self._jobs[key] = job
            self._waiting.setdefault(host, deque()).append(job)
            self._waiting_count += 1
            self._cond.notify()

    def waiting(self) -> int:
        """Jobs queued and not yet started."""
        return self._waiting_count

    def close(self) -> None:
        """Stop: no new job starts, and results finished after this are dropped. Does not wait."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _take(self) -> Job | None:
        """The next runnable job (caller holds the lock), dropping those past their deadline."""
        now = time.monotonic()
        for host in list(self._waiting):
            if self._by_host[host] >= self.per_host:
                continue
            queue = self._waiting[host]
            picked, expired = None, []
            for job in queue:
                if job.deadline <= now:
                    expired.append(job)
                elif self._by_source[job.key[0]] < self.per_source:
                    picked = job
                    break
            for job in expired:
                queue.remove(job)
                self._waiting_count -= 1
                del self._jobs[job.key]
                self._late(len(job.tasks))
            if picked is not None:
                queue.remove(picked)
                self._waiting_count -= 1
                del self._waiting[host]
                if queue:  # this host goes to the back of the turn
                    self._waiting[host] = queue
                self._by_source[picked.key[0]] += 1
                self._by_host[host] += 1
                return picked
            if not queue:
                del self._waiting[host]
        return None

    def _work(self) -> None:
        while True:
            with self._cond:
                job = None if self._closed else self._take()
                while job is None:
                    if self._closed:
                        return
                    # Wake at least once a second: a job blocked on a bound may expire meanwhile.
                    self._cond.wait(1.0)
                    job = None if self._closed else self._take()
            self._run(job)

    def _run(self, job: Job) -> None:
        try:
            outcome = self._execute(job)
        except FetchError as exc:
            outcome = exc
        except Exception as exc:  # a defect must not leave the tick unanswered or the slot taken
            log.exception("ingestion job failed")
            outcome = FetchError(IngestReason.SOURCE_UNAVAILABLE, f"the runner failed on this source "
                                                                  f"({type(exc).__name__})")
        with self._cond:
            job.done = True
            self._jobs.pop(job.key, None)
            self._by_source[job.key[0]] -= 1
            if not self._by_source[job.key[0]]:
                del self._by_source[job.key[0]]
            self._by_host[job.host] -= 1
            if not self._by_host[job.host]:
                del self._by_host[job.host]
            tasks, closed = list(job.tasks), self._closed
            self._cond.notify()  # a freed slot lets at most one waiting job start
        if closed:
            return
        for task, spec in tasks:
            try:
                self._emit(self._finish(task, spec, outcome))
            except Exception:
                log.exception("an ingestion result could not be sent")
