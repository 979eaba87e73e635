"""Metrics of a projection worker (the read API and its live fold, `projections.catch_up`).

- ``watchtower_projection_fold_lag_records{topic, partition}``: per owned partition of each folded
  topic, the log end offset minus the fold's position: the records committed but not folded yet,
  plus the commit markers among them (one per transaction); 0 once the fold passed the end.
- ``watchtower_projection_fold_lag_seconds{partition}``: 0 when the partition has folded
  everything; otherwise the age of its newest folded record (its Kafka timestamp), or, before
  anything was folded since the assignment, how long the fold has been running. So a fold that
  falls behind shows a growing age, and one that caught up shows 0.
- ``watchtower_projection_serving_partitions`` / ``..._catching_up_partitions``: owned partitions
  that answer reads, and those still folding their log (reads answer NOT_READY).
- ``watchtower_projection_folded_records_total``: records folded (``rate()`` of it: folded per second).
- ``watchtower_projection_open_long_polls``: ``get_since`` long polls waiting right now.
- ``watchtower_projection_payload_cache_hits_total`` / ``..._misses_total`` / ``..._bytes``: the
  payload cache of ``get_since`` (`PayloadCacheMeter`).
- HTTP requests, ``get_since`` latency and NOT_READY answers (status 503): `metrics.http`, whose
  ``route`` label is ``/v1/streams/{stream_id}/messages`` for ``get_since``.

The lag is measured by the fold's own reader thread, at most once per `LAG_EVERY_S`, from
librdkafka's cached watermarks (no request to a broker); the scrape reads the last measurement.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from prometheus_client import Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from watchtower.metrics.common import topic_role

SERVICE: Final = "projection"
LAG_EVERY_S: Final = 1.0

FOLDED = Counter("watchtower_projection_folded_records_total", "Records folded by the projection.")
OPEN_LONG_POLLS = Gauge("watchtower_projection_open_long_polls", "get_since long polls waiting for a head.")


@dataclass(frozen=True)
class PartitionLag:
    """One measurement of a topic partition: records behind, and the newest folded record's time."""

    behind: int
    newest_folded_ms: int | None


class FoldLagBoard:
    """The latest lag measurement of each owned partition, written by the fold, read by scrapes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._partitions: list[int] = []
        self._serving: set[int] = set()
        self._since = time.time()
        self._lag: dict[tuple[str, int], PartitionLag] = {}

    def assigned(self, partitions: list[int]) -> None:
        """A new assignment: forget the old partitions' measurements."""
        with self._lock:
            self._partitions = sorted(partitions)
            self._serving = set()
            self._since = time.time()
            self._lag = {}

    def measured(self, lag: dict[tuple[str, int], PartitionLag], serving: set[int]) -> None:
        with self._lock:
            self._lag = {**self._lag, **lag}
            self._serving = set(serving)

    def lag_seconds(self, now_s: float | None = None) -> dict[int, float]:
        """Per owned partition, the lag in seconds (module docstring)."""
        now = time.time() if now_s is None else now_s
        with self._lock:
            out: dict[int, float] = {}
            for p in self._partitions:
                entries = [v for (_t, q), v in self._lag.items() if q == p]
                if entries and all(e.behind <= 0 for e in entries):
                    out[p] = 0.0
                    continue
                newest = max((e.newest_folded_ms for e in entries if e.newest_folded_ms is not None), default=None)
                out[p] = max(0.0, now - (newest / 1000 if newest is not None else self._since))
            return out

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            lag, partitions, serving = dict(self._lag), list(self._partitions), set(self._serving)
        records = GaugeMetricFamily("watchtower_projection_fold_lag_records",
                                    "Records committed but not folded yet, per owned topic partition.",
                                    labels=["topic", "partition"])
        for (topic, p), entry in sorted(lag.items()):
            if p in partitions:
                records.add_metric([topic_role(topic), str(p)], max(0, entry.behind))
        yield records
        seconds = GaugeMetricFamily("watchtower_projection_fold_lag_seconds",
                                    "0 when folded up to the log end, else the age of the newest folded record.",
                                    labels=["partition"])
        for p, value in sorted(self.lag_seconds().items()):
            seconds.add_metric([str(p)], value)
        yield seconds
        for name, value, text in (
                ("serving", len(serving & set(partitions)), "Owned partitions that answer reads."),
                ("catching_up", len(set(partitions) - serving), "Owned partitions still folding their log.")):
            gauge = GaugeMetricFamily(f"watchtower_projection_{name}_partitions", text)
            gauge.add_metric([], value)
            yield gauge


class _BoardCollector(Collector):
    def __init__(self, board: FoldLagBoard) -> None:
        self.board = board

    def collect(self) -> Iterator[Metric]:
        return self.board.collect()


#: The one board of this process (one projection per process).
BOARD = FoldLagBoard()


def collector() -> Collector:
    """What the projection's main registers with `exposition.start_metrics`."""
    return _BoardCollector(BOARD)


class PayloadCacheMeter(Collector):
    """``watchtower_projection_payload_cache_{hits,misses}_total`` and ``..._bytes``: lookups of
    ``get_since`` payloads in the projection's cache (`projections.log_reader.PayloadCache.get`),
    counted by a thin wrapper around the cache's ``get`` (two list increments, no lock; hit ratio:
    ``rate(hits) / (rate(hits) + rate(misses))``), and the bytes the cache holds."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache
        self.counts = [0, 0]  # hits, misses
        original: Callable[[str, int], bytes | None] = cache.get
        counts = self.counts

        def get(stream_id: str, sequence: int) -> bytes | None:
            value = original(stream_id, sequence)
            counts[value is None] += 1
            return value

        cache.get = get

    def collect(self) -> Iterator[Metric]:
        for name, value, text in (("hits", self.counts[0], "get_since payloads found in the cache."),
                                  ("misses", self.counts[1], "get_since payloads read back from the log.")):
            counter = CounterMetricFamily(f"watchtower_projection_payload_cache_{name}", text)
            counter.add_metric([], value)
            yield counter
        size = GaugeMetricFamily("watchtower_projection_payload_cache_bytes", "Bytes the payload cache holds.")
        size.add_metric([], getattr(self.cache, "bytes", 0))
        yield size
