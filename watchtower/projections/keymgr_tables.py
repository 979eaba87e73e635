"""The key manager's read tables: accounts, paid streams, entitlements, supply, key epochs (no I/O).

Folded from the ``events`` topic beside the stream views, with the same record-by-record code in
the live worker and in the offline rebuild (`fold.Folder` calls `apply_keymgr_event`), so their
digests (`keymgr_digest`) can be compared.

One rule book: every keymgr event is first applied to the pure `KeymgrState`
(`protocol.keymgr_access`), which folds it with the aggregates' own ``evolve`` functions and raises
on an event that breaks a rule; such an event changes nothing here and the caller quarantines it.
Only then are the JSON tables updated from the event, which is pure bookkeeping (a balance moves
by the amount the accepted event states, a key gets the status the event states). The
`KeymgrState` is kept per events partition in ``tables[KEYMGR_VIEW]`` (in memory, not digested,
rebuilt from the log with the partition's other state). Every keymgr instance (``acct:<address>``,
``paid:<stream_id>``, ``cby:supply``) lives on one partition, so a per-partition state sees all the
events of its instances, as the writer's does.

Tables (JSON values keyed by text):

- ``accounts[address]``: ``{"account", "balance_cby", "keys": {id: key}, "authorizations":
  {actor + "/" + stream_id: grant}}`` (`account_view` turns it into the ``GET /v1/accounts`` body);
- ``paid_streams[stream_id]``: owner, PaidStreamConfig and the block it was registered at;
- ``entitlements[stream_id + "/" + beneficiary]``: ``active_until_key_epoch`` and the last purchase;
- ``supply["cby:supply"]``: total supply, minted and burned;
- ``key_epochs[stream_id]``: the stream's KeyEpochRotated schedule, one entry per announced epoch
  (an epoch announced again keeps its first entry). It comes from a stream event, folded after
  the stream views accepted it (`apply_key_epoch`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any, Final

from watchtower.protocol import cbor
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.keymgr_access import KeymgrState
from watchtower.protocol.stream_state import Event
from watchtower.protocol.view_checks import broken

Table = MutableMapping[str, Any]
Writes = list[tuple[str, str, Any]]
"""(table, key, new value) rows a keymgr event changes."""

KEYMGR_TABLES: Final = ("accounts", "paid_streams", "entitlements", "supply", "key_epochs")
KEYMGR_VIEW: Final = "keymgr_view"
"""The in-memory, undigested table holding the partition's `KeymgrState` under `_VIEW_KEY`."""
_VIEW_KEY: Final = "state"
SUPPLY_KEY: Final = "cby:supply"

KEYMGR_EVENT_TYPES: Final = frozenset({
    "AccountKeyRegistered", "AccountKeyRevoked", "ActorAuthorizationGranted", "ActorAuthorizationRevoked",
    "CbyCredited", "CbyDebited", "CbyMinted", "CbyBurned", "PaidStreamRegistered", "EpochAccessRequested",
    "EpochAccessPurchased", "EpochAccessIdempotent", "EpochAccessFailed",
})


def new_keymgr_tables() -> dict[str, dict[str, Any]]:
    """Empty keymgr tables for a fold, with the in-memory view table."""
    return {name: {} for name in (*KEYMGR_TABLES, KEYMGR_VIEW)}


def is_keymgr_event(event_type: str) -> bool:
    """True for the key manager's event types (the stream views skip them, they do not refuse them)."""
    return event_type in KEYMGR_EVENT_TYPES


def entitlement_key(stream_id: str, beneficiary: str) -> str:
    return f"{stream_id}/{beneficiary}"


# --- Folding -------------------------------------------------------------------------------------


def apply_keymgr_event(tables: Mapping[str, Table], event: Event) -> None:
    """Fold one committed keymgr event; `RuleBrokenError` (nothing changed) when it breaks a rule."""
    # The table rows are computed first and written last, so a refusal by either side changes nothing.
    writes = _FOLDS[event.type](tables, event)
    views = tables[KEYMGR_VIEW]
    view = views.get(_VIEW_KEY)
    if view is None:
        view = KeymgrState()
    try:
        view.apply(event)
    except WatchtowerError as exc:
        raise broken(f"{event.type} on {event.stream_id!r}: {exc.message}") from None
    views[_VIEW_KEY] = view
    for table, key, value in writes:
        tables[table][key] = value


