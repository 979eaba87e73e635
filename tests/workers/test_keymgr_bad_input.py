"""Bad input to the keymgr aggregates gets its spec code, and the worker keeps serving.

One real worker process serves the module. Each case sends a bad command (or bad bytes) keyed by
the instance it targets, so it lands on that instance's partition; the worker must refuse it with
the CIP-7 code and a message that says what to do, stay the same running process, and then accept
a valid command on the same instance. At the end nothing a refused command carried is on the log.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nacl.public
import nacl.signing
import pytest
from ledger_load import Account, paid_stream_body
from waiting import wait_until
from worker_harness import RawCommandChannel, Workers, read_committed_events, workers

from watchtower.protocol.ledger.billing import key_epoch_at
from watchtower.protocol.ledger.common import CbyCredit, Origin, PurchaseSettled
from watchtower.protocol.ledger.events import (
    CbyCredited,
    CbyDebited,
    EpochAccessFailed,
    EpochAccessPurchased,
    EpochAccessRequested,
)
from watchtower.protocol.signed_command import Command, command_digest
from watchtower.schemas.wire import encode_command, encode_keymgr_forward
from watchtower.topics.catalogue import topic_name

pytestmark = pytest.mark.integration

WORKER = "keymgr-bad-input"
MAX_AMOUNT = 2**63 - 1
MINTED = 1_000_000


@dataclass
class Ledger:
    workers: Workers
    pid: int
    commands: RawCommandChannel
    internal: RawCommandChannel  # the same channel, writing to the internal topic
    minter: Account
    alice: Account  # funded, owns an X25519 key
    bob: Account  # unfunded
    owner: Account
    stream_id: str
    refused: list[str]  # digests of every refused command

    def send(self, cmd: Command) -> dict[str, Any]:
        return self.commands.request(encode_command(cmd), key=cmd.stream_id)[1]

    def refuse(self, cmd: Command, code: str) -> dict[str, Any]:
        error = refused(self.send(cmd), code)
        self.refused.append(command_digest(cmd).hex())
        return error

    def still_serving(self) -> None:
        """Same process, and a valid command on Alice's account is accepted right after."""
        assert self.workers.alive(WORKER), f"the worker died:\n{self.workers.log(WORKER)}"
        assert self.workers.pid(WORKER) == self.pid, "the worker was restarted"
        ok(self.send(self.alice.transfer(self.bob.address, 1)))
        assert self.workers.pid(WORKER) == self.pid


def ok(reply: dict[str, Any]) -> dict[str, Any]:
    assert reply.get("ok") is True, f"expected success, got {reply}"
    return dict(reply["result"])


def refused(reply: dict[str, Any], code: str) -> dict[str, Any]:
    """A refusal with `code` and a message that is a sentence, not the bare code."""
    assert reply.get("ok") is False, f"expected {code}, got success: {reply}"
    error = reply["error"]
    assert error["code"] == code, f"expected {code}, got {error}"
    message = str(error.get("message", "")).strip()
    assert message, f"{code} came with an empty message"
    assert message != code, f"{code} came with the bare code as its message"
    return dict(error)


def x25519_public() -> bytes:
    return bytes(nacl.public.PrivateKey.generate().public_key)


@pytest.fixture(scope="module")
def ledger(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ledger]:
    log_dir: Path = tmp_path_factory.mktemp("keymgr-bad-input")
    minter = Account()
    with workers(kafka_bootstrap, partitions=3, log_dir=log_dir) as w:
        w.start(WORKER, env={"WATCHTOWER_CBY_MINTER": minter.address})
        commands = RawCommandChannel(kafka_bootstrap, w.prefix, reply_partition=1)
        internal = RawCommandChannel(kafka_bootstrap, w.prefix, reply_partition=2)
        internal.t_commands = topic_name("internal", w.prefix)
        try:
            ledger = Ledger(w, w.pid(WORKER), commands, internal, minter, Account(), Account(), Account(),
                            f"paid-bad-input.{w.prefix}", [])
            ok(ledger.send(minter.mint(ledger.alice.address, MINTED)))
            ok(ledger.send(ledger.alice.sign("register_account_key", f"acct:{ledger.alice.address}",
                                             {"scheme": "X25519", "public_key": x25519_public()})))
            body = paid_stream_body(ledger.owner, nacl.signing.SigningKey.generate(), fee=10, bps=100)
            ok(ledger.send(ledger.owner.sign("create_stream", ledger.stream_id, body)))
            _first_purchase(ledger)
            yield ledger
        finally:
            commands.close()
            internal.close()


