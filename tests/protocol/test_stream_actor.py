"""The pure StreamActor aggregate: decide's rules and error codes, evolve, the read side, properties."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import pickle
from collections.abc import Iterable
from functools import reduce
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from protocol_strategies import PROPERTY, json_values

import watchtower.schemas
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.confidential.receipt import sign_receipt
from watchtower.protocol.confidential.rules import Keyloads, KeyloadState
from watchtower.protocol.deployment import Deployment
from watchtower.protocol.enums import AccessMode, DeliveryMode, PayloadFormat, SubscriptionPolicy, SubscriptionStatus
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.events import (
    AllowlistChanged,
    KeyEpochRotated,
    ReplayOrdered,
    SubscriptionPolicyChanged,
    event_fields,
)
from watchtower.protocol.signed_command import METHODS, Command, command_digest, sign_command
from watchtower.protocol.signing import message_signing_bytes, publish_digest, sign_message
from watchtower.protocol.stream.actor import (
    Decision,
    Event,
    FrozenMap,
    StreamState,
    Subscription,
    decide,
    evolve,
    get_head,
    get_since_range,
    key_at_sequence,
    key_history,
    state_digest,
    subscribers,
)
from watchtower.protocol.stream.key_schedule import KeyScheduleEntry
from watchtower.protocol.stream.message import StreamMessage
from watchtower.schemas.codec import latest_version
from watchtower.schemas.wire import decode_event, encode_event

SID = "prices"
OWNER = nacl.signing.SigningKey(b"\x01" * 32)
ALICE = nacl.signing.SigningKey(b"\x04" * 32)
BOB = nacl.signing.SigningKey(b"\x05" * 32)
PUBLISHER_KEYS = [nacl.signing.SigningKey(bytes([0x10 + i]) * 32) for i in range(4)]
PUBLISHER = PUBLISHER_KEYS[0]
SCHEMAS = Path(watchtower.schemas.__file__).parent
ENVELOPE_FIELDS = {"block_height", "caused_by"}


def addr(key: nacl.signing.SigningKey) -> str:
    return address_from_public_key(bytes(key.verify_key))


def pub(key: nacl.signing.SigningKey) -> bytes:
    return bytes(key.verify_key)


TREASURY = nacl.signing.SigningKey(b"\x06" * 32)
KEYMGR = nacl.signing.SigningKey(b"\x07" * 32)  # the key manager's receipt key (ciphertext_receipt)
DEPLOYMENT = Deployment(protocol_treasury=addr(TREASURY), keymgr_public_key=pub(KEYMGR))
# What a creator sends: the protocol treasury is the deployment's, never the creator's to choose.
PAID = {
    "access_mode": "SUBSCRIBER_PAID",
    "paid_stream_config": {
        "fee_per_key_epoch_cby": 10,
        "protocol_fee_bps": 100,
        "publisher_treasury": addr(OWNER),
    },
}


def message(
    sequence: int,
    *,
    key: nacl.signing.SigningKey = PUBLISHER,
    signing_key_id: int = 1,
    payload: bytes = b'{"px": 1}',
    stream_id: str = SID,
    ciphertext: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """A signed StreamMessage as the publish body (its JSON dict; with the key manager's receipt
    when it is ciphertext, as a PLATFORM_MANAGED publish carries it)."""
    msg = sign_message(
        stream_id=stream_id,
        sequence=sequence,
        timestamp_unix_ms=1_700_000_000_000 + sequence,
        kind="price_batch",
        tags={"symbol": "BTC", "n": 2},
        payload=(bytes(24) + payload + bytes(16)) if ciphertext else payload,
        payload_format=PayloadFormat.CIPHERTEXT if ciphertext else PayloadFormat.PLAINTEXT,
        key_epoch=7 if ciphertext else None,
        signing_key=key,
        signing_key_id=signing_key_id,
        **extra,
    )
    if not ciphertext:
        return msg.to_json_dict()
    receipt = sign_receipt(KEYMGR, stream_id=stream_id, key_epoch=7, payload_hash=msg.payload_hash)
    return {**msg.to_json_dict(), "keymgr_receipt": receipt}


class Stream:
    """One stream driven through decide/evolve the way the agent drives it."""

    def __init__(self, stream_id: str = SID, deployment: Deployment = DEPLOYMENT) -> None:
        self.deployment = deployment
        self.state = StreamState.initial(stream_id)
        self.events: list[Event] = []
        self.height = 100

    def next_nonce(self, key: nacl.signing.SigningKey) -> int:
        record = self.state.callers.get(addr(key))
        return 1 if record is None else record.last_nonce + 1

    def command(self, key: nacl.signing.SigningKey, method: str, body: Any = None, nonce: int | None = None) -> Command:
        n = self.next_nonce(key) if nonce is None else nonce
        return sign_command(key, method, self.state.stream_id, n, {} if body is None else body)

    def submit(self, cmd: Command) -> Decision:
        self.height += 1
        decision = decide(self.state, cmd, block_height=self.height, deployment=self.deployment)
        for event in decision.events:
            self.state = evolve(self.state, event)
            self.events.append(event)
        return decision

    def do(self, key: nacl.signing.SigningKey, method: str, body: Any = None, *, nonce: int | None = None) -> Decision:
        return self.submit(self.command(key, method, body, nonce))

    def publish(self, body: dict[str, Any] | None = None, *, key: nacl.signing.SigningKey = OWNER) -> Decision:
        return self.do(key, "publish", message(self.state.head + 1) if body is None else body)

    def rejects(
        self, code: str, key: nacl.signing.SigningKey, method: str, body: Any = None, **kw: Any
    ) -> WatchtowerError:
        return self.rejects_command(code, self.command(key, method, body, kw.get("nonce")))

    def rejects_command(self, code: str, cmd: Command) -> WatchtowerError:
        before, count = self.state, len(self.events)
        with pytest.raises(WatchtowerError) as info:
            self.submit(cmd)
        assert info.value.code == code, info.value
        # A rejection records nothing.
        assert self.state is before
        assert len(self.events) == count
        return info.value


def created(**config: Any) -> Stream:
    stream = Stream()
    stream.do(OWNER, "create_stream", {"publisher_key": pub(PUBLISHER), **config})
    return stream


def rebuild(events: Iterable[Event], stream_id: str = SID) -> StreamState:
    """Fold evolve over events that went through the events topic's codec, as a projection rebuild does."""
    decoded = [decode_event(encode_event(e)) for e in events]
    return reduce(evolve, decoded, StreamState.initial(stream_id))


# --- create_stream ------------------------------------------------------------------------------


