"""The aggregates a worker hosts by default, in routing order: the stream actor first (the hot
path), then the key manager's accounts, paid streams and supply, then the registry and the ingestion runner registry."""

from __future__ import annotations

from watchtower.agents.aggregate import Aggregate
from watchtower.agents.aggregates.account import AccountAggregate
from watchtower.agents.aggregates.paid_stream import PaidStreamAggregate
from watchtower.agents.aggregates.registry import RegistryAggregate
from watchtower.agents.aggregates.runners import RunnerRegistryAggregate
from watchtower.agents.aggregates.stream import StreamAggregate
from watchtower.agents.aggregates.supply import SupplyAggregate


def default_aggregates() -> list[Aggregate]:
    """Every aggregate a worker hosts, in routing order."""
    return [StreamAggregate(), AccountAggregate(), PaidStreamAggregate(), SupplyAggregate(), RegistryAggregate(),
            RunnerRegistryAggregate()]


__all__ = [
    "AccountAggregate",
    "PaidStreamAggregate",
    "RegistryAggregate",
    "RunnerRegistryAggregate",
    "StreamAggregate",
    "SupplyAggregate",
    "default_aggregates",
]
