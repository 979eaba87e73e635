"""The rules a record must keep before the read-side views fold it (pure).

The log may hold records no writer of ours produced (the broker of a local stack has no
authentication yet) or that contradict what the views already hold. The projection folds a record
only if it keeps every rule here; otherwise it is quarantined (see `projections.quarantine`):
counted, logged with its position and skipped, and the views stay what they were.

Every check is a function of the record and the views alone, never of the clock or of arrival
timing, so the live projection and an offline rebuild refuse exactly the same records.

- Events (`check_*`): raise `RuleBrokenError` with the reason.
- Messages-topic records (`message_verdict`): ACCEPT (index it), SKIP (a redelivery of a record
  already decided), DEFER (its publish event is not folded yet, so the key in force at its sequence
  is not known yet: decide it when the event arrives) or QUARANTINE.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from watchtower.protocol.addresses import require_address
from watchtower.protocol.enums import DeliveryMode, SubscriptionPolicy, SubscriptionStatus
from watchtower.protocol.errors import MalformedRecordError, WatchtowerError
from watchtower.protocol.key_schedule import KeySchedule
from watchtower.protocol.message import StreamMessage
from watchtower.protocol.signing import verify_with_schedule
from watchtower.protocol.validation import require_int, require_text

ACCEPT: Final = "accept"
SKIP: Final = "skip"
DEFER: Final = "defer"
QUARANTINE: Final = "quarantine"

Verifier = Callable[[StreamMessage, KeySchedule], bool]


class RuleBrokenError(MalformedRecordError):
    """A record that must not be folded; the message says which rule it breaks."""


def broken(reason: str) -> RuleBrokenError:
    return RuleBrokenError(reason)


def check_subscriber(body: Mapping[str, Any]) -> None:
    """A SubscriberUpdated body holds a well-formed subscription."""
    try:
        require_text(body["subscriber"], "subscriber")
        DeliveryMode(body["mode"])
        SubscriptionStatus(body["status"])
        require_int(body["created_at_sequence"], "created_at_sequence")
        require_int(body["start_cursor"], "start_cursor")
    except (ValueError, WatchtowerError) as exc:
        raise broken(f"SubscriberUpdated body is malformed: {exc}") from None


def check_policy(body: Mapping[str, Any]) -> None:
    try:
        SubscriptionPolicy(body["policy"])
    except ValueError:
        raise broken(f"SubscriptionPolicyChanged names no policy: {body['policy']!r}") from None


def check_allowlist(body: Mapping[str, Any]) -> None:
    try:
        require_address(body["address"], "address")
    except WatchtowerError as exc:
        raise broken(f"AllowlistChanged: {exc.message}") from None
    if not isinstance(body["added"], bool):
        raise broken("AllowlistChanged: added must be true or false")


def check_key_epoch(body: Mapping[str, Any]) -> None:
    try:
        require_int(body["key_epoch"], "key_epoch")
    except WatchtowerError as exc:
        raise broken(f"KeyEpochRotated: {exc.message}") from None


def check_rotation(schedule: KeySchedule, head: int, body: Mapping[str, Any]) -> bool:
    """True to fold a PublisherKeyRotated, False for a redelivery of the one already folded.

    The new key must be the next id, take effect at head + 1 (the head this projection has folded,
    which is the writer's head when it rotated), and be a 32-byte key.
    """
    new_id, current = body["new_signing_key_id"], schedule.current.signing_key_id
    if not isinstance(new_id, int) or isinstance(new_id, bool):
        raise broken(f"PublisherKeyRotated: new_signing_key_id {new_id!r} is not an integer")
    if new_id <= current:
        entry = schedule.entries[new_id - 1] if new_id >= 1 else None
        if (entry is not None and entry.public_key == body["new_key"]
                and entry.effective_sequence == body["effective_sequence"]):
            return False
        raise broken(f"PublisherKeyRotated: key {new_id} already exists with another key or cut-over")
    if new_id != current + 1 or body["old_signing_key_id"] != current:
        raise broken(f"PublisherKeyRotated: key {new_id} does not follow the current key {current}")
    if body["effective_sequence"] != head + 1:
        raise broken(f"PublisherKeyRotated: effective_sequence {body['effective_sequence']!r} is not head + 1 "
                     f"(head {head})")
    new_key = body["new_key"]
    if not isinstance(new_key, bytes) or len(new_key) != 32:
        raise broken("PublisherKeyRotated: new_key is not a 32-byte ed25519 key")
    return True


def check_published(stream_id: str, body: Mapping[str, Any], message: StreamMessage, schedule: KeySchedule,
                    head: int, event_offset: int | None, offset: int | None) -> bool:
    """True to fold a StreamMessagePublished, False for a redelivery of one already folded.

    Its message must be for this stream, carry the event's sequence, be exactly head + 1, and verify
    (payload hash and signature) under the key in force at that sequence.
    """
    sequence = body["sequence"]
    if message.stream_id != stream_id or message.sequence != sequence:
        raise broken(f"StreamMessagePublished for {stream_id}#{sequence!r} carries message "
                     f"{message.stream_id}#{message.sequence}")
    if sequence <= head and (offset is None or event_offset is None or offset <= event_offset):
        return False  # Faust redelivers a tail after a rebalance: already folded
    if sequence != head + 1:
        raise broken(f"sequence {sequence} does not follow head {head}")
    if not verify_with_schedule(message, schedule):
        raise broken(f"message {stream_id}#{sequence} does not verify under the key in force at its sequence "
                     f"(signing key {message.signing_key_id})")
    return True


def message_verdict(key: str, offset: int, message: StreamMessage, view: Mapping[str, Any] | None,
                    published: int, located: Mapping[str, Any] | None,
                    verify: Verifier = verify_with_schedule) -> tuple[str, str]:
    """What to do with a messages-topic record: (ACCEPT | SKIP | DEFER | QUARANTINE, reason).

    `published` is the head the events have reached (publish events are verified when folded);
    `located` is the stream's offsets entry (``head``: last indexed sequence, ``head_offset``).
    The verdict and its reason do not depend on whether the record or its publish event was read
    first (`DEFER` only postpones it). The record is indexed only if it is the first record, in log
    order, that holds a verifying message for the next sequence; the sequence header is never read.
    """
    if message.stream_id != key:
        return QUARANTINE, f"the record is keyed {key!r} but holds a message of stream {message.stream_id!r}"
    sequence = message.sequence
    if located is not None and sequence <= int(located["head"]):
        if offset <= int(located["head_offset"]):
            return SKIP, "already decided"
        # The reason names nothing that depends on when the record was decided (the rebuild must
        # give the same one), so not the indexed head at that moment.
        return QUARANTINE, f"sequence {sequence} is already indexed; this record repeats or forges it"
    if view is None or sequence > published:
        return DEFER, "its publish event is not folded yet"
    if not verify(message, KeySchedule.from_dict(view["key_schedule"])):
        return QUARANTINE, (f"message {key}#{sequence} does not verify under the key in force at its sequence "
                            f"(signing key {message.signing_key_id})")
    return ACCEPT, "verified"