def test_create_stream_makes_the_caller_owner_with_key_1_from_sequence_1() -> None:
    stream = Stream()
    decision = stream.do(OWNER, "create_stream", {"publisher_key_hex": pub(PUBLISHER).hex()})
    state = stream.state
    assert state.created
    assert state.owner == addr(OWNER)
    assert (state.head, state.floor, state.capacity) == (0, 1, 10_000)
    assert state.key_schedule is not None
    assert state.key_schedule.entries == (KeyScheduleEntry(1, pub(PUBLISHER), 1),)
    assert [e.type for e in decision.events] == ["StreamCreated"]
    assert decision.reply == {"stream_id": SID, "owner": addr(OWNER), "head_sequence": 0, "floor_sequence": 1,
                              "head": 0, "floor": 1, "signing_key_id": 1}


def test_subscriber_paid_is_created_as_platform_managed() -> None:
    stream = created(**PAID)
    assert stream.state.config is not None
    assert stream.state.config.access_mode is AccessMode.PLATFORM_MANAGED


@pytest.mark.parametrize(
    "config",
    [
        {"access_mode": "PLATFORM_MANAGED"},
        {"paid_stream_config": PAID["paid_stream_config"]},
        {"ring_buffer_capacity": 0},
        {"max_subscribers": 0},
        {"surprise": 1},
        {"owner": addr(ALICE)},
        {"stream_id": "other"},
        {"current_signing_key_id": 2},
        {"publisher_key": b"short"},
    ],
)
def test_create_stream_refuses_an_invalid_config(config: dict[str, Any]) -> None:
    Stream().rejects("INVALID_ARGUMENT", OWNER, "create_stream", {"publisher_key": pub(PUBLISHER), **config})


def test_the_protocol_treasury_is_the_deployments_not_the_creators() -> None:
    stream = created(**PAID)
    assert stream.state.config is not None
    assert stream.state.config.paid_stream_config is not None
    assert stream.state.config.paid_stream_config.protocol_treasury == addr(TREASURY)
    # Repeating the deployment's own treasury is harmless.
    repeat = {**PAID, "paid_stream_config": {**PAID["paid_stream_config"], "protocol_treasury": addr(TREASURY)}}
    assert created(**repeat).state.created


def test_a_creator_choosing_another_protocol_treasury_is_refused() -> None:
    mine = {**PAID, "paid_stream_config": {**PAID["paid_stream_config"], "protocol_treasury": addr(ALICE)}}
    err = Stream().rejects("INVALID_ARGUMENT", OWNER, "create_stream", {"publisher_key": pub(PUBLISHER), **mine})
    assert "may not override" in err.message
    assert err.details == {"protocol_treasury": addr(TREASURY)}


def test_a_deployment_without_a_treasury_hosts_no_paid_feeds_but_open_ones() -> None:
    bare = Stream(deployment=Deployment())
    err = bare.rejects("INVALID_ARGUMENT", OWNER, "create_stream", {"publisher_key": pub(PUBLISHER), **PAID})
    assert "WATCHTOWER_PROTOCOL_TREASURY" in err.message
    bare.do(OWNER, "create_stream", {"publisher_key": pub(PUBLISHER)})
    assert bare.state.created


def test_create_stream_on_an_existing_stream_is_refused() -> None:
    stream = created()
    stream.rejects("STREAM_ALREADY_EXISTS", ALICE, "create_stream", {"publisher_key": pub(PUBLISHER)})


@pytest.mark.parametrize(
    ("method", "body"),
    [
        ("publish", message(1)),
        ("subscribe", {"mode": "PULL"}),
        ("unsubscribe", {}),
        ("rotate_publisher_key", {"new_key": pub(PUBLISHER_KEYS[1])}),
        ("set_subscription_policy", {"policy": "PUBLIC"}),
        ("allowlist_add", {"address": addr(ALICE)}),
        ("allowlist_remove", {"address": addr(ALICE)}),
        ("announce_key_epoch", {"key_epoch": 1}),
    ],
)
def test_every_other_method_needs_an_existing_stream(method: str, body: dict[str, Any]) -> None:
    Stream().rejects("STREAM_NOT_FOUND", OWNER, method, body)


# --- signature and routing ----------------------------------------------------------------------


def test_a_forged_command_is_invalid_signature_before_any_other_check() -> None:
    stream = created()
    stream.publish()
    good = stream.command(OWNER, "create_stream", {"publisher_key": pub(PUBLISHER)}, nonce=1)
    forged = dataclasses.replace(good, signature=bytes(64))
    # Stale nonce and existing stream would both fail too; the signature is checked first.
    stream.rejects_command("INVALID_SIGNATURE", forged)


def test_a_command_for_another_stream_is_refused() -> None:
    stream = created()
    cmd = sign_command(OWNER, "subscribe", "other-stream", 9, {"mode": "PULL"})
    stream.rejects_command("INVALID_ARGUMENT", cmd)


# --- replay protection --------------------------------------------------------------------------


def test_an_identical_retry_returns_the_original_reply_and_no_events() -> None:
    stream = created()
    cmd = stream.command(OWNER, "publish", message(1))
    first = stream.submit(cmd)
    before = stream.state
    retry = stream.submit(cmd)
    assert retry == Decision((), {**first.reply, "duplicate": True})
    assert stream.state is before


def test_reusing_the_last_nonce_for_another_command_is_nonce_replayed() -> None:
    stream = created()
    stream.do(OWNER, "announce_key_epoch", {"key_epoch": 0})  # owner nonce 2
    error = stream.rejects("NONCE_REPLAYED", OWNER, "announce_key_epoch", {"key_epoch": 1}, nonce=2)
    assert "nonce 3 or higher" in error.message


def test_a_lower_nonce_is_nonce_replayed_even_for_an_old_identical_command() -> None:
    stream = created()
    create = stream.events[0]
    assert create.nonce == 1
    stream.do(OWNER, "announce_key_epoch", {"key_epoch": 0})
    retry_of_create = stream.command(OWNER, "create_stream", {"publisher_key": pub(PUBLISHER)}, nonce=1)
    # Only the last command is remembered for idempotent retries; older ones are plain replays.
    stream.rejects_command("NONCE_REPLAYED", retry_of_create)


def test_nonces_may_skip_and_are_tracked_per_caller() -> None:
    stream = created()
    stream.do(OWNER, "announce_key_epoch", {"key_epoch": 1}, nonce=50)
    stream.do(ALICE, "subscribe", {"mode": "PULL"}, nonce=1)  # Alice's own sequence starts fresh
    stream.rejects("NONCE_REPLAYED", OWNER, "announce_key_epoch", {"key_epoch": 2}, nonce=49)
    assert stream.state.callers[addr(OWNER)].last_nonce == 50


