"""Keyloads and masked payloads: the confidential private feed's cryptography (IOTA Channels ideas).

A keyload gives the members of one branch of a stream a fresh 32-byte *session key*, sealed to each
member's X25519 account key; every later message of the branch is *masked*: its payload is
XChaCha20-Poly1305 under a key derived from the session key. Only the publisher (who made the
session key) and the members (who open it) ever hold it: the platform stores and forwards sealed
boxes and ciphertext, nothing else.

    payload_key    = HKDF-SHA256(ikm=session_key, salt="watchtower-keyload-v1", info="payload" ‖ keyload_id)
    key_commitment = HKDF-SHA256(ikm=session_key, salt="watchtower-keyload-v1", info="commit" ‖ keyload_id)
    sealed         = crypto_box_seal(session_key, member's X25519 public key)             (80 bytes)
    members_digest = SHA-256("watchtower-keyload-members-v1" ‖ len-prefixed stream_id, branch,
                             keyload_id ‖ for each member in address order: address ‖ u64be(key id))
    masked         = nonce(24, random) ‖ XChaCha20-Poly1305(payload_key, nonce, aad, plaintext)
    aad            = deterministic CBOR of {stream_id, sequence, keyload_id, branch, kind, content_type}

**Pre-shared-key recipients** (the IOTA Channels spec: "Allowed Recipients are identified either
by pre-shared keys or by x25519 public key identifiers"). Beside its X25519 members a keyload may
name up to `MAX_PSK_RECIPIENTS` holders of a 32-byte pre-shared key, each by a 16-byte PSK id, and
wrap the session key for each under a key derived from its PSK:

    psk_wrap_key = HKDF-SHA256(ikm=psk, salt="watchtower-keyload-v1", info="psk" ‖ keyload_id ‖ psk_id)
    psk_nonce    = HKDF-SHA256(ikm=psk_wrap_key, salt="watchtower-keyload-v1", info="psk-nonce" ‖ key_commitment)[:24]
    wrapped      = psk_nonce ‖ XChaCha20-Poly1305(psk_wrap_key, psk_nonce, aad=psk_id, session_key)   (72 bytes)

The nonce is derived, not drawn: one (PSK, keyload id, PSK id) wraps one session key, and a
different session key gives a different commitment and so a different nonce. The entries,
``[psk_id, wrapped]`` in PSK-id order, ride in part 0 under ``psk_entries``, a field a keyload
without PSK recipients does not have (so its bytes are as before), and the members digest then
also covers every PSK id (``"psk" ‖ psk_id`` after the members). The owner hands the PSK and its
id to the holder out of band; the platform never sees a PSK. `open_keyload_psk` opens it.

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
and lets any subscriber see that a keyload claims members it does not hold. The AAD binds a masked
payload to its stream, sequence, branch and keyload, so a ciphertext moved elsewhere does not open.

Every decoder here is byte-exact (decode, re-encode, compare): there is one spelling of a part.
No error message contains key material.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import hashlib
import itertools
import os
import struct
from collections.abc import Iterable, Sequence
from typing import Any, Final

import cbor2
import nacl.exceptions
import nacl.public

from watchtower.protocol import cbor
from watchtower.protocol.addresses import require_address
from watchtower.protocol.confidential.envelope import (
    hkdf_sha256,
    open_payload,
    seal_payload,
    validate_x25519_public_key,
)
from watchtower.protocol.constants import MAX_INLINE_PAYLOAD_BYTES, NONCE_BYTES
from watchtower.protocol.errors import DecryptionFailedError, InvalidArgumentError, UnauthorizedError
from watchtower.protocol.validation import require_int, require_text

KEYLOAD_VERSION: Final = 1
SESSION_KEY_BYTES: Final = 32
KEYLOAD_ID_BYTES: Final = 16
SEALED_KEY_BYTES: Final = 80  # crypto_box_seal: 32-byte ephemeral key, 16-byte MAC, 32-byte key
#: The message kind of a keyload part (a publisher's own kinds never start with "wt.").
KEYLOAD_KIND: Final = "wt.keyload"
#: The message kind of a reseal: a past keyload's session key sealed to more members.
RESEAL_KIND: Final = "wt.reseal"
#: The tag naming a message's keyload (its id in hex), on a masked message, a keyload part and a reseal.
KEYLOAD_ID_TAG: Final = "wt.keyload"
#: The tag naming a message's branch (absent: `DEFAULT_BRANCH`).
BRANCH_TAG: Final = "wt.branch"
#: A part's bytes: one message payload.
MAX_PART_BYTES: Final = MAX_INLINE_PAYLOAD_BYTES
#: Members of one keyload (the issue's scale target, with room).
MAX_MEMBERS: Final = 20_000
MAX_BRANCH_CHARS: Final = 32
#: Branches with a keyload in one stream: each is state the writer keeps, so a publisher cannot
#: grow it without bound.
MAX_BRANCHES: Final = 64
DEFAULT_BRANCH: Final = "main"

_SALT: Final = b"watchtower-keyload-v1"
_MEMBERS_DOMAIN: Final = b"watchtower-keyload-members-v1"
_u64be = struct.Struct(">Q").pack
_HEADER_FIELDS: Final = frozenset({"v", "keyload_id", "stream_id", "branch", "part", "parts", "members",
                                   "members_digest", "key_commitment", "entries"})
_PSK_FIELD: Final = "psk_entries"
PSK_BYTES: Final = 32
PSK_ID_BYTES: Final = 16
WRAPPED_PSK_KEY_BYTES: Final = NONCE_BYTES + SESSION_KEY_BYTES + 16  # nonce, session key, Poly1305 tag
#: Pre-shared-key recipients of one keyload: all ride in part 0, beside its X25519 entries.
MAX_PSK_RECIPIENTS: Final = 64
_RESEAL_FIELDS: Final = frozenset({"v", "keyload_id", "stream_id", "branch", "key_commitment", "entries"})
_AAD_FIELDS: Final = ("stream_id", "sequence", "keyload_id", "branch", "kind", "content_type")


@dataclasses.dataclass(frozen=True, slots=True)
class Recipient:
    """A member a keyload seals the session key to: its account address, the id of its X25519
    account key, and that key."""

    address: str
    account_key_id: int
    public_key: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class PskRecipient:
    """A pre-shared-key holder a keyload wraps the session key for: its 16-byte PSK id (how the
    keyload names it) and the 32-byte PSK (which never leaves the owner and the holder)."""

    psk_id: bytes
    psk: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class Member:
    """An entry of a keyload, as anyone reads it: who, under which account key."""

    address: str
    account_key_id: int


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


# --- Keys ---------------------------------------------------------------------------------------


def new_session_key() -> bytes:
    """A fresh random session key."""
    return os.urandom(SESSION_KEY_BYTES)


def _require_session_key(session_key: object) -> bytes:
    if not isinstance(session_key, bytes) or len(session_key) != SESSION_KEY_BYTES:
        raise InvalidArgumentError(f"a session key is exactly {SESSION_KEY_BYTES} bytes")
    return session_key


def _require_keyload_id(keyload_id: object) -> bytes:
    if not isinstance(keyload_id, bytes) or len(keyload_id) != KEYLOAD_ID_BYTES:
        raise InvalidArgumentError(f"a keyload id is exactly {KEYLOAD_ID_BYTES} bytes")
    return keyload_id


def payload_key(session_key: bytes, keyload_id: bytes) -> bytes:
    """The AEAD key of the branch's masked payloads under this keyload."""
    return _payload_key(_require_session_key(session_key), _require_keyload_id(keyload_id))


