"""/v1/health tells the truth about the broker: a worker whose broker died is not ready."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from api_calls import http, wait_for
from kafka_fixture import embedded_spec
from stack_fixture import start_stack

from watchtower.http.broker_probe import BrokerProbe
from watchtower.local.broker import LocalKafka


def test_the_probe_says_unreachable_when_nothing_listens() -> None:
    status = asyncio.run(BrokerProbe("127.0.0.1:1", "wt.events").status())
    assert status["reachable"] is False
    assert status["error"]


@pytest.mark.integration
def test_health_is_not_ready_once_the_broker_is_killed(tmp_path: Path) -> None:
    # Its own broker: killing the session's would take every other test down with it.
    kafka = LocalKafka(embedded_spec(tmp_path / "kafka"))
    kafka.up()
    try:
        with start_stack(kafka.spec.bootstrap, tmp_path / "logs", workers=0) as stack:
            health = http("GET", f"{stack.api_url}/v1/health")[1]
            assert (health["ready"], health["broker"]["reachable"]) == (True, True)
            kafka.kill_node(1)
            wait_for(lambda: not http("GET", f"{stack.api_url}/v1/health")[1]["ready"], timeout_s=60,
                     what="health to stop saying ready")
            health = http("GET", f"{stack.api_url}/v1/health")[1]
            assert health["broker"]["reachable"] is False
    finally:
        kafka.down()
