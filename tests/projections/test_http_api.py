"""The HTTP API against a running stack: spec field names, strict parameters, JSON errors on every
path, bounded long polls that go away with their client, truthful health, and a loopback bind."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import urllib.parse
import uuid
from http.client import HTTPConnection
from pathlib import Path

import nacl.signing
import pytest
from api_calls import Caller, http, wait_for

from watchtower.gateway.transport import CommandClient
from watchtower.local.stack import ServiceSet
from watchtower.protocol.errors import known_error_codes
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.signing import sign_message

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def feed(stack: ServiceSet) -> str:
    """A stream with two messages."""
    owner, publisher = Caller(stack.api_url), nacl.signing.SigningKey.generate()
    sid = f"h-{uuid.uuid4().hex[:10]}"
    owner.ok("create_stream", sid, {"publisher_key_hex": bytes(publisher.verify_key).hex()})
    for seq in (1, 2):
        msg = sign_message(stream_id=sid, sequence=seq, timestamp_unix_ms=seq, kind="t", payload=b"{}",
                           signing_key=publisher)
        owner.ok("publish", sid, msg.to_json_dict())
    wait_for(lambda: http("GET", f"{stack.api_url}/v1/streams/{sid}/head")[1].get("head") == 2, what="head 2")
    return sid


def raw(stack: ServiceSet, method: str, path: str, body: bytes | None = None,
        headers: dict[str, str] | None = None, timeout: float = 30.0) -> tuple[int, str, bytes]:
    """One request with the standard library's lowest-level client: (status, content type, body)."""
    conn = HTTPConnection("127.0.0.1", stack.api_port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type") or "", resp.read()
    finally:
        conn.close()


def spec_error(status: int, content_type: str, body: bytes) -> str:
    """Assert a 4xx spec error body and return its code."""
    assert 400 <= status < 500, (status, body[:300])
    assert content_type.startswith("application/json"), (content_type, body[:300])
    error = json.loads(body)["error"]
    assert set(error) >= {"code", "message"}
    assert error["message"]
    assert error["code"] in known_error_codes(), error
    return str(error["code"])


def q(value: object) -> str:
    return urllib.parse.quote(json.dumps(value, separators=(",", ":")) if not isinstance(value, str) else value)


# --- item 5: the limit is checked first ---------------------------------------------------------

@pytest.mark.parametrize("limit", ["0", "501", "x"])
def test_get_since_checks_the_limit_before_the_filter(stack: ServiceSet, feed: str, limit: str) -> None:
    bad_filter = q({"field": "nope", "op": "eq", "value": 1})
    code = spec_error(*raw(stack, "GET", f"/v1/streams/{feed}/messages?limit={limit}&filter={bad_filter}"))
    assert code == "LIMIT_EXCEEDED"
    code = spec_error(*raw(stack, "GET", f"/v1/streams/{feed}/messages?limit=10&filter={bad_filter}"))
    assert code == "INVALID_FILTER"


# --- item 6: the spec's field names, old names kept as aliases --------------------------------

def test_reads_answer_the_spec_field_names_and_keep_the_old_ones_for_a_release(stack: ServiceSet, feed: str) -> None:
    _, head = http("GET", f"{stack.api_url}/v1/streams/{feed}/head")
    assert (head["head_sequence"], head["floor_sequence"]) == (2, 1)
    assert (head["head"], head["floor"]) == (2, 1)
    _, page = http("GET", f"{stack.api_url}/v1/streams/{feed}/messages?cursor=0")
    assert (page["head_sequence"], page["floor_sequence"], page["head"], page["floor"]) == (2, 1, 2, 1)
    _, key = http("GET", f"{stack.api_url}/v1/streams/{feed}/keys/at/2")
    assert key["publisher_key"] == key["public_key_hex"] == head["publisher_key_hex"]
    assert (key["signing_key_id"], key["effective_sequence"]) == (1, 1)


# --- item 17: one bound for every sequence-like number ------------------------------------------

@pytest.mark.parametrize("number", ["9223372036854775808", str(10**30), "-1", "1e3"])
def test_key_sequence_and_cursor_are_bounded_alike(stack: ServiceSet, feed: str, number: str) -> None:
    for path in (f"/v1/streams/{feed}/keys/at/{number}", f"/v1/streams/{feed}/messages?cursor={number}",
                 f"/v1/streams/{feed}/messages?min_head={number}", f"/v1/streams/{feed}/keys?from={number}"):
        assert spec_error(*raw(stack, "GET", path)) == "INVALID_ARGUMENT", path
    assert http("GET", f"{stack.api_url}/v1/streams/{feed}/keys/at/9223372036854775807")[0] == 200


# --- item 12: bounded long polls ----------------------------------------------------------------

@pytest.mark.parametrize("wait", [str(10**21), str(10**400), "30001", "soon"])
def test_a_long_poll_longer_than_30_seconds_is_refused(stack: ServiceSet, feed: str, wait: str) -> None:
    path = f"/v1/streams/{feed}/messages?cursor=0&min_head=99&wait_ms={wait}"
    assert spec_error(*raw(stack, "GET", path, timeout=20)) == "INVALID_ARGUMENT"


def _open_poll(stack: ServiceSet, feed: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", stack.api_port), timeout=30)
    sock.sendall(f"GET /v1/streams/{feed}/messages?cursor=2&min_head=99&wait_ms=30000 HTTP/1.1\r\n"
                 f"Host: 127.0.0.1\r\n\r\n".encode())
    return sock


def _long_polls(stack: ServiceSet) -> int:
    return int(http("GET", f"{stack.api_url}/v1/health")[1]["long_polls"])


def test_abandoned_long_polls_are_cancelled_and_leave_no_waiter(stack: ServiceSet, feed: str) -> None:
    kept = _open_poll(stack, feed)  # opened first: it would expire first if nothing cancelled the rest
    wait_for(lambda: _long_polls(stack) == 1, what="the kept poll to wait")
    abandoned = [_open_poll(stack, feed) for _ in range(200)]
    wait_for(lambda: _long_polls(stack) == 201, what="200 more polls to wait")
    for sock in abandoned:
        sock.close()
    # Every abandoned poll is gone while the older kept one still waits: they were cancelled when
    # their clients left, not answered by their 30 s clock.
    wait_for(lambda: _long_polls(stack) == 1, timeout_s=60, what="the abandoned polls to be cancelled")
    kept.close()
    wait_for(lambda: _long_polls(stack) == 0, what="the last poll to be cancelled")


# --- item 14: every error is spec JSON ----------------------------------------------------------

def test_every_refusal_is_a_spec_json_error(stack: ServiceSet, feed: str) -> None:
    deep_body = ('{"command":' + "[" * 100_000 + "]" * 100_000 + "}").encode()
    deep_filter = q("[" * 1_200 + "]" * 1_200)  # nested 1,200 deep, and still under the line limit
    cases: list[tuple[str, str, bytes | None, str]] = [
        ("POST", "/v1/commands", deep_body, "INVALID_ARGUMENT"),
        ("POST", "/v1/commands", b'{"command": ' + b'{"a":' * 5_000 + b"1" + b"}" * 5_001, "INVALID_ARGUMENT"),
        ("GET", f"/v1/streams/{feed}/messages?filter={deep_filter}", None, "INVALID_FILTER"),
        ("POST", "/v1/commands", b'{"command": {}, "timeout_s": "soon"}', "INVALID_ARGUMENT"),
        ("GET", f"/v1/streams/{feed}/messages?min_head=3&wait_ms={10**400}", None, "INVALID_ARGUMENT"),
        ("POST", "/v1/commands", b"x" * 300_000, "PAYLOAD_TOO_LARGE"),
        ("POST", "/v1/commands", b"not json", "INVALID_ARGUMENT"),
        ("GET", "/v1/" + "a" * 9_000, None, "INVALID_ARGUMENT"),
        ("GET", "/v1/no/such/route", None, "INVALID_ARGUMENT"),
        ("DELETE", "/v1/commands", None, "INVALID_ARGUMENT"),
        ("GET", f"/v1/streams/{feed}/subscribers?active_only=perhaps", None, "INVALID_ARGUMENT"),
        ("GET", "/v1/feeds/0", None, "INVALID_ARGUMENT"),
        ("GET", "/v1/streams/nope/head", None, "STREAM_NOT_FOUND"),
    ]
    for method, path, body, expected in cases:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        assert spec_error(*raw(stack, method, path, body, headers)) == expected, (method, path[:80])
    # A header over the limit, too: refused by the HTTP parser, before any handler runs.
    status, ctype, body_ = raw(stack, "GET", "/v1/health", headers={"X-Big": "b" * 9_000})
    assert spec_error(status, ctype, body_) == "INVALID_ARGUMENT"


# --- item 15: command timeouts ------------------------------------------------------------------

@pytest.mark.parametrize("timeout", [0, -1, 121, "30"])
def test_a_timeout_outside_its_range_is_refused_before_the_command_is_sent(stack: ServiceSet,
                                                                           timeout: object) -> None:
    key, sid = nacl.signing.SigningKey.generate(), f"t-{uuid.uuid4().hex[:10]}"
    cmd = sign_command(key, "create_stream", sid, 1, {"publisher_key_hex": "11" * 32}).to_dict()
    status, body = http("POST", f"{stack.api_url}/v1/commands", {"command": cmd, "timeout_s": timeout})
    assert (status, body["error"]["code"]) == (400, "INVALID_ARGUMENT"), body
    # The same signed command, sent again with a valid timeout, is new to the worker: nothing was applied.
    status, body = http("POST", f"{stack.api_url}/v1/commands", {"command": cmd, "timeout_s": 30})
    assert status == 200, body
    assert "duplicate" not in body["result"], body


def test_a_reply_nobody_waits_for_is_dropped_quietly(stack: ServiceSet, caplog: pytest.LogCaptureFixture) -> None:
    client = CommandClient(stack.bootstrap, prefix=stack.prefix)
    try:
        key = nacl.signing.SigningKey.generate()
        sids = [f"late-{uuid.uuid4().hex[:10]}" for _ in range(5)]
        with caplog.at_level(logging.DEBUG):
            for sid in sids:
                future = client.submit(sign_command(key, "create_stream", sid, 1, {"publisher_key_hex": "22" * 32}))
                client.flush()
                future.cancel()  # the caller gave up, as the API does when timeout_s runs out
            for sid in sids:  # the commands were applied; their replies arrived late
                wait_for(lambda sid=sid: http("GET", f"{stack.api_url}/v1/streams/{sid}/head")[0] == 200,
                         what="the late command to be applied")
            wait_for(lambda: not client._pending, what="the late replies to be read")
        noisy = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert noisy == [], [r.getMessage() for r in noisy]
    finally:
        client.close()


# --- item 16: health ----------------------------------------------------------------------------

def test_health_reports_the_broker_its_events_partitions_and_quarantine(stack: ServiceSet) -> None:
    status, health = http("GET", f"{stack.api_url}/v1/health")
    assert status == 200
    assert health["ready"] is True
    assert health["broker"]["reachable"] is True
    assert health["partitions"] == [0, 1, 2]  # the events topic's, this worker owns them all
    assert health["quarantined"] == {"count": 0, "recent": []}


# --- item 13: loopback by default ---------------------------------------------------------------

def _listening_addresses(port: int) -> set[str]:
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, port_hex = local.rsplit(":", 1)
            if state == "0A" and int(port_hex, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


def _non_loopback_addresses() -> list[str]:
    addresses = set()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe, contextlib.suppress(OSError):
        probe.connect(("192.0.2.1", 9))  # no packet is sent; this only picks the outgoing interface
        addresses.add(probe.getsockname()[0])
    with contextlib.suppress(OSError):
        addresses.update(str(info[4][0]) for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET))
    return sorted(a for a in addresses if not a.startswith("127."))


def test_the_api_listens_on_loopback_only_by_default(stack: ServiceSet) -> None:
    assert _listening_addresses(stack.api_port) == {"0100007F"}  # 127.0.0.1, and nothing else
    for address in _non_loopback_addresses():
        with socket.socket() as sock:
            sock.settimeout(5)
            assert sock.connect_ex((address, stack.api_port)) != 0, f"the API answers on {address}"


def test_the_api_still_serves_after_the_hostile_requests(stack: ServiceSet, feed: str) -> None:
    assert http("GET", f"{stack.api_url}/v1/health")[1]["ready"] is True
    assert http("GET", f"{stack.api_url}/v1/streams/{feed}/head")[1]["head_sequence"] == 2
