"""The engines the deploy tier drives the compose stack with: podman, podman-compose and the
services' own health checks, all run from the repository root with deploy/containers.conf.

`deploy_test` (the stages), `flows` and `faults` (the checks) share them.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
GENESIS_HOME = DEPLOY / "genesis"
PROJECT = "watchtower"


def env() -> dict[str, str]:
    out = dict(os.environ)
    out["CONTAINERS_CONF"] = str(DEPLOY / "containers.conf")
    return out


def sh(argv: list[str], *, check_rc: bool = True, capture: bool = False, timeout: float | None = None
       ) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(argv, cwd=REPO, env=env(), text=True, timeout=timeout,
                         stdout=subprocess.PIPE if capture else None, stderr=subprocess.STDOUT if capture else None)
    if check_rc and res.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:6])}… exited {res.returncode}: {(res.stdout or '')[-2000:]}")
    return res


def compose(*args: str, check_rc: bool = True, capture: bool = True) -> subprocess.CompletedProcess[str]:
    tool = os.environ.get("WATCHTOWER_PODMAN_COMPOSE", str(DEPLOY / ".venv" / "bin" / "podman-compose"))
    return sh([tool, "-f", "compose.yaml", "-f", "compose.local.yaml", "--env-file",
               str(GENESIS_HOME / "genesis.env"), *args], check_rc=check_rc, capture=capture)


def container(service: str) -> str:
    return f"{PROJECT}_{service}_1"


def podman(*args: str, check_rc: bool = True) -> str:
    return sh(["podman", *args], check_rc=check_rc, capture=True).stdout


def wait_exited(service: str, timeout_s: float = 300) -> None:
    """Wait for a one-shot service to finish; it must exit 0."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = podman("inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", container(service)).split()
        if state and state[0] in ("exited", "stopped"):
            if state[1] != "0":
                raise RuntimeError(f"{service} exited {state[1]}: {podman('logs', '--tail', '40', container(service))}")
            return
        time.sleep(1)
    raise TimeoutError(f"{service} still running after {timeout_s:.0f}s")


def wait_healthy(service: str, timeout_s: float = 300) -> float:
    """Run the service's own health check (podman has no timer for it here) until it passes."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if sh(["podman", "healthcheck", "run", container(service)], check_rc=False, capture=True).returncode == 0:
            return time.monotonic() - t0
        time.sleep(3)
    raise TimeoutError(f"{service} not healthy after {timeout_s:.0f}s: "
                       f"{podman('logs', '--tail', '30', container(service), check_rc=False)}")


def http_ok(url: str, timeout_s: float = 300) -> float:
    import httpx
    t0 = time.monotonic()
    last = ""
    while time.monotonic() - t0 < timeout_s:
        try:
            r = httpx.get(url, timeout=5)
            if r.status_code < 500:
                return time.monotonic() - t0
            last = f"HTTP {r.status_code}"
        except httpx.HTTPError as exc:
            last = str(exc)
        time.sleep(2)
    raise TimeoutError(f"{url} did not answer in {timeout_s:.0f}s ({last})")
