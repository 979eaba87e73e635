"""Read-side views of the stream actor: what the projections keep, and how events change it (pure).

Projections keep five tables of JSON values, keyed by text:

- ``streams[stream_id]``: configuration, owner, key schedule, policy, allowlist, key epoch and
  subscriber counts, derived from the stream's `StreamState` (changes only on non-publish events);
- ``heads[stream_id]``: the readable head (the last sequence whose message is indexed), its floor
  and capacity, the head the publish events have reached (``published``), and the events-topic
  offset of the last publish (to tell a redelivery from a forged copy);
- ``offsets[stream_id]``: where the stream's window lies in the messages topic: the last indexed
  sequence and the offsets of it and of the floor (`apply_message`);
- ``subscriptions[stream_id + "/" + subscriber]``: one CIP-7 Subscription each;
- ``registry[str(feed_id)]``: one WatchtowerRegistry listing each.

One fold: the facts the writer also needs (config, head, key schedule, subscriptions, allowlist,
policy, key epoch) are folded with the writer's own `stream_state.evolve`, into a `StreamIndex`
per stream kept beside the tables (``tables["indexes"]``, in memory, not digested; its module is
`stream_index`); the tables are derived from that state. Only index maintenance is the
projection's own: sequence -> offset, the subscriber-by-subscriber table, the registry listing,
and the references of published messages not indexed yet.

One copy of each payload: a StreamMessagePublished event carries only a reference to its message
(stream, sequence, hash, key id, ...). The payload comes from the messages topic alone, and a
messages record is indexed only if it verifies and matches the reference of its sequence
(`view_checks.message_verdict`). The readable head moves when the message is indexed, so every
sequence up to it has its payload located.

`apply_event` and `apply_message` are the only ways the tables change, so a live projection and a
rebuild from the log (plain dicts) run the same code, and `views_digest` can compare them. Records
that break a rule are refused before any table changes (`view_checks`); the caller quarantines them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any, Final

from watchtower.protocol import cbor
from watchtower.protocol.config import StreamConfig
from watchtower.protocol.errors import StreamNotFoundError, WatchtowerError
from watchtower.protocol.event_names import STREAM_MESSAGE_PUBLISHED
from watchtower.protocol.events import (
    FeedRegistered,
    PublisherKeyRotated,
    RunnerRegistered,
    RunnerRetired,
    StreamCreated,
    StreamMessagePublished,
    SubscriberUpdated,
    event_fields,
)
from watchtower.protocol.replay.rules import icrc77_metadata
from watchtower.protocol.stream.key_schedule import KeyHistoryPage, KeySchedule, KeyScheduleEntry
from watchtower.protocol.stream.ring_window import floor_for
from watchtower.protocol.stream.state import (
    Event,
    StreamState,
    evolve,
)
from watchtower.protocol.stream.stream_index import StreamIndex
from watchtower.protocol.stream.view_checks import broken, check_published, check_rotation, published_ref

Table = MutableMapping[str, Any]
TABLE_NAMES: Final = ("streams", "heads", "offsets", "subscriptions", "registry")
INDEXES: Final = "indexes"
"""The fold's in-memory, undigested table: stream_id -> `StreamIndex`."""
STREAM_LOCAL_EVENTS: Final = frozenset({STREAM_MESSAGE_PUBLISHED})
"""Event types whose fold (`apply_event`) changes nothing but their own stream's head and index, as
does a messages record (`apply_message`): a stream's run of them may fold before other streams'
records that precede it in the log, and the tables end as the in-order fold leaves them."""


def new_tables() -> dict[str, dict[str, Any]]:
    """Empty tables for a fold: the `TABLE_NAMES` tables plus ``indexes``."""
    return {name: {} for name in (*TABLE_NAMES, INDEXES)}


def subscription_key(stream_id: str, subscriber: str) -> str:
    """The subscriptions-table key of one (stream, subscriber)."""
    return f"{stream_id}/{subscriber}"

def stream_index(tables: Mapping[str, Table], stream_id: str) -> StreamIndex:
    """The stream's `StreamIndex` in ``tables["indexes"]``, created on first use."""
    indexes = tables[INDEXES]
    index = indexes.get(stream_id)
    if index is None:
        index = indexes[stream_id] = StreamIndex(stream_id)
    return index


# --- Events -> views -----------------------------------------------------------------------------


