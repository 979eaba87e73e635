"""One real Kafka broker per test session.

Order of preference:
1. ``WATCHTOWER_TEST_BOOTSTRAP``: an existing cluster (e.g. the compose one);
2. testcontainers' Kafka module, when a Docker engine answers a ping;
3. the embedded KRaft broker from :mod:`watchtower.local`, on free ports in a temp dir.

With ``WATCHTOWER_TEST_SECURE=1`` every embedded cluster (:func:`embedded_spec`: the session's
and any a test starts) runs in secure mode (SASL/SCRAM-SHA-512, the standard authorizer, ACLs),
formatted with one set of credentials drawn per test process. The test process connects as the
admin principal (``WATCHTOWER_KAFKA_CREDENTIALS``, which every client built with ``kafka_config``
reads), and stacks get their prefix's ACLs (:func:`grant`) and the service principal
(:func:`service_credentials`).
"""

from __future__ import annotations

import atexit
import os
import random
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from watchtower.local.broker import LocalKafka
from watchtower.local.config import ADMIN_PRINCIPAL, ClusterSpec
from watchtower.local.security import ALL_FILE, SERVICE_PRINCIPAL, ensure_acls, ensure_credentials
from watchtower.topics.connection import ENV_CREDENTIALS, ENV_PRINCIPAL, read_credentials

SECURE = os.environ.get("WATCHTOWER_TEST_SECURE", "") == "1"

# Failure detection in the suite: every group member the tests start (workers, projections, side
# workers) uses this session timeout, so a kill -9 hands partitions over in seconds. Embedded
# brokers accept it (their group.min.session.timeout.ms is lowered, `ClusterSpec`); an external
# cluster keeps Kafka's 6 s floor.
TEST_MIN_SESSION_TIMEOUT_MS = ClusterSpec(Path("/unused")).min_session_timeout_ms or 6_000
TEST_SESSION_TIMEOUT_MS = 6_000 if os.environ.get("WATCHTOWER_TEST_BOOTSTRAP") else 4_000
os.environ.setdefault("WATCHTOWER_SESSION_TIMEOUT_MS", str(TEST_SESSION_TIMEOUT_MS))


def _seed_credentials() -> Path:
    """The credentials every secure test cluster is formatted with (drawn once per test process).

    Shared, so the settings this process connects with reach every secure cluster a test starts,
    whichever starts first: the session's broker or a test's own.
    """
    seed = Path(tempfile.mkdtemp(prefix="wt-test-credentials-"))
    atexit.register(shutil.rmtree, seed, True)
    ensure_credentials(ClusterSpec(seed, secure=True), create=True)
    return ClusterSpec(seed, secure=True).credentials_dir


SEED = _seed_credentials() if SECURE else None
if SEED is not None:
    # The test process itself connects as the admin (every client built with `kafka_config`).
    os.environ[ENV_CREDENTIALS] = str(SEED / f"{ADMIN_PRINCIPAL}.json")
    os.environ.pop(ENV_PRINCIPAL, None)


def service_credentials() -> Path | None:
    """The service principal's credentials file in a secure run (None: plaintext)."""
    return SEED / f"{SERVICE_PRINCIPAL}.json" if SEED is not None else None


def grant(bootstrap: str, prefix: str) -> None:
    """Create the ACLs of deployment ``prefix`` in a secure run (nothing to do in plaintext)."""
    if SEED is not None:
        ensure_acls(bootstrap, read_credentials(SEED / ALL_FILE), prefix)


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


def embedded_spec(data_dir: Path, nodes: int = 1, *, secure: bool | None = None,
                  dedicated_controller: bool = False) -> ClusterSpec:
    """A spec on free ports; secure in a secure test run (``secure`` None), with the session's credentials.
    With ``dedicated_controller`` the controller runs in a JVM of its own (plaintext only)."""
    controllers = 1 if dedicated_controller else 0
    port = free_port_block(nodes + controllers)
    cport = free_port_block(nodes + controllers)
    while cport in range(port, port + nodes + controllers):
        cport = free_port_block(nodes + controllers)
    secure = (SECURE if secure is None else secure) and not dedicated_controller
    spec = ClusterSpec(data_dir, port, cport, nodes, heap_mb=768 if nodes == 1 else 512, secure=secure,
                       dedicated_controller=dedicated_controller)
    if secure and SEED is not None and not spec.credentials_dir.exists():
        shutil.copytree(SEED, spec.credentials_dir)
    return spec


@contextmanager
def session_broker(tmp: Path) -> Iterator[str]:
    """Yield a bootstrap address for the whole test session."""
    existing = os.environ.get("WATCHTOWER_TEST_BOOTSTRAP")
    if existing:
        yield existing
        return
    if docker_answers():
        from testcontainers.kafka import KafkaContainer

        container = KafkaContainer("apache/kafka:4.3.1").with_kraft().with_env(
            "KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS", str(TEST_MIN_SESSION_TIMEOUT_MS))
        with container as kafka:
            yield kafka.get_bootstrap_server()
        return
    lk = LocalKafka(embedded_spec(tmp / "session-kafka"))
    lk.up()
    try:
        yield lk.spec.bootstrap
    finally:
        lk.down()
