"""The types a stream's aggregate is made of: its state (`StreamState`, with the `Subscription` and
`CallerRecord` it holds, in the persistent `FrozenMap`) and a fact on its log (`Event`).

`stream_state` folds events into states (`evolve`), and `replay_fold` folds the ICRC-77 replay
events for it; both build on these types, which import neither. Pure, no I/O.
"""

from __future__ import annotations

import dataclasses
import json
import zlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final, Generic, TypeVar

from watchtower.protocol.addresses import require_address
from watchtower.protocol.confidential.rules import NO_KEYLOADS, Keyloads
from watchtower.protocol.config import StreamConfig
from watchtower.protocol.enums import DeliveryMode, SubscriptionPolicy, SubscriptionStatus
from watchtower.protocol.errors import InvalidArgumentError
from watchtower.protocol.events import EVENT_BODIES, EventBody, ReplayOrdered, SubscriberUpdated
from watchtower.protocol.frozen_json import freeze_json
from watchtower.protocol.stream.key_schedule import KeySchedule
from watchtower.protocol.stream.ring_window import floor_for
from watchtower.protocol.validation import require_int, require_text

V = TypeVar("V")

# --- A persistent map ----------------------------------------------------------------------------

_FANOUT: Final = 64


class FrozenMap(Mapping[str, V], Generic[V]):
    """An immutable text-keyed map whose `set` costs O(n/64 + 64), not O(n).

    Every event updates its caller's record, and a stream may have 10,000 subscribers who are all
    callers; copying one dict of all of them per publish would make evolve O(callers). Keys are
    spread over 64 buckets by CRC-32 (deterministic across processes, unlike `hash`), and `set`
    copies only the touched bucket plus the bucket tuple. Buckets are never mutated after creation.
    """

    __slots__ = ("_buckets", "_len")

    def __init__(self, items: Mapping[str, V] | Iterable[tuple[str, V]] = ()) -> None:
        buckets: list[dict[str, V]] = [{} for _ in range(_FANOUT)]
        pairs = items.items() if isinstance(items, Mapping) else items
        for key, value in pairs:
            buckets[_bucket(key)][key] = value
        self._buckets: tuple[dict[str, V], ...] = tuple(buckets)
        self._len = sum(len(b) for b in buckets)

    def set(self, key: str, value: V) -> FrozenMap[V]:
        """A new map with `key` bound to `value`; this one is unchanged."""
        index = _bucket(key)
        bucket = dict(self._buckets[index])
        grew = key not in bucket
        bucket[key] = value
        new: FrozenMap[V] = FrozenMap.__new__(FrozenMap)
        new._buckets = (*self._buckets[:index], bucket, *self._buckets[index + 1 :])
        new._len = self._len + (1 if grew else 0)
        return new

    def __getitem__(self, key: str) -> V:
        if not isinstance(key, str):
            raise KeyError(key)
        return self._buckets[_bucket(key)][key]

    def __iter__(self) -> Iterator[str]:
        for bucket in self._buckets:
            yield from bucket

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        return f"FrozenMap({dict(sorted(self.items()))!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenMap, (dict(self.items()),))

    def without(self, key: str) -> FrozenMap[V]:
        """A new map without `key` (this one if it is absent); copies only the touched bucket."""
        index = _bucket(key)
        if key not in self._buckets[index]:
            return self
        bucket = {k: v for k, v in self._buckets[index].items() if k != key}
        new: FrozenMap[V] = FrozenMap.__new__(FrozenMap)
        new._buckets = (*self._buckets[:index], bucket, *self._buckets[index + 1 :])
        new._len = self._len - 1
        return new


def _bucket(key: str) -> int:
    return zlib.crc32(key.encode("utf-8", "surrogatepass")) % _FANOUT


# --- State ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Subscription:
    """A CIP-7 Subscription. `filter_json` is the validated filter as canonical JSON text, or None."""

    subscriber: str
    mode: DeliveryMode
    status: SubscriptionStatus
    created_at_sequence: int
    start_cursor: int
    filter_json: str | None = None
    account_key_id: int | None = None

    @property
    def filter(self) -> Any:
        """The filter as parsed JSON (None matches everything)."""
        return None if self.filter_json is None else json.loads(self.filter_json)

    def to_dict(self) -> dict[str, Any]:
        """The SubscriberUpdated body fields (without stream_id)."""
        return {
            "subscriber": self.subscriber,
            "mode": str(self.mode),
            "status": str(self.status),
            "filter_json": self.filter_json,
            "created_at_sequence": self.created_at_sequence,
            "start_cursor": self.start_cursor,
            "account_key_id": self.account_key_id,
        }


