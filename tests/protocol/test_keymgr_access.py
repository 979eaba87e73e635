"""The access rules the key manager and the projection share, over the view folded from events."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ledger_world import ALICE, BOB, CAROL, SID, World, addr

from watchtower.protocol.errors import MalformedRecordError, WatchtowerError
from watchtower.protocol.ledger.common import account_instance
from watchtower.protocol.ledger.keymgr_access import KeymgrState, check_decrypt_access, sealing_key


def entitled_world() -> World:
    world = World()
    world.register_paid_stream()
    world.mint(ALICE, 100_000)
    world.acquire(ALICE, 12)
    return world


def refused(view: KeymgrState, **kwargs: object) -> str:
    args = {"stream_id": SID, "beneficiary_account": addr(ALICE), "actor": addr(ALICE), "key_epoch": 11, **kwargs}
    try:
        check_decrypt_access(view, **args)  # type: ignore[arg-type]
    except WatchtowerError as err:
        return err.code
    return "OK"


def test_decrypt_access_in_cip7_order() -> None:
    world = entitled_world()
    view = world.view()
    assert refused(view) == "OK"
    assert refused(view, stream_id="open") == "NOT_PLATFORM_MANAGED_STREAM"
    assert refused(view, stream_id="open", actor=addr(BOB), key_epoch=99) == "NOT_PLATFORM_MANAGED_STREAM"
    assert refused(view, actor=addr(BOB)) == "ACTOR_NOT_AUTHORIZED_FOR_ACCOUNT"
    assert refused(view, actor=addr(BOB), key_epoch=13) == "ACTOR_NOT_AUTHORIZED_FOR_ACCOUNT"
    assert refused(view, key_epoch=13) == "ENTITLEMENT_REQUIRED"
    assert refused(view, beneficiary_account=addr(BOB), actor=addr(BOB)) == "ENTITLEMENT_REQUIRED"


def test_an_authorized_actor_may_decrypt_until_revoked() -> None:
    world = entitled_world()
    acct = account_instance(addr(ALICE))
    world.send(world.sign(ALICE, "authorize_actor", acct, {"actor": addr(CAROL), "stream_id": SID}))
    assert refused(world.view(), actor=addr(CAROL)) == "OK"
    assert refused(world.view(), actor=addr(CAROL), stream_id="other") == "NOT_PLATFORM_MANAGED_STREAM"
    world.send(world.sign(ALICE, "revoke_actor", acct, {"actor": addr(CAROL), "stream_id": SID}))
    assert refused(world.view(), actor=addr(CAROL)) == "ACTOR_NOT_AUTHORIZED_FOR_ACCOUNT"


def test_a_sponsor_gets_no_access_from_paying() -> None:
    world = World()
    world.register_paid_stream()
    world.mint(BOB, 100_000)
    world.acquire(BOB, 12, beneficiary_account=addr(ALICE))
    view = world.view()
    assert refused(view) == "OK"
    assert refused(view, beneficiary_account=addr(BOB), actor=addr(BOB)) == "ENTITLEMENT_REQUIRED"


def test_the_sealing_key_is_the_named_active_key_else_the_newest_active_one() -> None:
    world = World()
    acct = account_instance(addr(ALICE))
    with pytest.raises(WatchtowerError) as none:
        sealing_key(world.view(), addr(ALICE), None)
    assert none.value.code == "INVALID_ACCOUNT_KEY"
    for n in (1, 2, 3):
        world.send(world.sign(ALICE, "register_account_key", acct, {"scheme": "X25519", "public_key": bytes([n]) * 32}))
    world.send(world.sign(ALICE, "revoke_account_key", acct, {"account_key_id": 3}))
    view = world.view()
    assert sealing_key(view, addr(ALICE), None).account_key_id == 2
    assert sealing_key(view, addr(ALICE), 1).public_key == b"\x01" * 32
    for key_id, code in ((3, "KEY_REVOKED"), (9, "INVALID_ACCOUNT_KEY")):
        with pytest.raises(WatchtowerError) as caught:
            sealing_key(view, addr(ALICE), key_id)
        assert caught.value.code == code


def test_apply_refuses_a_forged_record_and_keeps_the_last_valid_state() -> None:
    world = entitled_world()
    view = world.view()
    balance = view.balances()[addr(ALICE)]
    debit = next(e for e in world.events if e.type == "CbyDebited")
    with pytest.raises(MalformedRecordError):
        view.apply(dataclasses.replace(debit, body=dataclasses.replace(debit.body, amount_cby=balance + 1)))
    assert view.balances()[addr(ALICE)] == balance
    minted = next(e for e in world.events if e.type == "CbyMinted")
    with pytest.raises(MalformedRecordError):
        view.apply(dataclasses.replace(minted, stream_id=account_instance(addr(ALICE))))
    assert view.supply.total_supply_cby == 100_000


# --- conservation --------------------------------------------------------------------------------

PEOPLE = [ALICE, BOB, CAROL]
step = st.one_of(
    st.tuples(st.just("mint"), st.sampled_from(PEOPLE), st.integers(1, 2**62)),
    st.tuples(st.just("transfer"), st.sampled_from(PEOPLE), st.sampled_from(PEOPLE), st.integers(-5, 2**62)),
    st.tuples(st.just("burn"), st.sampled_from(PEOPLE), st.integers(0, 2**62)),
    st.tuples(st.just("buy"), st.sampled_from(PEOPLE), st.sampled_from(PEOPLE), st.integers(8, 14)),
    st.tuples(st.just("later"), st.integers(1, 1_200)),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(step, max_size=40))
def test_any_sequence_of_mints_transfers_burns_and_purchases_conserves_value(steps: list[tuple]) -> None:
    world = World()
    world.register_paid_stream()
    minted = burned = 0
    for op, *args in steps:
        if op == "mint":
            to, amount = args
            if world.mint(to, amount)["ok"]:
                minted += amount
        elif op == "transfer":
            src, dst, amount = args
            world.send(world.sign(src, "transfer_cby", account_instance(addr(src)),
                                  {"to": addr(dst), "amount_cby": amount}))
        elif op == "burn":
            holder, amount = args
            if world.send(world.sign(holder, "burn_cby", account_instance(addr(holder)), {"amount_cby": amount}))["ok"]:
                burned += amount
        elif op == "buy":
            payer, beneficiary, target = args
            world.acquire(payer, target, beneficiary_account=addr(beneficiary))
        else:
            world.height += args[0]
        balances = [s.balance_cby for s in world.accounts.values()]
        assert all(b >= 0 for b in balances)
        assert sum(balances) == world.supply.total_supply_cby == minted - burned
    view = world.view()  # a rebuild from the log agrees with the live states
    assert sum(view.balances().values()) == view.supply.total_supply_cby == minted - burned
    assert world.supply.total_supply_cby <= 2**63 - 1


# --- snapshots -----------------------------------------------------------------------------------


def test_the_snapshot_codecs_give_back_exactly_the_folded_states() -> None:
    import cbor2

    from watchtower.protocol.ledger.snapshots import decode_ledger, encode_ledger
    from watchtower.protocol.stream.snapshot_cbor import SnapshotError

    world = entitled_world()
    acct = account_instance(addr(ALICE))
    world.send(world.sign(ALICE, "register_account_key", acct, {"scheme": "X25519", "public_key": b"\x01" * 32}))
    world.send(world.sign(ALICE, "authorize_actor", acct, {"actor": addr(CAROL), "stream_id": SID}))
    world.send(world.sign(ALICE, "revoke_actor", acct, {"actor": addr(CAROL), "stream_id": SID}))
    for kind, states in (("accounts", world.accounts), ("paid_streams", world.paid),
                         ("supply", {"cby:supply": world.supply})):
        data = encode_ledger(kind, states)
        assert encode_ledger(kind, decode_ledger(kind, data)) == data
        assert decode_ledger(kind, data) == states
    for bad in (b"", cbor2.dumps({"v": 2, "accounts": []}), cbor2.dumps({"v": 1, "accounts": [["k", {"a": 1}]]}),
                cbor2.dumps({"v": 1, "accounts": [["k", 5]]})):
        with pytest.raises(SnapshotError):
            decode_ledger("accounts", bad)
