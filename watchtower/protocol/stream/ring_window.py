"""Ring-buffer window arithmetic: pruning on publish and the get_since range (DESIGN §7.5).

- `floor = max(1, head - capacity + 1)`, and 1 while head is 0 (the empty-stream rule).
- Publishing appends head+1 and, once the window holds more than `capacity` messages, prunes the
  floor: O(1) per publish, and exactly the CIP-7 "Ring Buffer Pruning" steps.
- `get_since_range` checks the limit first (LIMIT_EXCEEDED outside 1..500), then the cursor
  (negative: INVALID_ARGUMENT; head > 0 and cursor < floor − 1: CURSOR_TOO_OLD), and returns the
  sequences cursor+1 .. min(head, cursor+limit) as an ascending, possibly empty `range`.
- CURSOR_TOO_OLD points the way back: given the stream id, its details carry a ready ICRC-77
  register_replay request for the pruned range ``[cursor + 1, floor)`` with its price
  (`replay_request`), which a client signs and sends as it is.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from watchtower.protocol.constants import MAX_GET_SINCE_LIMIT, MIN_GET_SINCE_LIMIT
from watchtower.protocol.errors import CursorTooOldError, LimitExceededError
from watchtower.protocol.validation import is_int, require_int


def floor_for(head: int, capacity: int) -> int:
    """The oldest retained sequence for a stream whose head is `head` (1 on an empty stream)."""
    require_int(head, "head")
    require_int(capacity, "ring_buffer_capacity", minimum=1)
    if head == 0:
        return 1
    return max(1, head - capacity + 1)


@dataclasses.dataclass(frozen=True, slots=True)
class RingWindow:
    """A stream's retained window, `floor..head` inclusive and empty while head is 0.

    Only head and capacity are stored: the floor is derived from them, so it cannot drift.
    """

    capacity: int
    head: int = 0

    def __post_init__(self) -> None:
        require_int(self.capacity, "ring_buffer_capacity", minimum=1)
        require_int(self.head, "head")

    @property
    def floor(self) -> int:
        """The oldest retained sequence (1 on an empty stream)."""
        return floor_for(self.head, self.capacity)

    @property
    def size(self) -> int:
        """How many messages the window retains."""
        return 0 if self.head == 0 else self.head - self.floor + 1

    def contains(self, sequence: int) -> bool:
        """Is `sequence` still retained?"""
        return self.head > 0 and self.floor <= sequence <= self.head

    def publish(self) -> tuple[RingWindow, int | None]:
        """The window after one successful publish, and the sequence it pruned (or None).

        Follows CIP-7's pruning steps: append head+1; if the window then holds more than
        `capacity` messages, the old floor is deleted. The new message is the returned `head`.
        """
        floor = self.floor
        head = self.head + 1
        pruned = floor if head - floor + 1 > self.capacity else None
        return RingWindow(self.capacity, head), pruned

    def since(self, cursor: int, limit: int) -> range:
        """`get_since_range` on this window."""
        return get_since_range(self.head, self.capacity, cursor, limit)


def check_limit(limit: object) -> int:
    """`limit` if it is an integer in 1..500, else LIMIT_EXCEEDED (the first get_since check)."""
    if not is_int(limit) or not MIN_GET_SINCE_LIMIT <= limit <= MAX_GET_SINCE_LIMIT:  # type: ignore[operator]
        raise LimitExceededError(
            f"limit must be an integer in {MIN_GET_SINCE_LIMIT}..{MAX_GET_SINCE_LIMIT}, got {limit!r}; "
            f"page through larger ranges with several calls."
        )
    return int(limit)  # type: ignore[call-overload]


def get_since_range(head: int, capacity: int, cursor: int, limit: int, *, stream_id: str | None = None,
                    replay_price_per_event_cby: int = 0) -> range:
    """The sequences `get_since(cursor, limit)` returns on a stream at `head` (DESIGN §7.5).

    With `stream_id`, a CURSOR_TOO_OLD carries the ready replay request of the pruned range, priced
    at `replay_price_per_event_cby` per event (`replay_request`).
    """
    n = check_limit(limit)
    c = require_int(cursor, "cursor")
    floor = floor_for(head, capacity)
    if head > 0 and c < floor - 1:
        replay = None if stream_id is None else replay_request(stream_id, c, floor, replay_price_per_event_cby)
        raise CursorTooOldError.for_floor(cursor=c, floor=floor, head=head, replay=replay)
    return range(c + 1, min(head, c + n) + 1)


def replay_request(stream_id: str, cursor: int, floor: int, per_event_cby: int = 0) -> dict[str, Any]:
    """The register_replay request for what a reader at `cursor` missed: ``[cursor + 1, floor)``.

    ``{"method", "stream_id", "body", "price_cby", "per_event_cby"}``: `body` is a complete
    register_replay body whose ``max_payment_cby`` is the price (every sequence of the range is
    charged: no skip, no filter), so signing it as it is pays exactly the advertised price.
    """
    first = require_int(cursor, "cursor") + 1
    end = require_int(floor, "floor")
    per_event = require_int(per_event_cby, "replay_price_per_event_cby")
    price = per_event * max(0, end - first)
    return {
        "method": "register_replay",
        "stream_id": stream_id,
        "body": {"namespace": stream_id, "from": first, "to": end,
                 "config": {"filter": None, "skip": None, "max_payment_cby": price}, "memo_hex": ""},
        "price_cby": price,
        "per_event_cby": per_event,
    }
