"""The replay table: every ICRC-77 replay's status, folded from the ``replay`` topic (no I/O).

The live projection worker and the offline rebuild fold each ``replay`` record with `fold_replay`,
which decodes it (`schemas.replay_records`), checks that it sits where its writers put it (keyed by
its stream id, on that key's partition) and applies it with the pure life-cycle rules
(`protocol.replay.status.apply_replay_record`). A record that breaks a rule (undecodable, a version
this build does not read, misplaced, or refused by the life cycle) changes nothing and is
quarantined with its topic, partition, offset and reason; the fold goes on from the last valid
state. So the live table and a rebuild hold the same views and the same `replay_digest`.

Table ``replays``: ``str(replay_id)`` -> `ReplayView`. Every record of a replay is keyed by its
stream id, so a replay's whole life is on one partition and the per-partition share of the table
(`partitions.OwnedPartitions`) sees all of it, in order.

Reads (`replay_page`) order replays by id (ICRC-77 ``get_replays``: ``prev`` exclusive, at most
`MAX_TAKE` per page), filtered by requester, stream and status.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import Any, Final

from watchtower.http import params
from watchtower.projections import quarantine
from watchtower.protocol.errors import InvalidArgumentError, LimitExceededError, WatchtowerError
from watchtower.protocol.replay.status import (
    STATUSES,
    ReplayRuleError,
    ReplayView,
    apply_replay_record,
    replay_digest,
    replay_status_json,
)
from watchtower.schemas.replay_records import decode_replay_record
from watchtower.topics.partitioning import partition_for_key

log = logging.getLogger("watchtower.projections.replay")

REPLAY_TABLE: Final = "replays"
MAX_TAKE: Final = 500
DEFAULT_TAKE: Final = 100

Table = MutableMapping[str, Any]


class _ById(Mapping[int, ReplayView]):
    """The table (keyed by decimal text) as the fold's ``replay_id -> view`` mapping."""

    def __init__(self, table: Table) -> None:
        self._table = table

    def __getitem__(self, replay_id: int) -> ReplayView:
        view: ReplayView = self._table[str(replay_id)]
        return view

    def __contains__(self, replay_id: object) -> bool:
        return str(replay_id) in self._table

    def __iter__(self) -> Iterator[int]:
        return (int(k) for k in list(self._table))

    def __len__(self) -> int:
        return len(self._table)


def fold_replay(table: Table, refused: Table, *, topic: str, partitions: int, partition: int, offset: int,
                key: bytes | None, value: bytes | None) -> None:
    """Fold one committed ``replay`` record into `table`, or quarantine it in `refused`. Never raises."""
    reason = _fold(table, partitions, partition, key, value)
    if reason is not None:
        quarantine.record(refused, topic, partition, offset, reason)


def _fold(table: Table, partitions: int, partition: int, key: bytes | None, value: bytes | None) -> str | None:
    try:
        record = decode_replay_record(value)
    except WatchtowerError as exc:
        return f"undecodable replay record: {exc.message}"
    expected = record.stream_id.encode()
    if key != expected:
        return f"{type(record).__name__} of replay {record.replay_id}: keyed {key!r}, not {record.stream_id!r}"
    home = partition_for_key(expected, partitions)
    if home != partition:
        return f"{type(record).__name__} of replay {record.replay_id}: stream {record.stream_id!r} belongs to " \
               f"partition {home}"
    try:
        changed = apply_replay_record(_ById(table), record)
    except ReplayRuleError as exc:
        return str(exc)
    except Exception as exc:  # a rule the life cycle missed must still never stop the fold
        log.exception("unexpected error folding replay %s", record.replay_id)
        return f"{type(record).__name__} of replay {record.replay_id} cannot be folded ({type(exc).__name__})"
    for replay_id, view in (changed or {}).items():
        table[str(replay_id)] = view
    return None


def digest_of(views: Iterable[ReplayView]) -> dict[str, Any]:
    """``{"digest", "replays"}`` of a set of views (`replay_status.replay_digest`)."""
    by_id = {v.replay_id: v for v in views}
    return {"digest": replay_digest(by_id), "replays": len(by_id)}


def replay_price_of(view: Mapping[str, Any]) -> int:
    """A stream view's per-event replay price in CBY (0 when the stream never set one)."""
    price = view.get("replay_price_per_event_cby")
    if price is None:
        price = (view.get("config") or {}).get("replay_price_per_event_cby")
    return int(price) if isinstance(price, int) and not isinstance(price, bool) else 0


# --- Reads ---------------------------------------------------------------------------------------


def parse_page_query(query: Mapping[str, str]) -> dict[str, Any]:
    """The ``GET /v1/replays`` query: requester, stream_id, status, prev (exclusive) and take (1..500)."""
    status = query.get("status") or None
    if status is not None and status not in STATUSES:
        raise InvalidArgumentError(f"status must be one of {', '.join(STATUSES)}, got {status[:40]!r}")
    prev = params.int_param(query, "prev", 0) if query.get("prev") else None
    return {"requester": query.get("requester") or None, "stream_id": query.get("stream_id") or None,
            "status": status, "prev": prev,
            "take": params.int_param(query, "take", DEFAULT_TAKE, minimum=1, maximum=MAX_TAKE,
                                     error=LimitExceededError)}


def replay_page(views: Iterable[ReplayView], *, requester: str | None = None, stream_id: str | None = None,
                status: str | None = None, prev: int | None = None, take: int = DEFAULT_TAKE) -> dict[str, Any]:
    """``{"replays": [ReplayStatus...], "next": id | None}``: the first `take` matching replays with an
    id above `prev`, by id; ``next`` is the ``prev`` of the following page (None: no more)."""
    chosen = sorted((v for v in views
                     if (prev is None or v.replay_id > prev)
                     and (requester is None or v.requester == requester)
                     and (stream_id is None or v.stream_id == stream_id)
                     and (status is None or v.status == status)), key=lambda v: v.replay_id)
    page = chosen[:take]
    more = len(chosen) > take
    return {"replays": [replay_status_json(v) for v in page], "next": page[-1].replay_id if more else None}
