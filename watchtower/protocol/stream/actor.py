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
4. the method's own rules (see each ``_<method>`` handler). Owner-only methods check the owner
   before they look at the body, so a stranger learns nothing from validation errors.

Nonces are per (caller, stream): this aggregate is one stream's partition, and the stream id is
signed, so a command cannot be replayed on another stream.

A publish is authorised by its message signature alone: the key in force at head+1 signed this
stream id, this sequence and this payload hash, and only the owner can put a key in force. Its
command signature is not checked, and its nonce is neither checked against nor recorded in the
caller's replay protection; the sequence is its replay protection (docs/publish-auth.md, and
`_decide_publish` for the order of its checks).

`evolve` (in `stream_state`) folds the events back; `decide` never assumes anything evolve does
not record. Everything here is pure: no I/O, no clock (block heights are arguments).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import Any, Final, NamedTuple

from watchtower.protocol.command_auth import check_nonce
from watchtower.protocol.commands import (
    AllowlistChange,
    AnnounceKeyEpoch,
    RenewSubscription,
    RotatePublisherKey,
    SetSubscriptionPolicy,
    Subscribe,
    Unsubscribe,
    read_body,
    split_publish,
)
from watchtower.protocol.confidential import rules as confidential
from watchtower.protocol.confidential.receipt import RECEIPT_FIELD, verify_receipt
from watchtower.protocol.config import StreamConfig
from watchtower.protocol.constants import ED25519_PUBLIC_KEY_BYTES, FIRST_SIGNING_KEY_ID
from watchtower.protocol.deployment import NO_TREASURY, Deployment
from watchtower.protocol.enums import PayloadFormat, SubscriptionPolicy, SubscriptionStatus
from watchtower.protocol.errors import (
    InvalidArgumentError,
    InvalidSignatureError,
    NonceReplayedError,
    NotPlatformManagedStreamError,
    NotReadyError,
    PaymentRequiredError,
    PublicationNotFoundError,
    ReplayNotFoundError,
    StaleSequenceError,
    StreamAlreadyExistsError,
    StreamNotFoundError,
    SubscriberCapReachedError,
    SubscriptionNotAllowedError,
    SubscriptionNotFoundError,
    UnauthorizedError,
    WatchtowerError,
)
from watchtower.protocol.events import (
    AllowlistChanged,
    EventBody,
    KeyEpochRotated,
    PublisherKeyRotated,
    StreamCreated,
    StreamMessagePublished,
    SubscriptionPolicyChanged,
)
from watchtower.protocol.ingestion import check_config as check_ingestion_config
from watchtower.protocol.ingestion.failure import decide_ingest_failure
from watchtower.protocol.ledger.common import REPLAY_METHODS, Routed
from watchtower.protocol.registry import parse_feed_listing
from watchtower.protocol.replay.control import ERROR_KEY, as_unauthorized, decide_replay
from watchtower.protocol.replay.rules import replay_id_for
from watchtower.protocol.signed_command import (
    Command,
    Method,
    command_digest,
    to_tagged_json,
    verify_command,
)
from watchtower.protocol.signing import (
    message_signing_bytes,
    publish_digest,
    verify_signing_bytes_with_schedule_or_raise,
)
from watchtower.protocol.stream.filters import parse_filter
from watchtower.protocol.stream.key_chain import command_json
from watchtower.protocol.stream.message import StreamMessage
from watchtower.protocol.stream.reads import (
    get_head,
    get_since_range,
    key_at_sequence,
    key_history,
    subscribers,
)
from watchtower.protocol.stream.reads import require_config as _config
from watchtower.protocol.stream.reads import require_schedule as _schedule
from watchtower.protocol.stream.ring_window import floor_for
from watchtower.protocol.stream.state import (
    CallerRecord,
    Event,
    FrozenMap,
    StreamState,
    Subscription,
    evolve,
    state_digest,
    subscriber_updated,
)
from watchtower.protocol.validation import require_bytes, require_int

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


