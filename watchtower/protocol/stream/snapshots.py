"""Snapshot codecs: aggregate states <-> bytes, deterministic and never pickled.

A worker snapshots the aggregates of one partition into one record of the compacted ``snapshots``
topic (see docs/aggregates.md). The record is deterministic CBOR (RFC 8949 canonical: map keys
sorted, shortest forms) of an *envelope*::

    {"v": 1, "partition": p, "events_offset": X, "parts": {aggregate name: bytes}}

``events_offset`` is the first offset of the ``events`` partition the snapshot does NOT cover: a
loader starts the states from the parts and folds the events from X on. Each part is the
aggregate's own codec of its instances on that partition; the two below are the stream actor's
and the registry's. Decoding never runs code from the bytes (plain CBOR, no tags), and anything
that is not exactly what the encoder writes raises :class:`SnapshotError` (MALFORMED_RECORD), so
the loader can quarantine it and fold the whole partition instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, TypeVar

import cbor2

from watchtower.protocol.confidential.rules import Keyloads
from watchtower.protocol.config import StreamConfig
from watchtower.protocol.enums import DeliveryMode, SubscriptionStatus
from watchtower.protocol.errors import InvalidArgumentError, MalformedRecordError, WatchtowerError
from watchtower.protocol.events import BODY_FIELDS, ReplayOrdered, event_fields
from watchtower.protocol.ledger.account_state import (
    ACTIVE,
    REVOKED,
    AccountKeyRecord,
    AccountState,
    AllowanceRecord,
    AuthorizationRecord,
    authorization_key,
)
from watchtower.protocol.ledger.common import ACCOUNT_PREFIX, MAX_CBY, PAID_PREFIX
from watchtower.protocol.ledger.events import EpochAccessRequested
from watchtower.protocol.ledger.paid import PaidStreamConfig
from watchtower.protocol.ledger.paid_stream import PaidState
from watchtower.protocol.ledger.supply import SupplyState
from watchtower.protocol.registry import RegistryState
from watchtower.protocol.replay.fold import REPLAY_STATUSES
from watchtower.protocol.signed_command import freeze_json, from_tagged_json, to_tagged_json
from watchtower.protocol.stream.key_schedule import KeySchedule, KeyScheduleEntry
from watchtower.protocol.stream.state import CallerRecord, FrozenMap, StreamState, Subscription

SNAPSHOT_VERSION: Final = 1
STREAMS_PART_VERSION: Final = 1
REGISTRY_PART_VERSION: Final = 1


class SnapshotError(MalformedRecordError):
    """Bytes that are not a snapshot this codec wrote."""


def _dumps(value: object) -> bytes:
    return bytes(cbor2.dumps(value, canonical=True))


def _loads(data: object, what: str) -> Any:
    if not isinstance(data, bytes | bytearray):
        raise SnapshotError(f"{what} must be bytes, got {type(data).__name__}")
    try:
        # No tag hook and no object hook: a tag (which could name a class) is refused below.
        return cbor2.loads(bytes(data))
    except Exception as exc:  # cbor2 raises many types for hostile input
        raise SnapshotError(f"{what} is not CBOR ({exc.__class__.__name__})") from None


def _require(cond: bool, why: str) -> None:
    if not cond:
        raise SnapshotError(why)


def _int(value: object, name: str, minimum: int = 0) -> int:
    _require(isinstance(value, int) and not isinstance(value, bool) and value >= minimum,
             f"{name} must be an integer >= {minimum}")
    return int(value)  # type: ignore[call-overload]


# --- The envelope ---------------------------------------------------------------------------------


def encode_snapshot(partition: int, events_offset: int, parts: Mapping[str, bytes]) -> bytes:
    """One partition's snapshot record value."""
    return _dumps({"v": SNAPSHOT_VERSION, "partition": partition, "events_offset": events_offset,
                   "parts": dict(parts)})


