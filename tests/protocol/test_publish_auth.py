"""A publish is authorised by its message signature alone (docs/publish-auth.md): one test per threat.

The command envelope of a publish (caller signature, nonce) is not what authorises it, so every
test here forges or replays envelopes freely and checks that the message signature, the sequence
and the stream id still hold every line: nothing is applied twice, nothing signed by another key
or for another stream is applied, and no publish moves anyone's replay protection.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import nacl.signing
import pytest
from test_stream_actor import (
    ALICE,
    OWNER,
    PUBLISHER,
    PUBLISHER_KEYS,
    SID,
    Stream,
    addr,
    created,
    message,
    pub,
    rebuild,
)

from watchtower.protocol.command_auth import nonce_ceiling
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.signed_command import Command, sign_command
from watchtower.protocol.stream.actor import Decision, decide

FORGER = nacl.signing.SigningKey(b"\x09" * 32)


def envelope(body: dict[str, Any], *, nonce: int = 1, key: nacl.signing.SigningKey = OWNER, stream_id: str = SID,
             signature: bytes | None = None) -> Command:
    """A publish command around `body`, signed by `key`, or carrying `signature` instead."""
    cmd = sign_command(key, "publish", stream_id, nonce, body)
    return cmd if signature is None else dataclasses.replace(cmd, signature=signature)


def claiming_owner(body: dict[str, Any], *, nonce: int = 1) -> Command:
    """What a forger who never held the owner's key can send: the owner's address, no valid signature."""
    return Command("publish", SID, pub(OWNER), nonce, body, bytes(64))


# --- What authorises a publish --------------------------------------------------------------------


def test_a_publish_is_authorised_by_its_message_signature_not_its_command_signature() -> None:
    stream = created()
    decision = stream.submit(claiming_owner(message(1)))
    assert decision.reply["sequence"] == 1
    assert [m.sequence for m in decision.messages] == [1]
    assert decision.events[0].caller == addr(OWNER)  # the owner who delegated to the key


def test_a_valid_owner_command_signature_does_not_rescue_a_message_the_publisher_key_did_not_sign() -> None:
    stream = created()
    # The owner's account key is not the publisher key: signing the message with it proves nothing.
    error = stream.rejects_command("INVALID_SIGNATURE", envelope(message(1, key=OWNER)))
    assert "signing key 1" in error.message


def test_a_forger_without_the_publisher_key_is_invalid_signature() -> None:
    stream = created()
    stream.rejects_command("INVALID_SIGNATURE", claiming_owner(message(1, key=FORGER)))
    # Altering any signed field of a genuine message breaks the signature as well.
    stream.rejects_command("INVALID_SIGNATURE", claiming_owner({**message(1), "kind": "forged"}))
    stream.rejects_command("INVALID_SIGNATURE", claiming_owner({**message(1), "tags": {"symbol": "ETH", "n": 2}}))


def test_a_command_naming_someone_else_as_caller_is_unauthorized_before_the_body_is_read() -> None:
    stream = created()
    # Alice holds the publisher key's message, but names herself: publishing is the owner's right,
    # delegated to the key, and the envelope must say so. Her garbage body is never looked at.
    for body in (message(1), {"junk": True}):
        error = stream.rejects_command("UNAUTHORIZED", envelope(body, key=ALICE))
        assert addr(ALICE) in error.message


# --- Replay and duplicates ------------------------------------------------------------------------


def test_a_replayed_publish_is_stale_sequence_and_never_applied_twice() -> None:
    stream = created()
    first = envelope(message(1), nonce=5)
    stream.submit(first)
    stream.submit(envelope(message(2), nonce=6))
    # The very command again, in a new envelope, or re-signed by a forger: the sequence refuses it.
    for replay in (first, envelope(message(1), nonce=99), claiming_owner(message(1), nonce=7)):
        error = stream.rejects_command("STALE_SEQUENCE", replay)
        assert error.details == {"expected_sequence": 1, "head": 2}
    assert stream.state.head == 2


def test_an_exact_retry_of_the_last_publish_returns_the_original_reply_and_nothing_else() -> None:
    stream = created()
    cmd = envelope(message(1), nonce=3)
    first = stream.submit(cmd)
    before = stream.state
    for retry in (cmd, envelope(message(1), nonce=4), claiming_owner(message(1), nonce=1)):
        assert stream.submit(retry) == Decision((), {**first.reply, "duplicate": True}, ())
        assert stream.state is before


def test_the_last_publish_stays_retryable_across_other_owner_commands_and_a_rebuild() -> None:
    stream = created()
    cmd = envelope(message(1), nonce=2)
    first = stream.submit(cmd)
    stream.do(OWNER, "announce_key_epoch", {"key_epoch": 1})
    stream.do(OWNER, "set_subscription_policy", {"policy": "PUBLIC"})
    assert stream.submit(cmd).reply == {**first.reply, "duplicate": True}
    assert decide(rebuild(stream.events), cmd, block_height=999).reply == {**first.reply, "duplicate": True}


def test_another_message_at_the_head_sequence_is_stale_not_a_duplicate() -> None:
    stream = created()
    stream.publish(message(1))
    stream.rejects("STALE_SEQUENCE", OWNER, "publish", message(1, payload=b'{"px": 3}'))
    # The same signed bytes under a signature that is not the applied one: not that message either.
    stream.rejects("STALE_SEQUENCE", OWNER, "publish", {**message(1), "publisher_sig_hex": "00" * 64})


def test_a_duplicate_answer_needs_an_intact_payload() -> None:
    stream = created()
    stream.publish(message(1))
    tampered = {**message(1), "payload_inline_hex": b'{"px": 666}'.hex()}
    stream.rejects("INVALID_SIGNATURE", OWNER, "publish", tampered)


# --- Rotation -------------------------------------------------------------------------------------


def rotated_at_2() -> Stream:
    stream = created()
    stream.publish()
    stream.publish()
    stream.do(OWNER, "rotate_publisher_key", {"new_key": pub(PUBLISHER_KEYS[1])})
    return stream


def test_after_a_rotation_the_old_key_cannot_sign_the_next_sequence() -> None:
    stream = rotated_at_2()
    # Signed with the old key, naming the old key id: that id is not in force from sequence 3.
    error = stream.rejects_command("INVALID_SIGNATURE", envelope(message(3), nonce=50))
    assert "key 2 is in force from sequence 3" in error.message
    # Naming the new key id does not help a signature made with the old key.
    stream.rejects_command("INVALID_SIGNATURE", envelope(message(3, signing_key_id=2), nonce=51))
    stream.submit(envelope(message(3, key=PUBLISHER_KEYS[1], signing_key_id=2), nonce=52))
    assert stream.state.head == 3


def test_a_message_signed_before_the_rotation_for_an_old_sequence_is_stale() -> None:
    stream = rotated_at_2()
    stream.rejects_command("STALE_SEQUENCE", envelope(message(2, payload=b'{"px": 9}'), nonce=60))


def test_a_message_signed_before_the_rotation_but_sent_after_it_is_refused() -> None:
    stream = created()
    stream.publish()
    in_flight = message(2)  # signed by key 1 for sequence 2, not yet sent
    stream.do(OWNER, "rotate_publisher_key", {"new_key": pub(PUBLISHER_KEYS[1])})
    stream.rejects_command("INVALID_SIGNATURE", claiming_owner(in_flight))


# --- Other streams --------------------------------------------------------------------------------


def test_a_message_for_one_stream_is_refused_on_another_even_under_the_same_publisher_key() -> None:
    other = Stream("other")
    other.do(OWNER, "create_stream", {"publisher_key": pub(PUBLISHER)})  # the same publisher key
    for_prices = message(1)
    # Sent to the other stream as it is: the signed stream id differs.
    other.rejects_command("INVALID_ARGUMENT", envelope(for_prices, stream_id="other"))
    # With its stream id rewritten: the signature no longer verifies.
    other.rejects_command("INVALID_SIGNATURE", envelope({**for_prices, "stream_id": "other"}, stream_id="other"))
    # Addressed to the other stream's aggregate but naming this one: routed wrong, refused.
    with pytest.raises(WatchtowerError) as info:
        decide(other.state, envelope(for_prices), block_height=1)
    assert info.value.code == "INVALID_ARGUMENT"
    assert other.state.head == 0


# --- Nonces ---------------------------------------------------------------------------------------


def test_a_publish_never_moves_the_callers_replay_protection() -> None:
    stream = created()
    stream.do(OWNER, "announce_key_epoch", {"key_epoch": 1}, nonce=10)
    record = stream.state.callers[addr(OWNER)]
    # A forged envelope with the highest nonce the clock allows (the lock-out attempt) ...
    stream.submit(claiming_owner(message(1), nonce=nonce_ceiling(stream.height + 1)))
    # ... and a publish with a nonce far below the owner's last one: both leave the record alone.
    stream.submit(envelope(message(2), nonce=1))
    assert stream.state.callers[addr(OWNER)] is record
    assert rebuild(stream.events).callers[addr(OWNER)] == record
    # So the owner's next command with nonce 11 still works, and its old ones are still replays.
    stream.do(OWNER, "announce_key_epoch", {"key_epoch": 2}, nonce=11)
    stream.rejects("NONCE_REPLAYED", OWNER, "announce_key_epoch", {"key_epoch": 3}, nonce=10)


def test_the_last_owner_command_stays_idempotent_across_publishes() -> None:
    stream = created()
    cmd = stream.command(OWNER, "allowlist_add", {"address": addr(ALICE)}, nonce=7)
    first = stream.submit(cmd)
    stream.publish()
    stream.publish()
    assert stream.submit(cmd) == Decision((), {**first.reply, "duplicate": True})


def test_a_publish_nonce_beyond_the_clock_ceiling_is_invalid_argument() -> None:
    stream = created()
    too_far = nonce_ceiling(stream.height + 1) + 1
    error = stream.rejects_command("INVALID_ARGUMENT", envelope(message(1), nonce=too_far))
    assert "ahead of the network clock" in error.message


def test_a_publish_to_an_uncreated_stream_is_stream_not_found() -> None:
    Stream().rejects_command("STREAM_NOT_FOUND", claiming_owner(message(1)))
