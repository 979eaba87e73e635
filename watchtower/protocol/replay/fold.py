"""How a stream's ICRC-77 replay control events fold into its state (part of `stream_state.evolve`).

The events and what they change:

- ``ReplayPricingSet``: the stream's per-event replay price (0..2**63-1 CBY wei);
- ``ReplayOrdered``: a priced replay the requester's account is paying for; at most one per
  requester is in flight (`StreamState.replay_orders`);
- ``ReplayRegistered``: an accepted replay; a priced one settles the requester's order (same body),
  a free one must be free at the stream's current price;
- ``ReplayPaymentFailed``: the requester's account refused the order, which is dropped;
- ``ReplayCancelRequested``: the replay's cancel was requested by its requester (the replay fold
  on the ``replay`` topic stops it at its next slice);
- ``ReplayFinished``: the replay worker fulfilled the replay to its end (completed, canceled or
  errored; decided from its forward on ``internal``, `replay_control.finish_replay`).

Every registered replay is kept in `StreamState.replays` as (requester, status), status one of
`REPLAY_STATUSES`: ``registered``; ``cancel_requested``; ``finished`` for a replay whose plan was
empty, which completes at once, or that the replay worker finished. A cancel_replay is decided
against it (`replay_control`). The map is bounded (`MAX_TRACKED_REPLAYS` a stream): registrations
are free on a public feed, and the state goes into every snapshot. Past the bound the entry chosen
by content alone is forgotten (a cancel requested or finished one first, then any; the smallest
replay id), so the live writer, a rebuild and a restored snapshot forget the same one; a cancel
of a forgotten replay is REPLAY_NOT_FOUND.
A cancel event that decide would now refuse (an unknown replay, another account's, a second one:
logs written before cancels were answered per ICRC-77 hold such events) folds as before: recorded,
changing nothing.

The log is not trusted: a body that could not come from `replay_control` (another stream, a
requester other than the signer, a replay id not derived from the command digest, a plan that is
not a plan, a price that is not per-event × charged events, a settlement of no order, a finish of
a replay the stream never registered, of another requester's, whose origin is not the replay's
registration, or of a replay already finished) raises, and
`evolve` turns that into MALFORMED_RECORD so the record is quarantined. Every event records its
caller like the other stream events (`evolve` does that).

Pure; it builds on `stream_types`, as `stream_state` (which calls it) does.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Final

from watchtower.protocol.addresses import require_address
from watchtower.protocol.constants import MAX_WIRE_UINT64
from watchtower.protocol.errors import InvalidArgumentError
from watchtower.protocol.events import (
    ReplayCancelRequested,
    ReplayFinished,
    ReplayOrdered,
    ReplayPaymentFailed,
    ReplayPricingSet,
    ReplayRegistered,
    event_fields,
)
from watchtower.protocol.replay.rules import (
    MAX_REPLAY_ID,
    canonical_filter,
    charged_events,
    parse_replay_filter,
    parse_skip,
    replay_id_for,
)
from watchtower.protocol.stream.types import Event, FrozenMap, StreamState
from watchtower.protocol.validation import is_int

REGISTERED: Final = "registered"
CANCEL_REQUESTED: Final = "cancel_requested"
FINISHED: Final = "finished"
REPLAY_STATUSES: Final = (REGISTERED, CANCEL_REQUESTED, FINISHED)
MAX_TRACKED_REPLAYS: Final = 1_000
#: How a replay ended (ICRC-77 ReplayState's terminal variants), as a ReplayFinished names it.
REPLAY_OUTCOMES: Final = ("completed", "canceled", "errored")

MAX_REPLAY_PRICE: Final = MAX_WIRE_UINT64
"""The highest per-event price and the highest replay price (an Avro long, a CBY amount)."""
MAX_MEMO_HEX: Final = 64
MAX_NAMESPACE: Final = 256
_FEED_NAMESPACE: Final = re.compile(r"feed:[1-9][0-9]{0,18}")
_HEX: Final = re.compile(r"(?:[0-9a-f]{2})*")
_REPLAY_BODIES: Final = (ReplayPricingSet, ReplayOrdered, ReplayRegistered, ReplayPaymentFailed, ReplayCancelRequested,
                         ReplayFinished)


def apply_replay_event(state: StreamState, event: Event) -> StreamState:
    """`state` after a replay control event; InvalidArgumentError (→ MALFORMED_RECORD) when it breaks a rule."""
    body = event.body
    if not isinstance(body, _REPLAY_BODIES):
        raise InvalidArgumentError(f"{event.type} is not a replay control event")
    if body.stream_id != state.stream_id:
        raise InvalidArgumentError(f"the event names stream {body.stream_id!r}")
    if isinstance(body, ReplayPricingSet):
        if event.caller != state.owner:
            raise InvalidArgumentError("only the owner sets the replay price")
        return dataclasses.replace(state, replay_price_per_event_cby=_price(body.price_per_event_cby))
    if isinstance(body, ReplayCancelRequested):
        if body.requester != event.caller:
            raise InvalidArgumentError("a cancel is requested by its signer")
        key = str(_replay_id(body.replay_id))
        known = state.replays.get(key)
        if known is None or known[0] != body.requester or known[1] != REGISTERED:
            return state  # a log written before cancels were refused may hold such a cancel: it changes nothing
        return dataclasses.replace(state, replays=state.replays.set(key, (known[0], CANCEL_REQUESTED)))
    if isinstance(body, ReplayFinished):
        return _finished(state, event, body)
    if isinstance(body, ReplayPaymentFailed):
        order = state.replay_orders.get(str(body.requester))
        if order is None or order.replay_id != body.replay_id or order.price_cby != body.price_cby:
            raise InvalidArgumentError(f"replay {body.replay_id!r} is not the order in flight for "
                                       f"{body.requester!r}")
        if not isinstance(body.code, str) or not isinstance(body.message, str):
            raise InvalidArgumentError("code and message are text")
        return dataclasses.replace(state, replay_orders=state.replay_orders.without(str(body.requester)))
    expected = check_registration(state, event, body)
    requester = str(body.requester)
    order = state.replay_orders.get(requester)
    if isinstance(body, ReplayOrdered):
        if order is not None:
            raise InvalidArgumentError(f"{requester} already has replay {order.replay_id} in flight")
        if body.price_cby == 0:
            raise InvalidArgumentError("a free replay is registered, never ordered")
        return dataclasses.replace(state, replay_orders=state.replay_orders.set(requester, body))
    # ReplayRegistered: it settles the requester's order, or it is free.
    if str(body.replay_id) in state.replays:
        raise InvalidArgumentError(f"replay {body.replay_id} is already registered")
    status = FINISHED if body.end_exclusive == body.first else REGISTERED
    replays = _bounded(state.replays.set(str(body.replay_id), (requester, status)))
    if order is not None and order.replay_id == body.replay_id:
        if event_fields(order) != event_fields(body):
            raise InvalidArgumentError(f"replay {body.replay_id} is registered with another plan or price "
                                       "than it was ordered with")
        return dataclasses.replace(state, replay_orders=state.replay_orders.without(requester), replays=replays)
    if body.price_cby != 0 or expected != 0:
        raise InvalidArgumentError(f"replay {body.replay_id} is registered free, but no order paid its price "
                                   f"of {expected}")
    return dataclasses.replace(state, replays=replays)


def check_finish(state: StreamState, replay_id: object, requester: object, caller: str, digest: bytes,
                 outcome: object) -> tuple[str, str]:
    """The rules a replay's finish obeys (decided and folded alike): the stream registered the
    replay (for `requester`), the origin is its registration (`caller` the requester, the replay id
    derived from `digest`), the outcome is a terminal one, and it is not finished yet. Returns the
    replay's key in `StreamState.replays` and its status; InvalidArgumentError otherwise."""
    rid = _replay_id(replay_id)
    if outcome not in REPLAY_OUTCOMES:
        raise InvalidArgumentError(f"outcome must be one of {', '.join(REPLAY_OUTCOMES)}, got {outcome!r}")
    key = str(rid)
    known = state.replays.get(key)
    if known is None:
        raise InvalidArgumentError(f"stream {state.stream_id!r} has no replay {rid} to finish")
    if known[0] != requester or caller != requester:
        raise InvalidArgumentError(f"replay {rid} was requested by {known[0]}, not {requester!r}")
    if replay_id_for(digest) != rid:
        raise InvalidArgumentError(f"replay id {rid} is not derived from the origin's digest: the origin is not the "
                                   "replay's registration")
    if known[1] == FINISHED:
        raise InvalidArgumentError(f"replay {rid} is already finished")
    return key, known[1]