def decode_snapshot(data: bytes | None) -> tuple[int, int, dict[str, bytes]]:
    """(partition, events_offset, parts) of a snapshot record; SnapshotError otherwise."""
    doc = _loads(data, "a snapshot")
    _require(isinstance(doc, dict) and set(doc) == {"v", "partition", "events_offset", "parts"},
             "a snapshot has exactly the fields v, partition, events_offset, parts")
    _require(doc["v"] == SNAPSHOT_VERSION, f"snapshot version {doc['v']!r} is not {SNAPSHOT_VERSION}")
    parts = doc["parts"]
    _require(isinstance(parts, dict) and all(isinstance(k, str) and isinstance(v, bytes) for k, v in parts.items()),
             "snapshot parts must map aggregate names to bytes")
    return _int(doc["partition"], "partition"), _int(doc["events_offset"], "events_offset"), parts


# --- The stream actor's part ----------------------------------------------------------------------


def encode_streams(states: Mapping[str, StreamState]) -> bytes:
    """The stream states of one partition (every field, so the decoded state equals the folded one)."""
    return _dumps({"v": STREAMS_PART_VERSION, "streams": [_stream_doc(s) for _, s in sorted(states.items())]})


def decode_streams(data: bytes) -> dict[str, StreamState]:
    doc = _loads(data, "a streams snapshot")
    _require(isinstance(doc, dict) and doc.get("v") == STREAMS_PART_VERSION and isinstance(doc.get("streams"), list),
             f"a streams snapshot is {{v: {STREAMS_PART_VERSION}, streams: [...]}}")
    out: dict[str, StreamState] = {}
    for item in doc["streams"]:
        try:
            state = _stream_from(item)
        except SnapshotError:
            raise
        except (WatchtowerError, KeyError, TypeError, ValueError) as exc:
            raise SnapshotError(f"a stream in the snapshot is malformed ({exc!r})"[:300]) from None
        _require(state.stream_id not in out, f"stream {state.stream_id!r} appears twice")
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
        "callers": [[k, r.last_nonce, r.last_digest, to_tagged_json(r.last_reply)]
                    for k, r in sorted(s.callers.items())],
        "last_publish_digest": s.last_publish_digest,
        "replay_price": s.replay_price_per_event_cby,
        "replay_orders": [[k, to_tagged_json(event_fields(v))] for k, v in sorted(s.replay_orders.items())],
        "replays": [[k, *v] for k, v in sorted(s.replays.items())],
        "ingest": [s.ingest_fail_count, s.last_failed_tick],
    } | ({} if s.keyloads.is_default else {
        "keyloads": s.keyloads.canonical()})


B = TypeVar("B", EpochAccessRequested, ReplayOrdered)


def _folded_body(value: object, cls: type[B], what: str) -> B:
    # A purchase in flight or a replay order is the event body it was folded from, spelled as a
    # JSON-safe map of exactly that class's fields (a list, such as a replay's skip, reads as a tuple).
    fields = from_tagged_json(value, what)
    _require(isinstance(fields, Mapping) and set(fields) == set(BODY_FIELDS[cls.TYPE]),
             f"a {what} must be a map of the {cls.TYPE} fields")
    return cls(**fields)


def _row(value: object, length: int, what: str) -> list[Any]:
    # Rows are fixed-length arrays; checked here so a short row or a text is a SnapshotError, not
    # an IndexError, and a number where bytes belong never reaches bytes() (bytes(n) allocates n).
    _require(isinstance(value, list) and len(value) == length, f"a {what} row is an array of {length} items")
    return value  # type: ignore[return-value]


def _raw(value: object, name: str) -> bytes:
    _require(isinstance(value, bytes), f"{name} must be bytes")
    return value  # type: ignore[return-value]


def _key(row: list[Any], what: str) -> str:
    # The first item keys a FrozenMap, which hashes text only.
    _require(isinstance(row[0], str), f"a {what} row starts with its address (text)")
    return row[0]


def _rows(value: object, what: str) -> list[Any]:
    _require(isinstance(value, list), f"{what} must be an array")
    return value  # type: ignore[return-value]


