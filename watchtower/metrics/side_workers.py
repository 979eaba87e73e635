"""Metrics of the transactional side workers (`workers.tx_worker`): push delivery and replay.

Read from the worker's health counters at scrape time, so the hot path pays nothing; ``service``
is the worker's kind (``delivery`` or ``replay``).

Every side worker: ``watchtower_tx_worker_state{service, state}`` (1 for the current state),
``watchtower_tx_worker_owned_partitions{service}``,
``watchtower_tx_worker_aborted_transactions_total{service}``, and the shared quarantine, fence and
recovery counters of `metrics.common`.

Delivery: ``watchtower_delivery_deliveries_total``, ``watchtower_delivery_transactions_total``,
``watchtower_delivery_blocks_total`` (blocks in which deliveries were committed),
``watchtower_delivery_pending`` (an upper bound of the (subscriber, message) pairs still owed),
``watchtower_delivery_dropped`` (pairs that fell out of the owned streams' bounded backlogs),
``watchtower_delivery_streams`` (schedules held), and the histogram
``watchtower_delivery_block_deliveries`` (deliveries per committed block transaction: the block
budget used).

Replay: ``watchtower_replay_replays{status}`` (replays held per status; ``running`` are the active
ones), ``watchtower_replay_records_reemitted_total``, ``watchtower_replay_slices_total``, and the
checkpoint lag (`replay_progress`, set by the worker with its health counts, at most once a
second): ``watchtower_replay_remaining_sequences`` (what the pending and running replays still
have to handle) and ``watchtower_replay_checkpoint_age_seconds`` (the oldest last checkpoint of a
running replay).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

from prometheus_client import Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from watchtower.metrics import common

STATES: Final = ("starting", "serving", "exiting")

BLOCK_DELIVERIES = Histogram("watchtower_delivery_block_deliveries",
                             "Push deliveries per committed block transaction (the block budget used).",
                             buckets=(0, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 5000))


def meter_quarantines(health: Any, service: str) -> None:
    """Make `health.quarantine(topic, partition, offset, reason)` also count in the metrics."""
    original: Callable[[str, int, int, str], None] = health.quarantine

    def quarantine(topic: str, partition: int, offset: int, reason: str) -> None:
        common.quarantined(service, topic, reason)
        original(topic, partition, offset, reason)

    health.quarantine = quarantine


class TxWorkerCollector(Collector):
    """Scrape-time metrics of one side worker (module docstring)."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self.service = str(worker.kind)

    def collect(self) -> Iterator[Metric]:
        health, service = self.worker.health, self.service
        state = GaugeMetricFamily("watchtower_tx_worker_state", "1 for the side worker's current state.",
                                  labels=["service", "state"])
        for name in STATES:
            state.add_metric([service, name], 1.0 if health.state == name else 0.0)
        yield state
        owned = GaugeMetricFamily("watchtower_tx_worker_owned_partitions", "Partitions this side worker owns.",
                                  labels=["service"])
        owned.add_metric([service], len(health.partitions))
        yield owned
        yield _counter("watchtower_tx_worker_aborted_transactions", "Transactions this side worker aborted.",
                       service, health.aborted)
        counters = health.counters()
        if service == "delivery":
            yield _counter("watchtower_delivery_deliveries", "Push deliveries committed.", None, counters["delivered"])
            yield _counter("watchtower_delivery_transactions", "Delivery transactions committed.", None,
                           counters["transactions"])
            yield _counter("watchtower_delivery_blocks", "Blocks in which deliveries were committed.", None,
                           counters["blocks"])
            for name, value, text in (("pending", counters["pending"], "Upper bound of the pushes still owed."),
                                      ("dropped", counters["dropped"], "Pushes that fell out of the bounded backlogs."),
                                      ("streams", counters["streams"], "Push schedules held.")):
                gauge = GaugeMetricFamily(f"watchtower_delivery_{name}", text)
                gauge.add_metric([], value)
                yield gauge
        elif service == "replay":
            replays = GaugeMetricFamily("watchtower_replay_replays", "Replays held, by status.", labels=["status"])
            for status, count in sorted(counters["replays"].items()):
                replays.add_metric([str(status)], count)
            yield replays
            yield _counter("watchtower_replay_records_reemitted", "Records re-emitted to deliveries.", None,
                           counters["reemitted"])
            yield _counter("watchtower_replay_slices", "Replay slices committed.", None, counters["slices"])


def _counter(name: str, text: str, service: str | None, value: float) -> CounterMetricFamily:
    if service is None:
        counter = CounterMetricFamily(name, text)
        counter.add_metric([], value)
    else:
        counter = CounterMetricFamily(name, text, labels=["service"])
        counter.add_metric([service], value)
    return counter


REPLAY_REMAINING = Gauge("watchtower_replay_remaining_sequences",
                         "Sequences the pending and running replays still have to handle.")
REPLAY_CHECKPOINT_AGE = Gauge("watchtower_replay_checkpoint_age_seconds",
                              "Age of the oldest last checkpoint among the running replays (0: none runs).")
ACTIVE: Final = ("pending", "running")


def replay_progress(views: Iterable[Any], now_ms: int) -> None:
    """Set the replay progress gauges from the worker's replay views (called with its health counts)."""
    remaining, oldest = 0, 0.0
    for view in views:
        if view.status not in ACTIVE:
            continue
        remaining += max(0, view.end_exclusive - view.next_sequence)
        if view.status == "running" and view.updated_at_ms is not None:
            oldest = max(oldest, (now_ms - view.updated_at_ms) / 1000)
    REPLAY_REMAINING.set(remaining)
    REPLAY_CHECKPOINT_AGE.set(oldest)