def apply_key_epoch(tables: Mapping[str, Table], event: Event) -> None:
    """Record a KeyEpochRotated the stream views accepted in the stream's key epoch schedule."""
    body = event.body
    current = tables["key_epochs"].get(event.stream_id)
    epochs = [] if current is None else list(current["epochs"])
    if any(int(e["key_epoch"]) == int(body["key_epoch"]) for e in epochs):
        return  # announced again (the writer allows equal epochs): the schedule keeps the first
    epochs.append({"key_epoch": int(body["key_epoch"]), "effective_block_height": int(body["effective_block_height"]),
                   "announced_by": body["announced_by"], "announced_at_block": event.block_height})
    tables["key_epochs"][event.stream_id] = {"stream_id": event.stream_id, "epochs": epochs}


def _account(tables: Mapping[str, Table], address: str) -> dict[str, Any]:
    current = tables["accounts"].get(address)
    if current is None:
        return {"account": address, "balance_cby": 0, "keys": {}, "authorizations": {}}
    return {**current, "keys": dict(current["keys"]), "authorizations": dict(current["authorizations"])}


def _key_registered(tables: Mapping[str, Table], event: Event) -> Writes:
    body = event.body
    acct = _account(tables, body["account"])
    acct["keys"][str(int(body["account_key_id"]))] = {
        "account_key_id": int(body["account_key_id"]), "scheme": body["scheme"],
        "public_key_hex": bytes(body["public_key"]).hex(), "status": "ACTIVE",
        "registered_at_block": event.block_height, "revoked_at_block": None}
    return [("accounts", body["account"], acct)]


def _key_revoked(tables: Mapping[str, Table], event: Event) -> Writes:
    body = event.body
    acct = _account(tables, body["account"])
    key_id = str(int(body["account_key_id"]))
    if key_id not in acct["keys"]:  # the state accepted it, so this means its instance moved: never fold half
        raise broken(f"AccountKeyRevoked: account {body['account']} has no key {key_id}")
    acct["keys"][key_id] = {**acct["keys"][key_id], "status": "REVOKED", "revoked_at_block": event.block_height}
    return [("accounts", body["account"], acct)]


def _granted(tables: Mapping[str, Table], event: Event) -> Writes:
    body = event.body
    acct = _account(tables, body["account"])
    acct["authorizations"][f"{body['actor']}/{body['stream_id']}"] = {
        "actor": body["actor"], "stream_id": body["stream_id"], "scope": body.get("scope", "DECRYPT"),
        "status": "ACTIVE", "granted_at_block": event.block_height, "revoked_at_block": None}
    return [("accounts", body["account"], acct)]


def _revoked(tables: Mapping[str, Table], event: Event) -> Writes:
    body = event.body
    acct = _account(tables, body["account"])
    key = f"{body['actor']}/{body['stream_id']}"
    if key not in acct["authorizations"]:
        raise broken(f"ActorAuthorizationRevoked: {body['actor']} holds no grant of {body['account']} "
                     f"on {body['stream_id']!r}")
    acct["authorizations"][key] = {**acct["authorizations"][key], "status": "REVOKED",
                                   "revoked_at_block": event.block_height}
    return [("accounts", body["account"], acct)]


def _moved(sign: int) -> Any:
    def fold(tables: Mapping[str, Table], event: Event) -> Writes:
        body = event.body
        acct = _account(tables, body["account"])
        balance = int(acct["balance_cby"]) + sign * int(body["amount_cby"])
        if balance < 0:  # the state accepted it, so only a state/table mismatch gets here
            raise broken(f"{event.type}: account {body['account']} would hold {balance} CBY")
        acct["balance_cby"] = balance
        return [("accounts", body["account"], acct)]
    return fold


def _supply(minted: int, burned: int) -> Any:
    def fold(tables: Mapping[str, Table], event: Event) -> Writes:
        body = event.body
        current = tables["supply"].get(SUPPLY_KEY) or {"total_supply_cby": 0, "minted_cby": 0, "burned_cby": 0}
        amount = int(body["amount_cby"])
        return [("supply", SUPPLY_KEY, {"total_supply_cby": int(body["total_supply_cby"]),
                                        "minted_cby": int(current["minted_cby"]) + minted * amount,
                                        "burned_cby": int(current["burned_cby"]) + burned * amount})]
    return fold