def _first_purchase(ledger: Ledger) -> None:
    """Buy the next epoch, resending while the paid instance has not heard of the stream yet (the
    creation reaches it as a forward on the internal topic, after the creator's answer)."""
    cmd = ledger.alice.acquire(ledger.stream_id, key_epoch_at(int(time.time() * 1000), 3600) + 1)

    def answered() -> dict[str, Any] | None:
        reply = ledger.send(cmd)
        if reply.get("ok") or reply["error"]["code"] not in (
                "NOT_PLATFORM_MANAGED_STREAM", "STREAM_NOT_FOUND", "NOT_READY"):
            return reply
        return None

    reply = wait_until("the paid instance to hear of the stream", answered, timeout_s=120, every_s=0.2)
    assert ok(reply)["to_key_epoch"] == cmd.body["target_key_epoch"]


# --- account keys ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("scheme", "public_key"), [
    pytest.param("Ed25519", None, id="wrong-scheme"),
    pytest.param("x25519", None, id="scheme-wrong-case"),
    pytest.param("", None, id="empty-scheme"),
    pytest.param("X25519", b"\x01" * 31, id="key-31-bytes"),
    pytest.param("X25519", b"\x01" * 33, id="key-33-bytes"),
    pytest.param("X25519", bytes(32), id="key-all-zero"),
    # Non-zero points of small order: a sealed box to one of them is readable by anyone.
    pytest.param("X25519", b"\x01" + bytes(31), id="key-of-order-4"),
    pytest.param("X25519", bytes.fromhex("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800"),
                 id="key-of-order-8"),
])
def test_malformed_account_key_is_invalid_account_key(ledger: Ledger, scheme: str, public_key: bytes | None) -> None:
    alice = ledger.alice
    ledger.refuse(alice.sign("register_account_key", f"acct:{alice.address}",
                             {"scheme": scheme, "public_key": public_key or x25519_public()}), "INVALID_ACCOUNT_KEY")
    ledger.still_serving()


def test_registering_a_key_on_another_account_is_unauthorized(ledger: Ledger) -> None:
    ledger.refuse(ledger.bob.sign("register_account_key", f"acct:{ledger.alice.address}",
                                  {"scheme": "X25519", "public_key": x25519_public()}), "UNAUTHORIZED")
    ledger.still_serving()


def test_revoking_a_key_that_was_never_registered_is_refused(ledger: Ledger) -> None:
    alice = ledger.alice
    error = refused(ledger.send(alice.sign("revoke_account_key", f"acct:{alice.address}", {"account_key_id": 99})),
                    "UNAUTHORIZED")
    assert "99" in error["message"]
    ledger.still_serving()


# --- amounts --------------------------------------------------------------------------------------

@pytest.mark.parametrize("amount", [
    pytest.param(-1, id="negative"),
    pytest.param(0, id="zero"),
    pytest.param(MAX_AMOUNT + 1, id="past-int64"),
    pytest.param(True, id="bool"),
    pytest.param("10", id="text"),
    pytest.param(1.5, id="float"),
])
def test_bad_transfer_amount_is_invalid_argument(ledger: Ledger, amount: object) -> None:
    alice = ledger.alice
    ledger.refuse(alice.sign("transfer_cby", f"acct:{alice.address}", {"to": ledger.bob.address, "amount_cby": amount}),
                  "INVALID_ARGUMENT")
    ledger.still_serving()


