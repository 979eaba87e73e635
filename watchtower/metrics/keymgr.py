"""Metrics of the Stream Key Manager (`keymgr.service`, `keymgr.main`).

- ``watchtower_keymgr_operations_total{operation, outcome}``: ``encrypt``, ``decrypt`` and
  ``epoch_keys`` (the sealed-key fetch), by outcome: ``ok`` or the spec code of the refusal
  (``ENTITLEMENT_REQUIRED``, ``NOT_READY``, ...; ``WATCHTOWER_ERROR`` for a failure that is not a
  spec error). A request refused before the operation (its signature, its nonce) is counted by
  `metrics.http` under its route and status.
- ``watchtower_keymgr_operation_seconds{operation}``: time of each operation.
- ``watchtower_keymgr_sealed_streams``: streams whose seed no KEK this process holds can open.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from typing import Any, ParamSpec, TypeVar

from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from watchtower.protocol.errors import WatchtowerError

OPERATIONS = Counter("watchtower_keymgr_operations_total", "Key-manager operations by outcome (ok or spec code).",
                     ["operation", "outcome"])
SECONDS = Histogram("watchtower_keymgr_operation_seconds", "Time of a key-manager operation.", ["operation"],
                    buckets=(.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5))

P = ParamSpec("P")
R = TypeVar("R")


def timed(operation: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Count and time every call of the decorated operation (module docstring)."""
    timer = SECONDS.labels(operation)
    ok = OPERATIONS.labels(operation, "ok")

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            started = time.perf_counter()
            try:
                result = fn(*args, **kwargs)
            except WatchtowerError as err:
                OPERATIONS.labels(operation, err.code).inc()
                raise
            except Exception:
                OPERATIONS.labels(operation, "WATCHTOWER_ERROR").inc()
                raise
            finally:
                timer.observe(time.perf_counter() - started)
            ok.inc()
            return result

        return wrapper

    return decorate


class SealedStreams(Collector):
    """``watchtower_keymgr_sealed_streams`` read from the vault at scrape time."""

    def __init__(self, vault: Any) -> None:
        self.vault = vault

    def collect(self) -> Iterator[Metric]:
        gauge = GaugeMetricFamily("watchtower_keymgr_sealed_streams",
                                  "Streams whose seed no KEK of this process opens.")
        gauge.add_metric([], len(self.vault.sealed_streams))
        yield gauge
