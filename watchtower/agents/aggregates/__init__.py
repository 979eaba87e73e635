"""The aggregates a worker hosts by default: the stream actor first (the hot path), then the registry."""

from __future__ import annotations

from watchtower.agents.aggregate import Aggregate
from watchtower.agents.aggregates.registry import RegistryAggregate
from watchtower.agents.aggregates.stream import StreamAggregate


def default_aggregates() -> list[Aggregate]:
    """The stream actor and the feed registry, in routing order."""
    return [StreamAggregate(), RegistryAggregate()]


__all__ = ["RegistryAggregate", "StreamAggregate", "default_aggregates"]
