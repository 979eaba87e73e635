"""Where a client sends its commands (docs/local-stack.md, "The command gateway").

`watchtower up` runs the command gateway in a process of its own and records its URL as
``commands_api`` beside the API's ``api`` in ``$WATCHTOWER_HOME/config.json``. A client of that API
sends commands there and reads from the API; a client of any other API never uses it; an explicit
gateway (argument or ``$WATCHTOWER_COMMANDS_API``) wins; and a recorded gateway that does not
answer sends the command to the API, which takes commands too. Real HTTP servers on loopback.
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from watchtower.client.http import ApiClient, ApiUnavailableError

COMMAND = {"command": {"type": "Noop"}, "timeout_s": 1}


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every request with ``{"result": {"served_by": NAME}}`` and records (NAME, method, path)."""

    calls: ClassVar[list[tuple[str, str, str]]] = []

    def _answer(self) -> None:
        name = self.server.name  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.calls.append((name, self.command, self.path))
        body = json.dumps({"result": {"served_by": name}, "ok": True}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def log_message(self, *args: Any) -> None:
        pass


def _serve(name: str) -> tuple[http.server.ThreadingHTTPServer, str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    httpd.name = name  # type: ignore[attr-defined]
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}"


@pytest.fixture
def servers() -> Iterator[dict[str, str]]:
    """Two live servers, ``api`` and ``gateway``, by URL."""
    _Recorder.calls.clear()
    started = {name: _serve(name) for name in ("api", "gateway")}
    try:
        yield {name: url for name, (_httpd, url) in started.items()}
    finally:
        for httpd, _url in started.values():
            httpd.shutdown()
            httpd.server_close()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WATCHTOWER_HOME", str(tmp_path))
    monkeypatch.delenv("WATCHTOWER_API", raising=False)
    monkeypatch.delenv("WATCHTOWER_COMMANDS_API", raising=False)
    return tmp_path


def _record(home: Path, api: str, gateway: str) -> None:
    """What `watchtower up` writes (a trailing slash, as a hand-edited file may have)."""
    (home / "config.json").write_text(json.dumps({"api": api + "/", "commands_api": gateway + "/"}))


def _command(client: ApiClient) -> str:
    """Send one command; which server took it."""
    return client.request("POST", "/v1/commands", body=COMMAND, commands=True)["result"]["served_by"]


def _refused_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def test_a_client_of_the_recorded_api_sends_commands_to_its_gateway_and_reads_from_the_api(
        home: Path, servers: dict[str, str]) -> None:
    _record(home, servers["api"], servers["gateway"])
    for client in (ApiClient(), ApiClient(servers["api"])):  # the recorded API, found or named
        assert client.commands_url == servers["gateway"]
        assert _command(client) == "gateway"
        client.health()
    assert _Recorder.calls == [("gateway", "POST", "/v1/commands"), ("api", "GET", "/v1/health")] * 2


def test_a_client_of_another_api_never_uses_the_recorded_gateway(home: Path, servers: dict[str, str]) -> None:
    _record(home, _refused_url(), servers["gateway"])  # this machine's stack, not the API the client names
    client = ApiClient(servers["api"])
    assert client.commands_url == servers["api"]
    assert _command(client) == "api"
    assert [name for name, _m, _p in _Recorder.calls] == ["api"]


def test_an_explicit_gateway_wins_over_the_recorded_one(home: Path, servers: dict[str, str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    _record(home, servers["api"], _refused_url())
    assert _command(ApiClient(servers["api"], commands_url=servers["gateway"])) == "gateway"
    monkeypatch.setenv("WATCHTOWER_COMMANDS_API", servers["gateway"])
    assert _command(ApiClient(servers["api"])) == "gateway"


def test_a_recorded_gateway_that_does_not_answer_hands_the_command_to_the_api(
        home: Path, servers: dict[str, str]) -> None:
    _record(home, servers["api"], _refused_url())
    assert _command(ApiClient(servers["api"], timeout=5)) == "api"
    assert _Recorder.calls == [("api", "POST", "/v1/commands")]


def test_an_explicit_gateway_that_does_not_answer_is_an_error_naming_it(home: Path, servers: dict[str, str]) -> None:
    gateway = _refused_url()
    _record(home, servers["api"], servers["gateway"])
    with pytest.raises(ApiUnavailableError) as info:
        _command(ApiClient(servers["api"], commands_url=gateway, timeout=5))
    assert f"no Watchtower API at {gateway}" in info.value.message
    assert _Recorder.calls == [], "an explicit gateway is never bypassed"
