"""What an ICRC-77 replay request carries and what its answers mean, with no I/O.

`ReplayRequest` is one registration's arguments, `register_body` the ``register_replay`` body it
makes (to be signed), and `ticket_of` reads the writer's answer into a `ReplayTicket`. `batch_results`
and `batch_item` read ``POST /v1/commands/batch``'s answer: one result per command, each either
accepted (its reply) or refused (its `WatchtowerError`); an answer of any other shape is
MALFORMED_RECORD. `state_of` and `is_done` read an ICRC-77 ReplayStatus. `replay.ReplayClient`
sends and reads through these.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Final

from watchtower.protocol.errors import InvalidArgumentError, MalformedRecordError, WatchtowerError

TERMINAL: Final = ("completed", "canceled", "errored")
BATCH_PATH: Final = "/v1/commands/batch"
MAX_MEMO_BYTES: Final = 32


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayTicket:
    """A registered replay: what `register` answered, and where its deliveries start.

    `deliveries_offset` is the requester's ``deliveries`` partition end just before registering
    (None: read the partition from its start).
    """

    replay_id: int
    stream_id: str
    requester: str
    first: int
    end_exclusive: int
    end_id: int | None
    price_cby: int
    deliveries_offset: int | None = None

    @property
    def total(self) -> int:
        """How many sequences the plan covers (before skip and filter)."""
        return max(0, self.end_exclusive - self.first)


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayRequest:
    """One registration of `ReplayClient.register_many`: the arguments `ReplayClient.register` takes."""

    namespace: str | int
    from_sequence: int
    to_sequence: int | None = None
    filter: Mapping[str, Any] | None = None
    skip: list[int] | tuple[int, ...] | None = None
    max_payment_cby: int | None = None
    memo: bytes = b""


def register_body(request: ReplayRequest,
                  resolve: Callable[[str | int], tuple[str, str]]) -> tuple[str, dict[str, Any]]:
    """(stream id, register_replay body) of `request`, its namespace `resolve`d to (stream id,
    namespace as recorded) once the memo is known to fit (INVALID_ARGUMENT over 32 bytes)."""
    if len(request.memo) > MAX_MEMO_BYTES:
        raise InvalidArgumentError(f"a replay memo is at most {MAX_MEMO_BYTES} bytes, got {len(request.memo)}")
    stream_id, recorded = resolve(request.namespace)
    body = {"namespace": recorded, "from": request.from_sequence, "to": request.to_sequence,
            "config": {"filter": None if request.filter is None else dict(request.filter),
                       "skip": None if request.skip is None else list(request.skip),
                       "max_payment_cby": request.max_payment_cby},
            "memo_hex": request.memo.hex()}
    return stream_id, body


def ticket_of(reply: Mapping[str, Any], requester: str, start: int | None) -> ReplayTicket:
    """The ticket a register_replay `reply` answers for `requester`, its deliveries from `start`."""
    try:
        return ReplayTicket(replay_id=int(reply["replay_id"]), stream_id=str(reply["stream_id"]),
                            requester=requester, first=int(reply["first"]),
                            end_exclusive=int(reply["end_exclusive"]),
                            end_id=None if reply.get("end_id") is None else int(reply["end_id"]),
                            price_cby=int(reply.get("price_cby") or 0), deliveries_offset=start)
    except (KeyError, TypeError, ValueError):
        raise MalformedRecordError(f"register_replay answered {sorted(reply)}, not a replay ticket") from None


def batch_results(reply: Mapping[str, Any], count: int, what: str) -> list[object]:
    """The batch answer's results, one per command sent (`count` of `what`)."""
    results = reply.get("results")
    if not isinstance(results, list) or len(results) != count:
        raise MalformedRecordError(f"{BATCH_PATH} answered {sorted(reply)} for {count} {what}, "
                                   "not one result each; is it a Watchtower API?")
    return results


def batch_item(item: object) -> Any:
    """One batch result: an accepted item's result as the answer holds it, or the `WatchtowerError`
    a refused item carries."""
    if not isinstance(item, Mapping) or not isinstance(item.get("ok"), bool):
        raise MalformedRecordError(f"{BATCH_PATH} answered an item {item!r:.80}, not {{ok, result | error}}")
    if item["ok"]:
        return item.get("result")
    error = item.get("error")
    if not isinstance(error, Mapping):
        raise MalformedRecordError(f"{BATCH_PATH} answered a refused item without its error")
    return WatchtowerError.from_dict(error)


def state_of(status: Mapping[str, Any]) -> str:
    """The state name of an ICRC-77 ReplayStatus (``pending``, ``running``, ``completed``, …)."""
    state = status.get("status")
    if not isinstance(state, Mapping) or len(state) != 1:
        raise MalformedRecordError(f"a replay status needs one state, got {state!r}")
    return str(next(iter(state)))


def is_done(status: Mapping[str, Any], distinct: int) -> bool:
    """Terminal, and every message it reports delivered (`distinct` read so far) has been read."""
    state = state_of(status)
    return state in TERMINAL and distinct >= int(status["stats"]["delivered"])
