"""The paid-stream instance and the purchase saga (pure): DESIGN §7.6 order, fee split, sponsors."""

from __future__ import annotations

import dataclasses

import pytest
from ledger_world import ALICE, BOB, CAROL, DEPLOYMENT, HEIGHT, PAID_CONFIG, PUBLISHER, SID, TREASURY, World, addr

from watchtower.protocol.errors import MalformedRecordError
from watchtower.protocol.ledger.common import PaidCommand, paid_instance
from watchtower.protocol.ledger.paid_stream import PaidState, decide_paid, evolve_paid


def funded(amount: int = 10_000) -> World:
    world = World()
    world.register_paid_stream()
    world.mint(ALICE, amount)
    return world


def test_a_purchase_debits_the_payer_and_splits_the_fee_exactly_between_the_treasuries() -> None:
    world = funded()
    answer = world.acquire(ALICE, 12)  # current epoch 10: E = 9, epochs 10..12
    assert answer["result"] == {
        "stream_id": SID, "beneficiary_account": addr(ALICE), "payer_account": addr(ALICE), "from_key_epoch": 10,
        "to_key_epoch": 12, "epochs_charged": 3, "publisher_amount_cby": 3_000, "protocol_fee_cby": 75,
        "total_amount_cby": 3_075}
    assert (world.balance(ALICE), world.balance(PUBLISHER), world.balance(TREASURY)) == (6_925, 3_000, 75)
    assert world.view().active_until(SID, addr(ALICE)) == 12
    types = [e.type for e in world.events if e.stream_id == paid_instance(SID)]
    assert types == ["PaidStreamRegistered", "EpochAccessRequested", "EpochAccessPurchased"]
    purchased = next(e for e in world.events if e.type == "EpochAccessPurchased")
    assert purchased.body.purchase_id == purchased.digest.hex()  # the acquire command's digest


def test_a_sponsored_purchase_entitles_the_beneficiary_only() -> None:
    world = funded()
    answer = world.acquire(ALICE, 11, beneficiary_account=addr(BOB))
    assert answer["result"]["beneficiary_account"] == addr(BOB)
    view = world.view()
    assert view.active_until(SID, addr(BOB)) == 11
    assert view.active_until(SID, addr(ALICE)) is None
    assert world.balance(ALICE) == 10_000 - 2_050


def test_the_payer_signs_or_gives_the_signer_an_allowance() -> None:
    world = funded()
    answer = world.acquire(BOB, 11, payer_account=addr(ALICE))  # no allowance (tests/protocol/test_spending_allowance)
    assert answer["error"].code == "UNAUTHORIZED"
    assert world.balance(ALICE) == 10_000


def test_a_repeat_within_the_entitlement_is_idempotent_and_charges_nothing() -> None:
    world = funded()
    world.acquire(ALICE, 12)
    before = world.balance(ALICE)
    again = world.acquire(ALICE, 11)
    assert again["result"]["total_amount_cby"] == 0
    assert again["result"]["epochs_charged"] == 0
    assert world.balance(ALICE) == before
    assert world.events[-1].type == "EpochAccessIdempotent"


def test_insufficient_balance_fails_the_purchase_and_moves_nothing() -> None:
    world = funded(amount=100)
    cmd = world.sign(ALICE, "acquire_epoch_access", paid_instance(SID), {"stream_id": SID, "target_key_epoch": 12})
    answer = world.send(cmd)
    assert answer["error"].code == "INSUFFICIENT_CBY_BALANCE"
    assert answer["error"].details["required_cby"] == "3075"
    assert (world.balance(ALICE), world.balance(PUBLISHER), world.balance(TREASURY)) == (100, 0, 0)
    assert world.events[-1].type == "EpochAccessFailed"
    assert world.view().active_until(SID, addr(ALICE)) is None
    # the exact retry gets the same error; after funding, a new command buys
    assert world.send(cmd)["error"].code == "INSUFFICIENT_CBY_BALANCE"
    world.mint(ALICE, 3_000)
    assert world.acquire(ALICE, 12)["ok"]


def test_an_exact_retry_of_a_purchase_returns_the_receipt_without_charging_again() -> None:
    world = funded()
    cmd = world.sign(ALICE, "acquire_epoch_access", paid_instance(SID), {"stream_id": SID, "target_key_epoch": 12})
    first, again = world.send(cmd), world.send(cmd)
    assert again["result"] == {**first["result"], "duplicate": True}
    assert world.balance(ALICE) == 10_000 - 3_075


def test_the_rules_come_in_design_7_6_order() -> None:
    world = funded()
    assert world.acquire(ALICE, 9)["error"].code == "INVALID_TARGET_KEY_EPOCH"
    assert world.acquire(ALICE, 12, stream_id="open-feed")["error"].code == "NOT_PLATFORM_MANAGED_STREAM"
    world.register_paid_stream("min-3", {**PAID_CONFIG, "min_purchase_epochs": 3})
    assert world.acquire(ALICE, 11, stream_id="min-3")["error"].code == "MIN_PURCHASE_NOT_MET"
    assert world.acquire(ALICE, 12, stream_id="min-3")["ok"]
    # idempotence comes before the target check: an entitled past target is not INVALID_TARGET_KEY_EPOCH
    world.height += 600 * 5  # epoch 15
    assert world.acquire(ALICE, 11, stream_id="min-3")["result"]["total_amount_cby"] == 0


def test_a_lapsed_entitlement_pays_for_the_gap() -> None:
    world = funded(amount=100_000)
    world.acquire(ALICE, 11)
    world.height += 600 * 10  # epoch 20
    answer = world.acquire(ALICE, 21)
    assert (answer["result"]["from_key_epoch"], answer["result"]["epochs_charged"]) == (12, 10)


