"""The key manager's forwards on the internal topic: each round-trips, and a bad one is refused."""

from __future__ import annotations

import json

import nacl.signing
import pytest

from watchtower.protocol.errors import InsufficientCbyBalanceError, WatchtowerError
from watchtower.protocol.ledger.common import (
    CbyBurn,
    CbyCredit,
    KeymgrForward,
    Origin,
    PaidCommand,
    PurchaseDebit,
    PurchaseSettled,
    ReplayCharge,
    ReplaySettled,
)
from watchtower.protocol.signed_command import sign_command
from watchtower.schemas.wire import decode_command, encode_command, encode_keymgr_forward

ALICE, BOB, PUBLISHER, TREASURY = (nacl.signing.SigningKey(bytes([n]) * 32) for n in (4, 5, 3, 2))


def addr(key: nacl.signing.SigningKey) -> str:
    return "0x" + bytes(key.verify_key).hex()


ORIGIN = Origin(addr(ALICE), 17, b"\x03" * 32)


def samples() -> list[KeymgrForward]:
    renew = sign_command(ALICE, "renew_subscription", "feed", 9, {"target_key_epoch": 3})
    return [
        CbyCredit(addr(BOB), 2**63 - 1, "transfer", "ab" * 32, addr(ALICE), ORIGIN),
        PurchaseDebit("cd" * 32, "feed", addr(ALICE), addr(BOB), addr(PUBLISHER), addr(TREASURY), 100, 2, 102, ORIGIN),
        PurchaseSettled("cd" * 32, "feed", addr(BOB), None, ORIGIN),
        PurchaseSettled("cd" * 32, "feed", addr(BOB),
                        InsufficientCbyBalanceError("fund it", details={"balance_cby": "1"}).to_dict(), ORIGIN),
        CbyBurn(addr(ALICE), 5, ORIGIN),
        PaidCommand(renew),
        ReplayCharge(2**63 - 1, "feed", addr(ALICE), addr(PUBLISHER), 2**63 - 1, ORIGIN),
        ReplaySettled(9, "feed", addr(ALICE), None, ORIGIN),
        ReplaySettled(9, "feed", addr(ALICE), InsufficientCbyBalanceError("fund it").to_dict(), ORIGIN),
    ]


@pytest.mark.parametrize("index", range(9))
def test_every_forward_round_trips_through_its_envelope(index: int) -> None:
    forward = samples()[index]
    data = encode_keymgr_forward(forward)
    assert set(json.loads(data)) == {"v", "keymgr"}
    assert decode_command(data) == forward


def mutate(index: int, **changes: object) -> bytes:
    doc = json.loads(encode_keymgr_forward(samples()[index]))
    doc["keymgr"].update(changes)
    return json.dumps(doc).encode()


@pytest.mark.parametrize(("data", "code"), [
    (mutate(0, amount_cby=-1), "INVALID_ARGUMENT"),
    (mutate(0, amount_cby=True), "MALFORMED_RECORD"),  # the envelope types a bool out
    (mutate(0, reason="gift"), "INVALID_ARGUMENT"),
    (mutate(0, kind="teleport"), "MALFORMED_RECORD"),
    (mutate(4, origin={"caller": "x", "nonce": 1, "digest_hex": "00" * 32}), "INVALID_ARGUMENT"),
    (mutate(4, origin={"caller": addr(ALICE), "nonce": 1, "digest_hex": "zz"}), "MALFORMED_RECORD"),
    (mutate(1, total_amount_cby=103), "INVALID_ARGUMENT"),
    (mutate(1, extra=1), "MALFORMED_RECORD"),
    (mutate(6, price_cby=0), "INVALID_ARGUMENT"),
    (mutate(7, replay_id=0), "INVALID_ARGUMENT"),
])
def test_a_broken_forward_is_refused_with_a_code(data: bytes, code: str) -> None:
    with pytest.raises(WatchtowerError) as caught:
        decode_command(data)
    assert caught.value.code == code


def test_an_envelope_with_a_command_and_a_forward_is_malformed() -> None:
    cmd = sign_command(ALICE, "burn_cby", "acct:" + addr(ALICE), 9, {"amount_cby": 1})
    doc = json.loads(encode_command(cmd)) | json.loads(encode_keymgr_forward(samples()[0]))
    with pytest.raises(WatchtowerError) as caught:
        decode_command(json.dumps(doc).encode())
    assert caught.value.code == "MALFORMED_RECORD"
