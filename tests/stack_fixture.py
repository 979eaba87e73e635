"""A running Watchtower stack for integration tests: real broker, worker and projection processes.

Every test module gets the module-scoped `stack` fixture (tests/conftest.py re-exports it; a module
that needs another shape of stack defines its own); `start_stack` is the context manager behind it,
for tests that need their own.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from kafka_fixture import free_ports, grant, service_credentials

from watchtower.local.stack import ServiceSet
from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import catalogue


@contextmanager
def start_stack(bootstrap: str, log_dir: Path, *, workers: int = 1, partitions: int = 3,
                projections: int = 1, gateway: bool = False, replay: bool = False,
                delivery: bool = False) -> Iterator[ServiceSet]:
    """Topics under a fresh prefix, `workers` stream-actor workers and `projections` projection/API workers.

    Projection ``pN`` serves on its own free port (``services.urls["projection-pN"]``); the first
    on ``services.api_url``. Each projection also takes commands, unless `gateway`: then the
    projections answer reads only and a command gateway process serves ``POST /v1/commands`` at
    ``services.urls["gateway-g1"]``. With `replay`, a replay worker ``replay-r1`` runs too; with
    `delivery`, a push delivery worker ``delivery-d1`` (only the replay and push tests need them:
    every process a stack starts costs the 2-core CI machine start-up time and CPU). Returns
    once every projection (and the gateway) reports ready.
    On a secure broker the prefix gets its ACLs and the processes connect as the service principal.
    """
    prefix = f"t{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, catalogue(prefix, partitions=partitions))
    grant(bootstrap, prefix)
    ports = free_ports(projections + 1)
    services = ServiceSet(bootstrap, prefix, log_dir, api_port=ports[0], credentials=service_credentials())
    try:
        for i in range(workers):
            services.start_worker(f"w{i + 1}")
        for i, port in enumerate(ports[:projections], start=1):
            services.start_projection(f"p{i}", port=port, gateway=not gateway)
        if gateway:
            services.start_gateway("g1", ports[-1])
        if replay:
            services.start_replay("r1")
        if delivery:
            services.start_delivery("d1")
        services.wait_ready()
        yield services
    finally:
        services.stop()


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceSet]:
    """A module-wide stack; `.api_url`, `.bootstrap`, `.prefix`."""
    with start_stack(kafka_bootstrap, tmp_path_factory.mktemp("stack-logs")) as services:
        yield services
