"""The runner's ``kafka_topic`` job: the JSON records of an existing topic, timestamped in the
window before the tick (`protocol.ingestion.topic_window`), read read_committed.

Fences: the deployment's own topics (``<prefix>.…``, Faust's ``wt-…``) and Kafka's (``__…``) are
refused, so a task can never copy, say, the key manager's state into a public feed; at most
`max_records` records and `MAX_RESULT_BYTES` of result; the read stops at each partition's end as
it was when the read began. A record that is not JSON is skipped and counted.
"""

from __future__ import annotations

import json
from typing import Any, Final

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
from watchtower.topics.errors import BrokerError, TopicUnavailableError
from watchtower.topics.time_window import read_time_window

READ_TIMEOUT_S: Final = 10.0
#: The one-off reader's (never joined) consumer group starts with this (a secure broker's ACLs grant it).
READER_GROUP_PREFIX: Final = "wt-ingest-read"


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
    try:
        read = read_time_window(bootstrap, task.topic, start_ms, end_ms, group_prefix=READER_GROUP_PREFIX,
                                timeout_s=READ_TIMEOUT_S)
    except TopicUnavailableError:
        raise FetchError(IngestReason.SOURCE_UNAVAILABLE, f"topic {task.topic!r} does not exist") from None
    except TimeoutError:
        raise FetchError(IngestReason.SOURCE_UNAVAILABLE, f"topic {task.topic!r} was not read within "
                                                          f"{READ_TIMEOUT_S:.0f}s") from None
    except BrokerError as exc:
        raise FetchError(IngestReason.SOURCE_UNAVAILABLE, f"topic {task.topic!r}: {exc}") from None
    records: list[tuple[int, int, int, Any]] = []
    skipped = 0
    for record in read:
        try:
            value = json.loads(record.value or b"")
            records.append((record.timestamp_ms, record.partition, record.offset, apply_selection(value, task.select)))
        except (ValueError, SelectionError):
            skipped += 1
    records.sort(key=lambda r: r[:3])  # by timestamp, then partition and offset: the same for every runner
    kept = [r[3] for r in records[: task.max_records]]
    try:
        result = canonical_json({"records": kept, "count": len(kept), "skipped": skipped})
    except WatchtowerError as exc:
        raise FetchError(IngestReason.SCHEMA_MISMATCH, exc.message) from None
    if len(result) > MAX_RESULT_BYTES:
        raise FetchError(IngestReason.OVERSIZED_RESULT, f"the records are {len(result)} bytes, over {MAX_RESULT_BYTES}")
    return result