@functools.lru_cache(maxsize=64)
def _payload_key(session_key: bytes, keyload_id: bytes) -> bytes:
    # Derived once per keyload, not per message: a publisher masks every message of a keyload with
    # it, and HKDF costs several times the AEAD of a small payload. (The cache lives in the memory
    # of the process that holds the session key anyway.)
    return hkdf_sha256(ikm=session_key, salt=_SALT, info=b"payload" + keyload_id, length=32)


def key_commitment(session_key: bytes, keyload_id: bytes) -> bytes:
    """What a keyload publishes about its session key: lets a member check the key it opened."""
    return hkdf_sha256(ikm=_require_session_key(session_key), salt=_SALT,
                       info=b"commit" + _require_keyload_id(keyload_id), length=32)


def require_branch(branch: object) -> str:
    """`branch` if it is a branch name: 1-32 characters of a-z, 0-9, '-' and '_'."""
    text = require_text(branch, "branch")
    if not 1 <= len(text) <= MAX_BRANCH_CHARS or not all(c.isascii() and ((c.isalnum() and not c.isupper())
                                                                           or c in "-_") for c in text):
        raise InvalidArgumentError(f"branch must be 1-{MAX_BRANCH_CHARS} characters of a-z, 0-9, '-' and '_'")
    return text


