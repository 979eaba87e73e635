"""ICRC-77 replay control on the stream: every register_replay error from a request built to cause it,
owner-only pricing, the replay record of a free replay, the priced path, and a hostile log."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import nacl.signing
import pytest
from hypothesis import given
from hypothesis import strategies as st
from protocol_strategies import PROPERTY

from watchtower.protocol import events as ev
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.deployment import Deployment
from watchtower.protocol.errors import (
    InsufficientCbyBalanceError,
    MalformedRecordError,
    WatchtowerError,
)
from watchtower.protocol.ledger.account_commands import decide_account
from watchtower.protocol.ledger.account_state import AccountState
from watchtower.protocol.ledger.accounts import evolve_account
from watchtower.protocol.ledger.common import (
    CbyCredit,
    Origin,
    ReplayCharge,
    ReplayFinished,
    ReplaySettled,
    account_instance,
)
from watchtower.protocol.replay.control import finish_replay, settle_replay
from watchtower.protocol.replay.records import ReplayCancelRequest, ReplayRegistration
from watchtower.protocol.replay.rules import charged_events, plan_replay, replay_id_for
from watchtower.protocol.signed_command import Command, command_digest, sign_command
from watchtower.protocol.stream.actor import Decision, Event, StreamState, decide, evolve, state_digest
from watchtower.protocol.stream.reads import get_head
from watchtower.protocol.stream.snapshots import decode_streams, encode_streams
from watchtower.protocol.stream.views import apply_event, head_view, new_tables
from watchtower.schemas.replay_records import decode_replay_record
from watchtower.schemas.wire import replay_record_for

SID = "ticks"
OWNER = nacl.signing.SigningKey(b"\x21" * 32)
ALICE = nacl.signing.SigningKey(b"\x22" * 32)
BOB = nacl.signing.SigningKey(b"\x23" * 32)
PUBLISHER = nacl.signing.SigningKey(b"\x24" * 32)
DEPLOYMENT = Deployment(replay_max_range=1_000)
HEIGHT = 50


def addr(key: nacl.signing.SigningKey) -> str:
    return address_from_public_key(bytes(key.verify_key))


def request(frm: int = 1, to: Any = None, **config: Any) -> dict[str, Any]:
    return {"namespace": SID, "from": frm, "to": to,
            "config": {"filter": None, "skip": None, "max_payment_cby": None, **config}, "memo_hex": ""}


class Stream:
    """One stream driven through decide/evolve as the host drives it."""

    def __init__(self) -> None:
        self.state = StreamState.initial(SID)
        self.events: list[Event] = []

    def command(self, key: nacl.signing.SigningKey, method: str, body: Any, nonce: int | None = None) -> Command:
        record = self.state.callers.get(addr(key))
        n = (1 if record is None else record.last_nonce + 1) if nonce is None else nonce
        return sign_command(key, method, SID, n, body)

    def submit(self, cmd: Command) -> Decision:
        decision = decide(self.state, cmd, block_height=HEIGHT, deployment=DEPLOYMENT)
        self.fold(decision.events)
        return decision

    def fold(self, events: Any) -> None:
        for event in events:
            self.state = evolve(self.state, event)
            self.events.append(event)

    def do(self, key: nacl.signing.SigningKey, method: str, body: Any) -> Decision:
        return self.submit(self.command(key, method, body))

    def rejects(self, code: str, cmd: Command) -> WatchtowerError:
        before = self.state
        with pytest.raises(WatchtowerError) as info:
            self.submit(cmd)
        assert info.value.code == code, info.value
        assert self.state is before  # a refusal records nothing
        return info.value


def stream(messages: int = 10, *, policy: str = "PUBLIC", price: int = 0) -> Stream:
    s = Stream()
    s.do(OWNER, "create_stream", {"publisher_key": bytes(PUBLISHER.verify_key), "subscription_policy": policy})
    # The head is all replay control reads of the messages: publish events without the payloads.
    for _ in range(messages):
        s.state = dataclasses.replace(s.state, head=s.state.head + 1)
    if price:
        s.do(OWNER, "set_replay_price", {"price_per_event_cby": price})
    return s


# --- Every ICRC-77 error, from a request built to cause it ---------------------------------------


def test_a_replay_of_a_stream_never_created_is_publication_not_found() -> None:
    s = Stream()
    err = s.rejects("PUBLICATION_NOT_FOUND", s.command(ALICE, "register_replay", request()))
    assert err.details["namespace"] == SID


def test_a_replay_signed_with_another_key_is_unauthorized() -> None:
    s = stream()
    good = s.command(ALICE, "register_replay", request())
    forged = dataclasses.replace(good, signature=OWNER.sign(good.signing_bytes).signature)
    err = s.rejects("UNAUTHORIZED", forged)
    assert err.details["cause"] == "INVALID_SIGNATURE"


def test_a_replay_with_a_used_nonce_is_unauthorized() -> None:
    s = stream()
    s.do(ALICE, "register_replay", request(1, 3))
    err = s.rejects("UNAUTHORIZED", s.command(ALICE, "register_replay", request(2, 4), nonce=1))
    assert err.details["cause"] == "NONCE_REPLAYED"


def test_a_stranger_to_a_private_stream_is_unauthorized_subscriber() -> None:
    s = stream(policy="PRIVATE_ALLOWLIST")
    cmd = s.command(ALICE, "register_replay", {**request(), "namespace": "feed:4"})
    err = s.rejects("UNAUTHORIZED_SUBSCRIBER", cmd)
    assert err.details == {"namespace": "feed:4"}
    assert "allowlist_add" in err.message


def test_an_allowlisted_caller_without_a_subscription_is_subscription_not_found() -> None:
    s = stream(policy="PRIVATE_ALLOWLIST")
    s.do(OWNER, "allowlist_add", {"address": addr(ALICE)})
    err = s.rejects("SUBSCRIPTION_NOT_FOUND", s.command(ALICE, "register_replay", request()))
    assert "subscribe first" in err.message
    s.do(ALICE, "subscribe", {"mode": "PULL"})
    assert s.do(ALICE, "register_replay", request()).reply["price_cby"] == 0


def test_the_owner_and_anyone_on_a_public_stream_may_request_a_replay() -> None:
    private = stream(policy="PRIVATE_ALLOWLIST")
    assert private.do(OWNER, "register_replay", request()).events[0].type == "ReplayRegistered"
    public = stream()
    assert public.do(BOB, "register_replay", request()).events[0].type == "ReplayRegistered"


@pytest.mark.parametrize(("body", "why"), [
    (request(5, 2), "reversed"),
    (request(0, 2), "≥ 1"),
    (request(1, "5"), "reversed"),
    (request(filter={"field": "kind", "op": "regex", "value": "x"}), "unsupported replay filter"),
    (request(filter={}), "unsupported replay filter"),
    (request(filter="{not json"), "not JSON"),
    (request(filter='"kind"'), "JSON string"),
    (request(filter='{"field":"kind","op":"regex","value":"x"}'), "unsupported replay filter"),
    (request(skip=[0]), "skip must be"),
    (request(skip=[3, 3]), "skip must be"),
    (request(skip="every other"), "skip must be"),
    ({**request(), "memo_hex": "xyz"}, "memo_hex"),
    ({**request(), "memo_hex": "ab" * 33}, "memo_hex"),
    ({**request(), "namespace": "other-stream"}, "namespace"),
    ({**request(), "namespace": "feed:99999"}, "namespace"),  # accepted (and recorded) before the fix
    ({**request(), "namespace": "feed:1"}, "namespace"),  # the stream cannot tell its feed id: name the stream
    ({**request(), "config": {"priority": 1}}, "config"),
    (request(max_payment_cby=-1), "max_payment_cby"),
    ({**request(), "colour": "red"}, "colour"),
    ({"namespace": SID}, "from"),
])
def test_a_malformed_request_is_improper_config(body: dict[str, Any], why: str) -> None:
    s = stream()
    err = s.rejects("IMPROPER_CONFIG", s.command(ALICE, "register_replay", body))
    assert why in err.message


def test_a_filter_sent_as_text_is_icrc77s_opt_text_and_selects_as_its_json_does() -> None:
    """ICRC-77 minimal profile: filter #Opt(#Text) (failed before the fix: a text filter was ImproperConfig)."""
    spec = {"field": "kind", "op": "eq", "value": "trade"}
    as_text, as_object = stream(), stream()
    text = as_text.do(ALICE, "register_replay", request(filter=json.dumps(spec))).events[0].body
    obj = as_object.do(ALICE, "register_replay", request(filter=spec)).events[0].body
    assert text.filter == obj.filter == '{"field":"kind","op":"eq","value":"trade"}'


