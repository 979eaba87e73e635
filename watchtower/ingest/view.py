"""What ingestion knows from the ``events`` log: the streams with ingestion enabled (config, owner,
creation block), the runner registry, each stream's last failed tick, and, for the aggregator, each
ingesting stream's head, publisher key and last published tick.

The scheduler and the aggregator each fold the log into one of these from the beginning when they
start (one entry per ingesting stream, one per runner). An ingesting stream's events are applied
with the writer's own `evolve`, so its head and key are exactly what the stream actor holds once
the fold has read as far. Records that do not decode or do not apply are counted, never raised:
the log is hostile.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from watchtower.protocol.config import IngestionConfig
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.events import IngestFailed, StreamMessagePublished
from watchtower.protocol.ingestion import parse_task_definition, tick_stamped
from watchtower.protocol.ingestion.records import TaskTemplate
from watchtower.protocol.ingestion.runners import RUNNER_EVENTS, RUNNERS_KEY, RunnerRegistry, evolve_runners
from watchtower.protocol.stream.state import STREAM_CREATED, Event, StreamState, evolve
from watchtower.schemas.codec import read_header
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

    def __init__(self, *, heads: bool = True) -> None:
        self.heads = heads
        """Fold ingesting streams' own events (head, key, finished ticks): the aggregator needs
        them; the scheduler, which only needs the configs and the runners, does not."""
        self.streams: dict[str, IngestingStream] = {}
        self.registry = RunnerRegistry()
        self.last_failed_tick: dict[str, int] = {}
        self.fail_count: dict[str, int] = {}
        self.states: dict[str, StreamState] = {}
        """Each ingesting stream's state as the writer folds it (head, key schedule)."""
        self.last_published_tick: dict[str, int] = {}
        """The tick each ingesting stream's newest message is stamped with (`tick_stamped`)."""
        self.refused: Counter[str] = Counter()
        self.templates: dict[str, tuple[int, TaskTemplate]] = {}
        """Per stream, what every task of it repeats (`template`), computed once."""

    def fold(self, value: bytes | None, key: bytes | None = None) -> Event | None:
        """Fold one events record; the event, or None when it is not ingestion's or is refused.

        With the record's `key` (the stream id every writer keys an event by), a record this view
        does not fold is skipped from its header alone, undecoded: most of ``events`` is other
        streams' publishes."""
        if value is not None and not self._wanted(value, key):
            return None
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
            elif self.heads and event.stream_id in self.streams:
                self._ingesting(event)
            else:
                return None
        except (WatchtowerError, KeyError, TypeError, ValueError) as exc:
            self.refused[getattr(exc, "code", "MALFORMED_RECORD")] += 1
            return None
        return event

    def _wanted(self, value: bytes, key: bytes | None) -> bool:
        try:
            name, _ = read_header(value)
        except WatchtowerError:
            return True  # decode_event counts it
        if name == STREAM_CREATED or name in RUNNER_EVENTS:
            return True
        if not self.heads:
            return False  # the scheduler folds creations and runners only
        if key is None:
            return True  # nothing to judge by: decode it and look
        return key.decode("utf-8", "replace") in self.streams

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
        if self.heads:
            self.states[event.stream_id] = state

    def _ingesting(self, event: Event) -> None:
        sid = event.stream_id
        state = self.states[sid]
        if isinstance(event.body, StreamMessagePublished) and event.body.sequence <= state.head:
            return  # redelivered (a reader that resumed earlier than it stopped)
        self.states[sid] = evolve(state, event)
        body = event.body
        if isinstance(body, IngestFailed):
            last = int(body.last_tick)
            self.last_failed_tick[sid] = max(self.last_failed_tick.get(sid, 0), last)
            self.fail_count[sid] = self.fail_count.get(sid, 0) + 1
        elif isinstance(body, StreamMessagePublished):
            stream = self.streams[sid]
            tick = tick_stamped(stream.anchor, stream.config.interval_blocks, body.timestamp_unix_ms)
            if tick is not None:
                self.last_published_tick[sid] = max(self.last_published_tick.get(sid, 0), tick)

    def template(self, stream: IngestingStream) -> TaskTemplate:
        """The stream's `TaskTemplate` (a stream's config never changes after creation)."""
        return self.timeout_and_template(stream)[1]

    def timeout_and_template(self, stream: IngestingStream) -> tuple[int, TaskTemplate]:
        """The stream's task timeout in blocks and its `TaskTemplate`, computed once per stream."""
        known = self.templates.get(stream.stream_id)
        if known is None:
            cfg = stream.config
            try:
                timeout_blocks = parse_task_definition(cfg.task_definition).timeout_blocks
            except WatchtowerError:
                timeout_blocks = 1
            known = self.templates[stream.stream_id] = (timeout_blocks, TaskTemplate.of(cfg.to_dict()))
        return known

    def head(self, stream_id: str) -> tuple[int, int, bytes] | None:
        """(head sequence, current signing key id, current publisher key) of an ingesting stream."""
        state = self.states.get(stream_id)
        if state is None or state.config is None:
            return None
        return state.head, state.config.current_signing_key_id, state.config.publisher_key

    def last_finished_tick(self, stream_id: str) -> int:
        """The last tick of `stream_id` that ended in a message or an IngestFailed, as far as read."""
        return max(self.last_failed_tick.get(stream_id, 0), self.last_published_tick.get(stream_id, 0))

    def runner_keys(self) -> tuple[bytes, ...]:
        return self.registry.public_keys()

    def registered(self) -> frozenset[str]:
        return frozenset(self.registry.runners)
