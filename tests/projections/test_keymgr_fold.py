"""The key manager's tables folded from a log without a broker: what they hold, what is refused, and
that the digest does not depend on how the partitions' records interleave.

The records are framed with the real codec and folded by the same `Folder` the live worker and the
offline rebuild use.
"""

from __future__ import annotations

import itertools
from typing import Any

import nacl.signing

from watchtower.projections import quarantine
from watchtower.projections.fold import Folder
from watchtower.projections.keymgr_tables import KEYMGR_TABLES, keymgr_digest
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.events import EVENT_BODIES
from watchtower.protocol.ledger.paid import PaidStreamConfig
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.stream.actor import Event, StreamState, decide, evolve
from watchtower.protocol.stream.views import TABLE_NAMES, views_digest
from watchtower.schemas.wire import encode_event
from watchtower.topics.partitioning import partition_for_key

PARTITIONS = 4


def _address(seed: int) -> str:
    return address_from_public_key(bytes(nacl.signing.SigningKey(bytes([seed]) * 32).verify_key))


ALICE, BOB, ACTOR, PUBLISHER, TREASURY, MINTER = (_address(i) for i in range(1, 7))
SID = "paid-feed"
CONFIG = PaidStreamConfig(fee_per_key_epoch_cby=10, protocol_fee_bps=1000, publisher_treasury=PUBLISHER,
                          protocol_treasury=TREASURY, key_epoch_blocks=100, min_purchase_epochs=1).to_dict()
X25519_KEY = bytes(range(1, 33))


def _event(type_: str, instance: str, body: dict[str, Any], *, height: int = 50, caller: str = ALICE,
           nonce: int = 1) -> Event:
    fields = dict(body)
    if "paid_stream_config" in fields:
        fields["paid_stream_config"] = PaidStreamConfig.from_dict(fields["paid_stream_config"])
    return Event(stream_id=instance, block_height=height, caller=caller, nonce=nonce,
                 digest=bytes([nonce % 256]) * 32, reply={}, body=EVENT_BODIES[type_](**fields))


def _moved(type_: str, account: str, amount: int, reason: str, counterparty: str = "") -> Event:
    return _event(type_, f"acct:{account}", {"account": account, "amount_cby": amount, "reason": reason,
                                              "ref": "ab" * 32, "counterparty": counterparty})


PURCHASE = {"purchase_id": "cd" * 32, "stream_id": SID, "beneficiary_account": BOB, "payer_account": ALICE,
            "from_key_epoch": 5, "to_key_epoch": 6, "epochs_charged": 2, "publisher_amount_cby": 20,
            "protocol_fee_cby": 2, "total_amount_cby": 22}


def ledger_history() -> list[Event]:
    """A mint, a key and its revocation, a grant, a transfer, a paid stream and a sponsored purchase."""
    return [
        _event("CbyMinted", "cby:supply", {"to": ALICE, "amount_cby": 1_000, "total_supply_cby": 1_000},
               caller=MINTER),
        _moved("CbyCredited", ALICE, 1_000, "mint", MINTER),
        _event("AccountKeyRegistered", f"acct:{ALICE}",
               {"account": ALICE, "account_key_id": 1, "scheme": "X25519", "public_key": X25519_KEY}, height=60,
               nonce=2),
        _event("AccountKeyRegistered", f"acct:{ALICE}",
               {"account": ALICE, "account_key_id": 2, "scheme": "X25519", "public_key": X25519_KEY[::-1]},
               height=61, nonce=3),
        _event("AccountKeyRevoked", f"acct:{ALICE}", {"account": ALICE, "account_key_id": 1}, height=70, nonce=4),
        _event("ActorAuthorizationGranted", f"acct:{BOB}",
               {"account": BOB, "actor": ACTOR, "stream_id": SID, "scope": "DECRYPT"}, height=80, caller=BOB),
        _moved("CbyDebited", ALICE, 300, "transfer", BOB),
        _moved("CbyCredited", BOB, 300, "transfer", ALICE),
        _event("PaidStreamRegistered", f"paid:{SID}", {"stream_id": SID, "owner": PUBLISHER,
                                                       "paid_stream_config": CONFIG}, height=90, caller=PUBLISHER),
        _event("EpochAccessRequested", f"paid:{SID}", PURCHASE, nonce=5),
        _moved("CbyDebited", ALICE, 22, "purchase", ""),
        _moved("CbyCredited", PUBLISHER, 20, "publisher_revenue", ALICE),
        _moved("CbyCredited", TREASURY, 2, "protocol_fee", ALICE),
        _event("EpochAccessPurchased", f"paid:{SID}", PURCHASE, height=95, nonce=5),
    ]


