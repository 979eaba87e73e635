"""Keyloads: a branch's session key, sealed to each of its members (IOTA Channels ideas).

A keyload gives the members of one branch of a stream a fresh 32-byte *session key*, sealed to each
member's X25519 account key; every later message of the branch is masked under it
(`session_key`). Only the publisher (who made the session key) and the members (who open it) ever
hold it: the platform stores and forwards sealed boxes and ciphertext, nothing else.

    members_digest = SHA-256("watchtower-keyload-members-v1" ‖ len-prefixed stream_id, branch,
                             keyload_id ‖ for each member in address order: address ‖ u64be(key id))

where each member's entry is the session key sealed to its X25519 key (`keyload_entries`), and the
keyload publishes the session key's commitment (`session_key.key_commitment`).

**Pre-shared-key recipients.** Beside its X25519 members a keyload may wrap the session key for
holders of a pre-shared key (`psk`); those entries ride in part 0 under ``psk_entries``, a field a
keyload without PSK recipients does not have (so its bytes are as before), and the members digest
then also covers every PSK id (``"psk" ‖ psk_id`` after the members). `open_keyload_psk` opens it.
A past keyload's key sealed to later members is a reseal (`reseal`), made of the same entries.

**Parts.** A message carries at most 16,384 payload bytes, and one member's entry takes about 120,
so a keyload is split into *parts*: each part is one message, deterministic CBOR of the keyload's
header (id, stream, branch, part number, part count, member count, members digest, key
commitment) and a run of entries in address order. Parts are independent: a member needs only the
part holding its address (`part_for` / the ``first``/``last`` bounds let a subscriber filter for
it), while a checker that reads every part (`check_keyload`) proves the member set is exactly the
one the digest claims: no member omitted, none added, none twice.

**Who checks what.** The key commitment lets a member tell that the key it opened is the one the
keyload is about (a sealed box moved from another keyload opens to the wrong key). The members
digest, over every part, lets the writer refuse a keyload whose members are not the allowlist,
and lets any subscriber see that a keyload claims members it does not hold.

Every decoder here is byte-exact (decode, re-encode, compare): there is one spelling of a part.
No error message contains key material.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import os
import struct
from collections.abc import Iterable, Sequence
from typing import Any, Final

from watchtower.protocol.confidential.keyload_entries import (
    KEYLOAD_VERSION,
    MAX_MEMBERS,
    MAX_PART_BYTES,
    Member,
    Recipient,
    decode_cbor_map,
    decode_entries,
    encode_part,
    find_member,
    open_sealed,
    pack_entries,
    sealed_entries,
)
from watchtower.protocol.confidential.psk import (
    PskRecipient,
    decode_psk_entries,
    psk_entries,
    require_psk_id,
    unwrap_for_psk,
)
from watchtower.protocol.confidential.session_key import (
    DEFAULT_BRANCH,
    KEYLOAD_ID_BYTES,
    key_commitment,
    mask,
    new_session_key,
    require_branch,
    require_keyload_id,
    require_session_key,
    unmask,
)
from watchtower.protocol.errors import InvalidArgumentError, UnauthorizedError
from watchtower.protocol.validation import require_int, require_text

#: The message kind of a keyload part (a publisher's own kinds never start with "wt.").
KEYLOAD_KIND: Final = "wt.keyload"
#: The tag naming a message's keyload (its id in hex), on a masked message, a keyload part and a reseal.
KEYLOAD_ID_TAG: Final = "wt.keyload"
#: The tag naming a message's branch (absent: `DEFAULT_BRANCH`).
BRANCH_TAG: Final = "wt.branch"
#: Branches with a keyload in one stream: each is state the writer keeps, so a publisher cannot
#: grow it without bound.
MAX_BRANCHES: Final = 64

_MEMBERS_DOMAIN: Final = b"watchtower-keyload-members-v1"
_u64be = struct.Struct(">Q").pack
_HEADER_FIELDS: Final = frozenset({"v", "keyload_id", "stream_id", "branch", "part", "parts", "members",
                                   "members_digest", "key_commitment", "entries"})
_PSK_FIELD: Final = "psk_entries"


@dataclasses.dataclass(frozen=True, slots=True)
class KeyloadPart:
    """One decoded part. `entries` are (member, sealed session key) in address order."""

    keyload_id: bytes
    stream_id: str
    branch: str
    part: int
    parts: int
    members: int
    members_digest: bytes
    key_commitment: bytes
    entries: tuple[tuple[Member, bytes], ...]
    psk_entries: tuple[tuple[bytes, bytes], ...] = ()
    """(PSK id, wrapped session key) in PSK-id order; only part 0 holds any."""

    @property
    def first(self) -> str:
        """The lowest member address in this part."""
        return self.entries[0][0].address

    @property
    def last(self) -> str:
        """The highest member address in this part."""
        return self.entries[-1][0].address


@dataclasses.dataclass(frozen=True, slots=True)
class Keyload:
    """What the publisher built: the session key (it never leaves the publisher and the members),
    the keyload id, and the parts to publish, in order."""

    session_key: bytes
    keyload_id: bytes
    parts: tuple[bytes, ...]
    members: tuple[Member, ...]
    psk_ids: tuple[bytes, ...] = ()


# --- Members digest -------------------------------------------------------------------------------


def _len_prefixed(text: str) -> bytes:
    raw = text.encode()
    return _u64be(len(raw)) + raw


def members_digest(stream_id: str, branch: str, keyload_id: bytes, members: Iterable[Member],
                   psk_ids: Iterable[bytes] = ()) -> bytes:
    """The digest of the member set (in address order) a keyload claims, then of its PSK ids (in
    order; none: the digest is the one of a keyload without PSK recipients)."""
    h = hashlib.sha256(_MEMBERS_DOMAIN + _len_prefixed(stream_id) + _len_prefixed(branch)
                       + require_keyload_id(keyload_id))
    for m in members:
        h.update(bytes.fromhex(m.address[2:]) + _u64be(m.account_key_id))
    for psk_id in psk_ids:
        h.update(b"psk" + psk_id)
    return h.digest()


# --- Building -------------------------------------------------------------------------------------


def build_keyload(stream_id: str, recipients: Iterable[Recipient], *, branch: str = DEFAULT_BRANCH,
                  session_key: bytes | None = None, keyload_id: bytes | None = None,
                  psk_recipients: Iterable[PskRecipient] = ()) -> Keyload:
    """Seal a session key (fresh unless given) to every recipient, in parts of at most
    `MAX_PART_BYTES`, and wrap it for every PSK recipient (in part 0). INVALID_ARGUMENT for no
    recipient, a member or PSK id listed twice, more than `MAX_MEMBERS` members or
    `MAX_PSK_RECIPIENTS` PSK holders, a PSK that is not 32 bytes; INVALID_ACCOUNT_KEY for an
    unusable X25519 key."""
    require_text(stream_id, "stream_id")
    require_branch(branch)
    key = require_session_key(session_key) if session_key is not None else new_session_key()
    kid = require_keyload_id(keyload_id) if keyload_id is not None else os.urandom(KEYLOAD_ID_BYTES)
    members, entries = sealed_entries(key, recipients)
    wrapped = psk_entries(key, kid, psk_recipients)
    psk_ids = tuple(pid for pid, _ in wrapped)
    digest = members_digest(stream_id, branch, kid, members, psk_ids)
    commitment = key_commitment(key, kid)

    def header(part: int, parts: int) -> dict[str, Any]:
        return {"v": KEYLOAD_VERSION, "keyload_id": kid, "stream_id": stream_id, "branch": branch, "part": part,
                "parts": parts, "members": len(members), "members_digest": digest, "key_commitment": commitment}

    extra = {_PSK_FIELD: [list(e) for e in wrapped]} if wrapped else {}

    def encode(part: int, parts: int, run: Sequence[list[Any]]) -> bytes:
        return encode_part({**header(part, parts), **(extra if part == 0 else {})}, run)

    # Sized with the largest header this keyload can have (part numbers only grow), with the PSK
    # entries part 0 carries (the other parts are packed as if they did too: a little room wasted).
    overhead = len(encode_part({**header(len(entries), len(entries)), **extra}, []))
    runs = pack_entries(entries, overhead=overhead)
    parts = tuple(encode(i, len(runs), run) for i, run in enumerate(runs))
    return Keyload(key, kid, parts, members, psk_ids)


# --- Reading --------------------------------------------------------------------------------------


def decode_part(data: object) -> KeyloadPart:
    """The keyload part in `data`, or INVALID_ARGUMENT naming what is wrong. Byte-exact: no other
    CBOR spelling of the same part is accepted."""
    doc = decode_cbor_map(data, _HEADER_FIELDS, "keyload part", optional=frozenset({_PSK_FIELD}))
    kid = require_keyload_id(doc["keyload_id"])
    stream_id = require_text(doc["stream_id"], "stream_id")
    branch = require_branch(doc["branch"])
    parts = require_int(doc["parts"], "parts", minimum=1, maximum=MAX_MEMBERS)
    part = require_int(doc["part"], "part", minimum=0, maximum=parts - 1)
    count = require_int(doc["members"], "members", minimum=1, maximum=MAX_MEMBERS)
    for name in ("members_digest", "key_commitment"):
        if not isinstance(doc[name], bytes) or len(doc[name]) != 32:
            raise InvalidArgumentError(f"{name} is 32 bytes")
    entries = decode_entries(doc["entries"])
    psk_entries = decode_psk_entries(doc[_PSK_FIELD]) if _PSK_FIELD in doc else ()
    if psk_entries and part != 0:
        raise InvalidArgumentError("only part 0 of a keyload holds psk_entries")
    decoded = KeyloadPart(kid, stream_id, branch, part, parts, count, doc["members_digest"], doc["key_commitment"],
                          entries, psk_entries)
    if encode_part({k: doc[k] for k in doc if k != "entries"}, doc["entries"]) != data:
        raise InvalidArgumentError("a keyload part must be deterministic CBOR (RFC 8949 §4.2.1)")
    return decoded


def find_entry(part: KeyloadPart, address: str) -> tuple[Member, bytes] | None:
    """The entry of `address` in `part` (binary search), or None."""
    return find_member(part.entries, address)


def part_for(parts: Iterable[KeyloadPart], address: str) -> KeyloadPart | None:
    """The part whose address range holds `address`, or None."""
    for part in parts:
        if part.first <= address <= part.last:
            return part
    return None


def open_keyload(part: KeyloadPart, address: str, private_key: bytes) -> bytes:
    """The session key sealed to `address` in `part`, checked against the key commitment.
    UNAUTHORIZED when `address` is not a member in this part; DECRYPTION_FAILED when its sealed
    key does not open with `private_key`, or opens to a key the keyload is not about."""
    found = find_entry(part, address)
    if found is None:
        raise UnauthorizedError(f"{address} is not a member of keyload {part.keyload_id.hex()} (part {part.part}); "
                                "ask the owner to add you to the allowlist, then wait for the next keyload")
    return open_sealed(found, address, private_key, part.keyload_id, part.key_commitment)


def open_keyload_psk(part: KeyloadPart, psk_id: bytes, psk: bytes) -> bytes:
    """The session key `part` (part 0 of a keyload) wraps for the holder of PSK `psk_id`, checked
    against the key commitment. UNAUTHORIZED when the keyload names no such PSK id;
    DECRYPTION_FAILED when `psk` is not the key it was wrapped with, or it opens to a key the
    keyload is not about."""
    pid = require_psk_id(psk_id)
    wrapped = next((w for i, w in part.psk_entries if i == pid), None)
    if wrapped is None:
        raise UnauthorizedError(f"keyload {part.keyload_id.hex()} (part {part.part}) names no PSK holder {pid.hex()}; "
                                "PSK entries ride in part 0: read it, or ask the owner for the current keyload")
    return unwrap_for_psk(wrapped, keyload_id=part.keyload_id, commitment=part.key_commitment, psk_id=pid,
                          psk=psk)


@dataclasses.dataclass(frozen=True, slots=True)
class KeyloadSummary:
    """A whole keyload, checked: its id, branch and every member."""

    keyload_id: bytes
    stream_id: str
    branch: str
    members: tuple[Member, ...]
    members_digest: bytes
    key_commitment: bytes
    psk_ids: tuple[bytes, ...] = ()


def check_keyload(parts: Sequence[KeyloadPart]) -> KeyloadSummary:
    """Every part of one keyload, checked together: one id and header, parts 0..n-1 once each,
    members in strictly increasing address order across parts, as many as claimed, and the members
    digest over them. INVALID_ARGUMENT naming the first rule broken (a keyload that omits a member
    while claiming to include it fails the count or the digest)."""
    if not parts:
        raise InvalidArgumentError("no keyload part given")
    head = parts[0]
    ordered = sorted(parts, key=lambda p: p.part)
    if [p.part for p in ordered] != list(range(head.parts)):
        raise InvalidArgumentError(f"keyload {head.keyload_id.hex()} needs parts 0..{head.parts - 1} once each, "
                                   f"got {sorted(p.part for p in parts)}")
    fields = ("keyload_id", "stream_id", "branch", "parts", "members", "members_digest", "key_commitment")
    for p in ordered:
        if any(getattr(p, f) != getattr(head, f) for f in fields):
            raise InvalidArgumentError(f"keyload part {p.part} does not belong with part {head.part} (another header)")
    members = tuple(m for p in ordered for m, _ in p.entries)
    if any(a.address >= b.address for a, b in itertools.pairwise(members)):
        raise InvalidArgumentError("the keyload's members are not in strictly increasing address order across parts")
    if len(members) != head.members:
        raise InvalidArgumentError(f"the keyload claims {head.members} members and holds {len(members)}")
    psk_ids = tuple(pid for pid, _ in ordered[0].psk_entries)
    if members_digest(head.stream_id, head.branch, head.keyload_id, members, psk_ids) != head.members_digest:
        raise InvalidArgumentError("the keyload's members (and PSK ids) do not match its members digest")
    return KeyloadSummary(head.keyload_id, head.stream_id, head.branch, members, head.members_digest,
                          head.key_commitment, psk_ids)


# `mask` and `unmask` (homed in `session_key`) are named here too: the keyload benchmark takes the
# whole private-feed path from this module.
__all__ = [
    "BRANCH_TAG",
    "KEYLOAD_ID_TAG",
    "KEYLOAD_KIND",
    "MAX_BRANCHES",
    "MAX_MEMBERS",
    "MAX_PART_BYTES",
    "Keyload",
    "KeyloadPart",
    "KeyloadSummary",
    "Member",
    "Recipient",
    "build_keyload",
    "check_keyload",
    "decode_part",
    "find_entry",
    "mask",
    "members_digest",
    "open_keyload",
    "open_keyload_psk",
    "part_for",
    "unmask",
]
