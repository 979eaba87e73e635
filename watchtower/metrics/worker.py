"""Metrics of the stream worker (`workers.command_processor`), service label ``worker``.

Counted when a batch's transaction commits, never when a command is decided: an aborted batch is
decided again, and its commands must not count twice. Per command the hot path adds one dict
increment (`BatchMetrics.decided`); the labelled children are bound once and reused.

- ``watchtower_worker_commands_total{method, outcome}``: commands and forwards in committed batches;
  ``method`` is the signed command's method (``publish``, ...), a forward's type name, or
  ``unknown`` for a record refused before it could be routed; ``outcome`` is ``ok`` or the spec code
  the caller was refused with (``MALFORMED_RECORD``, ``STALE_SEQUENCE``, ...).
- ``watchtower_worker_batch_records``: records per committed batch (histogram).
- ``watchtower_worker_commit_seconds``: ``send_offsets_to_transaction`` + ``commit_transaction``.
- ``watchtower_worker_batch_seconds``: a whole batch, begin to commit (deciding included).
- ``watchtower_worker_aborted_batches_total``: batches whose transaction failed.
- ``watchtower_worker_lane_yields_total``: transactions of ingested publishes ended early for a
  client's command.
- ``watchtower_worker_owned_partitions``, ``watchtower_worker_state{state}`` (1 for the current one),
  ``watchtower_worker_unsnapshotted_events{partition}`` and
  ``watchtower_worker_snapshot_age_seconds{partition}`` (how long the oldest event not yet in a
  snapshot has waited; 0 when every event is in one): read from the worker at scrape time.
- quarantines, fences and recoveries: `metrics.common`, ``service="worker"``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any, Final, Protocol

from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

SERVICE: Final = "worker"
UNKNOWN_METHOD: Final = "unknown"
OK: Final = "ok"
STATES: Final = ("starting", "serving", "recovering", "broker_unreachable")

COMMANDS = Counter("watchtower_worker_commands_total",
                   "Commands and forwards in committed batches, by method and outcome (ok or the spec error code).",
                   ["method", "outcome"])
BATCH_RECORDS = Histogram("watchtower_worker_batch_records", "Records per committed batch.",
                          buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000))
COMMIT_SECONDS = Histogram("watchtower_worker_commit_seconds",
                           "send_offsets_to_transaction plus commit_transaction of a batch.",
                           buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10))
BATCH_SECONDS = Histogram("watchtower_worker_batch_seconds", "A committed batch from begin to commit.",
                          buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10))
ABORTED = Counter("watchtower_worker_aborted_batches_total", "Batches whose transaction failed (aborted or abandoned).")
LANE_YIELDS = Counter("watchtower_worker_lane_yields_total",
                      "Transactions of ingested publishes ended early for a client's command (docs/ingestion.md).")


def method_label(command: Any) -> str:
    """A routed command's method, or a forward's type name: both from closed sets."""
    method = getattr(command, "method", None)
    return str(method) if method is not None else type(command).__name__


def refusal_code(reply: bytes | None) -> str:
    """The spec code of an encoded refusal (``{"ok": false, "error": {"code": ...}}``)."""
    try:
        return str(json.loads(reply or b"")["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return "WATCHTOWER_ERROR"


class BatchMetrics:
    """What one worker counts per batch, published when the batch commits."""

    def __init__(self) -> None:
        self._pending: dict[tuple[str, str], int] = {}
        self._children: dict[tuple[str, str], Any] = {}
        self._started = 0.0

    def begin(self) -> None:
        self._pending.clear()
        self._started = time.perf_counter()

    def decided(self, method: str, outcome: str) -> None:
        key = (method, outcome)
        self._pending[key] = self._pending.get(key, 0) + 1

    def committed(self, records: int, commit_started: float) -> None:
        now = time.perf_counter()
        for key, count in self._pending.items():
            child = self._children.get(key)
            if child is None:
                child = self._children[key] = COMMANDS.labels(*key)
            child.inc(count)
        self._pending.clear()
        BATCH_RECORDS.observe(records)
        COMMIT_SECONDS.observe(now - commit_started)
        BATCH_SECONDS.observe(now - self._started)

    def aborted(self) -> None:
        self._pending.clear()
        ABORTED.inc()


class _Health(Protocol):
    def snapshot(self) -> dict[str, Any]: ...


class _Worker(Protocol):
    @property
    def health(self) -> _Health: ...

    @property
    def snapshots(self) -> Any: ...


class WorkerCollector(Collector):
    """Scrape-time gauges of one stream worker (module docstring)."""

    def __init__(self, worker: _Worker) -> None:
        self.worker = worker

    def collect(self) -> Iterator[GaugeMetricFamily]:
        doc = self.worker.health.snapshot()
        owned = GaugeMetricFamily("watchtower_worker_owned_partitions", "Commands partitions this worker owns.")
        owned.add_metric([], len(doc["partitions"]))
        yield owned
        state = GaugeMetricFamily("watchtower_worker_state", "1 for the worker's current state.", labels=["state"])
        for name in STATES:
            state.add_metric([name], 1.0 if doc["state"] == name else 0.0)
        yield state
        # SnapshotPolicy's bookkeeping: events written per partition since its last snapshot, and
        # since when (monotonic). Read, never changed.
        pending: dict[int, int] = dict(getattr(self.worker.snapshots, "_pending", {}))
        since: dict[int, float] = dict(getattr(self.worker.snapshots, "_since", {}))
        events = GaugeMetricFamily("watchtower_worker_unsnapshotted_events",
                                   "Events of an owned partition written since its last snapshot.",
                                   labels=["partition"])
        age = GaugeMetricFamily("watchtower_worker_snapshot_age_seconds",
                                "How long the oldest event not yet in a snapshot has waited (0: none waits).",
                                labels=["partition"])
        now = time.monotonic()
        for p in doc["partitions"]:
            waiting = pending.get(p, 0)
            events.add_metric([str(p)], waiting)
            age.add_metric([str(p)], now - since[p] if waiting and p in since else 0.0)
        yield events
        yield age
