"""Request bodies are bounded in size and in time on every server (the API and the gateway share
`application_options`; the key manager its own app): `watchtower.http.server.bounded_body`.

Pure: each app is served in-process on a free port, no broker. The gateway's command route is
mounted as the API and the gateway mount it; no request here gets far enough to produce a command.
A test that fails waits at most `CLIENT_WAIT_S` for an answer that never comes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest
from aiohttp import web

from watchtower.gateway.routes import COMMANDS_PATH, CommandGateway
from watchtower.http import server as web_server
from watchtower.keymgr import http as keymgr_http

CLIENT_WAIT_S = 20.0
#: The body deadline the servers run with here: short, so the slow-drip test ends quickly.
DEADLINE_S = 0.5
#: How long a refused connection reads what is still sent before it closes, here.
LINGER_S = 0.2


class _NoManager:
    public_key = b"\x00" * 32

    def __getattr__(self, name: str) -> Any:  # the routes are bound, never called, by these requests
        return lambda *_a, **_k: None


async def _serve_api(port: int, stop: asyncio.Event) -> None:
    """The command route on an app and runner made as the API and the gateway make theirs."""
    app = web.Application(**web_server.application_options())
    CommandGateway("127.0.0.1:1", prefix="t").mount(app)  # never connects: no request is produced
    runner = web_server.JsonErrorRunner(app, access_log=None, handler_cancellation=True,
                                        shutdown_timeout=web_server.SHUTDOWN_GRACE_S)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", port).start()
        await stop.wait()
    finally:
        await runner.cleanup()


async def _serve_keymgr(port: int, stop: asyncio.Event) -> None:
    await keymgr_http.serve_app(keymgr_http.build_app(_NoManager()), "127.0.0.1", port, stop)  # type: ignore[arg-type]


SERVERS: dict[str, tuple[Callable[[int, asyncio.Event], Coroutine[Any, Any, None]], str, int]] = {
    "api": (_serve_api, COMMANDS_PATH, web_server.MAX_BODY_BYTES),
    "keymgr": (_serve_keymgr, "/v1/keymgr/encrypt", keymgr_http.MAX_BODY_BYTES),
}


@contextlib.asynccontextmanager
async def _serving(serve: Callable[[int, asyncio.Event], Coroutine[Any, Any, None]]) -> AsyncIterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    stop = asyncio.Event()
    server = asyncio.create_task(serve(port, stop))
    try:
        async with asyncio.timeout(CLIENT_WAIT_S):  # until it listens
            while True:
                try:
                    _, w = await asyncio.open_connection("127.0.0.1", port)
                    w.close()
                    break
                except OSError:
                    await asyncio.sleep(0.01)
        yield port
    finally:
        stop.set()
        await server


async def _exchange(port: int, head: bytes, body: bytes = b"", *,
                    drip_s: float | None = None) -> tuple[int, dict[str, Any]]:
    """Send `head` and `body` (one byte every `drip_s` if given: a slow client), and read the answer to the
    end: the status and the JSON body. The server must close the connection for this to return."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    async def send() -> None:
        writer.write(head)
        for i in range(len(body)):
            if drip_s is None:
                writer.write(body[i:])
                break
            writer.write(body[i:i + 1])
            await writer.drain()
            await asyncio.sleep(drip_s)  # the hostile client's pace, not a synchronisation

    sender = asyncio.create_task(send())
    try:
        async with asyncio.timeout(CLIENT_WAIT_S):
            data = await reader.read()  # to EOF: the server closed the connection
    finally:
        sender.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError):
            await sender
        writer.close()
    status_line, _, rest = data.partition(b"\r\n")
    _, _, payload = rest.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), json.loads(payload)


def _post(path: str, length: int | None, extra: str = "") -> bytes:
    declared = f"Content-Length: {length}\r\n" if length is not None else "Transfer-Encoding: chunked\r\n"
    return f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{declared}{extra}\r\n".encode()


@pytest.fixture(autouse=True)
def _short_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(web_server, "BODY_DEADLINE_S", DEADLINE_S)
    monkeypatch.setattr(web_server, "LINGER_S", LINGER_S)


