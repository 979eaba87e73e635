"""The events: one frozen, typed class per event type, owned by the core.

An event's body is one of these classes; `stream_state.Event` wraps it with the envelope (the
log it is on, its block height, and the command that caused it). Each class has exactly the body
fields of its latest ``<Type>.v<N>.avsc``, in the schema's order: the Avro record is the body's
fields followed by ``block_height`` and ``caused_by`` (the envelope), and `schemas.events` maps one
to the other by reflection. `tests/schemas/test_typed_events.py` proves class and ``.avsc`` equal
field by field (name, order, Avro type), so neither can drift from the other.

The classes do not re-validate their fields: an Avro decode already guarantees each field's type,
and the rules that fold an event check its values (`evolve` refuses what breaks one).
StreamMessagePublished carries the ten CIP-7 reference fields and never the message: the message
is on the messages topic, found by (stream_id, sequence) and checked against payload_hash.

The stream's, the registry's, replay's and ingestion's events are declared here; the ledger's
(accounts, CBY, paid streams, purchases) in `ledger.events`. `EventBody`, `EVENT_BODIES` and
`BODY_FIELDS` list every event of both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, Final

from watchtower.protocol.config import StreamConfig
from watchtower.protocol.ledger.events import (
    AccountKeyRegistered,
    AccountKeyRevoked,
    ActorAuthorizationGranted,
    ActorAuthorizationRevoked,
    ActorCreated,
    CbyBurned,
    CbyCredited,
    CbyDebited,
    CbyMinted,
    EpochAccessFailed,
    EpochAccessIdempotent,
    EpochAccessPurchased,
    EpochAccessRequested,
    PaidStreamRegistered,
    SpendingAllowanceGranted,
    SpendingAllowanceRevoked,
)


@dataclasses.dataclass(frozen=True, slots=True)
class StreamCreated:
    """A stream was created with this configuration, by this signed create_stream command.

    v2 added `command` (canonical JSON of the owner's signed command, `key_chain`); a v1 record
    is upcast with ``command=None``, which the fold refuses (docs/key-chain.md). v3 added
    ``config.confidential``; v1 and v2 records are upcast with it false.
    """

    TYPE: ClassVar[str] = "StreamCreated"
    config: StreamConfig
    command: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class StreamMessagePublished:
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


@dataclasses.dataclass(frozen=True, slots=True)
class SubscriberUpdated:
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


@dataclasses.dataclass(frozen=True, slots=True)
class PublisherKeyRotated:
    """CIP-7 PublisherKeyRotated, with the owner's signed rotate_publisher_key command (v2, as StreamCreated v3)."""

    TYPE: ClassVar[str] = "PublisherKeyRotated"
    stream_id: str
    old_key: bytes
    new_key: bytes
    old_signing_key_id: int
    new_signing_key_id: int
    effective_sequence: int
    command: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class SubscriptionPolicyChanged:
    """The owner set the subscription policy."""

    TYPE: ClassVar[str] = "SubscriptionPolicyChanged"
    stream_id: str
    policy: str


@dataclasses.dataclass(frozen=True, slots=True)
class AllowlistChanged:
    """The owner added an address to, or removed it from, the allowlist."""

    TYPE: ClassVar[str] = "AllowlistChanged"
    stream_id: str
    address: str
    added: bool


@dataclasses.dataclass(frozen=True, slots=True)
class KeyEpochRotated:
    """CIP-7 KeyEpochRotated: the owner announced key-epoch progression."""

    TYPE: ClassVar[str] = "KeyEpochRotated"
    stream_id: str
    key_epoch: int
    effective_block_height: int
    announced_by: str


@dataclasses.dataclass(frozen=True, slots=True)
class FeedRegistered:
    """The registry listed a stream as a feed (on the registry's key)."""

    TYPE: ClassVar[str] = "FeedRegistered"
    feed_id: int
    stream_id: str
    owner: str
    name: str
    description: str


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayPricingSet:
    """The owner set the stream's ICRC-77 per-event replay price."""

    TYPE: ClassVar[str] = "ReplayPricingSet"
    stream_id: str
    price_per_event_cby: int


Skip = tuple[int, int]
"""ICRC-77 ``skip`` as ``(modulus, offset)``: sequence *s* is delivered iff ``s % modulus == offset``."""


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayPlan:
    """One ICRC-77 replay as the stream's writer planned it.

    The plan is ``[first, end_exclusive)`` (`replay.rules.plan_replay` at the head of the deciding
    block); ``to_sequence`` is what was asked (None: open-ended, and then ``end_id`` is the last
    sequence the replay will deliver, ``end_exclusive - 1``). ``filter`` is the CIP-7 filter DSL as
    canonical JSON text (or None) and ``skip`` the `Skip` rule (or None). ``price_cby`` is what the
    requester is charged (0: free). ``namespace`` is the requested namespace as given
    (``feed:<id>`` or the stream id). The field order is the one of the events' ``.avsc``.

    It is every shape of one replay: the ReplayOrdered and ReplayRegistered events below are a
    plan, and so is the replay fold's `replay.status.ReplayView` (a plan and its progress); the
    replay topic's ``registered`` record carries one (`replay.records.ReplayRegistration`).
    """

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
    skip: Skip | None
    memo_hex: str
    price_cby: int


PLAN_FIELDS: Final[tuple[str, ...]] = tuple(f.name for f in dataclasses.fields(ReplayPlan))
"""The plan's field names, in order."""


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayOrdered(ReplayPlan):
    """A priced ICRC-77 replay being paid for by the requester's account (in flight until settled)."""

    TYPE: ClassVar[str] = "ReplayOrdered"


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayRegistered(ReplayPlan):
    """An accepted ICRC-77 replay (free, or paid): what the replay topic's registration holds."""

    TYPE: ClassVar[str] = "ReplayRegistered"


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayPaymentFailed:
    """The requester's account could not pay for an ordered replay (nothing charged)."""

    TYPE: ClassVar[str] = "ReplayPaymentFailed"
    stream_id: str
    replay_id: int
    requester: str
    price_cby: int
    code: str
    message: str


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayCancelRequested:
    """A signed cancel_replay (honoured by the replay fold from the requester only)."""

    TYPE: ClassVar[str] = "ReplayCancelRequested"
    stream_id: str
    replay_id: int
    requester: str


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayFinished:
    """The replay worker fulfilled a replay to its end (completed, canceled or errored)."""

    TYPE: ClassVar[str] = "ReplayFinished"
    stream_id: str
    replay_id: int
    requester: str
    outcome: str


@dataclasses.dataclass(frozen=True, slots=True)
class IngestFailed:
    """CIP-7 IngestFailed: an ingestion tick (or a skipped range) published nothing."""

    TYPE: ClassVar[str] = "IngestFailed"
    stream_id: str
    reason: str
    timestamp_unix_ms: int
    first_tick: int
    last_tick: int
    detail: str


@dataclasses.dataclass(frozen=True, slots=True)
class _RunnerEntry:
    """The fields of a runner-registry entry: the runner's address and its label."""

    runner: str
    label: str


@dataclasses.dataclass(frozen=True, slots=True)
class RunnerRegistered(_RunnerEntry):
    """An ingestion runner registered (on the runner registry's key)."""

    TYPE: ClassVar[str] = "RunnerRegistered"


@dataclasses.dataclass(frozen=True, slots=True)
class RunnerRetired(_RunnerEntry):
    """An ingestion runner left the registry."""

    TYPE: ClassVar[str] = "RunnerRetired"


EventBody = (
    StreamCreated
    | StreamMessagePublished
    | SubscriberUpdated
    | PublisherKeyRotated
    | SubscriptionPolicyChanged
    | AllowlistChanged
    | KeyEpochRotated
    | FeedRegistered
    | AccountKeyRegistered
    | AccountKeyRevoked
    | ActorAuthorizationGranted
    | ActorAuthorizationRevoked
    | ActorCreated
    | SpendingAllowanceGranted
    | SpendingAllowanceRevoked
    | CbyCredited
    | CbyDebited
    | CbyMinted
    | CbyBurned
    | PaidStreamRegistered
    | EpochAccessRequested
    | EpochAccessPurchased
    | EpochAccessIdempotent
    | EpochAccessFailed
    | ReplayPricingSet
    | ReplayOrdered
    | ReplayRegistered
    | ReplayPaymentFailed
    | ReplayCancelRequested
    | ReplayFinished
    | IngestFailed
    | RunnerRegistered
    | RunnerRetired
)
"""Any event's body."""

EVENT_BODIES: Final[Mapping[str, type[EventBody]]] = {cls.TYPE: cls for cls in (
    StreamCreated,
    StreamMessagePublished,
    SubscriberUpdated,
    PublisherKeyRotated,
    SubscriptionPolicyChanged,
    AllowlistChanged,
    KeyEpochRotated,
    FeedRegistered,
    AccountKeyRegistered,
    AccountKeyRevoked,
    ActorAuthorizationGranted,
    ActorAuthorizationRevoked,
    ActorCreated,
    SpendingAllowanceGranted,
    SpendingAllowanceRevoked,
    CbyCredited,
    CbyDebited,
    CbyMinted,
    CbyBurned,
    PaidStreamRegistered,
    EpochAccessRequested,
    EpochAccessPurchased,
    EpochAccessIdempotent,
    EpochAccessFailed,
    ReplayPricingSet,
    ReplayOrdered,
    ReplayRegistered,
    ReplayPaymentFailed,
    ReplayCancelRequested,
    ReplayFinished,
    IngestFailed,
    RunnerRegistered,
    RunnerRetired,
)}
"""The body class of each event type, by type name (= Avro record name)."""

BODY_FIELDS: Final[Mapping[str, tuple[str, ...]]] = {
    name: tuple(f.name for f in dataclasses.fields(cls)) for name, cls in EVENT_BODIES.items()
}
"""The body field names of each event type, in the schema's order."""

EVENT_TYPES: Final = frozenset(EVENT_BODIES)
"""Every event type name."""


def event_fields(body: EventBody) -> dict[str, Any]:
    """The body's fields by name, shallow (a config stays a `StreamConfig`; `skip` a tuple)."""
    return {name: getattr(body, name) for name in BODY_FIELDS[body.TYPE]}
