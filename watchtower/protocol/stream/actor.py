"""The pure StreamActor aggregate: `decide(state, command) -> Decision`, plus read-side views.

`decide` checks a signed command against the current state and returns the events that record it
and the caller's reply, or raises the WatchtowerError whose code CIP-7 maps to the broken rule. A
rejected command yields no events: the edge replies with the error and persists nothing, so a
rejected nonce may be used again. Checks run in this order for every method but publish:

1. the command signature (INVALID_SIGNATURE), then that it targets this aggregate's stream;
2. replay protection per caller: nonce > last_nonce. nonce == last_nonce with the same digest is
   an idempotent retry and returns the original reply with ``"duplicate": True`` and no events;
   any other reuse is NONCE_REPLAYED; a nonce more than a day ahead of the block clock is
   INVALID_ARGUMENT (`command_auth.nonce_ceiling`, docs/nonces.md);
3. existence: STREAM_NOT_FOUND for every method but create_stream on an uncreated stream, and
   STREAM_ALREADY_EXISTS for create_stream on a created one;
4. the method's own rules: `method_rules` for the stream's own methods, `replay.control` for the
   ICRC-77 replay methods. Owner-only methods check the owner before they look at the body, so a
   stranger learns nothing from validation errors.

Nonces are per (caller, stream): this aggregate is one stream's partition, and the stream id is
signed, so a command cannot be replayed on another stream.

A publish is authorised by its message signature alone: the key in force at head+1 signed this
stream id, this sequence and this payload hash, and only the owner can put a key in force. Its
command signature is not checked, and its nonce is neither checked against nor recorded in the
caller's replay protection; the sequence is its replay protection (docs/publish-auth.md, and
`publish_rules.decide_publish` for the order of its checks).

`evolve` (in `stream_state`) folds the events back; `decide` never assumes anything evolve does
not record. Everything here is pure: no I/O, no clock (block heights are arguments).
"""

from __future__ import annotations

from collections.abc import Mapping

from watchtower.protocol.command_auth import check_nonce
from watchtower.protocol.deployment import NO_TREASURY, Deployment
from watchtower.protocol.errors import (
    InvalidArgumentError,
    InvalidSignatureError,
    NonceReplayedError,
    NotReadyError,
    PublicationNotFoundError,
    ReplayNotFoundError,
    StreamAlreadyExistsError,
    StreamNotFoundError,
    WatchtowerError,
)
from watchtower.protocol.ledger.common import REPLAY_METHODS
from watchtower.protocol.replay.control import ERROR_KEY, as_unauthorized, decide_replay
from watchtower.protocol.replay.rules import replay_id_for
from watchtower.protocol.signed_command import Command, Method, command_digest, verify_command
from watchtower.protocol.stream.decision import Decision, one_event, require_this_stream
from watchtower.protocol.stream.method_rules import HANDLERS, Context, renew_subscription
from watchtower.protocol.stream.publish_rules import decide_publish
from watchtower.protocol.stream.reads import (
    get_head,
    get_since_range,
    key_at_sequence,
    key_history,
    subscribers,
)
from watchtower.protocol.stream.state import (
    CallerRecord,
    Event,
    FrozenMap,
    StreamState,
    Subscription,
    evolve,
    state_digest,
)
from watchtower.protocol.validation import require_int

__all__ = [
    "CallerRecord",
    "Decision",
    "Event",
    "FrozenMap",
    "StreamState",
    "Subscription",
    "decide",
    "evolve",
    "get_head",
    "get_since_range",
    "key_at_sequence",
    "key_history",
    "state_digest",
    "subscribers",
]


def decide(state: StreamState, cmd: Command, *, block_height: int, deployment: Deployment = NO_TREASURY) -> Decision:
    """Decide `cmd` against `state` at `block_height` under `deployment`'s genesis configuration
    (see the module docstring for the order)."""
    height = require_int(block_height, "block_height")
    if cmd.method == Method.PUBLISH:
        return decide_publish(state, cmd, height, deployment)
    try:
        verify_command(cmd)
    except InvalidSignatureError as exc:
        raise as_unauthorized(cmd, exc) from None
    require_this_stream(state, cmd)
    digest = command_digest(cmd)
    _require_no_order_in_flight(state, cmd, digest)
    record = state.callers.get(cmd.caller)
    if record is not None and cmd.nonce == record.last_nonce and digest == record.last_digest:
        failed = record.last_reply.get(ERROR_KEY) if cmd.method == Method.REGISTER_REPLAY else None
        if isinstance(failed, Mapping):  # a replay whose payment failed: the same error again
            raise WatchtowerError.from_dict(failed)
        return Decision((), {**record.last_reply, "duplicate": True})
    try:
        check_nonce(None if record is None else record.last_nonce, cmd.nonce, block_height=height)
    except NonceReplayedError as exc:
        raise as_unauthorized(cmd, exc) from None
    if cmd.method == Method.CREATE_STREAM:
        if state.created:
            raise StreamAlreadyExistsError(
                f"stream {state.stream_id!r} already exists (owner {state.owner}); pick another stream id"
            )
    elif not state.created:
        _raise_not_found(state, cmd)
    if cmd.method == Method.RENEW_SUBSCRIPTION:
        return renew_subscription(state, cmd, height, digest)
    if cmd.method in REPLAY_METHODS:
        replay = decide_replay(state, cmd, height=height, digest=digest, max_range=deployment.replay_max_range)
        return Decision(replay.events, {} if replay.reply is None else dict(replay.reply), (), replay.forwards,
                        replay.error, replay.reply is not None)
    handler = HANDLERS.get(cmd.method)
    if handler is None:  # a key-manager method: the host routes those to their own aggregates
        raise InvalidArgumentError(f"{cmd.method} is not a stream method; it is sent to the key manager")
    body, reply = handler(state, cmd, Context(height, deployment))
    return one_event(state, cmd, height, digest, reply, body)


def _require_no_order_in_flight(state: StreamState, cmd: Command, digest: bytes) -> None:
    # While a priced replay settles, its requester's record must stay the order's, so the
    # settlement (which records the order's nonce) never moves anyone's replay protection back.
    order = state.replay_orders.get(cmd.caller)
    if order is None:
        return
    if cmd.method == Method.REGISTER_REPLAY and replay_id_for(digest) == order.replay_id:
        raise NotReadyError(f"replay {order.replay_id} is still being paid for by your account; retry the same "
                            "command in a moment to get its answer")
    raise NotReadyError(f"your replay {order.replay_id} on stream {state.stream_id!r} is still being paid for; "
                        "retry this command in a moment")


def _raise_not_found(state: StreamState, cmd: Command) -> None:
    # ICRC-77 names its own codes for an unknown namespace: PublicationNotFound on register, and
    # NotFound on cancel (no replay of a stream that does not exist can be found).
    if cmd.method == Method.REGISTER_REPLAY:
        raise PublicationNotFoundError(f"no stream {state.stream_id!r} exists to replay; check the id or feed "
                                       "with `watchtower list`", details={"namespace": state.stream_id})
    if cmd.method == Method.CANCEL_REPLAY:
        raise ReplayNotFoundError(f"stream {state.stream_id!r} does not exist, so it has no replay to cancel; "
                                  "list your replays to find the right stream")
    raise StreamNotFoundError(f"stream {state.stream_id!r} does not exist; create_stream it first")

