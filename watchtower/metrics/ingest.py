"""Metrics of the ingestion processes: the aggregator beside the scheduler, and each runner.

Read from their own counters at scrape time (`Aggregator.health`, `Runner.health`), so the ingest
loop pays nothing. Labels are bounded: a spec error code or a named quarantine reason, and an
`IngestFailed` reason code; never a stream id or an address.

Aggregator (service ``ingest``): ``watchtower_ingest_tasks_total`` (tasks accepted),
``watchtower_ingest_published_total`` (ticks published), ``watchtower_ingest_failed_total{reason}``
(ticks that ended in an IngestFailed), ``watchtower_ingest_quarantined_total{code}`` (tasks and
results refused), ``watchtower_ingest_pending_tasks`` (ticks waiting for results), and
``watchtower_ingest_tick_to_ack_seconds{quantile}`` (tick start to publish acknowledged, over the
last publishes; absent before the first). Its send window (`ingest.window`):
``watchtower_ingest_send_window_limit``, ``watchtower_ingest_send_window_in_flight``,
``watchtower_ingest_send_window_held`` (streams waiting for room) and
``watchtower_ingest_send_window_base_rtt_seconds`` (absent before the first answer).

Runner (service ``runner``): ``watchtower_runner_results_total``, ``watchtower_runner_late_total``
(tasks skipped past their deadline) and ``watchtower_runner_quarantined_total{code}``.

Both (`ingest.priority`): ``watchtower_ingest_stepping_back`` (1 while the process has stepped back
from the CPU for the serving path) and, with ``WATCHTOWER_INGEST_YIELD=auto``,
``watchtower_ingest_host_idle_ratio`` (the host's idle CPU over the last seconds, which decides it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


def _total(name: str, text: str, value: float) -> CounterMetricFamily:
    counter = CounterMetricFamily(name, text)
    counter.add_metric([], value)
    return counter


def _by(name: str, text: str, label: str, counts: Mapping[str, Any]) -> CounterMetricFamily:
    counter = CounterMetricFamily(name, text, labels=[label])
    for key, value in sorted(counts.items()):
        counter.add_metric([str(key)], float(value))
    return counter


class AggregatorCollector(Collector):
    """Scrape-time metrics of the ingestion aggregator (module docstring)."""

    def __init__(self, aggregator: Any) -> None:
        self.aggregator = aggregator

    def collect(self) -> Iterator[Metric]:
        health = self.aggregator.health()
        yield _total("watchtower_ingest_tasks", "Ingestion tasks accepted from the scheduler.", health["tasks"])
        yield _total("watchtower_ingest_published", "Ingestion ticks published.", health["published"])
        yield _by("watchtower_ingest_failed", "Ingestion ticks that ended in an IngestFailed, by reason.",
                  "reason", health["failed"])
        yield _by("watchtower_ingest_quarantined", "Ingestion tasks and results refused, by code.", "code",
                  health["quarantined"])
        pending = GaugeMetricFamily("watchtower_ingest_pending_tasks", "Ingestion ticks waiting for results.")
        pending.add_metric([], health["pending"])
        yield pending
        lag = health.get("tick_to_ack_ms")
        summary = GaugeMetricFamily("watchtower_ingest_tick_to_ack_seconds",
                                    "Tick start to publish acknowledged, over the last publishes.",
                                    labels=["quantile"])
        if lag:
            summary.add_metric(["0.5"], lag["p50"] / 1000)
            summary.add_metric(["0.99"], lag["p99"] / 1000)
        yield summary
        window = health.get("window") or {}
        for key, text in (("limit", "Publishes and reports the aggregator may have in flight now."),
                          ("in_flight", "Publishes and reports in flight."),
                          ("held", "Streams waiting for room in the send window."),
                          ("base_rtt_ms", "The least command round trip of the last 10 s.")):
            if window.get(key) is None:
                continue
            seconds = key == "base_rtt_ms"
            gauge = GaugeMetricFamily("watchtower_ingest_send_window_" + ("base_rtt_seconds" if seconds else key), text)
            gauge.add_metric([], float(window[key]) / (1000 if seconds else 1))
            yield gauge


class RunnerCollector(Collector):
    """Scrape-time metrics of one ingestion runner (module docstring)."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner

    def collect(self) -> Iterator[Metric]:
        health = self.runner.health()
        yield _total("watchtower_runner_results", "Results this runner sent.", health["results"])
        yield _total("watchtower_runner_late", "Tasks this runner skipped past their deadline.", health["late"])
        yield _by("watchtower_runner_quarantined", "Tasks this runner refused, by code.", "code",
                  health["quarantined"])


class PriorityCollector(Collector):
    """Whether an ingestion process has stepped back from the CPU now (`ingest.priority.describe`)."""

    def __init__(self, priority: Callable[[], Mapping[str, Any]]) -> None:
        self.priority = priority  # not `describe`: the registry would take it for the metrics' descriptions

    def collect(self) -> Iterator[Metric]:
        how = self.priority()
        back = how.get("mode") == "always" or bool(how.get("yielding"))
        stepping = GaugeMetricFamily(
            "watchtower_ingest_stepping_back",
            "1 while this ingestion process has stepped back from the CPU for the serving path.")
        stepping.add_metric([], 1.0 if back else 0.0)
        yield stepping
        if how.get("host_idle") is not None:
            idle = GaugeMetricFamily("watchtower_ingest_host_idle_ratio",
                                     "The host's idle CPU share over the last seconds (it decides stepping back).")
            idle.add_metric([], float(how["host_idle"]))
            yield idle
