"""What a client checks of a `get_since` page before it calls any of it verified.

Signatures prove each message; they do not prove the page. A server (or a log it trusted) could
leave a sequence out, repeat one, reorder them, or serve a message outside the window it claims.
Sequences are signed, so an unfiltered page is checkable exactly: it must carry every sequence
from cursor+1 to its ``next_cursor``, in order, and nothing else. A filtered page may skip
sequences; its messages must still be strictly increasing inside (cursor, next_cursor].
"""

from __future__ import annotations

from collections.abc import Sequence

from watchtower.protocol.errors import MalformedRecordError


def check_page_sequences(
    stream_id: str,
    sequences: Sequence[int],
    *,
    cursor: int,
    limit: int,
    next_cursor: int,
    head: int,
    filtered: bool,
) -> None:
    """Raise MALFORMED_RECORD unless `sequences` (a page's new messages, in page order) are what a
    `get_since(cursor, limit)` page ending at `next_cursor` on a stream at `head` may carry."""
    advanced = next_cursor > cursor
    if next_cursor < cursor or next_cursor > cursor + limit or (advanced and next_cursor > head):
        raise _bad(stream_id, cursor, f"its next_cursor {next_cursor} is outside ({cursor}, "
                                      f"min(head {head}, cursor + limit {limit})]", {"next_cursor": next_cursor})
    expected = cursor + 1
    for sequence in sequences:
        if sequence < expected or sequence > next_cursor or (not filtered and sequence != expected):
            raise _bad(stream_id, cursor, f"it carries sequence {sequence} where {expected} was expected "
                                          "(a gap, a repeat or a reordering)",
                       {"expected": expected, "got": sequence})
        expected = sequence + 1
    if not filtered and expected != next_cursor + 1:
        raise _bad(stream_id, cursor, f"it ends at sequence {expected - 1} but claims to reach {next_cursor}",
                   {"expected": expected, "next_cursor": next_cursor})


def _bad(stream_id: str, cursor: int, why: str, details: dict[str, int]) -> MalformedRecordError:
    return MalformedRecordError(
        f"a get_since page of stream {stream_id} after cursor {cursor} is not the page it claims to be: {why}. "
        "Nothing of it was delivered and the cursor did not move; retry, and report it to the stream's "
        "operator if it persists",
        details={"stream_id": stream_id, "cursor": cursor, **details},
    )
