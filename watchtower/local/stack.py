"""The service processes of a local stack: stream-actor workers and projection/API workers.

`ServiceSet` starts each as its own OS process (so a test can ``kill -9`` one), waits until each
projection's HTTP API reports ready (which needs a finished Faust rebalance), and stops them
with SIGTERM, then SIGKILL after a grace period. Per process ``<name>``:

- its log is ``<log_dir>/<name>.log`` and its Faust data directory ``<log_dir>/<name>.data``;
- a stream-actor worker gets ``WATCHTOWER_HEALTH_FILE=<log_dir>/<name>.health.json`` (the worker
  writes its health there; a file left by an earlier process is removed before the start); so
  does the replay worker (`start_replay`, process ``replay-<id>``) and the push delivery worker
  (`start_delivery`, process ``delivery-<id>``);
- a projection gets ``WATCHTOWER_WEB_BIND`` (the address its HTTP API listens on) when `bind` is set;
- a command gateway (`start_gateway`, ``POST /v1/commands`` alone) gets the same bind, and
  ``WATCHTOWER_API_URL`` (the stack's API URL, which its SSE route reads from);
- the Stream Key Manager (`start_keymgr`) gets ``WATCHTOWER_KEYMGR_KEK_FILE`` and the same bind;
- the push delivery worker runs at a lower CPU priority, ``nice`` ``WATCHTOWER_DELIVERY_NICE`` (default
  10, 0 = off; `delivery_nice`): its fan-out is background work and must not take the CPU from the
  publish path on a shared host (docs/push.md);
- every process serves its Prometheus ``/metrics`` on a free port the OS picks
  (``WATCHTOWER_METRICS_PORT=0``) and writes that URL to ``<log_dir>/<name>.metrics.json``
  (`metrics_url`; :mod:`watchtower.metrics.exposition`), so no two processes ever collide;
- with `credentials` (a secure broker) every process gets ``WATCHTOWER_KAFKA_CREDENTIALS`` pointing
  at that file, which should hold the service principal alone (see :mod:`watchtower.local.security`),
  except the ingestion runners: they get `runner_credentials` (default: ``runner.json`` beside
  `credentials`), the runner principal, which reads tasks and writes results and nothing else. A
  runner is never handed the service principal: without a runner file it is not started.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from watchtower.local import priority
from watchtower.local.errors import LocalStackError
from watchtower.local.jars import spark_jars, spark_jars_dir
from watchtower.local.security import RUNNER_PRINCIPAL

WORKER_MODULE = "watchtower.workers.worker_main"
PROJECTION_MODULE = "watchtower.api.main"
GATEWAY_MODULE = "watchtower.gateway.main"
KEYMGR_MODULE = "watchtower.keymgr.main"
REPLAY_MODULE = "watchtower.replay.main"
DELIVERY_MODULE = "watchtower.delivery.main"
INGEST_MODULE = "watchtower.ingest.main"

log = logging.getLogger("watchtower.local.stack")
KEYMGR_NAME = "keymgr"
LOOPBACK = "127.0.0.1"
#: How much lower the delivery worker's CPU priority is, unless WATCHTOWER_DELIVERY_NICE says otherwise.
DEFAULT_DELIVERY_NICE = 10


def delivery_nice(env: Mapping[str, str] | None = None) -> int:
    """The niceness increment of the push delivery worker: ``WATCHTOWER_DELIVERY_NICE`` (0 = off), 0..19.

    Fan-out is background work paced by the block bounds; the publish path (stream actor, API) is
    not. On a shared host the scheduler then gives the CPU to a publish first, and the worker uses
    what is left (docs/push.md).
    """
    try:
        value = int((os.environ if env is None else env).get("WATCHTOWER_DELIVERY_NICE", DEFAULT_DELIVERY_NICE))
    except ValueError:
        value = DEFAULT_DELIVERY_NICE
    return min(19, max(0, value))  # 19 is the lowest priority; a negative one would need privileges


def is_loopback(bind: str) -> bool:
    """True when an API bound to ``bind`` is reachable from this machine only."""
    if bind == "localhost":
        return True
    try:
        return ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve to any interface


def connect_host(bind: str | None) -> str:
    """The host a local client connects to for a server bound to ``bind``."""
    if bind is None or bind in ("", "0.0.0.0", "::") or is_loopback(bind):  # noqa: S104 (compared, not bound)
        return LOOPBACK
    return f"[{bind}]" if ":" in bind else bind


@dataclass
class ServiceSet:
    """Worker and projection processes for one topic prefix on one broker."""

    bootstrap: str
    prefix: str
    log_dir: Path
    api_port: int = 8470
    bind: str | None = None
    # The service principal's credentials file when the broker is secure; None: the environment's.
    credentials: Path | None = None
    # The runner principal's file (None: ``runner.json`` beside `credentials`).
    runner_credentials: Path | None = None
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    # HTTP base URL of every projection started, by process name.
    urls: dict[str, str] = field(default_factory=dict)
    # The key manager's base URL once `start_keymgr` ran (not in `urls`: it has no projection health).
    keymgr_url: str | None = None

    @property
    def api_url(self) -> str:
        return self.url_for(self.api_port)

    def url_for(self, port: int) -> str:
        """The URL a client on this machine uses for an API listening on ``bind``:``port``."""
        return f"http://{connect_host(self.bind)}:{port}"

    def health_file(self, name: str) -> Path:
        return self.log_dir / f"{name}.health.json"

    def metrics_file(self, name: str) -> Path:
        return self.log_dir / f"{name}.metrics.json"

    def metrics_url(self, name: str) -> str | None:
        """The ``/metrics`` URL process `name` wrote, once it serves it (None before)."""
        try:
            return str(json.loads(self.metrics_file(name).read_text())["url"])
        except (OSError, ValueError, KeyError):
            return None

    def runner_file(self) -> Path | None:
        """The credentials file the runners get (None: a plaintext broker, the environment's)."""
        path = self.runner_credentials
        if path is None:
            if self.credentials is None:
                return None
            path = self.credentials.with_name(f"{RUNNER_PRINCIPAL}.json")
        if not path.is_file():
            raise LocalStackError(f"no runner credentials at {path}: a runner connects as the runner principal, "
                                  "never as the service; start the cluster with `watchtower local up --secure` "
                                  "(it adds the principal), or pass the runner's credentials file")
        return path

    def _spawn(self, name: str, args: list[str], extra_env: dict[str, str] | None = None, nice: int = 0,
               credentials: Path | None = None) -> None:
        """Start ``python -m args...`` as process `name`; `nice` > 0 lowers its CPU priority by that much;
        `credentials` replaces the service's credentials file for this process. Each process leads a
        session of its own, whose scheduling group is lowered by `nice` too (`local.priority`)."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_file(name).unlink(missing_ok=True)  # an earlier process's port is not this one's
        env = {**os.environ, "WATCHTOWER_FAUST_DATADIR": str(self.log_dir / f"{name}.data"),
               "WATCHTOWER_METRICS_PORT": "0", "WATCHTOWER_METRICS_FILE": str(self.metrics_file(name)),
               **(extra_env or {})}
        credentials = credentials or self.credentials
        if credentials is not None:
            env["WATCHTOWER_KAFKA_CREDENTIALS"] = str(credentials)
            env.pop("WATCHTOWER_KAFKA_PRINCIPAL", None)  # the file holds one principal
        argv = [sys.executable, "-m", *args]
        nice_bin = shutil.which("nice") if nice > 0 else None
        if nice_bin is not None:
            # `nice` sets the priority before it execs Python (same pid), so every thread the process
            # ever starts (librdkafka's included) inherits it; no preexec_fn in a threaded parent.
            argv = [nice_bin, "-n", str(nice), *argv]
        with (self.log_dir / f"{name}.log").open("ab") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        self.procs[name] = proc
        if nice > 0 and nice_bin is None:  # no `nice` binary: the main thread, before Python starts others
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, proc.pid, os.getpriority(os.PRIO_PROCESS, proc.pid) + nice)
        # It leads the session made for it here: without that session's group lowered, its
        # niceness would count only among its own threads where the kernel groups by session.
        priority.lower_group(proc.pid, nice)

    def start_worker(self, worker_id: str, extra_env: dict[str, str] | None = None) -> None:
        """A stream-actor worker (the single writer of the partitions it owns); `extra_env` sets
        e.g. ``WATCHTOWER_METRICS_PORT=off`` for it alone."""
        name = f"worker-{worker_id}"
        health = self.health_file(name)
        # A file left by an earlier process would describe a worker that no longer exists.
        health.unlink(missing_ok=True)
        self._spawn(
            name, [WORKER_MODULE, self.bootstrap, worker_id, self.prefix],
            {"WATCHTOWER_HEALTH_FILE": str(health), **(extra_env or {})}
        )

    def start_replay(self, worker_id: str = "r1", extra_env: dict[str, str] | None = None) -> str:
        """A replay worker (:mod:`watchtower.replay`); returns its process name (``replay-<id>``).

        `extra_env` sets e.g. ``WATCHTOWER_REPLAY_SLICE`` or ``WATCHTOWER_REPLAY_RATE`` for it alone.
        """
        name = f"replay-{worker_id}"
        health = self.health_file(name)
        health.unlink(missing_ok=True)
        # The Spark job it hands a large replay to runs with its environment: the connector's jars,
        # fetched once here (cached) so that job works on a fresh machine too. Without Maven or a
        # network the folder is named anyway; a replay that reaches Spark then says what to run.
        jars = {} if "WATCHTOWER_SPARK_JARS" in os.environ else {"WATCHTOWER_SPARK_JARS": _spark_jars_folder()}
        self._spawn(name, [REPLAY_MODULE, self.bootstrap, worker_id, self.prefix],
                    {"WATCHTOWER_HEALTH_FILE": str(health), **jars, **(extra_env or {})})
        return name

    def start_delivery(self, worker_id: str = "d1", extra_env: dict[str, str] | None = None) -> str:
        """A push delivery worker (:mod:`watchtower.delivery`); returns its process name (``delivery-<id>``).

        `extra_env` sets e.g. ``WATCHTOWER_PUSH_BACKLOG`` for it alone. It runs ``nice`` by
        `delivery_nice` (``WATCHTOWER_DELIVERY_NICE``, read from `extra_env` first, then the environment).
        """
        name = f"delivery-{worker_id}"
        health = self.health_file(name)
        health.unlink(missing_ok=True)
        env = {"WATCHTOWER_HEALTH_FILE": str(health), **(extra_env or {})}
        nice = delivery_nice({**os.environ, **env})
        self._spawn(name, [DELIVERY_MODULE, self.bootstrap, worker_id, self.prefix], env, nice=nice)
        return name

    def _ingest_env(self, name: str, extra_env: dict[str, str] | None) -> dict[str, str]:
        health = self.health_file(name)
        health.unlink(missing_ok=True)
        return {"WATCHTOWER_BOOTSTRAP": self.bootstrap, "WATCHTOWER_TOPIC_PREFIX": self.prefix,
                "WATCHTOWER_API": self.api_url, "WATCHTOWER_INGEST_HEALTH": str(health), **(extra_env or {})}

    def start_ingest(self, extra_env: dict[str, str] | None = None, *, name: str = "ingest",
                     role: str = "all") -> str:
        """The CIP-7 ingestion service (scheduler + aggregator, :mod:`watchtower.ingest`), or with
        `role` only one part (``aggregator``: another member that takes a share of the feeds;
        ``scheduler``); returns `name`."""
        env = self._ingest_env(name, extra_env)
        # It steps back from the CPU itself, by WATCHTOWER_INGEST_YIELD and _NICE (`ingest.priority`):
        # it leads the session made for it here, whose group it sets and takes back.
        self._spawn(name, [INGEST_MODULE, "serve", "--role", role], env)
        return name

    def start_runner(self, runner: str, *, lie: bool = False, extra_env: dict[str, str] | None = None) -> str:
        """An ingestion runner with its own key (``runners/<runner>.key``); returns ``runner-<runner>``.
        `lie` makes it the demo's liar (every number + 1), which QUORUM outvotes."""
        name = f"runner-{runner}"
        env = self._ingest_env(name, extra_env)
        self._spawn(name, [INGEST_MODULE, "runner", runner, *(["--lie"] if lie else [])], env,
                    credentials=self.runner_file())  # it sets its own priority, as `start_ingest`
        return name

    def start_projection(
        self, worker_id: str, port: int | None = None, generation: int = 1, *, gateway: bool = True
    ) -> None:
        """A projection worker serving the HTTP API on `port` (default: the stack's API port).

        A new `generation` starts from empty tables and rebuilds them from the log. With
        `gateway` it also takes ``POST /v1/commands`` (the command gateway in the same process).
        """
        name, port = f"projection-{worker_id}", port or self.api_port
        env = {"WATCHTOWER_PROJECTION_GENERATION": str(generation), "WATCHTOWER_GATEWAY": "1" if gateway else "0"}
        if self.bind is not None:
            env["WATCHTOWER_WEB_BIND"] = self.bind
            # What the worker advertises to its peers for routed reads: an address they can reach.
            env["WATCHTOWER_WEB_HOST"] = connect_host(self.bind)
        self._spawn(name, [PROJECTION_MODULE, self.bootstrap, worker_id, str(port), self.prefix], env)
        self.urls[name] = self.url_for(port)

    def start_gateway(self, name: str, port: int) -> str:
        """A command gateway process (no read side) named ``gateway-<name>`` on `port`; returns its URL
        (also in `urls`, so `wait_ready` waits for it too)."""
        instance, name = name, f"gateway-{name}"
        env = {"WATCHTOWER_API_URL": self.api_url}
        if self.bind is not None:
            env["WATCHTOWER_WEB_BIND"] = self.bind
        self._spawn(name, [GATEWAY_MODULE, self.bootstrap, str(port), self.prefix, instance], env)
        self.urls[name] = self.url_for(port)
        return self.urls[name]

    def start_keymgr(self, port: int, kek_file: Path, instance: str = "k1") -> str:
        """The Stream Key Manager on `port` with the KEK in `kek_file` (0600); returns its URL.

        `instance` only names the process on its command line (the supervisor recognises it by it).
        """
        env = {"WATCHTOWER_KEYMGR_KEK_FILE": str(kek_file)}
        if self.bind is not None:
            env["WATCHTOWER_KEYMGR_BIND"] = self.bind
        self._spawn(KEYMGR_NAME, [KEYMGR_MODULE, self.bootstrap, str(port), self.prefix, instance], env)
        self.keymgr_url = self.url_for(port)
        return self.keymgr_url

    def wait_keymgr(self, timeout_s: float = 120.0) -> None:
        """Block until the key manager answers ``/healthz`` (it listens once it has read the log)."""
        if self.keymgr_url is None:
            raise LocalStackError("no key manager was started")
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        while time.monotonic() < deadline:
            proc = self.procs.get(KEYMGR_NAME)
            if proc is None or proc.poll() is not None:
                code = None if proc is None else proc.returncode
                raise LocalStackError(
                    f"the key manager exited with code {code}; see {self.log_dir / (KEYMGR_NAME + '.log')}"
                )
            try:
                with urllib.request.urlopen(f"{self.keymgr_url}/healthz", timeout=5) as resp:  # noqa: S310
                    if json.loads(resp.read()).get("ok"):
                        return
            except (urllib.error.URLError, OSError, ValueError) as exc:
                last = str(exc)
            time.sleep(0.3)
        raise LocalStackError(f"the key manager at {self.keymgr_url} did not answer in {timeout_s:.0f}s ({last})")

    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self.procs.items() if p.poll() is None}

    def kill9(self, name: str) -> None:
        proc = self.procs.pop(name)
        self.urls.pop(name, None)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def wait_ready(self, timeout_s: float = 120.0, api_url: str | None = None) -> None:
        """Block until the API's projection worker holds its partitions and has recovered its tables.

        Without ``api_url``: until every projection started here is ready (the stack's API port
        when none was started). Raises :class:`LocalStackError` when a process started here exits.
        """
        if api_url is None and self.urls:
            deadline = time.monotonic() + timeout_s
            for url in list(self.urls.values()):
                self.wait_ready(max(1.0, deadline - time.monotonic()), url)
            return
        url = api_url or self.api_url
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise LocalStackError(
                        f"{name} exited with code {proc.returncode}; see {self.log_dir / (name + '.log')}"
                    )
            try:
                with urllib.request.urlopen(f"{url}/v1/health", timeout=5) as resp:  # noqa: S310
                    if json.loads(resp.read()).get("ready"):
                        return
                    last = "the projection is still recovering its tables"
            except (urllib.error.URLError, OSError, ValueError) as exc:
                last = str(exc)
            time.sleep(0.3)
        raise LocalStackError(
            f"the HTTP API at {url} did not become ready in {timeout_s:.0f}s ({last}); see the logs in {self.log_dir}"
        )

    def stop(self, grace_s: float = 20.0) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self.procs.clear()
        self.urls.clear()


def _spark_jars_folder() -> str:
    try:
        spark_jars()
    except LocalStackError as exc:
        log.warning("the Spark connector's jars could not be fetched (%s); a replay handed to Spark "
                    "will fail until `watchtower spark` fetches them", exc)
    return str(spark_jars_dir())
