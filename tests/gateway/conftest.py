"""Fixtures of the SSE and feed-page tests (helpers in sse_stack.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka_fixture import free_ports
from sse_stack import start_sse_gateway
from stack_fixture import start_stack

from watchtower.local.stack import ServiceSet


@pytest.fixture(scope="module")
def sse_stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceSet]:
    """A stack (API with the SSE route and pages) plus the standalone gateway at ``urls["gateway-g1"]``."""
    with start_stack(kafka_bootstrap, tmp_path_factory.mktemp("sse-logs"), replay=False,
                     delivery=True) as services:
        start_sse_gateway(services, free_ports(1)[0])
        yield services
