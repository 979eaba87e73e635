"""stream_decrypt and sealed epoch keys through the key manager, against real workers deciding the ledger.

Entitlements, authorizations and account keys are made by signed commands the workers decide
(mint, acquire_epoch_access, register/revoke_account_key, authorize/revoke_actor); the key
manager folds the committed events and refuses or serves with the CIP-7 codes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import nacl.public
import nacl.signing
import pytest
from api_calls import Caller
from keymgr_harness import KeymgrClient, addr, keymgr_stack
from waiting import wait_until

from watchtower.local.stack import ServiceSet
from watchtower.protocol.confidential.envelope import decrypt_with_content_key, envelope_aad, unwrap_epoch_key
from watchtower.protocol.constants import MAX_UINT32
from watchtower.topics.catalogue import topic_name
from watchtower.topics.reader import read_committed

pytestmark = pytest.mark.integration

OWNER = nacl.signing.SigningKey(b"\x31" * 32)
MINTER = nacl.signing.SigningKey(b"\x32" * 32)
ALICE = nacl.signing.SigningKey(b"\x33" * 32)  # the entitled beneficiary
SPONSOR = nacl.signing.SigningKey(b"\x34" * 32)  # pays for Alice
ACTOR = nacl.signing.SigningKey(b"\x35" * 32)  # Alice's authorized actor
BOB = nacl.signing.SigningKey(b"\x36" * 32)  # nobody paid for Bob
ALICE_X25519 = nacl.public.PrivateKey(b"\x41" * 32)
ALICE_X25519_2 = nacl.public.PrivateKey(b"\x42" * 32)
SID = "signals.paid"
EPOCH = 1
UNTIL = 2
PLAINTEXT = b'{"signal": "buy", "px": 64000}'
CONTEXT = {"sequence": 1, "kind": "signal", "content_type": "application/json"}


class World:
    def __init__(self, services: ServiceSet) -> None:
        self.services = services
        self.callers = {k: Caller(services.api_url, k) for k in (OWNER, MINTER, ALICE, SPONSOR, ACTOR, BOB)}
        self.envelope = b""

    def ok(self, key: nacl.signing.SigningKey, method: str, instance: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.callers[key].ok(method, instance, body)

    def keymgr(self, key: nacl.signing.SigningKey, method: str, body: dict[str, Any]) -> tuple[int, Any]:
        return KeymgrClient(self.services.keymgr_url or "", key).call(method, SID, body)

    def decrypt(
        self, key: nacl.signing.SigningKey, beneficiary: nacl.signing.SigningKey, key_epoch: int = EPOCH
    ) -> tuple[int, Any]:
        aad = envelope_aad(stream_id=SID, key_epoch=EPOCH, **CONTEXT)
        return self.keymgr(
            key,
            "stream_decrypt",
            {"beneficiary_account": addr(beneficiary), "key_epoch": key_epoch, "aad": aad, "envelope": self.envelope},
        )

    def keys(
        self,
        key: nacl.signing.SigningKey,
        account: nacl.signing.SigningKey,
        first: int = 0,
        last: int = UNTIL,
        **extra: Any,
    ) -> tuple[int, Any]:
        return self.keymgr(
            key, "fetch_epoch_keys", {"account": addr(account), "from_key_epoch": first, "to_key_epoch": last, **extra}
        )


@pytest.fixture(scope="module")
def world(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with keymgr_stack(kafka_bootstrap, tmp_path_factory.mktemp("keymgr-access"), minter=addr(MINTER)) as running:
        w = World(running[0])
        # key_epoch_blocks at its maximum keeps the current key epoch at 0 for the whole test.
        paid = {
            "fee_per_key_epoch_cby": 10,
            "protocol_fee_bps": 100,
            "publisher_treasury": addr(OWNER),
            "key_epoch_blocks": MAX_UINT32,
        }
        w.ok(
            OWNER,
            "create_stream",
            SID,
            {"publisher_key": bytes(OWNER.verify_key), "access_mode": "PLATFORM_MANAGED", "paid_stream_config": paid},
        )
        w.ok(MINTER, "mint_cby", "cby:supply", {"to": addr(SPONSOR), "amount_cby": 1_000})
        receipt = _until_registered(
            w,
            lambda: w.ok(
                SPONSOR,
                "acquire_epoch_access",
                f"paid:{SID}",
                {"stream_id": SID, "target_key_epoch": UNTIL, "beneficiary_account": addr(ALICE)},
            ),
        )
        assert (receipt["beneficiary_account"], receipt["payer_account"]) == (addr(ALICE), addr(SPONSOR))
        assert receipt["to_key_epoch"] == UNTIL
        w.ok(
            ALICE,
            "register_account_key",
            f"acct:{addr(ALICE)}",
            {"scheme": "X25519", "public_key": bytes(ALICE_X25519.public_key)},
        )
        w.ok(ALICE, "authorize_actor", f"acct:{addr(ALICE)}", {"actor": addr(ACTOR), "stream_id": SID})
        aad = envelope_aad(stream_id=SID, key_epoch=EPOCH, **CONTEXT)
        status, sealed = w.keymgr(OWNER, "stream_encrypt", {"key_epoch": EPOCH, "aad": aad, "plaintext": PLAINTEXT})
        assert status == 200, sealed
        w.envelope = bytes.fromhex(sealed["envelope_hex"])
        yield w


def _until_registered(w: World, call: Any) -> dict[str, Any]:
    """The paid stream is registered by a forward from the stream's writer; until then NOT_READY."""
    result: dict[str, Any] = wait_until("the paid stream to be registered", call, timeout_s=60, every_s=0.3,
                                        retry_on=(AssertionError,))
    return result