def _len_prefixed(text: str) -> bytes:
    raw = text.encode()
    return _u64be(len(raw)) + raw


def members_digest(stream_id: str, branch: str, keyload_id: bytes, members: Iterable[Member],
                   psk_ids: Iterable[bytes] = ()) -> bytes:
    """The digest of the member set (in address order) a keyload claims, then of its PSK ids (in
    order; none: the digest is the one of a keyload without PSK recipients)."""
    h = hashlib.sha256(_MEMBERS_DOMAIN + _len_prefixed(stream_id) + _len_prefixed(branch)
                       + _require_keyload_id(keyload_id))
    for m in members:
        h.update(bytes.fromhex(m.address[2:]) + _u64be(m.account_key_id))
    for psk_id in psk_ids:
        h.update(b"psk" + psk_id)
    return h.digest()


def _require_psk_id(psk_id: object) -> bytes:
    if not isinstance(psk_id, bytes) or len(psk_id) != PSK_ID_BYTES:
        raise InvalidArgumentError(f"a PSK id is exactly {PSK_ID_BYTES} bytes")
    return psk_id


def _psk_wrap_key(psk: object, keyload_id: bytes, psk_id: bytes) -> bytes:
    if not isinstance(psk, bytes) or len(psk) != PSK_BYTES:
        raise InvalidArgumentError(f"a pre-shared key is exactly {PSK_BYTES} bytes")
    return hkdf_sha256(ikm=psk, salt=_SALT, info=b"psk" + keyload_id + psk_id, length=32)


def _psk_nonce(wrap_key: bytes, commitment: bytes) -> bytes:
    return hkdf_sha256(ikm=wrap_key, salt=_SALT, info=b"psk-nonce" + commitment, length=NONCE_BYTES)


def wrap_for_psk(session_key: bytes, keyload_id: bytes, psk_id: bytes, psk: bytes) -> bytes:
    """The session key wrapped for one PSK holder (module docstring), 72 bytes."""
    key, kid, pid = _require_session_key(session_key), _require_keyload_id(keyload_id), _require_psk_id(psk_id)
    wrap_key = _psk_wrap_key(psk, kid, pid)
    return seal_payload(content_key=wrap_key, nonce=_psk_nonce(wrap_key, key_commitment(key, kid)), aad=pid,
                        plaintext=key)


# --- Building -----------------------------------------------------------------------------------


def _entry(member: Member, sealed: bytes) -> list[Any]:
    return [bytes.fromhex(member.address[2:]), member.account_key_id, sealed]


def _encode_part(header: dict[str, Any], entries: Sequence[list[Any]]) -> bytes:
    return cbor.encode({**header, "entries": list(entries)})


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
    key = _require_session_key(session_key) if session_key is not None else new_session_key()
    kid = _require_keyload_id(keyload_id) if keyload_id is not None else os.urandom(KEYLOAD_ID_BYTES)
    members, entries = _sealed_entries(key, recipients)
    psk_entries = _psk_entries(key, kid, psk_recipients)
    psk_ids = tuple(pid for pid, _ in psk_entries)
    digest = members_digest(stream_id, branch, kid, members, psk_ids)
    commitment = key_commitment(key, kid)

    def header(part: int, parts: int) -> dict[str, Any]:
        return {"v": KEYLOAD_VERSION, "keyload_id": kid, "stream_id": stream_id, "branch": branch, "part": part,
                "parts": parts, "members": len(members), "members_digest": digest, "key_commitment": commitment}

    extra = {_PSK_FIELD: [list(e) for e in psk_entries]} if psk_entries else {}

    def encode(part: int, parts: int, run: Sequence[list[Any]]) -> bytes:
        return _encode_part({**header(part, parts), **(extra if part == 0 else {})}, run)

    # Sized with the largest header this keyload can have (part numbers only grow), with the PSK
    # entries part 0 carries (the other parts are packed as if they did too: a little room wasted).
    overhead = len(_encode_part({**header(len(entries), len(entries)), **extra}, []))
    runs = _pack(entries, overhead=overhead)
    parts = tuple(encode(i, len(runs), run) for i, run in enumerate(runs))
    return Keyload(key, kid, parts, members, psk_ids)


