"""Read-side views of the stream actor: what the projections keep, and how events change it (pure).

Projections keep five tables of JSON values, keyed by text:

- ``streams[stream_id]``: configuration, owner, key schedule, policy, allowlist, key epoch and
  subscriber counts (changes only on non-publish events);
- ``heads[stream_id]``: head, floor and capacity, folded from the verified StreamMessagePublished
  events (and the events-topic offset of the last one, to tell a redelivery from a forged copy);
- ``offsets[stream_id]``: where the stream's window lies in the messages topic: the last indexed
  sequence and the offsets of it and of the floor (`apply_message`);
- ``subscriptions[stream_id + "/" + subscriber]``: one CIP-7 Subscription each;
- ``registry[str(feed_id)]``: one WatchtowerRegistry listing each.

They hold indexes, never payloads: `get_since` finds payloads in the messages topic through
`OffsetIndex` (sequence -> offset). `apply_event` and `apply_message` are the only ways the tables
change, so a live projection (Faust tables) and a rebuild from the log (plain dicts) run the same
code, and `views_digest` can compare them. Records that break a rule are refused before any table
changes (`view_checks`); the caller quarantines them.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any, Final

from watchtower.protocol import cbor
from watchtower.protocol.config import StreamConfig
from watchtower.protocol.errors import InvalidArgumentError, StreamNotFoundError, WatchtowerError
from watchtower.protocol.key_schedule import KeyHistoryPage, KeySchedule, KeyScheduleEntry
from watchtower.protocol.message import StreamMessage
from watchtower.protocol.ring_window import floor_for
from watchtower.protocol.ring_window import get_since_range as _window_since
from watchtower.protocol.signed_command import json_safe
from watchtower.protocol.stream_state import (
    ALLOWLIST_CHANGED,
    FEED_REGISTERED,
    KEY_EPOCH_ROTATED,
    PUBLISHER_KEY_ROTATED,
    STREAM_CREATED,
    STREAM_MESSAGE_PUBLISHED,
    SUBSCRIBER_UPDATED,
    SUBSCRIPTION_POLICY_CHANGED,
    Event,
)
from watchtower.protocol.view_checks import (
    broken,
    check_allowlist,
    check_key_epoch,
    check_policy,
    check_published,
    check_rotation,
    check_subscriber,
)

Table = MutableMapping[str, Any]
TABLE_NAMES: Final = ("streams", "heads", "offsets", "subscriptions", "registry")


def subscription_key(stream_id: str, subscriber: str) -> str:
    """The subscriptions-table key of one (stream, subscriber)."""
    return f"{stream_id}/{subscriber}"


# --- Events -> views -----------------------------------------------------------------------------


def apply_event(tables: Mapping[str, Table], event: Event, *, offset: int | None = None) -> StreamMessage | None:
    """Fold one committed event into the tables; returns the message of a newly folded publish.

    Raises `RuleBrokenError` (MALFORMED_RECORD), changing nothing, for an event that breaks a rule
    (`view_checks`): a feed id or stream created twice, an event for a stream never created, a
    publish that is not head + 1 or does not verify, a rotation that does not follow. The caller
    quarantines it.

    Idempotent for a redelivered tail: re-folding events the tables already hold (Faust replays
    the events after its last commit following a rebalance, and its in-memory tables keep the
    uncommitted writes) leaves the tables unchanged. `offset` (the event's position in its
    partition) tells a redelivered publish from a forged copy of an old one.
    """
    streams, subs, registry = tables["streams"], tables["subscriptions"], tables["registry"]
    body = json_safe(event.body)
    if event.type == FEED_REGISTERED:
        _register(registry, body, event.block_height)
        return None
    if event.type == STREAM_CREATED:
        _create(streams, event)
        return None
    view = dict(streams.get(event.stream_id) or {})
    if not view:
        raise broken(f"{event.type} for stream {event.stream_id!r}, which was never created")
    if event.type == STREAM_MESSAGE_PUBLISHED:
        return _publish(tables["heads"], view, event, offset)
    if event.type == SUBSCRIBER_UPDATED:
        check_subscriber(body)
        key = subscription_key(event.stream_id, body["subscriber"])
        before = subs.get(key)
        record = {k: v for k, v in body.items() if k != "stream_id"}
        subs[key] = record
        was_active = before is not None and before["status"] == "ACTIVE"
        view["active_subscribers"] += int(record["status"] == "ACTIVE") - int(was_active)
        view["subscribers"] += int(before is None)
    elif event.type == PUBLISHER_KEY_ROTATED:
        schedule = KeySchedule.from_dict(view["key_schedule"])
        if not check_rotation(schedule, _head_of(tables["heads"].get(event.stream_id)), event.body):
            return None  # a redelivered rotation: already folded
        rotated = schedule.rotate(event.body["new_key"], head_sequence=int(body["effective_sequence"]) - 1)
        view["key_schedule"] = rotated.to_dict()
        view["config"] = {
            **view["config"],
            "publisher_key_hex": rotated.current.public_key.hex(),
            "current_signing_key_id": rotated.current.signing_key_id,
        }
    elif event.type == SUBSCRIPTION_POLICY_CHANGED:
        check_policy(body)
        view["policy"] = body["policy"]
        view["config"] = {**view["config"], "subscription_policy": body["policy"]}
    elif event.type == ALLOWLIST_CHANGED:
        check_allowlist(body)
        members = set(view["allowlist"])
        if body["added"]:
            members.add(body["address"])
        else:
            members.discard(body["address"])
        view["allowlist"] = sorted(members)
    elif event.type == KEY_EPOCH_ROTATED:
        check_key_epoch(body)
        view["last_key_epoch"] = body["key_epoch"]
    streams[event.stream_id] = view
    return None


def _register(registry: Table, body: dict[str, Any], block_height: int) -> None:
    # The registry's own rule (registry.evolve_registry): ids are given out in order, once each,
    # and a stream is listed once.
    feed_id = body["feed_id"]
    if not isinstance(feed_id, int) or isinstance(feed_id, bool) or feed_id < 1:
        raise broken(f"FeedRegistered: feed id {feed_id!r} is not a positive integer")
    existing = registry.get(str(feed_id))
    if existing is not None:
        if all(_canon(existing.get(k)) == _canon(v) for k, v in body.items()):
            return  # a redelivery
        raise broken(f"FeedRegistered reuses feed id {feed_id}, already listing stream {existing['stream_id']!r}")
    if feed_id > 1 and str(feed_id - 1) not in registry:
        raise broken(f"FeedRegistered: feed id {feed_id} does not follow the last id given out")
    for listed in registry.values():
        if listed["stream_id"] == body["stream_id"]:
            raise broken(f"FeedRegistered: stream {body['stream_id']!r} is already feed {listed['feed_id']}")
    registry[str(feed_id)] = {**body, "registered_at_block": block_height}


def _create(streams: Table, event: Event) -> None:
    try:
        config = StreamConfig.from_dict(event.body["config"])
    except WatchtowerError as exc:
        raise broken(f"StreamCreated: the config is invalid ({exc.message})") from None
    if config.stream_id != event.stream_id:
        raise broken(f"StreamCreated for {event.stream_id!r} carries the config of {config.stream_id!r}")
    existing = streams.get(event.stream_id)
    if existing is not None:
        if _canon(existing["config"]) == _canon(_initial_config(existing, config)):
            return  # a redelivered creation must not reset what later events built
        raise broken(f"StreamCreated: stream {event.stream_id!r} already exists")
    streams[event.stream_id] = {
        "stream_id": event.stream_id,
        "owner": config.owner,
        "config": config.to_json_dict(),
        "created_at_block": event.block_height,
        "key_schedule": KeySchedule.initial(config.publisher_key).to_dict(),
        "policy": str(config.subscription_policy),
        "allowlist": [],
        "last_key_epoch": None,
        "active_subscribers": 0,
        "subscribers": 0,
    }


def _initial_config(view: Mapping[str, Any], config: StreamConfig) -> dict[str, Any]:
    # What the stored config would be had the stream been created with `config` and then seen the
    # rotations and policy changes the view holds (the only later edits of the stored config).
    return {**config.to_json_dict(), **{k: view["config"][k] for k in _EDITED_CONFIG if k in view["config"]}}


_EDITED_CONFIG: Final = ("publisher_key_hex", "current_signing_key_id", "subscription_policy")


def _publish(heads: Table, view: dict[str, Any], event: Event, offset: int | None) -> StreamMessage | None:
    try:
        message = event.message()
    except WatchtowerError as exc:
        raise broken(f"StreamMessagePublished carries no valid message ({exc.message})") from None
    current = heads.get(event.stream_id)
    schedule = KeySchedule.from_dict(view["key_schedule"])
    event_offset = None if current is None else current.get("event_offset")
    if not check_published(event.stream_id, event.body, message, schedule, _head_of(current), event_offset, offset):
        return None
    capacity = int(view["config"]["ring_buffer_capacity"])
    heads[event.stream_id] = {"head": message.sequence, "floor": floor_for(message.sequence, capacity),
                              "capacity": capacity, "event_offset": offset}
    return message


def _head_of(head: Mapping[str, Any] | None) -> int:
    return 0 if head is None else int(head["head"])


# --- Messages -> heads + offset index ------------------------------------------------------------


class OffsetIndex:
    """Messages-topic offsets of one stream's retained window: sequence -> offset.

    Appends are idempotent (a sequence at or below the last one is ignored, so replays after a
    restart are harmless) and pruning to the floor is O(1) amortised: the dead prefix is dropped
    only when it is as long as the live part. 8 bytes a message, whatever the payload size.
    """

    __slots__ = ("_first_seq", "_offsets", "_start")

    def __init__(self) -> None:
        self._first_seq = 0  # sequence of _offsets[_start] (0 while empty)
        self._offsets = array("q")
        self._start = 0

    @property
    def low(self) -> int:
        """Lowest indexed sequence (0 while empty)."""
        return self._first_seq

    @property
    def high(self) -> int:
        """Highest indexed sequence (0 while empty)."""
        return 0 if not self._first_seq else self._first_seq + len(self._offsets) - self._start - 1

    def __len__(self) -> int:
        return len(self._offsets) - self._start

    def add(self, sequence: int, offset: int) -> bool:
        """Index `sequence` at `offset`; False (and no change) if already indexed or not head+1.

        A jump (sequence > high+1) restarts the index at `sequence`: the part below is then
        unknown here and is found by scanning the log from the floor offset.
        """
        if self._first_seq and sequence <= self.high:
            return False
        if not self._first_seq or sequence != self.high + 1:
            self._offsets = array("q", [offset])
            self._first_seq, self._start = sequence, 0
            return True
        self._offsets.append(offset)
        return True

    def prune_below(self, floor: int) -> None:
        """Forget sequences below `floor`."""
        if not self._first_seq or floor <= self._first_seq:
            return
        drop = min(floor - self._first_seq, len(self))
        self._start += drop
        self._first_seq += drop
        if len(self) == 0:
            self.__init__()  # type: ignore[misc]
            return
        if self._start >= len(self._offsets) - self._start:
            del self._offsets[: self._start]
            self._start = 0

    def offset_of(self, sequence: int) -> int | None:
        """The offset of `sequence`, or None when it is not indexed here."""
        if not self._first_seq or not self._first_seq <= sequence <= self.high:
            return None
        return self._offsets[self._start + sequence - self._first_seq]


def apply_message(offsets: Table, index: OffsetIndex, stream_id: str, sequence: int, offset: int,
                  capacity: int) -> bool:
    """Index one accepted messages-topic record (see `view_checks.message_verdict`) at `offset`.

    Updates the stream's ``offsets`` entry (last indexed sequence, its offset, the floor's offset)
    and the in-memory index. Returns False for a sequence already indexed (a redelivery). The floor
    offset is exact while the index covers the floor; otherwise it stays at the last known lower
    bound, which is all a log scan needs.
    """
    current = offsets.get(stream_id)
    head = 0 if current is None else int(current["head"])
    if sequence <= head:
        index.add(sequence, offset)  # re-learn offsets after a restart; harmless otherwise
        return False
    floor = floor_for(sequence, capacity)
    index.add(sequence, offset)
    index.prune_below(floor)
    known = index.offset_of(floor)
    previous_floor_offset = offset if current is None else int(current["floor_offset"])
    offsets[stream_id] = {
        "head": sequence,
        "floor": floor,
        "capacity": capacity,
        "head_offset": offset,
        "floor_offset": known if known is not None else previous_floor_offset,
    }
    return True


# --- Queries over the views ----------------------------------------------------------------------


def require_stream(view: Mapping[str, Any] | None, stream_id: str) -> Mapping[str, Any]:
    """The stream view, or STREAM_NOT_FOUND with what to do."""
    if view is None:
        raise StreamNotFoundError(f"stream {stream_id!r} does not exist (or is not projected yet); "
                                  "check the id with `watchtower list`")
    return view


def head_view(view: Mapping[str, Any], head: Mapping[str, Any] | None) -> dict[str, Any]:
    """CIP-7 get_head from the views: ``head_sequence`` and ``floor_sequence`` plus the stream's metadata.

    ``head`` and ``floor`` repeat them under their pre-spec names, deprecated, for one release.
    """
    config = view["config"]
    current = KeySchedule.from_dict(view["key_schedule"]).current
    capacity = int(config["ring_buffer_capacity"])
    head_seq = _head_of(head)
    floor_seq = floor_for(head_seq, capacity)
    return {
        "stream_id": view["stream_id"],
        "owner": view["owner"],
        "head_sequence": head_seq,
        "floor_sequence": floor_seq,
        "head": head_seq,
        "floor": floor_seq,
        "capacity": capacity,
        "signing_key_id": current.signing_key_id,
        "publisher_key": current.public_key.hex(),
        "publisher_key_hex": current.public_key.hex(),  # the 0.1 name, deprecated
        "policy": view["policy"],
        "access_mode": config["access_mode"],
        "max_subscribers": config["max_subscribers"],
        "active_subscribers": view["active_subscribers"],
        "last_key_epoch": view["last_key_epoch"],
    }


def since_range(view: Mapping[str, Any], head: Mapping[str, Any] | None, cursor: int, limit: int) -> range:
    """The sequences get_since(cursor, limit) returns (LIMIT_EXCEEDED, CURSOR_TOO_OLD as in §7.5)."""
    head_seq = 0 if head is None else int(head["head"])
    return _window_since(head_seq, int(view["config"]["ring_buffer_capacity"]), cursor, limit)


def key_at(view: Mapping[str, Any], sequence: int) -> KeyScheduleEntry:
    """get_key_at_sequence from the stream view."""
    return KeySchedule.from_dict(view["key_schedule"]).key_at_sequence(sequence)


def key_page(view: Mapping[str, Any], from_signing_key_id: int, limit: int) -> KeyHistoryPage:
    """get_key_history (paged) from the stream view."""
    return KeySchedule.from_dict(view["key_schedule"]).history(from_signing_key_id, limit)


def stream_subscribers(
    subs: Iterable[tuple[str, Any]], stream_id: str, *, active_only: bool = False
) -> list[dict[str, Any]]:
    """The stream's subscriptions ordered by subscriber address."""
    prefix = subscription_key(stream_id, "")
    found = [dict(v) for k, v in subs if k.startswith(prefix)]
    if active_only:
        found = [s for s in found if s["status"] == "ACTIVE"]
    return sorted(found, key=lambda s: s["subscriber"])


