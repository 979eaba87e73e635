"""One real Kafka broker per test session.

Order of preference:
1. ``WATCHTOWER_TEST_BOOTSTRAP``: an existing cluster (e.g. the compose one);
2. testcontainers' Kafka module, when a Docker engine answers a ping;
3. the embedded KRaft broker from :mod:`watchtower.local`, on free ports in a temp dir.
"""

from __future__ import annotations

import os
import random
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from watchtower.local.broker import LocalKafka
from watchtower.local.config import ClusterSpec


def _ephemeral_range() -> range:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return range(int(low), int(high) + 1)
    except (OSError, ValueError):
        return range(32768, 61000)


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_block(n: int) -> int:
    """A base port such that base..base+n-1 are all free now.

    Ports come from below the kernel's ephemeral range: an ephemeral port can be taken by any
    outgoing connection (a client reconnecting to a killed broker, say), which would make a
    restart on the same port fail with "address in use".
    """
    ephemeral = _ephemeral_range()
    rng = random.Random(os.getpid() ^ int.from_bytes(os.urandom(4), "big"))
    for _ in range(500):
        base = rng.randrange(15000, 32000 - n)
        block = range(base, base + n)
        if any(p in ephemeral for p in block):
            continue
        if all(_bindable(p) for p in block):
            return base
    raise RuntimeError("no block of free ports found")


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports outside the ephemeral range that were free a moment ago."""
    ports: list[int] = []
    while len(ports) < n:
        p = free_port_block(1)
        if p not in ports:
            ports.append(p)
    return ports


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
