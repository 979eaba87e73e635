"""The key manager answers requests aiohttp cannot parse as the API and the gateway do: spec JSON.

Pure: the key manager's app is served in-process (no broker; no route that needs the manager runs).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from typing import Any

import pytest

from watchtower.keymgr.http import build_app, serve_app


class _NoManager:
    public_key = b"\x00" * 32

    def __getattr__(self, name: str) -> Any:  # the routes are bound, never called, by these requests
        return lambda *_a, **_k: None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _raw(port: int, request: bytes) -> tuple[int, str, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    data = await reader.read()
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    ctype = next((ln.split(":", 1)[1].strip() for ln in lines[1:] if ln.lower().startswith("content-type:")), "")
    return status, ctype, body


async def _probe(requests: list[bytes]) -> list[tuple[int, str, bytes]]:
    port, stop = _free_port(), asyncio.Event()
    server = asyncio.create_task(serve_app(build_app(_NoManager()), "127.0.0.1", port, stop))  # type: ignore[arg-type]
    try:
        async with asyncio.timeout(30):  # until it listens (a loaded machine may take a while)
            while True:
                try:
                    _, w = await asyncio.open_connection("127.0.0.1", port)
                    w.close()
                    break
                except OSError:
                    await asyncio.sleep(0.01)
        return [await _raw(port, r) for r in requests]
    finally:
        stop.set()
        await server


def test_an_over_long_header_or_request_line_is_json_invalid_argument(caplog: pytest.LogCaptureFixture) -> None:
    """Failed before the fix: aiohttp's own text/plain 400, with a traceback in the log."""
    big_header = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"y" * 20_000 + b"\r\nConnection: close\r\n\r\n"
    long_line = b"GET /" + b"a" * 9_000 + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    healthy = b"GET /openapi.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    with caplog.at_level(logging.INFO):
        answers = asyncio.run(_probe([big_header, long_line, healthy]))
    for status, ctype, body in answers[:2]:
        assert status == 400
        assert ctype.startswith("application/json"), (ctype, body[:200])
        assert json.loads(body)["error"]["code"] == "INVALID_ARGUMENT"
    assert answers[2][0] == 200, "the server still answers after refusing"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], caplog.text
