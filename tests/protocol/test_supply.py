"""The supply instance: only the genesis minter mints, and the supply never exceeds 2**63-1."""

from __future__ import annotations

import dataclasses

import pytest
from ledger_world import ALICE, BOB, MINTER, World, addr

from watchtower.protocol.deployment import Deployment
from watchtower.protocol.errors import MalformedRecordError
from watchtower.protocol.ledger.common import MAX_CBY, SUPPLY_KEY
from watchtower.protocol.ledger.events import CbyBurned
from watchtower.protocol.ledger.supply import SupplyState, evolve_supply


def test_the_minter_mints_to_any_account_and_the_supply_follows() -> None:
    world = World()
    answer = world.mint(ALICE, 500)
    assert answer["result"]["total_supply_cby"] == 500
    world.mint(BOB, 7)
    assert (world.balance(ALICE), world.balance(BOB), world.supply.total_supply_cby) == (500, 7, 507)


def test_anyone_but_the_genesis_minter_is_unauthorized() -> None:
    world = World()
    cmd = world.sign(ALICE, "mint_cby", SUPPLY_KEY, {"to": addr(ALICE), "amount_cby": 5})
    answer = world.send(cmd)
    assert answer["error"].code == "UNAUTHORIZED"
    assert world.balance(ALICE) == 0


def test_a_deployment_without_a_minter_refuses_every_mint_naming_the_setting() -> None:
    world = World(deployment=Deployment(protocol_treasury=addr(BOB)))
    answer = world.mint(ALICE, 5)
    assert answer["error"].code == "UNAUTHORIZED"
    assert "WATCHTOWER_CBY_MINTER" in answer["error"].message


def test_the_total_supply_never_exceeds_two_to_the_63_minus_one() -> None:
    world = World()
    assert world.mint(ALICE, MAX_CBY)["ok"]
    answer = world.mint(BOB, 1)
    assert answer["error"].code == "INVALID_ARGUMENT"
    assert (world.balance(BOB), world.supply.total_supply_cby) == (0, MAX_CBY)


@pytest.mark.parametrize("amount", [0, -3, True, MAX_CBY + 1, 2.5])
def test_bad_mint_amounts_are_invalid_argument(amount: object) -> None:
    assert World().mint(ALICE, amount)["error"].code == "INVALID_ARGUMENT"  # type: ignore[arg-type]


def test_mint_must_be_sent_to_the_supply_key() -> None:
    world = World()
    cmd = world.sign(MINTER, "mint_cby", "acct:" + addr(ALICE), {"to": addr(ALICE), "amount_cby": 5})
    assert world.send(cmd, SUPPLY_KEY)["error"].code == "INVALID_ARGUMENT"


def test_evolve_refuses_a_total_that_does_not_follow() -> None:
    world = World()
    world.mint(ALICE, 5)
    minted = next(e for e in world.events if e.type == "CbyMinted")
    wrong_total = dataclasses.replace(minted.body, total_supply_cby=6)
    with pytest.raises(MalformedRecordError):
        evolve_supply(SupplyState(), dataclasses.replace(minted, body=wrong_total))
    burn = dataclasses.replace(minted, body=CbyBurned(account=addr(ALICE), amount_cby=6, total_supply_cby=-1))
    with pytest.raises(MalformedRecordError):
        evolve_supply(SupplyState(5), burn)
    with pytest.raises(MalformedRecordError):
        evolve_supply(SupplyState(), dataclasses.replace(minted, stream_id="acct:" + addr(ALICE)))


def test_the_minter_and_the_key_managers_public_key_come_from_the_environment() -> None:
    from watchtower.protocol.errors import WatchtowerError
    from watchtower.workers.deployment import ENV_CBY_MINTER, ENV_KEYMGR_PUBLIC_KEY, deployment_from_env

    got = deployment_from_env({ENV_CBY_MINTER: addr(MINTER), ENV_KEYMGR_PUBLIC_KEY: "ab" * 32})
    assert (got.cby_minter, got.keymgr_public_key) == (addr(MINTER), b"\xab" * 32)
    assert deployment_from_env({}).cby_minter is None
    for env, bad in ((ENV_CBY_MINTER, "minter"), (ENV_KEYMGR_PUBLIC_KEY, "zz"), (ENV_KEYMGR_PUBLIC_KEY, "ab")):
        with pytest.raises(WatchtowerError) as caught:
            deployment_from_env({env: bad})
        assert caught.value.code == "INVALID_ARGUMENT"
        assert env in caught.value.message
