"""One real Kafka broker per test session.

Order of preference:
1. ``WATCHTOWER_TEST_BOOTSTRAP``: an existing cluster (e.g. the compose one);
2. testcontainers' Kafka module, when a Docker engine answers a ping;
3. the embedded KRaft broker from :mod:`watchtower.local`, on free ports in a temp dir.

With ``WATCHTOWER_TEST_SECURE=1`` the embedded broker runs in secure mode (SASL/SCRAM-SHA-512,
the standard authorizer, ACLs): the test process then connects as the admin principal (through
``WATCHTOWER_KAFKA_CREDENTIALS``, which every client built with ``kafka_config`` reads), stacks get
the service principal (:func:`service_credentials`), and every other embedded cluster a test starts
(:func:`embedded_spec`) is secure too and shares the session's credentials, so the same settings
reach it.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from watchtower.local.broker import LocalKafka
from watchtower.local.config import ADMIN_PRINCIPAL, ClusterSpec
from watchtower.local.security import SERVICE_PRINCIPAL, credentials_file
from watchtower.topics.connection import ENV_CREDENTIALS, ENV_PRINCIPAL

SECURE = os.environ.get("WATCHTOWER_TEST_SECURE", "") == "1"
# The session's secure cluster, once started: its credentials are every secure test cluster's.
_SESSION: dict[str, LocalKafka] = {}


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


def embedded_spec(data_dir: Path, nodes: int = 1, *, secure: bool | None = None) -> ClusterSpec:
    """A spec on free ports; secure in a secure test run (``secure`` None), with the session's credentials."""
    port = free_port_block(nodes)
    cport = free_port_block(nodes)
    while cport in range(port, port + nodes):
        cport = free_port_block(nodes)
    secure = SECURE if secure is None else secure
    spec = ClusterSpec(data_dir, port, cport, nodes, heap_mb=768 if nodes == 1 else 512, secure=secure)
    session = _SESSION.get("kafka")
    if secure and session is not None and session.spec.data_dir != data_dir:
        shutil.copytree(session.spec.credentials_dir, spec.credentials_dir)
    return spec


def secure_cluster(bootstrap: str) -> LocalKafka | None:
    """The session's secure cluster when ``bootstrap`` is its address (else None: plaintext)."""
    session = _SESSION.get("kafka")
    return session if session is not None and session.spec.bootstrap == bootstrap else None


def service_credentials(bootstrap: str) -> Path | None:
    """The service principal's credentials file for the session's secure broker (None: plaintext)."""
    session = secure_cluster(bootstrap)
    return credentials_file(session.spec, SERVICE_PRINCIPAL) if session is not None else None


def grant(bootstrap: str, prefix: str) -> None:
    """Create the ACLs of deployment ``prefix`` when ``bootstrap`` is the session's secure broker."""
    session = secure_cluster(bootstrap)
    if session is not None:
        session.grant(prefix)


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
    saved = {k: os.environ.get(k) for k in (ENV_CREDENTIALS, ENV_PRINCIPAL)}
    if lk.spec.secure:
        _SESSION["kafka"] = lk
        os.environ[ENV_CREDENTIALS] = str(credentials_file(lk.spec, ADMIN_PRINCIPAL))
        os.environ.pop(ENV_PRINCIPAL, None)
    try:
        yield lk.spec.bootstrap
    finally:
        _SESSION.pop("kafka", None)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        lk.down()