def test_a_range_wider_than_the_deployment_allows_is_range_too_large() -> None:
    s = stream(2_000)
    err = s.rejects("RANGE_TOO_LARGE", s.command(ALICE, "register_replay", request(1, 1_002)))
    assert err.details == {"events": 1_001, "max": 1_000}
    assert s.do(ALICE, "register_replay", request(1, 1_001)).reply["end_exclusive"] == 1_001


def test_a_priced_replay_without_enough_payment_is_payment_required_with_the_price() -> None:
    s = stream(10, price=7)
    err = s.rejects("PAYMENT_REQUIRED", s.command(ALICE, "register_replay", request(1, 11, skip=[2])))
    assert err.details == {"price_cby": 35, "per_event_cby": 7, "events": 5}
    assert "max_payment_cby ≥ 35" in err.message
    err = s.rejects("PAYMENT_REQUIRED", s.command(ALICE, "register_replay", request(1, 11, max_payment_cby=69)))
    assert err.details["price_cby"] == 70


@PROPERTY
@given(per_event=st.integers(1, 10**6), frm=st.integers(1, 60), span=st.integers(0, 60),
       skip=st.one_of(st.none(), st.integers(1, 7).flatmap(lambda m: st.tuples(st.just(m), st.integers(0, m - 1)))))
