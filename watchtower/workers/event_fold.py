"""Fold an events partition into the hosted aggregates without ever trusting (or crashing on) a record.

The events topic is written by workers only, but nothing stops anyone who can reach the broker
from writing to it too. A rebuild must therefore treat every record as a claim to check, not a
fact: a record that breaks a rule is *quarantined* (reported with its topic, partition, offset and
the reason, and skipped) and the fold goes on from the last valid state. The rules, in order:

1. some hosted aggregate decodes the record and owns the event (routing: :mod:`watchtower.workers.aggregate`);
   otherwise MALFORMED_RECORD / SCHEMA_MISMATCH from the first aggregate's codec;
2. it is keyed by its instance's id and sits on the partition that key maps to (the worker only
   ever writes it there, so anything else was written by hand);
3. the aggregate's own ``check_event`` accepts it (for the stream actor and the registry: not
   stamped more than a day ahead of the fold's clock, so a forged future nonce cannot lock a
   caller out; a FeedRegistered event lives on the registry key);
4. the aggregate's ``evolve`` accepts it: for a stream among others the sequence is head + 1 (the
   rebuild re-proves the log is gapless) and the nonce is under its block's ceiling; a feed id is
   the next one.

Publish events refer to their message by stream, sequence and hash and no longer carry it: message
signatures are checked by whoever reads the ``messages`` topic (the archive), not here.

Everything here is pure (no I/O, no clock); :mod:`watchtower.workers.state_loader` feeds it records.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.placement import misplacement
from watchtower.protocol.registry import REGISTRY_KEY, RegistryState
from watchtower.workers.aggregate import Aggregate, BrokenRuleError, DecodeOnce
from watchtower.workers.aggregates import default_aggregates

#: The longest reason kept for a quarantined record (a hostile record must not bloat logs or health).
MAX_REASON_CHARS: Final = 300

__all__ = ["BrokenRuleError", "EventFold", "PartitionState", "Quarantined", "check_placement"]


@dataclass(frozen=True)
class Quarantined:
    """A record the fold refused: where it is and why."""

    topic: str
    partition: int
    offset: int
    reason: str

    def to_dict(self) -> dict[str, object]:
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset, "reason": self.reason}


@dataclass
class PartitionState:
    """Every aggregate instance one events partition holds, by aggregate name then instance key.

    ``folded`` counts the events records read by the fold that built it (accepted or not);
    ``snapshot_offset`` is the events offset the fold started from when it started from a
    snapshot (None: it folded the whole partition).
    """

    states: dict[str, dict[str, Any]] = field(default_factory=dict)
    quarantined: list[Quarantined] = field(default_factory=list)
    folded: int = 0
    snapshot_offset: int | None = None

    @property
    def streams(self) -> dict[str, Any]:
        """The stream actor's instances (empty if it is not hosted)."""
        return self.states.get("stream", {})

    @property
    def registry(self) -> Any:
        """The registry's state on this partition (a fresh one when it has none)."""
        return self.states.get("registry", {}).get(REGISTRY_KEY) or RegistryState()


class EventFold:
    """Folds the records of one events partition, in log order, quarantining what breaks a rule.

    ``apply`` never raises for anything a record contains; ``on_quarantine`` (if given) is called
    with each refused record as it is found. ``now_block_height`` is the fold's clock (None: no
    clock). ``state`` may start from a snapshot's states.
    """

    def __init__(self, topic: str, partition: int, partitions: int,
                 on_quarantine: Callable[[Quarantined], None] | None = None, *,
                 now_block_height: int | None = None, aggregates: Sequence[Aggregate] | None = None,
                 state: PartitionState | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.partitions = partitions
        self.now_block_height = now_block_height
        self.aggregates: Sequence[Aggregate] = aggregates if aggregates is not None else default_aggregates()
        self.state = state or PartitionState()
        for aggregate in self.aggregates:
            self.state.states.setdefault(aggregate.name, {})
        self._on_quarantine = on_quarantine

    def apply(self, key: bytes | None, value: bytes | None, offset: int) -> Quarantined | None:
        """Fold one record; return the quarantine entry if it was refused, else None."""
        self.state.folded += 1
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

    def _route(self, value: bytes | None) -> tuple[Aggregate, Any]:
        first_error: Exception | None = None
        decoded = DecodeOnce(value)
        for aggregate in self.aggregates:
            try:
                event = decoded.get(aggregate.event_decoder)
            except Exception as exc:
                first_error = first_error or exc
                continue
            if aggregate.owns_event(event):
                return aggregate, event
        if first_error is not None:
            raise first_error
        raise BrokenRuleError("no hosted aggregate owns this event")

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        aggregate, event = self._route(value)
        instance = aggregate.event_key(event)
        check_placement(instance, key, self.partition, self.partitions)
        aggregate.check_event(event, self.now_block_height)
        states = self.state.states[aggregate.name]
        current = states.get(instance)
        if current is None:
            current = aggregate.initial(instance)
        states[instance] = aggregate.evolve(current, event)


def check_placement(instance: str, key: bytes | None, partition: int, partitions: int) -> None:
    """The record is keyed by its aggregate instance's id and sits on that key's partition
    (the rule of :mod:`watchtower.protocol.placement`, stricter for events: the key is the instance)."""
    expected_key = instance.encode()
    if key != expected_key:
        raise BrokenRuleError(f"the record key {_show(key)} is not the event's aggregate id {instance!r}")
    reason = misplacement(key, partition, partitions)
    if reason is not None:
        raise BrokenRuleError(f"events of {instance!r} are misplaced: {reason}")


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _clip(reason: str) -> str:
    return reason if len(reason) <= MAX_REASON_CHARS else reason[: MAX_REASON_CHARS - 3] + "..."