def test_a_rejected_command_does_not_use_up_its_nonce() -> None:
    stream = created()
    stream.rejects("STALE_SEQUENCE", OWNER, "publish", message(5), nonce=2)
    assert stream.do(OWNER, "publish", message(1), nonce=2).reply["sequence"] == 1


def test_replay_protection_is_rebuilt_from_the_log() -> None:
    stream = created()
    cmd = stream.command(OWNER, "publish", message(1))
    reply = stream.submit(cmd).reply
    rebuilt = rebuild(stream.events)
    assert decide(rebuilt, cmd, block_height=500) == Decision((), {**reply, "duplicate": True})


# --- publish ------------------------------------------------------------------------------------


def test_publish_appends_at_head_plus_1_and_replies_with_head_and_floor() -> None:
    stream = created()
    decision = stream.publish()
    assert decision.reply == {"sequence": 1, "head_sequence": 1, "floor_sequence": 1, "head": 1, "floor": 1}
    assert stream.state.head == 1


def test_the_published_event_is_a_reference_and_the_decision_carries_the_one_message() -> None:
    stream = created()
    body = message(1)
    decision = stream.publish(body)
    (event,) = decision.events
    (msg,) = decision.messages
    assert msg.to_json_dict() == body
    assert event.type == "StreamMessagePublished"
    # Exactly the ten CIP-7 fields: stream, sequence and hash name the message; no payload copy.
    assert set(event_fields(event.body)) == {
        "stream_id", "version", "sequence", "kind", "content_type", "payload_format",
        "payload_hash", "key_epoch", "signing_key_id", "timestamp_unix_ms",
    }
    assert msg.payload_inline not in encode_event(event)
    assert event.body.payload_hash == msg.payload_hash
    assert event.body.payload_format == "PLAINTEXT"
    for name in ("stream_id", "version", "sequence", "kind", "content_type", "key_epoch", "signing_key_id"):
        assert getattr(event.body, name) == getattr(msg, name), name
    assert event.body.timestamp_unix_ms == msg.timestamp_unix_ms


def test_the_floor_follows_the_ring_window() -> None:
    stream = created(ring_buffer_capacity=3)
    replies = [stream.publish().reply for _ in range(5)]
    assert [(r["head"], r["floor"]) for r in replies] == [(1, 1), (2, 1), (3, 1), (4, 2), (5, 3)]


def test_only_the_owner_may_publish() -> None:
    created().rejects("UNAUTHORIZED", ALICE, "publish", message(1))


@pytest.mark.parametrize("sequence", [1, 3])
def test_a_publish_not_signed_for_head_plus_1_is_stale_and_never_renumbered(sequence: int) -> None:
    stream = created()
    stream.publish()
    # Another message than the one at head 1 (that one would be an idempotent retry).
    error = stream.rejects("STALE_SEQUENCE", OWNER, "publish", message(sequence, payload=b'{"px": 2}'))
    assert error.details["head"] == 1
    assert stream.state.head == 1


def test_a_payload_over_16_kib_is_payload_too_large() -> None:
    body = {**message(1), "payload_inline_hex": (b"x" * 16_385).hex()}
    created().rejects("PAYLOAD_TOO_LARGE", OWNER, "publish", body)


def test_a_payload_that_does_not_match_its_hash_is_invalid_signature() -> None:
    body = {**message(1, payload=b"aaaa"), "payload_inline_hex": b"bbbb".hex()}
    error = created().rejects("INVALID_SIGNATURE", OWNER, "publish", body)
    assert "payload_hash" in error.message  # says what changed, not just "does not verify"


def test_a_signed_field_changed_after_signing_is_invalid_signature() -> None:
    created().rejects("INVALID_SIGNATURE", OWNER, "publish", {**message(1), "kind": "alert"})


def test_a_message_signed_by_another_key_is_invalid_signature() -> None:
    created().rejects("INVALID_SIGNATURE", OWNER, "publish", message(1, key=PUBLISHER_KEYS[1]))


def test_a_message_naming_a_key_id_not_in_force_is_invalid_signature() -> None:
    created().rejects("INVALID_SIGNATURE", OWNER, "publish", message(1, signing_key_id=2))


def test_format_and_key_epoch_must_agree() -> None:
    created().rejects("INVALID_ARGUMENT", OWNER, "publish", {**message(1), "key_epoch": 3})


def test_a_message_for_another_stream_is_refused() -> None:
    created().rejects("INVALID_ARGUMENT", OWNER, "publish", message(1, stream_id="other"))


def test_a_platform_managed_stream_accepts_only_ciphertext() -> None:
    stream = created(**PAID)
    stream.rejects("UNAUTHORIZED", OWNER, "publish", message(1))
    (event,) = stream.publish(message(1, ciphertext=True)).events
    assert (event.body.payload_format, event.body.key_epoch) == ("CIPHERTEXT", 7)


# --- subscribe / unsubscribe --------------------------------------------------------------------


def test_a_new_subscription_starts_at_the_head_by_default() -> None:
    stream = created()
    stream.publish()
    stream.publish()
    decision = stream.do(ALICE, "subscribe", {"mode": "PUSH"})
    sub = stream.state.subscriptions[addr(ALICE)]
    assert (sub.created_at_sequence, sub.start_cursor, sub.status) == (2, 2, SubscriptionStatus.ACTIVE)
    assert decision.reply["created"] is True
    assert decision.events[0].body.status == "ACTIVE"


def test_paused_is_never_produced_and_the_api_document_says_why() -> None:
    """CIP-7 lists PAUSED but no method sets it (failed before: the OpenAPI document did not say so)."""
    import json

    from watchtower.http.openapi import OPENAPI, SUBSCRIPTION_STATUS_NOTE

    stream = created()
    statuses = []
    for method in ("subscribe", "unsubscribe", "subscribe", "subscribe", "unsubscribe"):
        decision = stream.do(ALICE, method, {"mode": "PULL"} if method == "subscribe" else {})
        statuses += [e.body.status for e in decision.events]
    assert statuses == ["ACTIVE", "CANCELLED", "ACTIVE", "ACTIVE", "CANCELLED"]
    document = json.dumps(OPENAPI["paths"]["/v1/streams/{stream_id}/subscribers"])
    assert '"PAUSED"' in document
    assert "never produces it" in SUBSCRIPTION_STATUS_NOTE
    assert json.dumps(SUBSCRIPTION_STATUS_NOTE) in document


