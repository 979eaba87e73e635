"""The writer's rules for a confidential private feed (``StreamConfig.confidential``), in one place.

A confidential stream is PRIVATE_ALLOWLIST, and every message of it is a *keyload part* (kind
``wt.keyload``: a session key sealed to members, `keyload`), a *reseal* (kind ``wt.reseal``: a past
keyload's session key sealed to more members), or a message masked under its branch's *current
keyload*, naming the keyload in the ``wt.keyload`` tag and the branch in ``wt.branch`` (absent:
``main``). Each branch (``pro``, ``basic``, ...) has its own audience and keyload, and re-keys on
its own. The writer cannot read a masked payload, but it holds the publisher to what it can see:

- a keyload's parts are published in order, 0..n-1, with nothing between them (one keyload in
  progress at a time, whatever its branch); part 0 starts a keyload with an id its branch is not
  using now, and each part (and each reseal) lists only members on the allowlist, or the owner: a
  member removed from the allowlist is in no keyload published after;
- a masked message names its branch's current keyload, whose every part is published; it is
  refused while a part is still to come, or under any other (stale) keyload;
- after ``allowlist_remove`` of a member, any keyload still being published is dropped and no
  masked message of any branch is accepted until a whole new keyload of that branch has been
  published: the removed member cannot open what follows.

The state this needs is three small values per branch (`KeyloadState`, in `Keyloads`): the current
keyload id, how many of its parts are still to come, and whether a re-key is required; members are
checked part by part against the allowlist the state already holds, so nothing grows with the
audience.

A refused publish answers UNAUTHORIZED (CIP-7's publish code for "this stream does not accept this
message") when a rule above is broken, and INVALID_ARGUMENT when a keyload part or a reseal cannot
be read as one. The accepted part's reply names it (``keyload``: id, part, parts, branch) and the
fold reads it back from the log (`fold_keyload_part`), so a rebuild reaches the same state.

What the writer cannot see, the members' SDK does: a member's account key rotated or revoked
(another aggregate's fact) makes the publisher re-key (`client.private.ConfidentialPublisher.
refresh`), and every member checks a reseal's key against the keyload's key commitment.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Final

from watchtower.protocol.confidential.keyload import (
    BRANCH_TAG,
    KEYLOAD_ID_TAG,
    KEYLOAD_KIND,
    MAX_BRANCHES,
    MAX_MEMBERS,
    Member,
    decode_part,
)
from watchtower.protocol.confidential.reseal import RESEAL_KIND, decode_reseal
from watchtower.protocol.confidential.session_key import DEFAULT_BRANCH, KEYLOAD_ID_BYTES, require_branch
from watchtower.protocol.errors import InvalidArgumentError, UnauthorizedError
from watchtower.protocol.stream.message import StreamMessage
from watchtower.protocol.validation import require_int

#: The key of a keyload part's publish reply (and of its event's recorded reply).
REPLY_KEY: Final = "keyload"


@dataclasses.dataclass(frozen=True, slots=True)
class KeyloadState:
    """One branch's keyload position: the current keyload (None before the first), how many of its
    parts are still to come (0: all published), and whether a member left since."""

    keyload_id: bytes | None = None
    parts_left: int = 0
    rekey_required: bool = False

    @property
    def is_default(self) -> bool:
        """True for the state of a branch that never published a keyload nor lost a member."""
        return self == NO_KEYLOAD

    def canonical(self) -> list[Any]:
        """[keyload id, parts left, re-key flag]: the snapshot's and the digest's spelling."""
        return [self.keyload_id, self.parts_left, self.rekey_required]


NO_KEYLOAD: Final = KeyloadState()
"""The keyload state of a branch that never published a keyload nor lost a member."""


@dataclasses.dataclass(frozen=True, slots=True)
class Keyloads:
    """A confidential stream's keyload state, branch by branch (each branch keys its own audience).

    `branches` holds (branch, state) in branch order, only for branches whose state is not the
    default. Its canonical form (snapshots, the state digest) is the one branch's
    ``[id, parts_left, rekey]`` while only `DEFAULT_BRANCH` has a state, the spelling used before
    branches had states of their own, and ``{branch: [...]}`` otherwise.
    """

    branches: tuple[tuple[str, KeyloadState], ...] = ()

    @property
    def is_default(self) -> bool:
        """True for a stream that never published a keyload nor removed a member."""
        return not self.branches

    def of(self, branch: str) -> KeyloadState:
        """The state of `branch` (NO_KEYLOAD if it has none)."""
        for name, state in self.branches:
            if name == branch:
                return state
        return NO_KEYLOAD

    def with_branch(self, branch: str, state: KeyloadState) -> Keyloads:
        """These keyloads with `branch` in `state`. INVALID_ARGUMENT past `MAX_BRANCHES` branches."""
        rest = {name: st for name, st in self.branches if name != branch}
        if not state.is_default:
            rest[branch] = state
        if len(rest) > MAX_BRANCHES:
            raise InvalidArgumentError(f"a confidential stream keys at most {MAX_BRANCHES} branches; reuse one")
        return Keyloads(tuple(sorted(rest.items())))

    def in_progress(self) -> tuple[str, KeyloadState] | None:
        """The branch whose keyload still has parts to come, if any (at most one at a time)."""
        return next(((name, st) for name, st in self.branches if st.parts_left), None)

    def canonical(self) -> list[Any] | dict[str, list[Any]]:
        """The snapshot's and the digest's spelling (class docstring)."""
        if len(self.branches) == 1 and self.branches[0][0] == DEFAULT_BRANCH:
            return self.branches[0][1].canonical()
        return {name: st.canonical() for name, st in self.branches}

    @classmethod
    def from_canonical(cls, value: object) -> Keyloads:
        """The keyloads `canonical` spelled; INVALID_ARGUMENT naming what is malformed."""
        if isinstance(value, list):
            return cls().with_branch(DEFAULT_BRANCH, _state_from(value))
        if not isinstance(value, dict):
            raise InvalidArgumentError("keyloads is [id, parts_left, rekey] or a map of branch to that")
        out = cls()
        for name, row in value.items():
            out = out.with_branch(require_branch(name), _state_from(row))
        return out


def _state_from(row: object) -> KeyloadState:
    if not isinstance(row, list) or len(row) != 3:
        raise InvalidArgumentError("a branch's keyload state is [keyload id, parts left, re-key flag]")
    kid, left, rekey = row
    if kid is not None and (not isinstance(kid, bytes) or len(kid) != KEYLOAD_ID_BYTES):
        raise InvalidArgumentError(f"a keyload state starts with the current keyload id ({KEYLOAD_ID_BYTES} bytes) "
                                   "or null")
    if not isinstance(rekey, bool):
        raise InvalidArgumentError("a keyload state ends with the re-key flag (a boolean)")
    return KeyloadState(kid, require_int(left, "keyload parts_left", minimum=0, maximum=MAX_MEMBERS), rekey)


NO_KEYLOADS: Final = Keyloads()
"""The keyload state of a stream that never published a keyload nor removed a member."""


def message_branch(msg: StreamMessage) -> str:
    """The branch a message names in its ``wt.branch`` tag (`DEFAULT_BRANCH` when absent);
    INVALID_ARGUMENT for a tag that is not a branch name."""
    branch = msg.tags.get(BRANCH_TAG, DEFAULT_BRANCH)
    return require_branch(branch)


def check_publish(keyloads: Keyloads, msg: StreamMessage, *, stream_id: str, owner: str,
                  allowlist: frozenset[str]) -> dict[str, Any] | None:
    """Check `msg` (signed, for head+1) against a confidential stream's rules (module docstring).

    Returns the reply entry of an accepted keyload part (``{"keyload_id": hex, "part", "parts",
    "branch"}``), or None for an accepted reseal or masked message. Raises UNAUTHORIZED /
    INVALID_ARGUMENT otherwise.
    """
    pending = keyloads.in_progress()
    if msg.kind == KEYLOAD_KIND:
        return _check_part(keyloads, msg, stream_id=stream_id, owner=owner, allowlist=allowlist)
    if pending is not None:
        name, st = pending
        raise UnauthorizedError(
            f"keyload {st.keyload_id.hex() if st.keyload_id else '?'} of branch {name!r} of confidential stream "
            f"{stream_id!r} still has {st.parts_left} part(s) to publish; publish them before any other message")
    if msg.kind == RESEAL_KIND:
        _check_reseal(msg, stream_id=stream_id, owner=owner, allowlist=allowlist)
        return None
    branch = message_branch(msg)
    state = keyloads.of(branch)
    named = msg.tags.get(KEYLOAD_ID_TAG)
    if state.rekey_required:
        raise UnauthorizedError(
            f"a member left the allowlist of confidential stream {stream_id!r}: publish a new keyload for the "
            f"remaining members of branch {branch!r} (ConfidentialPublisher.rekey) before its next message")
    if state.keyload_id is None:
        raise UnauthorizedError(
            f"branch {branch!r} of confidential stream {stream_id!r} has no keyload yet: publish one for its "
            "members (ConfidentialPublisher.rekey), then mask every message of the branch under it")
    current = state.keyload_id.hex()
    if not isinstance(named, str):
        raise UnauthorizedError(
            f"confidential stream {stream_id!r} accepts only messages masked under their branch's current keyload: "
            f"mask the payload under keyload {current} and name it in the {KEYLOAD_ID_TAG!r} tag "
            "(ConfidentialPublisher does)")
    if named != current:
        raise UnauthorizedError(
            f"the message names keyload {named[:64]!r}, which is not the current keyload {current} of branch "
            f"{branch!r} of confidential stream {stream_id!r}; mask it under the current keyload (or re-key and use "
            "the new one)")
    return None


def _check_members(members: Iterable[Member], what: str, *, stream_id: str, owner: str,
                   allowlist: frozenset[str]) -> None:
    for member in members:
        if member.address != owner and member.address not in allowlist:
            raise UnauthorizedError(
                f"{what} lists {member.address}, who is not on the allowlist of confidential stream {stream_id!r} "
                "(removed, or never added); seal only to the allowlist's current members")


def _check_part(keyloads: Keyloads, msg: StreamMessage, *, stream_id: str, owner: str,
                allowlist: frozenset[str]) -> dict[str, Any]:
    part = decode_part(msg.payload_inline)  # INVALID_ARGUMENT naming what is wrong
    kid = part.keyload_id.hex()
    if part.stream_id != stream_id:
        raise InvalidArgumentError(f"the keyload part is for stream {part.stream_id!r}, not {stream_id!r}; "
                                   "build the keyload for this stream")
    if msg.tags.get(KEYLOAD_ID_TAG) != kid:
        raise InvalidArgumentError(f"a keyload part names its keyload in the {KEYLOAD_ID_TAG!r} tag: set it to {kid}")
    if message_branch(msg) != part.branch:
        raise InvalidArgumentError(f"a keyload part names its branch in the {BRANCH_TAG!r} tag: set it to "
                                   f"{part.branch!r}")
    state = keyloads.of(part.branch)
    pending = keyloads.in_progress()
    if state.is_default and len(keyloads.branches) >= MAX_BRANCHES:
        raise UnauthorizedError(f"confidential stream {stream_id!r} already keys {MAX_BRANCHES} branches, the most "
                                f"it holds; publish on one of them instead of starting {part.branch!r}")
    if part.part == 0:
        if state.keyload_id == part.keyload_id:
            raise InvalidArgumentError(f"keyload {kid} was already started; a new keyload takes a fresh id")
        if pending is not None and pending[0] != part.branch:
            raise UnauthorizedError(
                f"keyload {pending[1].keyload_id.hex() if pending[1].keyload_id else '?'} of branch {pending[0]!r} "
                f"still has {pending[1].parts_left} part(s) to publish; finish it before starting another branch's")
    else:
        expected = part.parts - state.parts_left
        if state.keyload_id != part.keyload_id or state.parts_left == 0 or part.part != expected:
            raise InvalidArgumentError(
                f"part {part.part} of keyload {kid} does not follow the last published part; publish a keyload's "
                "parts in order, 0 first, with no other message between them (after a member was removed, "
                "start a new keyload)")
    _check_members((m for m, _ in part.entries), f"keyload {kid}", stream_id=stream_id, owner=owner,
                   allowlist=allowlist)
    return {"keyload_id": kid, "part": part.part, "parts": part.parts, "branch": part.branch}


def _check_reseal(msg: StreamMessage, *, stream_id: str, owner: str, allowlist: frozenset[str]) -> None:
    reseal = decode_reseal(msg.payload_inline)  # INVALID_ARGUMENT naming what is wrong
    kid = reseal.keyload_id.hex()
    if reseal.stream_id != stream_id:
        raise InvalidArgumentError(f"the reseal is for stream {reseal.stream_id!r}, not {stream_id!r}")
    if msg.tags.get(KEYLOAD_ID_TAG) != kid or message_branch(msg) != reseal.branch:
        raise InvalidArgumentError(f"a reseal names its keyload in the {KEYLOAD_ID_TAG!r} tag ({kid}) and its branch "
                                   f"in the {BRANCH_TAG!r} tag ({reseal.branch!r})")
    # The writer cannot tell which key the reseal holds; every member checks it against the
    # keyload's key commitment (reseal.open_reseal). It holds the reseal to the allowlist.
    _check_members((m for m, _ in reseal.entries), f"the reseal of keyload {kid}", stream_id=stream_id, owner=owner,
                   allowlist=allowlist)


def fold_keyload_part(keyloads: Keyloads, reply: Mapping[str, Any]) -> Keyloads:
    """The keyload state after a publish whose recorded reply is `reply` (unchanged when the reply
    names no keyload part). INVALID_ARGUMENT when the part cannot follow `keyloads`. A reply
    without a branch (written before branches had states of their own) is `DEFAULT_BRANCH`'s."""
    entry = reply.get(REPLY_KEY)
    if entry is None:
        return keyloads
    if not isinstance(entry, Mapping):
        raise InvalidArgumentError("a publish reply's keyload entry must be a map")
    try:  # the log is hostile: a forged reply is a refused record, never an unexpected error
        kid = bytes.fromhex(entry["keyload_id"])
        parts = require_int(entry["parts"], "parts", minimum=1)
        part = require_int(entry["part"], "part", minimum=0, maximum=parts - 1)
        branch = require_branch(entry.get("branch", DEFAULT_BRANCH))
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"a publish reply's keyload entry needs keyload_id (hex), part and parts: "
                                   f"{type(exc).__name__}") from None
    if len(kid) != KEYLOAD_ID_BYTES:
        raise InvalidArgumentError(f"a keyload id is {KEYLOAD_ID_BYTES} bytes")
    state = keyloads.of(branch)
    if part == 0:
        left = parts - 1
    elif kid == state.keyload_id and state.parts_left == parts - part:
        left = state.parts_left - 1
    else:
        raise InvalidArgumentError(f"part {part} of keyload {kid.hex()} does not follow the stream's keyload state")
    return keyloads.with_branch(branch, KeyloadState(kid, left, state.rekey_required and left > 0))


def member_removed(keyloads: Keyloads) -> Keyloads:
    """The keyload state after a member left the allowlist: every branch must re-key, and a keyload
    still being published is dropped (its first parts may hold the member). Every branch, because
    the writer does not keep who each keyload holds (up to `MAX_MEMBERS` addresses a branch, in the
    hottest state there is): a branch whose audience never held the member re-keys all the same."""
    if keyloads.is_default:
        return keyloads.with_branch(DEFAULT_BRANCH, KeyloadState(None, 0, True))
    out = keyloads
    for name, state in keyloads.branches:
        out = out.with_branch(name, KeyloadState(state.keyload_id, 0, True))
    return out


__all__ = ["NO_KEYLOAD", "NO_KEYLOADS", "REPLY_KEY", "KeyloadState", "Keyloads", "check_publish", "fold_keyload_part",
           "member_removed", "message_branch"]
