"""A push schedule's checkpoint (`push_schedule.StreamSchedule.checkpoint` / ``restore``): pure data.

What survives a restart of one stream's push schedule, and its JSON form (the value of a
``delivery.state`` record, `schemas.delivery_records`); see docs/push.md for the fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

from watchtower.protocol.errors import InvalidArgumentError

CHECKPOINT_VERSION: Final = 1
#: How far ahead of the reader's block clock a checkpoint's block may be: clock skew between the
#: hosts of two delivery workers, one minute of 1,000 ms blocks.
FUTURE_BLOCK_TOLERANCE: Final = 60


@dataclasses.dataclass(frozen=True, slots=True)
class PushCheckpoint:
    """What survives a restart of one stream's schedule (see the module docstring)."""

    stream_id: str
    low_watermark: int
    ahead: Mapping[str, int]
    pointer: str | None
    block: int
    used_deliveries: int
    used_cycles: int
    resume_offset: int | None
    dropped: int

    def to_dict(self) -> dict[str, Any]:
        # Cursors are grouped by value: during a catch-up most subscribers share one of few cursors.
        groups: dict[int, list[str]] = {}
        for address, cursor in sorted(self.ahead.items()):
            groups.setdefault(cursor, []).append(address)
        return {"v": CHECKPOINT_VERSION, "stream_id": self.stream_id, "low_watermark": self.low_watermark,
                "ahead": [[cursor, addresses] for cursor, addresses in sorted(groups.items())],
                "pointer": self.pointer, "block": self.block, "used_deliveries": self.used_deliveries,
                "used_cycles": self.used_cycles, "resume_offset": self.resume_offset, "dropped": self.dropped}

    @classmethod
    def from_dict(cls, data: object) -> PushCheckpoint:
        """Inverse of `to_dict`; INVALID_ARGUMENT naming the field for anything else."""
        if not isinstance(data, dict):
            raise InvalidArgumentError("a push checkpoint is a JSON object")
        expected = {"v", "stream_id", "low_watermark", "ahead", "pointer", "block", "used_deliveries",
                    "used_cycles", "resume_offset", "dropped"}
        if set(data) != expected:
            raise InvalidArgumentError(f"a push checkpoint has exactly the fields {sorted(expected)}")
        if data["v"] != CHECKPOINT_VERSION:
            raise InvalidArgumentError(f"push checkpoint version {data['v']!r} is not {CHECKPOINT_VERSION}")
        ahead: dict[str, int] = {}
        groups = data["ahead"]
        if not isinstance(groups, list):
            raise InvalidArgumentError("ahead must be a list of [cursor, [address, ...]]")
        for group in groups:
            if not (isinstance(group, list) and len(group) == 2 and isinstance(group[1], list)):
                raise InvalidArgumentError("ahead must be a list of [cursor, [address, ...]]")
            cursor = _uint(group[0], "ahead cursor", minimum=1)
            for address in group[1]:
                ahead[_text(address, "ahead address")] = cursor
        pointer = data["pointer"]
        resume = data["resume_offset"]
        return cls(stream_id=_text(data["stream_id"], "stream_id"),
                   low_watermark=_uint(data["low_watermark"], "low_watermark", minimum=1), ahead=ahead,
                   pointer=None if pointer is None else _text(pointer, "pointer"),
                   block=_uint(data["block"], "block"),
                   used_deliveries=_uint(data["used_deliveries"], "used_deliveries"),
                   used_cycles=_uint(data["used_cycles"], "used_cycles"),
                   resume_offset=None if resume is None else _uint(resume, "resume_offset"),
                   dropped=_uint(data["dropped"], "dropped"))


def checkpoint_block_refusal(checkpoint: PushCheckpoint, now_block: int,
                             tolerance: int = FUTURE_BLOCK_TOLERANCE) -> str | None:
    """Why a restore must not trust `checkpoint` at block `now_block` (None: it may).

    A checkpoint carries the block whose budget it has used; a schedule restored from it spends that
    block's budget until the clock reaches it (so a bound is never exceeded after a clock went
    back). A block beyond the clock by more than `tolerance` (clock skew) was never written by a
    delivery worker: honouring it would stall the stream's pushes until that block (forever, for a
    forged 2**62). It is refused, and the stream restarts from an earlier checkpoint or from none."""
    if checkpoint.block > now_block + tolerance:
        return (f"the checkpoint of stream {checkpoint.stream_id!r:.80} is for block {checkpoint.block}, beyond the "
                f"current block {now_block} by more than {tolerance} blocks")
    return None


def _uint(value: object, name: str, minimum: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidArgumentError(f"{name} must be a whole number ≥ {minimum}")
    return value


def _text(value: object, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"{name} must be non-empty text")
    return value
