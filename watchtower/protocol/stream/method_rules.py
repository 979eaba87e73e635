"""The own rules of every stream method but publish (step 4 of `actor.decide`).

`actor.decide` checks the command signature, the stream, replay protection and existence first;
then `HANDLERS` maps a method to its rules, which answer the event that records the command and
the caller's reply (`Outcome`), or raise the WatchtowerError whose code CIP-7 maps to the broken
rule. Owner-only methods check the owner before they look at the body, so a stranger learns
nothing from validation errors. renew_subscription answers a whole `Decision` itself
(`renew_subscription`): it may record nothing. Publish has its own rules (`publish_rules`), and
the ICRC-77 replay methods theirs (`replay.control`). Pure: no I/O, no clock (block heights are
in the `Context`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import Any, Final, NamedTuple

from watchtower.protocol.commands import (
    AllowlistChange,
    AnnounceKeyEpoch,
    RenewSubscription,
    RotatePublisherKey,
    SetSubscriptionPolicy,
    Subscribe,
    Unsubscribe,
    read_body,
)
from watchtower.protocol.config import StreamConfig
from watchtower.protocol.constants import ED25519_PUBLIC_KEY_BYTES, FIRST_SIGNING_KEY_ID
from watchtower.protocol.deployment import Deployment
from watchtower.protocol.enums import SubscriptionPolicy, SubscriptionStatus
from watchtower.protocol.errors import (
    InvalidArgumentError,
    NotPlatformManagedStreamError,
    PaymentRequiredError,
    StaleSequenceError,
    SubscriberCapReachedError,
    SubscriptionNotAllowedError,
    SubscriptionNotFoundError,
)
from watchtower.protocol.events import (
    AllowlistChanged,
    EventBody,
    KeyEpochRotated,
    PublisherKeyRotated,
    StreamCreated,
    SubscriptionPolicyChanged,
)
from watchtower.protocol.frozen_json import to_tagged_json
from watchtower.protocol.ingestion import check_config as check_ingestion_config
from watchtower.protocol.ingestion.failure import decide_ingest_failure
from watchtower.protocol.registry import parse_feed_listing
from watchtower.protocol.signed_command import Command, Method
from watchtower.protocol.stream.decision import Decision, require_owner, window_reply
from watchtower.protocol.stream.filters import parse_filter
from watchtower.protocol.stream.key_chain import command_json
from watchtower.protocol.stream.reads import require_config as _config
from watchtower.protocol.stream.reads import require_schedule as _schedule
from watchtower.protocol.stream.state import Event, StreamState, Subscription, subscriber_updated
from watchtower.protocol.validation import require_bytes, require_int


class Context(NamedTuple):
    """What a method's rules may know besides the state and the command."""

    block_height: int
    deployment: Deployment


Outcome = tuple[EventBody, dict[str, Any]]
"""What a method's rules answer for a command that passed decide's shared checks: the event body
that records it, and the caller's reply."""


def _create_stream(state: StreamState, cmd: Command, ctx: Context) -> Outcome:
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
    reply = {"stream_id": state.stream_id, "owner": config.owner, **window_reply(0, 1), "signing_key_id": 1}
    # The signed command travels with the event: readers verify the key schedule from it (key_chain).
    return StreamCreated(config=config, command=command_json(cmd)), reply


def _subscribe(state: StreamState, cmd: Command, _ctx: Context) -> Outcome:
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


def _unsubscribe(state: StreamState, cmd: Command, _ctx: Context) -> Outcome:
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


def _rotate_publisher_key(state: StreamState, cmd: Command, _ctx: Context) -> Outcome:
    """Body: new_key (32 bytes), and optionally signing_key_id and effective_sequence. The new key
    signs from head+1 (DESIGN §7.3).

    The optional fields let the owner sign where the key goes in the key chain (docs/key-chain.md):
    signing_key_id must be the current id + 1 (INVALID_ARGUMENT otherwise) and effective_sequence
    head + 1 (STALE_SEQUENCE otherwise, with the head: re-sign for head + 1).
    """
    require_owner(state, cmd)
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


def _set_subscription_policy(state: StreamState, cmd: Command, _ctx: Context) -> Outcome:
    """Body: policy, PUBLIC or PRIVATE_ALLOWLIST. Existing subscriptions are left as they are."""
    require_owner(state, cmd)
    policy = read_body(cmd, SetSubscriptionPolicy).policy
    if _config(state).confidential and policy is not SubscriptionPolicy.PRIVATE_ALLOWLIST:
        raise InvalidArgumentError(
            f"stream {state.stream_id!r} is confidential, which needs PRIVATE_ALLOWLIST: its keyloads are sealed to "
            "the allowlist. Create a new stream that is not confidential to publish in the clear")
    return SubscriptionPolicyChanged(stream_id=state.stream_id, policy=str(policy)), {"policy": str(policy)}


def _allowlist(added: bool) -> Callable[[StreamState, Command, Context], Outcome]:
    def handler(state: StreamState, cmd: Command, _ctx: Context) -> Outcome:
        """Body: address. Adding a present / removing an absent address is recorded but changes nothing."""
        require_owner(state, cmd)
        address = read_body(cmd, AllowlistChange).address
        event = AllowlistChanged(stream_id=state.stream_id, address=address, added=added)
        return event, {"address": address, "added": added}

    return handler


def _announce_key_epoch(state: StreamState, cmd: Command, ctx: Context) -> Outcome:
    """Body: key_epoch, non-decreasing. effective_block_height is the announcing block."""
    require_owner(state, cmd)
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


def renew_subscription(state: StreamState, cmd: Command, height: int, digest: bytes) -> Decision:
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


HANDLERS: Final[Mapping[str, Callable[[StreamState, Command, Context], Outcome]]] = {
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
"""Each stream method (but publish, renew_subscription and the replay methods) and its rules."""
