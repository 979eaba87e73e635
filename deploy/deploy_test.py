"""The deploy tier (``./run deploy-test``): compose.yaml run for real, driven from outside.

Stages, each timed: build every image (deploy/build-images.sh), the deployment's genesis, start the
stack in dependency order (podman-compose with compose.yaml and compose.local.yaml), wait until every
service answers, run the demo's flows against the published ports only (publish and read, a paid
feed with a purchase and a decrypt, a replay beyond the window, push over SSE, a confidential feed),
then the fault checks under load, and finally stop the stack and remove its volumes. It prints each
stage's wall time, the image sizes and a line per check, and exits non-zero when any check failed.

Not a pytest module: CI never runs it (docs/testing.md's tiers). ``--keep`` leaves the stack up;
``--skip-build`` reuses the images; ``--reuse`` checks the stack already running; ``--only flows``
or ``--only faults`` runs a part of the checks.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script (./run deploy-test): the repository's packages
    sys.path.insert(0, str(REPO))

from deploy.engines import (  # noqa: E402
    DEPLOY,
    GENESIS_HOME,
    PROJECT,
    compose,
    container,
    http_ok,
    podman,
    sh,
    wait_exited,
    wait_healthy,
)
from deploy.faults import run_faults  # noqa: E402
from deploy.flows import remove_source, run_flows  # noqa: E402

API_URL = "http://127.0.0.1:8470"
API2_URL = "http://127.0.0.1:8471"
GATEWAY_URL = "http://127.0.0.1:8480"
KEYMGR_URL = "http://127.0.0.1:8472"
PROMETHEUS_URL = "http://127.0.0.1:9090"
SPARK_UI_URL = "http://127.0.0.1:8080"
HOST_BOOTSTRAP = "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
IMAGES = ("localhost/watchtower-base:bookworm", "localhost/watchtower:local", "localhost/watchtower-spark:local",
          "localhost/watchtower-kafka:4.3.1", "localhost/watchtower-prometheus:local")
# Started after `init` has made the topics and ACLs; Grafana and the third worker stay out (profiles).
SERVICES = ("worker-1", "worker-2", "keymgr", "replay-worker", "delivery-worker", "api-1", "api-2", "gateway",
            "ingest", "runner-1", "runner-2", "spark-master", "spark-worker", "prometheus")

TIMES: list[tuple[str, float]] = []
RESULTS: list[tuple[str, bool, str]] = []


def log(text: str) -> None:
    print(text, flush=True)


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    log(f"== {name}")
    t0 = time.monotonic()
    try:
        yield
    finally:
        TIMES.append((name, time.monotonic() - t0))
        log(f"== {name}: {TIMES[-1][1]:.1f}s")


def check(name: str, fn: Callable[[], str]) -> bool:
    """Run one check; record whether it passed and what it measured."""
    log(f"-- {name}")
    t0 = time.monotonic()
    try:
        detail = fn() or ""
        ok = True
    except Exception as exc:
        traceback.print_exc()
        detail = f"{type(exc).__name__}: {exc}"
        ok = False
    RESULTS.append((name, ok, f"{detail} ({time.monotonic() - t0:.1f}s)"))
    log(f"{'PASS' if ok else 'FAIL'} {name}: {RESULTS[-1][2]}")
    return ok


# ---------------------------------------------------------------------------------------- stages

def build() -> None:
    sh(["bash", str(DEPLOY / "build-images.sh")])


def image_sizes() -> dict[str, int]:
    out = {}
    for image in IMAGES:
        text = podman("image", "inspect", "--format", "{{.Size}}", image, check_rc=False).strip()
        if text.isdigit():
            out[image] = int(text)
    return out


def genesis() -> None:
    sh([sys.executable, str(DEPLOY / "genesis.py"), str(GENESIS_HOME)])
    for line in (GENESIS_HOME / "genesis.env").read_text().splitlines():
        name, _, value = line.partition("=")
        os.environ[name] = value


def up() -> None:
    compose("up", "-d", "secrets")
    wait_exited("secrets")
    compose("up", "-d", "--no-deps", "kafka-1", "kafka-2", "kafka-3")
    for i in (1, 2, 3):
        log(f"   kafka-{i} healthy after {wait_healthy(f'kafka-{i}'):.1f}s")
    compose("up", "-d", "--no-deps", "scram-setup")
    wait_exited("scram-setup")
    compose("up", "-d", "--no-deps", "init")
    wait_exited("init")
    compose("up", "-d", "--no-deps", *SERVICES)


def wait_ready() -> None:
    for name, url in (("api-1", f"{API_URL}/v1/feeds"), ("api-2", f"{API2_URL}/v1/feeds"),
                      ("gateway", f"{GATEWAY_URL}/v1/feeds"), ("keymgr", f"{KEYMGR_URL}/v1/keymgr/public-key"),
                      ("prometheus", f"{PROMETHEUS_URL}/-/ready"), ("spark-master", SPARK_UI_URL)):
        log(f"   {name} answers after {http_ok(url):.1f}s")
    running = podman("ps", "--format", "{{.Names}} {{.Status}}")
    log(running)
    dead = [s for s in SERVICES if container(s) not in running]
    if dead:
        raise RuntimeError(f"not running: {dead}")


def client_credentials(workdir: Path) -> None:
    """The client principal as the host sees it, so host-side Kafka clients (replay reads) connect."""
    podman("cp", f"{container('secrets')}:/secrets/client.host.json", str(workdir / "client.json"))
    podman("cp", f"{container('secrets')}:/secrets/ca.pem", str(workdir / "ca.pem"))
    doc = json.loads((workdir / "client.json").read_text())
    for principal in doc["principals"].values():
        principal["ssl_ca_location"] = str(workdir / "ca.pem")
    (workdir / "client.json").write_text(json.dumps(doc))
    os.chmod(workdir / "client.json", 0o600)
    os.environ["WATCHTOWER_KAFKA_CREDENTIALS"] = str(workdir / "client.json")


def down() -> None:
    podman("unpause", "--all", check_rc=False)
    compose("--profile", "scale", "down", "-v", "-t", "5", check_rc=False)
    # Volumes podman-compose left (an interrupted run) go too: the next run starts fresh.
    names = podman("volume", "ls", "--format", "{{.Name}}", check_rc=False).split()
    for name in names:
        if name.startswith(f"{PROJECT}_"):
            podman("volume", "rm", "-f", name, check_rc=False)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-build", action="store_true")
    parser.add_argument("--keep", action="store_true", help="leave the stack running")
    parser.add_argument("--reuse", action="store_true", help="run the checks on the stack already running")
    parser.add_argument("--only", default="flows,faults")
    args = parser.parse_args(argv)
    only = set(args.only.split(","))
    workdir = Path(tempfile.mkdtemp(prefix="wt-deploy-"))
    os.environ["WATCHTOWER_HOME"] = str(workdir / "home")
    os.environ["WATCHTOWER_COMMANDS_API"] = GATEWAY_URL
    t_all = time.monotonic()
    rc = 1
    try:
        if not args.skip_build:
            with stage("build images"):
                build()
        with stage("genesis"):
            genesis()
        if not args.reuse:
            down()
            with stage("start the stack"):
                up()
        with stage("wait for health"):
            wait_ready()
        client_credentials(workdir)
        if "flows" in only:
            with stage("flows from outside"):
                run_flows(check, workdir)
        if "faults" in only:
            with stage("faults under load"):
                run_faults(check, workdir)
        rc = 0 if RESULTS and all(ok for _, ok, _ in RESULTS) else 1
    except Exception:
        traceback.print_exc()
        rc = 1
    finally:
        if rc and not args.keep:
            with contextlib.suppress(Exception):
                compose("logs", "--tail", "30", check_rc=False, capture=False)
        if not args.keep:
            with contextlib.suppress(Exception):
                save_logs(LOGS_DIR)
        if not args.keep:
            with stage("stop and remove volumes"):
                remove_source()
                down()
        shutil.rmtree(workdir, ignore_errors=True)
    log("\n== deploy-test summary")
    for name, seconds in TIMES:
        log(f"  stage {name:28} {seconds:8.1f}s")
    log(f"  total {time.monotonic() - t_all:.1f}s")
    for image, size in image_sizes().items():
        log(f"  image {image:40} {size / 1e6:8.0f} MB")
    for name, ok, detail in RESULTS:
        log(f"  {'PASS' if ok else 'FAIL'} {name}: {detail}")
    passed = sum(ok for _, ok, _ in RESULTS)
    log(f"{passed} passed, {len(RESULTS) - passed} failed")
    return rc


LOGS_DIR = Path(__file__).resolve().parent / "logs"


def save_logs(into: Path) -> None:
    """Every container's whole log, one file each, before the stack is removed (a failed run's
    summary shows 30 lines of each; the takeover and restart timings are read from them)."""
    into.mkdir(exist_ok=True)
    names = podman("ps", "-a", "--format", "{{.Names}}", "--filter", f"name=^{PROJECT}_", check_rc=False).split()
    for name in names:
        with (into / f"{name}.log").open("wb") as out:  # bytes as logged: a stray byte never loses a log
            subprocess.run(["podman", "logs", "-t", name], stdout=out, stderr=subprocess.STDOUT, check=False,
                           timeout=120)
    log(f"  the containers' whole logs are in {into}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
