"""Confidential private feeds in the SDK: keyloads out, masked payloads in (protocol.keyload).

The publisher's side (`ConfidentialPublisher`) makes a fresh session key for a branch, seals it to
every member's X25519 account key and publishes the keyload in the stream itself, as messages of
kind ``wt.keyload`` (one per part, signed and sequenced like any message); every later message of
the branch carries a masked payload and the tags ``wt.keyload`` (the keyload id) and ``wt.branch``.
A member's side (`ConfidentialReader`) takes the verified messages a `Subscriber` hands out, opens
the keyloads it belongs to with its X25519 private key, and unmasks the payloads.

Neither the session key nor a plaintext ever leaves these two objects: the API, the worker, the
read side, the replay and push paths only store and forward ciphertext and sealed boxes.

Membership changes re-key: after a member leaves, call `rekey` with the remaining members before
the next message (a member removed keeps what it could open before, and opens nothing after).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Final

from watchtower.client.sdk import Publisher
from watchtower.protocol.constants import DEFAULT_CONTENT_TYPE
from watchtower.protocol.errors import InvalidArgumentError, StaleSequenceError, UnauthorizedError
from watchtower.protocol.keyload import (
    DEFAULT_BRANCH,
    KEYLOAD_ID_TAG,
    KEYLOAD_KIND,
    Keyload,
    KeyloadPart,
    Recipient,
    build_keyload,
    decode_part,
    mask,
    open_keyload,
    require_branch,
    unmask,
)
from watchtower.protocol.message import StreamMessage, TagValue

#: Tags of a masked message: which keyload's key masks it, and its branch.
TAG_KEYLOAD: Final = KEYLOAD_ID_TAG
TAG_BRANCH: Final = "wt.branch"
#: Tags of a keyload part: its keyload, branch, part number and count, and its address range.
TAG_PART: Final = "wt.part"
TAG_PARTS: Final = "wt.parts"
TAG_FIRST: Final = "wt.first"
TAG_LAST: Final = "wt.last"
KEYLOAD_CONTENT_TYPE: Final = "application/cbor"


class ConfidentialPublisher:
    """Masks every message of one branch under the branch's current keyload (see the module docstring)."""

    def __init__(self, publisher: Publisher, *, branch: str = DEFAULT_BRANCH) -> None:
        self.publisher = publisher
        self.branch = require_branch(branch)
        self._keyload: Keyload | None = None

    @property
    def keyload_id(self) -> bytes | None:
        """The id of the keyload masking the next message (None before the first `rekey`)."""
        return None if self._keyload is None else self._keyload.keyload_id

    def rekey(self, members: Iterable[Recipient]) -> Keyload:
        """Publish a new keyload for `members` (the owner among them, to read its own feed); every
        later message is masked under it. Returns it (its `session_key` stays in this process)."""
        keyload = build_keyload(self.publisher.stream_id, members, branch=self.branch)
        parts = [decode_part(p) for p in keyload.parts]
        for raw, part in zip(keyload.parts, parts, strict=True):
            tags: dict[str, TagValue] = {TAG_KEYLOAD: keyload.keyload_id.hex(), TAG_BRANCH: self.branch,
                                         TAG_PART: float(part.part), TAG_PARTS: float(part.parts),
                                         TAG_FIRST: part.first, TAG_LAST: part.last}
            self.publisher.publish(KEYLOAD_KIND, raw, tags, KEYLOAD_CONTENT_TYPE)
        self._keyload = keyload
        return keyload

    def publish(self, kind: str, plaintext: bytes, tags: Mapping[str, TagValue] | None = None,
                content_type: str = DEFAULT_CONTENT_TYPE) -> dict[str, Any]:
        """Mask `plaintext` for the next sequence and publish it. Should another writer take that
        sequence first (STALE_SEQUENCE), it is masked again for the new head, once."""
        if self._keyload is None:
            raise InvalidArgumentError("no keyload yet: call rekey(members) before the first message")
        if kind == KEYLOAD_KIND:
            raise InvalidArgumentError(f"the kind {KEYLOAD_KIND!r} is reserved for keyloads")
        for name in (TAG_KEYLOAD, TAG_BRANCH):
            if tags and name in tags:
                raise InvalidArgumentError(f"the tag {name!r} is set by the confidential publisher")
        all_tags: dict[str, TagValue] = {**(tags or {}), TAG_KEYLOAD: self._keyload.keyload_id.hex(),
                                         TAG_BRANCH: self.branch}
        for attempt in range(2):
            head = self.publisher.head if self.publisher.head is not None else self.publisher.sync()
            sequence = head + 1
            masked = mask(self._keyload.session_key, keyload_id=self._keyload.keyload_id,
                          stream_id=self.publisher.stream_id, sequence=sequence, branch=self.branch, kind=kind,
                          content_type=content_type, plaintext=plaintext)
            try:
                return self.publisher.publish(kind, masked, all_tags, content_type, sequence=sequence)
            except StaleSequenceError:
                if attempt:
                    raise
        raise AssertionError("unreachable")