def _psk_entries(session_key: bytes, keyload_id: bytes,
                 recipients: Iterable[PskRecipient]) -> tuple[tuple[bytes, bytes], ...]:
    by_id: dict[bytes, PskRecipient] = {}
    for r in recipients:
        pid = _require_psk_id(r.psk_id)
        if pid in by_id:
            raise InvalidArgumentError(f"PSK id {pid.hex()} is listed twice; a keyload wraps once per PSK holder")
        by_id[pid] = r
    if len(by_id) > MAX_PSK_RECIPIENTS:
        raise InvalidArgumentError(f"a keyload names at most {MAX_PSK_RECIPIENTS} PSK holders, got {len(by_id)}")
    return tuple((pid, wrap_for_psk(session_key, keyload_id, pid, by_id[pid].psk)) for pid in sorted(by_id))


def _pack(entries: Sequence[list[Any]], *, overhead: int) -> list[list[list[Any]]]:
    # Greedy: as many entries a message as fit in MAX_PART_BYTES beside a header of `overhead` bytes.
    runs: list[list[list[Any]]] = [[]]
    size = overhead
    for entry in entries:
        entry_size = len(cbor.encode(entry))
        if runs[-1] and size + entry_size > MAX_PART_BYTES:
            runs.append([])
            size = overhead
        runs[-1].append(entry)
        size += entry_size
    return runs


def _sealed_entries(session_key: bytes, recipients: Iterable[Recipient]) -> tuple[tuple[Member, ...], list[list[Any]]]:
    # Members in address order, each with the session key sealed to its X25519 key.
    by_address: dict[str, Recipient] = {}
    for r in recipients:
        address = require_address(r.address, "recipient address")
        require_int(r.account_key_id, "account_key_id", minimum=1)
        if address in by_address:
            raise InvalidArgumentError(f"{address} is listed twice; a keyload seals to one key per member")
        by_address[address] = r
    if not by_address:
        raise InvalidArgumentError("a keyload needs at least one member (the owner is always one)")
    if len(by_address) > MAX_MEMBERS:
        raise InvalidArgumentError(f"a keyload holds at most {MAX_MEMBERS} members, got {len(by_address)}")
    members = tuple(Member(a, by_address[a].account_key_id) for a in sorted(by_address))
    entries = [_entry(m, bytes(nacl.public.SealedBox(nacl.public.PublicKey(
        validate_x25519_public_key(by_address[m.address].public_key))).encrypt(session_key))) for m in members]
    return members, entries


# --- Reading ------------------------------------------------------------------------------------


def decode_part(data: object) -> KeyloadPart:
    """The keyload part in `data`, or INVALID_ARGUMENT naming what is wrong. Byte-exact: no other
    CBOR spelling of the same part is accepted."""
    doc = _decode_cbor_map(data, _HEADER_FIELDS, "keyload part", optional=frozenset({_PSK_FIELD}))
    kid = _require_keyload_id(doc["keyload_id"])
    stream_id = require_text(doc["stream_id"], "stream_id")
    branch = require_branch(doc["branch"])
    parts = require_int(doc["parts"], "parts", minimum=1, maximum=MAX_MEMBERS)
    part = require_int(doc["part"], "part", minimum=0, maximum=parts - 1)
    count = require_int(doc["members"], "members", minimum=1, maximum=MAX_MEMBERS)
    for name in ("members_digest", "key_commitment"):
        if not isinstance(doc[name], bytes) or len(doc[name]) != 32:
            raise InvalidArgumentError(f"{name} is 32 bytes")
    entries = _decode_entries(doc["entries"])
    psk_entries = _decode_psk_entries(doc[_PSK_FIELD]) if _PSK_FIELD in doc else ()
    if psk_entries and part != 0:
        raise InvalidArgumentError("only part 0 of a keyload holds psk_entries")
    decoded = KeyloadPart(kid, stream_id, branch, part, parts, count, doc["members_digest"], doc["key_commitment"],
                          entries, psk_entries)
    if _encode_part({k: doc[k] for k in doc if k != "entries"}, doc["entries"]) != data:
        raise InvalidArgumentError("a keyload part must be deterministic CBOR (RFC 8949 §4.2.1)")
    return decoded


