"""Typed events: one frozen class per event type, the Python side of its latest ``<Type>.v<N>.avsc``.

Each class has exactly the fields of its schema, in the schema's order: the event's body fields,
then ``block_height`` and ``caused_by`` (an `EventOrigin`: the command that caused the event).
`tests/schemas/test_typed_events.py` proves class and ``.avsc`` equal field by field (name, order,
Avro type), so neither can drift from the other.

The codec converts in two steps, both here:

- `from_event` / `to_event`: between the fold's input (`protocol.stream_state.Event`, a type name
  and a JSON-like body) and the typed class;
- `to_record` / `from_record`: between the typed class and the Avro record dict fastavro writes.

The classes do not re-validate their fields: an Avro decode already guarantees each field's
type, and `Event` (built by `to_event`) checks the envelope; the body's rules are `evolve`'s.
StreamMessagePublished carries the ten CIP-7 reference fields and never the message: the message
is on the messages topic, found by (stream_id, sequence) and checked against payload_hash.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any, ClassVar, Final

from watchtower.protocol.config import StreamConfig
from watchtower.protocol.paid import PaidStreamConfig
from watchtower.protocol.signed_command import BYTES_TAG
from watchtower.protocol.stream_state import Event
from watchtower.schemas.codec import register_upcaster
from watchtower.schemas.records import stream_config_from_record, stream_config_to_record

ENVELOPE_FIELDS: Final = ("block_height", "caused_by")


@dataclasses.dataclass(frozen=True, slots=True)
class EventOrigin:
    """The command that caused an event (Avro ``watchtower.v1.EventOrigin``).

    `aggregate_id` is the key of the log the event is on: the stream id, or the registry's key.
    `reply_json` is the reply as JSON text: replies are free-form, so Avro carries them as text.
    """

    aggregate_id: str
    caller: str
    nonce: int
    digest: bytes
    reply_json: str


@dataclasses.dataclass(frozen=True, slots=True)
class StreamCreatedV3:
    """A stream was created with this configuration, by this signed create_stream command.

    v2 added `command` (canonical JSON of the owner's signed command, `key_chain`); a v1 record
    is upcast with ``command=None``, which the fold refuses (docs/key-chain.md). v3 added
    ``config.confidential``; v1 and v2 records are upcast with it false.
    """

    TYPE: ClassVar[str] = "StreamCreated"
    config: StreamConfig
    command: str | None
    block_height: int
    caused_by: EventOrigin


@dataclasses.dataclass(frozen=True, slots=True)
class StreamMessagePublishedV1:
    """CIP-7 StreamMessagePublished: a reference to the message at (stream_id, sequence)."""

    TYPE: ClassVar[str] = "StreamMessagePublished"
    stream_id: str
    version: int
    sequence: int
    kind: str
    content_type: str
    payload_format: str
    payload_hash: bytes
    key_epoch: int | None
    signing_key_id: int
    timestamp_unix_ms: int
    block_height: int
    caused_by: EventOrigin


@dataclasses.dataclass(frozen=True, slots=True)
class SubscriberUpdatedV1:
    """CIP-7 SubscriberUpdated: a subscription was created, updated or cancelled."""

    TYPE: ClassVar[str] = "SubscriberUpdated"
    stream_id: str
    subscriber: str
    mode: str
    status: str
    filter_json: str | None
    created_at_sequence: int
    start_cursor: int
    account_key_id: int | None
    block_height: int
    caused_by: EventOrigin


@dataclasses.dataclass(frozen=True, slots=True)
class PublisherKeyRotatedV2:
    """CIP-7 PublisherKeyRotated, with the owner's signed rotate_publisher_key command (v2, as StreamCreatedV3)."""

    TYPE: ClassVar[str] = "PublisherKeyRotated"
    stream_id: str
    old_key: bytes
    new_key: bytes
    old_signing_key_id: int
    new_signing_key_id: int
    effective_sequence: int
    command: str | None
    block_height: int
    caused_by: EventOrigin


@dataclasses.dataclass(frozen=True, slots=True)
class SubscriptionPolicyChangedV1:
    """The owner set the subscription policy."""

    TYPE: ClassVar[str] = "SubscriptionPolicyChanged"
    stream_id: str
    policy: str
    block_height: int
    caused_by: EventOrigin


@dataclasses.dataclass(frozen=True, slots=True)
class AllowlistChangedV1:
    """The owner added an address to, or removed it from, the allowlist."""

    TYPE: ClassVar[str] = "AllowlistChanged"
    stream_id: str
    address: str
    added: bool
    block_height: int
    caused_by: EventOrigin


@dataclasses.dataclass(frozen=True, slots=True)
class KeyEpochRotatedV1:
    """CIP-7 KeyEpochRotated: the owner announced key-epoch progression."""

    TYPE: ClassVar[str] = "KeyEpochRotated"
    stream_id: str
    key_epoch: int
    effective_block_height: int
    announced_by: str
    block_height: int
    caused_by: EventOrigin


@dataclasses.dataclass(frozen=True, slots=True)
class FeedRegisteredV1:
    """The registry listed a stream as a feed (on the registry's key)."""

    TYPE: ClassVar[str] = "FeedRegistered"
    feed_id: int
    stream_id: str
    owner: str
    name: str
    description: str
    block_height: int
    caused_by: EventOrigin


@dataclasses.dataclass(frozen=True, slots=True)
class AccountKeyRegisteredV1:
    """CIP-7 AccountKeyRegistered: an account registered an X25519 key (on ``acct:<account>``)."""

    TYPE: ClassVar[str] = "AccountKeyRegistered"
    account: str
    account_key_id: int
    scheme: str
    public_key: bytes
    block_height: int
    caused_by: EventOrigin


@dataclasses.dataclass(frozen=True, slots=True)
class AccountKeyRevokedV1:
    """CIP-7 AccountKeyRevoked."""

    TYPE: ClassVar[str] = "AccountKeyRevoked"
    account: str
    account_key_id: int
    block_height: int
    caused_by: EventOrigin


@dataclasses.dataclass(frozen=True, slots=True)
class ActorAuthorizationGrantedV1:
    """CIP-7 ActorAuthorizationGranted (scope DECRYPT)."""

    TYPE: ClassVar[str] = "ActorAuthorizationGranted"
    account: str
    actor: str
    stream_id: str
    scope: str
    block_height: int
    caused_by: EventOrigin


@dataclasses.dataclass(frozen=True, slots=True)
class ActorAuthorizationRevokedV1:
    """CIP-7 ActorAuthorizationRevoked."""

    TYPE: ClassVar[str] = "ActorAuthorizationRevoked"
    account: str
    actor: str
    stream_id: str
    block_height: int
    caused_by: EventOrigin


@dataclasses.dataclass(frozen=True, slots=True)
class CbyCreditedV1:
    """CBY credited to an account (mint, transfer, publisher_revenue or protocol_fee)."""

    TYPE: ClassVar[str] = "CbyCredited"
    account: str
    amount_cby: int
    reason: str
    ref: str
    counterparty: str
    block_height: int
    caused_by: EventOrigin


@dataclasses.dataclass(frozen=True, slots=True)
class CbyDebitedV1:
    """CBY debited from an account (transfer, purchase or burn)."""

    TYPE: ClassVar[str] = "CbyDebited"
    account: str
    amount_cby: int
    reason: str
    ref: str
    counterparty: str
    block_height: int
    caused_by: EventOrigin


@dataclasses.dataclass(frozen=True, slots=True)
class CbyMintedV1:
    """The genesis minter minted CBY (on ``cby:supply``)."""

    TYPE: ClassVar[str] = "CbyMinted"
    to: str
    amount_cby: int
    total_supply_cby: int
    block_height: int
    caused_by: EventOrigin


@dataclasses.dataclass(frozen=True, slots=True)
class CbyBurnedV1:
    """An account burned CBY (on ``cby:supply``)."""

    TYPE: ClassVar[str] = "CbyBurned"
    account: str
    amount_cby: int
    total_supply_cby: int
    block_height: int
    caused_by: EventOrigin


@dataclasses.dataclass(frozen=True, slots=True)
class PaidStreamRegisteredV1:
    """A PLATFORM_MANAGED stream registered with the key manager (on ``paid:<stream_id>``)."""

    TYPE: ClassVar[str] = "PaidStreamRegistered"
    stream_id: str
    owner: str
    paid_stream_config: PaidStreamConfig
    block_height: int
    caused_by: EventOrigin


@dataclasses.dataclass(frozen=True, slots=True)
class EpochAccessRequestedV1:
    """A priced purchase sent to the payer's account (in flight until settled)."""

    TYPE: ClassVar[str] = "EpochAccessRequested"
    purchase_id: str
    stream_id: str
    beneficiary_account: str
    payer_account: str
    from_key_epoch: int
    to_key_epoch: int
    epochs_charged: int
    publisher_amount_cby: int
    protocol_fee_cby: int
    total_amount_cby: int
    block_height: int
    caused_by: EventOrigin


@dataclasses.dataclass(frozen=True, slots=True)
class EpochAccessPurchasedV1:
    """CIP-7 EpochAccessPurchased (the receipt's fields and the purchase id)."""

    TYPE: ClassVar[str] = "EpochAccessPurchased"
    purchase_id: str
    stream_id: str
    beneficiary_account: str
    payer_account: str
    from_key_epoch: int
    to_key_epoch: int
    epochs_charged: int
    publisher_amount_cby: int
    protocol_fee_cby: int
    total_amount_cby: int
    block_height: int
    caused_by: EventOrigin


@dataclasses.dataclass(frozen=True, slots=True)
class EpochAccessIdempotentV1:
    """CIP-7 EpochAccessIdempotent: already covered, nothing charged."""

    TYPE: ClassVar[str] = "EpochAccessIdempotent"
    stream_id: str
    beneficiary_account: str
    target_key_epoch: int
    active_until_key_epoch: int
    block_height: int
    caused_by: EventOrigin


@dataclasses.dataclass(frozen=True, slots=True)
class EpochAccessFailedV1:
    """A purchase the payer's account refused (nothing charged)."""

    TYPE: ClassVar[str] = "EpochAccessFailed"
    purchase_id: str
    stream_id: str
    beneficiary_account: str
    code: str
    message: str
    block_height: int
    caused_by: EventOrigin


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayPricingSetV1:
    """The owner set the stream's ICRC-77 per-event replay price."""

    TYPE: ClassVar[str] = "ReplayPricingSet"
    stream_id: str
    price_per_event_cby: int
    block_height: int
    caused_by: EventOrigin


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayOrderedV1:
    """A priced ICRC-77 replay being paid for by the requester's account (in flight until settled)."""

    TYPE: ClassVar[str] = "ReplayOrdered"
    stream_id: str
    replay_id: int
    namespace: str
    requester: str
    from_sequence: int
    to_sequence: int | None
    first: int
    end_exclusive: int
    end_id: int | None
    filter: str | None
    skip: list[int] | None
    memo_hex: str
    price_cby: int
    block_height: int
    caused_by: EventOrigin


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayRegisteredV1:
    """An accepted ICRC-77 replay (free, or paid): what the replay topic's registration holds."""

    TYPE: ClassVar[str] = "ReplayRegistered"
    stream_id: str
    replay_id: int
    namespace: str
    requester: str
    from_sequence: int
    to_sequence: int | None
    first: int
    end_exclusive: int
    end_id: int | None
    filter: str | None
    skip: list[int] | None
    memo_hex: str
    price_cby: int
    block_height: int
    caused_by: EventOrigin


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayPaymentFailedV1:
    """The requester's account could not pay for an ordered replay (nothing charged)."""

    TYPE: ClassVar[str] = "ReplayPaymentFailed"
    stream_id: str
    replay_id: int
    requester: str
    price_cby: int
    code: str
    message: str
    block_height: int
    caused_by: EventOrigin


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayCancelRequestedV1:
    """A signed cancel_replay (honoured by the replay fold from the requester only)."""

    TYPE: ClassVar[str] = "ReplayCancelRequested"
    stream_id: str
    replay_id: int
    requester: str
    block_height: int
    caused_by: EventOrigin


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayFinishedV1:
    """The replay worker fulfilled a replay to its end (completed, canceled or errored)."""

    TYPE: ClassVar[str] = "ReplayFinished"
    stream_id: str
    replay_id: int
    requester: str
    outcome: str
    block_height: int
    caused_by: EventOrigin


@dataclasses.dataclass(frozen=True, slots=True)
class IngestFailedV1:
    """CIP-7 IngestFailed: an ingestion tick (or a skipped range) published nothing."""

    TYPE: ClassVar[str] = "IngestFailed"
    stream_id: str
    reason: str
    timestamp_unix_ms: int
    first_tick: int
    last_tick: int
    detail: str
    block_height: int
    caused_by: EventOrigin


@dataclasses.dataclass(frozen=True, slots=True)
class RunnerRegisteredV1:
    """An ingestion runner registered (on the runner registry's key)."""

    TYPE: ClassVar[str] = "RunnerRegistered"
    runner: str
    label: str
    block_height: int
    caused_by: EventOrigin


@dataclasses.dataclass(frozen=True, slots=True)
class RunnerRetiredV1:
    """An ingestion runner left the registry."""

    TYPE: ClassVar[str] = "RunnerRetired"
    runner: str
    label: str
    block_height: int
    caused_by: EventOrigin


TypedEvent = (
    StreamCreatedV3
    | StreamMessagePublishedV1
    | SubscriberUpdatedV1
    | PublisherKeyRotatedV2
    | SubscriptionPolicyChangedV1
    | AllowlistChangedV1
    | KeyEpochRotatedV1
    | FeedRegisteredV1
    | AccountKeyRegisteredV1
    | AccountKeyRevokedV1
    | ActorAuthorizationGrantedV1
    | ActorAuthorizationRevokedV1
    | CbyCreditedV1
    | CbyDebitedV1
    | CbyMintedV1
    | CbyBurnedV1
    | PaidStreamRegisteredV1
    | EpochAccessRequestedV1
    | EpochAccessPurchasedV1
    | EpochAccessIdempotentV1
    | EpochAccessFailedV1
    | ReplayPricingSetV1
    | ReplayOrderedV1
    | ReplayRegisteredV1
    | ReplayPaymentFailedV1
    | ReplayCancelRequestedV1
    | ReplayFinishedV1
    | IngestFailedV1
    | RunnerRegisteredV1
    | RunnerRetiredV1
)

EVENT_CLASSES: Final[Mapping[str, type[TypedEvent]]] = {
    cls.TYPE: cls
    for cls in (
        StreamCreatedV3,
        StreamMessagePublishedV1,
        SubscriberUpdatedV1,
        PublisherKeyRotatedV2,
        SubscriptionPolicyChangedV1,
        AllowlistChangedV1,
        KeyEpochRotatedV1,
        FeedRegisteredV1,
        AccountKeyRegisteredV1,
        AccountKeyRevokedV1,
        ActorAuthorizationGrantedV1,
        ActorAuthorizationRevokedV1,
        CbyCreditedV1,
        CbyDebitedV1,
        CbyMintedV1,
        CbyBurnedV1,
        PaidStreamRegisteredV1,
        EpochAccessRequestedV1,
        EpochAccessPurchasedV1,
        EpochAccessIdempotentV1,
        EpochAccessFailedV1,
        ReplayPricingSetV1,
        ReplayOrderedV1,
        ReplayRegisteredV1,
        ReplayPaymentFailedV1,
        ReplayCancelRequestedV1,
        ReplayFinishedV1,
        IngestFailedV1,
        RunnerRegisteredV1,
        RunnerRetiredV1,
    )
}
"""The latest typed class of each event type, by type name (= Avro record name)."""

# Field names per class, computed once: the conversions below run per record on the hot path.
_FIELDS: Final = {name: tuple(f.name for f in dataclasses.fields(cls)) for name, cls in EVENT_CLASSES.items()}
BODY_FIELDS: Final[Mapping[str, tuple[str, ...]]] = {
    name: tuple(f for f in fields if f not in ENVELOPE_FIELDS) for name, fields in _FIELDS.items()
}
"""The body field names each event carries (its schema's fields minus the envelope)."""
_ARRAYS: Final[Mapping[str, tuple[str, ...]]] = {"ReplayOrdered": ("skip",), "ReplayRegistered": ("skip",)}
"""Body fields that are Avro arrays (a frozen body holds them as tuples)."""


# --- Event <-> typed -----------------------------------------------------------------------------


def from_event(event: Event) -> TypedEvent:
    """The typed form of `event`: exactly its schema's body fields (a pre-reference ``message``
    key in a publish body is not one of them, so it is not carried).

    Raises KeyError / TypeError / ValueError / WatchtowerError for a body that lacks a field or
    breaks StreamConfig's rules; the codec turns those into SchemaMismatchError.
    """
    cls = EVENT_CLASSES[event.type]
    body = event.body
    origin = EventOrigin(event.stream_id, event.caller, event.nonce, event.digest, _reply_json(event.reply))
    if cls is StreamCreatedV3:
        return StreamCreatedV3(StreamConfig.from_dict(body["config"]), body["command"], event.block_height, origin)
    if cls is PaidStreamRegisteredV1:
        config = PaidStreamConfig.from_dict(body["paid_stream_config"])
        return PaidStreamRegisteredV1(body["stream_id"], body["owner"], config, event.block_height, origin)
    values = [body[name] for name in BODY_FIELDS[cls.TYPE]]
    if cls.TYPE in _ARRAYS:
        values = [list(v) if name in _ARRAYS[cls.TYPE] and v is not None else v
                  for name, v in zip(BODY_FIELDS[cls.TYPE], values, strict=True)]
    return cls(*values, event.block_height, origin)  # type: ignore[call-arg]


def to_event(typed: TypedEvent) -> Event:
    """The fold's `Event` for a typed event (InvalidArgumentError when the envelope is invalid)."""
    origin = typed.caused_by
    if isinstance(typed, StreamCreatedV3):
        body: dict[str, Any] = {"config": typed.config.to_dict(), "command": typed.command}
    elif isinstance(typed, PaidStreamRegisteredV1):
        body = {"stream_id": typed.stream_id, "owner": typed.owner,
                "paid_stream_config": typed.paid_stream_config.to_dict()}
    else:
        body = {name: getattr(typed, name) for name in BODY_FIELDS[typed.TYPE]}
    return Event(
        type=typed.TYPE,
        stream_id=origin.aggregate_id,
        block_height=typed.block_height,
        caller=origin.caller,
        nonce=origin.nonce,
        digest=origin.digest,
        reply=json.loads(origin.reply_json, object_hook=_unwrap_bytes),
        body=body,
    )


def _reply_json(reply: Mapping[str, Any]) -> str:
    # json's C encoder walks dicts, lists and tuples; the hook turns the rest (frozen maps, bytes)
    # into their JSON-safe form (`signed_command.json_safe`), so no Python walk of the whole reply.
    return json.dumps(reply, separators=(",", ":"), sort_keys=True, default=_json_default)


def _json_default(value: object) -> object:
    if isinstance(value, bytes):
        return {BYTES_TAG: value.hex()}
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"a reply value of type {type(value).__name__} is not JSON")


