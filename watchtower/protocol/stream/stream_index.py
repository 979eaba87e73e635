"""What the read-side fold keeps in memory for one stream beside its tables: a `StreamIndex`.

Not digested and not stored: a rebuild from the log makes it again. It holds the writer's own
aggregate state of the stream (folded with `stream_state.evolve`, so the read side and the
writer cannot disagree), the messages-topic offsets of the stream's retained window
(`OffsetIndex`, 8 bytes a message), and the references of published messages not indexed yet.
`views` keeps one per stream in ``tables["indexes"]``.
"""

from __future__ import annotations

from array import array

from watchtower.protocol.stream.state import StreamState
from watchtower.protocol.stream.view_checks import MessageRef


class OffsetIndex:
    """Messages-topic offsets of one stream's retained window: sequence -> offset.

    Appends are idempotent (a sequence at or below the last one is ignored, so replays after a
    restart are harmless) and pruning to the floor is O(1) amortised: the dead prefix is dropped
    only when it is as long as the live part. 8 bytes a message, whatever the payload size.
    """

    __slots__ = ("_first_seq", "_offsets", "_start")

    def __init__(self) -> None:
        self._clear()

    def _clear(self) -> None:
        self._first_seq = 0  # sequence of _offsets[_start] (0 while empty)
        self._offsets = array("q")
        self._start = 0

    @property
    def low(self) -> int:
        """Lowest indexed sequence (0 while empty)."""
        return self._first_seq

    @property
    def high(self) -> int:
        """Highest indexed sequence (0 while empty)."""
        return 0 if not self._first_seq else self._first_seq + len(self._offsets) - self._start - 1

    def __len__(self) -> int:
        return len(self._offsets) - self._start

    def add(self, sequence: int, offset: int) -> bool:
        """Index `sequence` at `offset`; False (and no change) if already indexed or not head+1.

        A jump (sequence > high+1) restarts the index at `sequence`: the part below is then
        unknown here and is found by scanning the log from the floor offset.
        """
        if self._first_seq and sequence <= self.high:
            return False
        if not self._first_seq or sequence != self.high + 1:
            self._offsets = array("q", [offset])
            self._first_seq, self._start = sequence, 0
            return True
        self._offsets.append(offset)
        return True

    def prune_below(self, floor: int) -> None:
        """Forget sequences below `floor`."""
        if not self._first_seq or floor <= self._first_seq:
            return
        drop = min(floor - self._first_seq, len(self))
        self._start += drop
        self._first_seq += drop
        if len(self) == 0:
            self._clear()
            return
        if self._start >= len(self._offsets) - self._start:
            del self._offsets[: self._start]
            self._start = 0

    def offset_of(self, sequence: int) -> int | None:
        """The offset of `sequence`, or None when it is not indexed here."""
        if not self._first_seq or not self._first_seq <= sequence <= self.high:
            return None
        return self._offsets[self._start + sequence - self._first_seq]


class StreamIndex(OffsetIndex):
    """Everything the fold keeps in memory for one stream beside the tables.

    - `state`: the writer's aggregate state, folded with the writer's `evolve` (one fold);
    - the `OffsetIndex` of the window's messages (this class is one);
    - `refs`: sequence -> `MessageRef` of each publish event whose message is not indexed yet, so a
      messages record is bound to the event of its sequence whichever topic is read first. Entries
      leave when a message at or above their sequence is indexed, so the map holds only the lag
      between the two topics (plus forged events that no message ever matches).
    """

    __slots__ = ("refs", "state")

    def __init__(self, stream_id: str) -> None:
        super().__init__()
        self.state = StreamState.initial(stream_id)
        self.refs: dict[int, MessageRef] = {}

    def bound(self, sequence: int) -> None:
        """A message of `sequence` is indexed: forget the references at or below it."""
        refs = self.refs
        while refs:
            first = next(iter(refs))
            if first > sequence:
                return
            del refs[first]


__all__ = ["OffsetIndex", "StreamIndex"]
