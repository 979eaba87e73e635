"""A runner's fetch against hostile local sources (no broker): one deadline per fetch whatever the
source does, a JSON bomb answered as SOURCE_UNAVAILABLE, and the runner's threads shared so that
one dripping feed cannot stall another feed."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import nacl.signing
import pytest

from watchtower.ingest.fetch import Fetcher, FetchError, allowed_nets, fetch_json
from watchtower.ingest.runner import Runner, dispatcher, now_height, submit
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.ingestion import HttpJsonTask, IngestReason, parse_task_definition
from watchtower.protocol.ingestion.records import IngestResult, IngestTask, new_task

LOOPBACK = allowed_nets("127.0.0.1/32")
SCHEDULER = nacl.signing.SigningKey(b"\x03" * 32)
RUNNER_KEY = nacl.signing.SigningKey(b"\x31" * 32)
MIB = 1024 * 1024  # a declared megabyte is within the bound: only time can stop the drip
BOUND_S = 30.0  # how long a test waits for what must happen well before it (never a timing assertion)

Handler = Callable[[socket.socket, threading.Event], None]


class LocalSource:
    """A loopback TCP server: each connection is served by `handler` on its own thread. Counts
    the connections open at once, and the most ever open."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.stop = threading.Event()
        self.lock = threading.Condition()
        self.open = 0
        self.most = 0
        self.accepted = 0
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/p"

    def wait_open(self, n: int = 1) -> bool:
        """True once `n` connections have been accepted (bounded wait)."""
        with self.lock:
            return self.lock.wait_for(lambda: self.accepted >= n, BOUND_S)

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with self.lock:
            self.open += 1
            self.accepted += 1
            self.most = max(self.most, self.open)
            self.lock.notify_all()
        try:
            with conn:
                self.handler(conn, self.stop)
        except OSError:
            pass
        finally:
            with self.lock:
                self.open -= 1


@contextmanager
def local_source(handler: Handler) -> Iterator[LocalSource]:
    source = LocalSource(handler)
    thread = threading.Thread(target=source._serve, daemon=True)
    thread.start()
    try:
        yield source
    finally:
        source.stop.set()
        source.server.close()