def _finished(state: StreamState, event: Event, body: ReplayFinished) -> StreamState:
    key, _status = check_finish(state, body.replay_id, body.requester, event.caller, event.digest,
                                body.outcome)
    return dataclasses.replace(state, replays=state.replays.set(key, (str(body.requester), FINISHED)))


def check_registration(state: StreamState, event: Event, body: ReplayOrdered | ReplayRegistered) -> int:
    """The rules a ReplayOrdered / ReplayRegistered body obeys (the ones `replay_control` decided
    by); returns the price the plan has at the stream's current per-event price."""
    requester = require_address(body.requester, "requester")
    if requester != event.caller:
        raise InvalidArgumentError("a replay is requested by the command's signer")
    if body.replay_id != replay_id_for(event.digest):
        raise InvalidArgumentError(f"replay id {body.replay_id!r} is not derived from the command's digest")
    check_namespace(body.namespace, state.stream_id, recorded=True)
    start, to = body.from_sequence, body.to_sequence
    first, end, end_id = body.first, body.end_exclusive, body.end_id
    if not (is_int(start) and is_int(first) and is_int(end)) or start < 1 or first != start or end < first:
        raise InvalidArgumentError(f"[{first!r}, {end!r}) is not the plan of a replay from {start!r}")
    if end > first and end > state.head + 1:
        raise InvalidArgumentError(f"the plan ends at {end}, past the stream head {state.head}")
    if to is None:
        if (end_id is None or not is_int(end_id) or end_id < 0 or end_id > state.head
                or (end > first and end_id != end - 1)):
            raise InvalidArgumentError(f"end_id {end_id!r} is not the last sequence of an open-ended replay")
    elif not is_int(to) or to < start or end > to or end_id is not None:
        raise InvalidArgumentError(f"the plan [{first}, {end}) does not fit the range [{start}, {to!r})")
    raw_filter = body.filter
    if raw_filter is not None and (
        not isinstance(raw_filter, str) or canonical_filter(parse_replay_filter(json.loads(raw_filter))) != raw_filter
    ):
        raise InvalidArgumentError("the filter is not a canonical CIP-7 filter")
    skip = body.skip
    if skip is not None and (not isinstance(skip, tuple | list) or len(skip) != 2 or parse_skip(skip) != tuple(skip)):
        raise InvalidArgumentError(f"skip {skip!r} is not [modulus, offset]")
    check_memo(body.memo_hex)
    price = _price(body.price_cby)
    plan_skip = None if skip is None else (skip[0], skip[1])
    expected = state.replay_price_per_event_cby * charged_events(first, end, plan_skip)
    if isinstance(body, ReplayOrdered) and price != expected:
        raise InvalidArgumentError(f"the order's price {price} is not {expected} (per-event price × charged events)")
    return expected


