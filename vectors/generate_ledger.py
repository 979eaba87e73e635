"""Regenerate ``ledger.json``: account conformance vectors (docs/ledger.md).

    .venv/bin/python vectors/generate_ledger.py > vectors/ledger.json

Vector type ``account_ledger``: signed commands decided in order by the Stream Key Manager's
instances at one block height (`watchtower.protocol.ledger.run`), each step's answer (its reply,
or ``{"error": CODE}``), then balances, actor authorizations, spending allowances and
entitlements. The cases cover CIP-7's own actors (created by the account's signed create_actor,
authorized on every stream without a grant until revoked), delegated spending authority (an
owner-signed allowance, capped in CBY wei, per stream or on any, revocable; a replayed purchase
charged once) and the codes of the two revocations.

Keys come from fixed seeds and ed25519 signatures are deterministic, so the output is stable;
``tests/protocol/test_ledger_vectors.py`` checks the committed file equals it.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import nacl.signing

from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.ledger.billing import first_height_of_epoch
from watchtower.protocol.ledger.common import PAID_PREFIX, SUPPLY_KEY, account_instance
from watchtower.protocol.signed_command import sign_command


def _key(n: int) -> nacl.signing.SigningKey:
    return nacl.signing.SigningKey(bytes([n]) * 32)


def _addr(key: nacl.signing.SigningKey) -> str:
    return address_from_public_key(bytes(key.verify_key))


MINTER, TREASURY, PUBLISHER, ALICE, BOB, ACTOR = (_key(n) for n in (0x71, 0x72, 0x73, 0x74, 0x75, 0x76))
STREAM = "paid-signals"
HEIGHT = first_height_of_epoch(10, 600)  # key epoch 10
PAID = {"fee_per_key_epoch_cby": 1_000, "protocol_fee_bps": 250, "publisher_treasury": _addr(PUBLISHER),
        "key_epoch_blocks": 600, "min_purchase_epochs": 1}
PRICE = 1_000 + 1_000 * 250 // 10_000
DEPLOYMENT = {"protocol_treasury": _addr(TREASURY), "cby_minter": _addr(MINTER)}


class Script:
    """Steps of one vector, each command signed with the next nonce."""

    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []
        self.nonce = 100

    def command(self, signer: nacl.signing.SigningKey, method: str, instance: str, body: dict[str, Any]) -> dict:
        self.nonce += 1
        step = {"command": sign_command(signer, method, instance, self.nonce, body).to_dict()}
        self.steps.append(step)
        return step

    def account(self, signer: nacl.signing.SigningKey, method: str, body: dict[str, Any]) -> dict:
        return self.command(signer, method, account_instance(_addr(signer)), body)

    def paid_stream(self) -> None:
        self.nonce += 1
        create = sign_command(PUBLISHER, "create_stream", STREAM, self.nonce, {
            "publisher_key": bytes(PUBLISHER.verify_key), "access_mode": "PLATFORM_MANAGED",
            "paid_stream_config": PAID})
        self.steps.append({"paid_command": create.to_dict()})

    def mint(self, to: nacl.signing.SigningKey, amount: int) -> None:
        self.command(MINTER, "mint_cby", SUPPLY_KEY, {"to": _addr(to), "amount_cby": amount})

    def acquire(self, spender: nacl.signing.SigningKey, target: int, payer: nacl.signing.SigningKey) -> dict:
        return self.command(spender, "acquire_epoch_access", PAID_PREFIX + STREAM,
                            {"stream_id": STREAM, "target_key_epoch": target, "payer_account": _addr(payer)})


def _vector(vid: str, script: Script, checks: dict[str, Any]) -> dict[str, Any]:
    from watchtower.protocol.conformance import compute

    full = {"balances": [], "actor_authorized": [], "allowances": [], "entitlements": [], **checks}
    inp = {"deployment": DEPLOYMENT, "block_height": HEIGHT, "steps": script.steps, "checks": full}
    return {"id": vid, "type": "account_ledger", "input": inp, "expect": compute("account_ledger", inp)}


def _authorized(*streams: str) -> list[dict[str, str]]:
    return [{"account": _addr(ALICE), "actor": _addr(ACTOR), "stream_id": s} for s in streams]


def own_actor_vectors() -> list[dict[str, Any]]:
    created = Script()
    created.account(ALICE, "create_actor", {"actor": _addr(ACTOR)})
    revoked_here = Script()
    revoked_here.steps = list(created.steps)
    revoked_here.nonce = created.nonce
    revoked_here.account(ALICE, "revoke_actor", {"actor": _addr(ACTOR), "stream_id": "feed-1"})
    everywhere = Script()
    everywhere.steps, everywhere.nonce = list(revoked_here.steps), revoked_here.nonce
    everywhere.account(ALICE, "revoke_actor", {"actor": _addr(ACTOR), "all_streams": True})
    everywhere.account(ALICE, "revoke_actor", {"actor": _addr(ACTOR), "all_streams": True})
    never = Script()
    never.account(ALICE, "create_actor", {"actor": "0x" + "ab" * 32})
    never.account(ALICE, "revoke_actor", {"actor": _addr(ACTOR), "stream_id": "feed-1"})
    never.account(ALICE, "revoke_account_key", {"account_key_id": 1})
    return [
        _vector("own-actor-created-is-authorized-on-every-stream", created,
                {"actor_authorized": _authorized("feed-1", "feed-2")}),
        _vector("own-actor-revoked-on-one-stream", revoked_here,
                {"actor_authorized": _authorized("feed-1", "feed-2")}),
        _vector("own-actor-revoked-everywhere-then-nothing-to-revoke", everywhere,
                {"actor_authorized": _authorized("feed-1", "feed-2")}),
        _vector("create-an-actor-that-cannot-exist-and-revoke-what-was-never-given", never,
                {"actor_authorized": _authorized("feed-1")}),
    ]


def spending_vectors() -> list[dict[str, Any]]:
    checks = {"balances": [_addr(ALICE), _addr(BOB)],
              "allowances": [{"account": _addr(ALICE), "spender": _addr(BOB), "stream_id": STREAM},
                             {"account": _addr(ALICE), "spender": _addr(BOB), "stream_id": ""}],
              "entitlements": [{"stream_id": STREAM, "account": _addr(BOB)}]}

    def funded() -> Script:
        script = Script()
        script.paid_stream()
        script.mint(ALICE, 10 * PRICE)
        return script

    none = funded()
    none.acquire(BOB, 10, payer=ALICE)
    capped = funded()
    capped.account(ALICE, "approve_spending", {"spender": _addr(BOB), "cap_cby": 2 * PRICE, "stream_id": STREAM})
    bought = capped.acquire(BOB, 10, payer=ALICE)
    capped.steps.append(bought)  # the same signed purchase again: answered again, charged once
    capped.acquire(BOB, 12, payer=ALICE)  # two more epochs: past the cap
    capped.acquire(BOB, 11, payer=ALICE)  # exactly what is left
    revoked = funded()
    revoked.account(ALICE, "approve_spending", {"spender": _addr(BOB), "cap_cby": 5 * PRICE})
    revoked.acquire(BOB, 10, payer=ALICE)
    revoked.account(ALICE, "revoke_spending", {"spender": _addr(BOB)})
    revoked.acquire(BOB, 11, payer=ALICE)
    revoked.account(ALICE, "revoke_spending", {"spender": _addr(BOB)})
    return [
        _vector("spender-without-an-allowance-is-unauthorized", none, checks),
        _vector("spender-within-its-cap-replayed-then-past-it", capped, checks),
        _vector("any-stream-allowance-spent-then-revoked", revoked, checks),
    ]


def document() -> dict[str, Any]:
    """The whole vectors file."""
    return {"format": "watchtower-vectors/1", "vectors": own_actor_vectors() + spending_vectors()}


if __name__ == "__main__":
    json.dump(document(), sys.stdout, indent=1)
    sys.stdout.write("\n")