def _decode_psk_entries(raw: object) -> tuple[tuple[bytes, bytes], ...]:
    if not isinstance(raw, list) or not raw or len(raw) > MAX_PSK_RECIPIENTS:
        raise InvalidArgumentError(f"psk_entries holds 1 to {MAX_PSK_RECIPIENTS} entries (leave it out for none)")
    entries: list[tuple[bytes, bytes]] = []
    for item in raw:
        if (not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], bytes)
                or len(item[0]) != PSK_ID_BYTES or not isinstance(item[1], bytes)
                or len(item[1]) != WRAPPED_PSK_KEY_BYTES):
            raise InvalidArgumentError(f"a PSK entry is [psk_id ({PSK_ID_BYTES} bytes), wrapped key "
                                       f"({WRAPPED_PSK_KEY_BYTES} bytes)]")
        if entries and item[0] <= entries[-1][0]:
            raise InvalidArgumentError("psk_entries are in strictly increasing PSK-id order")
        entries.append((item[0], item[1]))
    return tuple(entries)


def _find(entries: tuple[tuple[Member, bytes], ...], address: str) -> tuple[Member, bytes] | None:
    addresses = [m.address for m, _ in entries]
    i = bisect.bisect_left(addresses, address)
    return entries[i] if i < len(addresses) and addresses[i] == address else None


def find_entry(part: KeyloadPart, address: str) -> tuple[Member, bytes] | None:
    """The entry of `address` in `part` (binary search), or None."""
    return _find(part.entries, address)


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
    return _open_sealed(found, address, private_key, part.keyload_id, part.key_commitment)


def open_keyload_psk(part: KeyloadPart, psk_id: bytes, psk: bytes) -> bytes:
    """The session key `part` (part 0 of a keyload) wraps for the holder of PSK `psk_id`, checked
    against the key commitment. UNAUTHORIZED when the keyload names no such PSK id;
    DECRYPTION_FAILED when `psk` is not the key it was wrapped with, or it opens to a key the
    keyload is not about."""
    pid = _require_psk_id(psk_id)
    wrapped = next((w for i, w in part.psk_entries if i == pid), None)
    if wrapped is None:
        raise UnauthorizedError(f"keyload {part.keyload_id.hex()} (part {part.part}) names no PSK holder {pid.hex()}; "
                                "PSK entries ride in part 0: read it, or ask the owner for the current keyload")
    wrap_key = _psk_wrap_key(psk, part.keyload_id, pid)
    try:
        key = open_payload(content_key=wrap_key, aad=pid, envelope=wrapped)
    except DecryptionFailedError:
        raise DecryptionFailedError(f"the session key wrapped for PSK id {pid.hex()} did not open with this "
                                    "pre-shared key; use the PSK the owner gave with that id") from None
    if len(key) != SESSION_KEY_BYTES or key_commitment(key, part.keyload_id) != part.key_commitment:
        raise DecryptionFailedError("the key wrapped for this PSK is not the one this keyload commits to; "
                                    "the keyload is forged or altered: report it to the feed's owner")
    return key


def _open_sealed(found: tuple[Member, bytes], address: str, private_key: bytes, keyload_id: bytes,
                 commitment: bytes) -> bytes:
    try:
        key = bytes(nacl.public.SealedBox(nacl.public.PrivateKey(private_key)).decrypt(found[1]))
    except (nacl.exceptions.CryptoError, nacl.exceptions.TypeError, nacl.exceptions.ValueError):
        raise DecryptionFailedError(
            f"the sealed key for {address} did not open with this account key (key id "
            f"{found[0].account_key_id} was sealed to); load that key") from None
    if len(key) != SESSION_KEY_BYTES or key_commitment(key, keyload_id) != commitment:
        raise DecryptionFailedError("the key sealed to you is not the one this keyload commits to; "
                                    "the keyload is forged or altered: report it to the feed's owner")
    return key


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


