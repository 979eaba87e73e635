"""`watchtower up`, `status`, `down`: the whole stack from the CLI, on its own broker and ports.

Every test runs the real CLI in subprocesses against a real embedded broker, with its own
WATCHTOWER_HOME, and stops everything it started (a last `local down` catches a broker that
`watchtower down` failed to stop, so one failing test cannot leak a JVM).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_fixture import free_port_block, free_ports
from waiting import wait_until

from watchtower.local import priority
from watchtower.local.broker import LocalKafka
from watchtower.local.config import ClusterSpec
from watchtower.metrics import lag
from watchtower.topics.catalogue import catalogue, topic_prefix

pytestmark = pytest.mark.integration


@dataclass
class Stack:
    """One isolated stack's home directory and ports."""

    home: Path
    port: int
    cport: int
    api_port: int

    def wt(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "WATCHTOWER_HOME": str(self.home)}
        for name in ("WATCHTOWER_API", "WATCHTOWER_COMMANDS_API", "WATCHTOWER_WEB_BIND", "WATCHTOWER_BOOTSTRAP"):
            env.pop(name, None)
        return subprocess.run([sys.executable, "-m", "watchtower.cli", *args], env=env, capture_output=True,
                              text=True, timeout=timeout, check=False)

    def up(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.wt("up", "--port", str(self.port), "--controller-port", str(self.cport),
                       "--api-port", str(self.api_port), "--partitions", "2", *args)

    def status(self) -> tuple[int, dict[str, Any]]:
        result = self.wt("status", "--json")
        return result.returncode, json.loads(result.stdout)

    @property
    def broker(self) -> LocalKafka:
        return LocalKafka(ClusterSpec(self.home / "local" / f"kafka-{self.port}", self.port, self.cport))


def _new_stack(home: Path) -> Stack:
    return Stack(home, free_port_block(1), free_port_block(1), free_ports(1)[0])


def _cleanup(stack: Stack) -> None:
    stack.wt("down")
    stack.broker.down()


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[Stack]:
    stack = _new_stack(tmp_path)
    yield stack
    _cleanup(stack)


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack that is up; each test using it leaves it up and whole again."""
    stack = _new_stack(tmp_path_factory.mktemp("running"))
    try:
        up = stack.up()
        assert up.returncode == 0, up.stderr
        assert stack.wt("account", "new").returncode == 0
        created = stack.wt("new", "feed", "--name", "kept", "--json")
        assert created.returncode == 0, created.stderr
        yield stack
    finally:
        _cleanup(stack)


def _gone(pid: int) -> bool:
    try:
        return "zombie" in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def _pids(status: dict[str, Any]) -> dict[str, int]:
    return {name: s["pid"] for name, s in status["services"].items()}


def _until_ok(stack: Stack, *args: str, within_s: float = 150) -> subprocess.CompletedProcess[str]:
    """Run a CLI command until it succeeds (a safety deadline, not a timing claim)."""
    result: subprocess.CompletedProcess[str] | None = None

    def succeeded() -> subprocess.CompletedProcess[str] | None:
        nonlocal result
        result = stack.wt(*args)
        return result if result.returncode == 0 else None

    return wait_until(lambda: f"`{' '.join(args)}` to succeed (last stderr: {result and result.stderr})", succeeded,
                      timeout_s=within_s, every_s=1)


def test_up_runs_broker_workers_and_api_then_down_stops_them(fresh: Stack) -> None:
    up = fresh.up()
    assert up.returncode == 0, up.stderr
    assert "reachable from the network" not in up.stderr
    # A plaintext broker says so when it starts, and how to get a secure one.
    assert "plaintext, loopback only; use --secure" in up.stdout + up.stderr
    code, status = fresh.status()
    assert code == 0
    assert status["api_url"] == f"http://127.0.0.1:{fresh.api_port}"
    assert {name: s["running"] for name, s in status["services"].items()} == {
        "worker-w1": True, "projection-p1": True, "keymgr": True, "replay-r1": True,
        "delivery-d1": True, "ingest": True, "runner-r1": True, "runner-r2": True, "gateway-g1": True}
    assert status["kafka"]["alive"] is True
    assert status["kafka"]["reachable"] is True
    # The genesis registrar admitted both runners: the worker knows it, and refuses a runner's own
    # registration (tests/ingest/test_runner_admission.py), so the registry holds exactly these two.
    assert _environ(status["services"]["worker-w1"]["pid"])["WATCHTOWER_RUNNER_REGISTRAR"].startswith("0x")
    listed = json.loads(_until_ok(fresh, "runner", "list", "--json").stdout)["runners"]
    assert sorted(r["label"] for r in listed) == ["r1", "r2"]
    # The projection is told where to listen; the worker where to write its health.
    assert _environ(status["services"]["projection-p1"]["pid"])["WATCHTOWER_WEB_BIND"] == "127.0.0.1"
    health_file = Path(status["logs"]) / "worker-w1.health.json"
    assert _environ(status["services"]["worker-w1"]["pid"])["WATCHTOWER_HEALTH_FILE"] == str(health_file)
    # The delivery worker's fan-out yields the CPU to the publish path: it runs niced (docs/push.md).
    own = os.getpriority(os.PRIO_PROCESS, 0)
    if "WATCHTOWER_DELIVERY_NICE" not in os.environ:
        assert os.getpriority(os.PRIO_PROCESS, status["services"]["delivery-d1"]["pid"]) == min(19, own + 10)
        if priority.autogroup_enabled():  # and so does its session's group, which it leads
            assert priority.group_niceness(status["services"]["delivery-d1"]["pid"]) == 10
    assert os.getpriority(os.PRIO_PROCESS, status["services"]["worker-w1"]["pid"]) == own
    # The ingestion processes step back from the CPU by themselves, by WATCHTOWER_INGEST_YIELD and
    # _NICE (docs/ingestion.md, "Niceness"); each says how in its health file.
    from watchtower.ingest.priority import niceness_steps, yield_mode

    steps, mode = niceness_steps(os.environ), yield_mode(os.environ)
    for name in ("ingest", "runner-r1", "runner-r2"):
        pid = status["services"][name]["pid"]
        how = _priority_in_health(Path(status["logs"]) / f"{name}.health.json")
        if steps and mode == "always":
            assert how["mode"] == "always", (name, how)
            assert _niceness_becomes(pid, min(19, own + steps)), name
            if priority.autogroup_enabled():  # it leads a session of its own, whose group it lowers too
                assert priority.group_niceness(pid) == steps, name
        elif steps and name == "ingest" and priority.autogroup_enabled() and _in_root_cpu_cgroup(pid):
            # auto: full priority until the host shows room; its own niceness is never lowered.
            assert (how["mode"], how["nice"]) == ("auto", steps), (name, how)
            assert os.getpriority(os.PRIO_PROCESS, pid) == own, name
            assert priority.group_niceness(pid) in (0, steps), name
        else:  # runners keep their priority in auto; nothing steps back where the group cannot be taken back
            assert how["mode"] == "never", (name, how)
            assert os.getpriority(os.PRIO_PROCESS, pid) == own, name
    # The CLI finds the recorded API without flags: create a feed and read it back.
    assert fresh.wt("account", "new").returncode == 0
    created = fresh.wt("new", "feed", "--name", "up-test", "--json")
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["feed_id"] == 1
    published = fresh.wt("feed", "1", "publish", "--kind", "t", "--data", '{"x": 1}')
    assert published.returncode == 0, published.stderr
    head = json.loads(fresh.wt("feed", "1", "get-head", "--json").stdout)
    assert head["head"] == 1
    status = _commands_go_through_the_gateway(fresh, status)  # restarts the gateway: its new pid
    _status_shows_lag_and_metrics(fresh)
    again = fresh.up()
    assert again.returncode == 0, again.stderr
    assert "already up" in again.stdout
    assert _pids(fresh.status()[1]) == _pids(status), "a second up restarts nothing"

    down = fresh.wt("down")
    assert down.returncode == 0, down.stderr
    code, after = fresh.status()
    assert code == 3
    assert after["services"] == {}
    assert all(_gone(pid) for pid in _pids(status).values())
    assert fresh.broker.status()["state"] == "stopped"


def _in_root_cpu_cgroup(pid: int) -> bool:
    from watchtower.ingest.priority import SessionGroup

    group = SessionGroup()
    group.cgroup = Path(f"/proc/{pid}/cgroup")  # the process's, not this test's
    return group._in_root_cpu_cgroup()


def _priority_in_health(path: Path, within_s: float = 60.0) -> dict[str, Any]:
    """The ``priority`` an ingestion process reports in its health file (written every half second)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            how = json.loads(path.read_text()).get("priority")
        except (OSError, ValueError):
            how = None
        if isinstance(how, dict):
            return how
        assert time.monotonic() < deadline, f"no priority in {path}"
        time.sleep(0.2)


def _niceness_becomes(pid: int, wanted: int, within_s: float = 20.0,
                      of: Callable[[int], int | None] | None = None) -> bool:
    """Whether process `pid` runs at niceness `wanted` (`of`: its own, or its session group's) within
    `within_s` (it sets its own as it starts)."""
    of = of or functools.partial(os.getpriority, os.PRIO_PROCESS)
    deadline = time.monotonic() + within_s
    while of(pid) != wanted:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _commands_go_through_the_gateway(stack: Stack, status: dict[str, Any]) -> dict[str, Any]:
    """`up` records its command gateway as ``commands_api``; the CLI sent its commands there. While
    the gateway is away the API takes them, and the next `up` restarts it (docs/local-stack.md).
    Returns the stack's status after the restart."""
    gateway = status["services"]["gateway-g1"]
    assert gateway["ready"] is True
    config = json.loads((stack.home / "config.json").read_text())
    assert config["commands_api"] == gateway["url"] != config["api"]
    taken = lag.scrape(gateway["metrics_url"], timeout_s=30)["watchtower_http_requests_total"]
    assert sum(v for labels, v in taken if labels["route"] == "/v1/commands" and labels["status"] == "200") >= 2
    os.kill(gateway["pid"], signal.SIGTERM)
    wait_until("the gateway to exit", lambda: _gone(gateway["pid"]), timeout_s=60)
    published = stack.wt("feed", "1", "publish", "--kind", "t", "--data", '{"x": 3}')
    assert published.returncode == 0, published.stderr
    code, degraded = stack.status()
    assert code != 0
    assert degraded["services"]["gateway-g1"]["state"] == "dead"
    again = stack.up()
    assert again.returncode == 0, again.stderr
    assert "restarted gateway-g1" in again.stdout
    code, restarted = stack.status()
    assert code == 0
    assert restarted["services"]["gateway-g1"]["running"] is True
    return restarted


def _status_shows_lag_and_metrics(stack: Stack) -> None:
    """`status` reads every worker group's lag and the projection's fold lag (docs/operations.md):
    0 once the publish is folded everywhere, and past `--max-lag 0` (exit 4) while the delivery
    worker is stopped and a message waits for it (it catches up by itself after SIGCONT)."""
    # Exits 4 while anything lags.
    body = json.loads(_until_ok(stack, "status", "--json", "--max-lag", "0", "--max-lag-seconds", "0").stdout)
    assert body["lagging"] == []
    assert len(body["lag"]["groups"]) == 4  # stream, delivery and replay workers, and the projections' folds
    assert all(g["lag"] == 0 and g["exact"] for g in body["lag"]["groups"]), body["lag"]
    assert body["lag"]["projections"]["projection-p1"] == {"records": 0, "seconds": 0}
    assert all(s["metrics_url"].endswith("/metrics") for s in body["services"].values())
    delivery = body["services"]["delivery-d1"]["pid"]
    os.kill(delivery, signal.SIGSTOP)
    try:
        published = stack.wt("feed", "1", "publish", "--kind", "t", "--data", '{"x": 2}')
        assert published.returncode == 0, published.stderr
        lagging = stack.wt("status", "--max-lag", "0")
        assert lagging.returncode == 4, lagging.stdout
        assert "LAGGING  group wt-" in lagging.stdout
        assert ".delivery-worker lags" in lagging.stdout
    finally:
        os.kill(delivery, signal.SIGCONT)


def test_status_reports_a_killed_broker_and_up_restarts_it_and_the_api_serves_again(running: Stack) -> None:
    _, before = running.status()
    running.broker.kill_node(1, signal.SIGKILL)
    code, status = running.status()
    assert code == 1, "a dead broker makes the stack degraded"
    assert status["state"] == "degraded"
    assert status["kafka"]["alive"] is False
    assert status["kafka"]["reachable"] is False
    text = running.wt("status")
    assert text.returncode == 1
    assert "DEAD" in text.stdout

    up = running.up()
    assert up.returncode == 0, up.stderr
    assert "restarted kafka" in up.stdout
    code, status = running.status()
    assert code == 0, status
    assert status["kafka"]["reachable"] is True
    assert _pids(status) == _pids(before), "the live workers and projection were left alone"
    # The API answers from the log the restarted broker kept.
    head = _until_ok(running, "feed", "1", "get-head", "--json")
    body = json.loads(head.stdout)
    assert body["stream_id"].startswith("s-")
    assert body["head"] >= 0


def test_status_reports_a_hung_broker_as_alive_but_not_answering(running: Stack) -> None:
    pid = running.broker.status()["nodes"][0]["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        code, status = running.status()
    finally:
        os.kill(pid, signal.SIGCONT)
    assert code == 1
    assert status["kafka"]["alive"] is True
    assert status["kafka"]["reachable"] is False
    assert status["kafka"]["error"]
    wait_until("the resumed broker to answer again", lambda: running.status()[0] == 0, timeout_s=60, every_s=0.5)


def test_up_restarts_only_a_killed_worker(running: Stack) -> None:
    _, before = running.status()
    worker_pid = before["services"]["worker-w1"]["pid"]
    os.kill(worker_pid, signal.SIGKILL)
    wait_until("the worker killed with SIGKILL to exit", lambda: _gone(worker_pid), timeout_s=30, every_s=0.05)
    code, status = running.status()
    assert code == 1
    assert status["services"]["worker-w1"]["state"] == "dead"
    assert status["services"]["projection-p1"]["state"] == "running"
    assert status["kafka"]["reachable"] is True
    # Changing the plan of a live stack is refused instead of half-applied.
    refused = running.up("--workers", "2")
    assert refused.returncode == 1
    assert "watchtower down --keep-kafka" in refused.stderr

    up = running.up()
    assert up.returncode == 0, up.stderr
    assert "restarted worker-w1" in up.stdout
    code, after = running.status()
    assert code == 0
    assert after["services"]["worker-w1"]["pid"] != worker_pid
    assert after["services"]["projection-p1"]["pid"] == before["services"]["projection-p1"]["pid"]
    assert after["kafka"]["nodes"] == before["kafka"]["nodes"], "the broker was left alone"
    # The new worker serves: a command is applied. It takes the partitions once the group has
    # dropped the killed member (its 10 s session timeout), so the first try may time out.
    _until_ok(running, "feed", "1", "publish", "--kind", "t", "--data", '{"x": 2}')


def test_down_after_down_keep_kafka_stops_the_broker(fresh: Stack) -> None:
    assert fresh.up().returncode == 0
    _, status = fresh.status()
    kept = fresh.wt("down", "--keep-kafka")
    assert kept.returncode == 0, kept.stderr
    assert all(_gone(pid) for pid in _pids(status).values())
    assert fresh.broker.status()["state"] == "running"
    code, between = fresh.status()
    assert code == 1
    assert {s["state"] for s in between["services"].values()} == {"stopped"}

    down = fresh.wt("down")
    assert down.returncode == 0, down.stderr
    assert fresh.broker.status()["state"] == "stopped"
    assert fresh.status()[0] == 3


def test_down_after_a_failed_up_stops_the_broker(fresh: Stack) -> None:
    # Make `up` fail after it started the broker: a topic of the catalogue exists with the wrong
    # partition count, so creating the topics is refused.
    broker = fresh.broker
    broker.up()
    name = catalogue(topic_prefix(), partitions=2)[0].name
    # `watchtower up` without --secure runs a plaintext broker, whatever the suite's own broker is.
    admin = AdminClient({"bootstrap.servers": broker.spec.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=30)
    broker.down()

    failed = fresh.up()
    assert failed.returncode == 1
    assert "partitions" in failed.stderr
    assert broker.status()["state"] == "running", "precondition: the failed up started the broker"
    down = fresh.wt("down")
    assert down.returncode == 0, down.stderr
    assert broker.status()["state"] == "stopped"


def test_up_projections_2_runs_two_projection_processes_that_status_lists_and_down_stops(fresh: Stack) -> None:
    up = fresh.up("--projections", "2", "--bind", "0.0.0.0")  # noqa: S104 (the warning is under test)
    assert up.returncode == 0, up.stderr
    assert up.stderr.count("reachable from the network") == 1
    code, status = fresh.status()
    assert code == 0, status
    projections = {name: s for name, s in status["services"].items() if s["kind"] == "projection"}
    assert set(projections) == {"projection-p1", "projection-p2"}
    assert projections["projection-p1"]["port"] == fresh.api_port
    assert projections["projection-p2"]["port"] != fresh.api_port
    assert len({s["pid"] for s in projections.values()}) == 2
    for s in projections.values():
        assert s["running"] is True
        assert s["ready"] is True
        env = _environ(s["pid"])
        assert env["WATCHTOWER_WEB_BIND"] == "0.0.0.0"  # noqa: S104
        assert env["WATCHTOWER_FAUST_DATADIR"].endswith(".data")
    datadirs = {_environ(s["pid"])["WATCHTOWER_FAUST_DATADIR"] for s in projections.values()}
    assert len(datadirs) == 2, "each projection has its own Faust data directory"

    down = fresh.wt("down")
    assert down.returncode == 0, down.stderr
    # 1 worker, 2 projections, the command gateway, key manager, replay, delivery, ingestion and its two runners
    assert "stopped 10 service process(es)" in down.stdout
    assert all(_gone(s["pid"]) for s in projections.values())
