"""The publisher key schedule (DESIGN §7.3).

- The first key has signing_key_id 1 and effective_sequence 1.
- A rotation while the head is h appends id+1, effective at h+1.
- The key at sequence s is the entry with the greatest (effective_sequence, signing_key_id) whose
  effective_sequence ≤ s.

Each entry may carry the owner's signed command that put its key in force (create_stream for key
1, rotate_publisher_key for the others) as canonical JSON text: that is the key chain proof
`key_chain.verify_key_chain` checks, so a reader can verify the schedule from the owner's address
instead of trusting whoever served it (docs/key-chain.md).

`KeySchedule` is an immutable value; `rotate` returns a new schedule. Entries are kept in id order
and effective sequences never decrease, so "greatest (effective_sequence, id) ≤ s" is simply the
last entry whose effective_sequence ≤ s, found by bisection.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import json
from collections.abc import Mapping
from typing import Any

from watchtower.protocol.constants import (
    DEFAULT_KEY_HISTORY_LIMIT,
    ED25519_PUBLIC_KEY_BYTES,
    FIRST_SEQUENCE,
    FIRST_SIGNING_KEY_ID,
    MAX_KEY_HISTORY_LIMIT,
)
from watchtower.protocol.errors import InvalidArgumentError, LimitExceededError
from watchtower.protocol.validation import is_int, require_bytes, require_int


@dataclasses.dataclass(frozen=True, slots=True)
class KeyScheduleEntry:
    """One publisher key: its id, its 32-byte ed25519 public key, and the first sequence it signs.

    `command` is the signed command that put the key in force, as canonical JSON text
    (`canonical_command_json`), or None where it is not known (a worker's state restored from a
    snapshot, which keeps the schedule only). It is evidence about the entry, not part of the
    schedule's value, so it is left out of equality: the schedule is the same whoever holds the proof.
    """

    signing_key_id: int
    public_key: bytes
    effective_sequence: int
    command: str | None = dataclasses.field(default=None, compare=False)

    def __post_init__(self) -> None:
        require_int(self.signing_key_id, "signing_key_id", minimum=FIRST_SIGNING_KEY_ID)
        require_int(self.effective_sequence, "effective_sequence", minimum=FIRST_SEQUENCE)
        object.__setattr__(
            self, "public_key", require_bytes(self.public_key, "public_key", length=ED25519_PUBLIC_KEY_BYTES)
        )
        if self.command is not None and not isinstance(self.command, str):
            raise InvalidArgumentError("a key schedule entry's command is canonical JSON text or None")

    def to_dict(self) -> dict[str, Any]:
        """JSON form with CIP-7's names: ``publisher_key`` as hex.

        ``public_key_hex`` repeats it under the name of release 0.1; it is deprecated and goes in
        the next release. With a known `command`, ``command`` holds it as a JSON object (`Command.to_dict`).
        """
        key_hex = self.public_key.hex()
        out: dict[str, Any] = {
            "signing_key_id": self.signing_key_id,
            "publisher_key": key_hex,
            "effective_sequence": self.effective_sequence,
            "public_key_hex": key_hex,
        }
        if self.command is not None:
            out["command"] = json.loads(self.command)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KeyScheduleEntry:
        """Inverse of `to_dict`; also reads the 0.1 form, which has only ``public_key_hex``."""
        try:
            key_hex = data["publisher_key"] if "publisher_key" in data else data["public_key_hex"]
            command = data.get("command")
            return cls(
                data["signing_key_id"],
                bytes.fromhex(key_hex),
                data["effective_sequence"],
                None if command is None else canonical_command_json(command),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidArgumentError(f"malformed key schedule entry: {exc!r}") from None


@dataclasses.dataclass(frozen=True, slots=True)
class KeyHistoryPage:
    """One page of `get_key_history`; `next_from_signing_key_id` is None on the last page."""

    entries: tuple[KeyScheduleEntry, ...]
    next_from_signing_key_id: int | None


@dataclasses.dataclass(frozen=True, slots=True)
class KeySchedule:
    """An immutable, ordered key schedule. Build with `KeySchedule.initial(public_key)`."""

    entries: tuple[KeyScheduleEntry, ...]
    _effective: tuple[int, ...] = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        entries = tuple(self.entries)
        if not entries:
            raise InvalidArgumentError("a key schedule has at least its first key")
        for index, entry in enumerate(entries):
            if not isinstance(entry, KeyScheduleEntry):
                raise InvalidArgumentError("key schedule entries must be KeyScheduleEntry values")
            if entry.signing_key_id != FIRST_SIGNING_KEY_ID + index:
                raise InvalidArgumentError(
                    f"signing_key_id values must run 1, 2, 3, …; entry {index} has {entry.signing_key_id}"
                )
        if entries[0].effective_sequence != FIRST_SEQUENCE:
            raise InvalidArgumentError("the first key must be effective from sequence 1")
        for before, after in itertools.pairwise(entries):
            if after.effective_sequence < before.effective_sequence:
                raise InvalidArgumentError(
                    f"key {after.signing_key_id} becomes effective before key {before.signing_key_id}"
                )
        object.__setattr__(self, "entries", entries)
        object.__setattr__(self, "_effective", tuple(e.effective_sequence for e in entries))

    @classmethod
    def initial(cls, public_key: bytes, *, command: str | None = None) -> KeySchedule:
        """The schedule of a new stream: key 1, effective from sequence 1 (`command`: the create_stream)."""
        return cls((KeyScheduleEntry(FIRST_SIGNING_KEY_ID, public_key, FIRST_SEQUENCE, command),))

    @property
    def current(self) -> KeyScheduleEntry:
        """The newest entry: the active publisher key."""
        return self.entries[-1]

    def rotate(self, new_public_key: bytes, *, head_sequence: int, command: str | None = None) -> KeySchedule:
        """The schedule after `rotate_publisher_key(new_key)` while the head is `head_sequence`.

        The new entry gets id current+1 and effective_sequence head+1. Raises `InvalidArgumentError`
        when the head is behind the current key's cut-over (heads never move backwards).
        """
        head = require_int(head_sequence, "head_sequence")
        if head + 1 < self.current.effective_sequence:
            raise InvalidArgumentError(
                f"head_sequence {head} is behind key {self.current.signing_key_id}'s cut-over at "
                f"{self.current.effective_sequence}; pass the stream's current head"
            )
        entry = KeyScheduleEntry(self.current.signing_key_id + 1, new_public_key, head + 1, command)
        return KeySchedule((*self.entries, entry))

    def key_at_sequence(self, sequence: int) -> KeyScheduleEntry:
        """The entry in force at `sequence` (≥ 1)."""
        if not is_int(sequence) or sequence < FIRST_SEQUENCE:
            raise InvalidArgumentError(f"sequence must be an integer ≥ 1, got {sequence!r}")
        return self.entries[bisect.bisect_right(self._effective, sequence) - 1]

    def history(
        self, from_signing_key_id: int = FIRST_SIGNING_KEY_ID, limit: int = DEFAULT_KEY_HISTORY_LIMIT
    ) -> KeyHistoryPage:
        """Entries with id ≥ `from_signing_key_id`, ascending, at most `limit` (1..500)."""
        if not is_int(limit) or not 1 <= limit <= MAX_KEY_HISTORY_LIMIT:
            raise LimitExceededError(f"limit must be in 1..{MAX_KEY_HISTORY_LIMIT}, got {limit!r}")
        start = require_int(from_signing_key_id, "from_signing_key_id", minimum=FIRST_SIGNING_KEY_ID)
        page = self.entries[start - 1 : start - 1 + limit]
        following = start + len(page)
        next_from = following if following <= len(self.entries) else None
        return KeyHistoryPage(page, next_from)

    def to_dict(self) -> dict[str, Any]:
        """JSON form: ``{"entries": [...]}``."""
        return {"entries": [e.to_dict() for e in self.entries]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KeySchedule:
        """Inverse of `to_dict`."""
        raw = data.get("entries")
        if not isinstance(raw, list):
            raise InvalidArgumentError("a key schedule needs an 'entries' list")
        return cls(tuple(KeyScheduleEntry.from_dict(e) for e in raw))


def canonical_command_json(command: Any) -> str:
    """The canonical JSON text of a command's JSON form (keys sorted, no spaces): how events and
    schedule entries carry a signed command. INVALID_ARGUMENT unless it is a JSON object."""
    if not isinstance(command, Mapping):
        raise InvalidArgumentError(f"a signed command is a JSON object, got {type(command).__name__}")
    try:
        return json.dumps(command, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"a signed command must be plain JSON: {exc}") from None


def get_key_at_sequence(schedule: KeySchedule, sequence: int) -> KeyScheduleEntry:
    """CIP-7 `get_key_at_sequence`: signing_key_id, publisher_key and effective_sequence at `sequence`."""
    return schedule.key_at_sequence(sequence)


def get_key_history(
    schedule: KeySchedule,
    from_signing_key_id: int = FIRST_SIGNING_KEY_ID,
    limit: int = DEFAULT_KEY_HISTORY_LIMIT,
) -> KeyHistoryPage:
    """CIP-7 `get_key_history`, paged: ordered entries from `from_signing_key_id`."""
    return schedule.history(from_signing_key_id, limit)
