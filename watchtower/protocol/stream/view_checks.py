"""The rules a record must keep before the read-side views fold it (pure).

The log may hold records no writer of ours produced (the broker of a local stack has no
authentication yet) or that contradict what the views already hold. The projection folds a record
only if it keeps every rule here; otherwise it is quarantined (see `projections.quarantine`):
counted, logged with its position and skipped, and the views stay what they were.

Every check is a function of the record and the views alone, never of the clock or of arrival
timing, so the live projection and an offline rebuild refuse exactly the same records.

- Events (`check_*`): raise `RuleBrokenError` with the reason. The writer's `evolve` checks the
  rest of each event (the projection folds with it too, see `views`).
- Messages-topic records (`message_verdict`): ACCEPT (index it), SKIP (a redelivery of a record
  already decided), DEFER (its publish event is not folded yet, so neither its reference nor the
  key in force at its sequence is known yet: decide it when the event arrives) or QUARANTINE.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from watchtower.protocol.errors import MalformedRecordError
from watchtower.protocol.events import PublisherKeyRotated, StreamMessagePublished
from watchtower.protocol.signing import verify_with_schedule
from watchtower.protocol.stream.key_schedule import KeySchedule
from watchtower.protocol.stream.message import StreamMessage

ACCEPT: Final = "accept"
SKIP: Final = "skip"
DEFER: Final = "defer"
QUARANTINE: Final = "quarantine"

Verifier = Callable[[StreamMessage, KeySchedule], bool]


class RuleBrokenError(MalformedRecordError):
    """A record that must not be folded; the message says which rule it breaks."""


def broken(reason: str) -> RuleBrokenError:
    return RuleBrokenError(reason)


def check_rotation(schedule: KeySchedule, head: int, body: PublisherKeyRotated) -> bool:
    """True to fold a PublisherKeyRotated, False for a redelivery of the one already folded.

    The new key must be the next id, take effect at head + 1 (the head this projection has folded,
    which is the writer's head when it rotated), and be a 32-byte key.
    """
    new_id, current = body.new_signing_key_id, schedule.current.signing_key_id
    if not isinstance(new_id, int) or isinstance(new_id, bool):
        raise broken(f"PublisherKeyRotated: new_signing_key_id {new_id!r} is not an integer")
    if new_id <= current:
        entry = schedule.entries[new_id - 1] if new_id >= 1 else None
        if (entry is not None and entry.public_key == body.new_key
                and entry.effective_sequence == body.effective_sequence):
            return False
        raise broken(f"PublisherKeyRotated: key {new_id} already exists with another key or cut-over")
    if new_id != current + 1 or body.old_signing_key_id != current:
        raise broken(f"PublisherKeyRotated: key {new_id} does not follow the current key {current}")
    if body.effective_sequence != head + 1:
        raise broken(f"PublisherKeyRotated: effective_sequence {body.effective_sequence!r} is not head + 1 "
                     f"(head {head})")
    new_key = body.new_key
    if not isinstance(new_key, bytes) or len(new_key) != 32:
        raise broken("PublisherKeyRotated: new_key is not a 32-byte ed25519 key")
    return True


MessageRef = tuple[Any, ...]
"""What a publish event says of its message, beyond stream and sequence (`REF_FIELDS`, in order)."""

REF_FIELDS: Final = ("version", "kind", "content_type", "payload_format", "payload_hash", "key_epoch",
                     "signing_key_id", "timestamp_unix_ms")


def published_ref(body: StreamMessagePublished) -> MessageRef:
    """The reference a StreamMessagePublished body holds (its `REF_FIELDS`)."""
    return (body.version, body.kind, body.content_type, body.payload_format, body.payload_hash, body.key_epoch,
            body.signing_key_id, body.timestamp_unix_ms)


def message_ref(message: StreamMessage) -> MessageRef:
    """The same reference, read from a message (the event stores payload_format as text)."""
    return tuple(str(message.payload_format) if name == "payload_format" else getattr(message, name)
                 for name in REF_FIELDS)


def check_published(stream_id: str, body: StreamMessagePublished, schedule: KeySchedule, head: int,
                    event_offset: int | None, offset: int | None) -> bool:
    """True to fold a StreamMessagePublished, False for a redelivery of one already folded.

    The event holds a reference to its message, not the message: it must be for this stream, be
    exactly head + 1 (the head the publish events have reached), name the key in force at its
    sequence and hold a 32-byte payload hash. The signature is checked once, on the message itself,
    when the messages record is bound to this reference (`message_verdict`).
    """
    sequence = body.sequence
    if body.stream_id != stream_id:
        raise broken(f"StreamMessagePublished for {stream_id!r} names stream {body.stream_id!r}")
    if not isinstance(sequence, int) or isinstance(sequence, bool):
        raise broken(f"StreamMessagePublished: sequence {sequence!r} is not an integer")
    if sequence <= head and (offset is None or event_offset is None or offset <= event_offset):
        return False  # Faust redelivers a tail after a rebalance: already folded
    if sequence != head + 1:
        raise broken(f"sequence {sequence} does not follow head {head}")
    in_force = schedule.key_at_sequence(sequence).signing_key_id
    if body.signing_key_id != in_force:
        raise broken(f"StreamMessagePublished {stream_id}#{sequence} names signing key {body.signing_key_id!r}, "
                     f"but key {in_force} is in force at that sequence")
    payload_hash = body.payload_hash
    if not isinstance(payload_hash, bytes) or len(payload_hash) != 32:
        raise broken(f"StreamMessagePublished {stream_id}#{sequence}: payload_hash is not a 32-byte SHA-256")
    return True


def message_verdict(key: str, offset: int, message: StreamMessage, schedule: KeySchedule | None,
                    published: int, located: Mapping[str, Any] | None, ref: MessageRef | None,
                    verify: Verifier = verify_with_schedule) -> tuple[str, str]:
    """What to do with a messages-topic record: (ACCEPT | SKIP | DEFER | QUARANTINE, reason).

    `schedule` is the stream's key schedule (None before its creation is folded); `published` is
    the head the publish events have reached; `located` is the stream's offsets
    entry (``head``: last indexed sequence, ``head_offset``); `ref` is what the publish event of the
    message's sequence says of it (`published_ref`), None if no unbound event of that sequence is
    held. The record must match that reference field by field and verify (hash and signature) under
    the key in force at its sequence: the one signature check of a message on the read side.
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
    if schedule is None or sequence > published:
        return DEFER, "its publish event is not folded yet"
    if ref is None:
        return QUARANTINE, f"no publish event of {key}#{sequence} is waiting for its message"
    differs = [name for name, want, got in zip(REF_FIELDS, ref, message_ref(message), strict=True) if want != got]
    if differs:
        return QUARANTINE, (f"message {key}#{sequence} does not match its publish event "
                            f"({', '.join(differs)} differ)")
    if not verify(message, schedule):
        return QUARANTINE, (f"message {key}#{sequence} does not verify under the key in force at its sequence "
                            f"(signing key {message.signing_key_id})")
    return ACCEPT, "verified"
