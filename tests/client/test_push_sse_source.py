"""`SseSource` against a real HTTP server speaking SSE with aiohttp-sse (the gateway's library).

The server plays one scripted behaviour per connection, so the client's recovery is seen on the
wire: a dropped connection resumed with ``Last-Event-ID``, an undecodable event skipped, a
``lagged`` event answered by a resume, a silent connection (no heartbeat) reconnected, a 503
LIMIT_EXCEEDED retried, a CURSOR_TOO_OLD resumed live, and a permanent FEED_NOT_FOUND raised.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
from aiohttp import web
from aiohttp_sse import sse_response
from kafka_fixture import free_ports
from waiting import wait_until

from watchtower.client.account import Account
from watchtower.client.fake import FakeApi
from watchtower.client.sse import SseSource
from watchtower.client.subscriber import Subscriber
from watchtower.protocol.errors import FeedNotFoundError
from watchtower.protocol.signing import sign_message
from watchtower.protocol.stream.message import StreamMessage

KEY = nacl.signing.SigningKey.generate()
STREAM = "s-sse0000000000001"


def message(sequence: int) -> StreamMessage:
    return sign_message(stream_id=STREAM, sequence=sequence, timestamp_unix_ms=1_700_000_000_000 + sequence,
                        kind="tick", payload=b"{}", signing_key=KEY, tags={"n": sequence})


def event_data(sequence: int) -> str:
    return json.dumps({"feed_id": 1, "stream_id": STREAM, "sequence": sequence,
                       "message": message(sequence).to_json_dict()}, separators=(",", ":"))


def error(status: int, code: str, text: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": text}}, status=status)


class Script:
    """What each connection to feed 1 does, in order; records what each request carried."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.silent = False  # every connection: one event, then nothing at all (no ping) until cancelled
        # The first connection ends before any event (a gateway killed before the first push); later
        # ones send 1..3 to a resume from 0 (what was pushed meanwhile) and nothing to a live start.
        self.dies_before_first_event = False

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["feed_id"] != "1":
            return error(404, "FEED_NOT_FOUND", "feed 2 does not exist; list feeds with `watchtower list`")
        n = len(self.requests)
        self.requests.append({"last_event_id": request.headers.get("Last-Event-ID"), "query": dict(request.query)})
        if self.dies_before_first_event:
            async with sse_response(request, ping_interval=0.2) as resp:
                if n == 0:
                    await asyncio.sleep(0.3)  # a heartbeat or so, then the connection is gone
                    return resp
                if request.headers.get("Last-Event-ID") == "0":
                    for seq in (1, 2, 3):
                        await resp.send(event_data(seq), id=str(seq), event="message")
                await asyncio.sleep(3600)  # live from here: nothing more is pushed
            return resp
        if self.silent:
            async with sse_response(request, ping_interval=3600) as resp:
                await resp.send(event_data(1), id="1", event="message")
                await asyncio.sleep(3600)
            return resp
        if n == 3:
            return error(503, "LIMIT_EXCEEDED", "too many SSE connections; retry later or use pull")
        if n == 4:
            return error(400, "CURSOR_TOO_OLD", "cursor 5 is below the window")
        async with sse_response(request, ping_interval=0.2 if n != 2 else 3600) as resp:
            if n == 0:
                for seq in (1, 2, 3):
                    await resp.send(event_data(seq), id=str(seq), event="message")
                return resp  # drops the connection
            if n == 1:
                await resp.send(event_data(4), id="4", event="message")
                await resp.send("{not json", id="99", event="message")
                await asyncio.sleep(0.5)  # heartbeats only
                await resp.send(json.dumps({"code": "LIMIT_EXCEEDED", "message": "reconnect with Last-Event-ID: 4"}),
                                event="lagged")
                await asyncio.sleep(30)
                return resp
            if n == 2:
                await resp.send(event_data(5), id="5", event="message")
                await asyncio.sleep(30)  # silent: no event, no ping
                return resp
            await resp.send(event_data(6), id="6", event="message")
            await asyncio.sleep(30)
        return resp


