"""Rebuild every projection table from the log, offline, and digest it.

Reads the events and messages topics from offset 0 (read_committed) and folds them with the same
pure functions the live Faust agent uses (`views.apply_event`, `views.apply_message`), into plain
dicts. Equal digests from this and from a live worker (``GET /v1/admin/digest``) prove the live
projection is exactly what the log says.
"""

from __future__ import annotations

from typing import Any

from watchtower.agents.wire import H_CAPACITY, decode_event
from watchtower.protocol.constants import DEFAULT_RING_BUFFER_CAPACITY
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.views import TABLE_NAMES, OffsetIndex, apply_event, apply_message, table_digests, views_digest
from watchtower.topics.catalogue import topic_name
from watchtower.topics.reader import read_committed


def rebuild_tables(bootstrap: str, prefix: str | None = None, timeout_s: float = 300.0) -> dict[str, dict[str, Any]]:
    """Every table, folded from the committed log up to its current end."""
    tables: dict[str, dict[str, Any]] = {name: {} for name in TABLE_NAMES}
    indexes: dict[str, OffsetIndex] = {}
    t_events, t_messages = topic_name("events", prefix), topic_name("messages", prefix)
    for record in read_committed(bootstrap, [t_events, t_messages], timeout_s=timeout_s):
        topic, value = record.topic(), record.value()
        try:
            if topic == t_events:
                apply_event(tables, decode_event(value))
                continue
            stream_id = (record.key() or b"").decode()
            raw = record.headers() or []
            pairs = raw.items() if isinstance(raw, dict) else raw
            headers = {k: v for k, v in pairs if isinstance(v, bytes)}
            index = indexes.setdefault(stream_id, OffsetIndex())
            apply_message(tables["heads"], index, stream_id, int(headers["sequence"]), int(record.offset() or 0),
                          int(headers.get(H_CAPACITY) or DEFAULT_RING_BUFFER_CAPACITY))
        except (WatchtowerError, KeyError, ValueError):
            continue  # the live agent skips the same poison records
    return tables


def rebuild_digest(bootstrap: str, prefix: str | None = None) -> dict[str, Any]:
    """``{"digest", "counts"}`` of a full rebuild (same shape as the live worker's digest)."""
    tables = rebuild_tables(bootstrap, prefix)
    snapshot = {k: list(v.items()) for k, v in tables.items()}
    return {"digest": views_digest(snapshot), "counts": {k: len(v) for k, v in tables.items()},
            "tables": table_digests(snapshot)}
