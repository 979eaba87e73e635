"""The feed registry as a hosted aggregate: one instance (the registry key), fed by forwards.

Stream workers forward a signed create_stream with a ``feed`` listing on ``internal``; the
registry re-verifies the signature (:func:`watchtower.protocol.registry.decide_registration`),
assigns the next feed id and answers the original caller.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from watchtower.protocol.command_auth import check_event_clock
from watchtower.protocol.errors import MalformedRecordError, UnauthorizedError
from watchtower.protocol.registry import REGISTRY_KEY, RegistryState, decide_registration, evolve_registry
from watchtower.protocol.signed_command import Command
from watchtower.protocol.stream.snapshots import decode_registry, encode_registry
from watchtower.protocol.stream.state import FEED_REGISTERED, Event
from watchtower.schemas.wire import RegistryForward, decode_command, decode_event, encode_event
from watchtower.workers.aggregate import BrokenRuleError, Context, Outcome
from watchtower.workers.aggregates.stream import FORWARDS_ONLY


class RegistryAggregate:
    """The one registry; its events are FeedRegistered, keyed by the registry key."""

    name = "registry"

    command_decoder = staticmethod(decode_command)
    event_decoder = staticmethod(decode_event)

    def accept_command(self, record: object, *, internal: bool) -> Command:
        if not isinstance(record, RegistryForward):
            raise MalformedRecordError("not a registry forward")  # another aggregate's record
        if not internal:
            raise UnauthorizedError(FORWARDS_ONLY)
        return record.create

    def key(self, command: Command) -> str:  # noqa: ARG002 - one instance
        return REGISTRY_KEY

    def initial(self, key: str) -> RegistryState:  # noqa: ARG002 - one instance
        return RegistryState()

    def decide(self, state: RegistryState, command: Command, ctx: Context) -> Outcome:
        event, reply = decide_registration(state, command, block_height=ctx.block_height)
        return Outcome(() if event is None else (event,), reply)

    def evolve(self, state: RegistryState, event: Event) -> RegistryState:
        return evolve_registry(state, event)

    def encode_event(self, event: Event) -> bytes:
        return encode_event(event)

    def owns_event(self, event: Event) -> bool:
        return event.type == FEED_REGISTERED

    def event_key(self, event: Event) -> str:
        return event.stream_id

    def check_event(self, event: Event, now_block_height: int | None) -> None:
        if event.stream_id != REGISTRY_KEY:
            raise BrokenRuleError(f"a FeedRegistered event belongs to the registry key {REGISTRY_KEY!r}, "
                             f"not to stream {event.stream_id!r}")
        if now_block_height is not None:
            check_event_clock(event.block_height, now_block_height)

    def encode_snapshot(self, states: Mapping[str, Any]) -> bytes:
        return encode_registry(states)

    def decode_snapshot(self, data: bytes) -> dict[str, Any]:
        return decode_registry(data)
