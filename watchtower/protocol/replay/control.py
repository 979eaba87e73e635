"""ICRC-77 replay control, decided by the stream: register_replay, cancel_replay, set_replay_price.

`stream_actor.decide` has already checked the signature, the stream, the requester's order in
flight and replay protection (for these methods a bad signature or a replayed nonce is ICRC-77
Unauthorized, `as_unauthorized`). Then, for register_replay (first failure wins):

1. the stream exists, else PUBLICATION_NOT_FOUND;
2. the caller (the requester: deliveries are keyed by it) may read the stream (`authorize_requester`):
   its owner, an ACTIVE subscriber, or anyone on a PUBLIC stream. On a PRIVATE_ALLOWLIST stream an
   allowlisted caller without an ACTIVE subscription is SUBSCRIPTION_NOT_FOUND (subscribe first),
   anyone else UNAUTHORIZED_SUBSCRIBER;
3. the body, its config, the range (`replay_rules.plan_replay` at the current head), the filter
   and the skip, else IMPROPER_CONFIG;
4. the plan covers at most `Deployment.replay_max_range` sequences, else RANGE_TOO_LARGE;
5. price = per-event price × `charged_events`; a price above the caller's ``max_payment_cby`` (or
   without one) is PAYMENT_REQUIRED with the price in the details;
6. free: ReplayRegistered (the replay record is derived from it) and the reply; priced:
   ReplayOrdered and a `ReplayCharge` to ``acct:<requester>``, which answers with `ReplaySettled`
   (`settle_replay`): ReplayRegistered and the reply, or ReplayPaymentFailed and the error. While
   an order settles, the requester's commands on this stream are NOT_READY, so its replay
   protection record stays the order's and a retry gets the final answer exactly once.

cancel_replay (ICRC-77 CancelReplayError) is decided against the stream's registered replays
(`StreamState.replays`): an id the stream never registered is REPLAY_NOT_FOUND (NotFound), another
requester's replay UNAUTHORIZED (Unauthorized), a replay whose cancel was already requested, that
finished at registration (an empty plan) or that the replay worker finished CANNOT_CANCEL
(CannotCancel); a refused cancel writes nothing. An accepted one records ReplayCancelRequested,
which the replay fold honours at the replay's next slice (a replay the worker completed meanwhile
stays completed). set_replay_price is the owner's (UNAUTHORIZED otherwise) and records
ReplayPricingSet.

The replay worker tells the stream that a replay finished with a `ReplayFinished` forward on
``internal`` (accepted from there only), written in the transaction of the replay's terminal
record; `finish_replay` records it as the ReplayFinished event, which marks the replay finished.
The forward carries no signature of its own (anyone who can write ``internal`` on a plaintext
broker can forge one), so it must name a replay the stream registered, for its requester, with the
registration as its origin (`replay_fold.check_finish`); a repeat changes nothing.

Pure: no I/O, no clock (block heights are arguments).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, NamedTuple

from watchtower.protocol import events as ev
from watchtower.protocol.commands import CancelReplay, RegisterReplay, SetReplayPrice, claimed_namespace, read_body
from watchtower.protocol.enums import SubscriptionPolicy, SubscriptionStatus
from watchtower.protocol.errors import (
    CannotCancelError,
    ImproperConfigError,
    InvalidArgumentError,
    PaymentRequiredError,
    RangeTooLargeError,
    ReplayNotFoundError,
    SubscriptionNotFoundError,
    UnauthorizedError,
    UnauthorizedSubscriberError,
    WatchtowerError,
)
from watchtower.protocol.events import Skip
from watchtower.protocol.ledger.common import (
    MAX_CBY,
    REPLAY_METHODS,
    Origin,
    ReplayCharge,
    ReplayFinished,
    ReplaySettled,
    Routed,
    account_instance,
    make_event,
)
from watchtower.protocol.replay.fold import (
    CANCEL_REQUESTED,
    FINISHED,
    MAX_REPLAY_PRICE,
    REGISTERED,
    check_finish,
    check_memo,
    check_namespace,
)
from watchtower.protocol.replay.rules import (
    ICRC77_CAPABLE,
    canonical_filter,
    charged_events,
    icrc77_pricing,
    parse_replay_filter,
    parse_skip,
    plan_replay,
    replay_id_for,
)
from watchtower.protocol.signed_command import Command, Method
from watchtower.protocol.stream.state import (
    Event,
    StreamState,
)
from watchtower.protocol.validation import is_int

CONFIG_FIELDS: Final = frozenset({"filter", "skip", "max_payment_cby"})
ERROR_KEY: Final = "error"
"""A failed payment's caller record holds {"error": {code, message, ...}}: a retry gets it again."""


