"""The record of the stack `watchtower up` runs, and what is true about each of its parts right now.

`watchtower up` writes the record (``<WATCHTOWER_HOME>/stack/services.json``) *before* it starts
anything and updates it as it starts processes, so `watchtower down` always finds what `up` started,
even after an `up` that failed half-way. The record holds the broker's ports, the topic prefix and
partitions, and the planned services (stream-actor workers ``worker-wN`` and projection/API
workers ``projection-pN``, each with its HTTP port) with the pid of their current process.

A process counts as alive only when its pid is alive, is not a zombie, and it is the process that
was started: its start time (``/proc/PID/stat``, recorded with the pid) is the recorded one, so a
pid reused by an unrelated program is not ours. The start time is known from the fork on, while
``/proc/PID/cmdline`` shows the program only once the child's exec is done: a worker started a
moment ago is running although its command line does not name it yet. A record without a start
time (an earlier release's) falls back to the command line, which must name the service's module
and worker id.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from watchtower.local.broker import LocalKafka
from watchtower.local.config import ClusterSpec
from watchtower.local.paths import default_data_dir, watchtower_home
from watchtower.local.ports import port_bindable
from watchtower.local.processes import pid_alive
from watchtower.local.stack import (
    DELIVERY_MODULE,
    GATEWAY_MODULE,
    INGEST_MODULE,
    KEYMGR_MODULE,
    PROJECTION_MODULE,
    REPLAY_MODULE,
    WORKER_MODULE,
    connect_host,
)
from watchtower.topics.catalogue import DEFAULT_PARTITIONS

RECORD_VERSION = 2
# `watchtower status` exit codes (LSB init-script convention, as `watchtower local status`).
EXIT_RUNNING = 0  # every recorded part is alive, and the broker answers metadata
EXIT_DEGRADED = 1  # a part is dead or the broker does not answer: `watchtower up` restarts it
EXIT_NOT_UP = 3  # nothing recorded: never started, or `watchtower down` ran
HEALTH_FIELDS = ("worker", "pid", "state", "partitions", "quarantined", "last_quarantined", "aborted_batches",
                 "lane_yields", "updated_ms",
                 # the ingestion service's: ticks decided and waiting, failures by reason, tick → ack,
                 # and its send window (limit, in flight, held, base round trip)
                 "published", "pending", "failed", "tick_to_ack_ms", "window")


def record_path() -> Path:
    return watchtower_home() / "stack" / "services.json"


@dataclass
class ServiceRecord:
    """One planned service process of the stack."""

    name: str  # "worker-w1", "projection-p2"
    kind: str  # "worker" | "projection" | "gateway" | "keymgr" | "replay" | "delivery" | "ingest" | "runner"
    worker_id: str
    port: int | None = None  # projections: the HTTP API port
    pid: int | None = None  # the current process, if one was started
    started: int | None = None  # its start time, clock ticks after boot (`process_start_ticks`)

    @property
    def module(self) -> str:
        return {"worker": WORKER_MODULE, "keymgr": KEYMGR_MODULE, "replay": REPLAY_MODULE,
                "delivery": DELIVERY_MODULE, "ingest": INGEST_MODULE, "runner": INGEST_MODULE,
                "gateway": GATEWAY_MODULE}.get(
                    self.kind, PROJECTION_MODULE)

    def attach(self, pid: int | None) -> None:
        """Record `pid` (None: no process) as this service's process, with its start time."""
        self.pid = pid
        self.started = None if pid is None else process_start_ticks(pid)

    def alive(self) -> bool:
        return self.pid is not None and process_runs(self.pid, self.module, self.worker_id, self.started)