def apply_event(tables: Mapping[str, Table], event: Event, *, offset: int | None = None) -> int | None:
    """Fold one committed event into the tables; returns the sequence of a newly folded publish.

    Raises `RuleBrokenError` (MALFORMED_RECORD), changing nothing, for an event that breaks a rule:
    anything the writer's `evolve` refuses (an event for a stream never created, a second creation,
    a malformed body, a publish that is not head + 1, a nonce beyond its block's ceiling), plus the
    read side's own checks (`view_checks`): a feed id given out twice or out of order, a publish
    naming another key than the one in force, a rotation that does not follow. The caller
    quarantines it.

    Idempotent for a redelivered tail: re-folding events the tables already hold leaves the tables
    unchanged. `offset` (the event's position in its partition) tells a redelivered publish from a
    forged copy of an old one.
    """
    body = event.body
    if isinstance(body, FeedRegistered):
        _register(tables["registry"], body, event.block_height)
        return None
    if isinstance(body, RunnerRegistered | RunnerRetired):
        return None  # the runner registry's own log (`ingestion_runners`): no read-side table holds it
    streams = tables["streams"]
    index = tables[INDEXES].get(event.stream_id)  # created only once a creation folds: refused events leave none
    state = StreamState.initial(event.stream_id) if index is None else index.state
    if isinstance(body, StreamCreated) and state.created:
        _check_recreated(streams[event.stream_id], event.stream_id, body)
        return None  # a redelivered creation must not reset what later events built
    if not state.created and not isinstance(body, StreamCreated):
        raise broken(f"{event.type} for stream {event.stream_id!r}, which was never created")
    heads = tables["heads"]
    current = heads.get(event.stream_id)
    published = 0 if current is None else int(current["published"])
    if isinstance(body, StreamMessagePublished):
        event_offset = None if current is None else current.get("event_offset")
        if not check_published(event.stream_id, body, _schedule(state), published, event_offset, offset):
            return None
    elif isinstance(body, PublisherKeyRotated) and not check_rotation(_schedule(state), published, body):
        return None  # a redelivered rotation: already folded
    try:
        new = evolve(state, event)
    except WatchtowerError as exc:
        raise broken(exc.message) from None
    if index is None:
        index = stream_index(tables, event.stream_id)
    index.state = new
    if isinstance(body, StreamMessagePublished):
        sequence = new.head
        index.refs[sequence] = published_ref(body)
        heads[event.stream_id] = {**(current or _empty_head(new)), "published": sequence, "event_offset": offset}
        return sequence
    if isinstance(body, StreamCreated):
        streams[event.stream_id] = _stream_view(new, event.block_height)
        return None
    if isinstance(body, SubscriberUpdated):
        subscriber = body.subscriber
        tables["subscriptions"][subscription_key(event.stream_id, subscriber)] = new.subscriptions[subscriber].to_dict()
    streams[event.stream_id] = _stream_view(new, streams[event.stream_id]["created_at_block"])
    return None


def _schedule(state: StreamState) -> KeySchedule:
    if state.key_schedule is None:  # evolve sets it with the config; this narrows the type
        raise broken(f"stream {state.stream_id!r} has no key schedule")
    return state.key_schedule


def _head_of(head: Mapping[str, Any] | None) -> int:
    return 0 if head is None else int(head["head"])


def _empty_head(state: StreamState) -> dict[str, Any]:
    capacity = state.capacity or 0
    return {"head": 0, "floor": floor_for(0, capacity), "capacity": capacity, "published": 0, "event_offset": None}


def _stream_view(state: StreamState, created_at_block: int) -> dict[str, Any]:
    """The ``streams`` table entry of a created stream: its `StreamState` as JSON, plus its creation block."""
    config, schedule = state.config, _schedule(state)
    if config is None:
        raise broken(f"stream {state.stream_id!r} has no configuration")  # evolve never leaves this
    return {
        "stream_id": state.stream_id,
        "owner": state.owner,
        "config": config.to_json_dict(),
        "created_at_block": created_at_block,
        "key_schedule": schedule.to_dict(),
        "policy": str(config.subscription_policy),
        "allowlist": sorted(state.allowlist),
        "last_key_epoch": state.last_key_epoch,
        "active_subscribers": state.active_subscribers,
        "subscribers": len(state.subscriptions),
        "replay_price_per_event_cby": state.replay_price_per_event_cby,
        **({"ingest_fail_count": state.ingest_fail_count} if state.ingest_fail_count else {}),
    }


def _check_recreated(view: Mapping[str, Any], stream_id: str, body: StreamCreated) -> None:
    # A second StreamCreated is a redelivery only if it holds the config the stream was created with.
    if _canon(view["config"]) != _canon(_initial_config(view, body.config)):
        raise broken(f"StreamCreated: stream {stream_id!r} already exists")


