"""Rebuild the aggregates of one partition from the committed events — the projection rebuild."""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from watchtower.agents.wire import decode_event
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.registry import RegistryState, evolve_registry
from watchtower.protocol.stream_actor import StreamState, evolve
from watchtower.protocol.stream_state import FEED_REGISTERED

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
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"wt-rebuild-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        "log_level": 3,
    })
    loaded = PartitionState()
    states = loaded.streams
    try:
        tp = TopicPartition(events_topic, partition, OFFSET_BEGINNING)
        _low, high = consumer.get_watermark_offsets(tp, timeout=30)
        if high <= 0:
            return loaded
        consumer.assign([tp])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msgs = consumer.consume(num_messages=1000, timeout=0.5)
            done = False
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        done = True
                    continue
                try:
                    event = decode_event(m.value())
                except WatchtowerError as err:
                    log.error("skipping undecodable event at %s:%s: %s", partition, m.offset(), err)
                    continue
                if event.type == FEED_REGISTERED:
                    loaded.registry = evolve_registry(loaded.registry, event)
                    continue
                current = states.get(event.stream_id) or StreamState.initial(event.stream_id)
                states[event.stream_id] = evolve(current, event)
            if done:
                return loaded
        raise TimeoutError(f"rebuilding partition {partition} of {events_topic} took over {timeout_s}s")
    finally:
        consumer.close()