def test_the_price_is_the_per_event_price_times_the_charged_events(per_event: int, frm: int, span: int,
                                                                   skip: tuple[int, int] | None) -> None:
    s = stream(50, price=per_event)
    to = frm + span
    plan = plan_replay(replay_id=1, from_sequence=frm, to_sequence=to, head=50)
    price = per_event * charged_events(plan.first, plan.end_exclusive, skip)
    body = request(frm, to, skip=None if skip is None else list(skip), max_payment_cby=price)
    decision = s.do(ALICE, "register_replay", body)
    assert decision.events[0].body.price_cby == price
    assert decision.events[0].type == ("ReplayOrdered" if price else "ReplayRegistered")
    if price:
        (charge,) = decision.forwards
        assert charge.forward.price_cby == price  # type: ignore[union-attr]


# --- Pricing, cancel, and the replay records ------------------------------------------------------


def test_only_the_owner_sets_the_replay_price() -> None:
    s = stream()
    err = s.rejects("UNAUTHORIZED", s.command(ALICE, "set_replay_price", {"price_per_event_cby": 1}))
    assert "owner" in err.message
    s.rejects("INVALID_ARGUMENT", s.command(OWNER, "set_replay_price", {"price_per_event_cby": -1}))
    s.rejects("INVALID_ARGUMENT", s.command(OWNER, "set_replay_price", {"price_per_event_cby": 2**63}))
    reply = s.do(OWNER, "set_replay_price", {"price_per_event_cby": 4}).reply
    assert reply["icrc77_pricing"] == {"perEvent": 4, "currency": "CBY"}
    assert reply["icrc77_capable"] is True
    assert s.state.replay_price_per_event_cby == 4


def test_the_stream_view_shows_the_icrc77_pricing() -> None:
    """ICRC-77's own key names, icrc77:capable and icrc77:pricing (failed before: only icrc77_capable/_pricing)."""
    s = stream(0, price=9)
    tables = new_tables()
    for event in s.events:
        apply_event(tables, event)
    view = head_view(tables["streams"][SID], None)
    assert view["replay_price_per_event_cby"] == 9
    assert view["icrc77:pricing"] == view["icrc77_pricing"] == {"perEvent": 9, "currency": "CBY"}
    assert view["icrc77:capable"] is True
    assert view["icrc77_capable"] is True
    assert get_head(s.state)["icrc77:capable"] is True