def _stream_from(d: Any) -> StreamState:
    _require(isinstance(d, dict), "a stream snapshot entry must be a map")
    keys = d["keys"]
    schedule = None if keys is None else KeySchedule(tuple(
        KeyScheduleEntry(_int(row[0], "signing_key_id"), _raw(row[1], "public_key"), _int(row[2], "effective_sequence"))
        for row in (_row(r, 3, "key") for r in _rows(keys, "keys"))))
    subs = FrozenMap((_key(row, "subscription"), Subscription(subscriber=row[0], mode=DeliveryMode(row[1]),
                                           status=SubscriptionStatus(row[2]), created_at_sequence=row[3],
                                           start_cursor=row[4], filter_json=row[5], account_key_id=row[6]))
                     for row in (_row(r, 7, "subscription") for r in _rows(d["subs"], "subs")))
    callers = FrozenMap((_key(row, "caller"), CallerRecord(_int(row[1], "last_nonce", 1), _raw(row[2], "last_digest"),
                                              freeze_json(from_tagged_json(row[3], "last_reply"), "last_reply")))
                        for row in (_row(r, 4, "caller") for r in _rows(d["callers"], "callers")))
    active = sum(1 for sub in subs.values() if sub.status is SubscriptionStatus.ACTIVE)
    epoch = d["last_key_epoch"]
    _require(epoch is None or isinstance(epoch, int), "last_key_epoch must be an integer or null")
    _require(isinstance(d["created"], bool), "created must be a boolean")
    publish_digest = d["last_publish_digest"]
    _require(publish_digest is None or (isinstance(publish_digest, bytes) and len(publish_digest) == 32),
             "last_publish_digest must be 32 bytes or null")
    # Snapshots written before replay pricing existed lack the two replay keys: free, no orders.
    replay_price = _int(d.get("replay_price", 0), "replay_price")
    _require(replay_price <= MAX_CBY, "replay_price must be at most 2**63-1")
    orders = FrozenMap((_key(row, "replay order"), _folded_body(row[1], ReplayOrdered, "replay order"))
                       for row in (_row(r, 2, "replay order") for r in _rows(d.get("replay_orders", []),
                                                                              "replay_orders")))
    # Snapshots written before replays were kept lack them.
    replays = FrozenMap((_key(row, "replay"), (str(row[1]), str(row[2])))
                        for row in (_row(r, 3, "replay") for r in _rows(d.get("replays", []), "replays")))
    _require(all(status in REPLAY_STATUSES for _, status in replays.values()), "a replay status is unknown")
    # Snapshots written before ingestion ran lack its counters: nothing failed yet.
    ingest = _row(d.get("ingest", [0, 0]), 2, "ingest")
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
        head=_int(d["head"], "head"),
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
        ingest_fail_count=_int(ingest[0], "ingest_fail_count"),
        last_failed_tick=_int(ingest[1], "last_failed_tick"),
        keyloads=keyloads,
    )


# --- The registry's part --------------------------------------------------------------------------


def encode_registry(states: Mapping[str, RegistryState]) -> bytes:
    """The registry instance(s) of one partition (at most the one registry key)."""
    return _dumps({"v": REGISTRY_PART_VERSION, "registries": {
        key: {"next_feed_id": s.next_feed_id, "by_stream": dict(s.by_stream.items())} for key, s in states.items()}})


def decode_registry(data: bytes) -> dict[str, RegistryState]:
    doc = _loads(data, "a registry snapshot")
    _require(isinstance(doc, dict) and doc.get("v") == REGISTRY_PART_VERSION
             and isinstance(doc.get("registries"), dict),
             f"a registry snapshot is {{v: {REGISTRY_PART_VERSION}, registries: {{...}}}}")
    out: dict[str, RegistryState] = {}
    for key, item in doc["registries"].items():
        _require(isinstance(key, str) and isinstance(item, dict) and isinstance(item.get("by_stream"), dict),
                 "a registry entry is {next_feed_id, by_stream}")
        next_id = _int(item.get("next_feed_id"), "next_feed_id", 1)
        by_stream = {str(s): _int(i, "feed_id", 1) for s, i in item["by_stream"].items()}
        _require(sorted(by_stream.values()) == list(range(1, next_id)),
                 "registry feed ids must run 1..next_feed_id-1 without gaps")
        out[key] = RegistryState(next_id, FrozenMap(by_stream))
    return out


