"""``report_ingest_failure``: the stream actor records an ingestion tick that published nothing
(CIP-7 "Ingestion Flow", failure behaviour: increment ingest_fail_count, emit IngestFailed, never
increment the sequence).

Body: ``{reason, timestamp_unix_ms, first_tick, last_tick, detail}`` (one tick: first == last; a
catch-up skip names its range). Rules, in order:

1. the stream has ingestion enabled (INVALID_ARGUMENT otherwise);
2. the caller is the stream's *current publisher key* (its address): the key the owner delegated
   to ingestion through a signed rotation, which is the one identity that may publish for the
   feed, so it is also the one that may say a tick failed (UNAUTHORIZED otherwise: a stranger
   cannot inflate the count);
3. the fields are valid: a known reason, a JSON-safe timestamp, 1 ≤ first_tick ≤ last_tick,
   a detail of at most 512 characters;
4. the range starts after the last tick already reported (INVALID_ARGUMENT with
   ``details.last_failed_tick``: a restarted aggregator learns the tick is recorded, and no tick
   is counted twice).
"""

from __future__ import annotations

from typing import Any, Final

from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.commands import ReportIngestFailure, read_body
from watchtower.protocol.errors import InvalidArgumentError, UnauthorizedError
from watchtower.protocol.events import IngestFailed
from watchtower.protocol.ingestion import MAX_SAFE_JSON_INT, REASON_HINTS, parse_reason
from watchtower.protocol.signed_command import Command
from watchtower.protocol.stream.state import StreamState
from watchtower.protocol.validation import require_int

MAX_DETAIL: Final = 512


def decide_ingest_failure(state: StreamState, cmd: Command) -> tuple[IngestFailed, dict[str, Any]]:
    """(event body, reply) of a report_ingest_failure that passed signature, nonce and existence."""
    config = state.config
    if config is None or config.ingestion is None or not config.ingestion.enabled:
        raise InvalidArgumentError(f"stream {state.stream_id!r} has no enabled ingestion; nothing can fail to ingest")
    delegated = address_from_public_key(config.publisher_key)
    if cmd.caller != delegated:
        raise UnauthorizedError(
            f"only the stream's current publisher key ({delegated}) reports ingestion failures; "
            f"{cmd.caller} is not it: delegate the key to ingestion with rotate_publisher_key"
        )
    body = read_body(cmd, ReportIngestFailure)
    reason = parse_reason(body.reason)
    timestamp, first, detail = body.timestamp_unix_ms, body.first_tick, body.detail
    last = require_int(body.last_tick, "last_tick", minimum=first, maximum=MAX_SAFE_JSON_INT)
    if len(detail) > MAX_DETAIL:
        raise InvalidArgumentError(f"detail is at most {MAX_DETAIL} characters")
    if first <= state.last_failed_tick:
        raise InvalidArgumentError(
            f"tick {first} is not after the last tick already reported failed ({state.last_failed_tick}); "
            "it is recorded, do not report it again",
            details={"last_failed_tick": state.last_failed_tick},
        )
    event = IngestFailed(stream_id=state.stream_id, reason=str(reason), timestamp_unix_ms=timestamp,
                         first_tick=first, last_tick=last, detail=detail)
    reply = {"ingest_fail_count": state.ingest_fail_count + 1, "reason": str(reason), "last_tick": last,
             "head_sequence": state.head, "hint": REASON_HINTS[reason]}
    return event, reply
