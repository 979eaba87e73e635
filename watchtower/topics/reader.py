"""Read topics from offset 0 to their current end, read_committed: the one log scan.

Rebuilding an aggregate, rebuilding the projections, verifying the archive and the tests all need
"every committed record up to now". Records of aborted transactions are never returned; a
partition counts as finished at its end-of-partition event (empty partitions are finished from
the start).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Collection, Iterator, Sequence

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition


def read_committed(bootstrap: str, topics: Sequence[str], *, partition: int | Collection[int] | None = None,
                   timeout_s: float = 300.0) -> Iterator[Message]:
    """Every committed record of `topics` (only `partition` of each, or only those partitions, if given),
    in log order per partition.

    Raises TimeoutError when the end is not reached within `timeout_s`.
    """
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"wt-scan-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        "log_level": 3,
    })
    try:
        wanted = None if partition is None else {partition} if isinstance(partition, int) else set(partition)
        assignment: list[TopicPartition] = []
        for topic in topics:
            numbers = list(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
            assignment += [TopicPartition(topic, p, OFFSET_BEGINNING) for p in numbers
                           if wanted is None or p in wanted]
        pending = set()
        for tp in assignment:
            low, high = consumer.get_watermark_offsets(tp, timeout=30)
            if high > low:
                pending.add((tp.topic, tp.partition))
        if not pending:
            return
        consumer.assign(assignment)
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {', '.join(topics)} to the end took over {timeout_s:g}s")
            for m in consumer.consume(num_messages=1000, timeout=0.5):
                err = m.error()
                if err is None:
                    yield m
                elif err.code() == KafkaError._PARTITION_EOF:
                    pending.discard((m.topic(), m.partition()))
    finally:
        consumer.close()
