"""The aggregates a worker hosts by default, in routing order: the stream actor first (the hot
path), then the key manager's accounts, paid streams and supply, then the registry and the ingestion runner registry."""

from __future__ import annotations

from watchtower.workers.aggregate import Aggregate
from watchtower.workers.aggregates.account import AccountAggregate
from watchtower.workers.aggregates.paid_stream import PaidStreamAggregate
from watchtower.workers.aggregates.registry import RegistryAggregate
from watchtower.workers.aggregates.runners import RunnerRegistryAggregate
from watchtower.workers.aggregates.stream import StreamAggregate
from watchtower.workers.aggregates.supply import SupplyAggregate


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