def _code(reply: tuple[int, Any]) -> str:
    status, body = reply
    assert status != 200, body
    return str(body["error"]["code"])


def test_a_non_entitled_account_gets_entitlement_required_on_decrypt_and_on_epoch_keys(world: World) -> None:
    assert _code(world.decrypt(BOB, BOB)) == "ENTITLEMENT_REQUIRED"
    assert _code(world.keys(BOB, BOB)) == "ENTITLEMENT_REQUIRED"
    # Alice is entitled up to UNTIL only: the next epoch is refused too, for her and her actor.
    assert _code(world.keys(ALICE, ALICE, UNTIL, UNTIL + 1)) == "ENTITLEMENT_REQUIRED"
    assert _code(world.decrypt(ACTOR, ALICE, key_epoch=UNTIL + 1)) == "ENTITLEMENT_REQUIRED"


def test_a_sponsor_who_paid_gets_no_key(world: World) -> None:
    assert _code(world.keys(SPONSOR, SPONSOR)) == "ENTITLEMENT_REQUIRED"
    assert _code(world.decrypt(SPONSOR, SPONSOR)) == "ENTITLEMENT_REQUIRED"
    # Naming the beneficiary does not help: the sponsor is not Alice's actor.
    assert _code(world.keys(SPONSOR, ALICE)) == "ACTOR_NOT_AUTHORIZED_FOR_ACCOUNT"
    assert _code(world.decrypt(SPONSOR, ALICE)) == "ACTOR_NOT_AUTHORIZED_FOR_ACCOUNT"


@pytest.mark.secure
def test_an_authorized_actor_of_an_entitled_account_decrypts_and_fetches_keys_that_open(world: World) -> None:
    status, reply = world.decrypt(ACTOR, ALICE)
    assert status == 200, reply
    assert bytes.fromhex(reply["plaintext_hex"]) == PLAINTEXT
    status, reply = world.keys(ACTOR, ALICE)
    assert status == 200, reply
    assert reply["account_key_id"] == 1
    assert [k["key_epoch"] for k in reply["keys"]] == [0, 1, 2]
    keys = {
        k["key_epoch"]: unwrap_epoch_key(bytes.fromhex(k["sealed_key_hex"]), bytes(ALICE_X25519)) for k in reply["keys"]
    }
    assert len(set(keys.values())) == 3  # one content key per epoch
    opened = decrypt_with_content_key(
        content_key=keys[EPOCH], stream_id=SID, key_epoch=EPOCH, envelope=world.envelope, **CONTEXT
    )
    assert opened == PLAINTEXT
    # Sealed to Alice's key: another X25519 key cannot open them.
    with pytest.raises(Exception, match="did not open"):
        unwrap_epoch_key(bytes.fromhex(reply["keys"][0]["sealed_key_hex"]), bytes(ALICE_X25519_2))


