"""The committed records of a topic written within a window of time, read once.

`read_time_window` starts each partition at the first record timestamped at or after the window's
start (the broker's time index) and stops it at the first record at or after the window's end, or
at the partition's end as it was when the read began, whichever comes first: a topic that keeps
being written is still read in bounded time. The reader is assigned the partitions (it never joins
its group, never commits) and reads them ``read_committed``.
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaException, TopicPartition

from watchtower.topics.connection import kafka_config
from watchtower.topics.errors import BrokerError
from watchtower.topics.metadata import partitions
from watchtower.topics.records import Record, record_of

#: The bound of each metadata and offset request.
REQUEST_TIMEOUT_S = 5.0


def read_time_window(bootstrap: str, topic: str, start_ms: int, end_ms: int, *, group_prefix: str,
                     timeout_s: float) -> list[Record]:
    """Every record of `topic` read whose timestamp (Unix ms) lies in [`start_ms`, `end_ms`), in the
    order read (log order per partition). A partition that answers an error contributes what it
    answered before it. `group_prefix` names the reader's (never joined) group.

    `TopicUnavailableError` when the topic is not served; `TimeoutError` when some partition was not
    read to its stop within `timeout_s` (counted once the start offsets are known); `BrokerError`
    when the cluster fails a request."""
    consumer = Consumer(kafka_config(bootstrap, **{
        "group.id": f"{group_prefix}-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
        "isolation.level": "read_committed", "enable.partition.eof": True}))
    try:
        wanted = [TopicPartition(topic, p, start_ms) for p in partitions(consumer, topic, REQUEST_TIMEOUT_S)]
        starts = consumer.offsets_for_times(wanted, timeout=REQUEST_TIMEOUT_S)
        ends = {tp.partition: consumer.get_watermark_offsets(tp, timeout=REQUEST_TIMEOUT_S)[1] for tp in wanted}
        todo = {tp.partition for tp in starts if 0 <= tp.offset < ends[tp.partition]}
        consumer.assign([tp for tp in starts if tp.partition in todo])
        records: list[Record] = []
        deadline = time.monotonic() + timeout_s
        while todo and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            p, offset = msg.partition() or 0, msg.offset() or 0
            if msg.error() is not None:
                todo.discard(p)  # end of partition (or an error: nothing more from it)
                continue
            ts = msg.timestamp()[1]
            if ts >= end_ms or offset + 1 >= ends[p]:
                todo.discard(p)
            if ts >= end_ms or ts < start_ms:
                continue
            records.append(record_of(msg))
        if todo:
            raise TimeoutError(f"topic {topic!r} was not read within {timeout_s:.0f}s")
        return records
    except KafkaException as exc:
        raise BrokerError(str(exc)) from exc
    finally:
        consumer.close()
