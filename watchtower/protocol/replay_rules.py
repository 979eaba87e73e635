"""ICRC-77 replay ranges and the Kafka headers on replayed records (DESIGN §7.8).

- A replay range is ``[from, to)`` in sequence numbers; `to` is optional.
- Replayed records carry ``icrc77:replay = "true"`` and ``icrc77:replay:id = <decimal id>``; when
  the request had no `to`, every record also carries ``icrc77:replay:end_id = <decimal>``, the last
  sequence the replay will deliver, so the subscriber can tell when it is complete.
- The original `sequence` of each message is unchanged (it is inside the StreamMessage).

Replays read the full log, beyond the ring window, so the only upper bound is the head at
registration time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from watchtower.protocol.constants import REPLAY_END_ID_HEADER, REPLAY_HEADER, REPLAY_ID_HEADER
from watchtower.protocol.errors import ImproperConfigError, MalformedRecordError
from watchtower.protocol.validation import is_int, require_int

_TRUE = b"true"


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayPlan:
    """What one replay delivers: sequences `first` .. `end_exclusive - 1`.

    `end_id` is set (to the last sequence delivered) exactly when the request had no `to`.
    """

    replay_id: int
    first: int
    end_exclusive: int
    end_id: int | None

    @property
    def sequences(self) -> range:
        """The sequences to re-emit, ascending (possibly empty)."""
        return range(self.first, self.end_exclusive)

    def headers(self) -> list[tuple[str, bytes]]:
        """The Kafka headers every replayed record of this plan carries."""
        return replay_headers(self.replay_id, self.end_id)


def plan_replay(*, replay_id: int, from_sequence: int, to_sequence: int | None, head: int) -> ReplayPlan:
    """The plan for replaying ``[from_sequence, to_sequence)`` of a stream whose head is `head`.

    Raises IMPROPER_CONFIG (ICRC-77 ImproperConfig) for a range that is not a range: `from` < 1
    or `to` < `from`. A `to` past the head is clamped to head + 1: only existing messages replay.
    """
    rid = require_int(replay_id, "replay_id")
    top = require_int(head, "head")
    if not is_int(from_sequence) or from_sequence < 1:
        raise ImproperConfigError(f"replay 'from' must be a sequence ≥ 1, got {from_sequence!r}")
    if to_sequence is None:
        return ReplayPlan(rid, from_sequence, max(from_sequence, top + 1), top)
    if not is_int(to_sequence) or to_sequence < from_sequence:
        raise ImproperConfigError(
            f"replay range [{from_sequence}, {to_sequence!r}) is empty or reversed; 'to' is exclusive and "
            f"must be ≥ 'from'"
        )
    return ReplayPlan(rid, from_sequence, max(from_sequence, min(to_sequence, top + 1)), None)


def replay_headers(replay_id: int, end_id: int | None = None) -> list[tuple[str, bytes]]:
    """``icrc77:replay``, ``icrc77:replay:id`` and, when given, ``icrc77:replay:end_id``."""
    headers = [(REPLAY_HEADER, _TRUE), (REPLAY_ID_HEADER, str(require_int(replay_id, "replay_id")).encode())]
    if end_id is not None:
        headers.append((REPLAY_END_ID_HEADER, str(require_int(end_id, "end_id")).encode()))
    return headers


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayMarker:
    """The replay facts read back from a record's headers."""

    replay_id: int
    end_id: int | None


def read_replay_headers(headers: Iterable[tuple[str, bytes | None]] | None) -> ReplayMarker | None:
    """The replay marker of a consumed record, or None for a live (non-replayed) record.

    Raises MALFORMED_RECORD when the replay headers are present but unreadable.
    """
    found = {name: value for name, value in (headers or ()) if name.startswith("icrc77:")}
    if found.get(REPLAY_HEADER) != _TRUE:
        return None
    return ReplayMarker(_decimal(found.get(REPLAY_ID_HEADER), REPLAY_ID_HEADER), _optional(found, REPLAY_END_ID_HEADER))


def _optional(found: dict[str, bytes | None], name: str) -> int | None:
    return _decimal(found[name], name) if name in found else None


def _decimal(raw: bytes | None, name: str) -> int:
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else ""
    if not text.isdigit() or not text.isascii():
        raise MalformedRecordError(f"header {name} must be a decimal number, got {raw!r}")
    return int(text)
