"""The key manager's snapshot parts: accounts, paid streams and the CBY supply.

`encode_ledger(kind, states)` writes the ledger instances of one kind on one partition as a part
of the worker's snapshot (`stream.snapshots`: the envelope), every field, so the decoded state
equals the folded one; `decode_ledger` reads it back and refuses, as `SnapshotError`, anything it
did not write. A field added by a later release (an account's numbered credits, its allowances)
is written only when it holds something, so a state without it has the bytes it had before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.events import event_fields
from watchtower.protocol.frozen_json import to_tagged_json
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
from watchtower.protocol.stream.snapshot_cbor import (
    SnapshotError,
    callers_doc,
    callers_from,
    dumps,
    folded_body,
    key_of,
    loads,
    opt_int,
    raw,
    read_int,
    require,
    row_of,
    rows_of,
)
from watchtower.protocol.stream.state import FrozenMap

LEDGER_PART_VERSION: Final = 1

def _account_doc(s: AccountState) -> dict[str, Any]:
    doc = {
        "account": s.account,
        "balance_cby": s.balance_cby,
        "keys": [[k.account_key_id, k.scheme, k.public_key, k.status, k.registered_at_block, k.revoked_at_block]
                 for k in s.keys],
        "next_key_id": s.next_key_id,
        "auths": [[a.actor, a.stream_id, a.status, a.granted_at_block, a.revoked_at_block]
                  for _, a in sorted(s.authorizations.items())],
        "callers": callers_doc(s.callers),
    }
    if s.credits:  # only then: an account without numbered credits is written as before they existed
        doc["credits"] = s.credits
    if s.allowances:  # likewise: an account that never gave an allowance is written as before
        doc["allowances"] = [[a.spender, a.stream_id, a.cap_cby, a.spent_cby, a.status, a.granted_at_block,
                              a.revoked_at_block] for _, a in sorted(s.allowances.items())]
    return doc


def _account_from(d: Any) -> AccountState:
    require(isinstance(d, dict), "an account snapshot entry must be a map")
    keys = tuple(AccountKeyRecord(read_int(r[0], "account_key_id", 1), str(r[1]), raw(r[2], "public_key"), str(r[3]),
                                  read_int(r[4], "registered_at_block"), opt_int(r[5], "revoked_at_block"))
                 for r in (row_of(x, 6, "account key") for x in rows_of(d["keys"], "keys")))
    auths = [AuthorizationRecord(key_of(r, "authorization"), str(r[1]), str(r[2]), read_int(r[3], "granted_at_block"),
                                 opt_int(r[4], "revoked_at_block"))
             for r in (row_of(x, 5, "authorization") for x in rows_of(d["auths"], "auths"))]
    per_stream: dict[str, int] = {}
    for a in auths:
        require(a.status in (ACTIVE, REVOKED), "an authorization is ACTIVE or REVOKED")
        per_stream[a.stream_id] = per_stream.get(a.stream_id, 0) + (a.status == ACTIVE)
    require([k.account_key_id for k in keys] == list(range(1, len(keys) + 1)), "account key ids run 1..n")
    next_key_id = read_int(d["next_key_id"], "next_key_id", 1)
    require(next_key_id == len(keys) + 1, "next_key_id follows the last key")
    return AccountState(
        account=AccountState.initial(ACCOUNT_PREFIX + str(d["account"])).account,
        balance_cby=read_int(d["balance_cby"], "balance_cby"),
        keys=keys,
        next_key_id=next_key_id,
        authorizations=FrozenMap((authorization_key(a.actor, a.stream_id), a) for a in auths),
        active_per_stream=FrozenMap(per_stream),
        callers=callers_from(d["callers"]),
        credits=read_int(d.get("credits", 0), "credits"),  # absent: no numbered credit was folded
        allowances=_allowances_from(d.get("allowances", [])),  # absent: no allowance was ever given
    )


def _allowances_from(value: object) -> FrozenMap[AllowanceRecord]:
    rows = [AllowanceRecord(key_of(r, "allowance"), str(r[1]), read_int(r[2], "cap_cby", 1),
                            read_int(r[3], "spent_cby"), str(r[4]), read_int(r[5], "granted_at_block"),
                            opt_int(r[6], "revoked_at_block"))
            for r in (row_of(x, 7, "allowance") for x in rows_of(value, "allowances"))]
    for a in rows:
        require(a.status in (ACTIVE, REVOKED), "an allowance is ACTIVE or REVOKED")
        require(a.spent_cby <= a.cap_cby, "an allowance's spent_cby is at most its cap_cby")
    return FrozenMap((authorization_key(a.spender, a.stream_id), a) for a in rows)


def _paid_doc(s: PaidState) -> dict[str, Any]:
    return {
        "stream_id": s.stream_id,
        "owner": s.owner,
        "config": None if s.config is None else s.config.to_dict(),
        "entitlements": [[k, v] for k, v in sorted(s.entitlements.items())],
        "in_flight": [[k, to_tagged_json(event_fields(v))] for k, v in sorted(s.in_flight.items())],
        "callers": callers_doc(s.callers),
    }


def _paid_from(d: Any) -> PaidState:
    require(isinstance(d, dict), "a paid-stream snapshot entry must be a map")
    return PaidState(
        stream_id=PaidState.initial(PAID_PREFIX + str(d["stream_id"])).stream_id,
        owner=None if d["owner"] is None else str(d["owner"]),
        config=None if d["config"] is None else PaidStreamConfig.from_dict(d["config"]),
        entitlements=FrozenMap(
            (key_of(r, "entitlement"), read_int(r[1], "active_until_key_epoch"))
            for r in (row_of(x, 2, "entitlement") for x in rows_of(d["entitlements"], "entitlements"))),
        in_flight=FrozenMap((key_of(r, "purchase"), folded_body(r[1], EpochAccessRequested, "purchase in flight"))
                            for r in (row_of(x, 2, "purchase") for x in rows_of(d["in_flight"], "in_flight"))),
        callers=callers_from(d["callers"]),
    )


def _supply_doc(s: SupplyState) -> dict[str, Any]:
    return {"total_supply_cby": s.total_supply_cby, "callers": callers_doc(s.callers)}


def _supply_from(d: Any) -> SupplyState:
    require(isinstance(d, dict), "a supply snapshot entry must be a map")
    total = read_int(d["total_supply_cby"], "total_supply_cby")
    require(total <= MAX_CBY, f"the total supply is at most {MAX_CBY}")
    return SupplyState(total, callers_from(d["callers"]))


_LEDGER_CODECS: Final[dict[str, tuple[Any, Any]]] = {
    "accounts": (_account_doc, _account_from),
    "paid_streams": (_paid_doc, _paid_from),
    "supply": (_supply_doc, _supply_from),
}


def encode_ledger(kind: str, states: Mapping[str, Any]) -> bytes:
    """The key-manager instances of one kind ("accounts", "paid_streams" or "supply") on one partition."""
    to_doc, _ = _LEDGER_CODECS[kind]
    return dumps({"v": LEDGER_PART_VERSION, kind: [[key, to_doc(s)] for key, s in sorted(states.items())]})


def decode_ledger(kind: str, data: bytes) -> dict[str, Any]:
    """Inverse of `encode_ledger`; SnapshotError for anything it did not write."""
    _, from_doc = _LEDGER_CODECS[kind]
    doc = loads(data, f"a {kind} snapshot")
    require(isinstance(doc, dict) and set(doc) == {"v", kind} and doc["v"] == LEDGER_PART_VERSION,
            f"a {kind} snapshot is {{v: {LEDGER_PART_VERSION}, {kind}: [...]}}")
    out: dict[str, Any] = {}
    for row in rows_of(doc[kind], kind):
        key = key_of(row_of(row, 2, kind), kind)
        try:
            state = from_doc(row[1])
        except SnapshotError:
            raise
        except (WatchtowerError, KeyError, TypeError, ValueError, IndexError) as exc:
            raise SnapshotError(f"an entry of the {kind} snapshot is malformed ({exc!r})"[:300]) from None
        require(key not in out, f"{key!r} appears twice")
        out[key] = state
    return out


__all__ = ["LEDGER_PART_VERSION", "decode_ledger", "encode_ledger"]