# --- Reseals ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Reseal:
    """A decoded reseal: a past keyload's session key, sealed to more members. `key_commitment` is
    the keyload's own; `entries` are (member, sealed session key) in address order."""

    keyload_id: bytes
    stream_id: str
    branch: str
    key_commitment: bytes
    entries: tuple[tuple[Member, bytes], ...]


def build_reseals(stream_id: str, recipients: Iterable[Recipient], *, branch: str, keyload_id: bytes,
                  session_key: bytes) -> tuple[bytes, ...]:
    """Seal a past keyload's `session_key` to `recipients` (the owner opened it from the keyload),
    as reseal payloads of at most `MAX_PART_BYTES` each: one message each, kind `RESEAL_KIND`.
    The members of a reseal open nothing newer: each keyload is resealed on its own."""
    require_text(stream_id, "stream_id")
    require_branch(branch)
    kid = _require_keyload_id(keyload_id)
    key = _require_session_key(session_key)
    _members, entries = _sealed_entries(key, recipients)
    head = {"v": KEYLOAD_VERSION, "keyload_id": kid, "stream_id": stream_id, "branch": branch,
            "key_commitment": key_commitment(key, kid)}
    runs = _pack(entries, overhead=len(_encode_part(head, [])))
    return tuple(_encode_part(head, run) for run in runs)


def _decode_entries(raw: object) -> tuple[tuple[Member, bytes], ...]:
    if not isinstance(raw, list) or not raw:
        raise InvalidArgumentError("a keyload part or reseal holds at least one entry")
    entries: list[tuple[Member, bytes]] = []
    for item in raw:
        if (not isinstance(item, list) or len(item) != 3 or not isinstance(item[0], bytes) or len(item[0]) != 32
                or not isinstance(item[2], bytes) or len(item[2]) != SEALED_KEY_BYTES):
            raise InvalidArgumentError("a keyload entry is [address (32 bytes), account_key_id, sealed key (80 bytes)]")
        member = Member("0x" + item[0].hex(), require_int(item[1], "account_key_id", minimum=1))
        if entries and member.address <= entries[-1][0].address:
            raise InvalidArgumentError("a keyload part's entries are in strictly increasing address order")
        entries.append((member, item[2]))
    return tuple(entries)


def _decode_cbor_map(data: object, fields: frozenset[str], what: str,
                     optional: frozenset[str] = frozenset()) -> dict[str, Any]:
    if not isinstance(data, bytes) or len(data) > MAX_PART_BYTES:
        raise InvalidArgumentError(f"a {what} is at most {MAX_PART_BYTES} bytes of CBOR")
    try:
        doc = cbor2.loads(data)
    except Exception:  # cbor2 raises several types on hostile bytes; every one means "not one"
        raise InvalidArgumentError(f"a {what} is deterministic CBOR; this is not CBOR") from None
    if not isinstance(doc, dict) or not fields <= set(doc) <= fields | optional:
        extra = f" (and optionally {sorted(optional)})" if optional else ""
        raise InvalidArgumentError(f"a {what} has exactly the fields {sorted(fields)}{extra}")
    if type(doc["v"]) is not int or doc["v"] != KEYLOAD_VERSION:  # not 1.0, not True: one spelling
        raise InvalidArgumentError(f"{what} version {doc['v']!r} is not supported (this build reads "
                                   f"v{KEYLOAD_VERSION}); upgrade the client")
    return doc


def decode_reseal(data: object) -> Reseal:
    """The reseal in `data`, or INVALID_ARGUMENT naming what is wrong. Byte-exact, as `decode_part`."""
    doc = _decode_cbor_map(data, _RESEAL_FIELDS, "reseal")
    kid = _require_keyload_id(doc["keyload_id"])
    stream_id = require_text(doc["stream_id"], "stream_id")
    branch = require_branch(doc["branch"])
    if not isinstance(doc["key_commitment"], bytes) or len(doc["key_commitment"]) != 32:
        raise InvalidArgumentError("key_commitment is 32 bytes")
    entries = _decode_entries(doc["entries"])
    if _encode_part({k: doc[k] for k in _RESEAL_FIELDS if k != "entries"}, doc["entries"]) != data:
        raise InvalidArgumentError("a reseal must be deterministic CBOR (RFC 8949 §4.2.1)")
    return Reseal(kid, stream_id, branch, doc["key_commitment"], entries)