def test_an_explicit_start_cursor_is_kept_and_may_not_pass_the_head() -> None:
    stream = created()
    stream.publish()
    stream.rejects("INVALID_ARGUMENT", ALICE, "subscribe", {"mode": "PULL", "start_cursor": 2})
    stream.do(ALICE, "subscribe", {"mode": "PULL", "start_cursor": 0})
    assert stream.state.subscriptions[addr(ALICE)].start_cursor == 0


def test_resubscribing_updates_mode_filter_and_key_but_not_creation_or_cursor() -> None:
    stream = created()
    stream.do(ALICE, "subscribe", {"mode": "PULL", "start_cursor": 0})
    stream.publish()
    new_filter = {"field": "tags.symbol", "op": "in", "value": ["BTC", "ETH"]}
    decision = stream.do(
        ALICE, "subscribe", {"mode": "PUSH", "filter": new_filter, "start_cursor": 1, "account_key_id": 3}
    )
    sub = stream.state.subscriptions[addr(ALICE)]
    assert (sub.mode, sub.filter, sub.account_key_id) == (DeliveryMode.PUSH, new_filter, 3)
    assert (sub.created_at_sequence, sub.start_cursor) == (0, 0)
    assert decision.reply["created"] is False


@pytest.mark.parametrize("start_cursor", [10**6, -1, "soon", None, 2**63])
def test_start_cursor_on_an_update_is_ignored_not_validated(start_cursor: Any) -> None:
    stream = created()
    stream.do(ALICE, "subscribe", {"mode": "PULL"})
    stream.publish()
    decision = stream.do(ALICE, "subscribe", {"mode": "PUSH", "start_cursor": start_cursor})
    sub = stream.state.subscriptions[addr(ALICE)]
    assert (sub.mode, sub.start_cursor) == (DeliveryMode.PUSH, 0)
    assert decision.reply["created"] is False


def test_an_unknown_mode_is_invalid_argument() -> None:
    created().rejects("INVALID_ARGUMENT", ALICE, "subscribe", {"mode": "CARRIER_PIGEON"})


@pytest.mark.parametrize(
    "bad_filter",
    [
        {},
        {"field": "payload", "op": "eq", "value": 1},
        {"not": {"not": {"not": {"not": {"field": "kind", "op": "exists"}}}}},
    ],
)
def test_an_invalid_filter_is_invalid_filter(bad_filter: dict[str, Any]) -> None:
    created().rejects("INVALID_FILTER", ALICE, "subscribe", {"mode": "PULL", "filter": bad_filter})


@pytest.mark.parametrize("body", [{"mode": "PULL", "colour": "red"}, {"mode": "PULL", "account_key_id": 0}, {}])
def test_a_malformed_subscribe_body_is_invalid_argument(body: dict[str, Any]) -> None:
    created().rejects("INVALID_ARGUMENT", ALICE, "subscribe", body)


def test_the_cap_counts_active_subscriptions_only() -> None:
    stream = created(max_subscribers=1)
    stream.do(ALICE, "subscribe", {"mode": "PULL"})
    stream.rejects("SUBSCRIBER_CAP_REACHED", BOB, "subscribe", {"mode": "PULL"})
    stream.do(ALICE, "subscribe", {"mode": "PUSH"})  # an update is not a new subscription
    stream.do(ALICE, "unsubscribe")
    stream.do(BOB, "subscribe", {"mode": "PULL"})
    stream.rejects("SUBSCRIBER_CAP_REACHED", ALICE, "subscribe", {"mode": "PULL"})  # re-activation counts
    assert stream.state.active_subscribers == 1


def test_private_allowlist_admits_only_allowlisted_addresses_the_owner_included() -> None:
    stream = created(subscription_policy="PRIVATE_ALLOWLIST")
    stream.rejects("SUBSCRIPTION_NOT_ALLOWED", ALICE, "subscribe", {"mode": "PULL"})
    # CIP-7: non-allowlisted addresses MUST fail; the owner is not exempt and lists itself first.
    stream.rejects("SUBSCRIPTION_NOT_ALLOWED", OWNER, "subscribe", {"mode": "PULL"})
    stream.do(OWNER, "allowlist_add", {"address": addr(OWNER)})
    stream.do(OWNER, "subscribe", {"mode": "PULL"})
    stream.do(OWNER, "allowlist_add", {"address": addr(ALICE)})
    stream.do(ALICE, "subscribe", {"mode": "PULL"})
    stream.do(OWNER, "allowlist_remove", {"address": addr(BOB)})  # removing an absent address is harmless
    stream.do(OWNER, "allowlist_remove", {"address": addr(ALICE)})
    stream.rejects("SUBSCRIPTION_NOT_ALLOWED", ALICE, "subscribe", {"mode": "PUSH"})


def test_unsubscribe_cancels_and_emits_subscriber_updated() -> None:
    stream = created()
    stream.do(ALICE, "subscribe", {"mode": "PULL"})
    decision = stream.do(ALICE, "unsubscribe")
    assert decision.events[0].type == "SubscriberUpdated"
    assert decision.events[0].body.status == "CANCELLED"
    assert stream.state.subscriptions[addr(ALICE)].status is SubscriptionStatus.CANCELLED
    assert stream.state.active_subscribers == 0


def test_unsubscribe_without_a_live_subscription_is_subscription_not_found() -> None:
    stream = created()
    stream.rejects("SUBSCRIPTION_NOT_FOUND", ALICE, "unsubscribe")
    stream.do(ALICE, "subscribe", {"mode": "PULL"})
    stream.do(ALICE, "unsubscribe")
    stream.rejects("SUBSCRIPTION_NOT_FOUND", ALICE, "unsubscribe")


def test_resubscribing_after_cancel_reactivates_the_original_subscription() -> None:
    stream = created()
    stream.do(ALICE, "subscribe", {"mode": "PULL"})
    stream.do(ALICE, "unsubscribe")
    stream.publish()
    stream.do(ALICE, "subscribe", {"mode": "PUSH"})
    sub = stream.state.subscriptions[addr(ALICE)]
    assert (sub.status, sub.created_at_sequence) == (SubscriptionStatus.ACTIVE, 0)


# --- owner-only methods -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "body"),
    [
        ("rotate_publisher_key", {"new_key": pub(PUBLISHER_KEYS[1])}),
        ("set_subscription_policy", {"policy": "PRIVATE_ALLOWLIST"}),
        ("allowlist_add", {"address": addr(ALICE)}),
        ("allowlist_remove", {"address": addr(ALICE)}),
        ("announce_key_epoch", {"key_epoch": 1}),
    ],
)
def test_owner_only_methods_are_unauthorized_for_anyone_else(method: str, body: dict[str, Any]) -> None:
    created().rejects("UNAUTHORIZED", ALICE, method, body)