@pytest.mark.parametrize("to", [7, None, 500])
def test_the_record_of_a_free_replay_decodes_and_follows_its_plan(to: int | None) -> None:
    s = stream(20)
    cmd = s.command(ALICE, "register_replay", {**request(3, to, filter={"field": "tags.symbol", "op": "eq",
                                                                          "value": "BTC"}, skip=[2, 1]),
                                                "memo_hex": "C0FFEE"})
    decision = s.submit(cmd)
    (event,) = decision.events
    raw = replay_record_for(event)
    assert raw is not None
    record = decode_replay_record(raw)
    assert isinstance(record, ReplayRegistration)
    plan = plan_replay(replay_id=record.replay_id, from_sequence=3, to_sequence=to, head=20)
    assert record.replay_id == replay_id_for(command_digest(cmd))
    assert (record.first, record.end_exclusive, record.end_id) == (plan.first, plan.end_exclusive, plan.end_id)
    assert (record.from_sequence, record.to_sequence) == (3, to)
    assert record.requester == record.caller == addr(ALICE)
    assert (record.skip, record.memo_hex, record.price_cby) == ([2, 1], "c0ffee", 0)
    assert json.loads(record.filter or "") == {"field": "tags.symbol", "op": "eq", "value": "BTC"}
    assert decision.reply == {"replay_id": plan.replay_id, "stream_id": SID, "first": plan.first,
                              "end_exclusive": plan.end_exclusive, "end_id": plan.end_id, "price_cby": 0}
    assert ("icrc77:replay:end_id" in dict(plan.headers())) is (to is None)
    # A retry is a duplicate: the same answer and no second record.
    retry = s.submit(cmd)
    assert retry.events == ()
    assert retry.reply == {**decision.reply, "duplicate": True}


def test_a_cancel_by_the_requester_is_recorded_for_the_replay_fold() -> None:
    s = stream(20)
    replay_id = s.do(BOB, "register_replay", request(1, 10)).reply["replay_id"]
    decision = s.do(BOB, "cancel_replay", {"replay_id": replay_id})
    assert decision.reply == {"replay_id": replay_id, "cancel": "requested"}
    record = decode_replay_record(replay_record_for(decision.events[0]))
    assert isinstance(record, ReplayCancelRequest)
    assert (record.replay_id, record.requester, record.stream_id) == (replay_id, addr(BOB), SID)
    s.rejects("INVALID_ARGUMENT", s.command(BOB, "cancel_replay", {"replay_id": 0}))
    unknown = Stream()
    unknown.rejects("REPLAY_NOT_FOUND", unknown.command(BOB, "cancel_replay", {"replay_id": 77}))


def test_a_cancel_answers_icrc77_cancel_replay_errors_and_writes_nothing_when_refused() -> None:
    s = stream(20)
    mine = s.do(BOB, "register_replay", request(1, 10)).reply["replay_id"]
    empty = s.do(ALICE, "register_replay", request(5, 5)).reply["replay_id"]  # nothing to deliver: finished
    err = s.rejects("REPLAY_NOT_FOUND", s.command(BOB, "cancel_replay", {"replay_id": 77}))
    assert err.ICRC77_VARIANT == "NotFound"
    assert err.details == {"replay_id": 77}
    err = s.rejects("UNAUTHORIZED", s.command(ALICE, "cancel_replay", {"replay_id": mine}))
    assert err.ICRC77_VARIANT == "Unauthorized"
    assert "only its requester" in err.message
    err = s.rejects("CANNOT_CANCEL", s.command(ALICE, "cancel_replay", {"replay_id": empty}))
    assert err.ICRC77_VARIANT == "CannotCancel"
    assert s.do(BOB, "cancel_replay", {"replay_id": mine}).reply == {"replay_id": mine, "cancel": "requested"}
    err = s.rejects("CANNOT_CANCEL", s.command(BOB, "cancel_replay", {"replay_id": mine}))
    assert err.details["status"] == "cancel_requested"
    # The replays survive a snapshot and are part of the state's digest.
    assert decode_streams(encode_streams({SID: s.state}))[SID] == s.state
    assert state_digest(s.state) != state_digest(dataclasses.replace(s.state, replays=type(s.state.replays)()))


