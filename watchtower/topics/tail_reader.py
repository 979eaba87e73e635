"""`TailReader`: every partition of one topic, read_committed, each from a given offset on, for as long as it lives.

A process that keeps a fold of a whole topic up to date (the ingestion scheduler's and aggregators'
view of ``events``) catches up first, then follows the tail from where the catch-up stopped. The
reader is assigned the partitions (it never joins its group, never commits), reads them
``read_committed`` (an aborted transaction never shows) and answers each record as a
`records.Record`. A reader that waits for a fuller fetch costs the broker a few fetches a
second instead of one per record written (`fetch_wait_ms`, `fetch_min_bytes`).

Transient client errors are the client's to retry: they are logged, never raised. A client that
failed for good raises `BrokerError`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from watchtower.topics.batches import failed_fatally
from watchtower.topics.connection import kafka_config
from watchtower.topics.errors import BrokerError
from watchtower.topics.metadata import partitions
from watchtower.topics.records import Record, record_of

log = logging.getLogger("watchtower.topics.tail_reader")


class TailReader:
    """Follows every partition of `topic`, partition p from offset ``starts[p]`` (from its beginning
    when `starts` has no entry for it); `group_prefix` names its (never joined) group.

    `fetch_wait_ms` and `fetch_min_bytes`: how long the broker may hold a fetch back, and for how
    many bytes (the client's defaults when None). `TopicUnavailableError` at construction when the
    topic is not served. Not thread-safe: one thread polls it.
    """

    def __init__(self, bootstrap: str, topic: str, *, group_prefix: str, starts: Mapping[int, int] | None = None,
                 fetch_wait_ms: int | None = None, fetch_min_bytes: int | None = None) -> None:
        self.topic = topic
        fetch = {"fetch.wait.max.ms": fetch_wait_ms, "fetch.min.bytes": fetch_min_bytes}
        self._consumer = Consumer(kafka_config(bootstrap, **{
            "group.id": f"{group_prefix}-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
            "isolation.level": "read_committed", "auto.offset.reset": "earliest",
            **{k: v for k, v in fetch.items() if v is not None}}))
        try:
            #: the topic's partitions, ascending
            self.partitions = partitions(self._consumer, topic)
        except BaseException:
            self._consumer.close()
            raise
        begin = dict(starts or {})
        self._consumer.assign([TopicPartition(topic, p, begin.get(p, OFFSET_BEGINNING)) for p in self.partitions])

    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        """Up to `max_records` records, in log order per partition, waiting up to `timeout_s` for
        them (the client's ``consume``). `BrokerError` when the client failed for good."""
        out: list[Record] = []
        for msg in self._consumer.consume(max_records, timeout_s):
            error = msg.error()
            if error is None:
                out.append(record_of(msg))
            elif failed_fatally(error):
                raise BrokerError(str(error))
            elif error.code() != KafkaError._PARTITION_EOF:
                log.warning("%s reader: %s", self.topic, error)
        return out

    def close(self) -> None:
        """Leave the partitions."""
        self._consumer.close()
