"""The topic catalogue: every topic Watchtower uses, with its partitioning and retention.

Co-partitioning is a correctness rule, not a tuning knob: ``commands`` (with its twins ``internal``
and ``ingest.commands``), ``events`` and ``messages`` are all keyed by the aggregate id
(``stream_id`` or the keymgr key) with the murmur2 partitioner and have the same partition count, so
the worker that owns partition *p* of ``commands`` is the single writer of partition *p* of
``events`` and ``messages``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

DEFAULT_PREFIX = "wt"
DEFAULT_PARTITIONS = 6
FOREVER = -1
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


@dataclass(frozen=True)
class TopicSpec:
    """One topic: its role, partition count, cleanup policy and retention."""

    role: str
    name: str
    partitions: int
    retention_ms: int
    cleanup_policy: str = "delete"
    purpose: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    def config(self, min_insync_replicas: int) -> dict[str, str]:
        """Topic-level configs as Kafka expects them (all strings)."""
        cfg = {
            "cleanup.policy": self.cleanup_policy,
            "retention.ms": str(self.retention_ms),
            "min.insync.replicas": str(min_insync_replicas),
            # Appends are ordered by the single writer; broker time would hide client clock skew.
            "message.timestamp.type": "CreateTime",
        }
        cfg.update(self.extra)
        return cfg


def topic_prefix() -> str:
    """The prefix of every topic name (``WATCHTOWER_TOPIC_PREFIX``, default ``wt``)."""
    return os.environ.get("WATCHTOWER_TOPIC_PREFIX", DEFAULT_PREFIX)


def catalogue(prefix: str | None = None, partitions: int = DEFAULT_PARTITIONS) -> list[TopicSpec]:
    """Every topic the design needs, in creation order."""
    p = prefix if prefix is not None else topic_prefix()
    return [
        TopicSpec("commands", f"{p}.commands", partitions, 7 * DAY_MS,
                  purpose="signed commands from clients, keyed by the aggregate key (stream id or key-manager key)"),
        TopicSpec("events", f"{p}.events", partitions, FOREVER,
                  purpose="CIP-7 events: the source of truth every projection is rebuilt from"),
        TopicSpec("messages", f"{p}.messages", partitions, FOREVER,
                  purpose="StreamMessages keyed by stream_id: the archive get_since and replay read"),
        TopicSpec("internal", f"{p}.internal", partitions, 7 * DAY_MS,
                  purpose="forwards between aggregates (e.g. feed listings); written by workers only"),
        TopicSpec("replies", f"{p}.replies", partitions, HOUR_MS,
                  purpose="command results for request/reply, written in the same transaction"),
        TopicSpec("snapshots", f"{p}.snapshots", partitions, FOREVER, cleanup_policy="compact",
                  purpose="worker snapshots of each partition's aggregates (latest per partition), "
                          "co-partitioned with events so a new owner folds only the tail",
                  extra={"min.cleanable.dirty.ratio": "0.1", "segment.ms": str(HOUR_MS)}),
        TopicSpec("deliveries", f"{p}.deliveries", partitions, 7 * DAY_MS,
                  purpose="PUSH deliveries keyed by subscriber, round-robin within per-block bounds"),
        TopicSpec("replay", f"{p}.replay", partitions, FOREVER,
                  purpose="ICRC-77 replay requests and status events"),
        TopicSpec("keymgr", f"{p}.keymgr", partitions, FOREVER,
                  purpose="the key manager's audit trail (schemas.keymgr_records); its events are on events"),
        TopicSpec("keymgr-state", f"{p}.keymgr.state", partitions, FOREVER, cleanup_policy="compact",
                  purpose="master seeds wrapped under the KEK and actor-nonce reservations, latest value per key",
                  extra={"min.cleanable.dirty.ratio": "0.1"}),
        TopicSpec("delivery-state", f"{p}.delivery.state", partitions, FOREVER, cleanup_policy="compact",
                  purpose="push checkpoints, latest per stream: low watermark, cursors, round-robin pointer and "
                          "the block budget used, written with the deliveries they account for",
                  # A checkpoint lists the cursors of up to max_subscribers subscribers.
                  extra={"min.cleanable.dirty.ratio": "0.1", "max.message.bytes": str(8 * 1024 * 1024)}),
        TopicSpec("ingest-tasks", f"{p}.ingest.tasks", partitions, 7 * DAY_MS,
                  purpose="CIP-7 ingestion ticks keyed by stream_id, one per (stream, tick), signed by the "
                          "scheduler (framed Avro IngestTask)"),
        TopicSpec("ingest-results", f"{p}.ingest.results", partitions, 7 * DAY_MS,
                  purpose="runners' signed results keyed by stream_id (framed Avro IngestResult); hostile input, "
                          "checked and quarantined by the aggregator"),
        TopicSpec("ingest-commands", f"{p}.ingest.commands", partitions, 7 * DAY_MS,
                  purpose="the ingestion service's signed publishes and failure reports, keyed like commands: "
                          "a lane of their own, which the stream workers serve after commands"),
    ]


def topic_name(role: str, prefix: str | None = None) -> str:
    """The full topic name for a catalogue role, e.g. ``topic_name("messages") == "wt.messages"``."""
    for spec in catalogue(prefix):
        if spec.role == role:
            return spec.name
    raise KeyError(f"no topic with role {role!r} in the catalogue")
