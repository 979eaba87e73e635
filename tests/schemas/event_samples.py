"""One event of each type, built to the reference shape (StreamMessagePublished without the
message; the `reference_shape` fixture in conftest lets the protocol's Event accept it)."""

from __future__ import annotations

import hashlib

import nacl.signing

from watchtower.protocol.key_chain import command_json
from watchtower.protocol.registry import REGISTRY_KEY
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.stream_actor import StreamState, decide
from watchtower.protocol.stream_state import Event

KEY = nacl.signing.SigningKey(b"\x07" * 32)
OWNER = "0x" + bytes(KEY.verify_key).hex()
OTHER = "0x" + "cd" * 32
SID = "s-1"
HASH = hashlib.sha256(b"{}").digest()


def created_config() -> dict[str, object]:
    create = sign_command(KEY, "create_stream", SID, 1, {"publisher_key": bytes(KEY.verify_key)})
    return dict(decide(StreamState.initial(SID), create, block_height=10).events[0].body["config"])


def create_command() -> str:
    return command_json(sign_command(KEY, "create_stream", SID, 1, {"publisher_key": bytes(KEY.verify_key)}))


def rotate_command() -> str:
    return command_json(sign_command(KEY, "rotate_publisher_key", SID, 2, {"new_key": b"\x09" * 32}))


def event(type_: str, body: dict[str, object], *, stream_id: str = SID, nonce: int = 2,
          reply: dict[str, object] | None = None) -> Event:
    return Event(type=type_, stream_id=stream_id, block_height=11, caller=OWNER, nonce=nonce,
                 digest=hashlib.sha256(type_.encode()).digest(),
                 reply=reply if reply is not None else {"ok": True, "list": [1, "a"], "raw": b"\x00\x01"},
                 body=body)


def one_of_each() -> list[Event]:
    """Requires `reference_shape` (StreamMessagePublished is built without its message)."""
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
    ]
