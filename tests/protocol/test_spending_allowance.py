"""CIP-7 delegated spending authority: an owner-signed, revocable allowance lets a named spender
sign purchases its grantor pays, capped in CBY wei, on one stream or any (pure rules)."""

from __future__ import annotations

import dataclasses

import pytest
from ledger_world import ALICE, BOB, CAROL, SID, World, addr

from watchtower.protocol.errors import MalformedRecordError, WatchtowerError
from watchtower.protocol.ledger.account_state import AccountState
from watchtower.protocol.ledger.accounts import evolve_account
from watchtower.protocol.ledger.common import PAID_PREFIX, account_instance
from watchtower.protocol.ledger.snapshots import decode_ledger, encode_ledger

PRICE = 1_000 + 1_000 * 250 // 10_000  # one epoch at the sample stream's fee and protocol fee


def code(answer: dict) -> str:
    assert not answer["ok"], answer
    assert isinstance(answer["error"], WatchtowerError)
    return answer["error"].code


def approve(world: World, cap: int, stream_id: str | None = SID, spender=BOB, signer=ALICE) -> dict:
    body = {"spender": addr(spender), "cap_cby": cap, **({"stream_id": stream_id} if stream_id else {})}
    return world.send(world.sign(signer, "approve_spending", account_instance(addr(signer)), body))


def revoke(world: World, stream_id: str | None = SID, spender=BOB, signer=ALICE) -> dict:
    body = {"spender": addr(spender), **({"stream_id": stream_id} if stream_id else {})}
    return world.send(world.sign(signer, "revoke_spending", account_instance(addr(signer)), body))


def buy(world: World, target: int, spender=BOB, payer=ALICE, beneficiary=BOB) -> dict:
    return world.acquire(spender, target, payer_account=addr(payer), beneficiary_account=addr(beneficiary))


def funded() -> World:
    world = World()
    world.register_paid_stream()
    assert world.mint(ALICE, 10 * PRICE)["ok"]
    return world


def test_a_spender_without_an_allowance_is_unauthorized() -> None:
    world = funded()
    answer = buy(world, 10)
    assert code(answer) == "UNAUTHORIZED"
    assert answer["error"].details == {"payer_account": addr(ALICE), "spender": addr(BOB)}
    assert world.balance(ALICE) == 10 * PRICE
    assert world.view().active_until(SID, addr(BOB)) is None


def test_a_spender_buys_within_its_cap_then_is_refused_past_it_and_after_revocation() -> None:
    """Failed before the fix: any payer other than the signer was UNAUTHORIZED."""
    world = funded()
    granted = approve(world, 2 * PRICE)
    assert granted["ok"]
    assert granted["result"]["cap_cby"] == str(2 * PRICE)
    receipt = buy(world, 10)["result"]  # within the cap
    assert (receipt["payer_account"], receipt["beneficiary_account"]) == (addr(ALICE), addr(BOB))
    assert receipt["total_amount_cby"] == PRICE
    assert world.balance(ALICE) == 9 * PRICE
    assert world.view().active_until(SID, addr(BOB)) == 10
    state = world.accounts[account_instance(addr(ALICE))]
    assert state.allowance(addr(BOB), SID).spent_cby == PRICE  # folded from the debit's record
    past = buy(world, 12)  # two more epochs: 2 * PRICE, with PRICE left
    assert code(past) == "UNAUTHORIZED"
    assert past["error"].details["remaining_cby"] == str(PRICE)
    assert past["error"].details["required_cby"] == str(2 * PRICE)
    assert world.balance(ALICE) == 9 * PRICE
    assert buy(world, 11)["ok"]  # exactly what is left
    assert world.accounts[account_instance(addr(ALICE))].allowance(addr(BOB), SID).remaining_cby == 0
    assert approve(world, 5 * PRICE)["ok"]  # approved again: a new cap, nothing spent under it
    assert revoke(world)["ok"]
    assert code(buy(world, 12)) == "UNAUTHORIZED"  # revoked
    assert code(revoke(world)) == "UNAUTHORIZED"  # nothing left to revoke
    assert world.balance(ALICE) == 8 * PRICE


def test_a_replayed_purchase_by_a_spender_is_answered_again_and_charged_once() -> None:
    world = funded()
    assert approve(world, 10 * PRICE)["ok"]
    cmd = world.sign(BOB, "acquire_epoch_access", PAID_PREFIX + SID,
                     {"stream_id": SID, "target_key_epoch": 10, "payer_account": addr(ALICE),
                      "beneficiary_account": addr(BOB)})
    first = world.send(cmd)
    again = world.send(cmd)
    assert first["ok"]
    assert again["ok"]
    assert again["result"]["duplicate"] is True
    assert world.balance(ALICE) == 9 * PRICE
    assert world.accounts[account_instance(addr(ALICE))].allowance(addr(BOB), SID).spent_cby == PRICE
    assert [e.type for e in world.events].count("CbyDebited") == 1


def test_an_any_stream_allowance_covers_every_stream_and_a_stream_allowance_only_its_own() -> None:
    world = funded()
    world.register_paid_stream("other-feed")
    assert approve(world, 10 * PRICE, stream_id="other-feed")["ok"]
    assert code(buy(world, 10)) == "UNAUTHORIZED"  # the allowance is for another stream
    assert approve(world, PRICE, stream_id=None)["ok"]  # any stream
    assert buy(world, 10)["ok"]
    state = world.accounts[account_instance(addr(ALICE))]
    assert state.allowance(addr(BOB), "").spent_cby == PRICE
    assert state.allowance(addr(BOB), "other-feed").spent_cby == 0


def test_the_allowance_is_the_payers_to_give() -> None:
    world = funded()
    assert approve(world, PRICE, spender=BOB, signer=CAROL)["ok"]  # Carol's allowance spends Carol's balance only
    assert code(buy(world, 10)) == "UNAUTHORIZED"
    for body in ({"spender": addr(ALICE), "cap_cby": 1}, {"spender": addr(BOB), "cap_cby": 0},
                 {"spender": addr(BOB), "cap_cby": "5"}, {"spender": "0x" + "ab" * 32, "cap_cby": 1},
                 {"spender": addr(BOB)}):
        cmd = world.sign(ALICE, "approve_spending", account_instance(addr(ALICE)), body)
        assert code(world.send(cmd)) == "INVALID_ARGUMENT", body


def test_a_forged_spend_past_the_cap_is_quarantined_and_allowances_survive_a_snapshot() -> None:
    world = funded()
    assert approve(world, PRICE)["ok"]
    assert buy(world, 10)["ok"]
    debit = next(e for e in world.events if e.type == "CbyDebited")
    state = world.accounts[account_instance(addr(ALICE))]
    with pytest.raises(MalformedRecordError):  # the same spend again: nothing left under the cap
        evolve_account(state, debit)
    with pytest.raises(MalformedRecordError):
        evolve_account(state, dataclasses.replace(debit, reply={"spent_by": addr(CAROL), "allowance_stream_id": SID}))
    part = encode_ledger("accounts", {state.instance: state})
    assert decode_ledger("accounts", part)[state.instance] == state
    assert AccountState.initial(state.instance).allowances == {}
