"""The StreamActor aggregate's state, its events, and `evolve` (the fold from events to state).

`StreamState` is what one stream's partition owner keeps: configuration, head, key schedule,
subscriptions, allowlist, the last announced key epoch, and per-caller replay protection. It holds
no payloads and nothing per message, so memory is bounded by subscribers and callers, never by
traffic. The floor is derived from head and capacity (`ring_window.floor_for`), so it cannot drift.
The state and event types are defined in `stream_types` (so `replay_fold` builds on them without
importing this module) and named here too; the events' type names are `event_names`'.

`evolve(state, event)` is pure and never reads a clock. It trusts the facts in the log (decide
already checked the rules) and refuses only events that cannot belong to this state, as
MALFORMED_RECORD: another stream, an event before creation or a second creation, a body of the
wrong shape, a publish that is not head+1 (so a rebuild re-proves the log is gapless), a
nonce beyond the ceiling of the event's block, which decide could not have accepted, or a
StreamCreated / PublisherKeyRotated whose carried command (``command``: the signed create_stream
or rotate_publisher_key, `key_chain`) does not verify, was not signed by the owner, does not name
the event's key, or is not the command the event's caller, nonce and digest say caused it. Those
two events are the only ones that put a publisher key in force, so a forged one on the log cannot
take over a stream; the command lands in the key schedule entry, where readers verify it again.
Every event but a publish and a ReplayFinished (written for the replay worker; its origin is the
replay's registration) also records its caller's (nonce, digest, reply), so replay protection
is rebuilt from the log like everything else. A publish is authorised by its message signature,
not by a caller signature (docs/publish-auth.md): its nonce is not authenticated, so it never
touches a caller record; the state keeps the digest of the last published message instead, so an
exact retry of the last publish is answered as a duplicate. On a confidential stream a publish's
recorded reply names an accepted keyload part, and evolve folds it into `keyloads`; an
AllowlistChanged removing a member there requires a re-key (`confidential`).

StreamMessagePublished carries the ten CIP-7 reference fields only (stream, sequence, hash, ...),
never the message: the messages topic is the one archive of payloads.

An event's body is a typed class of `events`, with the Avro field names of its schema (without
the envelope's ``block_height`` / ``caused_by``), so the edge maps them field for field.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any, Final

from watchtower.protocol import cbor
from watchtower.protocol.addresses import require_address
from watchtower.protocol.command_auth import nonce_ceiling
from watchtower.protocol.confidential.rules import fold_keyload_part, member_removed
from watchtower.protocol.config import StreamConfig
from watchtower.protocol.constants import ED25519_PUBLIC_KEY_BYTES
from watchtower.protocol.enums import DeliveryMode, SubscriptionPolicy, SubscriptionStatus
from watchtower.protocol.errors import InvalidArgumentError, MalformedRecordError, WatchtowerError
from watchtower.protocol.event_names import (
    ALLOWLIST_CHANGED,
    INGEST_FAILED,
    KEY_EPOCH_ROTATED,
    PUBLISHER_KEY_ROTATED,
    REPLAY_EVENT_TYPES,
    REPLAY_FINISHED,
    STREAM_CREATED,
    STREAM_MESSAGE_PUBLISHED,
    SUBSCRIBER_UPDATED,
    SUBSCRIPTION_POLICY_CHANGED,
)

# Named here too, where the workers, projections and ingestion look them up.
from watchtower.protocol.event_names import FEED_REGISTERED as FEED_REGISTERED
from watchtower.protocol.event_names import MESSAGE_CIP7_FIELDS as MESSAGE_CIP7_FIELDS
from watchtower.protocol.event_names import STREAM_EVENT_TYPES as STREAM_EVENT_TYPES
from watchtower.protocol.events import EVENT_TYPES as EVENT_TYPES
from watchtower.protocol.events import (
    AllowlistChanged,
    IngestFailed,
    KeyEpochRotated,
    PublisherKeyRotated,
    StreamCreated,
    StreamMessagePublished,
    SubscriberUpdated,
    SubscriptionPolicyChanged,
    event_fields,
)
from watchtower.protocol.replay.fold import apply_replay_event
from watchtower.protocol.signed_command import Command, command_digest
from watchtower.protocol.stream.key_chain import command_json, verify_creation_command, verify_rotation_command
from watchtower.protocol.stream.key_schedule import KeySchedule
from watchtower.protocol.stream.types import (
    CallerRecord as CallerRecord,
)
from watchtower.protocol.stream.types import (
    Event as Event,
)
from watchtower.protocol.stream.types import (
    FrozenMap as FrozenMap,
)
from watchtower.protocol.stream.types import (
    StreamState as StreamState,
)
from watchtower.protocol.stream.types import (
    Subscription as Subscription,
)
from watchtower.protocol.stream.types import (
    subscriber_updated as subscriber_updated,
)
from watchtower.protocol.validation import require_bytes, require_int, require_text

# --- evolve --------------------------------------------------------------------------------------


def evolve(state: StreamState, event: Event) -> StreamState:
    """The state after `event`. Pure; O(1) per event apart from small copy-on-write updates.

    Raises MALFORMED_RECORD for an event that cannot apply to `state` (see the module docstring).
    """
    if event.stream_id != state.stream_id:
        raise MalformedRecordError(f"event for stream {event.stream_id!r} applied to {state.stream_id!r}")
    if (event.type == STREAM_CREATED) == state.created:
        raise MalformedRecordError(
            f"{event.type} cannot apply to a stream that is {'already' if state.created else 'not yet'} created"
        )
    _check_event_nonce(event)
    try:
        if event.type in _CHAINED:
            _check_command_origin(event)
        if event.type in REPLAY_EVENT_TYPES:
            changed = apply_replay_event(state, event)
        else:
            changed = _APPLY[event.type](state, event.body)
        if event.type == STREAM_MESSAGE_PUBLISHED and changed.config is not None and changed.config.confidential:
            # The writer's reply to an accepted keyload part names it; the log keeps that reply.
            changed = dataclasses.replace(changed, keyloads=fold_keyload_part(changed.keyloads, event.reply))
    except WatchtowerError as exc:
        raise MalformedRecordError(f"{event.type} body breaks a rule ({exc.code}): {exc.message}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise MalformedRecordError(f"{event.type} body is malformed: {exc!r}") from None
    if event.type == STREAM_MESSAGE_PUBLISHED:
        # A publish's nonce is not authenticated, so it must not move anyone's replay protection.
        return dataclasses.replace(changed, last_publish_digest=event.digest)
    if event.type == REPLAY_FINISHED:
        # Written for the replay worker, not caused by a new command: its origin is the replay's
        # registration, so it must not move the requester's replay protection back.
        return changed
    record = CallerRecord(event.nonce, event.digest, event.reply)
    return dataclasses.replace(changed, callers=changed.callers.set(event.caller, record))


def _check_event_nonce(event: Event) -> None:
    # decide accepted the command only with a nonce below the ceiling of its block; an event
    # beyond it was not written by decide. A nonce not above the caller's last one is NOT refused
    # here: events carry no caller signature, so a forged event with a high (in-ceiling) nonce
    # would otherwise make every genuine event after it refused, truncating the stream at the
    # next rebuild. The caller record simply follows the log's latest event.
    if event.nonce > nonce_ceiling(event.block_height):
        raise MalformedRecordError(
            f"{event.type} carries nonce {event.nonce}, beyond the ceiling of block {event.block_height}"
        )


_CHAINED: Final = frozenset({STREAM_CREATED, PUBLISHER_KEY_ROTATED})


def _check_command_origin(event: Event) -> None:
    # The carried command must be the one the envelope says caused the event, so a genuine
    # command cannot be pasted into an event that claims another origin. Its signature and
    # signer are checked by the apply functions (key_chain).
    body = event.body
    if not isinstance(body, (StreamCreated, PublisherKeyRotated)):
        return
    text = body.command
    if text is None:
        return  # refused with the reason by the apply function
    cmd = Command.from_dict(json.loads(text))
    if (cmd.caller, cmd.nonce, command_digest(cmd)) != (event.caller, event.nonce, event.digest):
        raise InvalidArgumentError(
            f"the carried {cmd.method} command (caller {cmd.caller}, nonce {cmd.nonce}) is not the command "
            f"that caused this event (caller {event.caller}, nonce {event.nonce})"
        )


def _created(state: StreamState, body: StreamCreated) -> StreamState:
    config = body.config
    if not isinstance(config, StreamConfig):
        raise InvalidArgumentError("config must be a stream configuration")
    if config.stream_id != state.stream_id:
        raise InvalidArgumentError(f"the config names stream {config.stream_id!r}")
    cmd = verify_creation_command(
        state.stream_id, body.command, publisher_key=config.publisher_key, owner=config.owner
    )
    return dataclasses.replace(
        state,
        created=True,
        owner=config.owner,
        config=config,
        key_schedule=KeySchedule.initial(config.publisher_key, command=command_json(cmd)),
    )


def _published(state: StreamState, body: StreamMessagePublished) -> StreamState:
    # The one invariant a rebuild re-checks: the log's sequences are gapless (a gap or a duplicate
    # means a corrupt log, or an event applied twice by a projection that lost its offset).
    sequence = require_int(body.sequence, "sequence", minimum=1)
    if sequence != state.head + 1:
        raise InvalidArgumentError(f"sequence {sequence} does not follow head {state.head}")
    return dataclasses.replace(state, head=sequence)


def _subscriber_updated(state: StreamState, body: SubscriberUpdated) -> StreamState:
    sub = Subscription(
        subscriber=require_text(body.subscriber, "subscriber"),
        mode=DeliveryMode(body.mode),
        status=SubscriptionStatus(body.status),
        created_at_sequence=require_int(body.created_at_sequence, "created_at_sequence"),
        start_cursor=require_int(body.start_cursor, "start_cursor"),
        filter_json=_optional(body.filter_json, str, "filter_json"),
        account_key_id=_optional(body.account_key_id, int, "account_key_id"),
    )
    previous = state.subscriptions.get(sub.subscriber)
    was_active = previous is not None and previous.status is SubscriptionStatus.ACTIVE
    is_active = sub.status is SubscriptionStatus.ACTIVE
    return dataclasses.replace(
        state,
        subscriptions=state.subscriptions.set(sub.subscriber, sub),
        active_subscribers=state.active_subscribers + int(is_active) - int(was_active),
    )


def _optional(value: Any, kind: type, name: str) -> Any:
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
        raise InvalidArgumentError(f"{name} must be a {kind.__name__} or null")
    return value


def _created_parts(state: StreamState) -> tuple[StreamConfig, KeySchedule]:
    # evolve already refused non-creation events on an uncreated stream; this narrows the types.
    if state.config is None or state.key_schedule is None:
        raise InvalidArgumentError("the stream has no configuration yet")
    return state.config, state.key_schedule


def _key_rotated(state: StreamState, body: PublisherKeyRotated) -> StreamState:
    config, schedule = _created_parts(state)
    effective = require_int(body.effective_sequence, "effective_sequence", minimum=1)
    new_key = require_bytes(body.new_key, "new_key", length=ED25519_PUBLIC_KEY_BYTES)
    cmd = verify_rotation_command(
        state.stream_id,
        body.command,
        new_key=new_key,
        owner=config.owner,
        signing_key_id=schedule.current.signing_key_id + 1,
        effective_sequence=effective,
    )
    rotated = schedule.rotate(new_key, head_sequence=effective - 1, command=command_json(cmd))
    if rotated.current.signing_key_id != body.new_signing_key_id:
        raise InvalidArgumentError(
            f"new_signing_key_id {body.new_signing_key_id} does not follow key {schedule.current.signing_key_id}"
        )
    config = dataclasses.replace(
        config,
        publisher_key=rotated.current.public_key,
        current_signing_key_id=rotated.current.signing_key_id,
    )
    return dataclasses.replace(state, key_schedule=rotated, config=config)


def _policy_changed(state: StreamState, body: SubscriptionPolicyChanged) -> StreamState:
    config, _ = _created_parts(state)
    config = dataclasses.replace(config, subscription_policy=SubscriptionPolicy(body.policy))
    return dataclasses.replace(state, config=config)


def _allowlist_changed(state: StreamState, body: AllowlistChanged) -> StreamState:
    address = require_address(body.address, "address")
    added = body.added
    if not isinstance(added, bool):
        raise InvalidArgumentError("added must be true or false")
    allowlist = state.allowlist | {address} if added else state.allowlist - {address}
    keyloads = state.keyloads
    if not added and address in state.allowlist and state.config is not None and state.config.confidential:
        keyloads = member_removed(keyloads)  # the member may hold the current key: re-key before the next message
    return dataclasses.replace(state, allowlist=allowlist, keyloads=keyloads)


def _key_epoch_rotated(state: StreamState, body: KeyEpochRotated) -> StreamState:
    return dataclasses.replace(state, last_key_epoch=require_int(body.key_epoch, "key_epoch"))


def _ingest_failed(state: StreamState, body: IngestFailed) -> StreamState:
    # Never touches head: CIP-7 "Ingestion failures MUST NOT increment sequence".
    last = require_int(body.last_tick, "last_tick", minimum=1)
    return dataclasses.replace(state, ingest_fail_count=state.ingest_fail_count + 1,
                               last_failed_tick=max(state.last_failed_tick, last))


_APPLY: Final[Mapping[str, Callable[[StreamState, Any], StreamState]]] = {
    STREAM_CREATED: _created,
    STREAM_MESSAGE_PUBLISHED: _published,
    SUBSCRIBER_UPDATED: _subscriber_updated,
    PUBLISHER_KEY_ROTATED: _key_rotated,
    SUBSCRIPTION_POLICY_CHANGED: _policy_changed,
    ALLOWLIST_CHANGED: _allowlist_changed,
    KEY_EPOCH_ROTATED: _key_epoch_rotated,
    INGEST_FAILED: _ingest_failed,
}


# --- Digest --------------------------------------------------------------------------------------


def state_digest(state: StreamState) -> str:
    """Hex SHA-256 of the deterministic CBOR of the whole state.

    Two states have equal digests iff they hold the same facts, whatever order the maps were built
    in (CBOR orders map keys canonically), so a live projection can be compared with a rebuild.
    """
    canonical = {
        "stream_id": state.stream_id,
        "created": state.created,
        "owner": state.owner,
        "config": None if state.config is None else state.config.to_dict(),
        "head": state.head,
        "key_schedule": None
        if state.key_schedule is None
        else [[e.signing_key_id, e.public_key, e.effective_sequence] for e in state.key_schedule.entries],
        "subscriptions": {k: s.to_dict() for k, s in state.subscriptions.items()},
        "active_subscribers": state.active_subscribers,
        "allowlist": sorted(state.allowlist),
        "last_key_epoch": state.last_key_epoch,
        "callers": {
            k: {"last_nonce": r.last_nonce, "last_digest": r.last_digest, "last_reply": r.last_reply}
            for k, r in state.callers.items()
        },
        "last_publish_digest": state.last_publish_digest,
        "replay_price_per_event_cby": state.replay_price_per_event_cby,
        "replay_orders": {k: event_fields(v) for k, v in state.replay_orders.items()},
    }
    if state.replays:  # absent while empty: the digest of a stream without replays is what it always was
        canonical["replays"] = {k: list(v) for k, v in state.replays.items()}
    if state.ingest_fail_count or state.last_failed_tick:  # likewise absent for a stream whose ingestion never failed
        canonical["ingest"] = [state.ingest_fail_count, state.last_failed_tick]
    if not state.keyloads.is_default:  # likewise absent for a stream that is not confidential
        canonical["keyloads"] = state.keyloads.canonical()
    return hashlib.sha256(cbor.encode(canonical)).hexdigest()
