"""`watchtower spark verify` and `watchtower spark replay` on a real Spark standalone cluster.

The cluster is pyspark's own: a master and two workers (1 core, 512 MiB each) started with
``$SPARK_HOME/bin/spark-class`` on 127.0.0.1, where SPARK_HOME is the installed pyspark package.
The jobs run through the command users run (``watchtower spark ... --master
spark://127.0.0.1:PORT``, a subprocess: its own driver, its executors on the workers), and each
result must equal what the same job gives in local mode on the same data. The Kafka connector jars
reach the executors the way the session builder ships them (``spark.jars``); the executors run the
driver's Python (``PYSPARK_PYTHON``). The executor size comes from ``spark-defaults.conf`` in
SPARK_CONF_DIR, as a user's cluster would set it. One cluster and one stack serve the module; the
cluster's processes are always stopped, whatever the outcome.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka_fixture import free_ports
from spark_script import BTC, LENGTH, register_replay, replay_deliveries
from waiting import wait_until

import watchtower
from watchtower.client.http import ApiClient
from watchtower.local.stack import ServiceSet
from watchtower.schemas.records import decode_message

pyspark = pytest.importorskip("pyspark")
pytestmark = pytest.mark.integration

SID = "s-spark-cluster"
REPO = Path(watchtower.__file__).resolve().parents[1]
WORKERS = 2
STARTUP_S = 120


class Cluster:
    """A standalone master and its workers, each a process group of its own."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = Path(pyspark.__file__).resolve().parent
        self.port, self.ui_port, *self.worker_ui_ports = free_ports(2 + WORKERS)
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []
        conf = root / "conf"
        conf.mkdir()
        (conf / "spark-defaults.conf").write_text("spark.executor.memory 512m\nspark.executor.cores 1\n")
        self.env = {**os.environ, "SPARK_HOME": str(self.home), "SPARK_CONF_DIR": str(conf),
                    "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(root / "logs"),
                    "PYSPARK_PYTHON": sys.executable,
                    "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}

    def _start(self, name: str, *args: str) -> None:
        log = (self.root / f"{name}.log").open("wb")
        self.procs.append(subprocess.Popen([str(self.home / "bin" / "spark-class"), *args], env=self.env,
                                           stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def start(self) -> None:
        self._start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(self.port), "--webui-port", str(self.ui_port))
        for i, ui in enumerate(self.worker_ui_ports, start=1):
            self._start(f"worker{i}", "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                        "--cores", "1", "--memory", "512m", "--webui-port", str(ui),
                        "--work-dir", str(self.root / f"work{i}"))

        def workers_alive() -> bool:
            if self.alive_workers() >= WORKERS:
                return True
            for proc in self.procs:
                assert proc.poll() is None, f"a cluster process exited: {self.logs()}"
            return False

        wait_until(lambda: f"{WORKERS} workers alive: {self.logs()}", workers_alive, timeout_s=STARTUP_S, every_s=1)

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as response:
            return dict(json.load(response))

    def alive_workers(self) -> int:
        try:
            return sum(1 for w in self.state().get("workers", []) if w.get("state") == "ALIVE")
        except OSError:
            return 0

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                         for p in sorted(self.root.glob("*.log")))

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        running.start()
        yield running
    finally:
        running.stop()


def cli(cluster: Cluster, stack: ServiceSet, *args: str) -> dict[str, Any]:
    """`watchtower spark ARGS --master <cluster> --json` as a user runs it; its JSON result."""
    env = {**cluster.env, "WATCHTOWER_TOPIC_PREFIX": stack.prefix}
    script = Path(sys.executable).parent / "watchtower"  # the venv's console script
    command = [str(script)] if script.exists() else [sys.executable, "-m", "watchtower.cli"]
    done = subprocess.run([*command, "spark", *args, "--master", cluster.url,
                           "--bootstrap", stack.bootstrap, "--json"], env=env, capture_output=True, timeout=600,
                          check=False)
    assert done.returncode == 0, f"{done.stderr.decode(errors='replace')[-4000:]}\n{cluster.logs()}"
    return dict(json.loads(done.stdout))


def test_verify_and_replay_on_a_standalone_cluster_match_local_mode(
        spark: Any, cluster: Cluster, stack: ServiceSet, api: ApiClient) -> None:
    from watchtower.spark.replay_job import run_replay
    from watchtower.spark.verify import verified_schedule, verify_stream

    local = verify_stream(spark, stack.bootstrap, SID, verified_schedule(api, SID), prefix=stack.prefix).as_json()
    on_cluster = cli(cluster, stack, "verify", "--stream", SID, "--api", stack.api_url)
    assert on_cluster == local
    assert (on_cluster["ok"], on_cluster["verified"]) == (True, LENGTH)

    # Two registrations of the same plan: one fulfilled in local mode, one on the cluster.
    plan: dict[str, Any] = {"first": 2, "end_exclusive": LENGTH + 1, "end_id": LENGTH, "filter_spec": BTC}
    local_id, _ = register_replay(stack.bootstrap, stack.prefix, SID, 1, **plan)
    cluster_id, _ = register_replay(stack.bootstrap, stack.prefix, SID, 2, **plan)
    expected = run_replay(spark, stack.bootstrap, SID, local_id, prefix=stack.prefix).as_json()
    got = cli(cluster, stack, "replay", str(cluster_id), "--stream", SID)
    assert got == {**expected, "replay_id": str(cluster_id)}  # ids travel as text in --json (past 2^53)
    assert (got["status"], got["delivered"]) == ("completed", len([s for s in range(2, LENGTH + 1) if s % 3 == 0]))
    local_values = [m.value() for m in replay_deliveries(stack.bootstrap, stack.prefix, local_id)]
    cluster_values = [m.value() for m in replay_deliveries(stack.bootstrap, stack.prefix, cluster_id)]
    assert cluster_values == local_values
    assert [decode_message(v).sequence for v in cluster_values] == [s for s in range(2, LENGTH + 1) if s % 3 == 0]

    # Both jobs ran as applications of this cluster, on its executors.
    finished = cluster.state().get("completedapps", [])
    assert {app["name"] for app in finished} >= {"watchtower-spark-verify", "watchtower-spark-replay"}