# --- The key manager's parts (accounts, paid streams, supply) -------------------------------------

LEDGER_PART_VERSION: Final = 1


def _callers_doc(callers: Mapping[str, CallerRecord]) -> list[Any]:
    return [[k, r.last_nonce, r.last_digest, to_tagged_json(r.last_reply)] for k, r in sorted(callers.items())]


def _callers_from(value: object) -> FrozenMap[CallerRecord]:
    return FrozenMap((_key(row, "caller"), CallerRecord(_int(row[1], "last_nonce", 1), _raw(row[2], "last_digest"),
                                           freeze_json(from_tagged_json(row[3], "last_reply"), "last_reply")))
                     for row in (_row(r, 4, "caller") for r in _rows(value, "callers")))


def _opt_int(value: object, name: str) -> int | None:
    return None if value is None else _int(value, name)


def _account_doc(s: AccountState) -> dict[str, Any]:
    doc = {
        "account": s.account,
        "balance_cby": s.balance_cby,
        "keys": [[k.account_key_id, k.scheme, k.public_key, k.status, k.registered_at_block, k.revoked_at_block]
                 for k in s.keys],
        "next_key_id": s.next_key_id,
        "auths": [[a.actor, a.stream_id, a.status, a.granted_at_block, a.revoked_at_block]
                  for _, a in sorted(s.authorizations.items())],
        "callers": _callers_doc(s.callers),
    }
    if s.credits:  # only then: an account without numbered credits is written as before they existed
        doc["credits"] = s.credits
    if s.allowances:  # likewise: an account that never gave an allowance is written as before
        doc["allowances"] = [[a.spender, a.stream_id, a.cap_cby, a.spent_cby, a.status, a.granted_at_block,
                              a.revoked_at_block] for _, a in sorted(s.allowances.items())]
    return doc


def _account_from(d: Any) -> AccountState:
    _require(isinstance(d, dict), "an account snapshot entry must be a map")
    keys = tuple(AccountKeyRecord(_int(r[0], "account_key_id", 1), str(r[1]), _raw(r[2], "public_key"), str(r[3]),
                                  _int(r[4], "registered_at_block"), _opt_int(r[5], "revoked_at_block"))
                 for r in (_row(x, 6, "account key") for x in _rows(d["keys"], "keys")))
    auths = [AuthorizationRecord(_key(r, "authorization"), str(r[1]), str(r[2]), _int(r[3], "granted_at_block"),
                                 _opt_int(r[4], "revoked_at_block"))
             for r in (_row(x, 5, "authorization") for x in _rows(d["auths"], "auths"))]
    per_stream: dict[str, int] = {}
    for a in auths:
        _require(a.status in (ACTIVE, REVOKED), "an authorization is ACTIVE or REVOKED")
        per_stream[a.stream_id] = per_stream.get(a.stream_id, 0) + (a.status == ACTIVE)
    _require([k.account_key_id for k in keys] == list(range(1, len(keys) + 1)), "account key ids run 1..n")
    next_key_id = _int(d["next_key_id"], "next_key_id", 1)
    _require(next_key_id == len(keys) + 1, "next_key_id follows the last key")
    return AccountState(
        account=AccountState.initial(ACCOUNT_PREFIX + str(d["account"])).account,
        balance_cby=_int(d["balance_cby"], "balance_cby"),
        keys=keys,
        next_key_id=next_key_id,
        authorizations=FrozenMap((authorization_key(a.actor, a.stream_id), a) for a in auths),
        active_per_stream=FrozenMap(per_stream),
        callers=_callers_from(d["callers"]),
        credits=_int(d.get("credits", 0), "credits"),  # absent: no numbered credit was folded
        allowances=_allowances_from(d.get("allowances", [])),  # absent: no allowance was ever given
    )