def _unwrap_bytes(obj: dict[str, Any]) -> Any:
    # Inverse of `_json_default` for bytes (Event freezes the rest); ValueError / TypeError on a
    # tag that holds no hex text, which the codec reports as a malformed record.
    if len(obj) == 1 and BYTES_TAG in obj:
        return bytes.fromhex(obj[BYTES_TAG])
    return obj


def event_record(event: Event) -> dict[str, Any]:
    """``to_record(from_event(event))`` in one step, without building the typed object: the writer
    encodes one event per publish, so this is its path (a test proves both give the same record)."""
    if event.type in (StreamCreatedV3.TYPE, PaidStreamRegisteredV1.TYPE):
        return to_record(from_event(event))
    body = event.body
    record = {name: body[name] for name in BODY_FIELDS[event.type]}
    for name in _ARRAYS.get(event.type, ()):
        if record[name] is not None:
            # A frozen body holds tuples, and fastavro reads a tuple in a union as (branch, value).
            record[name] = list(record[name])
    record["block_height"] = event.block_height
    record["caused_by"] = {
        "aggregate_id": event.stream_id,
        "caller": event.caller,
        "nonce": event.nonce,
        "digest": event.digest,
        "reply_json": _reply_json(event.reply),
    }
    return record


def _no_command(old: dict[str, Any]) -> dict[str, Any]:
    # v1 carried no signed command: the record decodes, and the fold refuses it with the reason
    # (only the owner's signed command can put a publisher key in force).
    return {**old, "command": None}