def feeds(registry: Iterable[tuple[str, Any]], owner: str | None = None) -> list[dict[str, Any]]:
    """Registry listings ordered by feed id, optionally only `owner`'s."""
    out = [dict(v) for _k, v in registry if owner is None or v["owner"] == owner]
    return sorted(out, key=lambda f: int(f["feed_id"]))


def parse_feed_id(text: str) -> int:
    """A feed id from user text; INVALID_ARGUMENT if it is not a positive integer."""
    if not text.isdigit() or int(text) < 1:
        raise InvalidArgumentError(f"feed id {text!r} is not a positive integer")
    return int(text)


# --- Digest --------------------------------------------------------------------------------------


def views_digest(tables: Mapping[str, Iterable[tuple[str, Any]]]) -> str:
    """Hex SHA-256 over every table's (key, value) pairs in key order, as deterministic CBOR.

    Heads carry offsets, which are facts of the log, so a rebuild must reproduce them exactly.
    """
    canonical = {name: {k: _canon(v) for k, v in sorted(tables[name])} for name in TABLE_NAMES}
    return hashlib.sha256(cbor.encode(canonical)).hexdigest()


def table_digests(tables: Mapping[str, Iterable[tuple[str, Any]]]) -> dict[str, str]:
    """`views_digest` per table, to see which table a mismatch is in."""
    return {name: views_digest({n: (tables[name] if n == name else ()) for n in TABLE_NAMES}) for name in TABLE_NAMES}


def _canon(value: Any) -> Any:
    # Faust's JSON round trip turns tuples into lists; canonicalise both sides the same way.
    if isinstance(value, Mapping):
        return {str(k): _canon(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canon(v) for v in value]
    return value