def subscriber_updated(stream_id: str, sub: Subscription) -> SubscriberUpdated:
    """The SubscriberUpdated event body that records `sub` on `stream_id`."""
    return SubscriberUpdated(
        stream_id=stream_id, subscriber=sub.subscriber, mode=str(sub.mode), status=str(sub.status),
        filter_json=sub.filter_json, created_at_sequence=sub.created_at_sequence, start_cursor=sub.start_cursor,
        account_key_id=sub.account_key_id,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class CallerRecord:
    """Replay protection for one caller: its last accepted nonce, that command's digest and reply."""

    last_nonce: int
    last_digest: bytes
    last_reply: Mapping[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class StreamState:
    """One stream's aggregate state. Build with `StreamState.initial(stream_id)`; change with `evolve`.

    `active_subscribers` counts ACTIVE subscriptions, kept by evolve so the cap check is O(1).
    `callers` holds replay protection for every method but publish; `last_publish_digest`
    identifies the message published at `head` (one 32-byte value, not per message).
    `replay_orders` holds the ICRC-77 replays being paid for (bounded by the requesters).
    """

    stream_id: str
    created: bool = False
    owner: str | None = None
    config: StreamConfig | None = None
    head: int = 0
    key_schedule: KeySchedule | None = None
    subscriptions: FrozenMap[Subscription] = dataclasses.field(default_factory=FrozenMap)
    active_subscribers: int = 0
    allowlist: frozenset[str] = frozenset()
    last_key_epoch: int | None = None
    callers: FrozenMap[CallerRecord] = dataclasses.field(default_factory=FrozenMap)
    last_publish_digest: bytes | None = None
    """`publish_digest` of the message at `head` (None before the first publish)."""
    replay_price_per_event_cby: int = 0
    """ICRC-77 ``icrc77:pricing`` perEvent: what one replayed event costs, in CBY wei (0: free)."""
    replay_orders: FrozenMap[ReplayOrdered] = dataclasses.field(default_factory=FrozenMap)
    """requester -> the ReplayOrdered body of its priced replay still settling (at most one each)."""
    replays: FrozenMap[tuple[str, str]] = dataclasses.field(default_factory=FrozenMap)
    """replay id (decimal text) -> (requester, status) of every replay registered on the stream, so a
    cancel_replay is answered per ICRC-77 (`replay_fold.REPLAY_STATUSES`)."""
    ingest_fail_count: int = 0
    """CIP-7 ingest_fail_count: the IngestFailed events of the stream (`protocol.ingestion.failure`)."""
    last_failed_tick: int = 0
    """The last ingestion tick an IngestFailed covers, so a tick is reported failed at most once."""
    keyloads: Keyloads = NO_KEYLOADS
    """A confidential stream's current keyload and re-key obligation, branch by branch (`confidential`);
    default otherwise."""

    @classmethod
    def initial(cls, stream_id: str) -> StreamState:
        """The state of a stream nobody has created yet."""
        return cls(require_text(stream_id, "stream_id"))

    @property
    def capacity(self) -> int | None:
        """ring_buffer_capacity (None before creation)."""
        return None if self.config is None else self.config.ring_buffer_capacity

    @property
    def floor(self) -> int:
        """The oldest retained sequence (1 while the stream is empty or uncreated)."""
        return 1 if self.config is None else floor_for(self.head, self.config.ring_buffer_capacity)

    @property
    def policy(self) -> SubscriptionPolicy | None:
        """The current subscription policy (None before creation)."""
        return None if self.config is None else self.config.subscription_policy




# --- Events --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    """A fact in a log: what happened (`body`, a typed `events` class) and who caused it.

    `caller`, `nonce`, `digest` and `reply` identify the command, so evolve can rebuild replay
    protection; `block_height` is stamped by the worker (DESIGN §5); `stream_id` is the key of the
    log the event is on. The reply is deep-frozen. For a StreamMessagePublished, `caller` is the
    owner the command named, `nonce` is as sent (not authenticated: a publish carries no checked
    caller signature) and `digest` is the message's `signing.publish_digest`.
    """

    stream_id: str
    block_height: int
    caller: str
    nonce: int
    digest: bytes
    reply: Mapping[str, Any]
    body: EventBody

    def __post_init__(self) -> None:
        if type(self.body) not in _BODY_CLASSES:
            raise InvalidArgumentError(f"an event body must be an event class, got {type(self.body).__name__}")
        require_text(self.stream_id, "stream_id")
        require_int(self.block_height, "block_height")
        require_address(self.caller, "caller")
        require_int(self.nonce, "nonce", minimum=1)
        if not isinstance(self.digest, bytes) or len(self.digest) != _DIGEST_BYTES:
            raise InvalidArgumentError("digest must be a 32-byte SHA-256")
        if not isinstance(self.reply, Mapping):
            raise InvalidArgumentError("event reply must be an object")
        object.__setattr__(self, "reply", freeze_json(self.reply, "reply"))

    @property
    def type(self) -> str:
        """The event type's name (= its Avro record name)."""
        return self.body.TYPE


_DIGEST_BYTES: Final = 32  # SHA-256
_BODY_CLASSES: Final = frozenset(EVENT_BODIES.values())
