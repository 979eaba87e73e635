"""Metrics of the SSE route (`gateway.sse`), in the gateway and in the API process that mount it.

- ``watchtower_sse_open_connections``: SSE connections streaming now;
- ``watchtower_sse_lagged_closes_total``: connections closed because the reader fell more than
  ``WATCHTOWER_SSE_QUEUE`` events behind (each got an ``event: lagged``);
- ``watchtower_sse_events_total``: message events written to connections (counted per write, one
  increment per flush, not per event).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any

from prometheus_client import REGISTRY, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

EVENTS = Counter("watchtower_sse_events_total", "Message events written to SSE connections.")

_hubs: weakref.WeakSet[Any] = weakref.WeakSet()


def track(hub: Any) -> None:
    """Read `hub.connections` and `hub.lagged` at every scrape (as long as the hub lives)."""
    _hubs.add(hub)


class _HubCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        hubs = list(_hubs)
        open_ = GaugeMetricFamily("watchtower_sse_open_connections", "SSE connections streaming now.")
        open_.add_metric([], sum(h.connections for h in hubs))
        yield open_
        lagged = CounterMetricFamily("watchtower_sse_lagged_closes", "SSE connections closed for lagging behind.")
        lagged.add_metric([], sum(h.lagged for h in hubs))
        yield lagged


REGISTRY.register(_HubCollector())
