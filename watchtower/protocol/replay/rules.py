"""ICRC-77 replay ranges and the Kafka headers on replayed records (DESIGN §7.8).

- A replay range is ``[from, to)`` in sequence numbers; `to` is optional.
- Replayed records carry ``icrc77:replay = "true"`` and ``icrc77:replay:id = <decimal id>``; when
  the request had no `to`, every record also carries ``icrc77:replay:end_id = <decimal>``, the last
  sequence the replay will deliver, so the subscriber can tell when it is complete.
- The original `sequence` of each message is unchanged (it is inside the StreamMessage).

Replays read the full log, beyond the ring window, so the only upper bound is the head at
registration time.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from typing import Any, Final

from watchtower.protocol.constants import REPLAY_END_ID_HEADER, REPLAY_HEADER, REPLAY_ID_HEADER
from watchtower.protocol.errors import ImproperConfigError, InvalidFilterError, MalformedRecordError
from watchtower.protocol.events import Skip
from watchtower.protocol.stream.filter_ast import FilterNode, to_json
from watchtower.protocol.stream.filters import compile_filter, parse_filter
from watchtower.protocol.stream.message import StreamMessage
from watchtower.protocol.validation import is_int, require_int

_TRUE = b"true"
MAX_REPLAY_ID: Final = 2**63 - 1
MAX_SKIP_MODULUS: Final = 2**32


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayRange:
    """The range one replay delivers: sequences `first` .. `end_exclusive - 1`.

    `end_id` is set (to the last sequence delivered) exactly when the request had no `to`.
    """

    replay_id: int
    first: int
    end_exclusive: int
    end_id: int | None

    @property
    def sequences(self) -> range:
        """The sequences to re-emit, ascending (possibly empty)."""
        return range(self.first, self.end_exclusive)

    def headers(self) -> list[tuple[str, bytes]]:
        """The Kafka headers every replayed record of this plan carries."""
        return replay_headers(self.replay_id, self.end_id)


def plan_replay(*, replay_id: int, from_sequence: int, to_sequence: int | None, head: int) -> ReplayRange:
    """The plan for replaying ``[from_sequence, to_sequence)`` of a stream whose head is `head`.

    Raises IMPROPER_CONFIG (ICRC-77 ImproperConfig) for a range that is not a range: `from` < 1
    or `to` < `from`. A `to` past the head is clamped to head + 1: only existing messages replay.
    """
    rid = require_int(replay_id, "replay_id")
    top = require_int(head, "head")
    if not is_int(from_sequence) or from_sequence < 1:
        raise ImproperConfigError(f"replay 'from' must be a sequence ≥ 1, got {from_sequence!r}")
    if to_sequence is None:
        return ReplayRange(rid, from_sequence, max(from_sequence, top + 1), top)
    if not is_int(to_sequence) or to_sequence < from_sequence:
        raise ImproperConfigError(
            f"replay range [{from_sequence}, {to_sequence!r}) is empty or reversed; 'to' is exclusive and "
            f"must be ≥ 'from'"
        )
    return ReplayRange(rid, from_sequence, max(from_sequence, min(to_sequence, top + 1)), None)


#: ICRC-77's ``icrc77:capable``: every stream of this service takes replay requests. Shown beside
#: ``icrc77:pricing`` wherever a stream's replay price is (`icrc77_metadata`).
ICRC77_CAPABLE: Final = True


def icrc77_pricing(price_per_event_cby: int) -> dict[str, Any]:
    """ICRC-77's ``icrc77:pricing`` advertisement of a stream's per-event replay price."""
    return {"perEvent": price_per_event_cby, "currency": "CBY"}


def icrc77_metadata(price_per_event_cby: int) -> dict[str, Any]:
    """A stream's ICRC-77 capability metadata under the draft's own key names, ``icrc77:capable`` and
    ``icrc77:pricing``, and under ``icrc77_capable`` / ``icrc77_pricing``, the names earlier
    releases served and existing readers still look for (the same values)."""
    pricing = icrc77_pricing(price_per_event_cby)
    return {"icrc77:capable": ICRC77_CAPABLE, "icrc77:pricing": pricing,
            "icrc77_capable": ICRC77_CAPABLE, "icrc77_pricing": dict(pricing)}


def replay_headers(replay_id: int, end_id: int | None = None) -> list[tuple[str, bytes]]:
    """``icrc77:replay``, ``icrc77:replay:id`` and, when given, ``icrc77:replay:end_id``."""
    headers = [(REPLAY_HEADER, _TRUE), (REPLAY_ID_HEADER, str(require_int(replay_id, "replay_id")).encode())]
    if end_id is not None:
        headers.append((REPLAY_END_ID_HEADER, str(require_int(end_id, "end_id")).encode()))
    return headers


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayMarker:
    """The replay facts read back from a record's headers."""

    replay_id: int
    end_id: int | None


def read_replay_headers(headers: Iterable[tuple[str, bytes | None]] | None) -> ReplayMarker | None:
    """The replay marker of a consumed record, or None for a live (non-replayed) record.

    Raises MALFORMED_RECORD when the replay headers are present but unreadable.
    """
    found = {name: value for name, value in (headers or ()) if name.startswith("icrc77:")}
    if found.get(REPLAY_HEADER) != _TRUE:
        return None
    return ReplayMarker(_decimal(found.get(REPLAY_ID_HEADER), REPLAY_ID_HEADER), _optional(found, REPLAY_END_ID_HEADER))


def _optional(found: dict[str, bytes | None], name: str) -> int | None:
    return _decimal(found[name], name) if name in found else None


