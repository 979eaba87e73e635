"""The service processes of a local stack: stream-actor workers and projection/API workers.

`ServiceSet` starts each as its own OS process (so a test can ``kill -9`` one), waits until the
HTTP API answers through a routed route (which needs a finished Faust rebalance), and stops them
with SIGTERM, then SIGKILL after a grace period. Logs go to ``<log_dir>/<name>.log``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from watchtower.local.errors import LocalStackError


@dataclass
class ServiceSet:
    """Worker and projection processes for one topic prefix on one broker."""

    bootstrap: str
    prefix: str
    log_dir: Path
    api_port: int = 8470
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def _spawn(self, name: str, args: list[str], extra_env: dict[str, str] | None = None) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "WATCHTOWER_FAUST_DATADIR": str(self.log_dir / f"{name}.data"), **(extra_env or {})}
        with (self.log_dir / f"{name}.log").open("ab") as out:
            self.procs[name] = subprocess.Popen([sys.executable, "-m", *args], stdout=out, stderr=subprocess.STDOUT,
                                                start_new_session=True, env=env)

    def start_worker(self, worker_id: str) -> None:
        """A stream-actor worker (the single writer of the partitions it owns)."""
        self._spawn(f"worker-{worker_id}", ["watchtower.agents.worker_main", self.bootstrap, worker_id, self.prefix])

    def start_projection(self, worker_id: str, port: int | None = None, generation: int = 1) -> None:
        """A projection worker serving the HTTP API on `port` (default: the stack's API port).

        A new `generation` starts from empty tables and rebuilds them from the log.
        """
        self._spawn(f"projection-{worker_id}", ["watchtower.projections.main", self.bootstrap, worker_id,
                                                str(port or self.api_port), self.prefix],
                    {"WATCHTOWER_PROJECTION_GENERATION": str(generation)})

    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self.procs.items() if p.poll() is None}

    def kill9(self, name: str) -> None:
        proc = self.procs.pop(name)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def wait_ready(self, timeout_s: float = 120.0, api_url: str | None = None) -> None:
        """Block until the API's projection worker holds its partitions and has recovered its tables."""
        url = api_url or self.api_url
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise LocalStackError(f"{name} exited with code {proc.returncode}; see "
                                          f"{self.log_dir / (name + '.log')}")
            try:
                with urllib.request.urlopen(f"{url}/v1/health", timeout=5) as resp:  # noqa: S310
                    if json.loads(resp.read()).get("ready"):
                        return
                    last = "the projection is still recovering its tables"
            except (urllib.error.URLError, OSError, ValueError) as exc:
                last = str(exc)
            time.sleep(0.3)
        raise LocalStackError(f"the HTTP API at {self.api_url} did not become ready in {timeout_s:.0f}s "
                              f"({last}); see the logs in {self.log_dir}")

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
