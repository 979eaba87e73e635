"""Start, stop and inspect the embedded Apache Kafka (KRaft) cluster.

The cluster runs the official Apache Kafka jars (fetched once from Maven Central by
:mod:`watchtower.local.jars`) as one JVM per node. Every operation is idempotent:
``up`` on a running cluster is a no-op, ``down`` on a stopped one is a no-op, and stale
pid files left by a crash or ``kill -9`` are detected and cleared.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from watchtower.local.config import ADMIN_PRINCIPAL, BROKER_SESSION_TIMEOUT_MS, HOST, ClusterSpec, NodeSpec
from watchtower.local.data_dir import claim_data_dir, storage_format_argv
from watchtower.local.errors import LocalStackError
from watchtower.local.jars import KAFKA_BUNDLE, KAFKA_VERSION, classpath, jolokia_agent_jar, require_tool
from watchtower.local.ports import port_bindable
from watchtower.local.processes import log_tail, pid_alive, port_open, private_dir, wait_gone, write_private
from watchtower.local.security import (
    admin_settings,
    ensure_acls,
    ensure_credentials,
    ensure_scram_users,
    scram_format_args,
)
from watchtower.topics.catalogue import topic_prefix
from watchtower.topics.cluster_admin import registration_problem
from watchtower.topics.connection import Principal

#: The broker's JVM and `kafka-storage format` run with it: what they create is owner-only.
PRIVATE_UMASK = 0o077
READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class NodeStatus:
    """What is known about one node right now."""

    node_id: int
    port: int
    pid: int | None
    alive: bool


class LocalKafka:
    """Supervisor for a local KRaft cluster described by a :class:`ClusterSpec`."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self._killed_at: dict[int, float] = {}  # node id -> monotonic time of its kill_node SIGKILL

    # ---------------------------------------------------------------- public API
    def up(self, *, timeout: float = READY_TIMEOUT_S, prefix: str | None = None) -> float:
        """Start every node that is not running and wait until the cluster answers metadata.

        A secure cluster then gets the ACLs of deployment ``prefix`` (default: the configured topic
        prefix), also when it was already running. Returns the seconds spent waiting (0.0 when
        everything was already running).
        """
        waited = self._up(timeout)
        if self.spec.secure:
            self.grant(prefix if prefix is not None else topic_prefix())
        return waited

    def grant(self, prefix: str) -> None:
        """Create the ACLs of deployment ``prefix`` on this (secure, running) cluster; idempotent."""
        if not self.spec.secure:
            raise LocalStackError("ACLs need a secure cluster; start it with --secure")
        # A principal a newer release added is drawn now, and its SCRAM credential created.
        principals = self.principals(create=True)
        ensure_scram_users(self.spec.bootstrap, principals)
        ensure_acls(self.spec.bootstrap, principals, prefix)

    def principals(self, *, create: bool = False) -> dict[str, Principal]:
        """The principals of a secure cluster (``create``: drawn and written when there are none yet)."""
        return ensure_credentials(self.spec, create=create)

    def client_settings(self) -> dict[str, str]:
        """Security settings this supervisor uses for its own clients (the admin's when secure)."""
        return admin_settings(self.principals()) if self.spec.secure else {}

    def _up(self, timeout: float) -> float:
        require_tool("java", "to run the embedded Kafka broker")
        cp = classpath(KAFKA_BUNDLE)
        agent = jolokia_agent_jar() if self.spec.metrics_port is not None else None
        # The data directory holds every topic's segments (`events`, `keymgr.state`, deliveries):
        # ACLs guard the port, file modes the disk. Owner-only, also for a directory made earlier.
        private_dir(self.spec.data_dir)
        with self._lock():
            cluster_id = claim_data_dir(self.spec)
            to_start = [n for n in self.spec.all_node_specs if not self._alive(n)]
            if not to_start:
                return 0.0
            for node in to_start:
                self._clear_stale_pid(node)
                self._check_ports_free(node)
            started = time.monotonic()
            self._wait_out_killed_sessions(to_start)
            for node in to_start:
                self._prepare_node(node, cluster_id, cp)
                self._launch(node, cp, agent)
            self._wait_ready(to_start, timeout)
            return time.monotonic() - started

    def _wait_out_killed_sessions(self, nodes: list[NodeSpec]) -> None:
        """Before restarting a broker this supervisor killed, while its dedicated controller runs,
        wait until the controller has fenced the killed incarnation (its session expired).

        Started earlier, the broker would load its old registration, take leadership and load
        transaction coordinators, and then lose every transaction marker still queued when the
        controller fences the old incarnation under it (a hanging transaction: docs/operations.md).
        """
        controllers_up = any(self._alive(c) for c in self.spec.controller_specs)
        if not controllers_up:
            return
        for node in nodes:
            killed = self._killed_at.pop(node.node_id, None)
            if killed is not None and node.is_broker:
                remaining = killed + BROKER_SESSION_TIMEOUT_MS / 1000 + 1.0 - time.monotonic()
                if remaining > 0:
                    time.sleep(remaining)

    def down(self, *, timeout: float = STOP_TIMEOUT_S) -> None:
        """Stop every node cleanly (SIGTERM, then SIGKILL after ``timeout``) and clear pid files:
        the brokers first, then any dedicated controller (a broker's clean stop needs it)."""
        if not self.spec.data_dir.exists():
            return
        with self._lock():
            self._stop(self.spec.node_specs, timeout)
            self._stop(self.spec.controller_specs, timeout)
            for node in self.spec.all_node_specs:
                node.pid_file.unlink(missing_ok=True)

    def _stop(self, specs: list[NodeSpec], timeout: float) -> None:
        nodes = [n for n in specs if self._alive(n)]
        for node in nodes:
            pid = self._read_pid(node)
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for node in nodes:
            pid = self._read_pid(node)
            while pid is not None and pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if pid is not None and pid_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                wait_gone(pid, 10.0)

    def kill_node(self, node_id: int, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to one node (fault injection for tests); waits for it to die on SIGKILL."""
        node = next((n for n in self.spec.all_node_specs if n.node_id == node_id), None)
        pid = None if node is None else self._read_pid(node)
        if node is None or pid is None or not self._alive(node):
            raise LocalStackError(f"node {node_id} is not running; start it with `watchtower local up`")
        os.kill(pid, sig)
        if sig == signal.SIGKILL:
            wait_gone(pid, 10.0)
            self._killed_at[node_id] = time.monotonic()

    def status(self) -> dict[str, Any]:
        """A JSON-ready report: state, bootstrap address, data directory and per-node detail."""
        nodes = [
            NodeStatus(n.node_id, n.port, self._read_pid(n), self._alive(n)) for n in self.spec.node_specs
        ]
        alive = sum(1 for n in nodes if n.alive)
        state = "running" if alive == len(nodes) else ("stopped" if alive == 0 else "degraded")
        return {
            "state": state,
            "bootstrap": self.spec.bootstrap,
            "data_dir": str(self.spec.data_dir),
            "kafka_version": KAFKA_VERSION,
            "nodes": [n.__dict__ for n in nodes],
        }

    def reachability(self, timeout: float = 3.0) -> str | None:
        """``None`` when the cluster answers a metadata request within ``timeout``, else why not.

        A live process is not enough: a broker can be up yet not serve (still starting, hung, or
        its controller quorum lost), and clients only care whether it answers.
        """
        return _metadata_problem(self.spec.bootstrap, len(self.spec.node_specs), timeout, self._safe_settings())

    def wait_reachable(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Block until the cluster answers metadata; raise :class:`LocalStackError` after ``timeout``."""
        _wait_metadata(self.spec.bootstrap, len(self.spec.node_specs), time.monotonic() + timeout,
                       self.client_settings())

    def _safe_settings(self) -> dict[str, str]:
        try:
            return self.client_settings()
        except LocalStackError:
            return {}  # unreadable credentials: the metadata check then reports why it cannot connect

    def metrics_url(self, node_id: int = 1) -> str | None:
        """The Jolokia base URL of a node started with ``ClusterSpec.metrics_port`` (else None)."""
        return self.spec.metrics_url(self.spec.node_specs[node_id - 1])

    def log_path(self, node_id: int = 1) -> Path:
        """Path of a node's broker log."""
        return self.spec.node_specs[node_id - 1].log_file


    # ---------------------------------------------------------------- processes
    def _prepare_node(self, node: NodeSpec, cluster_id: str, cp: str) -> None:
        private_dir(node.directory)
        if node.log_dirs.exists():  # made by an earlier release with the default modes
            private_dir(node.log_dirs)
        principals = self.principals(create=True) if self.spec.secure else {}
        admin_password = principals[ADMIN_PRINCIPAL].password if principals else None
        # The properties of a secure node hold the admin password: owner-only, like the credentials.
        write_private(node.properties_file, self.spec.server_properties(node, admin_password))
        write_private(node.log4j_file, self.spec.log4j_properties(node))
        if (node.log_dirs / "meta.properties").exists():
            return
        argv = storage_format_argv(cp, node, cluster_id) + scram_format_args(principals)
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, umask=PRIVATE_UMASK)
        if proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise LocalStackError(
                f"formatting storage for node {node.node_id} failed ({detail[0][:200]}); "
                f"remove {node.directory} and run `watchtower local up` again"
            )

    def _launch(self, node: NodeSpec, cp: str, agent: Path | None = None) -> None:
        heap = f"-Xmx{self.spec.heap_mb}m"
        cmd = [
            "java", heap, f"-Xms{min(256, self.spec.heap_mb)}m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Xlog:gc:file={node.gc_log_file}:time,uptime:filecount=2,filesize=10M",
            *metrics_agent_args(self.spec, node, agent),
            f"-Dlog4j2.configurationFile={node.log4j_file}", "-cp", cp,
            "kafka.Kafka", str(node.properties_file),
        ]
        out = os.fdopen(os.open(node.directory / "broker.out", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
        # Every file and directory the broker makes (segments, checkpoints, its logs) is owner-only.
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=node.directory, umask=PRIVATE_UMASK)
        out.close()
        write_private(node.pid_file, str(proc.pid))

    def _wait_ready(self, nodes: list[NodeSpec], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for node in nodes:
            port = node.port if node.is_broker else node.controller_port
            while not port_open(port):
                self._fail_if_dead(node)
                if time.monotonic() > deadline:
                    raise LocalStackError(
                        f"node {node.node_id} did not open port {port} within {timeout:.0f}s; "
                        f"see {node.log_file}"
                    )
                time.sleep(0.1)
        _wait_metadata(self.spec.bootstrap, len(self.spec.node_specs), deadline, self.client_settings())

    def _fail_if_dead(self, node: NodeSpec) -> None:
        pid = self._read_pid(node)
        if pid is not None and not pid_alive(pid):
            tail = log_tail(node.directory / "broker.out", 3) or log_tail(node.log_file, 3)
            raise LocalStackError(
                f"node {node.node_id} exited during start-up ({tail[-200:] or 'no output'}); "
                f"see {node.log_file}"
            )

    def _check_ports_free(self, node: NodeSpec, grace_s: float = 5.0) -> None:
        # A node that was just SIGKILLed can hold its listener for a moment while the kernel
        # tears the process down, so a busy port is re-tried for a short grace period.
        deadline = time.monotonic() + grace_s
        metrics = () if self.spec.metrics_port is None else (self.spec.metrics_port + node.node_id - 1,)
        client = (node.port,) if node.is_broker else ()
        for port in (*client, node.controller_port, *metrics):
            while not port_bindable(HOST, port):
                if time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
                raise LocalStackError(
                    f"port {port} on {HOST} is already in use; stop what holds it or pass "
                    "another --port / --controller-port"
                )

    def _read_pid(self, node: NodeSpec) -> int | None:
        try:
            return int(node.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def _alive(self, node: NodeSpec) -> bool:
        """True when the pid file names a live JVM running *this* node's config."""
        pid = self._read_pid(node)
        if pid is None or not pid_alive(pid):
            return False
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        return b"kafka.Kafka" in cmdline and str(node.properties_file).encode() in cmdline

    def _clear_stale_pid(self, node: NodeSpec) -> None:
        if node.pid_file.exists() and not self._alive(node):
            node.pid_file.unlink()

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        """Serialise up/down on one data directory across processes."""
        fd = os.open(self.spec.data_dir / ".lock", os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)


def metrics_agent_args(spec: ClusterSpec, node: NodeSpec, agent: Path | None) -> list[str]:
    """The JVM option attaching the Jolokia agent to ``node`` (none unless ``spec.metrics_port``).

    The agent listens on loopback only and serves reads of the broker's MBeans (e.g. the request
    counters ``kafka.network:type=RequestMetrics,name=RequestsPerSec,request=*``).
    """
    if spec.metrics_port is None:
        return []
    if agent is None:
        raise LocalStackError("a broker with metrics_port needs the Jolokia agent jar")
    port = spec.metrics_port + node.node_id - 1
    return [f"-javaagent:{agent}=port={port},host={HOST},discoveryEnabled=false"]


def _metadata_problem(bootstrap: str, brokers: int, timeout: float,
                      security: dict[str, str] | None = None) -> str | None:
    return registration_problem({"bootstrap.servers": bootstrap, **(security or {})}, brokers, timeout)


def _wait_metadata(bootstrap: str, brokers: int, deadline: float, security: dict[str, str] | None = None) -> None:
    last: str | None = "no answer"
    while time.monotonic() < deadline:
        last = _metadata_problem(bootstrap, brokers, 2.0, security)
        if last is None:
            return
        time.sleep(0.2)
    raise LocalStackError(f"the cluster at {bootstrap} did not answer metadata in time ({last}); "
                          "see `watchtower local logs`")
