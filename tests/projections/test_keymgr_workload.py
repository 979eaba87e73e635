"""The key manager's tables after a real run: commands through the gateway and the stream/ledger
workers, read back through the projection's HTTP API, and rebuilt offline to the same digest.

Mints, transfers, a burn, account keys (one revoked), actor grants (one revoked), a paid stream, a
sponsored purchase, an idempotent repeat, a purchase the payer cannot afford and a key epoch
announcement. Afterwards the reads say what happened (balances, keys, grants, the sponsor holds no
entitlement, supply = sum of balances), the live keymgr digest equals the offline rebuild's, and a
projection worker killed with kill -9 and restarted folds its partitions back to the same digest.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
from api_calls import Caller, http, wait_for
from group_offsets import records_past_commit
from stack_fixture import start_stack

from watchtower.local.stack import ServiceSet
from watchtower.projections.rebuild import rebuild_keymgr_digest
from watchtower.protocol.ledger.common import SUPPLY_KEY, account_instance, paid_instance

pytestmark = pytest.mark.integration

KEY_EPOCH_BLOCKS = 10_000_000  # one key epoch spans the whole run, so "current" cannot move under the test
FEE, BPS = 100, 500


def _addr(caller: Caller) -> str:
    return "0x" + bytes(caller.key.verify_key).hex()


def _json(url: str) -> Any:
    status, body = http("GET", url)
    return body if status == 200 else None


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServiceSet, Caller]]:
    minter_key = nacl.signing.SigningKey.generate()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("WATCHTOWER_CBY_MINTER", "0x" + bytes(minter_key.verify_key).hex())  # the workers inherit it
        log_dir: Path = tmp_path_factory.mktemp("keymgr-workload")
        with start_stack(kafka_bootstrap, log_dir, partitions=3) as services:
            yield services, Caller(services.api_url, minter_key)


def _balance(api: str, caller: Caller) -> int:
    body = _json(f"{api}/v1/accounts/{_addr(caller)}")
    return -1 if body is None else int(body["balance_cby"])


def _wait_balance(api: str, caller: Caller, amount: int) -> None:
    wait_for(lambda: _balance(api, caller) == amount, what=f"balance {amount} of {_addr(caller)}")


def test_a_ledger_run_reads_back_as_it_happened_and_rebuilds_to_the_live_digest(
        stack: tuple[ServiceSet, Caller]) -> None:
    services, minter = stack
    api = services.api_url
    alice, bob, carol, dave, publisher = (Caller(api) for _ in range(5))

    # CBY: mints, transfers, a burn.
    minter.ok("mint_cby", SUPPLY_KEY, {"to": _addr(alice), "amount_cby": 10_000})
    minter.ok("mint_cby", SUPPLY_KEY, {"to": _addr(bob), "amount_cby": 5_000})
    _wait_balance(api, alice, 10_000)
    alice.ok("transfer_cby", account_instance(_addr(alice)), {"to": _addr(carol), "amount_cby": 40, "memo": "hi"})
    alice.ok("burn_cby", account_instance(_addr(alice)), {"amount_cby": 100})

    # Account keys (one revoked) and actor grants (one revoked).
    for n in (1, 2):
        alice.ok("register_account_key", account_instance(_addr(alice)),
                 {"scheme": "X25519", "public_key": bytes([n]) * 32})
    alice.ok("revoke_account_key", account_instance(_addr(alice)), {"account_key_id": 1})

    # A paid stream, a sponsored purchase, an idempotent repeat, an unaffordable purchase, an epoch.
    sid = f"paid-{uuid.uuid4().hex[:8]}"
    publisher.ok("create_stream", sid, {
        "publisher_key": bytes(nacl.signing.SigningKey.generate().verify_key), "access_mode": "PLATFORM_MANAGED",
        "paid_stream_config": {"fee_per_key_epoch_cby": FEE, "protocol_fee_bps": BPS,
                               "publisher_treasury": _addr(publisher), "key_epoch_blocks": KEY_EPOCH_BLOCKS}})
    for actor in (carol, dave):
        bob.ok("authorize_actor", account_instance(_addr(bob)), {"actor": _addr(actor), "stream_id": sid})
    bob.ok("revoke_actor", account_instance(_addr(bob)), {"actor": _addr(dave), "stream_id": sid})
    entitlement_url = f"{api}/v1/streams/{sid}/entitlements/{_addr(bob)}"
    current = wait_for(lambda: _json(entitlement_url), what="the paid stream's registration")["current_key_epoch"]
    receipt = alice.ok("acquire_epoch_access", paid_instance(sid), {
        "stream_id": sid, "target_key_epoch": current + 1, "beneficiary_account": _addr(bob)})
    price = 2 * FEE + 2 * FEE * BPS // 10_000
    assert (receipt["epochs_charged"], receipt["total_amount_cby"]) == (2, price)
    repeat = bob.ok("acquire_epoch_access", paid_instance(sid), {"stream_id": sid, "target_key_epoch": current})
    assert repeat["total_amount_cby"] == 0
    status, refusal = carol.call("acquire_epoch_access", paid_instance(sid),
                                 {"stream_id": sid, "target_key_epoch": current + 5})
    assert (status, refusal["error"]["code"]) == (402, "INSUFFICIENT_CBY_BALANCE")
    publisher.ok("announce_key_epoch", sid, {"key_epoch": current})

    # The reads say what happened, once every saga step is folded.
    supply_url = f"{api}/v1/cby/supply"
    supply = wait_for(lambda: (s := _json(supply_url)) and s["sum_of_balances_cby"] == s["total_supply_cby"]
                      and _balance(api, publisher) == 2 * FEE and s, what="the sagas to settle")
    assert supply == {"total_supply_cby": 14_900, "sum_of_balances_cby": 14_900, "accounts": 5}
    assert _balance(api, alice) == 10_000 - 40 - 100 - price
    assert (_balance(api, bob), _balance(api, carol)) == (5_000, 40)
    account = _json(f"{api}/v1/accounts/{_addr(alice)}")
    assert [(k["account_key_id"], k["status"]) for k in account["keys"]] == [(1, "REVOKED"), (2, "ACTIVE")]
    assert account["keys"][0]["revoked_at_block"] >= account["keys"][0]["registered_at_block"]
    grants = {g["actor"]: g for g in _json(f"{api}/v1/accounts/{_addr(bob)}")["authorizations"]}
    assert (grants[_addr(carol)]["status"], grants[_addr(dave)]["status"]) == ("ACTIVE", "REVOKED")
    assert _json(entitlement_url)["active_until_key_epoch"] == current + 1
    assert _json(f"{api}/v1/streams/{sid}/entitlements/{_addr(alice)}")["active_until_key_epoch"] is None
    assert _json(f"{api}/v1/streams/{sid}/key-epochs")["last_key_epoch"] == current

    # The live tables are what the log says.
    offline = rebuild_keymgr_digest(services.bootstrap, services.prefix)
    assert offline["counts"] == {"accounts": 5, "paid_streams": 1, "entitlements": 1, "supply": 1, "key_epochs": 1}
    assert offline["quarantined"]["count"] == 0
    wait_for(lambda: _json(f"{api}/v1/keymgr/digest") == offline, what="live keymgr digest == rebuild")

    # kill -9 and restart: the partitions are folded back the same, from the log (the group commits
    # no offset that a restart could start from).
    assert records_past_commit(services.bootstrap, f"wt-projections-{services.prefix}-g1") is None
    services.kill9("projection-p1")
    services.start_projection("p1b")
    services.wait_ready(api_url=api)
    assert _json(f"{api}/v1/keymgr/digest") == offline
