"""Rebuild the aggregates of one partition from the committed events — the projection rebuild."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from watchtower.agents.wire import decode_event
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.registry import RegistryState, evolve_registry
from watchtower.protocol.stream_actor import StreamState, evolve
from watchtower.protocol.stream_state import FEED_REGISTERED
from watchtower.topics.reader import read_committed

log = logging.getLogger("watchtower.rebuild")


@dataclass
class PartitionState:
    """Every aggregate one events partition holds: its streams, and the registry if it lives here."""

    streams: dict[str, StreamState] = field(default_factory=dict)
    registry: RegistryState = field(default_factory=RegistryState)


def load_partition_states(bootstrap: str, events_topic: str, partition: int,
                          timeout_s: float = 120.0) -> PartitionState:
    """Fold every committed event of ``events_topic[partition]`` into per-stream states.

    Reads ``read_committed`` up to the last stable offset, so an aborted or still-open
    transaction of a previous owner never leaks into the state. An undecodable event is
    logged and skipped (it cannot have come from a worker; someone wrote to a service topic).
    """
    loaded = PartitionState()
    for m in read_committed(bootstrap, [events_topic], partition=partition, timeout_s=timeout_s):
        try:
            event = decode_event(m.value())
        except WatchtowerError as err:
            log.error("skipping undecodable event at %s:%s: %s", partition, m.offset(), err)
            continue
        if event.type == FEED_REGISTERED:
            loaded.registry = evolve_registry(loaded.registry, event)
            continue
        current = loaded.streams.get(event.stream_id) or StreamState.initial(event.stream_id)
        loaded.streams[event.stream_id] = evolve(current, event)
    return loaded
