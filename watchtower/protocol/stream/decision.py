"""What the stream aggregate's `decide` answers (`Decision`), and the checks its rules share.

`actor.decide` runs the checks every method shares and hands the method's own rules to
`publish_rules` (publish) or `method_rules` (every other stream method); all of them answer a
`Decision` and refuse a stranger with `require_owner`. Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from watchtower.protocol.errors import InvalidArgumentError, UnauthorizedError, WatchtowerError
from watchtower.protocol.ledger.common import Routed
from watchtower.protocol.signed_command import Command, Method
from watchtower.protocol.stream.message import StreamMessage
from watchtower.protocol.stream.state import Event, StreamState


class Decision(NamedTuple):
    """What `decide` returns: the events to persist (possibly none), the caller's reply, and the
    StreamMessages a publish appends (for the messages topic, the one archive of payloads).

    A priced register_replay also forwards a charge to the requester's account (`forwards`) and
    has no reply of its own (`answers` False: the settlement answers); a settlement the account
    refused commits its event and answers with `error`."""

    events: tuple[Event, ...]
    reply: dict[str, Any]
    messages: tuple[StreamMessage, ...] = ()
    forwards: tuple[Routed, ...] = ()
    error: WatchtowerError | None = None
    answers: bool = True


def one_event(state: StreamState, cmd: Command, height: int, digest: bytes, reply: dict[str, Any], body: Any,
              messages: tuple[StreamMessage, ...] = ()) -> Decision:
    """The Decision of a command that commits one event: `body` stamped with the stream, the block
    height, the caller, its nonce and the command's `digest` (its replay protection), and `reply`."""
    event = Event(stream_id=state.stream_id, block_height=height, caller=cmd.caller, nonce=cmd.nonce,
                  digest=digest, reply=reply, body=body)
    return Decision((event,), reply, messages)


def window_reply(head: int, floor: int) -> dict[str, int]:
    """The ring window in a reply: CIP-7's names, then the 0.1 names ``head``/``floor``
    (deprecated, kept for one release)."""
    return {"head_sequence": head, "floor_sequence": floor, "head": head, "floor": floor}


def require_this_stream(state: StreamState, cmd: Command) -> None:
    """INVALID_ARGUMENT unless `cmd` targets the stream whose aggregate `state` is."""
    if cmd.stream_id != state.stream_id:
        raise InvalidArgumentError(
            f"command for stream {cmd.stream_id!r} reached the aggregate of {state.stream_id!r}; "
            f"send it keyed by its own stream id"
        )


def require_owner(state: StreamState, cmd: Command) -> None:
    """UNAUTHORIZED unless the stream's owner sent `cmd`, naming what to do for a publish or an
    owner-only method."""
    if cmd.caller != state.owner:
        if cmd.method == Method.PUBLISH:
            raise UnauthorizedError(
                f"publish is the owner's, and {cmd.caller} is not the owner of stream {state.stream_id!r}; "
                f"send it as the owner ({state.owner}) with the message signed by the current publisher key"
            )
        raise UnauthorizedError(
            f"{cmd.method} is owner-only and {cmd.caller} is not the owner of stream {state.stream_id!r}; "
            f"sign it with the owner's key"
        )