def _initial_config(view: Mapping[str, Any], config: StreamConfig) -> dict[str, Any]:
    # What the stored config would be had the stream been created with `config` and then seen the
    # rotations and policy changes the view holds (the only later edits of the stored config).
    return {**config.to_json_dict(), **{k: view["config"][k] for k in _EDITED_CONFIG if k in view["config"]}}


_EDITED_CONFIG: Final = ("publisher_key_hex", "current_signing_key_id", "subscription_policy")


def _register(registry: Table, body: FeedRegistered, block_height: int) -> None:
    # The registry's own rule (registry.evolve_registry): ids are given out in order, once each,
    # and a stream is listed once.
    feed_id = body.feed_id
    fields = event_fields(body)
    if not isinstance(feed_id, int) or isinstance(feed_id, bool) or feed_id < 1:
        raise broken(f"FeedRegistered: feed id {feed_id!r} is not a positive integer")
    existing = registry.get(str(feed_id))
    if existing is not None:
        if all(_canon(existing.get(k)) == _canon(v) for k, v in fields.items()):
            return  # a redelivery
        raise broken(f"FeedRegistered reuses feed id {feed_id}, already listing stream {existing['stream_id']!r}")
    if feed_id > 1 and str(feed_id - 1) not in registry:
        raise broken(f"FeedRegistered: feed id {feed_id} does not follow the last id given out")
    for listed in registry.values():
        if listed["stream_id"] == body.stream_id:
            raise broken(f"FeedRegistered: stream {body.stream_id!r} is already feed {listed['feed_id']}")
    registry[str(feed_id)] = {**fields, "registered_at_block": block_height}


# --- Messages -> readable head + offset index ----------------------------------------------------


def apply_message(tables: Mapping[str, Table], stream_id: str, sequence: int, offset: int) -> bool:
    """Index one accepted messages-topic record (see `view_checks.message_verdict`) at `offset`.

    Updates the stream's ``offsets`` entry (last indexed sequence, its offset, the floor's offset),
    its in-memory index and references, and moves the readable head (``heads``) to `sequence`.
    Returns False for a sequence already indexed (a redelivery). The floor offset is exact while
    the index covers the floor; otherwise it stays at the last known lower bound, which is all a
    log scan needs.
    """
    index = stream_index(tables, stream_id)
    offsets = tables["offsets"]
    current = offsets.get(stream_id)
    if sequence <= (0 if current is None else int(current["head"])):
        index.add(sequence, offset)  # re-learn offsets after a restart; harmless otherwise
        return False
    capacity = index.state.capacity or 0
    floor = floor_for(sequence, capacity)
    index.add(sequence, offset)
    index.prune_below(floor)
    index.bound(sequence)
    known = index.offset_of(floor)
    previous_floor_offset = offset if current is None else int(current["floor_offset"])
    offsets[stream_id] = {
        "head": sequence,
        "floor": floor,
        "capacity": capacity,
        "head_offset": offset,
        "floor_offset": known if known is not None else previous_floor_offset,
    }
    heads = tables["heads"]
    heads[stream_id] = {**(heads.get(stream_id) or _empty_head(index.state)), "head": sequence, "floor": floor}
    return True


# --- Queries over the views ----------------------------------------------------------------------


def require_stream(view: Mapping[str, Any] | None, stream_id: str) -> Mapping[str, Any]:
    """The stream view, or STREAM_NOT_FOUND with what to do."""
    if view is None:
        raise StreamNotFoundError(f"stream {stream_id!r} does not exist (or is not projected yet); "
                                  "check the id with `watchtower list`")
    return view


def head_view(view: Mapping[str, Any], head: Mapping[str, Any] | None,
              schedule: KeySchedule | None = None) -> dict[str, Any]:
    """CIP-7 get_head from the views: ``head_sequence`` and ``floor_sequence`` plus the stream's metadata.

    ``head`` and ``floor`` repeat them under their pre-spec names, deprecated, for one release.
    `schedule`: the stream's typed key schedule when the caller holds it (the fold's `StreamIndex`),
    so a read does not parse it again from the view's JSON form; without it, the view's is parsed.
    """
    config = view["config"]
    current = (KeySchedule.from_dict(view["key_schedule"]) if schedule is None else schedule).current
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
        "replay_price_per_event_cby": view.get("replay_price_per_event_cby", 0),
        "ingest_fail_count": view.get("ingest_fail_count", 0),
        # ICRC-77 icrc77:capable and icrc77:pricing (a view projected before replay pricing existed is free).
        **icrc77_metadata(view.get("replay_price_per_event_cby", 0)),
    }


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