class ReplayDecision(NamedTuple):
    """Events, the reply (None: a forward's receiver answers), forwards, and an error the caller
    gets although the events are committed (a payment the account refused)."""

    events: tuple[Event, ...]
    reply: Mapping[str, Any] | None
    forwards: tuple[Routed, ...] = ()
    error: WatchtowerError | None = None


def as_unauthorized(cmd: Command, exc: WatchtowerError) -> WatchtowerError:
    """ICRC-77 has one code for an unauthenticated caller: a replay method's bad signature or
    replayed nonce becomes UNAUTHORIZED (the cause kept in the details); other methods keep theirs."""
    if cmd.method not in REPLAY_METHODS:
        return exc
    return UnauthorizedError(f"{cmd.method} refused: {exc.message}", details={**exc.details, "cause": exc.code})


def authorize_requester(state: StreamState, caller: str, namespace: str) -> None:
    """Step 2: may `caller` have `state`'s stream replayed to it (module docstring)?"""
    if caller == state.owner:
        return
    sub = state.subscriptions.get(caller)
    if sub is not None and sub.status is SubscriptionStatus.ACTIVE:
        return
    if state.policy is not SubscriptionPolicy.PRIVATE_ALLOWLIST:
        return
    if caller in state.allowlist:
        raise SubscriptionNotFoundError(
            f"stream {state.stream_id!r} is PRIVATE_ALLOWLIST and {caller} has no ACTIVE subscription to it; "
            "subscribe first, then request the replay"
        )
    raise UnauthorizedSubscriberError(
        f"stream {state.stream_id!r} is PRIVATE_ALLOWLIST and {caller} is not on its allowlist; ask the owner "
        "to allowlist_add it, subscribe, then request the replay",
        details={"namespace": namespace},
    )


def replay_price(per_event_cby: int, first: int, end_exclusive: int, skip: Skip | None) -> int:
    """What a replay of ``[first, end_exclusive)`` under `skip` costs at `per_event_cby`."""
    return per_event_cby * charged_events(first, end_exclusive, skip)