class _Context(NamedTuple):
    """What a handler may know besides the state and the command."""

    block_height: int
    deployment: Deployment


# A handler returns (event type, event body, reply) for a command that passed steps 1-3.
_Outcome = tuple[EventBody, dict[str, Any]]


def decide(state: StreamState, cmd: Command, *, block_height: int, deployment: Deployment = NO_TREASURY) -> Decision:
    """Decide `cmd` against `state` at `block_height` under `deployment`'s genesis configuration
    (see the module docstring for the order)."""
    height = require_int(block_height, "block_height")
    if cmd.method == Method.PUBLISH:
        return _decide_publish(state, cmd, height, deployment)
    try:
        verify_command(cmd)
    except InvalidSignatureError as exc:
        raise as_unauthorized(cmd, exc) from None
    _require_this_stream(state, cmd)
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
        return _renew_subscription(state, cmd, height, digest)
    if cmd.method in REPLAY_METHODS:
        replay = decide_replay(state, cmd, height=height, digest=digest, max_range=deployment.replay_max_range)
        return Decision(replay.events, {} if replay.reply is None else dict(replay.reply), (), replay.forwards,
                        replay.error, replay.reply is not None)
    handler = _HANDLERS.get(cmd.method)
    if handler is None:  # a key-manager method: the host routes those to their own aggregates
        raise InvalidArgumentError(f"{cmd.method} is not a stream method; it is sent to the key manager")
    body, reply = handler(state, cmd, _Context(height, deployment))
    event = Event(
        stream_id=state.stream_id,
        block_height=height,
        caller=cmd.caller,
        nonce=cmd.nonce,
        digest=digest,
        reply=reply,
        body=body,
    )
    return Decision((event,), reply)