def test_rotation_cuts_over_at_head_plus_1() -> None:
    stream = created()
    stream.publish()
    stream.publish()
    (event,) = stream.do(OWNER, "rotate_publisher_key", {"new_key": pub(PUBLISHER_KEYS[1])}).events
    assert {k: v for k, v in event_fields(event.body).items() if k != "command"} == {
        "stream_id": SID,
        "old_key": pub(PUBLISHER),
        "new_key": pub(PUBLISHER_KEYS[1]),
        "old_signing_key_id": 1,
        "new_signing_key_id": 2,
        "effective_sequence": 3,
    }
    assert key_at_sequence(stream.state, 2).signing_key_id == 1
    assert key_at_sequence(stream.state, 3) == KeyScheduleEntry(2, pub(PUBLISHER_KEYS[1]), 3)
    head = get_head(stream.state)
    assert (head["signing_key_id"], head["publisher_key_hex"]) == (2, pub(PUBLISHER_KEYS[1]).hex())
    stream.rejects("INVALID_SIGNATURE", OWNER, "publish", message(3))  # the old key no longer signs
    stream.publish(message(3, key=PUBLISHER_KEYS[1], signing_key_id=2))


def test_two_rotations_at_one_head_leave_the_newest_key_in_force() -> None:
    stream = created()
    stream.do(OWNER, "rotate_publisher_key", {"new_key": pub(PUBLISHER_KEYS[1])})
    stream.do(OWNER, "rotate_publisher_key", {"new_key": pub(PUBLISHER_KEYS[2])})
    assert key_at_sequence(stream.state, 1).signing_key_id == 3
    stream.publish(message(1, key=PUBLISHER_KEYS[2], signing_key_id=3))


@pytest.mark.parametrize("body", [{"new_key": b"\x01" * 31}, {"new_key": pub(PUBLISHER).hex()}, {}])
def test_a_malformed_new_key_is_invalid_argument(body: dict[str, Any]) -> None:
    created().rejects("INVALID_ARGUMENT", OWNER, "rotate_publisher_key", body)


def test_set_subscription_policy_changes_the_policy() -> None:
    stream = created()
    (event,) = stream.do(OWNER, "set_subscription_policy", {"policy": "PRIVATE_ALLOWLIST"}).events
    assert (event.type, event.body.policy) == ("SubscriptionPolicyChanged", "PRIVATE_ALLOWLIST")
    assert stream.state.policy is SubscriptionPolicy.PRIVATE_ALLOWLIST
    stream.rejects("INVALID_ARGUMENT", OWNER, "set_subscription_policy", {"policy": "SECRET"})


def test_allowlist_add_and_remove_change_the_allowlist() -> None:
    stream = created()
    (event,) = stream.do(OWNER, "allowlist_add", {"address": addr(ALICE)}).events
    assert event.body == AllowlistChanged(stream_id=SID, address=addr(ALICE), added=True)
    assert stream.state.allowlist == {addr(ALICE)}
    stream.do(OWNER, "allowlist_remove", {"address": addr(ALICE)})
    assert stream.state.allowlist == frozenset()
    stream.rejects("INVALID_ARGUMENT", OWNER, "allowlist_add", {"address": "alice"})


def test_announce_key_epoch_records_block_height_and_announcer() -> None:
    stream = created(**PAID)
    (event,) = stream.do(OWNER, "announce_key_epoch", {"key_epoch": 4}).events
    assert event.body == KeyEpochRotated(
        stream_id=SID, key_epoch=4, effective_block_height=event.block_height, announced_by=addr(OWNER))
    assert stream.state.last_key_epoch == 4


def test_key_epochs_are_non_decreasing() -> None:
    stream = created()
    stream.do(OWNER, "announce_key_epoch", {"key_epoch": 4})
    stream.do(OWNER, "announce_key_epoch", {"key_epoch": 4})
    error = stream.rejects("INVALID_ARGUMENT", OWNER, "announce_key_epoch", {"key_epoch": 3})
    assert "non-decreasing" in error.message
    assert "4 or later" in error.message
    stream.rejects("INVALID_ARGUMENT", OWNER, "announce_key_epoch", {"key_epoch": -1})


# --- events and evolve --------------------------------------------------------------------------


def one_event_of_each_type() -> list[Event]:
    stream = created()
    stream.publish()
    stream.do(ALICE, "subscribe", {"mode": "PULL", "filter": {"field": "kind", "op": "eq", "value": "x"}})
    stream.do(OWNER, "rotate_publisher_key", {"new_key": pub(PUBLISHER_KEYS[1])})
    stream.do(OWNER, "set_subscription_policy", {"policy": "PUBLIC"})
    stream.do(OWNER, "allowlist_add", {"address": addr(ALICE)})
    stream.do(OWNER, "announce_key_epoch", {"key_epoch": 1})
    return stream.events


def test_event_bodies_use_the_avro_field_names() -> None:
    events = one_event_of_each_type()
    assert len({e.type for e in events}) == 7
    for event in events:
        schema = json.loads((SCHEMAS / f"{event.type}.v{latest_version(event.type)}.avsc").read_text(encoding="utf-8"))
        names = {f["name"] for f in schema["fields"]} - ENVELOPE_FIELDS
        assert set(event_fields(event.body)) == names, event.type


def test_events_round_trip_through_the_events_codec() -> None:
    for event in one_event_of_each_type():
        assert decode_event(encode_event(event)) == event


@pytest.mark.parametrize(
    "change",
    [
        {"body": {"stream_id": SID, "policy": "PUBLIC"}},  # a dict is not an event body
        {"digest": b"\x00"},
        {"nonce": 0},
        {"caller": "bob"},
        {"reply": ["not", "an", "object"]},
    ],
)
def test_an_event_with_a_bad_envelope_or_body_is_refused(change: dict[str, Any]) -> None:
    event = one_event_of_each_type()[4]
    assert event.type == "SubscriptionPolicyChanged"
    with pytest.raises(WatchtowerError) as info:
        dataclasses.replace(event, **change)
    assert info.value.code == "INVALID_ARGUMENT"


