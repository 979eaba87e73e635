"""The stream actor as a hosted aggregate: CIP-7 commands in, events + StreamMessages out.

The rules are :func:`watchtower.protocol.stream_actor.decide` and ``evolve``; this adapter only maps
them onto the host contract (:mod:`watchtower.agents.aggregate`). A publish's StreamMessages go to
the ``messages`` topic (the one archive of payloads); a create with a ``feed`` listing is forwarded
to the registry, which answers the caller, so "created" and "listed" commit together.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from watchtower.agents.aggregate import Context, Forward, Outcome, Record
from watchtower.protocol.command_auth import check_event_clock
from watchtower.protocol.errors import MalformedRecordError, UnauthorizedError
from watchtower.protocol.registry import REGISTRY_KEY
from watchtower.protocol.signed_command import Command, Method
from watchtower.protocol.snapshots import decode_streams, encode_streams
from watchtower.protocol.stream_actor import StreamState, decide, evolve
from watchtower.protocol.stream_state import STREAM_EVENT_TYPES, Event
from watchtower.schemas.records import encode_message
from watchtower.schemas.wire import (
    H_CAPACITY,
    RegistryForward,
    decode_command,
    decode_event,
    encode_event,
    encode_registry_forward,
)

FORWARDS_ONLY = ("feed registrations are forwarded by stream workers only; create the stream with a `feed` "
                 "listing in its create_stream body instead")


class StreamAggregate:
    """One instance per stream id."""

    name = "stream"

    def decode_command(self, value: bytes | None, *, internal: bool) -> Command:
        record = decode_command(value)
        if isinstance(record, RegistryForward) and internal:
            raise MalformedRecordError("a registry forward is not a stream command")  # the registry's
        if isinstance(record, RegistryForward) or internal:
            # Forwards are trusted because only workers can write the internal topic; the same
            # bytes on the public commands topic are refused, and a command belongs on commands.
            raise UnauthorizedError(FORWARDS_ONLY)
        return record

    def key(self, command: Command) -> str:
        return command.stream_id

    def initial(self, key: str) -> StreamState:
        return StreamState.initial(key)

    def decide(self, state: StreamState, command: Command, ctx: Context) -> Outcome:
        decision = decide(state, command, block_height=ctx.block_height, deployment=ctx.deployment)
        records: list[Record] = []
        if decision.messages:
            # Only publishes carry messages, and a publish never changes the capacity.
            capacity = str(state.capacity or 0)
            key = command.stream_id.encode()
            records = [Record("messages", key, encode_message(m), {"sequence": str(m.sequence), H_CAPACITY: capacity})
                       for m in decision.messages]
        if command.method == Method.CREATE_STREAM and "feed" in command.body:
            return Outcome(decision.events, None, records,
                           (Forward(REGISTRY_KEY, encode_registry_forward(command)),))
        return Outcome(decision.events, dict(decision.reply), records)

    def evolve(self, state: StreamState, event: Event) -> StreamState:
        return evolve(state, event)

    def encode_event(self, event: Event) -> bytes:
        return encode_event(event)

    def decode_event(self, value: bytes | None) -> Event:
        return decode_event(value)

    def owns_event(self, event: Event) -> bool:
        return event.type in STREAM_EVENT_TYPES

    def event_key(self, event: Event) -> str:
        return event.stream_id

    def check_event(self, event: Event, now_block_height: int | None) -> None:
        if now_block_height is not None:
            # An event stamped far ahead could carry a nonce under its own future ceiling and
            # lock its caller out.
            check_event_clock(event.block_height, now_block_height)

    def encode_snapshot(self, states: Mapping[str, Any]) -> bytes:
        return encode_streams(states)

    def decode_snapshot(self, data: bytes) -> dict[str, Any]:
        return decode_streams(data)
