"""``watchtower_consumer_lag_records{service, topic, partition}``: a Kafka worker's own consumer lag.

Per assigned partition, the end offset librdkafka last learnt from a fetch (its cached watermark:
no request to a broker) minus the consumer's position; partitions not fetched yet are left out.
The positions skip the commit markers of transactional topics, so a caught-up worker reads 0.
Read at scrape time from the scrape thread: both calls only read librdkafka's state, and a
consumer that is closing or being replaced makes the scrape skip the metric, never fail.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from watchtower.metrics.common import topic_role

log = logging.getLogger("watchtower.metrics")


class ConsumerLagCollector(Collector):
    """The lag of the consumer `consumer()` returns now (a worker may replace its consumer)."""

    def __init__(self, service: str, consumer: Callable[[], Any]) -> None:
        self.service = service
        self.consumer = consumer

    def collect(self) -> Iterator[Metric]:
        gauge = GaugeMetricFamily("watchtower_consumer_lag_records",
                                  "Records between this worker's consumer position and the partition's end.",
                                  labels=["service", "topic", "partition"])
        try:
            consumer = self.consumer()
            for tp in consumer.position(consumer.assignment()):
                if tp.offset < 0:
                    continue
                _low, high = consumer.get_watermark_offsets(tp, cached=True)
                if high >= 0:
                    gauge.add_metric([self.service, topic_role(tp.topic), str(tp.partition)], max(0, high - tp.offset))
        except Exception as exc:  # closing, replaced, not assigned yet: no reading this time
            log.debug("no consumer lag reading: %s", exc)
        yield gauge
