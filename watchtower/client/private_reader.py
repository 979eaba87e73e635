"""A member's side of a confidential private feed: `ConfidentialReader`.

It takes the verified messages a `Subscriber` hands out, in order: it takes in the keyload parts
and reseals among them, opens those sealed to this member with its X25519 private keys (newest
first, so a keyload sealed before a rotation still opens), and unmasks the messages masked under
a keyload it holds. The session keys it opens never leave it (its repr shows none). The
publisher's side is `client.private`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from watchtower.protocol.confidential.keyload import (
    BRANCH_TAG,
    KEYLOAD_ID_TAG,
    KEYLOAD_KIND,
    Keyload,
    KeyloadPart,
    Member,
    decode_part,
    open_keyload,
)
from watchtower.protocol.confidential.reseal import RESEAL_KIND, decode_reseal, open_reseal
from watchtower.protocol.confidential.session_key import key_commitment, unmask
from watchtower.protocol.errors import DecryptionFailedError, InvalidArgumentError, UnauthorizedError
from watchtower.protocol.stream.message import StreamMessage


@dataclasses.dataclass(frozen=True, slots=True)
class Opened:
    """A message as a member reads it: the verified message and its plaintext (None for a keyload part)."""

    message: StreamMessage
    plaintext: bytes | None
    branch: str | None


class ConfidentialReader:
    """A member's view of a confidential feed: feed it the verified messages, in order.

    A reseal (a past keyload's key sealed to this member later) unlocks messages published before
    it: on a history read, `prime` the reader with the messages first, then `read` them."""

    def __init__(self, address: str, private_key: bytes | Sequence[bytes]) -> None:
        """`private_key`: the member's X25519 private key, or several (its account keys, newest
        last: a keyload sealed before a rotation opens with the key of its time)."""
        self.address = address
        self._private_keys = [private_key] if isinstance(private_key, bytes) else list(reversed(private_key))
        if not self._private_keys:
            raise InvalidArgumentError("a reader needs at least one X25519 private key")
        self._keys: dict[bytes, bytes] = {}  # keyload id -> session key (this member's)
        self._branches: dict[bytes, str] = {}
        self._parts: dict[bytes, dict[int, KeyloadPart]] = {}
        self._resealed: set[bytes] = set()
        self._failed: dict[bytes, DecryptionFailedError] = {}  # keyload id -> why its key did not open

    def __repr__(self) -> str:  # never a key
        return f"ConfidentialReader(address={self.address!r}, keyloads={len(self._keys)})"

    def keyloads(self) -> dict[str, dict[str, Any]]:
        """The keyloads seen, by id (hex): branch, parts seen of how many, whether this member holds
        the key, and whether it came by a reseal."""
        return {kid.hex(): {"branch": next(iter(parts.values())).branch, "parts_seen": len(parts),
                            "parts": next(iter(parts.values())).parts, "member": kid in self._keys,
                            "resealed": kid in self._resealed}
                for kid, parts in self._parts.items()}

    def members(self, keyload_id: bytes) -> list[Member]:
        """The members of the parts of `keyload_id` seen so far (all of them once every part was read)."""
        parts = self._parts.get(keyload_id, {})
        return [m for i in sorted(parts) for m, _ in parts[i].entries]

    def keyload(self, keyload_id: bytes) -> Keyload | None:
        """The keyload `keyload_id` as its publisher holds it, when this member opened it and read
        every part: lets the owner publish under (`ConfidentialPublisher.resume`) or reseal it."""
        key, parts = self._keys.get(keyload_id), self._parts.get(keyload_id, {})
        if key is None or not parts or len(parts) != next(iter(parts.values())).parts:
            return None
        return Keyload(key, keyload_id, (), tuple(self.members(keyload_id)))

    def prime(self, messages: Iterable[StreamMessage]) -> None:
        """Take in the keyload parts and reseals among verified `messages` (nothing else is read).
        A part or reseal whose key does not open (a forged one, or one sealed to an account key
        this reader does not hold), or that does not decode, does not stop it: reading a message
        under that keyload (or the record itself) raises the reason."""
        for msg in messages:
            if msg.kind in (KEYLOAD_KIND, RESEAL_KIND):
                try:
                    self.read(msg)
                except DecryptionFailedError:
                    continue  # kept in _failed: the masked messages under it report it
                except InvalidArgumentError:
                    continue  # not a keyload part or a reseal (reading it again says why)

    def read(self, msg: StreamMessage) -> Opened:
        """The plaintext of a verified `msg`. A keyload part or a reseal is taken in (its plaintext
        is None). UNAUTHORIZED for a masked message under a keyload this member is not in (or
        whose part holding this member was not read); DECRYPTION_FAILED when it does not open."""
        if msg.kind == KEYLOAD_KIND:
            self._take_part(msg)
            return Opened(msg, None, str(msg.tags.get(BRANCH_TAG)))
        if msg.kind == RESEAL_KIND:
            self._take_reseal(msg)
            return Opened(msg, None, str(msg.tags.get(BRANCH_TAG)))
        kid_hex = msg.tags.get(KEYLOAD_ID_TAG)
        if not isinstance(kid_hex, str):
            return Opened(msg, msg.payload_inline, None)  # not masked: a public message of the stream
        try:
            kid = bytes.fromhex(kid_hex)
        except ValueError:
            raise InvalidArgumentError(f"message {msg.sequence} names keyload {kid_hex!r}, not hex") from None
        key = self._keys.get(kid)
        if key is None and kid in self._failed:
            raise DecryptionFailedError(f"message {msg.sequence} is masked under keyload {kid_hex}, whose key did "
                                        f"not open: {self._failed[kid].message}")
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
        if part.keyload_id in self._resealed and not self._commitment_matches(part.keyload_id):
            self._forget(part.keyload_id)  # a reseal that committed to another key: the keyload wins
        if part.first <= self.address <= part.last and part.keyload_id not in self._keys:
            try:
                self._keys[part.keyload_id] = self._open_with_any(
                    lambda key: open_keyload(part, self.address, key))
            except UnauthorizedError:
                return  # in range but not a member: nothing to open
            except DecryptionFailedError as exc:
                self._failed[part.keyload_id] = exc
                raise
            self._failed.pop(part.keyload_id, None)
            self._branches[part.keyload_id] = part.branch

    def _take_reseal(self, msg: StreamMessage) -> None:
        reseal = decode_reseal(msg.payload_inline)
        if reseal.stream_id != msg.stream_id:
            raise InvalidArgumentError(f"message {msg.sequence} carries a reseal of stream {reseal.stream_id!r}")
        if reseal.keyload_id in self._keys:
            return
        seen = self._parts.get(reseal.keyload_id)
        commitment = next(iter(seen.values())).key_commitment if seen else None
        try:
            key = self._open_with_any(lambda k: open_reseal(reseal, self.address, k, commitment=commitment))
        except UnauthorizedError:
            return  # not resealed to this member
        except DecryptionFailedError as exc:
            self._failed[reseal.keyload_id] = exc
            raise
        self._failed.pop(reseal.keyload_id, None)
        self._keys[reseal.keyload_id] = key
        self._branches[reseal.keyload_id] = reseal.branch
        self._resealed.add(reseal.keyload_id)

    def _open_with_any(self, attempt: Callable[[bytes], bytes]) -> bytes:
        # Newest key first; the first key's refusal is the one reported when none opens.
        first: DecryptionFailedError | None = None
        for key in self._private_keys:
            try:
                return attempt(key)
            except DecryptionFailedError as exc:
                first = first or exc
        assert first is not None
        raise first

    def _commitment_matches(self, keyload_id: bytes) -> bool:
        parts = self._parts[keyload_id]
        return key_commitment(self._keys[keyload_id], keyload_id) == next(iter(parts.values())).key_commitment

    def _forget(self, keyload_id: bytes) -> None:
        self._keys.pop(keyload_id, None)
        self._branches.pop(keyload_id, None)
        self._resealed.discard(keyload_id)


__all__ = ["ConfidentialReader", "Opened"]
