"""CIP-7's read methods on one stream's aggregate state: get_head, get_since's window, the key
schedule and the subscriber list. Pure: no I/O, no clock. `stream_actor` re-exports them."""

from __future__ import annotations

from typing import Any

from watchtower.protocol.config import StreamConfig
from watchtower.protocol.constants import DEFAULT_KEY_HISTORY_LIMIT, FIRST_SIGNING_KEY_ID
from watchtower.protocol.enums import SubscriptionStatus
from watchtower.protocol.errors import StreamNotFoundError
from watchtower.protocol.replay.rules import icrc77_metadata
from watchtower.protocol.stream.key_schedule import KeyHistoryPage, KeySchedule, KeyScheduleEntry
from watchtower.protocol.stream.ring_window import get_since_range as _window_since
from watchtower.protocol.stream.state import StreamState, Subscription


def require_config(state: StreamState) -> StreamConfig:
    """The stream's configuration; STREAM_NOT_FOUND while it is uncreated."""
    if state.config is None:
        raise StreamNotFoundError(f"stream {state.stream_id!r} does not exist")
    return state.config


def require_schedule(state: StreamState) -> KeySchedule:
    """The stream's publisher key schedule; STREAM_NOT_FOUND while it is uncreated."""
    if state.key_schedule is None:
        raise StreamNotFoundError(f"stream {state.stream_id!r} does not exist")
    return state.key_schedule


def get_head(state: StreamState) -> dict[str, Any]:
    """CIP-7 get_head: head_sequence, floor_sequence and the metadata a consumer needs.

    STREAM_NOT_FOUND if uncreated. ``head``, ``floor`` and ``publisher_key_hex`` repeat
    head_sequence, floor_sequence and publisher_key under their 0.1 names (deprecated).
    """
    config = require_config(state)
    current = require_schedule(state).current
    return {
        "stream_id": state.stream_id,
        "owner": state.owner,
        "head_sequence": state.head,
        "floor_sequence": state.floor,
        "head": state.head,
        "floor": state.floor,
        "capacity": config.ring_buffer_capacity,
        "signing_key_id": current.signing_key_id,
        "publisher_key": current.public_key.hex(),
        "publisher_key_hex": current.public_key.hex(),
        "policy": str(config.subscription_policy),
        "access_mode": str(config.access_mode),
        "max_subscribers": config.max_subscribers,
        "active_subscribers": state.active_subscribers,
        "last_key_epoch": state.last_key_epoch,
        "replay_price_per_event_cby": state.replay_price_per_event_cby,
        "ingest_fail_count": state.ingest_fail_count,
        **icrc77_metadata(state.replay_price_per_event_cby),
    }


def get_since_range(state: StreamState, cursor: int, limit: int) -> range:
    """The sequences get_since(cursor, limit) returns (DESIGN §7.5: LIMIT_EXCEEDED, CURSOR_TOO_OLD)."""
    return _window_since(state.head, require_config(state).ring_buffer_capacity, cursor, limit)


def key_at_sequence(state: StreamState, sequence: int) -> KeyScheduleEntry:
    """CIP-7 get_key_at_sequence: the key-schedule entry in force at `sequence`."""
    return require_schedule(state).key_at_sequence(sequence)


def key_history(
    state: StreamState, from_signing_key_id: int = FIRST_SIGNING_KEY_ID, limit: int = DEFAULT_KEY_HISTORY_LIMIT
) -> KeyHistoryPage:
    """CIP-7 get_key_history, paged (limit 1..500)."""
    return require_schedule(state).history(from_signing_key_id, limit)


def subscribers(state: StreamState, *, active_only: bool = False) -> tuple[Subscription, ...]:
    """Subscriptions ordered by subscriber address (the deterministic push round-robin order)."""
    subs = sorted(state.subscriptions.values(), key=lambda s: s.subscriber)
    return tuple(s for s in subs if not active_only or s.status is SubscriptionStatus.ACTIVE)
