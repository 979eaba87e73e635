"""The runner's ``kafka_topic`` job: the JSON records of an existing topic, timestamped in the
window before the tick (`protocol.ingestion.topic_window`), read read_committed.

Fences: the deployment's own topics (``<prefix>.…``, Faust's ``wt-…``) and Kafka's (``__…``) are
refused, so a task can never copy, say, the key manager's state into a public feed; at most
`max_records` records and `MAX_RESULT_BYTES` of result; the read stops at each partition's end as
it was when the read began. A record that is not JSON is skipped and counted.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Final

from confluent_kafka import Consumer, KafkaException, TopicPartition

from watchtower.ingest.fetch import FetchError
from watchtower.protocol.constants import BLOCK_INTERVAL_MS, GENESIS_UNIX_MS
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.ingestion import (
    MAX_RESULT_BYTES,
    IngestReason,
    KafkaTopicTask,
    SelectionError,
    apply_selection,
    topic_window,
)
from watchtower.protocol.ingestion.results import canonical_json
from watchtower.topics.connection import kafka_config

READ_TIMEOUT_S: Final = 10.0


def refuse_own_topics(topic: str, prefix: str | None) -> None:
    """FetchError for a topic of this deployment (or Faust's for it)."""
    own = (f"{prefix or 'wt'}.", "wt-")
    if topic.startswith(own):
        raise FetchError(IngestReason.SOURCE_UNAVAILABLE,
                         f"topic {topic!r} belongs to the deployment; ingestion reads only other topics")


def run_kafka_task(task: KafkaTopicTask, tick_height: int, bootstrap: str, prefix: str | None) -> bytes:
    """The result of `task` at `tick_height`: ``{"records", "count", "skipped"}`` as canonical JSON."""
    refuse_own_topics(task.topic, prefix)
    start_ms, end_ms = topic_window(tick_height, task.window_blocks, GENESIS_UNIX_MS, BLOCK_INTERVAL_MS)
    consumer = Consumer(kafka_config(bootstrap, **{
        "group.id": f"wt-ingest-read-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
        "isolation.level": "read_committed", "enable.partition.eof": True}))
    try:
        meta = consumer.list_topics(task.topic, timeout=5).topics.get(task.topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise FetchError(IngestReason.SOURCE_UNAVAILABLE, f"topic {task.topic!r} does not exist")
        wanted = [TopicPartition(task.topic, p, start_ms) for p in sorted(meta.partitions)]
        starts = consumer.offsets_for_times(wanted, timeout=5)
        ends = {tp.partition: consumer.get_watermark_offsets(tp, timeout=5)[1] for tp in wanted}
        todo = {tp.partition for tp in starts if 0 <= tp.offset < ends[tp.partition]}
        consumer.assign([tp for tp in starts if tp.partition in todo])
        records: list[tuple[int, int, int, Any]] = []
        skipped = 0
        deadline = time.monotonic() + READ_TIMEOUT_S
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
            try:
                value = json.loads(msg.value() or b"")
                records.append((ts, p, offset, apply_selection(value, task.select)))
            except (ValueError, SelectionError):
                skipped += 1
        if todo:
            raise FetchError(IngestReason.SOURCE_UNAVAILABLE, f"topic {task.topic!r} was not read within "
                                                              f"{READ_TIMEOUT_S:.0f}s")
    except KafkaException as exc:
        raise FetchError(IngestReason.SOURCE_UNAVAILABLE, f"topic {task.topic!r}: {exc}") from None
    finally:
        consumer.close()
    records.sort(key=lambda r: r[:3])  # by timestamp, then partition and offset: the same for every runner
    kept = [r[3] for r in records[: task.max_records]]
    try:
        result = canonical_json({"records": kept, "count": len(kept), "skipped": skipped})
    except WatchtowerError as exc:
        raise FetchError(IngestReason.SCHEMA_MISMATCH, exc.message) from None
    if len(result) > MAX_RESULT_BYTES:
        raise FetchError(IngestReason.OVERSIZED_RESULT, f"the records are {len(result)} bytes, over {MAX_RESULT_BYTES}")
    return result
