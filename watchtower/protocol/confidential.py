"""The writer's rules for a confidential private feed (``StreamConfig.confidential``), in one place.

A confidential stream is PRIVATE_ALLOWLIST, and every message of it is either a *keyload part*
(kind ``wt.keyload``: the session key sealed to members, `keyload`) or a message masked under the
stream's *current keyload*, naming it in the ``wt.keyload`` tag. The writer cannot read a masked
payload, but it holds the publisher to what it can see:

- a keyload's parts are published in order, 0..n-1, with nothing between them; part 0 starts a
  keyload with an id the stream is not using now, and each part lists only members on the
  allowlist (or the owner): a member removed from the allowlist is in no keyload published after;
- a masked message names the current keyload, whose every part is published; it is refused while
  a part is still to come, or under any other (stale) keyload;
- after ``allowlist_remove`` of a member, any keyload still being published is dropped and no
  masked message is accepted until a whole new keyload has been published: the removed member
  cannot open what follows.

The state this needs is three small values (`KeyloadState`): the current keyload id, how many of
its parts are still to come, and whether a re-key is required; members are checked part by part
against the allowlist the state already holds, so nothing grows with the audience.

A refused publish answers UNAUTHORIZED (CIP-7's publish code for "this stream does not accept this
message") when a rule above is broken, and INVALID_ARGUMENT when a keyload part cannot be read as
one. The accepted part's reply names it (``keyload``: id, part, parts) and the fold reads it back
from the log (`fold_keyload_part`), so a rebuild reaches the same state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

from watchtower.protocol.errors import InvalidArgumentError, UnauthorizedError
from watchtower.protocol.keyload import KEYLOAD_ID_BYTES, KEYLOAD_ID_TAG, KEYLOAD_KIND, decode_part
from watchtower.protocol.message import StreamMessage
from watchtower.protocol.validation import require_int

#: The key of a keyload part's publish reply (and of its event's recorded reply).
REPLY_KEY: Final = "keyload"


@dataclasses.dataclass(frozen=True, slots=True)
class KeyloadState:
    """A confidential stream's keyload position: the current keyload (None before the first), how
    many of its parts are still to come (0: all published), and whether a member left since."""

    keyload_id: bytes | None = None
    parts_left: int = 0
    rekey_required: bool = False

    @property
    def is_default(self) -> bool:
        """True for the state of a stream that never published a keyload nor removed a member."""
        return self == NO_KEYLOAD


NO_KEYLOAD: Final = KeyloadState()
"""The keyload state of a stream that never published a keyload nor removed a member."""


def check_publish(keyloads: KeyloadState, msg: StreamMessage, *, stream_id: str, owner: str,
                  allowlist: frozenset[str]) -> dict[str, Any] | None:
    """Check `msg` (signed, for head+1) against a confidential stream's rules (module docstring).

    Returns the reply entry of an accepted keyload part (``{"keyload_id": hex, "part", "parts"}``),
    or None for an accepted masked message. Raises UNAUTHORIZED / INVALID_ARGUMENT otherwise.
    """
    if msg.kind == KEYLOAD_KIND:
        return _check_part(keyloads, msg, stream_id=stream_id, owner=owner, allowlist=allowlist)
    named = msg.tags.get(KEYLOAD_ID_TAG)
    if keyloads.rekey_required:
        raise UnauthorizedError(
            f"a member left the allowlist of confidential stream {stream_id!r}: publish a new keyload for the "
            "remaining members (ConfidentialPublisher.rekey) before the next message")
    if keyloads.keyload_id is None:
        raise UnauthorizedError(
            f"confidential stream {stream_id!r} has no keyload yet: publish one for the allowlist's members "
            "(ConfidentialPublisher.rekey), then mask every message under it")
    current = keyloads.keyload_id.hex()
    if keyloads.parts_left:
        raise UnauthorizedError(
            f"keyload {current} of confidential stream {stream_id!r} still has {keyloads.parts_left} part(s) to "
            "publish; publish them before masking a message under it")
    if not isinstance(named, str):
        raise UnauthorizedError(
            f"confidential stream {stream_id!r} accepts only messages masked under its current keyload: mask the "
            f"payload under keyload {current} and name it in the {KEYLOAD_ID_TAG!r} tag (ConfidentialPublisher does)")
    if named != current:
        raise UnauthorizedError(
            f"the message names keyload {named[:64]!r}, which is not the current keyload {current} of confidential "
            f"stream {stream_id!r}; mask it under the current keyload (or re-key and use the new one)")
    return None


def _check_part(keyloads: KeyloadState, msg: StreamMessage, *, stream_id: str, owner: str,
                allowlist: frozenset[str]) -> dict[str, Any]:
    part = decode_part(msg.payload_inline)  # INVALID_ARGUMENT naming what is wrong
    kid = part.keyload_id.hex()
    if part.stream_id != stream_id:
        raise InvalidArgumentError(f"the keyload part is for stream {part.stream_id!r}, not {stream_id!r}; "
                                   "build the keyload for this stream")
    if msg.tags.get(KEYLOAD_ID_TAG) != kid:
        raise InvalidArgumentError(f"a keyload part names its keyload in the {KEYLOAD_ID_TAG!r} tag: set it to {kid}")
    if part.part == 0:
        if keyloads.keyload_id == part.keyload_id:
            raise InvalidArgumentError(f"keyload {kid} was already started; a new keyload takes a fresh id")
    else:
        expected = 0 if keyloads.parts_left == 0 else part.parts - keyloads.parts_left
        if keyloads.keyload_id != part.keyload_id or keyloads.parts_left == 0 or part.part != expected:
            raise InvalidArgumentError(
                f"part {part.part} of keyload {kid} does not follow the last published part; publish a keyload's "
                "parts in order, 0 first, with no other message between them (after a member was removed, "
                "start a new keyload)")
    for member, _ in part.entries:
        if member.address != owner and member.address not in allowlist:
            raise UnauthorizedError(
                f"keyload {kid} lists {member.address}, who is not on the allowlist of confidential stream "
                f"{stream_id!r} (removed, or never added); re-key for the allowlist's current members only")
    return {"keyload_id": kid, "part": part.part, "parts": part.parts}


def fold_keyload_part(keyloads: KeyloadState, reply: Mapping[str, Any]) -> KeyloadState:
    """The keyload state after a publish whose recorded reply is `reply` (unchanged when the reply
    names no keyload part). INVALID_ARGUMENT when the part cannot follow `keyloads`."""
    entry = reply.get(REPLY_KEY)
    if entry is None:
        return keyloads
    if not isinstance(entry, Mapping):
        raise InvalidArgumentError("a publish reply's keyload entry must be a map")
    try:  # the log is hostile: a forged reply is a refused record, never an unexpected error
        kid = bytes.fromhex(entry["keyload_id"])
        parts = require_int(entry["parts"], "parts", minimum=1)
        part = require_int(entry["part"], "part", minimum=0, maximum=parts - 1)
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"a publish reply's keyload entry needs keyload_id (hex), part and parts: "
                                   f"{type(exc).__name__}") from None
    if len(kid) != KEYLOAD_ID_BYTES:
        raise InvalidArgumentError(f"a keyload id is {KEYLOAD_ID_BYTES} bytes")
    if part == 0:
        left = parts - 1
    elif kid == keyloads.keyload_id and keyloads.parts_left == parts - part:
        left = keyloads.parts_left - 1
    else:
        raise InvalidArgumentError(f"part {part} of keyload {kid.hex()} does not follow the stream's keyload state")
    return KeyloadState(kid, left, keyloads.rekey_required and left > 0)


def member_removed(keyloads: KeyloadState) -> KeyloadState:
    """The keyload state after a member left the allowlist: a re-key is required, and a keyload
    still being published is dropped (its first parts may hold the member)."""
    return KeyloadState(keyloads.keyload_id, 0, True)


__all__ = ["NO_KEYLOAD", "REPLY_KEY", "KeyloadState", "check_publish", "fold_keyload_part", "member_removed"]
