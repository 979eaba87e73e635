"""The ingestion runner registry as a hosted aggregate: one instance (`RUNNERS_KEY`), fed by
signed register_runner / retire_runner commands (`protocol.ingestion.runners`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from watchtower.protocol.command_auth import check_event_clock
from watchtower.protocol.errors import MalformedRecordError
from watchtower.protocol.ingestion.runners import (
    RUNNER_EVENTS,
    RUNNER_METHODS,
    RUNNERS_KEY,
    RunnerRegistry,
    decide_runner,
    decode_registries,
    encode_registries,
    evolve_runners,
)
from watchtower.protocol.signed_command import Command
from watchtower.protocol.stream.state import Event
from watchtower.schemas.wire import decode_command, decode_event, encode_event
from watchtower.workers.aggregate import BrokenRuleError, Context, Outcome


class RunnerRegistryAggregate:
    """The one runner registry; its events are RunnerRegistered / RunnerRetired on `RUNNERS_KEY`."""

    name = "runners"

    command_decoder = staticmethod(decode_command)
    event_decoder = staticmethod(decode_event)

    def accept_command(self, record: object, *, internal: bool) -> Command:
        if not isinstance(record, Command) or record.method not in RUNNER_METHODS or internal:
            raise MalformedRecordError("not a runner-registry command")
        return record

    def key(self, command: Command) -> str:  # noqa: ARG002 - one instance
        return RUNNERS_KEY

    def initial(self, key: str) -> RunnerRegistry:  # noqa: ARG002 - one instance
        return RunnerRegistry()

    def decide(self, state: RunnerRegistry, command: Command, ctx: Context) -> Outcome:
        event, reply = decide_runner(state, command, block_height=ctx.block_height,
                                     registrar=ctx.deployment.runner_registrar)
        return Outcome(() if event is None else (event,), reply)

    def evolve(self, state: RunnerRegistry, event: Event) -> RunnerRegistry:
        return evolve_runners(state, event)

    def encode_event(self, event: Event) -> bytes:
        return encode_event(event)

    def owns_event(self, event: Event) -> bool:
        return event.type in RUNNER_EVENTS

    def event_key(self, event: Event) -> str:
        return event.stream_id

    def check_event(self, event: Event, now_block_height: int | None) -> None:
        if event.stream_id != RUNNERS_KEY:
            raise BrokenRuleError(f"a {event.type} event belongs to {RUNNERS_KEY!r}, not {event.stream_id!r}")
        if now_block_height is not None:
            check_event_clock(event.block_height, now_block_height)

    def encode_snapshot(self, states: Mapping[str, Any]) -> bytes:
        return encode_registries(states)

    def decode_snapshot(self, data: bytes) -> dict[str, Any]:
        return decode_registries(data)