@dataclass
class StackRecord:
    """Everything `watchtower up` needs to restart the stack and `down` needs to stop it."""

    port: int
    controller_port: int
    prefix: str
    partitions: int
    api_port: int
    bind: str
    log_dir: str
    services: dict[str, ServiceRecord] = field(default_factory=dict)
    # SASL/SCRAM broker with ACLs; the services connect as the service principal (docs/security.md).
    secure: bool = False

    @property
    def broker(self) -> LocalKafka:
        return LocalKafka(ClusterSpec(default_data_dir(self.port), self.port, self.controller_port,
                                      secure=self.secure))

    @property
    def bootstrap(self) -> str:
        return self.broker.spec.bootstrap

    @property
    def api_url(self) -> str:
        return f"http://{connect_host(self.bind)}:{self.api_port}"

    @property
    def workers(self) -> int:
        return sum(1 for s in self.services.values() if s.kind == "worker")

    @property
    def projections(self) -> int:
        return sum(1 for s in self.services.values() if s.kind == "projection")

    def plan(self, workers: int, projections: int) -> None:
        """Plan `workers` stream-actor workers and `projections` projections (no process started).

        The first projection serves on the API port, the others on the next free ports.
        """
        services = [ServiceRecord(f"worker-w{i}", "worker", f"w{i}") for i in range(1, workers + 1)]
        avoid = {self.port, self.controller_port, self.api_port}
        ports = [self.api_port, *next_free_ports(self.api_port + 1, projections - 1, self.bind, avoid)]
        services += [ServiceRecord(f"projection-p{i}", "projection", f"p{i}", port)
                     for i, port in enumerate(ports, start=1)]
        self.services = {s.name: s for s in services}

    def save(self, path: Path | None = None) -> None:
        path = path or record_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        body = {"version": RECORD_VERSION, **asdict(self), "bootstrap": self.bootstrap, "api_url": self.api_url}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(body, indent=2) + "\n")
        tmp.replace(path)  # atomic: a crash mid-write never leaves half a record

    @classmethod
    def load(cls, path: Path | None = None) -> StackRecord | None:
        """The record, or ``None`` when there is none (or it cannot be read: nothing to supervise)."""
        try:
            data = json.loads((path or record_path()).read_text())
            if data.get("version") != RECORD_VERSION:
                return _from_v1(data)
            services = {name: ServiceRecord(**s) for name, s in data["services"].items()}
            return cls(int(data["port"]), int(data["controller_port"]), str(data["prefix"]),
                       int(data["partitions"]), int(data["api_port"]), str(data["bind"]), str(data["log_dir"]),
                       services, bool(data.get("secure", False)))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None


def _from_v1(data: dict[str, Any]) -> StackRecord:
    """Read the record earlier releases wrote (``pids`` by name, one projection on the API port)."""
    api_port = int(str(data["api_url"]).rsplit(":", 1)[1])
    services = {}
    for name, pid in data["pids"].items():
        kind, _, worker_id = name.partition("-")
        services[name] = ServiceRecord(name, kind, worker_id, api_port if kind == "projection" else None, int(pid))
    return StackRecord(int(data["port"]), int(data["controller_port"]), str(data["prefix"]), DEFAULT_PARTITIONS,
                       api_port,
                       "127.0.0.1", str(data["logs"]), services)