def test_a_purchase_in_flight_makes_another_for_the_same_beneficiary_not_ready() -> None:
    world = funded()
    state = world.paid[paid_instance(SID)]
    first = world.sign(ALICE, "acquire_epoch_access", paid_instance(SID), {"stream_id": SID, "target_key_epoch": 12})
    decision = decide_paid(state, first, block_height=HEIGHT, deployment=DEPLOYMENT)
    assert decision.reply is None
    assert decision.forwards[0].key == "acct:" + addr(ALICE)
    in_flight = evolve_paid(state, decision.events[0])
    second = world.sign(ALICE, "acquire_epoch_access", paid_instance(SID), {"stream_id": SID, "target_key_epoch": 13})
    for cmd in (first, second):
        with pytest.raises(Exception) as caught:
            decide_paid(in_flight, cmd, block_height=HEIGHT, deployment=DEPLOYMENT)
        assert getattr(caught.value, "code", None) == "NOT_READY"


def test_the_protocol_treasury_is_the_deployments_never_the_creators() -> None:
    world = World()
    world.register_paid_stream("own-treasury", {**PAID_CONFIG, "protocol_treasury": addr(CAROL)})
    assert world.view().paid_stream("own-treasury") is None  # refused at registration
    world.register_paid_stream()
    paid = world.view().paid_stream(SID)
    assert paid is not None
    assert paid.config.protocol_treasury == addr(TREASURY)


def test_renew_subscription_is_decided_as_a_purchase_for_the_caller() -> None:
    world = funded()
    renew = world.sign(ALICE, "renew_subscription", SID, {"target_key_epoch": 11, "account_key_id": 1})
    answer = world.send(PaidCommand(renew), paid_instance(SID))
    assert answer["result"]["beneficiary_account"] == addr(ALICE)
    assert world.view().active_until(SID, addr(ALICE)) == 11


def test_evolve_refuses_a_purchase_that_was_not_in_flight_or_is_mispriced() -> None:
    world = funded()
    world.acquire(ALICE, 12)
    requested = next(e for e in world.events if e.type == "EpochAccessRequested")
    purchased = next(e for e in world.events if e.type == "EpochAccessPurchased")
    registered = PaidState.initial(paid_instance(SID))
    registered = evolve_paid(registered, world.events[0])
    with pytest.raises(MalformedRecordError):
        evolve_paid(registered, purchased)  # nothing in flight
    mispriced = dataclasses.replace(requested.body, total_amount_cby=1)
    with pytest.raises(MalformedRecordError):
        evolve_paid(registered, dataclasses.replace(requested, body=mispriced))
    with pytest.raises(MalformedRecordError):
        evolve_paid(PaidState.initial(paid_instance(SID)), requested)  # not registered


# --- renew_subscription at the stream actor ------------------------------------------------------


def stream_with(paid: bool) -> tuple[World, object]:
    from watchtower.protocol.stream.actor import StreamState, decide, evolve

    world = World()
    body: dict = {"publisher_key": bytes(PUBLISHER.verify_key)}
    if paid:
        body |= {"access_mode": "PLATFORM_MANAGED", "paid_stream_config": PAID_CONFIG}
    state = StreamState.initial(SID)
    for cmd in (world.sign(PUBLISHER, "create_stream", SID, body), world.sign(ALICE, "subscribe", SID,
                                                                                 {"mode": "PULL"})):
        for event in decide(state, cmd, block_height=HEIGHT, deployment=DEPLOYMENT).events:
            state = evolve(state, event)
    return world, state


def renew(world: World, state: object, signer=ALICE, **body: object):
    from watchtower.protocol.stream.actor import decide

    cmd = world.sign(signer, "renew_subscription", SID, {"target_key_epoch": 12, **body})
    return decide(state, cmd, block_height=HEIGHT, deployment=DEPLOYMENT)  # type: ignore[arg-type]


def test_renew_on_an_open_stream_is_not_platform_managed_and_without_a_subscription_payment_required() -> None:
    from watchtower.protocol.errors import WatchtowerError

    for paid, signer, expected in ((False, ALICE, "NOT_PLATFORM_MANAGED_STREAM"), (True, BOB, "PAYMENT_REQUIRED")):
        world, state = stream_with(paid)
        with pytest.raises(WatchtowerError) as caught:
            renew(world, state, signer)
        assert caught.value.code == expected


def test_renew_records_a_new_account_key_hint_and_nothing_otherwise() -> None:
    world, state = stream_with(True)
    assert renew(world, state).events == ()
    decision = renew(world, state, account_key_id=2)
    assert [(e.type, e.body.account_key_id) for e in decision.events] == [("SubscriberUpdated", 2)]


def test_a_purchase_no_account_could_pay_never_states_a_balance_the_stream_does_not_know() -> None:
    """Failed before the fix: "the payer holds 9223372036854775807" (the placeholder), for a payer holding 0."""
    world = World()
    world.register_paid_stream()  # BOB holds no CBY at all
    answer = world.acquire(BOB, 2**63 - 1)
    err = answer["error"]
    assert err.code == "INSUFFICIENT_CBY_BALANCE"
    assert "holds" not in err.message
    assert "balance_cby" not in (err.details or {})
    assert int(err.details["required_cby"]) > int(err.details["max_balance_cby"]) == 2**63 - 1
    assert world.balance(BOB) == 0


def test_an_affordable_looking_purchase_is_refused_by_the_payers_account_with_its_real_balance() -> None:
    world = World()
    world.register_paid_stream()
    world.mint(BOB, 7)
    err = world.acquire(BOB, 12)["error"]
    assert err.code == "INSUFFICIENT_CBY_BALANCE"
    assert err.details["balance_cby"] == "7"