def test_evolve_refuses_events_that_cannot_belong_to_the_state() -> None:
    """Another stream, a second creation, a publish before creation, bad types, gaps, duplicates."""
    events = one_event_of_each_type()
    created_state = rebuild(events[:1])
    cases = [
        (StreamState.initial("elsewhere"), events[0]),  # another stream
        (created_state, events[0]),  # a second creation
        (StreamState.initial(SID), events[1]),  # a publish before creation
        (created_state, rebody(events[1], sequence="one")),
        (created_state, rebody(events[1], sequence=2)),  # a gap
        (rebuild(events[:2]), events[1]),  # the same publish twice
        (
            StreamState.initial(SID),
            dataclasses.replace(
                events[0], body=dataclasses.replace(
                    events[0].body, config=dataclasses.replace(events[0].body.config, stream_id="x"))
            ),
        ),
    ]
    for state, event in cases:
        with pytest.raises(WatchtowerError) as info:
            evolve(state, event)
        assert info.value.code == "MALFORMED_RECORD"


def test_the_state_holds_no_per_message_data() -> None:
    stream = created()
    marker = b"PAYLOAD-MARKER-" * 10
    stream.publish(message(1, payload=marker))
    small = len(pickle.dumps(stream.state))
    for _ in range(30):
        stream.publish(message(stream.state.head + 1, payload=marker))
    assert marker not in pickle.dumps(stream.state)
    assert len(pickle.dumps(stream.state)) - small < 16  # only the head grew (the digest has a fixed size)


# --- read side ----------------------------------------------------------------------------------


def test_reads_on_an_uncreated_stream_are_stream_not_found() -> None:
    for read in (get_head, lambda s: get_since_range(s, 0, 10), lambda s: key_at_sequence(s, 1), key_history):
        with pytest.raises(WatchtowerError) as info:
            read(StreamState.initial(SID))
        assert info.value.code == "STREAM_NOT_FOUND"


def test_get_head_describes_the_stream() -> None:
    stream = created(ring_buffer_capacity=2, subscription_policy="PRIVATE_ALLOWLIST")
    for _ in range(3):
        stream.publish()
    stream.do(OWNER, "allowlist_add", {"address": addr(OWNER)})
    stream.do(OWNER, "subscribe", {"mode": "PULL"})
    assert get_head(stream.state) == {
        "stream_id": SID,
        "owner": addr(OWNER),
        "head_sequence": 3,
        "floor_sequence": 2,
        "head": 3,
        "floor": 2,
        "capacity": 2,
        "signing_key_id": 1,
        "publisher_key": pub(PUBLISHER).hex(),
        "publisher_key_hex": pub(PUBLISHER).hex(),
        "policy": "PRIVATE_ALLOWLIST",
        "access_mode": "OPEN",
        "max_subscribers": 10_000,
        "active_subscribers": 1,
        "last_key_epoch": None,
        "replay_price_per_event_cby": 0,
        "ingest_fail_count": 0,
        "icrc77:capable": True,
        "icrc77:pricing": {"perEvent": 0, "currency": "CBY"},
        "icrc77_capable": True,
        "icrc77_pricing": {"perEvent": 0, "currency": "CBY"},
    }


def test_get_since_range_follows_the_window_rules() -> None:
    stream = created(ring_buffer_capacity=3)
    for _ in range(5):
        stream.publish()
    assert get_since_range(stream.state, 2, 2) == range(3, 5)
    assert get_since_range(stream.state, 5, 10) == range(6, 6)
    for cursor, limit, code in [(1, 10, "CURSOR_TOO_OLD"), (2, 0, "LIMIT_EXCEEDED"), (2, 501, "LIMIT_EXCEEDED")]:
        with pytest.raises(WatchtowerError) as info:
            get_since_range(stream.state, cursor, limit)
        assert info.value.code == code


def test_key_history_lists_every_key_in_order() -> None:
    stream = created()
    signer, key_id = PUBLISHER, 1
    for new in PUBLISHER_KEYS[1:]:
        stream.publish(message(stream.state.head + 1, key=signer, signing_key_id=key_id))
        stream.do(OWNER, "rotate_publisher_key", {"new_key": pub(new)})
        signer, key_id = new, key_id + 1
    page = key_history(stream.state, 2, 2)
    assert [(e.signing_key_id, e.effective_sequence) for e in page.entries] == [(2, 2), (3, 3)]
    assert page.next_from_signing_key_id == 4


def test_subscribers_are_ordered_by_address() -> None:
    stream = created()
    for key in (BOB, ALICE, OWNER):
        stream.do(key, "subscribe", {"mode": "PULL"})
    stream.do(BOB, "unsubscribe")
    everyone = [s.subscriber for s in subscribers(stream.state)]
    assert everyone == sorted([addr(ALICE), addr(BOB), addr(OWNER)])
    assert addr(BOB) not in [s.subscriber for s in subscribers(stream.state, active_only=True)]


# --- state digest and the persistent map ---------------------------------------------------------


def test_state_digest_changes_with_every_event_and_matches_a_rebuild() -> None:
    stream = created()
    digests = {state_digest(StreamState.initial(SID)), state_digest(stream.state)}
    for _ in range(3):
        stream.publish()
        digests.add(state_digest(stream.state))
    assert len(digests) == 5
    assert state_digest(rebuild(stream.events)) == state_digest(stream.state)


def test_state_digest_ignores_map_insertion_order() -> None:
    subs = [Subscription(f"0x{i:064x}", DeliveryMode.PULL, SubscriptionStatus.ACTIVE, 0, 0) for i in range(100)]
    forward = StreamState(SID, subscriptions=FrozenMap((s.subscriber, s) for s in subs))
    backward = StreamState(SID, subscriptions=FrozenMap((s.subscriber, s) for s in reversed(subs)))
    assert forward == backward
    assert state_digest(forward) == state_digest(backward)
    assert state_digest(forward) != state_digest(
        StreamState(SID, subscriptions=FrozenMap((s.subscriber, s) for s in subs[1:]))
    )


def test_frozen_map_set_is_copy_on_write() -> None:
    base: FrozenMap[int] = FrozenMap({f"k{i}": i for i in range(200)})
    changed = base.set("k5", -5).set("new", 1)
    assert (base["k5"], len(base), "new" in base) == (5, 200, False)
    assert (changed["k5"], len(changed), changed["new"]) == (-5, 201, 1)
    assert pickle.loads(pickle.dumps(changed)) == changed  # noqa: S301 - our own bytes, just written
    assert base.get(7) is None  # type: ignore[call-overload]


# --- properties ---------------------------------------------------------------------------------