# ---------------------------------------------------------------------------- processes
def process_start_ticks(pid: int) -> int | None:
    """When process `pid` started, in clock ticks after boot (field 22 of ``/proc/PID/stat``); None
    when there is no such process. Set at the fork and never changed by an exec."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
        # The command name (field 2) may hold spaces and parentheses: count the fields after its ')'.
        return int(raw[raw.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def process_runs(pid: int, module: str, worker_id: str, started: int | None = None) -> bool:
    """True when ``pid`` is a live, non-zombie process and the one recorded: started at `started`
    (clock ticks, `process_start_ticks`), or, when no start time was recorded, running
    ``python -m module ... worker_id``."""
    if not pid_alive(pid):
        return False
    if started is not None:
        return process_start_ticks(pid) == started
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return module.encode() in argv and worker_id.encode() in argv


def stop_services(services: list[ServiceRecord], grace_s: float = 20.0) -> list[str]:
    """SIGTERM every live service, SIGKILL what is left after ``grace_s``; the names stopped."""
    live = [s for s in services if s.alive()]
    for s in live:
        with contextlib.suppress(ProcessLookupError):
            os.kill(s.pid or 0, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while any(s.alive() for s in live) and time.monotonic() < deadline:
        time.sleep(0.2)
    for s in live:
        if s.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(s.pid or 0, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(s.alive() for s in live) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [s.name for s in live]


def next_free_ports(start: int, n: int, host: str, avoid: set[int]) -> list[int]:
    """The first ``n`` ports from ``start`` on that can be bound on ``host`` now and are not in ``avoid``."""
    ports: list[int] = []
    port = start
    while len(ports) < n:
        if port > 65535:
            raise ValueError(f"no {n} free ports above {start}")
        if port not in avoid and port_bindable(host, port):
            ports.append(port)
        port += 1
    return ports


# ---------------------------------------------------------------------------- status
def read_health(path: Path, pid: int | None) -> dict[str, Any] | None:
    """A worker's health file: ``None`` when missing, ``{"error": ...}`` when unreadable.

    ``stale`` is true when the file was written by another process than the current one.
    """
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return {"error": f"unreadable health file {path}: {exc}"}
    if not isinstance(data, dict):
        return {"error": f"unreadable health file {path}: not a JSON object"}
    health = {k: data[k] for k in HEALTH_FIELDS if k in data}
    health["stale"] = pid is None or data.get("pid") != pid
    return health


def projection_ready(url: str, timeout: float = 2.0) -> bool | None:
    """What the projection's ``/v1/health`` says about readiness; ``None`` when it does not answer."""
    try:
        with urllib.request.urlopen(f"{url}/v1/health", timeout=timeout) as resp:  # noqa: S310 (our own URL)
            return bool(json.loads(resp.read()).get("ready"))
    except urllib.error.HTTPError as exc:
        try:
            return bool(json.loads(exc.read()).get("ready"))
        except ValueError:
            return None
    except (urllib.error.URLError, OSError, ValueError):
        return None


def stack_report(record: StackRecord, probe_timeout: float = 3.0) -> tuple[dict[str, Any], int]:
    """A JSON-ready report of every part of the stack, and the `watchtower status` exit code."""
    broker = record.broker
    broker_status = broker.status()
    alive = broker_status["state"] == "running"
    problem = broker.reachability(probe_timeout) if alive else "the broker process is not running"
    kafka = {"bootstrap": record.bootstrap, "alive": alive, "reachable": problem is None, "error": problem,
             "data_dir": broker_status["data_dir"], "nodes": broker_status["nodes"]}
    services: dict[str, Any] = {}
    for s in record.services.values():
        running = s.alive()
        # "stopped": no process since `down --keep-kafka` (or a failed start); "dead": it died.
        state = "running" if running else ("stopped" if s.pid is None else "dead")
        entry: dict[str, Any] = {"kind": s.kind, "pid": s.pid, "running": running, "state": state}
        if s.kind in ("worker", "replay", "delivery", "ingest", "runner"):
            entry["health"] = read_health(Path(record.log_dir) / f"{s.name}.health.json",
                                          s.pid if running else None)
        else:
            entry["port"] = s.port
            entry["url"] = f"http://{connect_host(record.bind)}:{s.port}"
            entry["ready"] = projection_ready(entry["url"]) if running else None
        services[s.name] = entry
    healthy = alive and problem is None and all(e["running"] for e in services.values())
    body = {"state": "running" if healthy else "degraded", "api_url": record.api_url,
            "bootstrap": record.bootstrap, "bind": record.bind, "prefix": record.prefix,
            "logs": record.log_dir, "kafka": kafka, "services": services}
    return body, EXIT_RUNNING if healthy else EXIT_DEGRADED


def not_up_report() -> dict[str, Any]:
    return {"state": "stopped", "api_url": None, "bootstrap": None, "kafka": None, "services": {}}
