"""One ICRC-77 replay as planned: the fields every shape of a replay shares, declared once.

`ReplayPlan` is what the stream's writer decided for a register_replay: the stream events
``ReplayOrdered`` and ``ReplayRegistered`` are a plan (`events`), the replay topic's ``registered``
record carries one with its signed command (`records.ReplayRegistration`), and the replay fold's
`status.ReplayView` is a plan and its progress.
"""

from __future__ import annotations

import dataclasses

Skip = tuple[int, int]
"""ICRC-77 ``skip`` as ``(modulus, offset)``: sequence *s* is delivered iff ``s % modulus == offset``."""


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayPlan:
    """A replay accepted for planning by the stream's writer.

    The plan is ``[first, end_exclusive)`` (`rules.plan_replay` at the head of the deciding block);
    ``to_sequence`` is what was asked (None: open-ended, and then ``end_id`` is the last sequence
    the replay will deliver, ``end_exclusive - 1``). ``filter`` is the CIP-7 filter DSL as canonical
    JSON text (or None) and ``skip`` the `Skip` rule (or None). ``price_cby`` is what the requester
    is charged (0: free). ``namespace`` is the requested namespace as given (``feed:<id>`` or the
    stream id). The field order is the one of the events' ``.avsc``.
    """

    stream_id: str
    replay_id: int
    namespace: str
    requester: str
    from_sequence: int
    to_sequence: int | None
    first: int
    end_exclusive: int
    end_id: int | None
    filter: str | None
    skip: Skip | None
    memo_hex: str
    price_cby: int


PLAN_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(ReplayPlan))
"""The plan's field names, in order."""