# --- The replay worker's word that a replay finished ------------------------------------------------


def registered(s: Stream, key: nacl.signing.SigningKey = BOB, frm: int = 1, to: int = 10) -> tuple[int, Origin]:
    """Register a replay signed by `key`: its id and origin (what the worker's ReplayFinished names)."""
    cmd = s.command(key, "register_replay", request(frm, to))
    replay_id = s.submit(cmd).reply["replay_id"]
    return replay_id, Origin.of(cmd)


def finish(s: Stream, finished: ReplayFinished) -> tuple[Event, ...]:
    events = finish_replay(s.state, finished, height=HEIGHT + 1).events
    s.fold(events)
    return events


def test_a_replay_the_worker_finished_cannot_be_cancelled() -> None:
    s = stream(20)
    replay_id, origin = registered(s)
    assert s.state.replays[str(replay_id)] == (addr(BOB), "registered")
    bob_before = s.state.callers[addr(BOB)]
    (event,) = finish(s, ReplayFinished(replay_id, SID, addr(BOB), "completed", origin))
    assert event.type == "ReplayFinished"
    assert event.body == ev.ReplayFinished(stream_id=SID, replay_id=replay_id, requester=addr(BOB), outcome="completed")
    assert s.state.replays[str(replay_id)] == (addr(BOB), "finished")
    assert s.state.callers[addr(BOB)] == bob_before  # the requester's replay protection does not move
    err = s.rejects("CANNOT_CANCEL", s.command(BOB, "cancel_replay", {"replay_id": replay_id}))
    assert err.ICRC77_VARIANT == "CannotCancel"
    assert err.details == {"replay_id": replay_id, "status": "finished"}
    assert "it has finished" in err.message
    assert f"watchtower replay status {replay_id}" in err.message  # what to do instead
    # A repeat of the finish changes nothing and writes nothing.
    assert finish(s, ReplayFinished(replay_id, SID, addr(BOB), "completed", origin)) == ()
    # It survives a snapshot.
    assert decode_streams(encode_streams({SID: s.state}))[SID] == s.state


def test_a_replay_canceled_by_the_worker_is_finished_too() -> None:
    s = stream(20)
    replay_id, origin = registered(s)
    s.do(BOB, "cancel_replay", {"replay_id": replay_id})
    finish(s, ReplayFinished(replay_id, SID, addr(BOB), "canceled", origin))
    assert s.state.replays[str(replay_id)] == (addr(BOB), "finished")
    err = s.rejects("CANNOT_CANCEL", s.command(BOB, "cancel_replay", {"replay_id": replay_id}))
    assert err.details["status"] == "finished"


def test_a_finish_must_name_a_registered_replay_of_its_requester_with_its_registration_as_origin() -> None:
    s = stream(20)
    replay_id, origin = registered(s)
    other_id, other_origin = registered(s, ALICE, 2, 5)
    unknown = ReplayFinished(77, SID, addr(BOB), "completed", origin)
    with pytest.raises(WatchtowerError) as info:
        finish_replay(s.state, unknown, height=HEIGHT)
    assert info.value.code == "REPLAY_NOT_FOUND"
    for forged in (
        ReplayFinished(replay_id, SID, addr(ALICE), "completed", origin),  # another requester
        ReplayFinished(replay_id, SID, addr(BOB), "completed", other_origin),  # another registration's origin
        ReplayFinished(replay_id, SID, addr(BOB), "completed", Origin(addr(BOB), origin.nonce, b"\x01" * 32)),
        ReplayFinished(other_id, SID, addr(ALICE), "completed", origin),  # Bob's origin for Alice's replay
        ReplayFinished(replay_id, "other", addr(BOB), "completed", origin),
    ):
        with pytest.raises(WatchtowerError) as info:
            finish_replay(s.state, forged, height=HEIGHT)
        assert info.value.code == "INVALID_ARGUMENT", forged
    with pytest.raises(WatchtowerError):
        ReplayFinished(replay_id, SID, addr(BOB), "done", origin)  # not a terminal outcome
    # Nothing changed: both replays can still be cancelled.
    assert s.do(BOB, "cancel_replay", {"replay_id": replay_id}).reply == {"replay_id": replay_id,
                                                                         "cancel": "requested"}
    assert s.do(ALICE, "cancel_replay", {"replay_id": other_id}).reply["cancel"] == "requested"


