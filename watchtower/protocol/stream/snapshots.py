"""Snapshot codecs: aggregate states <-> bytes, deterministic and never pickled.

A worker snapshots the aggregates of one partition into one record of the compacted ``snapshots``
topic (see docs/aggregates.md). The record is deterministic CBOR (RFC 8949 canonical: map keys
sorted, shortest forms) of an *envelope*::

    {"v": 1, "partition": p, "events_offset": X, "parts": {aggregate name: bytes}}

``events_offset`` is the first offset of the ``events`` partition the snapshot does NOT cover: a
loader starts the states from the parts and folds the events from X on. Each part is the
aggregate's own codec of its instances on that partition; the two below are the stream actor's
and the registry's, the key manager's are `ledger.snapshots` (named here too, for the workers).
Every part is read with `snapshot_cbor`: decoding never runs code from the bytes (plain CBOR, no
tags), and anything that is not exactly what the encoder writes raises `SnapshotError`
(MALFORMED_RECORD), so the loader can quarantine it and fold the whole partition instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from watchtower.protocol.confidential.rules import Keyloads
from watchtower.protocol.config import StreamConfig
from watchtower.protocol.enums import DeliveryMode, SubscriptionStatus
from watchtower.protocol.errors import InvalidArgumentError, WatchtowerError
from watchtower.protocol.events import ReplayOrdered, event_fields
from watchtower.protocol.frozen_json import to_tagged_json
from watchtower.protocol.ledger.common import MAX_CBY
from watchtower.protocol.ledger.snapshots import decode_ledger, encode_ledger
from watchtower.protocol.registry import RegistryState
from watchtower.protocol.replay.fold import REPLAY_STATUSES
from watchtower.protocol.stream.key_schedule import KeySchedule, KeyScheduleEntry
from watchtower.protocol.stream.snapshot_cbor import (
    SnapshotError,
    callers_doc,
    callers_from,
    dumps,
    folded_body,
    key_of,
    loads,
    raw,
    read_int,
    require,
    row_of,
    rows_of,
)
from watchtower.protocol.stream.state import FrozenMap, StreamState, Subscription

SNAPSHOT_VERSION: Final = 1
STREAMS_PART_VERSION: Final = 1
REGISTRY_PART_VERSION: Final = 1

# --- The envelope ---------------------------------------------------------------------------------


def encode_snapshot(partition: int, events_offset: int, parts: Mapping[str, bytes]) -> bytes:
    """One partition's snapshot record value."""
    return dumps({"v": SNAPSHOT_VERSION, "partition": partition, "events_offset": events_offset,
                   "parts": dict(parts)})


def decode_snapshot(data: bytes | None) -> tuple[int, int, dict[str, bytes]]:
    """(partition, events_offset, parts) of a snapshot record; SnapshotError otherwise."""
    doc = loads(data, "a snapshot")
    require(isinstance(doc, dict) and set(doc) == {"v", "partition", "events_offset", "parts"},
            "a snapshot has exactly the fields v, partition, events_offset, parts")
    require(doc["v"] == SNAPSHOT_VERSION, f"snapshot version {doc['v']!r} is not {SNAPSHOT_VERSION}")
    parts = doc["parts"]
    require(isinstance(parts, dict) and all(isinstance(k, str) and isinstance(v, bytes) for k, v in parts.items()),
            "snapshot parts must map aggregate names to bytes")
    return read_int(doc["partition"], "partition"), read_int(doc["events_offset"], "events_offset"), parts


# --- The stream actor's part ----------------------------------------------------------------------


def encode_streams(states: Mapping[str, StreamState]) -> bytes:
    """The stream states of one partition (every field, so the decoded state equals the folded one)."""
    return dumps({"v": STREAMS_PART_VERSION, "streams": [_stream_doc(s) for _, s in sorted(states.items())]})


def decode_streams(data: bytes) -> dict[str, StreamState]:
    doc = loads(data, "a streams snapshot")
    require(isinstance(doc, dict) and doc.get("v") == STREAMS_PART_VERSION and isinstance(doc.get("streams"), list),
            f"a streams snapshot is {{v: {STREAMS_PART_VERSION}, streams: [...]}}")
    out: dict[str, StreamState] = {}
    for item in doc["streams"]:
        try:
            state = _stream_from(item)
        except SnapshotError:
            raise
        except (WatchtowerError, KeyError, TypeError, ValueError) as exc:
            raise SnapshotError(f"a stream in the snapshot is malformed ({exc!r})"[:300]) from None
        require(state.stream_id not in out, f"stream {state.stream_id!r} appears twice")
        out[state.stream_id] = state
    return out


def _stream_doc(s: StreamState) -> dict[str, Any]:
    return {
        "stream_id": s.stream_id,
        "created": s.created,
        "owner": s.owner,
        "config": None if s.config is None else s.config.to_dict(),
        "head": s.head,
        "keys": None if s.key_schedule is None else
        [[e.signing_key_id, e.public_key, e.effective_sequence] for e in s.key_schedule.entries],
        "subs": [[sub.subscriber, str(sub.mode), str(sub.status), sub.created_at_sequence, sub.start_cursor,
                  sub.filter_json, sub.account_key_id] for _, sub in sorted(s.subscriptions.items())],
        "allowlist": sorted(s.allowlist),
        "last_key_epoch": s.last_key_epoch,
        "callers": callers_doc(s.callers),
        "last_publish_digest": s.last_publish_digest,
        "replay_price": s.replay_price_per_event_cby,
        "replay_orders": [[k, to_tagged_json(event_fields(v))] for k, v in sorted(s.replay_orders.items())],
        "replays": [[k, *v] for k, v in sorted(s.replays.items())],
        "ingest": [s.ingest_fail_count, s.last_failed_tick],
    } | ({} if s.keyloads.is_default else {
        "keyloads": s.keyloads.canonical()})