def _decide_publish(state: StreamState, cmd: Command, height: int, deployment: Deployment) -> Decision:
    """Body: the StreamMessage JSON dict (`StreamMessage.to_json_dict`), signed for head+1.

    Order: the command's stream; a nonce within the clock's ceiling (evolve refuses events beyond
    it); existence; the command names the owner as caller (UNAUTHORIZED, before the body is read);
    the message's structure, size, stream and payload hash; an exact retry of the last publish
    (the original reply with ``"duplicate": True``); CIPHERTEXT on a paid stream; sequence ==
    head+1 (STALE_SEQUENCE, never renumbered); the signature under the key in force at head+1,
    which also refuses an older signing_key_id after a rotation; on a PLATFORM_MANAGED stream
    only, the key manager's receipt over (stream, key_epoch, payload_hash): UNAUTHORIZED if it is
    missing, INVALID_SIGNATURE if it does not verify (`ciphertext_receipt`), and UNAUTHORIZED for
    PLAINTEXT on a paid stream, so publish answers only CIP-7's publish codes plus the extensions
    docs/publish-auth.md lists. One ed25519 verify for an OPEN
    stream, two for a paid one.
    """
    _require_this_stream(state, cmd)
    check_nonce(None, cmd.nonce, block_height=height)  # only the ceiling: publish nonces are not replay state
    if not state.created:
        raise StreamNotFoundError(f"stream {state.stream_id!r} does not exist; create_stream it first")
    # Not authentication (the envelope is unsigned as far as publish goes): it keeps the command's
    # claim consistent with the owner that delegated publishing to the key, and answers a
    # stranger's publish with the code CIP-7 maps.
    _require_owner(state, cmd)
    config = _config(state)
    body: Mapping[str, Any] = cmd.body
    receipt: object = None
    if config.is_paid:
        # The receipt rides beside the message's fields; the message itself is parsed without it.
        body, receipt = split_publish(cmd, RECEIPT_FIELD)
    msg = StreamMessage.from_json_dict(body)  # structure, size (PAYLOAD_TOO_LARGE), format/epoch
    if msg.stream_id != state.stream_id:
        raise InvalidArgumentError(f"message.stream_id {msg.stream_id!r} differs from the command's stream id")
    msg.validate()  # payload_hash == SHA-256(payload), else INVALID_SIGNATURE
    signing_bytes = message_signing_bytes(msg)
    digest = publish_digest(signing_bytes, msg.publisher_sig)
    if msg.sequence == state.head and digest == state.last_publish_digest:
        # The very message already at head (the log verified it then): a retry, not a replay.
        return Decision((), {**_publish_reply(state.head, config), "duplicate": True})
    if config.is_paid and msg.payload_format is not PayloadFormat.CIPHERTEXT:
        # UNAUTHORIZED (CIP-7's publish codes): the stream's access mode does not let anyone publish plaintext.
        raise UnauthorizedError(
            "a PLATFORM_MANAGED stream publishes CIPHERTEXT only; encrypt the payload with stream_encrypt"
        )
    if msg.sequence != state.head + 1:
        raise StaleSequenceError.for_head(expected=msg.sequence, head=state.head)
    verify_signing_bytes_with_schedule_or_raise(msg, signing_bytes, _schedule(state))
    if config.is_paid:
        # After the signature: only the owner's key learns whether its ciphertext is acceptable.
        verify_receipt(
            deployment.keymgr_public_key,
            receipt,
            stream_id=msg.stream_id,
            key_epoch=require_int(msg.key_epoch, "key_epoch"),
            payload_hash=msg.payload_hash,
        )
    reply = _publish_reply(msg.sequence, config)
    if config.confidential:
        # After the signature, as the receipt: only the owner's key learns the keyload rules' verdict.
        part = confidential.check_publish(state.keyloads, msg, stream_id=state.stream_id, owner=config.owner,
                                          allowlist=state.allowlist)
        if part is not None:
            reply[confidential.REPLY_KEY] = part
    event_body = StreamMessagePublished(
        stream_id=msg.stream_id, version=msg.version, sequence=msg.sequence, kind=msg.kind,
        content_type=msg.content_type, payload_format=str(msg.payload_format), payload_hash=msg.payload_hash,
        key_epoch=msg.key_epoch, signing_key_id=msg.signing_key_id, timestamp_unix_ms=msg.timestamp_unix_ms,
    )
    event = Event(
        stream_id=state.stream_id,
        block_height=height,
        caller=cmd.caller,
        nonce=cmd.nonce,
        digest=digest,
        reply=reply,
        body=event_body,
    )
    return Decision((event,), reply, (msg,))


def _publish_reply(sequence: int, config: StreamConfig) -> dict[str, Any]:
    return {"sequence": sequence, **_window_reply(sequence, floor_for(sequence, config.ring_buffer_capacity))}


# --- Helpers shared by the handlers --------------------------------------------------------------


def _window_reply(head: int, floor: int) -> dict[str, int]:
    # CIP-7's names, then the 0.1 names ``head``/``floor`` (deprecated, kept for one release).
    return {"head_sequence": head, "floor_sequence": floor, "head": head, "floor": floor}


def _require_this_stream(state: StreamState, cmd: Command) -> None:
    if cmd.stream_id != state.stream_id:
        raise InvalidArgumentError(
            f"command for stream {cmd.stream_id!r} reached the aggregate of {state.stream_id!r}; "
            f"send it keyed by its own stream id"
        )


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


def _require_owner(state: StreamState, cmd: Command) -> None:
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


# --- Handlers ------------------------------------------------------------------------------------