def _not_confidential(old: dict[str, Any]) -> dict[str, Any]:
    # Confidential streams came with v3: every stream created before was not one.
    return {**old, "config": {**old["config"], "confidential": False}}


register_upcaster("StreamCreated", 1, _no_command)
register_upcaster("StreamCreated", 2, _not_confidential)
register_upcaster("PublisherKeyRotated", 1, _no_command)


# --- typed <-> Avro record -----------------------------------------------------------------------


def to_record(typed: TypedEvent) -> dict[str, Any]:
    """The Avro record of `typed`, field for field."""
    record = {name: getattr(typed, name) for name in _FIELDS[typed.TYPE]}
    record["caused_by"] = {
        "aggregate_id": typed.caused_by.aggregate_id,
        "caller": typed.caused_by.caller,
        "nonce": typed.caused_by.nonce,
        "digest": typed.caused_by.digest,
        "reply_json": typed.caused_by.reply_json,
    }
    if isinstance(typed, StreamCreatedV3):
        record["config"] = stream_config_to_record(typed.config)
    elif isinstance(typed, PaidStreamRegisteredV1):
        record["paid_stream_config"] = typed.paid_stream_config.to_dict()
    return record


def from_record(type_name: str, record: Mapping[str, Any]) -> TypedEvent:
    """The typed event of an Avro record of `type_name` (MalformedRecordError for a config that
    breaks a CIP-7 rule; KeyError / TypeError when the record is not of that schema)."""
    cls = EVENT_CLASSES[type_name]
    values = dict(record)
    values["caused_by"] = EventOrigin(**record["caused_by"])
    if cls is StreamCreatedV3:
        values["config"] = stream_config_from_record(record["config"])
    elif cls is PaidStreamRegisteredV1:
        values["paid_stream_config"] = PaidStreamConfig.from_dict(record["paid_stream_config"])
    return cls(**values)
