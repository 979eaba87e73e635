"""`AssignedReader`: partitions of one topic, read_committed, at the offsets its caller names.

The reader is assigned its partitions (it never joins its group, never commits), so the caller
decides where each one is read from: the end it has now (a live tail, a reply partition), an
offset of its own (a range of an archive, where a fold of the whole topic stopped), or the
partition's beginning (`FROM_BEGINNING`). `fetch` and `take` answer what arrived as plain values: a
`records.Record` for each record and, when the settings ask for end-of-partition events
(``enable.partition.eof``), a `records.EndOfPartition` whenever a partition is read to its
current end. Transient client errors are the client's to retry: they are logged, never raised. A
client that failed for good raises `BrokerError`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any, Final

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from watchtower.topics.batches import failed_fatally
from watchtower.topics.connection import kafka_config
from watchtower.topics.errors import BrokerError
from watchtower.topics.metadata import partitions
from watchtower.topics.records import EndOfPartition, Record, end_of_partition, record_of

log = logging.getLogger("watchtower.topics.assigned_reader")

#: The offset `assign` takes for "from the partition's first record on" (its log start).
FROM_BEGINNING: Final[int] = OFFSET_BEGINNING


class AssignedReader:
    """Reads `topic` where `assign` places it; `group_prefix` names its (never joined) group.

    `settings` are further client settings, as the Kafka client spells them (``log_level``,
    ``enable.partition.eof``, ``fetch.wait.max.ms``, ...); the reader itself sets only its group,
    ``enable.auto.commit`` off and ``isolation.level`` read_committed. Nothing is read until
    `assign`. Not thread-safe: one thread reads it.
    """

    def __init__(self, bootstrap: str, topic: str, *, group_prefix: str, settings: Mapping[str, Any]) -> None:
        self.topic = topic
        self._consumer = Consumer(kafka_config(bootstrap, **{
            "group.id": f"{group_prefix}-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            **settings,
        }))

    def partitions(self) -> list[int]:
        """The topic's partitions, ascending; `TopicUnavailableError` when the cluster does not serve it."""
        return partitions(self._consumer, self.topic)

    def end(self, partition: int, *, timeout_s: float = 30.0, retry_s: float = 0.0) -> int:
        """The partition's high watermark now: the offset the next record written will take (each ask
        waits up to `timeout_s`).

        A retriable refusal (a just-created topic without a leader yet, a leader that just moved) is
        asked again for up to `retry_s`; past that, or for any other failure, `BrokerError`."""
        deadline = time.monotonic() + retry_s
        tp = TopicPartition(self.topic, partition)
        while True:
            try:
                return int(self._consumer.get_watermark_offsets(tp, timeout=timeout_s)[1])
            except KafkaException as exc:
                if time.monotonic() > deadline or not exc.args[0].retriable():
                    raise BrokerError(str(exc)) from exc
                time.sleep(0.2)  # a back-off between two asks of the broker, not a synchronisation

    def assign(self, offsets: Mapping[int, int]) -> None:
        """Read exactly the partitions of `offsets`, each from its offset (`FROM_BEGINNING`: from its
        log start), replacing any assignment."""
        self._consumer.assign([TopicPartition(self.topic, p, o) for p, o in offsets.items()])

    def fetch(self, max_records: int, wait_s: float, *, gather_s: float = 0.0) -> list[Record | EndOfPartition]:
        """What arrived, in log order per partition: the first waited for up to `wait_s`, then up to
        `max_records` in all gathered for up to `gather_s` more (0: only what is already fetched).

        Waiting for the first record only hands a lone record over at once (``consume(n, timeout)``
        holds it until `n` arrived or the whole timeout passed); a burst still comes in one call.
        `BrokerError` when the client failed for good."""
        try:
            first = self._consumer.poll(wait_s)
            if first is None:
                return []
            batch = [first] if max_records <= 1 else [first, *self._consumer.consume(max_records - 1, gather_s)]
        except KafkaException as exc:  # fatal consumer errors only; transient ones come as events
            raise BrokerError(str(exc)) from exc
        return [read for m in batch if (read := self._read(m)) is not None]

    def take(self, max_records: int, timeout_s: float) -> list[Record | EndOfPartition]:
        """Up to `max_records`, in log order per partition, waiting up to `timeout_s` for that many
        (the client's ``consume``: a fold that runs behind its topic takes full batches, and one
        that waits for a fuller fetch costs no loop turn per record). `BrokerError` when the client
        failed for good."""
        try:
            batch = self._consumer.consume(max_records, timeout_s)
        except KafkaException as exc:  # fatal consumer errors only; transient ones come as events
            raise BrokerError(str(exc)) from exc
        return [read for m in batch if (read := self._read(m)) is not None]

    def close(self) -> None:
        """Leave the partitions."""
        self._consumer.close()

    def _read(self, m: Message) -> Record | EndOfPartition | None:
        err = m.error()
        if err is None:
            return record_of(m)
        if err.code() == KafkaError._PARTITION_EOF:
            return end_of_partition(m)
        if failed_fatally(err):
            raise BrokerError(str(err))
        log.warning("%s reader: %s (the client retries)", self.topic, err)
        return None
