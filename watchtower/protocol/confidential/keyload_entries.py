"""A keyload's entries: the session key sealed to each member, written, packed, read and opened.

Keyloads (`keyload`) and reseals (`reseal`) both carry a run of *entries*, one per member in
strictly increasing address order:

    entry  = [address (32 bytes), account key id, sealed]
    sealed = crypto_box_seal(session_key, member's X25519 public key)                  (80 bytes)

A message carries at most `MAX_PART_BYTES` of payload, so entries are packed greedily into runs
that fit beside a record's header, one run a message. Records are deterministic CBOR maps at
`KEYLOAD_VERSION`; `decode_cbor_map` and `decode_entries` refuse, as INVALID_ARGUMENT naming what
is wrong, anything that is not one. `open_sealed` opens a member's entry with its X25519 private
key and checks the key against the record's key commitment (`session_key.key_commitment`), so a
sealed box moved from another keyload opens to a key that is refused. No error message contains
key material.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any, Final

import cbor2
import nacl.exceptions
import nacl.public

from watchtower.protocol import cbor
from watchtower.protocol.addresses import require_address
from watchtower.protocol.confidential.envelope import validate_x25519_public_key
from watchtower.protocol.confidential.session_key import SESSION_KEY_BYTES, key_commitment
from watchtower.protocol.constants import MAX_INLINE_PAYLOAD_BYTES
from watchtower.protocol.errors import DecryptionFailedError, InvalidArgumentError
from watchtower.protocol.validation import require_int

KEYLOAD_VERSION: Final = 1
SEALED_KEY_BYTES: Final = 80  # crypto_box_seal: 32-byte ephemeral key, 16-byte MAC, 32-byte key
#: A part's bytes: one message payload.
MAX_PART_BYTES: Final = MAX_INLINE_PAYLOAD_BYTES
#: Members of one keyload (the issue's scale target, with room).
MAX_MEMBERS: Final = 20_000


@dataclasses.dataclass(frozen=True, slots=True)
class Recipient:
    """A member a keyload seals the session key to: its account address, the id of its X25519
    account key, and that key."""

    address: str
    account_key_id: int
    public_key: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class Member:
    """An entry of a keyload, as anyone reads it: who, under which account key."""

    address: str
    account_key_id: int


def _entry(member: Member, sealed: bytes) -> list[Any]:
    return [bytes.fromhex(member.address[2:]), member.account_key_id, sealed]


def encode_part(header: dict[str, Any], entries: Sequence[list[Any]]) -> bytes:
    """Deterministic CBOR of `header` with its ``entries`` (a keyload part or a reseal)."""
    return cbor.encode({**header, "entries": list(entries)})


def pack_entries(entries: Sequence[list[Any]], *, overhead: int) -> list[list[list[Any]]]:
    """`entries` in runs, each as many as fit in `MAX_PART_BYTES` beside a header of `overhead` bytes
    (greedy, in order: each run is one message)."""
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


def sealed_entries(session_key: bytes, recipients: Iterable[Recipient]) -> tuple[tuple[Member, ...], list[list[Any]]]:
    """The members, in address order, and their entries: `session_key` sealed to each one's X25519 key.
    INVALID_ARGUMENT for no member, one listed twice or more than `MAX_MEMBERS`."""
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


def find_member(entries: tuple[tuple[Member, bytes], ...], address: str) -> tuple[Member, bytes] | None:
    """The entry of `address` in `entries` (in address order: binary search), or None."""
    addresses = [m.address for m, _ in entries]
    i = bisect.bisect_left(addresses, address)
    return entries[i] if i < len(addresses) and addresses[i] == address else None


def open_sealed(found: tuple[Member, bytes], address: str, private_key: bytes, keyload_id: bytes,
                commitment: bytes) -> bytes:
    """The session key sealed in `found` (the entry of `address`), opened with `private_key` and checked
    against `commitment`; DECRYPTION_FAILED when it does not open or is not the committed key."""
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


def decode_entries(raw: object) -> tuple[tuple[Member, bytes], ...]:
    """The entries of a keyload part or a reseal; INVALID_ARGUMENT unless well formed, in strict address order."""
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


def decode_cbor_map(data: object, fields: frozenset[str], what: str,
                    optional: frozenset[str] = frozenset()) -> dict[str, Any]:
    """`data` (a `what`, at most `MAX_PART_BYTES`) as a CBOR map with exactly `fields` (and any of
    `optional`) at `KEYLOAD_VERSION`; INVALID_ARGUMENT naming what is wrong."""
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


__all__ = [
    "KEYLOAD_VERSION",
    "MAX_MEMBERS",
    "MAX_PART_BYTES",
    "SEALED_KEY_BYTES",
    "Member",
    "Recipient",
    "decode_cbor_map",
    "decode_entries",
    "encode_part",
    "find_member",
    "open_sealed",
    "pack_entries",
    "sealed_entries",
]
