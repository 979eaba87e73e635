"""``watchtower_consumer_lag_records{service, topic, partition}``: a Kafka worker's own consumer lag.

Per assigned partition, the end offset librdkafka last learnt from a fetch (its cached watermark:
no request to a broker) minus the consumer's position; partitions not fetched yet are left out.
The positions skip the commit markers of transactional topics, so a caught-up worker reads 0.

The worker measures on its own thread (`ConsumerLag.measure`, at most once a second, from its
serving loop) and a scrape reads the last measurement: a scrape never calls into a consumer that
the worker may be closing or replacing at that moment.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any, Final

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from watchtower.metrics.common import topic_role

log = logging.getLogger("watchtower.metrics")

EVERY_S: Final = 1.0


class ConsumerLag(Collector):
    """The last lag measurement of one worker's consumer."""

    def __init__(self, service: str) -> None:
        self.service = service
        self._rows: list[tuple[str, str, float]] = []
        self._next = 0.0

    def measure(self, consumer: Any) -> None:
        """Measure now if the last measurement is a second old; call it from the consumer's own thread."""
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + EVERY_S
        rows = []
        try:
            for tp in consumer.position(consumer.assignment()):
                if tp.offset < 0:
                    continue
                _low, high = consumer.get_watermark_offsets(tp, cached=True)
                if high >= 0:
                    rows.append((topic_role(tp.topic), str(tp.partition), float(max(0, high - tp.offset))))
        except Exception as exc:  # not assigned yet, closing: no new reading this time
            log.debug("no consumer lag reading: %s", exc)
            return
        self._rows = rows

    def collect(self) -> Iterator[Metric]:
        gauge = GaugeMetricFamily("watchtower_consumer_lag_records",
                                  "Records between this worker's consumer position and the partition's end.",
                                  labels=["service", "topic", "partition"])
        for topic, partition, lag in self._rows:
            gauge.add_metric([self.service, topic, partition], lag)
        yield gauge