def _create_stream(state: StreamState, cmd: Command, ctx: _Context) -> _Outcome:
    """Body: a StreamConfig dict. stream_id and owner default to the command's; owner = caller.

    A paid config gets the deployment's protocol treasury, which the creator cannot choose.
    """
    fields = dict(cmd.body)
    paid = fields.get("paid_stream_config")
    if isinstance(paid, Mapping):
        fields["paid_stream_config"] = ctx.deployment.govern_paid_config(paid)
    if "feed" in fields:
        # A registry listing (see `registry`): validated now so a bad name fails the creation.
        parse_feed_listing(fields.pop("feed"))
    fields.setdefault("stream_id", state.stream_id)
    fields.setdefault("owner", cmd.caller)
    config = StreamConfig.from_dict(fields)
    if config.stream_id != state.stream_id:
        raise InvalidArgumentError(f"config.stream_id {config.stream_id!r} differs from the command's stream id")
    if config.owner != cmd.caller:
        raise InvalidArgumentError("the owner of a new stream is its creator: omit owner or set it to the caller")
    if config.current_signing_key_id != FIRST_SIGNING_KEY_ID:
        raise InvalidArgumentError("a new stream's publisher key has signing_key_id 1; omit current_signing_key_id")
    if config.ingestion is not None and config.ingestion.enabled:
        # No config that cannot run, or that carries a credential, enters the log. The fold does not
        # check again, so a config already on the log from before these rules stays readable.
        check_ingestion_config(config.ingestion)
    reply = {"stream_id": state.stream_id, "owner": config.owner, **_window_reply(0, 1), "signing_key_id": 1}
    # The signed command travels with the event: readers verify the key schedule from it (key_chain).
    return StreamCreated(config=config, command=command_json(cmd)), reply




def _subscribe(state: StreamState, cmd: Command, _ctx: _Context) -> _Outcome:
    """Body: mode, and optional filter (JSON DSL), start_cursor, account_key_id. An upsert by caller.

    Every call states the whole subscription: an omitted filter or account_key_id means none.
    created_at_sequence and start_cursor are fixed when the subscription is first created, even
    when a CANCELLED one is re-activated (CIP-7: start_cursor applies only on create).
    """
    body = read_body(cmd, Subscribe)
    mode = body.mode
    raw_filter = body.filter
    parse_filter(raw_filter)  # INVALID_FILTER
    filter_json = (
        None if raw_filter is None else json.dumps(to_tagged_json(raw_filter), sort_keys=True, separators=(",", ":"))
    )
    existing = state.subscriptions.get(cmd.caller)
    # CIP-7: start_cursor applies only on create; on update it is ignored, not validated.
    start = body.start_cursor if existing is None else None
    start_cursor = state.head if start is None else require_int(start, "start_cursor", maximum=state.head)
    key_id = body.account_key_id
    account_key_id = None if key_id is None else require_int(key_id, "account_key_id", minimum=1)

    config = _config(state)
    caller = cmd.caller
    # CIP-7: "non-allowlisted addresses MUST fail"; the owner is no exception and allowlists itself.
    if config.subscription_policy is SubscriptionPolicy.PRIVATE_ALLOWLIST and caller not in state.allowlist:
        raise SubscriptionNotAllowedError(
            f"stream {state.stream_id!r} is PRIVATE_ALLOWLIST and {caller} is not on its allowlist; "
            f"ask the owner to allowlist_add it"
        )
    if (existing is None or existing.status is not SubscriptionStatus.ACTIVE) and (
        state.active_subscribers >= config.max_subscribers
    ):
        raise SubscriberCapReachedError(
            f"stream {state.stream_id!r} already has {state.active_subscribers} active subscriptions "
            f"(max_subscribers {config.max_subscribers})"
        )
    sub = Subscription(
        subscriber=caller,
        mode=mode,
        status=SubscriptionStatus.ACTIVE,
        created_at_sequence=state.head if existing is None else existing.created_at_sequence,
        start_cursor=start_cursor if existing is None else existing.start_cursor,
        filter_json=filter_json,
        account_key_id=account_key_id,
    )
    reply = {
        "subscriber": caller,
        "mode": str(mode),
        "status": str(sub.status),
        "created": existing is None,
        "created_at_sequence": sub.created_at_sequence,
        "start_cursor": sub.start_cursor,
    }
    return subscriber_updated(state.stream_id, sub), reply