def register_replay(state: StreamState, cmd: Command, *, height: int, digest: bytes,
                    max_range: int) -> ReplayDecision:
    """Steps 2-6 of the module docstring (the stream exists)."""
    raw_namespace = claimed_namespace(cmd)
    authorize_requester(state, cmd.caller, raw_namespace if isinstance(raw_namespace, str) else state.stream_id)
    try:
        body = read_body(cmd, RegisterReplay)
        namespace = check_namespace(body.namespace, state.stream_id)
        memo = body.memo_hex
        memo_hex = check_memo(memo.lower() if isinstance(memo, str) else memo)
    except InvalidArgumentError as exc:
        raise ImproperConfigError(exc.message, details=exc.details) from None
    config = body.config or {}
    if not isinstance(config, Mapping) or not set(config) <= CONFIG_FIELDS:
        raise ImproperConfigError(f"config must be an object with at most {sorted(CONFIG_FIELDS)}, got {config!r}",
                                  details={"field": "config"})
    node = parse_replay_filter(config.get("filter"))
    skip = parse_skip(config.get("skip"))
    max_payment = config.get("max_payment_cby")
    if max_payment is not None and not (is_int(max_payment) and 0 <= max_payment <= MAX_CBY):
        raise ImproperConfigError(f"max_payment_cby must be null or a whole number of CBY wei in 0..{MAX_CBY}, "
                                  f"got {max_payment!r}", details={"field": "max_payment_cby"})
    start, to = body.from_, body.to
    for name, value in (("from", start), ("to", to)):
        if isinstance(value, int) and value > MAX_CBY:
            raise ImproperConfigError(f"{name} {value} is beyond the largest sequence", details={"field": name})
    replay_id = replay_id_for(digest)
    plan = plan_replay(replay_id=replay_id, from_sequence=start, to_sequence=to, head=state.head)
    events = plan.end_exclusive - plan.first
    if events > max_range:
        raise RangeTooLargeError(
            f"[{plan.first}, {plan.end_exclusive}) covers {events} sequences and this service replays at most "
            f"{max_range} per request; split it into ranges of at most {max_range}",
            details={"events": events, "max": max_range},
        )
    per_event = state.replay_price_per_event_cby
    charged = charged_events(plan.first, plan.end_exclusive, skip)
    price = per_event * charged
    if price > MAX_REPLAY_PRICE:
        raise RangeTooLargeError(f"{charged} events at {per_event} CBY wei each cost more than any balance can "
                                 "hold; request a shorter range or a sparser skip",
                                 details={"events": charged, "max": MAX_REPLAY_PRICE // per_event})
    if price > 0 and (max_payment is None or max_payment < price):
        raise PaymentRequiredError(
            f"this replay costs {price} CBY wei ({charged} events at {per_event} each) and the request allows "
            f"{'no payment' if max_payment is None else max_payment}; resend it with config.max_payment_cby ≥ "
            f"{price}", details={"price_cby": price, "per_event_cby": per_event, "events": charged},
        )
    order = ev.ReplayOrdered(
        stream_id=state.stream_id, replay_id=replay_id, namespace=namespace, requester=cmd.caller,
        from_sequence=start, to_sequence=to, first=plan.first, end_exclusive=plan.end_exclusive,
        end_id=plan.end_id, filter=canonical_filter(node), skip=skip,
        memo_hex=memo_hex, price_cby=price,
    )
    origin = Origin(cmd.caller, cmd.nonce, digest)
    if price == 0:
        registered = ev.ReplayRegistered(**ev.event_fields(order))
        reply = registration_reply(registered)
        return ReplayDecision((make_event(state.stream_id, height, origin, reply, registered),), reply)
    charge = ReplayCharge(replay_id, state.stream_id, cmd.caller, _owner(state), price, origin, cmd)
    event = make_event(state.stream_id, height, origin, {}, order)
    return ReplayDecision((event,), None, (Routed(account_instance(cmd.caller), charge, True),))


def registration_reply(plan: ev.ReplayOrdered | ev.ReplayRegistered) -> dict[str, Any]:
    """The answer to an accepted register_replay."""
    return {"replay_id": plan.replay_id, "stream_id": plan.stream_id, "first": plan.first,
            "end_exclusive": plan.end_exclusive, "end_id": plan.end_id, "price_cby": plan.price_cby}


def settle_replay(state: StreamState, settled: ReplaySettled, *, height: int) -> ReplayDecision:
    """The requester's account paid (ReplayRegistered + reply) or refused (ReplayPaymentFailed + error)."""
    order = state.replay_orders.get(settled.requester)
    if settled.stream_id != state.stream_id or order is None or order.replay_id != settled.replay_id:
        raise InvalidArgumentError(f"replay {settled.replay_id} of {settled.requester} is not being paid for on "
                                   f"stream {state.stream_id!r}")
    if settled.error is None:
        reply = registration_reply(order)
        registered = ev.ReplayRegistered(**ev.event_fields(order))
        return ReplayDecision((make_event(state.stream_id, height, settled.origin, reply, registered),), reply)
    error = WatchtowerError.from_dict(settled.error)
    body = ev.ReplayPaymentFailed(stream_id=state.stream_id, replay_id=settled.replay_id,
                                  requester=settled.requester, price_cby=order.price_cby, code=error.code,
                                  message=error.message)
    event = make_event(state.stream_id, height, settled.origin, {ERROR_KEY: error.to_dict()}, body)
    return ReplayDecision((event,), None, error=error)


def cancel_replay(state: StreamState, cmd: Command, *, height: int, digest: bytes) -> ReplayDecision:
    """Body: replay_id. Refused per ICRC-77 CancelReplayError (module docstring), else recorded for
    the replay fold."""
    replay_id = read_body(cmd, CancelReplay).replay_id
    known = state.replays.get(str(replay_id))
    if known is None:
        raise ReplayNotFoundError(f"stream {state.stream_id!r} has no replay {replay_id}; list your replays "
                                  "(GET /v1/replays?requester=...) to find its id", details={"replay_id": replay_id})
    requester, status = known
    if requester != cmd.caller:
        raise UnauthorizedError(f"replay {replay_id} was requested by {requester}; only its requester may cancel it",
                                details={"replay_id": replay_id})
    if status != REGISTERED:
        why = ("its cancel was already requested and it stops at its next slice" if status == CANCEL_REQUESTED
               else "it has finished and delivers nothing more")
        raise CannotCancelError(f"replay {replay_id} can no longer be cancelled: {why}; read its outcome with "
                                f"`watchtower replay status {replay_id}` (GET /v1/replays/{replay_id})",
                                details={"replay_id": replay_id, "status": status})
    reply = {"replay_id": replay_id, "cancel": "requested"}
    body = ev.ReplayCancelRequested(stream_id=state.stream_id, replay_id=replay_id, requester=cmd.caller)
    origin = Origin(cmd.caller, cmd.nonce, digest)
    return ReplayDecision((make_event(state.stream_id, height, origin, reply, body),), reply)


def finish_replay(state: StreamState, finished: ReplayFinished, *, height: int) -> ReplayDecision:
    """The replay worker's ReplayFinished forward (module docstring): the ReplayFinished event, or
    nothing for a replay already finished; REPLAY_NOT_FOUND for a replay the stream does not track,
    INVALID_ARGUMENT for a finish that is not the registered replay's."""
    if finished.stream_id != state.stream_id:
        raise InvalidArgumentError(f"the finish of replay {finished.replay_id} names stream {finished.stream_id!r}, "
                                   f"not {state.stream_id!r}")
    known = state.replays.get(str(finished.replay_id))
    if known is None:
        raise ReplayNotFoundError(f"stream {state.stream_id!r} has no replay {finished.replay_id} to finish; only the "
                                  "replay worker reports a replay's end", details={"replay_id": finished.replay_id})
    if known[1] == FINISHED:
        return ReplayDecision((), None)  # a repeat changes nothing
    check_finish(state, finished.replay_id, finished.requester, finished.origin.caller, finished.origin.digest,
                 finished.outcome)
    body = ev.ReplayFinished(stream_id=state.stream_id, replay_id=finished.replay_id, requester=finished.requester,
                             outcome=finished.outcome)
    return ReplayDecision((make_event(state.stream_id, height, finished.origin, {}, body),), None)


def set_replay_price(state: StreamState, cmd: Command, *, height: int, digest: bytes) -> ReplayDecision:
    """Body: price_per_event_cby (0..2**63-1 CBY wei). Owner only, checked before the body."""
    if cmd.caller != state.owner:
        raise UnauthorizedError(f"set_replay_price is owner-only and {cmd.caller} is not the owner of stream "
                                f"{state.stream_id!r}; sign it with the owner's key")
    price = read_body(cmd, SetReplayPrice).price_per_event_cby
    reply = {"price_per_event_cby": price, **pricing(price)}
    body = ev.ReplayPricingSet(stream_id=state.stream_id, price_per_event_cby=price)
    origin = Origin(cmd.caller, cmd.nonce, digest)
    return ReplayDecision((make_event(state.stream_id, height, origin, reply, body),), reply)


def pricing(per_event_cby: int) -> dict[str, Any]:
    """ICRC-77 ``icrc77:capable`` and ``icrc77:pricing`` of a stream, as the stream's JSON shows them."""
    return {"icrc77_capable": ICRC77_CAPABLE, "icrc77_pricing": icrc77_pricing(per_event_cby)}


def decide_replay(state: StreamState, cmd: Command, *, height: int, digest: bytes,
                  max_range: int) -> ReplayDecision:
    """One of the three replay methods on a created stream."""
    if cmd.method == Method.REGISTER_REPLAY:
        return register_replay(state, cmd, height=height, digest=digest, max_range=max_range)
    if cmd.method == Method.CANCEL_REPLAY:
        return cancel_replay(state, cmd, height=height, digest=digest)
    return set_replay_price(state, cmd, height=height, digest=digest)


def _owner(state: StreamState) -> str:
    if state.owner is None:  # decide checked the stream exists; this narrows the type
        raise InvalidArgumentError(f"stream {state.stream_id!r} has no owner")
    return state.owner
