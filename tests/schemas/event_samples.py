"""One event of each type, written as the field values a reader of its Avro record sees."""

from __future__ import annotations

import hashlib

import nacl.signing

from watchtower.protocol.config import StreamConfig
from watchtower.protocol.events import EVENT_BODIES, StreamCreated
from watchtower.protocol.ledger.paid import PaidStreamConfig
from watchtower.protocol.registry import REGISTRY_KEY
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.stream.actor import StreamState, decide
from watchtower.protocol.stream.key_chain import command_json
from watchtower.protocol.stream.state import Event

KEY = nacl.signing.SigningKey(b"\x07" * 32)
OWNER = "0x" + bytes(KEY.verify_key).hex()
OTHER = "0x" + "cd" * 32
SID = "s-1"
HASH = hashlib.sha256(b"{}").digest()


def created_config() -> StreamConfig:
    create = sign_command(KEY, "create_stream", SID, 1, {"publisher_key": bytes(KEY.verify_key)})
    body = decide(StreamState.initial(SID), create, block_height=10).events[0].body
    assert isinstance(body, StreamCreated)
    return body.config


def create_command() -> str:
    return command_json(sign_command(KEY, "create_stream", SID, 1, {"publisher_key": bytes(KEY.verify_key)}))


def rotate_command() -> str:
    return command_json(sign_command(KEY, "rotate_publisher_key", SID, 2, {"new_key": b"\x09" * 32}))


def event(type_: str, body: dict[str, object], *, stream_id: str = SID, nonce: int = 2,
          reply: dict[str, object] | None = None) -> Event:
    fields = dict(body)
    if type_ == "PaidStreamRegistered":
        fields["paid_stream_config"] = PaidStreamConfig.from_dict(fields["paid_stream_config"])
    if fields.get("skip") is not None:
        fields["skip"] = tuple(fields["skip"])  # type: ignore[arg-type]
    return Event(stream_id=stream_id, block_height=11, caller=OWNER, nonce=nonce,
                 digest=hashlib.sha256(type_.encode()).digest(),
                 reply=reply if reply is not None else {"ok": True, "list": [1, "a"], "raw": b"\x00\x01"},
                 body=EVENT_BODIES[type_](**fields))


def one_of_each() -> list[Event]:
    """One event of each of the 33 types, in a fixed order."""
    return [
        event("StreamCreated", {"config": created_config(), "command": create_command()}, nonce=1),
        event("StreamMessagePublished", {
            "stream_id": SID, "version": 1, "sequence": 1, "kind": "k", "content_type": "application/json",
            "payload_format": "PLAINTEXT", "payload_hash": HASH, "key_epoch": None, "signing_key_id": 1,
            "timestamp_unix_ms": 1_700_000_000_000}),
        event("SubscriberUpdated", {
            "stream_id": SID, "subscriber": OTHER, "mode": "PULL", "status": "ACTIVE",
            "filter_json": '{"field":"kind","op":"eq","value":"x"}', "created_at_sequence": 1, "start_cursor": 1,
            "account_key_id": None}),
        event("PublisherKeyRotated", {
            "stream_id": SID, "old_key": bytes(KEY.verify_key), "new_key": b"\x09" * 32, "old_signing_key_id": 1,
            "new_signing_key_id": 2, "effective_sequence": 2, "command": rotate_command()}),
        event("SubscriptionPolicyChanged", {"stream_id": SID, "policy": "PRIVATE_ALLOWLIST"}),
        event("AllowlistChanged", {"stream_id": SID, "address": OTHER, "added": False}),
        event("KeyEpochRotated", {"stream_id": SID, "key_epoch": 4, "effective_block_height": 2400,
                                  "announced_by": OWNER}),
        event("FeedRegistered", {"feed_id": 1, "stream_id": SID, "owner": OWNER, "name": "n", "description": ""},
              stream_id=REGISTRY_KEY, nonce=1),
        *replay_events(),
        *ingest_events(),
        *keymgr_events(),
    ]


def ingest_events() -> list[Event]:
    """CIP-7 ingestion: a failed tick on the stream, and the runner registry's two events."""
    return [
        event("IngestFailed", {"stream_id": SID, "reason": "QUORUM_NOT_REACHED", "timestamp_unix_ms": 1_767_225_601_000,
                               "first_tick": 3, "last_tick": 3, "detail": "2 valid results, no 2 identical"}),
        event("RunnerRegistered", {"runner": OWNER, "label": "r1"}, stream_id="ingest:runners", nonce=1),
        event("RunnerRetired", {"runner": OWNER, "label": "r1"}, stream_id="ingest:runners"),
    ]