ACTORS = [OWNER, ALICE, BOB]
ALLOWED_CODES = {
    "INVALID_SIGNATURE",
    "NONCE_REPLAYED",
    "STREAM_NOT_FOUND",
    "STREAM_ALREADY_EXISTS",
    "UNAUTHORIZED",
    "STALE_SEQUENCE",
    "INVALID_FILTER",
    "INVALID_ARGUMENT",
    "SUBSCRIBER_CAP_REACHED",
    "SUBSCRIPTION_NOT_ALLOWED",
    "SUBSCRIPTION_NOT_FOUND",
}
KINDS = [
    "create_stream",
    "publish",
    "publish",
    "publish",
    "subscribe",
    "unsubscribe",
    "rotate_publisher_key",
    "set_subscription_policy",
    "allowlist_add",
    "allowlist_remove",
    "announce_key_epoch",
    "replay",
]
actions = st.lists(
    st.tuples(
        st.sampled_from(KINDS),
        st.sampled_from([0, 0, 0, 1, 2]),  # mostly the owner, so owner-only methods get through
        st.sampled_from(["next", "next", "next", "next", "next", "same", "skip", "stale"]),
        st.sampled_from([0, 0, 0, 0, -1, 1]),  # mostly the right sequence
        st.booleans(),
        st.integers(0, 3),
    ),
    max_size=40,
)


def materialize(stream: Stream, action: tuple[Any, ...], sent: list[Command]) -> Command:
    kind, who, nonce_mode, offset, flag, param = action
    if kind == "replay" and sent:
        return sent[param * 7 % len(sent)]
    # Publishes come from the owner unless the flag asks for a stranger.
    key = OWNER if kind == "publish" and not flag else ACTORS[who]
    record = stream.state.callers.get(addr(key))
    last = 0 if record is None else record.last_nonce
    nonce = {"next": last + 1, "same": max(1, last), "skip": last + 3, "stale": max(1, last - 1)}[nonce_mode]
    schedule = stream.state.key_schedule
    current_id = 1 if schedule is None else schedule.current.signing_key_id
    signer = (
        PUBLISHER_KEYS[0]
        if schedule is None
        else next(k for k in PUBLISHER_KEYS if pub(k) == schedule.current.public_key)
    )
    body: dict[str, Any]
    if kind == "create_stream":
        body = {"publisher_key": pub(PUBLISHER_KEYS[param]), "max_subscribers": 2, "ring_buffer_capacity": 3}
        if flag:
            body["subscription_policy"] = "PRIVATE_ALLOWLIST"
    elif kind == "publish":
        wrong = PUBLISHER_KEYS[(PUBLISHER_KEYS.index(signer) + 1) % 4] if param == 3 else signer
        body = message(max(1, stream.state.head + 1 + offset), key=wrong, signing_key_id=current_id)
    elif kind == "subscribe":
        body = {
            "mode": "BOGUS" if (param, offset) == (3, -1) else ["PUSH", "PULL", "PUSH_WITH_PULL_FALLBACK"][param % 3]
        }
        if flag:
            body["filter"] = (
                {} if (param, offset) == (0, -1) else {"field": "tags.n", "op": "gte", "value": param + 0.5}
            )
    elif kind == "rotate_publisher_key":
        body = {"new_key": pub(PUBLISHER_KEYS[param])}
    elif kind == "set_subscription_policy":
        body = {"policy": "PRIVATE_ALLOWLIST" if flag else "PUBLIC"}
    elif kind in ("allowlist_add", "allowlist_remove"):
        body = {"address": addr(ACTORS[param % len(ACTORS)])}
    elif kind == "announce_key_epoch":
        body = {"key_epoch": (stream.state.last_key_epoch or 0) + param - 1}
    else:  # unsubscribe, or a replay before anything was sent
        body = {}
        kind = "unsubscribe"
    return stream.command(key, kind, body, nonce)


def attempt(stream: Stream, cmd: Command) -> Decision | WatchtowerError:
    """The decision, or the error decide raised (so assertions stay outside except blocks)."""
    try:
        return stream.submit(cmd)
    except WatchtowerError as exc:
        return exc


CREATE = ("create_stream", 0, "next", 0, False, 0)


@settings(PROPERTY, max_examples=120)
@given(st.sampled_from([True, True, True, False]), actions)
def test_decide_evolve_properties_over_random_command_sequences(
    start_created: bool, plan: list[tuple[Any, ...]]
) -> None:
    stream = Stream()
    sent: list[Command] = []
    # Most plans start with a creation, so the other methods get past STREAM_NOT_FOUND.
    plan = [CREATE, *plan] if start_created else plan
    accepted: set[bytes] = set()
    publishes = 0
    for action in plan:
        cmd = materialize(stream, action, sent)
        sent.append(cmd)
        # A command is identified by its signing bytes; a publish by the caller it names and its
        # signed message (its envelope signature is not what authorises it, so a new envelope
        # around an applied message is the same publish).
        digest = publish_identity(cmd) if cmd.method == "publish" else command_digest(cmd)
        before = stream.state
        outcome = attempt(stream, cmd)
        if isinstance(outcome, WatchtowerError):
            assert outcome.code in ALLOWED_CODES, outcome
            # Refusing an applied command again: by its nonce, or for a publish by its sequence.
            assert outcome.code in ("NONCE_REPLAYED", "STALE_SEQUENCE") or digest not in accepted
            assert stream.state is before
        elif digest in accepted:
            # (c) A command that was accepted once never produces events again.
            assert outcome.events == ()
            assert outcome.reply["duplicate"] is True
            assert stream.state is before
        else:
            assert len(outcome.events) == 1
            assert outcome.reply == dict(outcome.events[0].reply)
            accepted.add(digest)
            publishes += outcome.events[0].type == "StreamMessagePublished"

    # (a) Folding evolve over the log (through its JSON form) rebuilds exactly the live state.
    rebuilt = rebuild(stream.events)
    assert rebuilt == stream.state
    assert state_digest(rebuilt) == state_digest(stream.state)
    # (b) Sequences are gapless: head = accepted publishes, and they were exactly 1..head.
    sequences = [e.body.sequence for e in stream.events if e.type == "StreamMessagePublished"]
    assert stream.state.head == publishes == len(sequences)
    assert sequences == list(range(1, stream.state.head + 1))
    # Replay protection, seen from the log: each caller's nonces strictly increase (publishes
    # excepted: their nonces are not replay state, their sequences are).
    commands = [e for e in stream.events if e.type != "StreamMessagePublished"]
    for caller in {e.caller for e in commands}:
        nonces = [e.nonce for e in commands if e.caller == caller]
        assert nonces == sorted(set(nonces))
    # Every publish event names the owner as its caller.
    assert all(e.caller == stream.state.owner for e in stream.events if e.type == "StreamMessagePublished")