async def shutdown(runner: web.AppRunner) -> None:
    """Stop the server and end the handlers still streaming, before the loop closes."""
    await runner.cleanup()
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script()
    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_get("/v1/feeds/{feed_id}/events", script.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    port = free_ports(1)[0]
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}", script
    finally:
        asyncio.run_coroutine_threadsafe(shutdown(runner), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def collect(source: SseSource, until: int, timeout_s: float = 60) -> list[int]:
    got: list[int] = []

    def arrived() -> bool:
        got.extend(m.sequence for m in source.poll(0.2))
        return until in got

    wait_until(lambda: f"{until} (got {got}, stats {source.stats})", arrived, timeout_s=timeout_s, every_s=0)
    return got


def test_sse_source_resumes_after_drops_lags_stalls_and_refusals(server: tuple[str, Script]) -> None:
    url, script = server
    with SseSource(url, 1, subscriber="0xab", heartbeat_s=1, stall_timeout_s=1.5, reconnect_delay_s=0.05) as source:
        got = collect(source, 6)
    assert got == [1, 2, 3, 4, 5, 6]
    resumed_from = [r["last_event_id"] for r in script.requests]
    # live; after the drop from 3; after `lagged` from 4; after the stall from 5 (503, then CURSOR_TOO_OLD); live
    assert resumed_from[:6] == [None, "3", "4", "5", "5", None]
    assert script.requests[0]["query"] == {"subscriber": "0xab", "heartbeat_s": "1"}
    stats = source.stats
    assert (stats.lagged, stats.stalls, stats.cursor_too_old, stats.undecodable) == (1, 1, 1, 1)
    assert stats.received == 6


def test_sse_source_sends_the_resume_point_it_was_given(server: tuple[str, Script]) -> None:
    url, script = server
    with SseSource(url, 1, last_event_id=0, filter={"field": "kind", "op": "eq", "value": "tick"}) as source:
        assert source.wait_connected(30)
        assert collect(source, 1)[0] == 1
    assert script.requests[0]["last_event_id"] == "0"
    assert json.loads(script.requests[0]["query"]["filter"]) == {"field": "kind", "op": "eq", "value": "tick"}


def test_sse_source_raises_a_permanent_error_and_stops(server: tuple[str, Script]) -> None:
    url, _ = server
    with SseSource(url, 2) as source:
        with pytest.raises(FeedNotFoundError):
            source.wait_connected(30)
        assert not source.healthy
        with pytest.raises(FeedNotFoundError):
            source.poll(0.1)


def test_close_ends_the_reader_at_once_while_the_server_is_silent(server: tuple[str, Script]) -> None:
    """`close` must not wait for the server's next write: `feed follow --count N` exits after the Nth
    message, and an application closing a source gets its thread back. The server here never writes
    again and the stall timeout is far away, so only `close` can end the reader's blocked read."""
    url, script = server
    script.silent = True
    source = SseSource(url, 1, stall_timeout_s=3000)
    assert collect(source, 1) == [1]
    reader = source._thread
    closer = threading.Thread(target=source.close, daemon=True)
    closer.start()
    reader.join(60)  # a safety net: unfixed, the reader stays blocked for the whole stall timeout
    assert not reader.is_alive(), "close() left the reader blocked on a silent connection"
    closer.join(60)
    assert not closer.is_alive()
    assert len(script.requests) == 1  # closed, not reconnected


def test_a_connection_lost_before_its_first_event_resumes_from_the_readers_cursor(
        server: tuple[str, Script]) -> None:
    """A live connection that drops before any event has no Last-Event-ID of its own. Resuming live
    would lose every push made while it was down (the demo's PUSH subscriber got 0 of 40 when its
    gateway was killed before the first delivery reached it): it resumes after the reader's cursor."""
    url, script = server
    script.dies_before_first_event = True
    with SseSource(url, 1, subscriber="0xab", heartbeat_s=1, reconnect_delay_s=0.05) as source:
        assert source.wait_connected(30)
        source.resume_after(0)
        assert collect(source, 3) == [1, 2, 3]
    assert [r["last_event_id"] for r in script.requests][:2] == [None, "0"]


def test_push_mode_over_sse_gets_what_was_pushed_while_its_first_connection_was_down(
        server: tuple[str, Script], tmp_path: Path) -> None:
    """The same through `Subscriber.stream("push", SseSource(...))`, which tells the source its cursor."""
    url, script = server
    script.dies_before_first_event = True
    api = FakeApi()
    owner = Account(nacl.signing.SigningKey.generate(), name="owner", home=tmp_path)
    api.command(owner.sign("create_stream", STREAM, {"publisher_key_hex": bytes(KEY.verify_key).hex()}))
    sub = Subscriber(api, STREAM)
    with SseSource(url, 1, subscriber="0xab", heartbeat_s=1, reconnect_delay_s=0.05) as source:
        assert source.wait_connected(30)
        got = [m.sequence for m in islice(sub.stream("push", source, idle_timeout_s=30), 3)]
    assert got == [1, 2, 3]
    assert script.requests[1]["last_event_id"] == "0"


def test_a_resume_point_refused_as_too_old_is_not_retried(server: tuple[str, Script]) -> None:
    """CURSOR_TOO_OLD for the reader's cursor: the source resumes live and never sends that cursor again."""
    url, script = server
    with SseSource(url, 1, heartbeat_s=1, stall_timeout_s=1.5, reconnect_delay_s=0.05) as source:
        source.resume_after(5)  # before any connection streamed: the first one still starts live
        assert collect(source, 6)[-1] == 6
        source.resume_after(5)  # the cursor that was refused: ignored
        assert source.resume_point() == 6
    # live; after the drop from 5 (the reader's cursor, above the 3 received); from 5 after `lagged`
    # and the stall; 503; CURSOR_TOO_OLD for 5; then live, and 5 is never sent again
    assert [r["last_event_id"] for r in script.requests][:6] == [None, "5", "5", "5", "5", None]