@dataclasses.dataclass(frozen=True, slots=True)
class Opened:
    """A message as a member reads it: the verified message and its plaintext (None for a keyload part)."""

    message: StreamMessage
    plaintext: bytes | None
    branch: str | None


class ConfidentialReader:
    """A member's view of a confidential feed: feed it the verified messages, in order."""

    def __init__(self, address: str, private_key: bytes) -> None:
        self.address = address
        self._private_key = private_key
        self._keys: dict[bytes, bytes] = {}  # keyload id -> session key (this member's)
        self._branches: dict[bytes, str] = {}
        self._parts: dict[bytes, dict[int, KeyloadPart]] = {}

    def __repr__(self) -> str:  # never a key
        return f"ConfidentialReader(address={self.address!r}, keyloads={len(self._keys)})"

    def keyloads(self) -> dict[str, dict[str, Any]]:
        """The keyloads seen, by id (hex): branch, parts seen of how many, whether this member holds the key."""
        return {kid.hex(): {"branch": next(iter(parts.values())).branch, "parts_seen": len(parts),
                            "parts": next(iter(parts.values())).parts, "member": kid in self._keys}
                for kid, parts in self._parts.items()}

    def read(self, msg: StreamMessage) -> Opened:
        """The plaintext of a verified `msg`. A keyload part is taken in (its plaintext is None).
        UNAUTHORIZED for a masked message under a keyload this member is not in (or whose part
        holding this member was not read); DECRYPTION_FAILED when it does not open."""
        if msg.kind == KEYLOAD_KIND:
            self._take_part(msg)
            return Opened(msg, None, str(msg.tags.get(TAG_BRANCH)))
        kid_hex = msg.tags.get(TAG_KEYLOAD)
        if not isinstance(kid_hex, str):
            return Opened(msg, msg.payload_inline, None)  # not masked: a public message of the stream
        try:
            kid = bytes.fromhex(kid_hex)
        except ValueError:
            raise InvalidArgumentError(f"message {msg.sequence} names keyload {kid_hex!r}, not hex") from None
        key = self._keys.get(kid)
        if key is None:
            raise UnauthorizedError(f"message {msg.sequence} is masked under keyload {kid_hex}, which "
                                    f"{self.address} cannot open: not a member of it (or its keyload was not read)")
        branch = self._branches[kid]
        plaintext = unmask(key, msg.payload_inline, keyload_id=kid, stream_id=msg.stream_id, sequence=msg.sequence,
                           branch=branch, kind=msg.kind, content_type=msg.content_type)
        return Opened(msg, plaintext, branch)

    def _take_part(self, msg: StreamMessage) -> None:
        part = decode_part(msg.payload_inline)
        if part.stream_id != msg.stream_id:
            raise InvalidArgumentError(f"message {msg.sequence} carries a keyload of stream {part.stream_id!r}")
        self._parts.setdefault(part.keyload_id, {})[part.part] = part
        if part.first <= self.address <= part.last and part.keyload_id not in self._keys:
            try:
                self._keys[part.keyload_id] = open_keyload(part, self.address, self._private_key)
            except UnauthorizedError:
                return  # in range but not a member: nothing to open
            self._branches[part.keyload_id] = part.branch


__all__ = ["ConfidentialPublisher", "ConfidentialReader", "Opened"]
