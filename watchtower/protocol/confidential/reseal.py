"""Reseals: a past keyload's session key, sealed to members who joined after it.

A keyload seals its session key to the members of its day; a member added later can read the
branch's new messages from the next keyload on, but not the older ones. A *reseal* is how the owner
gives it those too, one past keyload at a time: the owner opens the keyload's session key (as any
member does), seals it to the new members, and publishes the result in the stream as messages of
kind `RESEAL_KIND`. A reseal is deterministic CBOR of

    {v, keyload_id, stream_id, branch, key_commitment, entries}

where `key_commitment` is the keyload's own and `entries` are ``[address, account_key_id, sealed]``
in address order, as in a keyload part (`keyload_entries`). A reseal opens nothing newer than its
keyload, and a member that read the keyload checks the reseal's commitment against the keyload's,
so a reseal cannot swap in another key. The decoder is byte-exact, as the keyload's is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Final

from watchtower.protocol.confidential.keyload_entries import (
    KEYLOAD_VERSION,
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
from watchtower.protocol.confidential.session_key import (
    key_commitment,
    require_branch,
    require_keyload_id,
    require_session_key,
)
from watchtower.protocol.errors import DecryptionFailedError, InvalidArgumentError, UnauthorizedError
from watchtower.protocol.validation import require_text

#: The message kind of a reseal (a publisher's own kinds never start with "wt.").
RESEAL_KIND: Final = "wt.reseal"
_FIELDS: Final = frozenset({"v", "keyload_id", "stream_id", "branch", "key_commitment", "entries"})


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
    as reseal payloads of at most `keyload_entries.MAX_PART_BYTES` each: one message each, kind
    `RESEAL_KIND`. The members of a reseal open nothing newer: each keyload is resealed on its own."""
    require_text(stream_id, "stream_id")
    require_branch(branch)
    kid = require_keyload_id(keyload_id)
    key = require_session_key(session_key)
    _members, entries = sealed_entries(key, recipients)
    head = {"v": KEYLOAD_VERSION, "keyload_id": kid, "stream_id": stream_id, "branch": branch,
            "key_commitment": key_commitment(key, kid)}
    runs = pack_entries(entries, overhead=len(encode_part(head, [])))
    return tuple(encode_part(head, run) for run in runs)


def decode_reseal(data: object) -> Reseal:
    """The reseal in `data`, or INVALID_ARGUMENT naming what is wrong. Byte-exact, as `keyload.decode_part`."""
    doc = decode_cbor_map(data, _FIELDS, "reseal")
    kid = require_keyload_id(doc["keyload_id"])
    stream_id = require_text(doc["stream_id"], "stream_id")
    branch = require_branch(doc["branch"])
    if not isinstance(doc["key_commitment"], bytes) or len(doc["key_commitment"]) != 32:
        raise InvalidArgumentError("key_commitment is 32 bytes")
    entries = decode_entries(doc["entries"])
    if encode_part({k: doc[k] for k in _FIELDS if k != "entries"}, doc["entries"]) != data:
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
    found = find_member(reseal.entries, address)
    if found is None:
        raise UnauthorizedError(f"{address} is not in this reseal of keyload {reseal.keyload_id.hex()}")
    return open_sealed(found, address, private_key, reseal.keyload_id, reseal.key_commitment)


__all__ = ["RESEAL_KIND", "Reseal", "build_reseals", "decode_reseal", "open_reseal"]