@pytest.mark.parametrize("huge", [2**64, 2**200])
def test_an_amount_no_signature_can_cover_is_invalid_argument(ledger: Ledger, huge: int) -> None:
    # Signing refuses integers past 64 bits, so the record is edited after signing, as an attacker would.
    alice = ledger.alice
    signed = encode_command(alice.transfer(ledger.bob.address, 1))
    edited = signed.replace(b'"amount_cby":1', b'"amount_cby":' + str(huge).encode(), 1)
    assert edited != signed
    reply = ledger.commands.request(edited, key=f"acct:{alice.address}")[1]
    refused(reply, "INVALID_ARGUMENT")
    ledger.still_serving()


@pytest.mark.parametrize("amount", [pytest.param(-5, id="negative"), pytest.param(True, id="bool"),
                                    pytest.param(MAX_AMOUNT + 1, id="past-int64")])
def test_bad_mint_and_burn_amounts_are_invalid_argument(ledger: Ledger, amount: object) -> None:
    ledger.refuse(ledger.minter.sign("mint_cby", "cby:supply", {"to": ledger.bob.address, "amount_cby": amount}),
                  "INVALID_ARGUMENT")
    alice = ledger.alice
    ledger.refuse(alice.sign("burn_cby", f"acct:{alice.address}", {"amount_cby": amount}), "INVALID_ARGUMENT")
    ledger.still_serving()


def test_transfer_to_a_malformed_address_is_invalid_argument(ledger: Ledger) -> None:
    alice = ledger.alice
    for to in ("0x1234", "not an address", "0x" + "g" * 64, 12):
        ledger.refuse(alice.sign("transfer_cby", f"acct:{alice.address}", {"to": to, "amount_cby": 1}),
                      "INVALID_ARGUMENT")
    ledger.still_serving()


def test_spending_more_than_the_balance_is_insufficient_cby_balance(ledger: Ledger) -> None:
    bob, alice = ledger.bob, ledger.alice
    ledger.refuse(alice.transfer(bob.address, MAX_AMOUNT), "INSUFFICIENT_CBY_BALANCE")
    ledger.refuse(alice.burn(MAX_AMOUNT), "INSUFFICIENT_CBY_BALANCE")
    ledger.still_serving()


def test_mint_by_anyone_but_the_genesis_minter_is_unauthorized(ledger: Ledger) -> None:
    ledger.refuse(ledger.alice.mint(ledger.alice.address, 1_000), "UNAUTHORIZED")
    ledger.still_serving()


def test_a_mint_that_would_overflow_the_supply_is_refused(ledger: Ledger) -> None:
    # The supply already holds MINTED; one more maximal mint would pass 2**63 - 1.
    ledger.refuse(ledger.minter.mint(ledger.bob.address, MAX_AMOUNT), "INVALID_ARGUMENT")
    ledger.still_serving()


# --- purchases ------------------------------------------------------------------------------------

def _acquire(ledger: Ledger, target: object, **extra: Any) -> Command:
    return ledger.alice.sign("acquire_epoch_access", f"paid:{ledger.stream_id}",
                             {"stream_id": ledger.stream_id, "target_key_epoch": target, **extra})


def test_a_target_epoch_in_the_past_is_invalid_target_key_epoch(ledger: Ledger) -> None:
    # Bob holds no entitlement (for Alice, whose entitlement covers epoch 0, it is an idempotent repeat).
    bob = ledger.bob
    ledger.refuse(bob.acquire(ledger.stream_id, 0), "INVALID_TARGET_KEY_EPOCH")
    ledger.refuse(bob.acquire(ledger.stream_id, key_epoch_at(int(time.time() * 1000), 3600) - 1),
                  "INVALID_TARGET_KEY_EPOCH")
    ledger.still_serving()


def test_repeating_a_covered_target_is_idempotent_and_free(ledger: Ledger) -> None:
    receipt = ok(ledger.send(_acquire(ledger, 0)))
    assert receipt["epochs_charged"] == receipt["total_amount_cby"] == 0
    ledger.still_serving()


@pytest.mark.parametrize("target", [pytest.param(-1, id="negative"), pytest.param(True, id="bool"),
                                    pytest.param("7", id="text"), pytest.param(1.0, id="float")])