def read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def drip_body(conn: socket.socket, stop: threading.Event) -> None:
    """Declares a megabyte, then sends one byte at a time, each well inside any read timeout."""
    read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n[")
    while not stop.wait(0.2):
        conn.sendall(b" ")


def drip_headers(conn: socket.socket, stop: threading.Event) -> None:
    """Never finishes its headers: one byte of a header line at a time."""
    read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
    while not stop.wait(0.2):
        conn.sendall(b"a")


def answer(body: bytes, seen: list[bytes] | None = None) -> Handler:
    """Answers every request on the connection with `body` (keep-alive), recording each request."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        while not stop.is_set():
            request = read_request(conn)
            if not request:
                return
            if seen is not None:
                seen.append(request)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(body), body))

    return handler


def http_task(url: str, **fields: Any) -> HttpJsonTask:
    source = parse_task_definition({"kind": "http_json", "url": url, **fields}).source
    assert isinstance(source, HttpJsonTask)
    return source


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


@pytest.mark.parametrize("handler", [drip_body, drip_headers], ids=["body", "headers"])
def test_a_dripping_source_ends_at_the_fetch_deadline(handler: Handler) -> None:
    with local_source(handler) as source:
        task = http_task(source.url, timeout_ms=1000, max_bytes=MIB)
        thread, box = in_thread(lambda: fetch_json(task, allow=LOOPBACK))
        thread.join(BOUND_S)
        assert not thread.is_alive(), "the fetch outlived its deadline by far"
    error = box.get("error")
    assert isinstance(error, FetchError), box
    assert error.reason is IngestReason.SOURCE_UNAVAILABLE
    assert "deadline" in error.detail


def test_a_deeply_nested_json_source_is_source_unavailable() -> None:
    bomb = b"[" * 100_000 + b"]" * 100_000
    with local_source(answer(bomb)) as source, pytest.raises(FetchError) as refused:
        fetch_json(http_task(source.url, max_bytes=1024 * 1024), allow=LOOPBACK)
    assert refused.value.reason is IngestReason.SOURCE_UNAVAILABLE
    assert "nested" in refused.value.detail


def task_for(stream: str, url: str, tick: int = 1, **fields: Any) -> IngestTask:
    config = {"num_runners": 1, "proof_type": "NONE", "result_schema": {"type": "object"},
              "task_definition": {"kind": "http_json", "url": url, **fields}}
    return new_task(stream_id=stream, tick=tick, tick_height=now_height() + tick, timeout_blocks=600, config=config,
                    runner_keys=(bytes(RUNNER_KEY.verify_key),), scheduler=SCHEDULER)


def a_runner() -> Runner:
    return Runner(RUNNER_KEY, address_from_public_key(bytes(SCHEDULER.verify_key)), allow=LOOPBACK)


def test_a_deeply_nested_json_source_is_the_runners_answer_not_its_silence() -> None:
    bomb = b"[" * 100_000 + b"]" * 100_000
    with local_source(answer(bomb)) as source:
        result = a_runner().run_task(task_for("deep", source.url, max_bytes=1024 * 1024))
    assert result.error == IngestReason.SOURCE_UNAVAILABLE


class Results:
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.by_stream: dict[str, list[IngestResult]] = {}

    def __call__(self, result: IngestResult) -> None:
        with self.cond:
            self.by_stream.setdefault(result.stream_id, []).append(result)
            self.cond.notify_all()

    def wait_for(self, stream: str) -> list[IngestResult]:
        with self.cond:
            self.cond.wait_for(lambda: stream in self.by_stream, BOUND_S)
            return list(self.by_stream.get(stream, []))


def test_a_dripping_feed_does_not_take_the_threads_another_feed_needs() -> None:
    runner, results = a_runner(), Results()
    fetcher = Fetcher(LOOPBACK)
    pool = dispatcher(runner, results, fetcher, workers=4)
    try:
        with local_source(drip_body) as slow, local_source(answer(json.dumps({"p": 7}).encode())) as fast:
            for tick in range(1, 13):  # more ticks of the wedged feed than the runner has threads
                submit(runner, pool, task_for("wedged", slow.url, tick, timeout_ms=30_000, max_bytes=MIB), results)
            assert slow.wait_open()
            submit(runner, pool, task_for("healthy", fast.url, 1, select="$.p"), results)
            [healthy] = results.wait_for("healthy")
            assert healthy.error is None
            assert healthy.result_json == "7"
            assert "wedged" not in results.by_stream
            assert slow.most <= pool.per_source  # the wedged feed's ticks wait for its own fetches
    finally:
        pool.close()
        fetcher.close()


def test_identical_sources_of_one_tick_are_fetched_once() -> None:
    runner, results = a_runner(), Results()
    fetcher = Fetcher(LOOPBACK)
    pool = dispatcher(runner, results, fetcher, workers=2)
    seen: list[bytes] = []
    try:
        with local_source(answer(json.dumps({"a": 1, "b": 2}).encode(), seen)) as source:
            gate = threading.Event()
            # Hold both workers on a source of their own so the two tasks below queue together.
            with local_source(lambda conn, _stop: (read_request(conn), gate.wait(BOUND_S))) as hold:
                submit(runner, pool, task_for("hold-1", hold.url, 1, timeout_ms=30_000), results)
                submit(runner, pool, task_for("hold-2", hold.url + "?2", 1, timeout_ms=30_000), results)
                assert hold.wait_open(2)
                submit(runner, pool, task_for("one", source.url, 1, select="$.a"), results)
                submit(runner, pool, task_for("two", source.url, 1, select="$.b"), results)
                gate.set()
                [one], [two] = results.wait_for("one"), results.wait_for("two")
        assert (one.result_json, two.result_json) == ("1", "2")
        assert len(seen) == 1
    finally:
        pool.close()
        fetcher.close()
