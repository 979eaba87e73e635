"""What ingestion knows from the ``events`` log: the streams with ingestion enabled (config, owner,
creation block), the runner registry, and each stream's last failed tick.

The scheduler and the aggregator each fold the log into one of these from the beginning when they
start (a stream's config never changes after creation, so the fold is small: one entry per
ingesting stream, one per runner). Records that do not decode or do not apply are counted, never
raised: the log is hostile.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from watchtower.protocol.config import IngestionConfig
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.events import IngestFailed
from watchtower.protocol.ingestion_runners import RUNNER_EVENTS, RUNNERS_KEY, RunnerRegistry, evolve_runners
from watchtower.protocol.stream_state import STREAM_CREATED, Event, StreamState, evolve
from watchtower.schemas.wire import decode_event


@dataclasses.dataclass(frozen=True, slots=True)
class IngestingStream:
    """One stream whose ingestion is enabled."""

    stream_id: str
    owner: str
    config: IngestionConfig
    anchor: int
    paid: bool
    key_epoch_blocks: int = 0
    """A paid stream's key epoch length (0 for an OPEN stream): which epoch a tick is sealed for."""


class IngestionView:
    """The fold (see the module docstring)."""

    def __init__(self) -> None:
        self.streams: dict[str, IngestingStream] = {}
        self.registry = RunnerRegistry()
        self.last_failed_tick: dict[str, int] = {}
        self.fail_count: dict[str, int] = {}
        self.refused: Counter[str] = Counter()

    def fold(self, value: bytes | None) -> Event | None:
        """Fold one events record; the event, or None when it is not ingestion's or is refused."""
        try:
            event = decode_event(value)
        except WatchtowerError as exc:
            self.refused[exc.code] += 1
            return None
        try:
            if event.type == STREAM_CREATED:
                self._created(event)
            elif event.type in RUNNER_EVENTS and event.stream_id == RUNNERS_KEY:
                self.registry = evolve_runners(self.registry, event)
            elif isinstance(event.body, IngestFailed) and event.stream_id in self.streams:
                last = int(event.body.last_tick)
                self.last_failed_tick[event.stream_id] = max(self.last_failed_tick.get(event.stream_id, 0), last)
                self.fail_count[event.stream_id] = self.fail_count.get(event.stream_id, 0) + 1
            else:
                return None
        except (WatchtowerError, KeyError, TypeError, ValueError) as exc:
            self.refused[getattr(exc, "code", "MALFORMED_RECORD")] += 1
            return None
        return event

    def _created(self, event: Event) -> None:
        if event.stream_id in self.streams:
            return  # a redelivered creation (a second one was never accepted by the writer)
        state = evolve(StreamState.initial(event.stream_id), event)  # the writer's own checks, signature included
        config = state.config
        if config is None or config.ingestion is None or not config.ingestion.enabled or state.owner is None:
            return
        paid = config.paid_stream_config
        self.streams[event.stream_id] = IngestingStream(event.stream_id, state.owner, config.ingestion,
                                                        event.block_height, config.is_paid,
                                                        0 if paid is None else paid.key_epoch_blocks)

    def runner_keys(self) -> tuple[bytes, ...]:
        return self.registry.public_keys()

    def registered(self) -> frozenset[str]:
        return frozenset(self.registry.runners)