def _finished_event(replay_id: int, requester: str, origin: Origin, **body: Any) -> Event:
    fields = {"stream_id": SID, "replay_id": replay_id, "requester": requester, "outcome": "completed", **body}
    return Event(stream_id=SID, block_height=HEIGHT, caller=origin.caller, nonce=origin.nonce, digest=origin.digest,
                 reply={}, body=ev.ReplayFinished(**fields))


def test_a_forged_replay_finished_event_is_quarantined_and_changes_nothing() -> None:
    s = stream(20)
    replay_id, origin = registered(s)
    _other_id, alice_origin = registered(s, ALICE, 2, 5)
    forged = [
        _finished_event(77, addr(BOB), origin),  # never registered
        _finished_event(replay_id, addr(ALICE), alice_origin),  # not Alice's replay
        _finished_event(replay_id, addr(BOB), Origin(addr(BOB), origin.nonce, b"\x02" * 32)),  # not its registration
        _finished_event(replay_id, addr(BOB), alice_origin),  # caller is not the requester
        _finished_event(replay_id, addr(BOB), origin, outcome="done"),
        _finished_event(replay_id, addr(BOB), origin, stream_id="other"),
    ]
    for event in forged:
        with pytest.raises(MalformedRecordError):
            evolve(s.state, event)
    # The genuine one folds once; a second is quarantined.
    s.fold([_finished_event(replay_id, addr(BOB), origin)])
    with pytest.raises(MalformedRecordError):
        evolve(s.state, _finished_event(replay_id, addr(BOB), origin))


# --- The priced path ------------------------------------------------------------------------------


def order(s: Stream, key: nacl.signing.SigningKey = ALICE) -> tuple[Command, ReplayCharge]:
    cmd = s.command(key, "register_replay", request(1, 11, max_payment_cby=1_000))
    decision = s.submit(cmd)
    assert decision.answers is False  # the settlement answers
    (routed,) = decision.forwards
    assert routed.key == account_instance(addr(key))
    assert routed.answers
    assert isinstance(routed.forward, ReplayCharge)
    return cmd, routed.forward


def test_a_paid_replay_registers_once_its_account_paid() -> None:
    s = stream(10, price=3)
    cmd, charge = order(s)
    assert (charge.price_cby, charge.owner, charge.requester) == (30, addr(OWNER), addr(ALICE))
    # While it settles, the requester's retry and its other commands wait.
    s.rejects("NOT_READY", cmd)
    s.rejects("NOT_READY", s.command(ALICE, "subscribe", {"mode": "PULL"}))
    settled = settle_replay(s.state, ReplaySettled(charge.replay_id, SID, addr(ALICE), None, charge.origin),
                            height=HEIGHT)
    s.fold(settled.events)
    assert settled.reply == {"replay_id": charge.replay_id, "stream_id": SID, "first": 1, "end_exclusive": 11,
                             "end_id": None, "price_cby": 30}
    record = decode_replay_record(replay_record_for(settled.events[0]))
    assert isinstance(record, ReplayRegistration)
    assert record.price_cby == 30
    assert not s.state.replay_orders
    assert s.submit(cmd).reply == {**settled.reply, "duplicate": True}
    # A second settlement of the same replay is refused: nothing is in flight any more.
    with pytest.raises(WatchtowerError):
        settle_replay(s.state, ReplaySettled(charge.replay_id, SID, addr(ALICE), None, charge.origin), height=HEIGHT)


