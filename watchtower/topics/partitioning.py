"""Kafka's default key partitioner (murmur2): re-exported from the pure core.

The function lives in :mod:`watchtower.protocol.partitioning`, because where a record belongs is a
protocol rule (:mod:`watchtower.protocol.placement`); this module keeps the name every Kafka-facing
caller imports.
"""

from __future__ import annotations

from watchtower.protocol.partitioning import murmur2, partition_for_key

__all__ = ["murmur2", "partition_for_key"]