def _paid_registered(_tables: Mapping[str, Table], event: Event) -> Writes:
    body = event.body
    return [("paid_streams", body["stream_id"], {
        "stream_id": body["stream_id"], "owner": body["owner"],
        "paid_stream_config": _plain(body["paid_stream_config"]), "registered_at_block": event.block_height})]


def _purchased(_tables: Mapping[str, Table], event: Event) -> Writes:
    body = event.body
    key = entitlement_key(body["stream_id"], body["beneficiary_account"])
    return [("entitlements", key, {
        "stream_id": body["stream_id"], "beneficiary_account": body["beneficiary_account"],
        "active_until_key_epoch": int(body["to_key_epoch"]), "last_purchase_id": body["purchase_id"],
        "updated_at_block": event.block_height})]


def _no_table_change(_tables: Mapping[str, Table], _event: Event) -> Writes:
    """A purchase in flight, failed or idempotent: the state tracks it; no read table changes."""
    return []


_FOLDS: Final = {
    "AccountKeyRegistered": _key_registered,
    "AccountKeyRevoked": _key_revoked,
    "ActorAuthorizationGranted": _granted,
    "ActorAuthorizationRevoked": _revoked,
    "CbyCredited": _moved(+1),
    "CbyDebited": _moved(-1),
    "CbyMinted": _supply(1, 0),
    "CbyBurned": _supply(0, 1),
    "PaidStreamRegistered": _paid_registered,
    "EpochAccessRequested": _no_table_change,
    "EpochAccessPurchased": _purchased,
    "EpochAccessIdempotent": _no_table_change,
    "EpochAccessFailed": _no_table_change,
}


def _plain(value: Any) -> Any:
    # Event bodies are deep-frozen; the tables hold plain JSON values.
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    return value


# --- Reads ---------------------------------------------------------------------------------------


def account_view(entry: Mapping[str, Any] | None, address: str) -> dict[str, Any]:
    """The ``GET /v1/accounts/{address}`` body: keys by id, grants by (actor, stream); zeros if unknown."""
    if entry is None:
        return {"account": address, "balance_cby": 0, "keys": [], "authorizations": []}
    keys = sorted(entry["keys"].values(), key=lambda k: int(k["account_key_id"]))
    grants = sorted(entry["authorizations"].values(), key=lambda g: (g["actor"], g["stream_id"]))
    return {"account": address, "balance_cby": int(entry["balance_cby"]), "keys": [dict(k) for k in keys],
            "authorizations": [{k: g[k] for k in ("actor", "stream_id", "status", "granted_at_block",
                                                  "revoked_at_block")} for g in grants]}


def balance_totals(accounts: Iterable[tuple[str, Any]]) -> tuple[int, int]:
    """(sum of balances, number of accounts that ever held CBY) over `accounts` entries."""
    total = count = 0
    for _address, entry in accounts:
        total += int(entry["balance_cby"])
        count += 1
    return total, count


# --- Digest --------------------------------------------------------------------------------------


def keymgr_digest(tables: Mapping[str, Iterable[tuple[str, Any]]]) -> str:
    """Hex SHA-256 over every keymgr table's (key, value) pairs in key order, as deterministic CBOR."""
    canonical = {name: {k: _canon(v) for k, v in sorted(tables[name])} for name in KEYMGR_TABLES}
    return hashlib.sha256(cbor.encode(canonical)).hexdigest()


def keymgr_table_digests(tables: Mapping[str, Iterable[tuple[str, Any]]]) -> dict[str, str]:
    """`keymgr_digest` per table, to see which table a mismatch is in."""
    return {name: keymgr_digest({n: (tables[name] if n == name else ()) for n in KEYMGR_TABLES})
            for name in KEYMGR_TABLES}


def _canon(value: Any) -> Any:
    # Tuples and lists alike; integers beyond CBOR's 64-bit heads (a supply can grow past them) as text.
    if isinstance(value, Mapping):
        return {str(k): _canon(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canon(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        return str(value)
    return value
