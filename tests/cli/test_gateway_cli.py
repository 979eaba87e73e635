"""`watchtower gateway`: the command gateway as a process of its own, started from the CLI."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from api_calls import http, wait_for
from kafka_fixture import free_ports

from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import catalogue

pytestmark = pytest.mark.integration


def test_watchtower_gateway_serves_commands_and_stops_cleanly_on_sigterm(kafka_bootstrap: str,
                                                                       tmp_path: Path) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_bootstrap, catalogue(prefix, partitions=3))
    port = free_ports(1)[0]
    url = f"http://127.0.0.1:{port}"
    with (tmp_path / "gateway.log").open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "watchtower.cli", "gateway", "--bootstrap", kafka_bootstrap,
                                 "--port", str(port), "--prefix", prefix], stdout=log, stderr=subprocess.STDOUT)
    try:
        def ready() -> bool:
            assert proc.poll() is None, (tmp_path / "gateway.log").read_text()
            try:
                return http("GET", f"{url}/v1/health")[1].get("ready") is True
            except OSError:
                return False

        wait_for(ready, what="the gateway's health says ready")
        status, body = http("POST", f"{url}/v1/commands", {"command": {"method": "publish"}})
        assert (status, body["error"]["code"]) == (400, "INVALID_ARGUMENT")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