def test_a_refused_payment_fails_the_replay_and_a_retry_gets_the_same_error() -> None:
    s = stream(10, price=3)
    cmd, charge = order(s)
    refusal = InsufficientCbyBalanceError("fund it")
    settled = settle_replay(s.state, ReplaySettled(charge.replay_id, SID, addr(ALICE), refusal.to_dict(),
                                                   charge.origin), height=HEIGHT)
    assert settled.error is not None
    assert settled.error.code == "INSUFFICIENT_CBY_BALANCE"
    assert settled.events[0].type == "ReplayPaymentFailed"
    assert replay_record_for(settled.events[0]) is None
    s.fold(settled.events)
    s.rejects("INSUFFICIENT_CBY_BALANCE", cmd)
    s.do(ALICE, "subscribe", {"mode": "PULL"})  # no longer waiting


def test_the_account_pays_a_replay_charge_exactly_or_refuses_it_without_moving_anything() -> None:
    origin = Origin(addr(ALICE), 3, b"\x09" * 32)
    charge = ReplayCharge(42, SID, addr(ALICE), addr(OWNER), 30, origin)
    poor = AccountState.initial(account_instance(addr(ALICE)))
    refused = decide_account(poor, charge, block_height=HEIGHT)
    assert refused.events == ()
    (back,) = refused.forwards
    assert back.key == SID
    assert isinstance(back.forward, ReplaySettled)
    assert back.forward.error is not None
    assert back.forward.error["code"] == "INSUFFICIENT_CBY_BALANCE"
    rich = dataclasses.replace(poor, balance_cby=31)
    paid = decide_account(rich, charge, block_height=HEIGHT)
    (debit,) = paid.events
    assert debit.body == ev.CbyDebited(account=addr(ALICE), amount_cby=30, reason="replay", ref="42",
                                    counterparty=addr(OWNER))
    assert evolve_account(rich, debit).balance_cby == 1
    credit, settled = paid.forwards
    assert credit.key == account_instance(addr(OWNER))
    assert not credit.answers
    assert isinstance(credit.forward, CbyCredit)
    assert (credit.forward.amount_cby, credit.forward.reason) == (30, "replay")
    assert settled.key == SID
    assert settled.answers
    assert isinstance(settled.forward, ReplaySettled)
    assert settled.forward.error is None


def test_a_state_with_an_order_in_flight_survives_the_snapshot() -> None:
    s = stream(10, price=3)
    order(s)
    assert s.state.replay_orders
    back = decode_streams(encode_streams({SID: s.state}))[SID]
    assert back == s.state
    assert state_digest(back) == state_digest(s.state)


# --- A hostile log ---------------------------------------------------------------------------------


def _forge(s: Stream, type_: str, body: dict[str, Any], *, caller: str | None = None,
           digest: bytes = b"\x05" * 32) -> Event:
    fields = {**body, "skip": tuple(body["skip"])} if body.get("skip") is not None else body
    return Event(stream_id=SID, block_height=HEIGHT, caller=caller or addr(ALICE), nonce=9,
                 digest=digest, reply={}, body=ev.EVENT_BODIES[type_](**fields))


def _registration(s: Stream, **changes: Any) -> dict[str, Any]:
    body = {"stream_id": SID, "replay_id": replay_id_for(b"\x05" * 32), "namespace": SID, "requester": addr(ALICE),
            "from_sequence": 1, "to_sequence": 5, "first": 1, "end_exclusive": 5, "end_id": None, "filter": None,
            "skip": None, "memo_hex": "", "price_cby": 0}
    return {**body, **changes}


