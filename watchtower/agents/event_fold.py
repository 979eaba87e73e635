"""Fold an events partition into aggregates without ever trusting (or crashing on) a record.

The events topic is written by stream workers only, but nothing stops anyone who can reach the
broker from writing to it too. A rebuild must therefore treat every record as a claim to check,
not a fact: a record that breaks a rule is *quarantined* (reported with its topic, partition,
offset and the reason, and skipped) and the fold goes on from the last valid state. The rules, in
the order they are checked:

1. the record decodes to an Event (MALFORMED_RECORD / SCHEMA_MISMATCH otherwise);
2. it is keyed by its aggregate's id and sits on the partition that key maps to (the worker only
   ever writes it there, so anything else was written by hand), and, when the fold has a clock,
   it is not stamped more than a day in the future (``command_auth.check_event_clock``: such an
   event could carry a nonce under its own future ceiling and lock its caller out);
3. a StreamMessagePublished event carries its message consistently (the CIP-7 fields of the body
   equal the message's own), the message's payload hash is SHA-256 of its payload, and its
   signature verifies under the key the stream's schedule has in force at that sequence;
4. ``evolve`` / ``evolve_registry`` accept it: among others the sequence is head + 1, the
   caller's nonce is above its last one and under its block's ceiling (so a replayed copy of an
   earlier event is refused), a feed id is the next one.

Everything here is pure (no I/O, no clock); :func:`watchtower.agents.state_loader.load_partition_states`
feeds it the committed records. The pure checks of rules 2-3 belong next to ``evolve`` in the
protocol core (they use only its verification functions); they live here until they move there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from watchtower.protocol.command_auth import check_event_clock
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.message import payload_hash_of
from watchtower.protocol.registry import REGISTRY_KEY, RegistryState, evolve_registry
from watchtower.protocol.signing import verify_with_schedule
from watchtower.protocol.stream_actor import StreamState, evolve
from watchtower.protocol.stream_state import FEED_REGISTERED, MESSAGE_CIP7_FIELDS, STREAM_MESSAGE_PUBLISHED, Event
from watchtower.schemas.wire import decode_event
from watchtower.topics.partitioning import partition_for_key

#: The longest reason kept for a quarantined record (a hostile record must not bloat logs or health).
MAX_REASON_CHARS: Final = 300


@dataclass(frozen=True)
class Quarantined:
    """A record the fold refused: where it is and why."""

    topic: str
    partition: int
    offset: int
    reason: str

    def to_dict(self) -> dict[str, object]:
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset, "reason": self.reason}


class BrokenRuleError(Exception):
    """A record breaks one of the fold's rules; the message says which and how."""


@dataclass
class PartitionState:
    """Every aggregate one events partition holds: its streams, and the registry if it lives here."""

    streams: dict[str, StreamState] = field(default_factory=dict)
    registry: RegistryState = field(default_factory=RegistryState)
    quarantined: list[Quarantined] = field(default_factory=list)


class EventFold:
    """Folds the records of one events partition, in log order, quarantining what breaks a rule.

    ``apply`` never raises for anything a record contains; ``on_quarantine`` (if given) is called
    with each refused record as it is found. ``now_block_height`` is the fold's clock (None: no
    clock, so no check of event stamps against it).
    """

    def __init__(self, topic: str, partition: int, partitions: int,
                 on_quarantine: Callable[[Quarantined], None] | None = None, *,
                 now_block_height: int | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.partitions = partitions
        self.now_block_height = now_block_height
        self.state = PartitionState()
        self._on_quarantine = on_quarantine

    def apply(self, key: bytes | None, value: bytes | None, offset: int) -> Quarantined | None:
        """Fold one record; return the quarantine entry if it was refused, else None."""
        try:
            self._apply(key, value)
        except BrokenRuleError as exc:
            return self._quarantine(offset, str(exc))
        except WatchtowerError as exc:
            return self._quarantine(offset, f"{exc.code}: {exc.message}")
        except Exception as exc:  # a rule we did not foresee must not stop the rebuild either
            return self._quarantine(offset, f"unexpected {exc.__class__.__name__}: {exc}")
        return None

    def _quarantine(self, offset: int, reason: str) -> Quarantined:
        entry = Quarantined(self.topic, self.partition, offset, _clip(reason))
        self.state.quarantined.append(entry)
        if self._on_quarantine is not None:
            self._on_quarantine(entry)
        return entry

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        event = decode_event(value)
        check_placement(event, key, self.partition, self.partitions)
        if self.now_block_height is not None:
            check_event_clock(event.block_height, self.now_block_height)
        if event.type == FEED_REGISTERED:
            if event.stream_id != REGISTRY_KEY:
                raise BrokenRuleError(f"a FeedRegistered event belongs to the registry key {REGISTRY_KEY!r}, "
                                 f"not to stream {event.stream_id!r}")
            self.state.registry = evolve_registry(self.state.registry, event)
            return
        streams = self.state.streams
        current = streams.get(event.stream_id) or StreamState.initial(event.stream_id)
        if event.type == STREAM_MESSAGE_PUBLISHED:
            check_published_message(current, event)
        streams[event.stream_id] = evolve(current, event)


def check_placement(event: Event, key: bytes | None, partition: int, partitions: int) -> None:
    """The record is keyed by its aggregate's id and sits on that key's partition."""
    expected_key = event.stream_id.encode()
    if key != expected_key:
        raise BrokenRuleError(f"the record key {_show(key)} is not the event's aggregate id {event.stream_id!r}")
    home = partition_for_key(expected_key, partitions)
    if home != partition:
        raise BrokenRuleError(f"events of {event.stream_id!r} belong on partition {home}, not {partition}")


def check_published_message(state: StreamState, event: Event) -> None:
    """The message of a StreamMessagePublished event is intact and signed by the key in force."""
    message = event.message()
    if message.stream_id != event.stream_id:
        raise BrokenRuleError(f"the message names stream {message.stream_id!r}, the event {event.stream_id!r}")
    for name in MESSAGE_CIP7_FIELDS:
        ours = getattr(message, name)
        ours = ours if name != "payload_format" else str(ours)
        if event.body[name] != ours:
            raise BrokenRuleError(f"the event's {name} {_show(event.body[name])} differs from "
                                  f"its message's {_show(ours)}")
    if payload_hash_of(message.payload_inline) != message.payload_hash:
        raise BrokenRuleError(f"message {event.stream_id}#{message.sequence}: payload_hash is not SHA-256 "
                              "of the payload")
    schedule = state.key_schedule
    if schedule is None:
        return  # not created: evolve refuses it with the reason
    if not verify_with_schedule(message, schedule):
        entry = schedule.key_at_sequence(message.sequence)
        raise BrokenRuleError(f"message {event.stream_id}#{message.sequence} does not verify under signing key "
                         f"{entry.signing_key_id}, the key in force at that sequence")


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _clip(reason: str) -> str:
    return reason if len(reason) <= MAX_REASON_CHARS else reason[: MAX_REASON_CHARS - 3] + "..."
