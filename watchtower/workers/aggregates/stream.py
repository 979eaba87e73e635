"""The stream actor as a hosted aggregate: CIP-7 commands in, events + StreamMessages out.

The rules are :func:`watchtower.protocol.stream.actor.decide` and ``evolve``; this adapter only maps
them onto the host contract (:mod:`watchtower.workers.aggregate`). A publish's StreamMessages go to
the ``messages`` topic (the one archive of payloads); a create with a ``feed`` listing is forwarded
to the registry, which answers the caller, so "created" and "listed" commit together. A
PLATFORM_MANAGED creation is also forwarded to its paid instance (``paid:<stream_id>``, which never
answers), and a renew_subscription to that instance, which decides the purchase and answers.
ICRC-77 replay control (`protocol.replay.control`): an accepted register_replay or cancel_replay
also writes its ``replay``-topic record, derived from its event, in the same transaction; a priced
register_replay forwards its charge to the requester's account, whose `ReplaySettled` (accepted
from ``internal`` only) registers the replay and answers the caller. The replay worker's
`ReplayFinished` (accepted from ``internal`` only) marks a replay finished, so a later cancel of it
is CANNOT_CANCEL (`replay_control.finish_replay`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from watchtower.protocol.command_auth import check_event_clock
from watchtower.protocol.errors import MalformedRecordError, UnauthorizedError
from watchtower.protocol.events import StreamCreated
from watchtower.protocol.ingestion.runners import RUNNER_METHODS
from watchtower.protocol.ledger.common import (
    REPLAY_METHODS,
    SERVICE_METHODS,
    STREAM_METHODS,
    PaidCommand,
    ReplayFinished,
    ReplaySettled,
    paid_instance,
)
from watchtower.protocol.registry import REGISTRY_KEY
from watchtower.protocol.replay.control import finish_replay, settle_replay
from watchtower.protocol.signed_command import Command, Method
from watchtower.protocol.stream.actor import StreamState, decide, evolve
from watchtower.protocol.stream.snapshots import decode_streams, encode_streams
from watchtower.protocol.stream.state import STREAM_EVENT_TYPES, Event
from watchtower.schemas.records import encode_message
from watchtower.schemas.wire import (
    RegistryForward,
    decode_command,
    decode_event,
    encode_event,
    encode_keymgr_forward,
    encode_registry_forward,
    replay_record_for,
)
from watchtower.workers.aggregate import Context, Forward, Outcome, Record
from watchtower.workers.aggregates.ledger_base import KEYMGR_FORWARDS_ONLY


def _replay_records(events: Sequence[Event], command: Command | None) -> list[Record]:
    records = []
    for event in events:
        value = replay_record_for(event, command)
        if value is not None:
            records.append(Record("replay", event.stream_id.encode(), value))
    return records


def _is_paid(created: Event) -> bool:
    return isinstance(created.body, StreamCreated) and created.body.config.is_paid


REPLAY_FORWARDS_ONLY = ("replay settlements are written by workers only; send a signed register_replay to the "
                        "commands topic and its price is charged to your account")
REPLAY_FINISH_FORWARDS_ONLY = ("a replay's end is reported by the replay worker only; to stop a replay send a signed "
                               "cancel_replay to the commands topic")
FORWARDS_ONLY = ("feed registrations are forwarded by stream workers only; create the stream with a `feed` "
                 "listing in its create_stream body instead")


class StreamAggregate:
    """One instance per stream id."""

    name = "stream"

    command_decoder = staticmethod(decode_command)
    event_decoder = staticmethod(decode_event)

    def accept_command(self, record: object, *, internal: bool) -> Command | ReplaySettled | ReplayFinished:
        if isinstance(record, ReplaySettled):
            if not internal:  # only a worker can say an account paid; a client would replay for free
                raise UnauthorizedError(REPLAY_FORWARDS_ONLY)
            return record
        if isinstance(record, ReplayFinished):
            if not internal:  # only the replay worker can say a replay ended
                raise UnauthorizedError(REPLAY_FINISH_FORWARDS_ONLY)
            return record
        if not isinstance(record, Command):
            if internal:
                raise MalformedRecordError("a forward is not a stream command")  # the registry's / key manager's
            # Forwards are trusted because only workers can write the internal topic; the same
            # bytes on the public commands topic are refused.
            raise UnauthorizedError(FORWARDS_ONLY if isinstance(record, RegistryForward) else KEYMGR_FORWARDS_ONLY)
        if internal:
            raise UnauthorizedError(FORWARDS_ONLY)  # a command belongs on commands
        if record.method in SERVICE_METHODS:
            raise MalformedRecordError(f"{record.method} is a request to the key-manager service's HTTP API "
                                       "(POST /v1/keymgr/...), never a command on Kafka")
        if record.method not in STREAM_METHODS or record.method in RUNNER_METHODS:
            raise MalformedRecordError(f"{record.method} is not a stream command")  # a key-manager aggregate's
        return record

    def key(self, command: Command | ReplaySettled | ReplayFinished) -> str:
        return command.stream_id

    def initial(self, key: str) -> StreamState:
        return StreamState.initial(key)

    def decide(self, state: StreamState, command: Command | ReplaySettled | ReplayFinished, ctx: Context) -> Outcome:
        if isinstance(command, ReplayFinished):
            # Nobody waits for an answer: the worker's forward carries no reply headers.
            return Outcome(finish_replay(state, command, height=ctx.block_height).events, None)
        if isinstance(command, ReplaySettled):
            settled = settle_replay(state, command, height=ctx.block_height)
            return Outcome(settled.events, settled.reply, _replay_records(settled.events, command.command), (),
                           settled.error)
        decision = decide(state, command, block_height=ctx.block_height, deployment=ctx.deployment)
        if command.method in REPLAY_METHODS:
            # The replay topic's records are derived from the events, in the same transaction.
            charges = [Forward(r.key, encode_keymgr_forward(r.forward), r.answers) for r in decision.forwards]
            return Outcome(decision.events, dict(decision.reply) if decision.answers else None,
                           _replay_records(decision.events, command), charges, decision.error)
        records: list[Record] = []
        if decision.messages:
            key = command.stream_id.encode()
            records = [Record("messages", key, encode_message(m), {"sequence": str(m.sequence)})
                       for m in decision.messages]
        if command.method == Method.RENEW_SUBSCRIPTION:
            # The purchase is the paid instance's to decide and answer (docs/ledger.md).
            renew = Forward(paid_instance(command.stream_id), encode_keymgr_forward(PaidCommand(command)))
            return Outcome(decision.events, None, records, (renew,))
        forwards: list[Forward] = []
        if command.method == Method.CREATE_STREAM and decision.events and _is_paid(decision.events[0]):
            # Registered with the key manager in the creating transaction; it never answers.
            forwards.append(Forward(paid_instance(command.stream_id), encode_keymgr_forward(PaidCommand(command)),
                                    answers=False))
        if command.method == Method.CREATE_STREAM and "feed" in command.body:
            forwards.append(Forward(REGISTRY_KEY, encode_registry_forward(command)))
            return Outcome(decision.events, None, records, forwards)
        return Outcome(decision.events, dict(decision.reply), records, forwards)

    def evolve(self, state: StreamState, event: Event) -> StreamState:
        return evolve(state, event)

    def encode_event(self, event: Event) -> bytes:
        return encode_event(event)

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