def test_a_malformed_target_epoch_is_invalid_argument(ledger: Ledger, target: object) -> None:
    ledger.refuse(_acquire(ledger, target), "INVALID_ARGUMENT")
    ledger.still_serving()


def test_paying_from_another_account_without_its_allowance_is_unauthorized(ledger: Ledger) -> None:
    # Refused by Bob's account (it gave no allowance), so like a purchase above a balance the
    # purchase is recorded in flight and then failed (EpochAccessRequested, EpochAccessFailed).
    refused(ledger.send(_acquire(ledger, 10**6, payer_account=ledger.bob.address)), "UNAUTHORIZED")
    ledger.still_serving()


# --- bytes that are not commands ------------------------------------------------------------------

@pytest.mark.parametrize("value", [
    pytest.param(b"\x00\xff\xfe not a command", id="binary"),
    pytest.param(b'{"v": 1, "command": {"method": "transfer_cby"}}', id="half-a-command"),
    pytest.param(b"[]", id="json-array"),
    pytest.param(b"", id="empty"),
    pytest.param(None, id="no-value"),
])
@pytest.mark.parametrize("topic", ["commands", "internal"])
def test_garbage_bytes_are_refused_with_a_record_code(ledger: Ledger, value: bytes | None, topic: str) -> None:
    channel = ledger.commands if topic == "commands" else ledger.internal
    reply = channel.request(value, key=f"acct:{ledger.alice.address}")[1]
    assert reply.get("ok") is False, reply
    # Half a command is a command with missing fields (INVALID_ARGUMENT); the rest are not records.
    assert reply["error"]["code"] in ("MALFORMED_RECORD", "SCHEMA_MISMATCH", "INVALID_ARGUMENT"), reply
    ledger.still_serving()


# --- forwards where they do not belong ----------------------------------------------------------

def test_a_forged_credit_on_the_commands_topic_is_unauthorized(ledger: Ledger) -> None:
    # Only workers write `internal`; a credit put on the public topic would print money.
    forged_ref = os.urandom(32).hex()
    origin = Origin(ledger.bob.address, 1, os.urandom(32))
    credit = CbyCredit(ledger.bob.address, 10**9, "mint", forged_ref, "", origin)
    reply = ledger.commands.request(encode_keymgr_forward(credit), key=f"acct:{ledger.bob.address}")[1]
    refused(reply, "UNAUTHORIZED")
    ledger.refused.append(forged_ref)
    settled = PurchaseSettled(os.urandom(32).hex(), ledger.stream_id, ledger.bob.address, None, origin)
    reply = ledger.commands.request(encode_keymgr_forward(settled), key=f"paid:{ledger.stream_id}")[1]
    refused(reply, "UNAUTHORIZED")
    ledger.still_serving()


def test_a_signed_command_on_the_internal_topic_is_refused(ledger: Ledger) -> None:
    alice = ledger.alice
    cmd = alice.transfer(ledger.bob.address, 5)
    reply = ledger.internal.request(encode_command(cmd), key=cmd.stream_id)[1]
    assert reply.get("ok") is False, reply
    assert reply["error"]["code"] in ("UNAUTHORIZED", "MALFORMED_RECORD"), reply
    ledger.refused.append(command_digest(cmd).hex())
    ledger.still_serving()


def test_no_refused_command_left_anything_on_the_log(ledger: Ledger, kafka_bootstrap: str) -> None:
    assert ledger.refused, "the cases above refused nothing"
    refused_refs = set(ledger.refused)
    for logged in read_committed_events(kafka_bootstrap, ledger.workers.prefix):
        body = logged.event.body
        if isinstance(body, CbyCredited | CbyDebited):
            assert body.ref not in refused_refs, f"a refused command moved CBY: {logged}"
        if isinstance(body, EpochAccessRequested | EpochAccessPurchased | EpochAccessFailed):
            assert body.purchase_id not in refused_refs, f"a refused purchase reached the log: {logged}"
    ledger.still_serving()