@pytest.mark.parametrize("server", sorted(SERVERS))
def test_a_declared_length_over_the_limit_is_refused_at_once_and_closed(server: str) -> None:
    """Failed before the fix: the server waited for the 1 GB body that never came (no answer)."""
    make_app, path, limit = SERVERS[server]

    async def go() -> tuple[int, dict[str, Any]]:
        async with _serving(make_app) as port:
            return await _exchange(port, _post(path, 10**9))

    status, body = asyncio.run(go())
    assert (status, body["error"]["code"]) == (413, "PAYLOAD_TOO_LARGE"), body
    assert f"at most {limit} bytes" in body["error"]["message"]


@pytest.mark.parametrize("server", sorted(SERVERS))
def test_a_body_that_never_arrives_is_refused_after_the_deadline_and_closed(server: str) -> None:
    """Failed before the fix: a declared 100-byte body that never came held the connection (no answer)."""
    make_app, path, _ = SERVERS[server]

    async def go() -> tuple[int, dict[str, Any]]:
        async with _serving(make_app) as port:
            return await _exchange(port, _post(path, 100), b'{"comm')

    status, body = asyncio.run(go())
    assert (status, body["error"]["code"]) == (408, "TIMEOUT"), body
    assert "did not arrive within 0.5 s" in body["error"]["message"]


@pytest.mark.parametrize("server", sorted(SERVERS))
def test_a_slow_drip_body_is_refused_at_the_deadline_whatever_its_pace(server: str) -> None:
    """Failed before the fix: a byte every 0.2 s kept the request alive for as long as the client liked."""
    make_app, path, _ = SERVERS[server]

    async def go() -> tuple[int, dict[str, Any]]:
        async with _serving(make_app) as port:
            return await _exchange(port, _post(path, 10_000), b"x" * 10_000, drip_s=0.2)

    status, body = asyncio.run(go())
    assert (status, body["error"]["code"]) == (408, "TIMEOUT"), body


@pytest.mark.parametrize("server", sorted(SERVERS))
def test_a_chunked_body_past_the_limit_is_payload_too_large(server: str) -> None:
    make_app, path, limit = SERVERS[server]
    chunk = b"y" * 65_536
    body = (f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n") * (limit // len(chunk) + 2) + b"0\r\n\r\n"

    async def go() -> tuple[int, dict[str, Any]]:
        async with _serving(make_app) as port:
            return await _exchange(port, _post(path, None), body)

    status, body_ = asyncio.run(go())
    assert (status, body_["error"]["code"]) == (413, "PAYLOAD_TOO_LARGE"), body_


@pytest.mark.parametrize("server", sorted(SERVERS))
def test_a_body_in_bounds_still_reaches_the_route(server: str) -> None:
    make_app, path, _ = SERVERS[server]
    body = b"{not json"

    async def go() -> tuple[int, dict[str, Any]]:
        async with _serving(make_app) as port:
            return await _exchange(port, _post(path, len(body), "Connection: close\r\n"), body)

    status, answer = asyncio.run(go())
    assert (status, answer["error"]["code"]) == (400, "INVALID_ARGUMENT"), answer
    assert "the request body is not JSON" in answer["error"]["message"]  # the route's own check


@pytest.mark.parametrize("server", sorted(SERVERS))
def test_a_client_that_leaves_mid_body_frees_the_request_and_logs_no_error(
        server: str, caplog: pytest.LogCaptureFixture) -> None:
    make_app, path, _ = SERVERS[server]

    async def go() -> tuple[int, dict[str, Any]]:
        async with _serving(make_app) as port:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(_post(path, 1_000) + b'{"command"')
            await writer.drain()
            writer.close()
            await writer.wait_closed()
            body = b"{not json"  # the server still answers the next client
            return await _exchange(port, _post(path, len(body), "Connection: close\r\n"), body)

    with caplog.at_level(logging.INFO):
        status, answer = asyncio.run(go())
    assert (status, answer["error"]["code"]) == (400, "INVALID_ARGUMENT"), answer
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], caplog.text