def check_namespace(value: object, stream_id: str, *, recorded: bool = False) -> str:
    """The requested namespace: the stream id; InvalidArgumentError otherwise.

    A namespace must name the stream it is requested on, and the stream's writer can check only its
    own id (a feed id is assigned later, by the registry, and the stream never learns it), so a new
    request names the stream id (the SDK resolves a feed id to it first). `recorded`: the fold of
    an event already decided, which also accepts the ``feed:<id>`` of events earlier releases
    recorded (never for a new request).
    """
    if isinstance(value, str) and (value == stream_id or (recorded and _FEED_NAMESPACE.fullmatch(value))):
        return value
    raise InvalidArgumentError(f"namespace must be the stream id {stream_id!r} (a replay's namespace names the "
                               f"stream it is requested on), got {value!r}")


def check_memo(value: object) -> str:
    """A memo: lowercase hex of at most 32 bytes; InvalidArgumentError otherwise."""
    if not isinstance(value, str) or len(value) > MAX_MEMO_HEX or not _HEX.fullmatch(value):
        raise InvalidArgumentError(f"memo_hex must be lowercase hex of at most {MAX_MEMO_HEX} characters "
                                   f"(32 bytes), got {value!r}")
    return value


def _price(value: object) -> int:
    if not is_int(value) or not 0 <= value <= MAX_REPLAY_PRICE:  # type: ignore[operator]
        raise InvalidArgumentError(f"a replay price is a whole number of CBY wei in 0..{MAX_REPLAY_PRICE}, "
                                   f"got {value!r}")
    return int(value)  # type: ignore[call-overload]


def _replay_id(value: object) -> int:
    if not is_int(value) or not 1 <= value <= MAX_REPLAY_ID:  # type: ignore[operator]
        raise InvalidArgumentError(f"replay_id must be a positive 63-bit integer, got {value!r}")
    return int(value)  # type: ignore[call-overload]



def _bounded(replays: FrozenMap[tuple[str, str]]) -> FrozenMap[tuple[str, str]]:
    """`replays` within `MAX_TRACKED_REPLAYS`, forgetting by content alone (module docstring)."""
    if len(replays) <= MAX_TRACKED_REPLAYS:
        return replays
    settled = [k for k, (_who, status) in replays.items() if status != REGISTERED]
    victim = min(settled or replays, key=int)
    return replays.without(victim)