def _allowances_from(value: object) -> FrozenMap[AllowanceRecord]:
    rows = [AllowanceRecord(_key(r, "allowance"), str(r[1]), _int(r[2], "cap_cby", 1), _int(r[3], "spent_cby"),
                            str(r[4]), _int(r[5], "granted_at_block"), _opt_int(r[6], "revoked_at_block"))
            for r in (_row(x, 7, "allowance") for x in _rows(value, "allowances"))]
    for a in rows:
        _require(a.status in (ACTIVE, REVOKED), "an allowance is ACTIVE or REVOKED")
        _require(a.spent_cby <= a.cap_cby, "an allowance's spent_cby is at most its cap_cby")
    return FrozenMap((authorization_key(a.spender, a.stream_id), a) for a in rows)


def _paid_doc(s: PaidState) -> dict[str, Any]:
    return {
        "stream_id": s.stream_id,
        "owner": s.owner,
        "config": None if s.config is None else s.config.to_dict(),
        "entitlements": [[k, v] for k, v in sorted(s.entitlements.items())],
        "in_flight": [[k, to_tagged_json(event_fields(v))] for k, v in sorted(s.in_flight.items())],
        "callers": _callers_doc(s.callers),
    }


def _paid_from(d: Any) -> PaidState:
    _require(isinstance(d, dict), "a paid-stream snapshot entry must be a map")
    return PaidState(
        stream_id=PaidState.initial(PAID_PREFIX + str(d["stream_id"])).stream_id,
        owner=None if d["owner"] is None else str(d["owner"]),
        config=None if d["config"] is None else PaidStreamConfig.from_dict(d["config"]),
        entitlements=FrozenMap((_key(r, "entitlement"), _int(r[1], "active_until_key_epoch"))
                               for r in (_row(x, 2, "entitlement") for x in _rows(d["entitlements"], "entitlements"))),
        in_flight=FrozenMap((_key(r, "purchase"), _folded_body(r[1], EpochAccessRequested, "purchase in flight"))
                            for r in (_row(x, 2, "purchase") for x in _rows(d["in_flight"], "in_flight"))),
        callers=_callers_from(d["callers"]),
    )


def _supply_doc(s: SupplyState) -> dict[str, Any]:
    return {"total_supply_cby": s.total_supply_cby, "callers": _callers_doc(s.callers)}


def _supply_from(d: Any) -> SupplyState:
    _require(isinstance(d, dict), "a supply snapshot entry must be a map")
    total = _int(d["total_supply_cby"], "total_supply_cby")
    _require(total <= MAX_CBY, f"the total supply is at most {MAX_CBY}")
    return SupplyState(total, _callers_from(d["callers"]))


_LEDGER_CODECS: Final[dict[str, tuple[Any, Any]]] = {
    "accounts": (_account_doc, _account_from),
    "paid_streams": (_paid_doc, _paid_from),
    "supply": (_supply_doc, _supply_from),
}


def encode_ledger(kind: str, states: Mapping[str, Any]) -> bytes:
    """The key-manager instances of one kind ("accounts", "paid_streams" or "supply") on one partition."""
    to_doc, _ = _LEDGER_CODECS[kind]
    return _dumps({"v": LEDGER_PART_VERSION, kind: [[key, to_doc(s)] for key, s in sorted(states.items())]})


def decode_ledger(kind: str, data: bytes) -> dict[str, Any]:
    """Inverse of `encode_ledger`; SnapshotError for anything it did not write."""
    _, from_doc = _LEDGER_CODECS[kind]
    doc = _loads(data, f"a {kind} snapshot")
    _require(isinstance(doc, dict) and set(doc) == {"v", kind} and doc["v"] == LEDGER_PART_VERSION,
             f"a {kind} snapshot is {{v: {LEDGER_PART_VERSION}, {kind}: [...]}}")
    out: dict[str, Any] = {}
    for row in _rows(doc[kind], kind):
        key = _key(_row(row, 2, kind), kind)
        try:
            state = from_doc(row[1])
        except SnapshotError:
            raise
        except (WatchtowerError, KeyError, TypeError, ValueError, IndexError) as exc:
            raise SnapshotError(f"an entry of the {kind} snapshot is malformed ({exc!r})"[:300]) from None
        _require(key not in out, f"{key!r} appears twice")
        out[key] = state
    return out