HOSTILE = [
    ("ReplayPricingSet", {"stream_id": SID, "price_per_event_cby": -1}, "owner"),
    ("ReplayPricingSet", {"stream_id": SID, "price_per_event_cby": 5}, None),  # not signed by the owner
    ("ReplayPricingSet", {"stream_id": "other", "price_per_event_cby": 5}, "owner"),
    ("ReplayRegistered", {"stream_id": "other"}, None),
    ("ReplayRegistered", {"price_cby": 40}, None),  # a price no order paid
    ("ReplayRegistered", {"replay_id": 12345}, None),  # not the command's id
    ("ReplayRegistered", {"to_sequence": 50, "end_exclusive": 50}, None),  # past the head
    ("ReplayRegistered", {"requester": "0x" + "ab" * 32}, None),  # not its signer
    ("ReplayRegistered", {"skip": [0, 1]}, None),
    ("ReplayRegistered", {"filter": "{\"all\":[]}"}, None),
    ("ReplayOrdered", {"price_cby": 3}, None),  # a stream without a price orders nothing
    ("ReplayPaymentFailed", {"stream_id": SID, "replay_id": 1, "requester": "", "price_cby": 1, "code": "X",
                             "message": ""}, None),
]


@pytest.mark.parametrize(("type_", "changes", "signer"), HOSTILE)
def test_a_forged_replay_event_is_quarantined_by_the_writer_and_the_projection(
        type_: str, changes: dict[str, Any], signer: str | None) -> None:
    s = stream(10)
    if type_ in ("ReplayRegistered", "ReplayOrdered"):
        body = _registration(s, **changes)
    else:
        body = {k: (addr(ALICE) if v == "" else v) for k, v in changes.items()}
    forged = _forge(s, type_, body, caller=addr(OWNER) if signer == "owner" else None)
    with pytest.raises(MalformedRecordError):
        evolve(s.state, forged)
    tables = new_tables()
    for event in s.events:
        apply_event(tables, event)
    before = json.dumps(tables["streams"], sort_keys=True, default=str)
    with pytest.raises(WatchtowerError) as info:
        apply_event(tables, forged)
    assert info.value.code == "MALFORMED_RECORD"
    assert json.dumps(tables["streams"], sort_keys=True, default=str) == before
    # The genuine registration of the same shape folds.
    evolve(s.state, _forge(s, "ReplayRegistered", _registration(s)))


def test_a_replay_recorded_under_feed_namespace_by_an_earlier_release_still_folds() -> None:
    s = stream(10)
    evolve(s.state, _forge(s, "ReplayRegistered", _registration(s, namespace="feed:3")))
    with pytest.raises(MalformedRecordError):
        evolve(s.state, _forge(s, "ReplayRegistered", _registration(s, namespace="other-stream")))


def test_a_stream_tracks_a_bounded_number_of_replays_and_forgets_by_content(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registrations are free on a public feed and the tracked replays go into every snapshot: past
    the bound one entry is forgotten, chosen by content alone (a settled one first, then the smallest
    id), so the live state, a restored snapshot and a rebuild forget the same one."""
    from watchtower.protocol.replay import fold as replay_fold

    monkeypatch.setattr(replay_fold, "MAX_TRACKED_REPLAYS", 5)
    s = stream()
    ids = [int(s.do(ALICE, "register_replay", request(1, 3)).reply["replay_id"]) for _ in range(5)]
    assert len(s.state.replays) == 5
    cancelled = ids[3]
    s.do(ALICE, "cancel_replay", {"replay_id": cancelled})
    restored = decode_streams(encode_streams({SID: s.state}))[SID]
    assert state_digest(restored) == state_digest(s.state)
    newest = int(s.do(BOB, "register_replay", request(1, 3)).reply["replay_id"])
    assert set(s.state.replays) == {str(i) for i in [*ids, newest] if i != cancelled}  # the settled one went
    for _ in range(2):
        s.do(BOB, "register_replay", request(1, 3))
    assert len(s.state.replays) == 5
    # Replaying the same events from the restored snapshot forgets exactly the same entries.
    again = restored
    for event in s.events[s.events.index(next(e for e in s.events if e.type == "ReplayCancelRequested")) + 1:]:
        again = evolve(again, event)
    assert set(again.replays) == set(s.state.replays)
    assert state_digest(again) == state_digest(s.state)
    forgotten = next(i for i in ids if str(i) not in s.state.replays and i != cancelled)
    s.rejects("REPLAY_NOT_FOUND", s.command(ALICE, "cancel_replay", {"replay_id": forgotten}))
