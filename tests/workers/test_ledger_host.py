"""The key manager's aggregates on a real worker: purchases, sponsors, limits, forged forwards, bad input.

One worker process (with a genesis minter and protocol treasury in its environment) serves the
whole module over a real broker. Commands go to the commands topic keyed by their envelope
stream_id, as every client sends them; state is read back by folding the committed events topic
with `KeymgrState`, the same fold the key-manager service and the projection use. Forwards on
``internal`` are asynchronous to the commands topic, so a test waits (with a deadline) for the
effects it depends on, e.g. a mint's credit, before the next step.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
from confluent_kafka import Producer
from waiting import wait_until
from worker_harness import RawCommandChannel, Workers, read_committed_events, workers

from watchtower.protocol.errors import MalformedRecordError
from watchtower.protocol.events import event_fields
from watchtower.protocol.ledger.billing import block_height_at, key_epoch_of_height
from watchtower.protocol.ledger.common import SUPPLY_KEY, CbyCredit, Origin, account_instance, paid_instance
from watchtower.protocol.ledger.events import CbyCredited, CbyDebited, EpochAccessFailed, EpochAccessIdempotent
from watchtower.protocol.ledger.keymgr_access import KeymgrState
from watchtower.protocol.signed_command import Command, sign_command
from watchtower.schemas.wire import encode_command, encode_event, encode_keymgr_forward
from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.reader import read_committed

pytestmark = pytest.mark.integration

WORKER = "ledger"
KEY_EPOCH_BLOCKS = 10_000_000  # one key epoch spans the whole test run, so "current" cannot move under it
FEE, BPS = 1_000, 250


def key() -> nacl.signing.SigningKey:
    return nacl.signing.SigningKey.generate()


def addr(k: nacl.signing.SigningKey) -> str:
    return "0x" + bytes(k.verify_key).hex()


@dataclass
class Ledger:
    workers: Workers
    worker_pid: int
    channel: RawCommandChannel
    bootstrap: str
    stream_id: str
    minter: nacl.signing.SigningKey
    treasury: nacl.signing.SigningKey
    publisher: nacl.signing.SigningKey = field(default_factory=key)
    clock: int = field(default_factory=lambda: int(time.time() * 1_000_000))

    def sign(self, signer: nacl.signing.SigningKey, method: str, stream_id: str, body: dict[str, Any]) -> Command:
        self.clock += 1  # microsecond nonces, strictly increasing per signer
        return sign_command(signer, method, stream_id, self.clock, body)

    def send(self, cmd: Command) -> dict[str, Any]:
        return self.raw(encode_command(cmd), cmd.stream_id)

    def raw(self, value: bytes | None, key: str) -> dict[str, Any]:
        _, reply = self.channel.request(value, key=key, timeout=120)
        return reply

    def view(self) -> KeymgrState:
        state = KeymgrState()
        for logged in read_committed_events(self.bootstrap, self.workers.prefix):
            try:
                state.apply(logged.event)
            except MalformedRecordError:
                continue  # quarantined, as every reader of the log does
        return state

    def wait(self, check: Callable[[KeymgrState], bool], timeout: float = 60.0) -> KeymgrState:
        return wait_until("the ledger to reach the expected state",
                          lambda: view if check(view := self.view()) else None, timeout_s=timeout, every_s=0.2)

    def balance(self, view: KeymgrState, k: nacl.signing.SigningKey) -> int:
        return view.balances().get(addr(k), 0)

    def fund(self, k: nacl.signing.SigningKey, amount: int) -> None:
        before = self.balance(self.view(), k)
        ok(self.send(self.sign(self.minter, "mint_cby", SUPPLY_KEY, {"to": addr(k), "amount_cby": amount})))
        self.wait(lambda v: self.balance(v, k) == before + amount)

    def acquire(self, payer: nacl.signing.SigningKey, target: int, **extra: Any) -> dict[str, Any]:
        body = {"stream_id": self.stream_id, "target_key_epoch": target, **extra}
        return self.send(self.sign(payer, "acquire_epoch_access", paid_instance(self.stream_id), body))

    def assert_still_serving(self) -> None:
        assert self.workers.alive(WORKER), f"the worker died:\n{self.workers.log(WORKER)}"
        assert self.workers.pid(WORKER) == self.worker_pid, "the worker was restarted"
        sender, receiver = key(), key()
        self.fund(sender, 5)
        ok(self.send(self.sign(sender, "transfer_cby", account_instance(addr(sender)),
                               {"to": addr(receiver), "amount_cby": 2})))
        self.wait(lambda v: self.balance(v, receiver) == 2)


def ok(reply: dict[str, Any]) -> dict[str, Any]:
    assert reply.get("ok") is True, f"expected success, got {reply}"
    return dict(reply["result"])


def refused(reply: dict[str, Any], code: str) -> dict[str, Any]:
    assert reply.get("ok") is False, f"expected {code}, got success: {reply}"
    error = reply["error"]
    assert error["code"] == code, f"expected {code}, got {error}"
    assert isinstance(error.get("message"), str)
    assert error["message"].strip() not in ("", code)
    return dict(error)


def replies_to(ledger: Ledger, corr: str) -> int:
    """How many committed replies carry correlation id ``corr``."""
    return sum(1 for m in read_committed(ledger.bootstrap, [topic_name("replies", ledger.workers.prefix)])
               if m.key() == corr.encode())


def current_epoch() -> int:
    return key_epoch_of_height(block_height_at(int(time.time() * 1000)), KEY_EPOCH_BLOCKS)


@pytest.fixture(scope="module")
def ledger(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ledger]:
    log_dir: Path = tmp_path_factory.mktemp("ledger-worker")
    minter, treasury = key(), key()
    with workers(kafka_bootstrap, partitions=3, log_dir=log_dir) as w:
        w.start(WORKER, env={"WATCHTOWER_CBY_MINTER": addr(minter), "WATCHTOWER_PROTOCOL_TREASURY": addr(treasury)})
        channel = RawCommandChannel(kafka_bootstrap, w.prefix, reply_partition=0)
        try:
            led = Ledger(w, w.pid(WORKER), channel, kafka_bootstrap, f"paid.{uuid.uuid4().hex[:8]}", minter, treasury)
            create = led.sign(led.publisher, "create_stream", led.stream_id, {
                "publisher_key": bytes(led.publisher.verify_key), "access_mode": "PLATFORM_MANAGED",
                "paid_stream_config": {"fee_per_key_epoch_cby": FEE, "protocol_fee_bps": BPS,
                                       "publisher_treasury": addr(led.publisher),
                                       "key_epoch_blocks": KEY_EPOCH_BLOCKS}})
            ok(led.send(create))  # the first reply also waits for the worker to join the group
            led.wait(lambda v: v.paid_stream(led.stream_id) is not None)
            yield led
        finally:
            channel.close()


def test_a_purchase_end_to_end_splits_the_fee_exactly_between_both_treasuries(ledger: Ledger) -> None:
    alice = key()
    ledger.fund(alice, 100_000)
    before = ledger.view()
    publisher0, treasury0 = ledger.balance(before, ledger.publisher), ledger.balance(before, ledger.treasury)
    current = current_epoch()
    cmd = ledger.sign(alice, "acquire_epoch_access", paid_instance(ledger.stream_id),
                      {"stream_id": ledger.stream_id, "target_key_epoch": current + 2})
    corr, _ = ledger.channel.send(encode_command(cmd), key=cmd.stream_id)
    receipt = ok(ledger.channel.reply(corr, timeout=120))
    assert receipt == {
        "stream_id": ledger.stream_id, "beneficiary_account": addr(alice), "payer_account": addr(alice),
        "from_key_epoch": current, "to_key_epoch": current + 2, "epochs_charged": 3,
        "publisher_amount_cby": 3 * FEE, "protocol_fee_cby": 3 * FEE * BPS // 10_000,
        "total_amount_cby": 3 * FEE + 3 * FEE * BPS // 10_000}
    view = ledger.wait(lambda v: ledger.balance(v, ledger.treasury) == treasury0 + 75)
    assert ledger.balance(view, ledger.publisher) == publisher0 + 3_000
    assert ledger.balance(view, alice) == 100_000 - 3_075
    assert view.active_until(ledger.stream_id, addr(alice)) == current + 2
    assert sum(view.balances().values()) == view.supply.total_supply_cby
    # The caller got exactly one answer (the paid instance's), not one per instance the saga touched.
    assert replies_to(ledger, corr) == 1


def test_a_sponsored_purchase_entitles_only_the_beneficiary(ledger: Ledger) -> None:
    sponsor, beneficiary = key(), key()
    ledger.fund(sponsor, 10_000)
    target = current_epoch() + 1
    receipt = ok(ledger.acquire(sponsor, target, beneficiary_account=addr(beneficiary)))
    assert (receipt["payer_account"], receipt["beneficiary_account"]) == (addr(sponsor), addr(beneficiary))
    view = ledger.wait(lambda v: ledger.balance(v, sponsor) == 10_000 - receipt["total_amount_cby"])
    assert view.active_until(ledger.stream_id, addr(beneficiary)) == target
    assert view.active_until(ledger.stream_id, addr(sponsor)) is None
    # and nobody may spend another account's balance without its allowance
    refused(ledger.acquire(beneficiary, target + 1, payer_account=addr(sponsor)), "UNAUTHORIZED")


def test_an_idempotent_repeat_charges_nothing(ledger: Ledger) -> None:
    buyer = key()
    ledger.fund(buyer, 10_000)
    target = current_epoch() + 1
    paid = ok(ledger.acquire(buyer, target))
    view = ledger.wait(lambda v: ledger.balance(v, buyer) == 10_000 - paid["total_amount_cby"])
    again = ok(ledger.acquire(buyer, target))
    assert (again["epochs_charged"], again["total_amount_cby"]) == (0, 0)
    events = [e.event for e in read_committed_events(ledger.bootstrap, ledger.workers.prefix)]
    assert any(isinstance(e.body, EpochAccessIdempotent) and e.body.beneficiary_account == addr(buyer)
               for e in events)
    assert ledger.balance(ledger.view(), buyer) == ledger.balance(view, buyer)


def test_insufficient_balance_refuses_the_purchase_and_moves_no_cby(ledger: Ledger) -> None:
    poor = key()
    ledger.fund(poor, 10)
    before = ledger.view()
    error = refused(ledger.acquire(poor, current_epoch() + 1), "INSUFFICIENT_CBY_BALANCE")
    assert error["details"]["balance_cby"] == "10"
    after = ledger.view()
    assert after.balances() == before.balances()
    assert after.active_until(ledger.stream_id, addr(poor)) is None
    events = [e.event for e in read_committed_events(ledger.bootstrap, ledger.workers.prefix)]
    assert any(isinstance(e.body, EpochAccessFailed) and e.body.beneficiary_account == addr(poor) for e in events)


def test_the_ninth_key_and_the_sixty_fifth_authorization_get_their_limit_codes(ledger: Ledger) -> None:
    holder = key()
    acct = account_instance(addr(holder))
    for n in range(1, 9):
        reply = ok(ledger.send(ledger.sign(holder, "register_account_key", acct,
                                           {"scheme": "X25519", "public_key": bytes([n]) * 32})))
        assert reply["account_key_id"] == n
    refused(ledger.send(ledger.sign(holder, "register_account_key", acct,
                                    {"scheme": "X25519", "public_key": b"\x09" * 32})), "ACCOUNT_KEY_LIMIT_REACHED")
    actors = [addr(nacl.signing.SigningKey(n.to_bytes(32, "big"))) for n in range(1, 66)]  # real key pairs
    for actor in actors[:64]:
        ok(ledger.send(ledger.sign(holder, "authorize_actor", acct, {"actor": actor, "stream_id": ledger.stream_id})))
    refused(ledger.send(ledger.sign(holder, "authorize_actor", acct,
                                    {"actor": actors[64], "stream_id": ledger.stream_id})),
            "AUTHORIZATION_LIMIT_REACHED")


def test_a_forward_written_on_the_commands_topic_is_unauthorized(ledger: Ledger) -> None:
    thief = key()
    forged = CbyCredit(addr(thief), 1_000_000, "mint", "00" * 32, "", Origin(addr(thief), 1, b"\x00" * 32))
    refused(ledger.raw(encode_keymgr_forward(forged), account_instance(addr(thief))), "UNAUTHORIZED")
    assert ledger.balance(ledger.view(), thief) == 0


def test_renew_subscription_buys_through_the_stream_and_its_paid_instance(ledger: Ledger) -> None:
    subscriber = key()
    ledger.fund(subscriber, 10_000)
    target = current_epoch() + 1
    refused(ledger.send(ledger.sign(subscriber, "renew_subscription", ledger.stream_id,
                                    {"target_key_epoch": target})), "PAYMENT_REQUIRED")
    ok(ledger.send(ledger.sign(subscriber, "subscribe", ledger.stream_id, {"mode": "PULL"})))
    receipt = ok(ledger.send(ledger.sign(subscriber, "renew_subscription", ledger.stream_id,
                                         {"target_key_epoch": target, "account_key_id": 1})))
    assert (receipt["beneficiary_account"], receipt["to_key_epoch"]) == (addr(subscriber), target)
    ledger.wait(lambda v: v.active_until(ledger.stream_id, addr(subscriber)) == target)


@pytest.mark.parametrize(("make", "code"), [
    (lambda led, k: led.sign(k, "transfer_cby", account_instance(addr(k)), {"to": addr(k), "amount_cby": "lots"}),
     "INVALID_ARGUMENT"),
    (lambda led, k: led.sign(k, "transfer_cby", account_instance(addr(k)), {"to": "0x" + "11" * 32,
                                                                            "amount_cby": -5}), "INVALID_ARGUMENT"),
    (lambda led, k: led.sign(k, "burn_cby", account_instance(addr(k)), {"amount_cby": 2**63}), "INVALID_ARGUMENT"),
    (lambda led, k: led.sign(k, "register_account_key", account_instance(addr(k)),
                             {"scheme": "X25519", "public_key": b"\x01" * 31}), "INVALID_ACCOUNT_KEY"),
    (lambda led, k: led.sign(k, "register_account_key", account_instance(addr(k)),
                             {"scheme": "RSA", "public_key": b"\x01" * 32}), "INVALID_ACCOUNT_KEY"),
    (lambda led, k: led.sign(k, "mint_cby", SUPPLY_KEY, {"to": addr(k), "amount_cby": 5}), "UNAUTHORIZED"),
    (lambda led, k: led.sign(k, "revoke_actor", account_instance("0x" + "22" * 32),
                             {"actor": addr(k), "stream_id": "s"}), "UNAUTHORIZED"),
    (lambda led, k: led.sign(k, "acquire_epoch_access", paid_instance(led.stream_id),
                             {"stream_id": led.stream_id, "target_key_epoch": 0}), "INVALID_TARGET_KEY_EPOCH"),
    (lambda led, k: led.sign(k, "acquire_epoch_access", paid_instance("no-such-feed"),
                             {"stream_id": "no-such-feed", "target_key_epoch": 5}), "NOT_PLATFORM_MANAGED_STREAM"),
    (lambda led, k: led.sign(k, "stream_decrypt", led.stream_id, {}), "MALFORMED_RECORD"),
])
def test_a_bad_keymgr_command_gets_its_code_and_the_worker_keeps_serving(
        ledger: Ledger, make: Callable[[Ledger, nacl.signing.SigningKey], Command], code: str) -> None:
    refused(ledger.send(make(ledger, key())), code)
    ledger.assert_still_serving()


@pytest.mark.parametrize("value", [
    json.dumps({"v": 1, "keymgr": {"kind": "credit", "account": "0x" + "33" * 32}}).encode(),
    json.dumps({"v": 1, "keymgr": {"kind": "teleport"}}).encode(),
    b'{"v": 1, "keymgr": [',
])
def test_a_malformed_keymgr_record_is_refused_and_the_worker_keeps_serving(ledger: Ledger, value: bytes) -> None:
    refused(ledger.raw(value, account_instance("0x" + "33" * 32)), "MALFORMED_RECORD")
    ledger.assert_still_serving()


def test_value_is_conserved_and_the_worker_logged_no_crash(ledger: Ledger) -> None:
    view = ledger.view()
    assert sum(view.balances().values()) == view.supply.total_supply_cby > 0
    assert all(b >= 0 for b in view.balances().values())
    assert "Traceback" not in ledger.workers.log(WORKER)


# --- Crashes --------------------------------------------------------------------------------------


def test_a_worker_killed_mid_saga_charges_every_purchase_exactly_once(
        kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    # Purchases are sent without waiting and the worker is killed with SIGKILL while they are in
    # flight; a second worker takes over and every purchase is retried with the very same signed
    # command until it is answered. Each beneficiary ends entitled, the payer is charged once per
    # purchase, both treasuries get exactly their share and no CBY appears or vanishes.
    minter, treasury = key(), key()
    env = {"WATCHTOWER_CBY_MINTER": addr(minter), "WATCHTOWER_PROTOCOL_TREASURY": addr(treasury)}
    with workers(kafka_bootstrap, partitions=3, log_dir=tmp_path_factory.mktemp("ledger-crash")) as w:
        w.start("crash-a", env=env)
        channel = RawCommandChannel(kafka_bootstrap, w.prefix, reply_partition=2)
        try:
            led = Ledger(w, w.pid("crash-a"), channel, kafka_bootstrap, f"crash.{uuid.uuid4().hex[:8]}", minter,
                         treasury)
            ok(led.send(led.sign(led.publisher, "create_stream", led.stream_id, {
                "publisher_key": bytes(led.publisher.verify_key), "access_mode": "PLATFORM_MANAGED",
                "paid_stream_config": {"fee_per_key_epoch_cby": FEE, "protocol_fee_bps": BPS,
                                       "publisher_treasury": addr(led.publisher),
                                       "key_epoch_blocks": KEY_EPOCH_BLOCKS}})))
            led.wait(lambda v: v.paid_stream(led.stream_id) is not None)
            # Each payer sponsors its own beneficiary, so every purchase is its signer's latest
            # command at the paid instance and its exact retry is answered with the receipt.
            payers, beneficiaries = [key() for _ in range(12)], [key() for _ in range(12)]
            for payer in payers:
                ok(led.send(led.sign(minter, "mint_cby", SUPPLY_KEY, {"to": addr(payer), "amount_cby": 5_000})))
            led.wait(lambda v: all(led.balance(v, p) == 5_000 for p in payers))
            target = current_epoch()  # one epoch each: 1,000 + 25
            commands = [led.sign(p, "acquire_epoch_access", paid_instance(led.stream_id),
                                 {"stream_id": led.stream_id, "target_key_epoch": target,
                                  "beneficiary_account": addr(b)}) for p, b in zip(payers, beneficiaries, strict=True)]
            for cmd in commands:
                channel.send(encode_command(cmd), key=cmd.stream_id)
            w.kill9("crash-a")
            w.start("crash-b", env=env)
            for cmd in commands:
                reply = wait_until("the purchase to settle",
                                   lambda cmd=cmd: r if (r := led.send(cmd))["ok"] or r["error"]["code"] != "NOT_READY"
                                   else None, timeout_s=180, every_s=0.5)
                assert ok(reply)["total_amount_cby"] == FEE + FEE * BPS // 10_000
            n = len(commands)
            view = led.wait(lambda v: led.balance(v, treasury) == n * 25 and led.balance(v, led.publisher) == n * FEE)
            assert all(led.balance(view, p) == 5_000 - 1_025 for p in payers)
            assert all(view.active_until(led.stream_id, addr(b)) == target for b in beneficiaries)
            assert all(view.active_until(led.stream_id, addr(p)) is None for p in payers)
            assert sum(view.balances().values()) == view.supply.total_supply_cby == n * 5_000
            purchased = [e.event for e in read_committed_events(kafka_bootstrap, w.prefix)
                         if e.event.type == "EpochAccessPurchased"]
            assert len(purchased) == n  # never charged twice
        finally:
            channel.close()


def test_a_debit_forged_onto_the_events_log_is_quarantined_when_a_worker_rebuilds(
        kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    # Anyone with write access to the events topic could append a CbyDebited larger than the
    # balance. A worker that rebuilds the account quarantines it (logged with its place and reason)
    # and goes on from the last valid state: the balance is intact and still spendable.
    minter, victim, friend = key(), key(), key()
    env = {"WATCHTOWER_CBY_MINTER": addr(minter)}
    with workers(kafka_bootstrap, partitions=3, log_dir=tmp_path_factory.mktemp("ledger-forged")) as w:
        w.start("forged-a", env=env)
        channel = RawCommandChannel(kafka_bootstrap, w.prefix, reply_partition=1)
        try:
            led = Ledger(w, w.pid("forged-a"), channel, kafka_bootstrap, "unused", minter, key())
            led.fund(victim, 100)
            credit = next(e for e in read_committed_events(kafka_bootstrap, w.prefix)
                          if isinstance(e.event.body, CbyCredited) and e.event.body.account == addr(victim))
            forged = dataclasses.replace(credit.event, body=CbyDebited(
                **{**event_fields(credit.event.body), "amount_cby": 1_000, "reason": "transfer",
                   "counterparty": addr(friend)}))
            producer = Producer({**kafka_config(kafka_bootstrap), "log_level": 3})
            producer.produce(topic_name("events", w.prefix), key=credit.event.stream_id.encode(),
                             value=encode_event(forged), partition=credit.partition)
            assert producer.flush(30) == 0
            w.kill9("forged-a")
            w.start("forged-b", env=env)
            ok(led.send(led.sign(victim, "transfer_cby", account_instance(addr(victim)),
                                 {"to": addr(friend), "amount_cby": 100})))
            led.wait(lambda v: led.balance(v, friend) == 100)
            assert "quarantined" in w.log("forged-b")
            assert "CbyDebited" in w.log("forged-b")
        finally:
            channel.close()
