"""What one live record costs the SSE gateway: one wake-up of the loop per poll (not one per
connection), its event formatted once per feed (not once per connection), and one write per
connection per batch (not one `send` per event), with aiohttp-sse's bytes and its abort of a
stalled client kept.

These drive the real route in-process (aiohttp server and clients on loopback) with records handed
to the tail's fan-out as its Kafka poll would; the route on a real broker is covered by
test_sse_live.py and test_sse_push_and_lag.py.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable
from typing import Any

import aiohttp
import nacl.signing
import pytest
from aiohttp import web
from aiohttp_sse import EventSourceResponse, sse_response
from kafka_fixture import free_ports

from watchtower.gateway import sse_connection
from watchtower.gateway.sse import SseHub
from watchtower.gateway.sse_events import SEP, EventStream, encode_event
from watchtower.gateway.tail import Item, Tailer, messages_route
from watchtower.protocol.signing import sign_message
from watchtower.schemas.records import encode_message
from watchtower.topics.records import Record

KEY = nacl.signing.SigningKey.generate()
STREAM = "cost.test"


def record(sequence: int) -> Record:
    """A ``messages`` record as the tail's reader returns it."""
    msg = sign_message(stream_id=STREAM, sequence=sequence, timestamp_unix_ms=1_700_000_000_000 + sequence,
                       kind="tick", payload=b'{"i": %d}' % sequence, signing_key=KEY,
                       content_type="application/json")
    return Record("t.messages", 0, sequence, STREAM.encode(), encode_message(msg), (), 0)


# ----------------------------------------------------------------------------- the bytes
@pytest.mark.parametrize("data", ['{"a":1,"b":"x y"}', "", "two\nlines", "crlf\r\nand\rcr", "trailing\n"])
@pytest.mark.parametrize(("event_id", "event"), [("42", "message"), (None, "lagged"), ("7", None)])
def test_an_encoded_event_is_byte_for_byte_what_aiohttp_sse_send_writes(
        data: str, event_id: str | None, event: str | None) -> None:
    written: list[bytes] = []

    async def capture() -> None:
        resp = EventSourceResponse(sep=SEP)

        async def write(payload: bytes | bytearray | memoryview) -> None:
            written.append(bytes(payload))

        resp.write = write  # type: ignore[method-assign,assignment]
        await resp.send(data, id=event_id, event=event)

    asyncio.run(capture())
    assert encode_event(data, id=event_id, event=event) == b"".join(written)


# ----------------------------------------------------------------------------- the tail's hand-over
class CountingLoop:
    """A loop stand-in that counts wake-ups (call_soon_threadsafe) and runs the callback at once."""

    def __init__(self) -> None:
        self.calls = 0

    def call_soon_threadsafe(self, callback: Callable[..., Any], *args: Any) -> None:
        self.calls += 1
        callback(*args)


class Sink:
    def __init__(self, loop: CountingLoop) -> None:
        self.loop = loop
        self.got: list[Item] = []

    def offer(self, items: list[Item]) -> None:
        self.got.extend(items)


def test_a_poll_wakes_each_loop_once_and_every_sink_shares_the_same_items() -> None:
    tailer = Tailer("127.0.0.1:1", "t.messages", messages_route)
    loop_a, loop_b = CountingLoop(), CountingLoop()
    sinks = [Sink(loop_a) for _ in range(50)] + [Sink(loop_b) for _ in range(3)]
    for sink in sinks:
        tailer.register(STREAM, sink)  # type: ignore[arg-type]
    tailer._fan_out([record(s) for s in (1, 2, 3)])
    assert (loop_a.calls, loop_b.calls) == (1, 1)  # not one per connection
    assert all([i.sequence for i in s.got] == [1, 2, 3] for s in sinks)
    first = sinks[0].got
    assert all(s.got[k] is first[k] for s in sinks for k in range(3))  # one decode, one JSON per record


