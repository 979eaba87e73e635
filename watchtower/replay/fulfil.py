"""One slice of one replay, as a pure step: archived records in, deliveries + one replay record out.

`fulfil_slice` takes the replay's current view (its checkpoint), its selector and the raw records
of ``messages`` partition *p* read from the checkpoint's offset, and returns what the worker
writes in ONE transaction: the deliveries (original value byte for byte, original headers then the
``icrc77`` replay headers) and either a `ReplayProgress` (the new checkpoint) or the terminal
record (`ReplayCompleted`, or `ReplayErrored` when the archive lacks a sequence of the plan).
No I/O and no clock (``now_ms`` is passed in), so the same input always gives the same output.

Rules, per record in offset order:

- a value that does not decode as a StreamMessage is quarantined (returned with its reason) and
  skipped; another stream's message, or one of this stream before ``next_sequence`` (already
  handled), is passed over;
- the stream's sequences must arrive gapless from ``next_sequence``: the first one above it means
  the archive lacks a sequence of the plan, so the replay errors (nothing of that slice after the
  gap is delivered);
- each in-plan sequence gets the selector's verdict: delivered, skipped or filtered;
- reaching ``end_exclusive`` completes the replay; reaching the end of the partition first
  (``at_end``) errors it, since every planned message was committed before the registration.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from watchtower.protocol.errors import MalformedRecordError, SchemaMismatchError
from watchtower.protocol.replay.records import (
    REPLAY_RECORD_VERSION,
    ReplayCanceled,
    ReplayCompleted,
    ReplayErrored,
    ReplayProgress,
    ReplayRecord,
)
from watchtower.protocol.replay.rules import ReplaySelector, replay_headers
from watchtower.protocol.replay.status import ReplayView
from watchtower.schemas.records import decode_message

Headers = list[tuple[str, str | bytes | None]]


class ArchivedRecord(NamedTuple):
    """One record of ``messages`` as read: its offset, value and headers (None: no headers)."""

    offset: int
    value: bytes | None
    headers: Sequence[tuple[str, str | bytes | None]] | None


class Delivery(NamedTuple):
    """A record for ``deliveries``: keyed by the requester, the archived value and headers + replay headers."""

    key: bytes
    value: bytes
    headers: Headers
    sequence: int


@dataclass
class SliceResult:
    """What one slice writes (deliveries, then `record`) and what it refused."""

    deliveries: list[Delivery] = field(default_factory=list)
    record: ReplayRecord | None = None
    quarantined: list[tuple[int, str]] = field(default_factory=list)  # (offset, reason)
    examined: int = 0


def cancel_record(view: ReplayView, now_ms: int) -> ReplayCanceled:
    """The record that honours a requested cancel (nothing more is delivered)."""
    return ReplayCanceled(v=REPLAY_RECORD_VERSION, replay_id=view.replay_id, stream_id=view.stream_id,
                          delivered=view.delivered, at_ms=now_ms)


def start_offset(view: ReplayView) -> int:
    """Where the next slice reads ``messages``: the checkpoint, else the partition's start."""
    return view.next_offset if view.next_offset is not None else 0


def fulfil_slice(view: ReplayView, selector: ReplaySelector, partition: int, records: Sequence[ArchivedRecord], *,
                 at_end: bool, now_ms: int) -> SliceResult:
    """The deliveries and the replay record of one slice over `records` (see the module docstring).

    `records` are consecutive from ``start_offset(view)``; `at_end`: the read stopped at the end of
    the partition (not at the slice size).
    """
    out = SliceResult()
    next_seq, next_off = view.next_sequence, start_offset(view)
    delivered, filtered, skipped = view.delivered, view.filtered, view.skipped
    marker = replay_headers(view.replay_id, view.end_id)
    key = view.requester.encode()
    error: str | None = None
    for rec in records:
        if next_seq >= view.end_exclusive:
            break
        out.examined += 1
        next_off = rec.offset + 1
        try:
            msg = decode_message(rec.value or b"")
        except (MalformedRecordError, SchemaMismatchError, ValueError, TypeError) as exc:
            out.quarantined.append((rec.offset, f"not a StreamMessage: {exc}"))
            continue
        if msg.stream_id != view.stream_id or msg.sequence < next_seq:
            continue
        if msg.sequence > next_seq:
            error = (f"the archive of stream {view.stream_id} lacks sequence {next_seq} (the next one on messages "
                     f"partition {partition} is {msg.sequence}, at offset {rec.offset}); the replay cannot be "
                     f"complete, request the remaining range again if it reappears")
            next_off = rec.offset
            break
        verdict = selector.verdict(msg)
        if verdict == "deliver":
            headers: Headers = [*(rec.headers or ()), *marker]  # appended, never overwritten (ICRC-77)
            out.deliveries.append(Delivery(key, rec.value or b"", headers, msg.sequence))
            delivered += 1
        elif verdict == "filtered":
            filtered += 1
        elif verdict == "skipped":
            skipped += 1
        next_seq += 1
    if error is None and next_seq < view.end_exclusive and at_end and out.examined == len(records):
        error = (f"the archive of stream {view.stream_id} ends (messages partition {partition}, offset {next_off}) "
                 f"before sequence {next_seq} of the plan [{view.first}, {view.end_exclusive})")
    if error is not None:
        out.record = ReplayErrored(v=REPLAY_RECORD_VERSION, replay_id=view.replay_id, stream_id=view.stream_id,
                                   reason=error, delivered=delivered, at_ms=now_ms)
    elif next_seq >= view.end_exclusive:
        out.record = ReplayCompleted(v=REPLAY_RECORD_VERSION, replay_id=view.replay_id, stream_id=view.stream_id,
                                     engine="service", delivered=delivered, filtered=filtered, skipped=skipped,
                                     at_ms=now_ms)
    else:
        out.record = ReplayProgress(v=REPLAY_RECORD_VERSION, replay_id=view.replay_id, stream_id=view.stream_id,
                                    engine="service", partition=partition, next_offset=next_off,
                                    next_sequence=next_seq, delivered=delivered, filtered=filtered,
                                    skipped=skipped, at_ms=now_ms)
    return out
