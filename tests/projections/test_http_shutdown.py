"""SIGTERM stops a projection worker promptly even while clients hold long polls open."""

from __future__ import annotations

import signal
import socket
import time
import uuid
from pathlib import Path

import nacl.signing
import pytest
from api_calls import Caller, http, wait_for
from stack_fixture import start_stack

pytestmark = pytest.mark.integration


def test_sigterm_with_open_long_polls_stops_the_worker(kafka_bootstrap: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    with start_stack(kafka_bootstrap, tmp_path) as stack:
        sid = f"sd-{uuid.uuid4().hex[:10]}"
        Caller(stack.api_url).ok("create_stream", sid, {
            "publisher_key_hex": bytes(nacl.signing.SigningKey.generate().verify_key).hex()})
        wait_for(lambda: http("GET", f"{stack.api_url}/v1/streams/{sid}/head")[0] == 200, what="the stream")
        polls = []
        for _ in range(50):
            sock = socket.create_connection(("127.0.0.1", stack.api_port), timeout=60)
            sock.sendall(f"GET /v1/streams/{sid}/messages?min_head=1&wait_ms=30000 HTTP/1.1\r\n"
                         "Host: 127.0.0.1\r\n\r\n".encode())
            polls.append(sock)
        wait_for(lambda: http("GET", f"{stack.api_url}/v1/health")[1]["long_polls"] == 50, what="50 open polls")
        proc = stack.procs["projection-p1"]
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)  # a hang guard only; the time is reported, not asserted
        took = time.monotonic() - started
        assert proc.returncode is not None
        answered = sum(1 for sock in polls if sock.recv(16).startswith(b"HTTP/1.1 200"))
        for sock in polls:
            sock.close()
        with capsys.disabled():
            print(f"\nSIGTERM with 50 open long polls: the projection exited in {took:.2f} s "
                  f"(code {proc.returncode}); {answered} polls were answered before it closed")
        assert answered == 50  # each open poll got its answer (the current page), none was cut off