def _unsubscribe(state: StreamState, cmd: Command, _ctx: _Context) -> _Outcome:
    """Body: empty. Cancels the caller's ACTIVE or PAUSED subscription."""
    read_body(cmd, Unsubscribe)
    existing = state.subscriptions.get(cmd.caller)
    if existing is None or existing.status is SubscriptionStatus.CANCELLED:
        raise SubscriptionNotFoundError(f"{cmd.caller} has no live subscription to stream {state.stream_id!r}")
    cancelled = Subscription(
        subscriber=existing.subscriber,
        mode=existing.mode,
        status=SubscriptionStatus.CANCELLED,
        created_at_sequence=existing.created_at_sequence,
        start_cursor=existing.start_cursor,
        filter_json=existing.filter_json,
        account_key_id=existing.account_key_id,
    )
    reply = {"subscriber": cmd.caller, "status": str(cancelled.status)}
    return subscriber_updated(state.stream_id, cancelled), reply


def _rotate_publisher_key(state: StreamState, cmd: Command, _ctx: _Context) -> _Outcome:
    """Body: new_key (32 bytes), and optionally signing_key_id and effective_sequence. The new key
    signs from head+1 (DESIGN §7.3).

    The optional fields let the owner sign where the key goes in the key chain (docs/key-chain.md):
    signing_key_id must be the current id + 1 (INVALID_ARGUMENT otherwise) and effective_sequence
    head + 1 (STALE_SEQUENCE otherwise, with the head: re-sign for head + 1).
    """
    _require_owner(state, cmd)
    body = read_body(cmd, RotatePublisherKey)
    new_key = require_bytes(body.new_key, "new_key", length=ED25519_PUBLIC_KEY_BYTES)
    old = _schedule(state).current
    new = _schedule(state).rotate(new_key, head_sequence=state.head).current
    signed_id = body.signing_key_id
    if signed_id is not None and require_int(signed_id, "signing_key_id", minimum=1) != new.signing_key_id:
        raise InvalidArgumentError(
            f"the rotation is signed for signing_key_id {signed_id!r}, but the current key is "
            f"{old.signing_key_id}, so the new key gets {new.signing_key_id}; re-sign with {new.signing_key_id} "
            f"(or leave signing_key_id out)",
            details={"signing_key_id": new.signing_key_id},
        )
    signed_cutover = body.effective_sequence
    if signed_cutover is not None and require_int(signed_cutover, "effective_sequence", minimum=1) != (
        new.effective_sequence
    ):
        raise StaleSequenceError(
            f"the rotation is signed to take effect at sequence {signed_cutover!r}, but the stream head is "
            f"{state.head}, so it would take effect at {state.head + 1}; re-sign with effective_sequence "
            f"{state.head + 1} (or leave it out)",
            details={"expected_sequence": signed_cutover, "head": state.head},
        )
    event = PublisherKeyRotated(
        stream_id=state.stream_id,
        old_key=old.public_key,
        new_key=new.public_key,
        old_signing_key_id=old.signing_key_id,
        new_signing_key_id=new.signing_key_id,
        effective_sequence=new.effective_sequence,
        command=command_json(cmd),  # the owner's signed rotation, for readers to verify (key_chain)
    )
    reply = {
        "old_signing_key_id": old.signing_key_id,
        "signing_key_id": new.signing_key_id,
        "effective_sequence": new.effective_sequence,
    }
    return event, reply


def _set_subscription_policy(state: StreamState, cmd: Command, _ctx: _Context) -> _Outcome:
    """Body: policy, PUBLIC or PRIVATE_ALLOWLIST. Existing subscriptions are left as they are."""
    _require_owner(state, cmd)
    policy = read_body(cmd, SetSubscriptionPolicy).policy
    if _config(state).confidential and policy is not SubscriptionPolicy.PRIVATE_ALLOWLIST:
        raise InvalidArgumentError(
            f"stream {state.stream_id!r} is confidential, which needs PRIVATE_ALLOWLIST: its keyloads are sealed to "
            "the allowlist. Create a new stream that is not confidential to publish in the clear")
    return SubscriptionPolicyChanged(stream_id=state.stream_id, policy=str(policy)), {"policy": str(policy)}