def test_decrypt_of_a_tampered_envelope_is_decryption_failed(world: World) -> None:
    good = world.envelope
    try:
        world.envelope = good[:-1] + bytes([good[-1] ^ 1])
        assert _code(world.decrypt(ALICE, ALICE)) == "DECRYPTION_FAILED"
    finally:
        world.envelope = good


def test_more_than_1024_epochs_per_call_is_refused(world: World) -> None:
    assert _code(world.keys(ALICE, ALICE, 0, 1_024)) == "RANGE_TOO_LARGE"


def test_audit_records_name_who_and_what_but_hold_no_key_or_plaintext(world: World) -> None:
    status, reply = world.keys(ALICE, ALICE)
    assert status == 200, reply
    topic = topic_name("keymgr", world.services.prefix)

    def audited() -> list[dict[str, Any]] | None:
        found = [json.loads(m.value()) for m in read_committed(world.services.bootstrap, [topic])]
        return found if any(r["action"] == "fetch_epoch_keys" and r["caller"] == addr(ALICE) for r in found) else None

    records = wait_until("the audit record of Alice's fetch_epoch_keys", audited, timeout_s=60, every_s=0.3)
    assert any(
        r["action"] == "stream_decrypt" and r["caller"] == addr(ACTOR) and r["account"] == addr(ALICE) for r in records
    ), records
    fetch = next(r for r in records if r["action"] == "fetch_epoch_keys" and r["caller"] == addr(ALICE))
    assert (fetch["stream_id"], fetch["key_epochs"]) == (SID, [0, UNTIL])
    text = json.dumps(records)
    assert PLAINTEXT.hex() not in text
    assert PLAINTEXT.decode() not in text
    assert all(k["sealed_key_hex"] not in text for k in reply["keys"])


def test_a_revoked_account_key_is_key_revoked(world: World) -> None:
    alice = f"acct:{addr(ALICE)}"
    second = world.ok(
        ALICE, "register_account_key", alice, {"scheme": "X25519", "public_key": bytes(ALICE_X25519_2.public_key)}
    )["account_key_id"]
    world.ok(ALICE, "revoke_account_key", alice, {"account_key_id": 1})
    assert _code(world.keys(ALICE, ALICE, account_key_id=1)) == "KEY_REVOKED"
    status, reply = world.keys(ALICE, ALICE)  # the newest ACTIVE key now
    assert status == 200, reply
    assert reply["account_key_id"] == second
    unwrap_epoch_key(bytes.fromhex(reply["keys"][0]["sealed_key_hex"]), bytes(ALICE_X25519_2))


def test_a_revoked_actor_is_refused_as_soon_as_its_revocation_is_committed(world: World) -> None:
    assert world.decrypt(ACTOR, ALICE)[0] == 200
    # The reply comes after the worker committed the revocation; no wait, no retry after it.
    world.ok(ALICE, "revoke_actor", f"acct:{addr(ALICE)}", {"actor": addr(ACTOR), "stream_id": SID})
    assert _code(world.decrypt(ACTOR, ALICE)) == "ACTOR_NOT_AUTHORIZED_FOR_ACCOUNT"
    assert _code(world.keys(ACTOR, ALICE)) == "ACTOR_NOT_AUTHORIZED_FOR_ACCOUNT"
    # Alice herself still decrypts.
    assert world.decrypt(ALICE, ALICE)[0] == 200
