"""The projection's Faust app: at-least-once delivery, reading only committed records.

Faust reads ``read_committed`` only in its ``exactly_once`` mode, and that mode brings per-partition
transactional producers whose commits race rebalances: a commit fenced by the partition's new
owner crashes the worker (``ProducerFenced``). The projection writes nothing to Kafka, so it needs
none of that: it needs to never see a record of an aborted or open transaction, and to fold each
record once, which the position stored with its state gives (`partitions.OwnedPartitions`).

`ProjectionApp` is a plain at-least-once Faust app whose consumer reads ``read_committed``.

It runs without Faust's `Monitor` sensor: the monitor times every message, event and web request
(into in-memory statistics nothing here reads), and on the fold's hot path that bookkeeping cost
as much as folding. The projection's own health and counters are what operators read.
"""

from __future__ import annotations

from typing import Any

import faust
from faust.transport.drivers import aiokafka as faust_aiokafka


class _ReadCommittedThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        # aiokafka hands this to its fetcher in start(), which runs after this returns.
        consumer._isolation_level = "read_committed"
        return consumer


class _ReadCommittedConsumer(faust_aiokafka.Consumer):
    """Faust's consumer, which fetches no record of the topics the app folds with its own reader.

    Those topics stay subscribed, so the group assigns them (co-partitioned, owners' URLs
    published), but their partitions are never active here: Faust's `getmany` asks for none of
    their records, and its stalled-stream checks skip them.
    """

    def _new_consumer_thread(self) -> _ReadCommittedThread:
        return _ReadCommittedThread(self, loop=self.loop, beacon=self.beacon)

    def _folded_elsewhere(self) -> frozenset[str]:
        return frozenset(getattr(self.app, "folded_elsewhere", ()))

    def _set_active_tps(self, tps: Any) -> Any:
        active = super()._set_active_tps(tps)
        elsewhere = self._folded_elsewhere()
        active.difference_update({tp for tp in active if tp.topic in elsewhere})
        return active

    def resume_partitions(self, tps: Any) -> None:
        elsewhere = self._folded_elsewhere()
        super().resume_partitions({tp for tp in tps if tp.topic not in elsewhere})

    def verify_event_path(self, now: float, tp: Any) -> None:
        if tp.topic in self._folded_elsewhere():
            return None  # no stream reads it here, by design
        return super().verify_event_path(now, tp)


class _ReadCommittedTransport(faust_aiokafka.Transport):
    Consumer = _ReadCommittedConsumer


class ProjectionApp(faust.App):
    """A Faust app whose worker consumer reads only committed records, at least once."""

    def __init__(self, app_id: str, *, folded_elsewhere: frozenset[str] = frozenset(), **settings: Any) -> None:
        super().__init__(app_id, processing_guarantee="at_least_once", **settings)
        #: Topics assigned through this app whose records its consumer never fetches (`catch_up`
        #: folds them with its own reader).
        self.folded_elsewhere = folded_elsewhere

    def on_init_dependencies(self) -> Any:
        dependencies = super().on_init_dependencies()
        self.sensors.remove(self.monitor)  # added by Faust just above; see the module docstring
        return dependencies

    def _new_transport(self) -> Any:
        return _ReadCommittedTransport(self.conf.broker_consumer, self)