# ----------------------------------------------------------------------------- the route, in-process
@pytest.fixture
def no_kafka_tail(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tail "starts" without a broker: its thread only waits for the tail's own stop flag (so
    `Tailer.stop` returns at once); records come from `_fan_out`."""

    def start(self: Tailer) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._stop.wait, daemon=True)
            self._thread.start()

    monkeypatch.setattr(Tailer, "start", start)


async def serve_feed(hub: SseHub, port: int) -> web.AppRunner:
    """The route on `port`, with the two API reads a live connection makes served by the same app."""
    app = web.Application()

    async def feed(_r: web.Request) -> web.Response:
        return web.json_response({"feed_id": 1, "stream_id": STREAM})

    async def head(_r: web.Request) -> web.Response:
        return web.json_response({"stream_id": STREAM, "head_sequence": 0})

    app.router.add_get("/v1/feeds/1", feed)
    app.router.add_get(f"/v1/streams/{STREAM}/head", head)
    hub.mount(app)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


async def read_ids(resp: aiohttp.ClientResponse, last: int) -> list[int]:
    """The ``id:`` of every event until the one with id `last`."""
    ids: list[int] = []
    async for line in resp.content:
        if line.startswith(b"id: "):
            ids.append(int(line[4:]))
            if ids[-1] == last:
                return ids
    return ids


@pytest.mark.usefixtures("no_kafka_tail")
def test_connections_of_a_feed_share_each_formatted_event_and_write_a_batch_in_one_write(
        monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_ports(1)[0]
    formatted: list[str] = []
    real_encode = sse_connection.encode_event

    def counting_encode(data: str, **kw: Any) -> bytes:
        formatted.append(data)
        return real_encode(data, **kw)

    monkeypatch.setattr(sse_connection, "encode_event", counting_encode)
    writes: dict[int, int] = {}
    real_write = EventSourceResponse.write

    async def counting_write(self: EventSourceResponse, data: bytes) -> None:
        if b"event: message" in data:
            writes[id(self)] = writes.get(id(self), 0) + 1
        await real_write(self, data)

    monkeypatch.setattr(EventSourceResponse, "write", counting_write)
    batch = [record(s) for s in range(1, 51)]

    async def scenario() -> None:
        hub = SseHub("127.0.0.1:1", prefix="t", api_url=f"http://127.0.0.1:{port}")
        runner = await serve_feed(hub, port)
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
                resps = [await session.get(f"http://127.0.0.1:{port}/v1/feeds/1/events") for _ in range(3)]
                assert [r.status for r in resps] == [200, 200, 200]
                tailer = hub.tailers["messages"]
                async with asyncio.timeout(60):
                    while tailer.listeners() < 3:
                        await asyncio.sleep(0.01)
                # The tail's thread hands the poll over, as it does after a Kafka poll.
                await asyncio.to_thread(tailer._fan_out, batch)
                got = await asyncio.wait_for(asyncio.gather(*(read_ids(r, 50) for r in resps)), 60)
                for r in resps:
                    r.close()
        finally:
            await runner.cleanup()
        assert got == [list(range(1, 51))] * 3  # in order, once each
        assert len(formatted) == 50  # once per record for the feed, not once per connection
        assert sorted(writes.values()) == [1, 1, 1]  # the batch of 50 in one write per connection

    asyncio.run(scenario())


def test_a_batch_write_to_a_stalled_client_times_out_and_aborts_the_connection() -> None:
    """`send_encoded` keeps aiohttp-sse's contract: a write the client never reads is given up after
    the send timeout, the connection is aborted, and TimeoutError tells the route it is over."""
    port = free_ports(1)[0]
    outcome: dict[str, Any] = {}

    async def handler(request: web.Request) -> web.StreamResponse:
        async with sse_response(request, sep=SEP, send_timeout=0.5, response_cls=EventStream) as resp:
            chunk = encode_event("x" * 1000, id="1", event="message") * 256  # ~256 KiB a write
            try:
                for _ in range(400):  # at most ~100 MiB: far more than any socket buffers
                    await resp.send_encoded(chunk)
                outcome["error"] = None
            except TimeoutError:
                outcome["error"] = "timeout"
                outcome["transport_gone"] = request.transport is None or request.transport.is_closing()
        return resp

    async def scenario() -> None:
        app = web.Application()
        app.router.add_get("/events", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # and it never reads
        try:
            await asyncio.to_thread(client.connect, ("127.0.0.1", port))
            client.sendall(b"GET /events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
            async with asyncio.timeout(120):
                while "error" not in outcome:
                    await asyncio.sleep(0.05)
        finally:
            client.close()
            await runner.cleanup()

    asyncio.run(scenario())
    assert outcome == {"error": "timeout", "transport_gone": True}