class Log:
    """Events framed as the writers frame them, each at the next offset of its key's partition."""

    def __init__(self) -> None:
        self.records: list[tuple[int, int, bytes, bytes]] = []  # (partition, offset, key, value)
        self.offsets = dict.fromkeys(range(PARTITIONS), 0)

    def add(self, event: Event, key: str | None = None, value: bytes | None = None) -> None:
        raw_key = (key if key is not None else event.stream_id).encode()
        partition = partition_for_key(raw_key, PARTITIONS)
        self.records.append((partition, self.offsets[partition], raw_key,
                             value if value is not None else encode_event(event)))
        self.offsets[partition] += 1

    def fold(self, records: list[tuple[int, int, bytes, bytes]] | None = None) -> Folder:
        streams: dict[str, dict[str, Any]] = {name: {} for name in TABLE_NAMES}
        folder = Folder(streams, {}, t_events="events", t_messages="messages", partitions=PARTITIONS)
        for partition, offset, key, value in self.records if records is None else records:
            folder.fold_event(partition, offset, key, value)
        return folder


def _digest(folder: Folder) -> str:
    return keymgr_digest({name: folder.keymgr[name].items() for name in KEYMGR_TABLES})


def _quarantined(folder: Folder) -> list[str]:
    return [r["reason"] for r in quarantine.summary(folder.refused.items())["recent"]]


def test_a_ledger_history_folds_into_balances_keys_grants_entitlements_and_the_supply() -> None:
    log = Log()
    for event in ledger_history():
        log.add(event)
    folder = log.fold()

    assert _quarantined(folder) == []
    accounts = folder.keymgr["accounts"]
    assert {a: accounts[a]["balance_cby"] for a in accounts} == {ALICE: 678, BOB: 300, PUBLISHER: 20, TREASURY: 2}
    assert accounts[ALICE]["keys"] == [
        {"account_key_id": 1, "scheme": "X25519", "public_key_hex": X25519_KEY.hex(), "status": "REVOKED",
         "registered_at_block": 60, "revoked_at_block": 70},
        {"account_key_id": 2, "scheme": "X25519", "public_key_hex": X25519_KEY[::-1].hex(), "status": "ACTIVE",
         "registered_at_block": 61, "revoked_at_block": None}]
    assert accounts[BOB]["authorizations"] == [{"actor": ACTOR, "stream_id": SID, "status": "ACTIVE",
                                                "granted_at_block": 80, "revoked_at_block": None}]
    # The sponsor paid; the entitlement is the beneficiary's alone.
    assert dict(folder.keymgr["entitlements"]) == {f"{SID}/{BOB}": {
        "stream_id": SID, "beneficiary_account": BOB, "active_until_key_epoch": 6}}
    assert folder.keymgr["paid_streams"][SID] == {"stream_id": SID, "owner": PUBLISHER, "paid_stream_config": CONFIG,
                                                  "registered_at_block": 90}
    assert folder.keymgr["supply"]["cby:supply"] == {"total_supply_cby": 1_000}
    assert sum(a["balance_cby"] for a in accounts.values()) == 1_000


def test_the_stream_views_skip_keymgr_events_without_quarantining_them() -> None:
    log = Log()
    for event in ledger_history():
        log.add(event)
    folder = log.fold()
    assert quarantine.summary(folder.refused.items())["count"] == 0
    assert views_digest({name: folder.tables[name].items() for name in TABLE_NAMES}) == views_digest(
        dict.fromkeys(TABLE_NAMES, ()))


