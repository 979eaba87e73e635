"""The aggregator's input side: tasks and runners' results in, checked, matched and counted.

`Intake` is the part of `aggregator.Aggregator` that reads ``ingest.tasks`` and ``ingest.results``
(one reader thread calls it; the signature checks run outside the lock, so the publishing threads
are never held up by them). A task must be signed by this deployment's scheduler and carry its
stream's definition; a result must come from a registered runner selected for its task, be
signed, and be canonical JSON. Each accepted task waits in `pending` for its runners' answers,
judged as the proof rule counts them (`Outcome`); a result read before its task waits in `early`
(at most `MAX_EARLY`). Hostile input never reaches a decision: it is counted in `quarantined` by
spec code and logged at most once per code every `QUARANTINE_LOG_S`. A registered, selected
runner's result that breaks ``result_schema`` counts as that runner's SCHEMA_MISMATCH answer.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import Counter, OrderedDict
from typing import Final

from watchtower.ingest.view import IngestionView
from watchtower.protocol.errors import SchemaMismatchError, WatchtowerError
from watchtower.protocol.ingestion import MAX_RESULT_BYTES, IngestReason
from watchtower.protocol.ingestion.proof import Outcome
from watchtower.protocol.ingestion.records import (
    IngestResult,
    IngestTask,
    check_batch_entry,
    check_result,
    verify_result_batch,
    verify_task,
    verify_task_batch,
)
from watchtower.protocol.ingestion.results import canonical_json, parse_result, validate_result
from watchtower.schemas.ingest_records import batch_results, batch_tasks, decode_results, decode_tasks

# The aggregator's logger: a quarantine is the aggregator's to report.
log = logging.getLogger("watchtower.ingest.aggregator")

MAX_EARLY: Final = 10_000
"""Results read before their task (another topic) wait here, oldest dropped first."""
QUARANTINE_LOG_S: Final = 10.0


@dataclasses.dataclass
class Pending:
    """An accepted task and the answers of its runners judged so far."""

    task: IngestTask
    outcomes: list[Outcome] = dataclasses.field(default_factory=list)


class Intake:
    """The input side of an `Aggregator` (module docstring); the aggregator makes the state below."""

    view: IngestionView
    scheduler: str
    lock: threading.RLock
    pending: dict[str, dict[int, Pending]]
    done: dict[str, int]
    early: OrderedDict[tuple[str, int], list[tuple[IngestResult, bool]]]
    quarantined: Counter[str]
    _logged: dict[str, tuple[float, int]]
    tasks: int
    dirty: set[str]

    def _quarantine(self, code: str, why: str, where: str) -> None:
        """Count a refused record; log it, at most once per code every `QUARANTINE_LOG_S` (a flood
        of late or hostile records must not turn into a flood of log lines: the counters are exact)."""
        now = time.monotonic()
        with self.lock:
            self.quarantined[code] += 1
            last, held = self._logged.get(code, (-QUARANTINE_LOG_S, 0))
            if now - last < QUARANTINE_LOG_S:
                self._logged[code] = (last, held + 1)
                return
            self._logged[code] = (now, 0)
        more = f" ({held} more {code} since the last line)" if held else ""
        log.warning("quarantined %s: %s: %s%s", where, code, why, more)

    def on_task(self, value: bytes | None, where: str = "ingest.tasks") -> str | None:
        """Take one single-task ``ingest.tasks`` record; the stream id of a task this aggregator
        accepted (see `on_tasks`, which also takes batches)."""
        accepted = self.on_tasks(value, where)
        return accepted[0] if accepted else None

    def on_tasks(self, value: bytes | None, where: str = "ingest.tasks") -> list[str]:
        """Take one ``ingest.tasks`` record, a task or a signed batch of them; the stream ids of the
        tasks this aggregator accepted.

        One reader thread calls this and `on_results`; the signature checks run outside the lock,
        so the publishing threads are never held up by them."""
        try:
            record = decode_tasks(value)
            if isinstance(record, IngestTask):
                verify_task(record, self.scheduler)
                tasks, batched = [record], False
            else:
                verify_task_batch(record, self.scheduler)
                tasks, batched = batch_tasks(record), True
        except WatchtowerError as exc:
            self._quarantine(exc.code, exc.message, where)
            return []
        accepted = []
        for task in tasks:
            if batched:
                try:
                    verify_task(task, self.scheduler, batch_verified=True)
                except WatchtowerError as exc:
                    self._quarantine(exc.code, exc.message, where)
                    continue
            if self._take_task(task, where):
                accepted.append(task.stream_id)
        return accepted

    def _take_task(self, task: IngestTask, where: str) -> bool:
        stream = self.view.streams.get(task.stream_id)
        if stream is not None and task.task_definition_json != self.view.template(stream).task_definition_json:
            self._quarantine("MALFORMED_RECORD", "the task's definition is not the stream's", where)
            return False
        with self.lock:
            ticks = self.pending.setdefault(task.stream_id, {})
            if task.tick in ticks or task.tick <= self.done.get(task.stream_id, 0):
                return True  # a task read twice (the reader resumed earlier than it stopped)
            pending = ticks[task.tick] = Pending(task)
            self.tasks += 1
            self.dirty.add(task.stream_id)
            early = self.early.pop((task.stream_id, task.tick), [])
        for result, batched in early:
            self._accept(pending, result, where, batched)
        return True

    def on_result(self, value: bytes | None, where: str = "ingest.results") -> None:
        """Take one ``ingest.results`` record (see `on_results`)."""
        self.on_results(value, where)

    def on_results(self, value: bytes | None, where: str = "ingest.results") -> None:
        """Take one ``ingest.results`` record: a runner's result, or its signed batch of results
        (verified once: the batch's runner must be registered, and every result in it must be that
        runner's). See `on_tasks`."""
        try:
            record = decode_results(value)
            if isinstance(record, IngestResult):
                results, batched = [record], False
            else:
                verify_result_batch(record, self.view.registered())
                results, batched = batch_results(record), True
        except WatchtowerError as exc:
            self._quarantine(exc.code, exc.message, where)
            return
        for result in results:
            if batched:
                try:
                    check_batch_entry(result, record)  # type: ignore[arg-type]
                except WatchtowerError as exc:
                    self._quarantine(exc.code, exc.message, where)
                    continue
            self._take_result(result, where, batched)

    def _take_result(self, result: IngestResult, where: str, batched: bool) -> None:
        with self.lock:
            stale = result.tick <= self.done.get(result.stream_id, 0)
            pending = None if stale else self.pending.get(result.stream_id, {}).get(result.tick)
            if not stale and pending is None:
                self.early.setdefault((result.stream_id, result.tick), []).append((result, batched))
                while len(self.early) > MAX_EARLY:
                    self.early.popitem(last=False)
                    self.quarantined["UNMATCHED_RESULT"] += 1
                return
        if pending is None:
            self._quarantine("STALE_SEQUENCE", f"a result for tick {result.tick}, already finished (a replay)", where)
            return
        self._accept(pending, result, where, batched)

    def _accept(self, pending: Pending, result: IngestResult, where: str, batched: bool = False) -> None:
        outcome = self._judge(pending.task, result, where, batched)
        if outcome is None:
            return
        with self.lock:
            self.dirty.add(pending.task.stream_id)
            if any(o.runner == result.runner for o in pending.outcomes):
                self.quarantined["DUPLICATE_RESULT"] += 1
                return
            pending.outcomes.append(outcome)

    def _judge(self, task: IngestTask, result: IngestResult, where: str, batched: bool = False) -> Outcome | None:
        """The runner's answer to `task` as the proof rule counts it, or None when it does not count
        (quarantined). Runs outside the lock: it only reads the task and the runner registry.
        `batched`: the result came in its runner's verified batch."""
        try:
            check_result(result, task, self.view.registered(), batch_verified=batched)
        except WatchtowerError as exc:
            self._quarantine(exc.code, exc.message, where)
            return None
        if result.error is not None:
            return Outcome(result.runner, error=IngestReason(result.error), detail=result.detail)
        data = (result.result_json or "").encode("utf-8")
        if len(data) > MAX_RESULT_BYTES:
            self._count("OVERSIZED_RESULT")
            return Outcome(result.runner, error=IngestReason.OVERSIZED_RESULT)
        try:
            value = parse_result(data)
        except WatchtowerError as exc:
            self._quarantine(exc.code, f"runner {result.runner} sent garbage: {exc.message}", where)
            return None
        try:
            validate_result(value, task.result_schema_json)
        except SchemaMismatchError as exc:
            self._count(exc.code)
            return Outcome(result.runner, error=IngestReason.SCHEMA_MISMATCH)
        return Outcome(result.runner, result=canonical_json(value))

    def _count(self, code: str) -> None:
        with self.lock:
            self.quarantined[code] += 1
