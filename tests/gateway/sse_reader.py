"""A small blocking Server-Sent Events reader for tests: every field and every comment line as sent.

Clients of the product use httpx-sse (``watchtower.client.sse``); tests need what those hide: the
heartbeat comments, the status and JSON error of a refused request, and a socket with a small
receive buffer (a reader that stops reading fills up fast).
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import socket
from typing import Any
from urllib.parse import urlsplit

from waiting import wait_until


@dataclasses.dataclass
class Event:
    """One SSE event (``comment`` set for a comment line such as a ping)."""

    id: str | None = None
    event: str = "message"
    data: str = ""
    comment: str | None = None

    def json(self) -> Any:
        return json.loads(self.data)


class _SmallBufferConnection(http.client.HTTPConnection):
    def __init__(self, host: str, port: int | None, timeout: float, rcvbuf: int | None) -> None:
        super().__init__(host, port, timeout=timeout)
        self.rcvbuf = rcvbuf

    def connect(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if self.rcvbuf is not None:  # before connect: it caps the window the server may fill
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.rcvbuf)
        sock.settimeout(self.timeout)
        sock.connect((self.host, self.port))
        self.sock = sock


class SseClient:
    """``GET base_url + path``; `status` and `error` (the JSON body) when refused, else `events()`."""

    def __init__(self, base_url: str, path: str, *, headers: dict[str, str] | None = None,
                 timeout: float = 60.0, rcvbuf: int | None = None) -> None:
        url = urlsplit(base_url)
        self.conn = _SmallBufferConnection(url.hostname or "127.0.0.1", url.port, timeout, rcvbuf)
        self.conn.request("GET", path, headers={"Accept": "text/event-stream", **(headers or {})})
        self.response = self.conn.getresponse()
        self.status = self.response.status
        self.content_type = self.response.getheader("Content-Type", "")
        self.error: Any = None
        if self.status != 200:
            self.error = json.loads(self.response.read())

    def events(self) -> Any:
        """Events (and comments) until the server closes the stream."""
        current = Event()
        seen_field = False
        while True:
            raw = self.response.readline()
            if not raw:
                return
            line = raw.decode("utf-8").rstrip("\r\n")
            if line == "":
                if seen_field:
                    yield current
                current, seen_field = Event(), False
                continue
            if line.startswith(":"):
                yield Event(comment=line[1:].strip())
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            seen_field = True
            if name == "id":
                current.id = value
            elif name == "event":
                current.event = value
            elif name == "data":
                current.data = value if not current.data else current.data + "\n" + value

    def messages(self, count: int, timeout_s: float = 120.0) -> list[Event]:
        """The next `count` message events (skipping comments); fails on a deadline or a close."""
        out: list[Event] = []
        events = self.events()

        def read_one() -> bool:
            ev = next(events, None)
            if ev is None:
                raise AssertionError(f"the stream closed after {len(out)} of {count} events")
            if ev.comment is None:
                assert ev.event == "message", ev
                out.append(ev)
            return len(out) == count

        wait_until(lambda: f"{count} events (only {len(out)} in time)", read_one, timeout_s=timeout_s, every_s=0)
        return out

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> SseClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