def _stream_from(d: Any) -> StreamState:
    require(isinstance(d, dict), "a stream snapshot entry must be a map")
    keys = d["keys"]
    schedule = None if keys is None else KeySchedule(tuple(
        KeyScheduleEntry(read_int(row[0], "signing_key_id"), raw(row[1], "public_key"),
                         read_int(row[2], "effective_sequence"))
        for row in (row_of(r, 3, "key") for r in rows_of(keys, "keys"))))
    subs = FrozenMap((key_of(row, "subscription"), Subscription(subscriber=row[0], mode=DeliveryMode(row[1]),
                                           status=SubscriptionStatus(row[2]), created_at_sequence=row[3],
                                           start_cursor=row[4], filter_json=row[5], account_key_id=row[6]))
                     for row in (row_of(r, 7, "subscription") for r in rows_of(d["subs"], "subs")))
    callers = callers_from(d["callers"])
    active = sum(1 for sub in subs.values() if sub.status is SubscriptionStatus.ACTIVE)
    epoch = d["last_key_epoch"]
    require(epoch is None or isinstance(epoch, int), "last_key_epoch must be an integer or null")
    require(isinstance(d["created"], bool), "created must be a boolean")
    publish_digest = d["last_publish_digest"]
    require(publish_digest is None or (isinstance(publish_digest, bytes) and len(publish_digest) == 32),
            "last_publish_digest must be 32 bytes or null")
    # Snapshots written before replay pricing existed lack the two replay keys: free, no orders.
    replay_price = read_int(d.get("replay_price", 0), "replay_price")
    require(replay_price <= MAX_CBY, "replay_price must be at most 2**63-1")
    orders = FrozenMap((key_of(row, "replay order"), folded_body(row[1], ReplayOrdered, "replay order"))
                       for row in (row_of(r, 2, "replay order") for r in rows_of(d.get("replay_orders", []),
                                                                              "replay_orders")))
    # Snapshots written before replays were kept lack them.
    replays = FrozenMap((key_of(row, "replay"), (str(row[1]), str(row[2])))
                        for row in (row_of(r, 3, "replay") for r in rows_of(d.get("replays", []), "replays")))
    require(all(status in REPLAY_STATUSES for _, status in replays.values()), "a replay status is unknown")
    # Snapshots written before ingestion ran lack its counters: nothing failed yet.
    ingest = row_of(d.get("ingest", [0, 0]), 2, "ingest")
    # Only a confidential stream's entry has keyloads (and none written before they existed).
    # A stream with states for branches other than main spells them as a map (Keyloads.canonical).
    try:
        keyloads = Keyloads.from_canonical(d["keyloads"]) if "keyloads" in d else Keyloads()
    except InvalidArgumentError as exc:
        raise SnapshotError(f"keyloads: {exc.message}") from None
    return StreamState(
        stream_id=StreamState.initial(d["stream_id"]).stream_id,
        created=d["created"],
        owner=d["owner"],
        config=None if d["config"] is None else StreamConfig.from_dict(d["config"]),
        head=read_int(d["head"], "head"),
        key_schedule=schedule,
        subscriptions=subs,
        active_subscribers=active,
        allowlist=frozenset(str(a) for a in d["allowlist"]),
        last_key_epoch=epoch,
        callers=callers,
        last_publish_digest=publish_digest,
        replay_price_per_event_cby=replay_price,
        replay_orders=orders,
        replays=replays,
        ingest_fail_count=read_int(ingest[0], "ingest_fail_count"),
        last_failed_tick=read_int(ingest[1], "last_failed_tick"),
        keyloads=keyloads,
    )


# --- The registry's part --------------------------------------------------------------------------


def encode_registry(states: Mapping[str, RegistryState]) -> bytes:
    """The registry instance(s) of one partition (at most the one registry key)."""
    return dumps({"v": REGISTRY_PART_VERSION, "registries": {
        key: {"next_feed_id": s.next_feed_id, "by_stream": dict(s.by_stream.items())} for key, s in states.items()}})


def decode_registry(data: bytes) -> dict[str, RegistryState]:
    doc = loads(data, "a registry snapshot")
    require(isinstance(doc, dict) and doc.get("v") == REGISTRY_PART_VERSION
            and isinstance(doc.get("registries"), dict),
            f"a registry snapshot is {{v: {REGISTRY_PART_VERSION}, registries: {{...}}}}")
    out: dict[str, RegistryState] = {}
    for key, item in doc["registries"].items():
        require(isinstance(key, str) and isinstance(item, dict) and isinstance(item.get("by_stream"), dict),
                "a registry entry is {next_feed_id, by_stream}")
        next_id = read_int(item.get("next_feed_id"), "next_feed_id", 1)
        by_stream = {str(s): read_int(i, "feed_id", 1) for s, i in item["by_stream"].items()}
        require(sorted(by_stream.values()) == list(range(1, next_id)),
                "registry feed ids must run 1..next_feed_id-1 without gaps")
        out[key] = RegistryState(next_id, FrozenMap(by_stream))
    return out


__all__ = ["SnapshotError", "decode_ledger", "decode_registry", "decode_snapshot", "decode_streams", "encode_ledger",
           "encode_registry", "encode_snapshot", "encode_streams"]
