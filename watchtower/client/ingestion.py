"""Ingestion from the SDK's side: build and check an IngestionConfig, and read a feed's ingestion
status (its config, fail count, last published tick) over the HTTP API."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from watchtower.client.stream_api import StreamApi
from watchtower.protocol.config import IngestionConfig
from watchtower.protocol.errors import InvalidArgumentError
from watchtower.protocol.ingestion import check_config
from watchtower.protocol.ingestion.results import canonical_json

TICK_TAG = "ingest_tick"


def http_ingestion(*, url: str, select: Mapping[str, str] | str | None = None, interval_blocks: int = 1,
                   num_runners: int = 3, proof_type: str = "QUORUM", transform: str | None = None,
                   result_schema: Mapping[str, Any] | None = None, publish_kind: str | None = None,
                   timeout_blocks: int | None = None, max_bytes: int | None = None,
                   timeout_ms: int | None = None) -> dict[str, Any]:
    """An ``http_json`` IngestionConfig dict for create_feed(ingestion=...), checked first
    (INVALID_ARGUMENT naming the field: no feed is created with a config that cannot run)."""
    task: dict[str, Any] = {"kind": "http_json", "url": url}
    for name, value in (("select", select), ("publish_kind", publish_kind), ("timeout_blocks", timeout_blocks),
                        ("max_bytes", max_bytes), ("timeout_ms", timeout_ms)):
        if value is not None:
            task[name] = value
    config = {"enabled": True, "interval_blocks": interval_blocks, "num_runners": num_runners,
              "proof_type": proof_type, "transform_method": transform, "task_definition": task,
              "result_schema": dict(result_schema) if result_schema is not None else {}}
    check_config(IngestionConfig.from_dict(config))
    return config


def ingestion_status(api: StreamApi, stream_id: str) -> dict[str, Any]:
    """``{stream_id, ingestion, ingest_fail_count, head_sequence, last_success}``; last_success is the
    newest message's tick, sequence and timestamp (None before the first). INVALID_ARGUMENT for a
    stream without ingestion."""
    info = api.stream_info(stream_id)  # type: ignore[attr-defined]
    config = (info.get("config") or {}).get("ingestion")
    if not config:
        raise InvalidArgumentError(f"stream {stream_id!r} has no ingestion configured; create it with --ingest-url")
    head = api.get_head(stream_id)
    last = None
    if head["head_sequence"]:
        page = api.get_since(stream_id, head["head_sequence"] - 1, 1)
        msg = (page.get("messages") or [None])[-1]
        if msg is not None and TICK_TAG in msg.get("tags", {}):
            last = {"tick": int(msg["tags"][TICK_TAG]), "sequence": msg["sequence"],
                    "timestamp_unix_ms": msg["timestamp_unix_ms"]}
    return {"stream_id": stream_id, "ingestion": config, "ingest_fail_count": head.get("ingest_fail_count", 0),
            "head_sequence": head["head_sequence"], "last_success": last,
            "task_definition_json": canonical_json(config.get("task_definition", {})).decode()}
