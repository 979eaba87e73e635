"""The key manager's read tables: accounts, paid streams, entitlements, supply, key epochs (no I/O).

Folded from the ``events`` topic beside the stream views, with the same record-by-record code in
the live worker and in the offline rebuild (`fold.Folder` calls `apply_keymgr_event`), so their
digests (`keymgr_digest`) can be compared.

One rule book: every keymgr event is applied to the pure `KeymgrState` (`protocol.ledger.keymgr_access`),
which folds it with the aggregates' own ``evolve`` functions and raises on an event that breaks a
rule; such an event changes nothing and the caller quarantines it. The rows of the instance the
event changed are then rewritten from that state (never computed here), so the tables hold exactly
what the writers' state holds. The `KeymgrState` is kept per events partition in
``tables[KEYMGR_VIEW]`` (in memory, not digested, rebuilt from the log with the partition's other
state). Every keymgr instance (``acct:<address>``, ``paid:<stream_id>``, ``cby:supply``) lives on
one partition, so a per-partition state sees all the events of its instances, as the writer's does.

Tables (JSON values keyed by text):

- ``accounts[address]``: ``{"account", "balance_cby", "keys": [...], "authorizations": [...]}``,
  the ``GET /v1/accounts`` body;
- ``paid_streams[stream_id]``: owner, PaidStreamConfig and the block it was registered at;
- ``entitlements[stream_id + "/" + beneficiary]``: ``active_until_key_epoch``;
- ``supply["cby:supply"]``: the total supply;
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
from watchtower.protocol.events import (
    EpochAccessFailed,
    EpochAccessIdempotent,
    EpochAccessPurchased,
    EpochAccessRequested,
    KeyEpochRotated,
)
from watchtower.protocol.ledger.accounts import AccountState
from watchtower.protocol.ledger.common import ACCOUNT_PREFIX, PAID_PREFIX, SUPPLY_KEY
from watchtower.protocol.ledger.keymgr_access import KEYMGR_EVENTS, KeymgrState
from watchtower.protocol.stream.state import Event
from watchtower.protocol.stream.view_checks import broken

Table = MutableMapping[str, Any]

KEYMGR_TABLES: Final = ("accounts", "paid_streams", "entitlements", "supply", "key_epochs")
KEYMGR_VIEW: Final = "keymgr_view"
"""The in-memory, undigested table holding the partition's `KeymgrState` under `_VIEW_KEY`."""
_VIEW_KEY: Final = "state"
_BENEFICIARY_BODIES: Final = (EpochAccessRequested, EpochAccessPurchased, EpochAccessIdempotent, EpochAccessFailed)


def new_keymgr_tables() -> dict[str, dict[str, Any]]:
    """Empty keymgr tables for a fold, with the in-memory view table."""
    return {name: {} for name in (*KEYMGR_TABLES, KEYMGR_VIEW)}


def is_keymgr_event(event_type: str) -> bool:
    """True for the key manager's event types (the stream views skip them, they do not refuse them)."""
    return event_type in KEYMGR_EVENTS


def entitlement_key(stream_id: str, beneficiary: str) -> str:
    return f"{stream_id}/{beneficiary}"


# --- Folding -------------------------------------------------------------------------------------


def apply_keymgr_event(tables: Mapping[str, Table], event: Event) -> None:
    """Fold one committed keymgr event; `RuleBrokenError` (nothing changed) when it breaks a rule."""
    views = tables[KEYMGR_VIEW]
    view = views.get(_VIEW_KEY)
    if view is None:
        view = KeymgrState()
    try:
        view.apply(event)  # atomic: a refused event leaves the state as it was
    except WatchtowerError as exc:
        raise broken(f"{event.type} on {event.stream_id!r}: {exc.message}") from None
    views[_VIEW_KEY] = view
    instance = event.stream_id
    if instance.startswith(ACCOUNT_PREFIX):
        account = view.accounts[instance]
        tables["accounts"][account.account] = account_row(account)
    elif instance.startswith(PAID_PREFIX):
        _paid_rows(tables, view, event)
    elif instance == SUPPLY_KEY:
        tables["supply"][SUPPLY_KEY] = {"total_supply_cby": view.supply.total_supply_cby}


