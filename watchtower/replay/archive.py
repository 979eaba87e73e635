"""Reading ranges of the ``messages`` archive (read_committed) for the replay worker.

One reader (`topics.assigned_reader.AssignedReader`), assigned (never in a group) to one partition
at a time. Consecutive slices of the same replay continue where the last read stopped without a
new fetch; a read elsewhere re-assigns.
A read returns at most ``limit`` records and says whether it stopped at the partition's end
(``enable.partition.eof``: with read_committed that is the last stable offset, so a record of a
still-open transaction is never returned).
"""

from __future__ import annotations

import time
from typing import Any

from watchtower.replay.fulfil import ArchivedRecord
from watchtower.topics.assigned_reader import AssignedReader
from watchtower.topics.records import Record

#: How long one read waits for more records before it counts as at the end (safety net; the
#: end-of-partition event normally ends a read much sooner).
READ_TIMEOUT_S = 30.0


class ArchiveReader:
    """Reads `topic` (the ``messages`` topic) by (partition, offset); `extra`: further client settings.

    A client that failed for good raises `topics.errors.BrokerError` from `read`."""

    def __init__(self, bootstrap: str, topic: str, *, client_id: str = "wt-replay-archive", **extra: Any) -> None:
        self.topic = topic
        self._reader = AssignedReader(bootstrap, topic, group_prefix="wt-replay-archive", settings={
            "client.id": client_id,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 50,
            "log_level": 3,
            **extra,
        })
        self._at: tuple[int, int] | None = None  # (partition, next offset) the reader is positioned at
        self._eof_at: tuple[int, int] | None = None

    def read(self, partition: int, offset: int, limit: int) -> tuple[list[ArchivedRecord], bool]:
        """Up to `limit` records of `partition` from `offset`, and whether the read reached the end."""
        if self._at != (partition, offset):
            self._reader.assign({partition: offset})
            self._at, self._eof_at = (partition, offset), None
        out: list[ArchivedRecord] = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        at_end = False
        next_offset = offset
        while len(out) < limit:
            # Take what is fetched, and wait for one record only when nothing is.
            batch = self._reader.fetch(limit - len(out), 0)
            if not batch:
                # The end-of-partition event comes once per end reached: at an end seen before, a short
                # wait without a new record means it is still the end.
                seen_end = self._eof_at == (partition, next_offset)
                if not seen_end and time.monotonic() > deadline:
                    break
                batch = self._reader.fetch(1, 0.1 if seen_end else 0.2)
                if not batch:
                    at_end = seen_end
                    if at_end:
                        break
                    continue
            for m in batch:
                if isinstance(m, Record):
                    out.append(ArchivedRecord(m.offset, m.value, m.headers))
                    next_offset = m.offset + 1
                    at_end = False  # a record after an end event: not the end any more
                else:  # the end of the partition
                    at_end = True
                    next_offset = max(next_offset, m.offset or next_offset)
            if at_end:
                break
        if at_end:
            self._eof_at = (partition, next_offset)
        self._at = (partition, next_offset)
        return out, at_end

    def forget_position(self) -> None:
        """The next read re-assigns (e.g. after an aborted slice, whose records are read again)."""
        self._at = self._eof_at = None

    def close(self) -> None:
        self._reader.close()