def test_a_keymgr_event_that_breaks_a_rule_is_quarantined_and_the_fold_goes_on() -> None:
    log = Log()
    history = ledger_history()
    for event in history[:2]:
        log.add(event)  # Alice holds 1,000
    log.add(_moved("CbyDebited", ALICE, 5_000, "transfer", BOB))  # more than she holds
    log.add(_event("AccountKeyRevoked", f"acct:{ALICE}", {"account": ALICE, "account_key_id": 9}, nonce=2))
    log.add(_event("EpochAccessPurchased", f"paid:{SID}", PURCHASE))  # a stream never registered, nothing in flight
    log.add(_event("CbyMinted", "cby:supply", {"to": ALICE, "amount_cby": 5, "total_supply_cby": 7}))  # wrong total
    log.add(history[0], key=f"acct:{ALICE}")  # the supply's event keyed as an account
    log.add(history[1], value=b"\x00garbage")
    log.add(_moved("CbyDebited", ALICE, 400, "burn"))  # a valid one after all that
    folder = log.fold()

    reasons = _quarantined(folder)
    assert quarantine.summary(folder.refused.items())["count"] == 6
    assert any("exceeds the balance" in r for r in reasons)
    assert any("not an ACTIVE key" in r for r in reasons)
    assert any("not registered" in r for r in reasons)
    assert any("does not follow" in r for r in reasons)
    assert any("is keyed" in r for r in reasons)
    assert folder.keymgr["accounts"][ALICE]["balance_cby"] == 600
    assert folder.keymgr["accounts"][ALICE]["keys"] == []
    assert dict(folder.keymgr["entitlements"]) == {}
    assert dict(folder.keymgr["paid_streams"]) == {}
    assert folder.keymgr["supply"]["cby:supply"] == {"total_supply_cby": 1_000}


def key_epoch_events() -> list[Event]:
    owner = nacl.signing.SigningKey(b"\x09" * 32)
    publisher = nacl.signing.SigningKey(b"\x0a" * 32)
    state, events = StreamState.initial("s-epochs"), []
    for nonce, (method, body) in enumerate([
            ("create_stream", {"publisher_key_hex": bytes(publisher.verify_key).hex()}),
            ("announce_key_epoch", {"key_epoch": 3}), ("announce_key_epoch", {"key_epoch": 3}),
            ("announce_key_epoch", {"key_epoch": 7})], start=1):
        decision = decide(state, sign_command(owner, method, "s-epochs", nonce, body), block_height=10 * nonce)
        for event in decision.events:
            state = evolve(state, event)
            events.append(event)
    return events


def test_the_key_epoch_schedule_lists_each_announced_epoch_once() -> None:
    created, *announced = key_epoch_events()
    log = Log()
    log.add(announced[0])  # before the stream exists: the stream views refuse it, so the schedule does too
    log.add(created)
    for event in announced:
        log.add(event)
    folder = log.fold()

    assert len(_quarantined(folder)) == 1
    assert folder.keymgr["key_epochs"]["s-epochs"] == {"stream_id": "s-epochs", "epochs": [
        {"key_epoch": 3, "effective_block_height": 20, "announced_by": created.caller, "announced_at_block": 20},
        {"key_epoch": 7, "effective_block_height": 40, "announced_by": created.caller, "announced_at_block": 40}]}
    assert folder.tables["streams"]["s-epochs"]["last_key_epoch"] == 7


def test_the_digest_is_the_same_whatever_order_the_partitions_are_read_in_and_moves_with_the_tables() -> None:
    log = Log()
    for event in [*key_epoch_events(), *ledger_history()]:
        log.add(event)
    by_partition = sorted(log.records, key=lambda r: (r[0], r[1]))  # as the offline rebuild reads them
    expected = _digest(log.fold(by_partition))
    assert _digest(log.fold()) == expected
    for reordered in itertools.islice(_interleavings(log.records), 20):
        assert _digest(log.fold(reordered)) == expected
    shorter = [r for r in by_partition if r != by_partition[-1]]
    assert _digest(log.fold(shorter)) != expected


def _interleavings(records: list[tuple[int, int, bytes, bytes]]) -> Any:
    """Merges of the partitions' records that keep each partition's own order (as a live consumer does)."""
    parts = [[r for r in records if r[0] == p] for p in range(PARTITIONS)]
    for rotation in range(PARTITIONS * 5):
        queues = [list(p) for p in parts]
        merged = []
        turn = rotation
        while any(queues):
            queue = queues[turn % PARTITIONS]
            if queue:
                merged.append(queue.pop(0))
            turn += 1 + 2 * (rotation % 2)  # 1 or 3: coprime with 4, so every queue gets turns
        yield merged