def open_reseal(reseal: Reseal, address: str, private_key: bytes, *, commitment: bytes | None = None) -> bytes:
    """The past keyload's session key resealed to `address`, checked against the reseal's key
    commitment and, when given, `commitment`: the one the keyload itself published (a member that
    read the keyload passes it, so a reseal cannot swap in another key). UNAUTHORIZED when
    `address` is not in the reseal; DECRYPTION_FAILED when it does not open or commits elsewhere."""
    if commitment is not None and commitment != reseal.key_commitment:
        raise DecryptionFailedError(f"the reseal of keyload {reseal.keyload_id.hex()} commits to another key than "
                                    "the keyload did; it is forged: report it to the feed's owner")
    found = _find(reseal.entries, address)
    if found is None:
        raise UnauthorizedError(f"{address} is not in this reseal of keyload {reseal.keyload_id.hex()}")
    return _open_sealed(found, address, private_key, reseal.keyload_id, reseal.key_commitment)


# --- Masked payloads ----------------------------------------------------------------------------


def masked_aad(*, stream_id: str, sequence: int, keyload_id: bytes, branch: str, kind: str,
               content_type: str) -> bytes:
    """Deterministic CBOR of {stream_id, sequence, keyload_id, branch, kind, content_type}."""
    return cbor.encode({"stream_id": require_text(stream_id, "stream_id"),
                        "sequence": require_int(sequence, "sequence", minimum=1),
                        "keyload_id": _require_keyload_id(keyload_id), "branch": require_branch(branch),
                        "kind": require_text(kind, "kind"), "content_type": require_text(content_type, "content_type")})


def mask(session_key: bytes, *, keyload_id: bytes, stream_id: str, sequence: int, branch: str, kind: str,
         content_type: str, plaintext: bytes, nonce: bytes | None = None) -> bytes:
    """nonce ‖ XChaCha20-Poly1305(payload_key, nonce, aad, plaintext); a fresh random nonce unless
    given (192 random bits: no counter to keep across crashes). PAYLOAD_TOO_LARGE past 16,344 bytes."""
    aad = masked_aad(stream_id=stream_id, sequence=sequence, keyload_id=keyload_id, branch=branch, kind=kind,
                     content_type=content_type)
    return seal_payload(content_key=payload_key(session_key, keyload_id),
                        nonce=nonce if nonce is not None else os.urandom(NONCE_BYTES), aad=aad, plaintext=plaintext)


def unmask(session_key: bytes, masked: bytes, *, keyload_id: bytes, stream_id: str, sequence: int, branch: str,
           kind: str, content_type: str) -> bytes:
    """The plaintext of `masked`; DECRYPTION_FAILED when it was altered, or belongs to another
    stream, sequence, branch, keyload, kind or content type."""
    aad = masked_aad(stream_id=stream_id, sequence=sequence, keyload_id=keyload_id, branch=branch, kind=kind,
                     content_type=content_type)
    return open_payload(content_key=payload_key(session_key, keyload_id), aad=aad, envelope=masked)


__all__ = [
    "BRANCH_TAG",
    "DEFAULT_BRANCH",
    "KEYLOAD_ID_TAG",
    "KEYLOAD_KIND",
    "MAX_MEMBERS",
    "MAX_PART_BYTES",
    "MAX_PSK_RECIPIENTS",
    "PSK_BYTES",
    "PSK_ID_BYTES",
    "RESEAL_KIND",
    "Keyload",
    "KeyloadPart",
    "KeyloadSummary",
    "Member",
    "PskRecipient",
    "Recipient",
    "Reseal",
    "build_keyload",
    "build_reseals",
    "check_keyload",
    "decode_part",
    "decode_reseal",
    "find_entry",
    "key_commitment",
    "mask",
    "masked_aad",
    "members_digest",
    "new_session_key",
    "open_keyload",
    "open_keyload_psk",
    "open_reseal",
    "part_for",
    "payload_key",
    "require_branch",
    "unmask",
    "wrap_for_psk",
]