ACCT = "acct:" + OWNER
PAID = "paid:" + SID
PURCHASE = {"purchase_id": "ab" * 32, "stream_id": SID, "beneficiary_account": OTHER, "payer_account": OWNER,
            "from_key_epoch": 3, "to_key_epoch": 5, "epochs_charged": 3, "publisher_amount_cby": 300,
            "protocol_fee_cby": 7, "total_amount_cby": 307}


def keymgr_events() -> list[Event]:
    """One event of each Stream Key Manager type, on its instance key."""
    movement = {"account": OWNER, "amount_cby": 2**63 - 1, "ref": "cd" * 32, "counterparty": OTHER}
    paid = {"fee_per_key_epoch_cby": 100, "protocol_fee_bps": 250, "publisher_treasury": OWNER,
            "protocol_treasury": OTHER, "key_epoch_blocks": 600, "content_cipher": "XCHACHA20_POLY1305",
            "key_scope": "ACCOUNT", "min_purchase_epochs": 1}
    return [
        event("AccountKeyRegistered", {"account": OWNER, "account_key_id": 1, "scheme": "X25519",
                                       "public_key": b"\x05" * 32}, stream_id=ACCT),
        event("AccountKeyRevoked", {"account": OWNER, "account_key_id": 1}, stream_id=ACCT),
        event("ActorAuthorizationGranted", {"account": OWNER, "actor": OTHER, "stream_id": SID, "scope": "DECRYPT"},
              stream_id=ACCT),
        event("ActorAuthorizationRevoked", {"account": OWNER, "actor": OTHER, "stream_id": SID}, stream_id=ACCT),
        event("ActorCreated", {"account": OWNER, "actor": OTHER}, stream_id=ACCT),
        event("SpendingAllowanceGranted", {"account": OWNER, "spender": OTHER, "stream_id": SID,
                                           "cap_cby": 2**63 - 1}, stream_id=ACCT),
        event("SpendingAllowanceRevoked", {"account": OWNER, "spender": OTHER, "stream_id": SID}, stream_id=ACCT),
        event("CbyCredited", {**movement, "reason": "publisher_revenue"}, stream_id=ACCT),
        event("CbyDebited", {**movement, "reason": "purchase"}, stream_id=ACCT),
        event("CbyMinted", {"to": OTHER, "amount_cby": 10, "total_supply_cby": 2**63 - 1}, stream_id="cby:supply"),
        event("CbyBurned", {"account": OWNER, "amount_cby": 10, "total_supply_cby": 0}, stream_id="cby:supply"),
        event("PaidStreamRegistered", {"stream_id": SID, "owner": OWNER, "paid_stream_config": paid}, stream_id=PAID),
        event("EpochAccessRequested", PURCHASE, stream_id=PAID, reply={}),
        event("EpochAccessPurchased", PURCHASE, stream_id=PAID),
        event("EpochAccessIdempotent", {"stream_id": SID, "beneficiary_account": OTHER, "target_key_epoch": 4,
                                        "active_until_key_epoch": 5}, stream_id=PAID),
        event("EpochAccessFailed", {"purchase_id": "ab" * 32, "stream_id": SID, "beneficiary_account": OTHER,
                                    "code": "INSUFFICIENT_CBY_BALANCE", "message": "fund it"}, stream_id=PAID),
    ]


REPLAY = {"stream_id": SID, "replay_id": 2**62 + 5, "namespace": "feed:3", "requester": OWNER, "from_sequence": 2,
          "to_sequence": None, "first": 2, "end_exclusive": 9, "end_id": 8,
          "filter": '{"field":"kind","op":"eq","value":"x"}', "skip": [3, 1], "memo_hex": "ab" * 32, "price_cby": 21}


def replay_events() -> list[Event]:
    """One event of each ICRC-77 replay control type, on the stream."""
    return [
        event("ReplayPricingSet", {"stream_id": SID, "price_per_event_cby": 2**63 - 1}),
        event("ReplayOrdered", REPLAY, reply={}),
        event("ReplayRegistered", {**REPLAY, "to_sequence": 40, "end_id": None, "filter": None, "skip": None}),
        event("ReplayPaymentFailed", {"stream_id": SID, "replay_id": 7, "requester": OWNER, "price_cby": 21,
                                      "code": "INSUFFICIENT_CBY_BALANCE", "message": "fund it"}),
        event("ReplayCancelRequested", {"stream_id": SID, "replay_id": 7, "requester": OTHER}),
        event("ReplayFinished", {"stream_id": SID, "replay_id": 7, "requester": OTHER, "outcome": "completed"},
              reply={}),
    ]