def _decimal(raw: bytes | None, name: str) -> int:
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else ""
    if not text.isdigit() or not text.isascii():
        raise MalformedRecordError(f"header {name} must be a decimal number, got {raw!r}")
    return int(text)


# --- Identity, skip and filter: the selection rules every fulfilment shares ---------------------


def replay_id_for(command_digest: bytes) -> int:
    """The replay id of the register_replay command with SHA-256 `command_digest`: its first 8 bytes,
    big-endian, as a positive 63-bit integer. Deterministic, so a retried command names the same
    replay, and an Avro long / JSON number everywhere."""
    if not isinstance(command_digest, bytes) or len(command_digest) != 32:
        raise MalformedRecordError("a replay id is derived from a 32-byte command digest")
    return (int.from_bytes(command_digest[:8], "big") & MAX_REPLAY_ID) or 1


def parse_skip(value: object) -> Skip | None:
    """ICRC-77 ``skip``: None, ``[modulus]`` or ``[modulus, offset]``; sequence *s* is delivered iff
    ``s % modulus == offset`` (offset defaults to 0). IMPROPER_CONFIG for anything else."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and 1 <= len(value) <= 2 and all(is_int(v) for v in value):
        modulus, offset = value[0], (value[1] if len(value) == 2 else 0)
        if 1 <= modulus <= MAX_SKIP_MODULUS and 0 <= offset < modulus:
            return modulus, offset
    raise ImproperConfigError(
        f"skip must be [modulus] or [modulus, offset] with 1 ≤ modulus ≤ {MAX_SKIP_MODULUS} and "
        f"0 ≤ offset < modulus (sequence s is replayed iff s % modulus == offset), got {value!r}",
        details={"field": "skip"},
    )


def skip_keeps(sequence: int, skip: Skip | None) -> bool:
    """Whether the skip rule keeps `sequence` (no rule keeps everything)."""
    return skip is None or sequence % skip[0] == skip[1]


def parse_replay_filter(spec: object) -> FilterNode | None:
    """The CIP-7 filter DSL of a replay config (None: everything). A filter the DSL refuses is
    ICRC-77 ImproperConfig ("unsupported filter MUST result in ImproperConfig"), with the DSL's
    path and rule in the details.

    ICRC-77's minimal profile sends the filter as text (``filter: #Opt(#Text("…"))``): text is read
    as the JSON of the same DSL, so ``"{\"field\":\"kind\",...}"`` and the object it spells select
    the same events (and store the same canonical filter)."""
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except (ValueError, RecursionError):
            raise ImproperConfigError("unsupported replay filter: a text filter is the JSON of the filter DSL "
                                      '(for example {"field":"kind","op":"eq","value":"trade"}), and this text is '
                                      "not JSON", details={"field": "filter", "rule": "filter_text"}) from None
        if isinstance(spec, str):
            raise ImproperConfigError("unsupported replay filter: the text holds a JSON string, not a filter object",
                                      details={"field": "filter", "rule": "filter_text"})
    try:
        return parse_filter(spec)
    except InvalidFilterError as exc:
        raise ImproperConfigError(f"unsupported replay filter: {exc.message}",
                                  details={"field": "filter", **dict(exc.details or {})}) from None


def canonical_filter(node: FilterNode | None) -> str | None:
    """The filter as canonical JSON text (sorted keys, no spaces), as a replay record stores it."""
    return None if node is None else json.dumps(to_json(node), sort_keys=True, separators=(",", ":"))


def charged_events(first: int, end_exclusive: int, skip: Skip | None) -> int:
    """How many sequences of ``[first, end_exclusive)`` the skip rule keeps: what a per-event price
    is charged on (a filter is not known before the archive is read, so it never lowers the price)."""
    if end_exclusive <= first:
        return 0
    if skip is None:
        return end_exclusive - first
    modulus, offset = skip
    # Count s in [first, end) with s ≡ offset (mod modulus).
    start = first + ((offset - first) % modulus)
    return 0 if start >= end_exclusive else (end_exclusive - 1 - start) // modulus + 1


class ReplaySelector:
    """Which archived messages of one stream a replay re-emits: the plan's range, then the skip
    rule, then the filter (evaluated on the message's headers, as live subscriptions are)."""

    __slots__ = ("_end", "_first", "_match", "_skip", "stream_id")

    def __init__(self, stream_id: str, plan_first: int, plan_end_exclusive: int, skip: Skip | None,
                 filter_node: FilterNode | None) -> None:
        self.stream_id = stream_id
        self._first, self._end, self._skip = plan_first, plan_end_exclusive, skip
        self._match = compile_filter(filter_node)

    def in_range(self, sequence: int) -> bool:
        return self._first <= sequence < self._end

    def verdict(self, msg: StreamMessage) -> str:
        """``"out"`` (other stream or outside the range), ``"skipped"``, ``"filtered"`` or ``"deliver"``."""
        if msg.stream_id != self.stream_id or not self.in_range(msg.sequence):
            return "out"
        if not skip_keeps(msg.sequence, self._skip):
            return "skipped"
        return "deliver" if self._match(msg.headers()) else "filtered"


def selector_for(registration: Any) -> ReplaySelector:
    """The selector of a ``registered`` replay record (`records.ReplayRegistration`)."""
    node = None if registration.filter is None else parse_replay_filter(json.loads(registration.filter))
    skip = parse_skip(registration.skip)
    return ReplaySelector(registration.stream_id, registration.first, registration.end_exclusive, skip, node)
