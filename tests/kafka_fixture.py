"""One real Kafka broker per test session.

Order of preference:
1. ``WATCHTOWER_TEST_BOOTSTRAP``: an existing cluster (e.g. the compose one);
2. testcontainers' Kafka module, when a Docker engine answers a ping;
3. the embedded KRaft broker from :mod:`watchtower.local`, on free ports in a temp dir.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from watchtower.local.broker import LocalKafka
from watchtower.local.config import ClusterSpec


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports that were free a moment ago (consecutive ones are not promised)."""
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def free_port_block(n: int) -> int:
    """A base port such that base..base+n-1 are all free now."""
    for _ in range(200):
        base = free_ports(1)[0]
        if base + n > 65000:
            continue
        ok = True
        for p in range(base, base + n):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no block of free ports found")


def docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=2).ping()
    except Exception:
        return False
    return True


def embedded_spec(data_dir: Path, nodes: int = 1) -> ClusterSpec:
    port = free_port_block(nodes)
    cport = free_port_block(nodes)
    while cport in range(port, port + nodes):
        cport = free_port_block(nodes)
    return ClusterSpec(data_dir, port, cport, nodes, heap_mb=768 if nodes == 1 else 512)


@contextmanager
def session_broker(tmp: Path) -> Iterator[str]:
    """Yield a bootstrap address for the whole test session."""
    existing = os.environ.get("WATCHTOWER_TEST_BOOTSTRAP")
    if existing:
        yield existing
        return
    if docker_answers():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer("apache/kafka:4.3.1").with_kraft() as kafka:
            yield kafka.get_bootstrap_server()
        return
    lk = LocalKafka(embedded_spec(tmp / "session-kafka"))
    lk.up()
    try:
        yield lk.spec.bootstrap
    finally:
        lk.down()