def publish_identity(cmd: Command) -> bytes:
    """The caller a publish names and the message it carries (b"" when that is not a valid message)."""
    try:
        msg = StreamMessage.from_json_dict(cmd.body)
    except WatchtowerError:
        return b""
    return cmd.caller.encode() + publish_digest(message_signing_bytes(msg), msg.publisher_sig)


@settings(PROPERTY, max_examples=60)
@given(st.lists(st.integers(-2, 2), min_size=1, max_size=25))
def test_head_counts_accepted_publishes_whatever_sequences_are_attempted(offsets: list[int]) -> None:
    stream = created(ring_buffer_capacity=4)
    accepted = 0
    for offset in offsets:
        target = stream.state.head + 1 + offset
        if target < 1:
            continue
        outcome = attempt(stream, stream.command(OWNER, "publish", message(target)))
        if offset == 0:
            assert isinstance(outcome, Decision)
            accepted += 1
        elif target == stream.state.head:
            # The very message already at head again (messages here depend on the sequence only).
            assert isinstance(outcome, Decision)
            assert (outcome.events, outcome.messages, outcome.reply["duplicate"]) == ((), (), True)
        else:
            assert isinstance(outcome, WatchtowerError)
            assert outcome.code == "STALE_SEQUENCE"
    assert stream.state.head == accepted
    assert stream.state.floor == max(1, accepted - 3)


@settings(PROPERTY, max_examples=60)
@given(st.lists(st.sampled_from(["publish", "subscribe", "announce"]), min_size=1, max_size=10), st.data())
def test_a_replayed_command_never_produces_events(methods: list[str], data: st.DataObject) -> None:
    stream = created()
    history: list[Command] = [stream.command(OWNER, "create_stream", {"publisher_key": pub(PUBLISHER)}, nonce=1)]
    for method in methods:
        if method == "publish":
            cmd = stream.command(OWNER, "publish", message(stream.state.head + 1))
        elif method == "subscribe":
            cmd = stream.command(OWNER, "subscribe", {"mode": "PULL"})
        else:
            cmd = stream.command(OWNER, "announce_key_epoch", {"key_epoch": len(history)})
        stream.submit(cmd)
        history.append(cmd)
    old = data.draw(st.sampled_from(history))
    before = stream.state
    outcome = attempt(stream, old)
    last_owner_command = next(c for c in reversed(history) if c.method != "publish")
    last_publish = next((c for c in reversed(history) if c.method == "publish"), None)
    if old is last_owner_command:
        assert outcome == Decision((), {**stream.state.callers[addr(OWNER)].last_reply, "duplicate": True})
    elif old is last_publish:
        # A publish's replay protection is its sequence; the message at head is a retry.
        assert isinstance(outcome, Decision)
        assert (outcome.events, outcome.reply["duplicate"]) == ((), True)
    else:
        assert isinstance(outcome, WatchtowerError)
        assert outcome.code == ("STALE_SEQUENCE" if old.method == "publish" else "NONCE_REPLAYED")
    assert stream.state is before


def test_state_digest_covers_every_field() -> None:
    stream = created()
    stream.do(ALICE, "subscribe", {"mode": "PULL"})
    base = stream.state
    assert base.config is not None
    assert base.key_schedule is not None
    variants: dict[str, Any] = {
        "stream_id": "other",
        "created": False,
        "owner": addr(BOB),
        "config": dataclasses.replace(base.config, max_subscribers=7),
        "head": 9,
        "key_schedule": base.key_schedule.rotate(pub(PUBLISHER_KEYS[1]), head_sequence=0),
        "subscriptions": FrozenMap(),
        "active_subscribers": 5,
        "allowlist": frozenset({addr(BOB)}),
        "last_key_epoch": 3,
        "callers": base.callers.set(addr(BOB), base.callers[addr(ALICE)]),
        "last_publish_digest": bytes(32),
        "replay_price_per_event_cby": 3,
        "replay_orders": FrozenMap({addr(BOB): ReplayOrdered(
            stream_id=SID, replay_id=1, namespace=SID, requester=addr(BOB), from_sequence=1, to_sequence=None,
            first=1, end_exclusive=1, end_id=0, filter=None, skip=None, memo_hex="", price_cby=1)}),
        "replays": FrozenMap({"1": (addr(BOB), "registered")}),
        "ingest_fail_count": 2,
        "last_failed_tick": 5,
        "keyloads": Keyloads().with_branch("pro", KeyloadState(b"\x07" * 16, 0, True)),
    }
    assert set(variants) == {f.name for f in dataclasses.fields(StreamState)}
    for name, value in variants.items():
        assert state_digest(dataclasses.replace(base, **{name: value})) != state_digest(base), name


@PROPERTY
@given(st.sampled_from(sorted(METHODS)), st.dictionaries(st.text(max_size=12), json_values, max_size=5), st.booleans())
def test_decide_raises_only_watchtower_errors_whatever_the_body(method: str, body: dict[str, Any], fresh: bool) -> None:
    stream = Stream() if fresh else created(**PAID)
    if not fresh:
        stream.publish(message(1, ciphertext=True))
    with contextlib.suppress(WatchtowerError):
        cmd = stream.command(OWNER if len(body) % 2 else ALICE, method, body)
        stream.submit(cmd)


def test_a_forged_in_ceiling_nonce_does_not_truncate_the_genuine_log_at_a_rebuild() -> None:
    """Events carry no caller signature: a forged event with a high nonce (still under its block's
    ceiling) must not make the genuine events after it refused, or a rebuild would lose them."""
    stream = created()
    stream.publish()
    forged = dataclasses.replace(stream.events[-1], nonce=10**6,
                                 body=SubscriptionPolicyChanged(stream_id=SID, policy="PUBLIC"))
    stream.publish()
    stream.publish()
    stream.do(OWNER, "announce_key_epoch", {"key_epoch": 0})
    log = [*stream.events[:2], forged, *stream.events[2:]]
    rebuilt = rebuild(log)
    assert rebuilt.head == stream.state.head == 3
    # The caller record follows the log's latest event, so the owner's next nonce still works.
    assert rebuilt.callers[addr(OWNER)].last_nonce == stream.state.callers[addr(OWNER)].last_nonce


def rebody(event: Event, **changes: Any) -> Event:
    """`event` with some of its body's fields changed (a forged record, for the rules to refuse)."""
    return dataclasses.replace(event, body=dataclasses.replace(event.body, **changes))