def _paid_rows(tables: Mapping[str, Table], view: KeymgrState, event: Event) -> None:
    state = view.paid[event.stream_id]
    if state.config is not None and state.owner is not None and state.stream_id not in tables["paid_streams"]:
        tables["paid_streams"][state.stream_id] = {
            "stream_id": state.stream_id, "owner": state.owner, "paid_stream_config": state.config.to_dict(),
            "registered_at_block": event.block_height}
    body = event.body
    beneficiary = body.beneficiary_account if isinstance(body, _BENEFICIARY_BODIES) else None
    if isinstance(beneficiary, str) and beneficiary in state.entitlements:
        tables["entitlements"][entitlement_key(state.stream_id, beneficiary)] = {
            "stream_id": state.stream_id, "beneficiary_account": beneficiary,
            "active_until_key_epoch": int(state.entitlements[beneficiary])}


def account_row(state: AccountState) -> dict[str, Any]:
    """The ``accounts`` row (and ``GET /v1/accounts/{address}`` body) of an account's state."""
    grants = sorted(state.authorizations.values(), key=lambda g: (g.actor, g.stream_id))
    return {
        "account": state.account,
        "balance_cby": state.balance_cby,
        "keys": [{"account_key_id": k.account_key_id, "scheme": k.scheme, "public_key_hex": k.public_key.hex(),
                  "status": k.status, "registered_at_block": k.registered_at_block,
                  "revoked_at_block": k.revoked_at_block} for k in state.keys],
        "authorizations": [{"actor": g.actor, "stream_id": g.stream_id, "status": g.status,
                            "granted_at_block": g.granted_at_block, "revoked_at_block": g.revoked_at_block}
                           for g in grants],
    }


def apply_key_epoch(tables: Mapping[str, Table], event: Event) -> None:
    """Record a KeyEpochRotated the stream views accepted in the stream's key epoch schedule."""
    body = event.body
    if not isinstance(body, KeyEpochRotated):
        return  # only a KeyEpochRotated changes the schedule
    current = tables["key_epochs"].get(event.stream_id)
    epochs = [] if current is None else list(current["epochs"])
    if any(int(e["key_epoch"]) == int(body.key_epoch) for e in epochs):
        return  # announced again (the writer allows equal epochs): the schedule keeps the first
    epochs.append({"key_epoch": int(body.key_epoch), "effective_block_height": int(body.effective_block_height),
                   "announced_by": body.announced_by, "announced_at_block": event.block_height})
    tables["key_epochs"][event.stream_id] = {"stream_id": event.stream_id, "epochs": epochs}


# --- Reads ---------------------------------------------------------------------------------------


def account_view(entry: Mapping[str, Any] | None, address: str) -> dict[str, Any]:
    """The ``GET /v1/accounts/{address}`` body: keys by id, grants by (actor, stream); zeros if unknown."""
    if entry is None:
        return {"account": address, "balance_cby": 0, "keys": [], "authorizations": []}
    return {"account": address, "balance_cby": int(entry["balance_cby"]),
            "keys": [dict(k) for k in entry["keys"]], "authorizations": [dict(g) for g in entry["authorizations"]]}


def balance_totals(accounts: Iterable[tuple[str, Any]]) -> tuple[int, int]:
    """(sum of balances, number of accounts holding CBY) over `accounts` entries."""
    total = count = 0
    for _address, entry in accounts:
        balance = int(entry["balance_cby"])
        total += balance
        count += balance > 0
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
    # Tuples and lists alike (a table may hold either). Amounts fit CBOR's heads: the ledger caps
    # every balance and the supply at 2**63-1 (`ledger.MAX_CBY`).
    if isinstance(value, Mapping):
        return {str(k): _canon(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canon(v) for v in value]
    return value
