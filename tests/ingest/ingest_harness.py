"""A local HTTP price source the tests switch between behaviours, and readers of what ingestion did."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from waiting import let_time_pass, wait_until

from watchtower.protocol.stream.state import INGEST_FAILED, Event
from watchtower.schemas.wire import decode_event
from watchtower.topics.catalogue import topic_name
from watchtower.topics.reader import read_committed


class PriceSource:
    """``GET /price`` answers by `mode`: ok (the current `price`), down (503), schema (a text price),
    split (a different price per request), big (a body over any small max_bytes), hang (sleeps)."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.price = 97_000
        self.requests = 0
        self._counter = itertools.count(1)
        self.hang_s = 6.0

    def answer(self) -> tuple[int, bytes]:
        self.requests += 1
        mode = self.mode
        if mode == "down":
            return 503, b'{"error": "maintenance"}'
        if mode == "hang":
            let_time_pass(self.hang_s, "a source that hangs: the runner's request timeout must cut it off")
        price: Any = self.price
        if mode == "schema":
            price = "high"
        elif mode == "split":
            price = self.price + next(self._counter) * 1000
        body = {"data": {"price": price, "symbol": "BTC"}}
        if mode == "big":
            body["padding"] = "x" * 20_000  # type: ignore[assignment]
        return 200, json.dumps(body).encode()


@contextmanager
def serve_source(source: PriceSource) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = source.answer()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the runner gave up first (the hang mode): what the test wants

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/price"
    finally:
        server.shutdown()
        server.server_close()


def health(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 60.0) -> Any:
    """`check()` once it is truthy; AssertionError naming `what` after `timeout_s`."""
    return wait_until(what, check, timeout_s=timeout_s, every_s=0.2)


def ingest_failures(bootstrap: str, prefix: str, stream_id: str) -> list[Event]:
    """Every committed IngestFailed event of `stream_id`, in log order."""
    out = []
    for msg in read_committed(bootstrap, [topic_name("events", prefix)]):
        if msg.key() != stream_id.encode():
            continue
        event = decode_event(msg.value())
        if event.type == INGEST_FAILED:
            out.append(event)
    return out