def _allowlist(added: bool) -> Callable[[StreamState, Command, _Context], _Outcome]:
    def handler(state: StreamState, cmd: Command, _ctx: _Context) -> _Outcome:
        """Body: address. Adding a present / removing an absent address is recorded but changes nothing."""
        _require_owner(state, cmd)
        address = read_body(cmd, AllowlistChange).address
        event = AllowlistChanged(stream_id=state.stream_id, address=address, added=added)
        return event, {"address": address, "added": added}

    return handler


def _announce_key_epoch(state: StreamState, cmd: Command, ctx: _Context) -> _Outcome:
    """Body: key_epoch, non-decreasing. effective_block_height is the announcing block."""
    _require_owner(state, cmd)
    key_epoch = read_body(cmd, AnnounceKeyEpoch).key_epoch
    last = state.last_key_epoch
    if last is not None and key_epoch < last:
        raise InvalidArgumentError(
            f"key_epoch must be non-decreasing: {last} was already announced, so announce {last} or later",
            details={"key_epoch": key_epoch, "last_key_epoch": last},
        )
    event = KeyEpochRotated(
        stream_id=state.stream_id,
        key_epoch=key_epoch,
        effective_block_height=ctx.block_height,
        announced_by=cmd.caller,
    )
    return event, {"key_epoch": key_epoch, "effective_block_height": ctx.block_height}




def _renew_subscription(state: StreamState, cmd: Command, height: int, digest: bytes) -> Decision:
    """Body: target_key_epoch, and optional beneficiary_account, payer_account, account_key_id.

    CIP-7 order: NOT_PLATFORM_MANAGED_STREAM for an OPEN stream; PAYMENT_REQUIRED when the caller
    has no ACTIVE subscription to renew. An account_key_id that differs from the subscription's is
    recorded as its new hint (SubscriberUpdated). The purchase itself is decided by the stream's
    paid instance (`paid_stream`), to which the host forwards this signed command; that instance
    answers the caller, so the reply here is only what this stream recorded.
    """
    config = _config(state)
    if not config.is_paid:
        raise NotPlatformManagedStreamError(
            f"stream {state.stream_id!r} is OPEN: there is no subscription to pay for; subscribe and read it"
        )
    body = read_body(cmd, RenewSubscription)
    existing = state.subscriptions.get(cmd.caller)
    if existing is None or existing.status is not SubscriptionStatus.ACTIVE:
        raise PaymentRequiredError(
            f"{cmd.caller} has no ACTIVE subscription to stream {state.stream_id!r} to renew; subscribe first, "
            "or buy access with acquire_epoch_access"
        )
    key_id = body.account_key_id
    hint = existing.account_key_id if key_id is None else require_int(key_id, "account_key_id", minimum=1)
    reply: dict[str, Any] = {"subscriber": cmd.caller, "account_key_id": hint, "renewal": "forwarded"}
    if hint == existing.account_key_id:
        return Decision((), reply)
    sub = dataclasses.replace(existing, account_key_id=hint)
    event = Event(stream_id=state.stream_id, block_height=height, caller=cmd.caller, nonce=cmd.nonce, digest=digest,
                  reply=reply, body=subscriber_updated(state.stream_id, sub))
    return Decision((event,), reply)


_HANDLERS: Final[Mapping[str, Callable[[StreamState, Command, _Context], _Outcome]]] = {
    Method.CREATE_STREAM: _create_stream,
    Method.SUBSCRIBE: _subscribe,
    Method.UNSUBSCRIBE: _unsubscribe,
    Method.ROTATE_PUBLISHER_KEY: _rotate_publisher_key,
    Method.SET_SUBSCRIPTION_POLICY: _set_subscription_policy,
    Method.ALLOWLIST_ADD: _allowlist(added=True),
    Method.ALLOWLIST_REMOVE: _allowlist(added=False),
    Method.ANNOUNCE_KEY_EPOCH: _announce_key_epoch,
    Method.REPORT_INGEST_FAILURE: lambda state, cmd, _ctx: decide_ingest_failure(state, cmd),
}
