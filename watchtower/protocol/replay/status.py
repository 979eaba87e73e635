"""The status of every ICRC-77 replay, folded from the ``replay`` topic (pure: no I/O, no clock).

One fold serves three readers that must agree byte for byte: the replay worker (which rebuilds the
replays of a partition before it fulfils them), the projection behind ``GET /v1/replays`` and the
offline rebuild (compared through `replay_digest`).

Life cycle of one replay (records of `schemas.replay_records`, in log order)::

    registered ─► pending ─(progress)*─► running ─► completed | canceled | errored
                  cancel_requested (from the requester) sets ``cancel_requested``; ``canceled``
                  is only valid after such an honoured cancel.

`apply_replay_record` returns the changed views only and raises `ReplayRuleError` for a record
that breaks a rule, so the caller quarantines it (topic, partition, offset, reason) and goes on
from the last valid state. A cancel signed by another account than the requester is not a rule
break (anyone may send the command; the aggregate does not know the requester): it is ignored.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from watchtower.protocol.events import PLAN_FIELDS, ReplayPlan, Skip
from watchtower.protocol.replay.records import (
    ReplayCanceled,
    ReplayCancelRequest,
    ReplayCompleted,
    ReplayErrored,
    ReplayProgress,
    ReplayRecord,
    ReplayRegistration,
)

STATUSES: Final = ("pending", "running", "completed", "canceled", "errored")
TERMINAL: Final = frozenset({"completed", "canceled", "errored"})
ENGINES: Final = ("service", "spark")


class ReplayRuleError(Exception):
    """The record breaks a rule of the replay life cycle: quarantine it, keep the previous state."""


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayView(ReplayPlan):
    """Everything known about one replay: its plan, then how far it went. ``next_sequence`` is the
    first sequence not yet handled; ``partition``/``next_offset`` are the last checkpoint in
    ``messages`` (None before the first one). ``updated_at_ms`` is the writer's clock on the last
    worker record."""

    block_height: int
    status: str
    engine: str
    partition: int | None
    next_offset: int | None
    next_sequence: int
    delivered: int
    filtered: int
    skipped: int
    cancel_requested: bool
    error: str | None
    updated_at_ms: int | None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def total(self) -> int:
        """How many sequences the plan covers."""
        return max(0, self.end_exclusive - self.first)


def apply_replay_record(views: Mapping[int, ReplayView], record: ReplayRecord) -> dict[int, ReplayView] | None:
    """The views `record` changes (``{}``: accepted, nothing changed).

    Raises ReplayRuleError for a second ``registered`` of an id, anything about an unknown id or
    another stream than the replay's, anything after a terminal record, progress going backwards
    (or past the plan), and ``canceled`` without an honoured cancel. This build never returns
    None; callers treat None like ``{}``.
    """
    if isinstance(record, ReplayRegistration):
        return {record.replay_id: _registered(views, record)}
    view = views.get(record.replay_id)
    if view is None:
        raise ReplayRuleError(f"replay {record.replay_id} was never registered; a {_kind(record)} record for it "
                              f"is ignored")
    if record.stream_id != view.stream_id:
        raise ReplayRuleError(f"replay {record.replay_id} belongs to stream {view.stream_id!r}, not "
                              f"{record.stream_id!r}")
    if view.terminal:
        raise ReplayRuleError(f"replay {record.replay_id} is already {view.status}; a later {_kind(record)} "
                              f"record is ignored")
    if isinstance(record, ReplayCancelRequest):
        if record.requester != view.requester or view.cancel_requested:
            return {}  # a stranger cannot cancel someone else's replay; a repeat changes nothing
        return {view.replay_id: dataclasses.replace(view, cancel_requested=True)}
    if isinstance(record, ReplayProgress):
        return {view.replay_id: _progress(view, record)}
    _counters_forward(view, record.delivered, getattr(record, "filtered", view.filtered),
                      getattr(record, "skipped", view.skipped))
    if isinstance(record, ReplayCompleted):
        _engine(record.engine)
        done = dataclasses.replace(view, status="completed", engine=record.engine, next_sequence=view.end_exclusive,
                                   delivered=record.delivered, filtered=record.filtered, skipped=record.skipped,
                                   updated_at_ms=record.at_ms)
        return {view.replay_id: done}
    if isinstance(record, ReplayCanceled):
        if not view.cancel_requested:
            raise ReplayRuleError(f"replay {view.replay_id} was canceled but its requester never asked to cancel")
        return {view.replay_id: dataclasses.replace(view, status="canceled", delivered=record.delivered,
                                                    updated_at_ms=record.at_ms)}
    if isinstance(record, ReplayErrored):
        return {view.replay_id: dataclasses.replace(view, status="errored", error=record.reason,
                                                    delivered=record.delivered, updated_at_ms=record.at_ms)}
    raise ReplayRuleError(f"unknown replay record {type(record).__name__}")


def _kind(record: Any) -> str:
    return type(record).__name__


def _registered(views: Mapping[int, ReplayView], rec: ReplayRegistration) -> ReplayView:
    if rec.replay_id in views:
        raise ReplayRuleError(f"replay {rec.replay_id} is already registered; a second registration is ignored")
    if rec.first < 1 or rec.end_exclusive < rec.first:
        raise ReplayRuleError(f"replay {rec.replay_id} has an impossible plan [{rec.first}, {rec.end_exclusive})")
    plan = {name: getattr(rec, name) for name in PLAN_FIELDS} | {"skip": _skip(rec)}
    return ReplayView(**plan, block_height=rec.block_height, status="pending", engine="service", partition=None,
                      next_offset=None, next_sequence=rec.first, delivered=0, filtered=0, skipped=0,
                      cancel_requested=False, error=None, updated_at_ms=None)


def _skip(rec: ReplayRegistration) -> Skip | None:
    # The record's JSON array ([modulus] or [modulus, offset]) as the plan's (modulus, offset).
    if rec.skip is None:
        return None
    modulus, offset = (rec.skip[0], rec.skip[1] if len(rec.skip) == 2 else 0) if rec.skip else (0, 0)
    if len(rec.skip) > 2 or modulus < 1 or not 0 <= offset < modulus:
        raise ReplayRuleError(f"replay {rec.replay_id} has an invalid skip {rec.skip!r}")
    return modulus, offset


def _engine(engine: str) -> None:
    if engine not in ENGINES:
        raise ReplayRuleError(f"unknown replay engine {engine!r} (expected one of {', '.join(ENGINES)})")


def _counters_forward(view: ReplayView, delivered: int, filtered: int, skipped: int) -> None:
    if delivered < view.delivered or filtered < view.filtered or skipped < view.skipped:
        raise ReplayRuleError(f"replay {view.replay_id}: counters went backwards (delivered {view.delivered} → "
                              f"{delivered}, filtered {view.filtered} → {filtered}, skipped {view.skipped} → "
                              f"{skipped})")


def _progress(view: ReplayView, rec: ReplayProgress) -> ReplayView:
    _engine(rec.engine)
    if view.partition is not None and rec.partition != view.partition:
        raise ReplayRuleError(f"replay {view.replay_id} reads partition {view.partition}, not {rec.partition}")
    if rec.next_sequence < view.next_sequence or (view.next_offset is not None and rec.next_offset < view.next_offset):
        raise ReplayRuleError(f"replay {view.replay_id}: progress went backwards (sequence {view.next_sequence} → "
                              f"{rec.next_sequence}, offset {view.next_offset} → {rec.next_offset})")
    if rec.next_sequence > view.end_exclusive or rec.next_offset < 0:
        raise ReplayRuleError(f"replay {view.replay_id}: progress to sequence {rec.next_sequence} is past its plan "
                              f"[{view.first}, {view.end_exclusive})")
    _counters_forward(view, rec.delivered, rec.filtered, rec.skipped)
    return dataclasses.replace(view, status="running", engine=rec.engine, partition=rec.partition,
                               next_offset=rec.next_offset, next_sequence=rec.next_sequence,
                               delivered=rec.delivered, filtered=rec.filtered, skipped=rec.skipped,
                               updated_at_ms=rec.at_ms)


# --- Reads ---------------------------------------------------------------------------------------


def replay_status_json(view: ReplayView) -> dict[str, Any]:
    """ICRC-77 ``ReplayStatus`` of `view` as JSON, plus our own fields (stream_id, requester,
    price_cby, end_id, percent of the plan handled)."""
    state: dict[str, Any]
    if view.status == "completed" or view.status == "canceled":
        state = {view.status: view.delivered}
    elif view.status == "errored":
        state = {"errored": view.error or ""}
    else:
        state = {view.status: None}
    handled = view.total if view.status == "completed" else max(0, view.next_sequence - view.first)
    percent = 100.0 if view.total == 0 else round(100.0 * min(handled, view.total) / view.total, 2)
    return {
        "replayId": view.replay_id,
        "namespace": view.namespace,
        "config": {
            "filter": None if view.filter is None else json.loads(view.filter),
            "skip": None if view.skip is None else list(view.skip),
            "memo_hex": view.memo_hex,
        },
        "stats": {
            "delivered": view.delivered, "filtered": view.filtered, "skipped": view.skipped,
            "next_sequence": view.next_sequence, "total": view.total, "engine": view.engine,
        },
        "range": [view.from_sequence, view.to_sequence],
        "status": state,
        "stream_id": view.stream_id,
        "requester": view.requester,
        "price_cby": view.price_cby,
        "end_id": view.end_id,
        "percent": percent,
    }


def view_to_dict(view: ReplayView) -> dict[str, Any]:
    """The view as plain JSON-able data (tuples as lists), e.g. for a Faust table."""
    out = dataclasses.asdict(view)
    out["skip"] = None if view.skip is None else list(view.skip)
    return out


_INT_FIELDS: Final = ("replay_id", "from_sequence", "to_sequence", "first", "end_exclusive", "end_id", "price_cby",
                      "block_height", "partition", "next_offset", "next_sequence", "delivered", "filtered",
                      "skipped", "updated_at_ms")


def view_from_dict(data: Mapping[str, Any]) -> ReplayView:
    """Inverse of `view_to_dict`."""
    fields = {f.name: data[f.name] for f in dataclasses.fields(ReplayView)}
    for name in _INT_FIELDS:  # a peer's share went through the JSON integer rule: ids are strings
        if isinstance(fields[name], str):
            fields[name] = int(fields[name])
    fields["skip"] = None if fields["skip"] is None else (int(fields["skip"][0]), int(fields["skip"][1]))
    return ReplayView(**fields)


def replay_digest(views: Mapping[int, ReplayView]) -> str:
    """Hex SHA-256 over the views sorted by replay id, as canonical JSON (sorted keys, no spaces):
    equal exactly when two folds hold the same facts, whatever order the map was built in."""
    canonical = [[rid, view_to_dict(views[rid])] for rid in sorted(views)]
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
