"""The replay life cycle's facts, defined once: ICRC-77 replay requests and what becomes of them.

Each record is one frozen, typed struct (``kind`` names its type). Their bytes on the ``replay``
topic are the JSON that `watchtower.schemas.replay_records` derives from these definitions.

Who writes what:

- the stream's writer (the aggregate host), in the transaction that decides the command:
  ``registered`` (`ReplayRegistration`: a register_replay that passed every check, paid for when
  it had a price) and ``cancel_requested`` (`ReplayCancelRequest`: a signed cancel_replay; the
  fold honours it only from the requester). Each is derived from the stream event of the same
  fact (ReplayRegistered, ReplayCancelRequested: `schemas.wire.replay_record_for`);
- the replay worker, in the transaction that also writes the re-emitted deliveries:
  ``progress`` (a checkpoint), then exactly one of ``completed``, ``canceled``, ``errored``.
  A Spark fulfilment writes ``progress`` with ``engine = "spark"`` before it starts.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from watchtower.protocol.events import ReplayPlan

REPLAY_RECORD_VERSION: Final = 1


class ReplayRegistration(msgspec.Struct, tag="registered", tag_field="kind", forbid_unknown_fields=True):
    """A replay accepted by the stream's writer: a `events.ReplayPlan` on the replay topic, with the
    block that decided it and the signed command it was decided from.

    Its fields from ``replay_id`` to ``price_cby`` are the plan's (`events.PLAN_FIELDS`, with
    ``replay_id`` ahead of ``stream_id`` in this record's bytes, and ``skip`` a JSON array that the
    replay fold reads into a `events.Skip`); `tests/schemas/test_typed_events.py` holds the two
    equal. ``caller``/``nonce``/``digest_hex`` identify the signed register_replay command; the
    replay id is derived from its digest (`rules.replay_id_for`), and ``command`` is that command
    itself.
    """

    v: int
    replay_id: int
    stream_id: str
    namespace: str
    requester: str
    from_sequence: int
    to_sequence: int | None
    first: int
    end_exclusive: int
    end_id: int | None
    filter: str | None
    skip: list[int] | None
    memo_hex: str
    price_cby: int
    block_height: int
    caller: str
    nonce: int
    digest_hex: str
    #: The requester's signed register_replay (`Command.to_dict()`), which the replay worker checks
    #: before it fulfils the replay. Absent from records written before it was carried (they still
    #: decode; the replay worker refuses to fulfil them).
    command: dict[str, Any] | None = None

    @classmethod
    def of(cls, plan: ReplayPlan, *, block_height: int, caller: str, nonce: int, digest_hex: str,
           command: dict[str, Any] | None) -> ReplayRegistration:
        """The record of `plan` (its ``skip`` as a JSON array), decided at `block_height` from the
        signed command `caller`/`nonce`/`digest_hex`."""
        return cls(
            v=REPLAY_RECORD_VERSION, replay_id=plan.replay_id, stream_id=plan.stream_id, namespace=plan.namespace,
            requester=plan.requester, from_sequence=plan.from_sequence, to_sequence=plan.to_sequence,
            first=plan.first, end_exclusive=plan.end_exclusive, end_id=plan.end_id, filter=plan.filter,
            skip=None if plan.skip is None else list(plan.skip), memo_hex=plan.memo_hex, price_cby=plan.price_cby,
            block_height=block_height, caller=caller, nonce=nonce, digest_hex=digest_hex, command=command)


class ReplayCancelRequest(msgspec.Struct, tag="cancel_requested", tag_field="kind", forbid_unknown_fields=True):
    """A signed cancel_replay by `requester` (its signer). Honoured only if it is the replay's requester
    and the replay is not finished."""

    v: int
    replay_id: int
    stream_id: str
    requester: str
    block_height: int
    nonce: int
    digest_hex: str


class ReplayProgress(msgspec.Struct, tag="progress", tag_field="kind", forbid_unknown_fields=True):
    """A checkpoint, committed with the deliveries it counts: everything below ``next_sequence`` has
    been delivered (or skipped/filtered out); the worker resumes reading ``messages`` partition
    ``partition`` at ``next_offset``. Counters are totals since the start of the replay."""

    v: int
    replay_id: int
    stream_id: str
    engine: str  # "service" or "spark"
    partition: int
    next_offset: int
    next_sequence: int
    delivered: int
    filtered: int
    skipped: int
    at_ms: int


class ReplayCompleted(msgspec.Struct, tag="completed", tag_field="kind", forbid_unknown_fields=True):
    """The whole plan was delivered (``delivered`` records; the rest filtered or skipped)."""

    v: int
    replay_id: int
    stream_id: str
    engine: str
    delivered: int
    filtered: int
    skipped: int
    at_ms: int


class ReplayCanceled(msgspec.Struct, tag="canceled", tag_field="kind", forbid_unknown_fields=True):
    """The worker honoured a cancel after delivering ``delivered`` records (sent ones are not recalled)."""

    v: int
    replay_id: int
    stream_id: str
    delivered: int
    at_ms: int


class ReplayErrored(msgspec.Struct, tag="errored", tag_field="kind", forbid_unknown_fields=True):
    """The replay cannot go on, with a reason a person can act on (e.g. the archive is missing a
    sequence of the plan)."""

    v: int
    replay_id: int
    stream_id: str
    reason: str
    delivered: int
    at_ms: int


ReplayRecord = (ReplayRegistration | ReplayCancelRequest | ReplayProgress | ReplayCompleted | ReplayCanceled
                | ReplayErrored)
