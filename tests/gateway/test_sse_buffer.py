"""A connection's live buffer is bounded: past `WATCHTOWER_SSE_QUEUE` events it drops what it holds,
marks itself lagged (the stream then ends with ``event: lagged``) and takes nothing more."""

from __future__ import annotations

import asyncio

import pytest

from watchtower.gateway.sse import SseHub
from watchtower.gateway.sse_connection import Connection
from watchtower.gateway.tail import Item


def items(*sequences: int) -> list[Item]:
    return [Item(s, object(), "{}") for s in sequences]


def test_a_connection_that_falls_behind_its_bound_is_lagged_and_keeps_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHTOWER_SSE_QUEUE", "3")

    async def scenario() -> None:
        hub = SseHub("127.0.0.1:1", prefix="t", api_url="http://127.0.0.1:1")
        conn = Connection(hub, hub.queue_size)
        conn.offer(items(2, 1))
        assert not conn.lagged
        assert [item.sequence for item in conn.take()] == [1, 2]  # handed over in sequence order
        conn.offer(items(3, 4, 5))
        assert (conn.lagged, len(conn.items), hub.max_queued) == (False, 3, 3)
        conn.offer(items(6))
        assert conn.lagged
        assert len(conn.items) == 0  # what it held is dropped: memory stays bounded
        assert conn.wake.is_set()  # the sender wakes up to send `lagged`
        conn.offer(items(7, 8))
        assert len(conn.items) == 0
        assert (hub.lagged, hub.max_queued) == (1, 3)

    asyncio.run(scenario())


def test_the_settings_come_from_the_environment_with_floors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHTOWER_SSE_QUEUE", "0")
    monkeypatch.setenv("WATCHTOWER_SSE_HEARTBEAT_S", "not a number")
    monkeypatch.setenv("WATCHTOWER_SSE_MAX_CONNECTIONS", "7")
    hub = SseHub("127.0.0.1:1", prefix="t", api_url="http://127.0.0.1:1")
    assert (hub.queue_size, hub.heartbeat_s, hub.max_connections) == (1, 15, 7)
