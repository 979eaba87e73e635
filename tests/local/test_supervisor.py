"""`watchtower status` without a broker: process identity, worker health files, exit codes, the record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from api_calls import wait_for
from click.testing import CliRunner
from kafka_fixture import free_port_block

from watchtower.cli.status_cmd import status
from watchtower.local.stack import WORKER_MODULE, connect_host, is_loopback
from watchtower.local.supervisor import (
    EXIT_DEGRADED,
    EXIT_NOT_UP,
    ServiceRecord,
    StackRecord,
    process_runs,
    process_start_ticks,
    read_health,
)


def _cmdline(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


@pytest.fixture
def stand_in_worker() -> Iterator[subprocess.Popen[bytes]]:
    """A process whose command line names the worker module and id, as a real worker's does."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", WORKER_MODULE, "w1"])
    # Right after Popen the child may not have finished its exec: /proc/PID/cmdline can still be
    # the parent's argv, or empty. Wait until it names the module, as a started worker's does.
    wait_for(lambda: WORKER_MODULE.encode() in _cmdline(proc.pid), 30, "the stand-in worker's exec")
    yield proc
    proc.kill()
    proc.wait(10)


def _record(home: Path, worker_pid: int | None) -> StackRecord:
    # Ports nobody listens on: the broker is recorded but was never started.
    port = free_port_block(1)
    record = StackRecord(port, port + 1, "wt", 2, free_port_block(1), "127.0.0.1", str(home / "stack" / "logs"))
    record.services = {"worker-w1": ServiceRecord("worker-w1", "worker", "w1", pid=worker_pid)}
    return record


def _status(home: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str]:
    monkeypatch.setenv("WATCHTOWER_HOME", str(home))
    result = CliRunner().invoke(status, list(args))
    return result.exit_code, result.output


def test_a_live_pid_running_another_program_is_not_counted_as_the_worker(
        stand_in_worker: subprocess.Popen[bytes]) -> None:
    assert process_runs(stand_in_worker.pid, WORKER_MODULE, "w1")
    assert not process_runs(stand_in_worker.pid, WORKER_MODULE, "w2"), "another worker id"
    assert not process_runs(stand_in_worker.pid, "watchtower.api.main", "w1"), "another module"


# A process that has been forked but has not exec'd its program yet: it reads one byte from stdin,
# then execs the stand-in worker. Until then its command line names neither module nor worker id.
EXEC_LATER = ("import os, sys; sys.stdin.read(1); os.execv(sys.executable, "
              "[sys.executable, '-c', 'import time; time.sleep(120)', os.environ['STAND_IN_MODULE'], 'w1'])")


def test_a_worker_started_a_moment_ago_is_running_before_its_exec_shows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`watchtower up` records a pid right after the spawn, before the child's exec may show in
    /proc/PID/cmdline: `status` (and `up` deciding what to restart) still counts it as running,
    before and after the exec; a recorded pid whose start time differs is not the worker."""
    proc = subprocess.Popen([sys.executable, "-c", EXEC_LATER], stdin=subprocess.PIPE,
                            env={**os.environ, "STAND_IN_MODULE": WORKER_MODULE})
    try:
        record = _record(tmp_path, None)
        record.services["worker-w1"].attach(proc.pid)
        assert WORKER_MODULE.encode() not in _cmdline(proc.pid)  # the state right after the spawn
        assert record.services["worker-w1"].alive()
        code, out = _status(tmp_path, monkeypatch, "--json")
        assert code == EXIT_NOT_UP  # nothing recorded yet: save it, as `up` does
        record.save()
        code, out = _status(tmp_path, monkeypatch, "--json")
        assert json.loads(out)["services"]["worker-w1"]["state"] == "running"
        assert proc.stdin is not None
        proc.stdin.write(b"x")
        proc.stdin.flush()
        wait_for(lambda: WORKER_MODULE.encode() in _cmdline(proc.pid), 30, "the exec of the stand-in worker")
        assert record.services["worker-w1"].alive()
        # The same pid with another start time is another process (a pid reused after a reboot or a wrap).
        other = ServiceRecord("worker-w1", "worker", "w1", pid=proc.pid,
                              started=(process_start_ticks(proc.pid) or 0) + 1)
        assert not other.alive()
    finally:
        proc.kill()
        proc.wait(10)


def test_health_file_missing_corrupt_stale_and_current(tmp_path: Path) -> None:
    path = tmp_path / "worker-w1.health.json"
    assert read_health(path, 42) is None
    path.write_text('{"worker": "w1", "pid": 4')
    assert "unreadable" in read_health(path, 42)["error"]  # type: ignore[index]
    path.write_text("[1, 2]")
    assert "unreadable" in read_health(path, 42)["error"]  # type: ignore[index]
    body = {"worker": "w1", "pid": 42, "state": "serving", "partitions": [0, 1], "quarantined": 2,
            "last_quarantined": [{"topic": "wt.events", "partition": 0, "offset": 7, "reason": "r"}],
            "aborted_batches": 0, "lane_yields": 4, "updated_ms": 1}
    path.write_text(json.dumps(body))
    assert read_health(path, 42) == {**body, "stale": False}
    assert read_health(path, 43)["stale"] is True  # type: ignore[index]


def test_status_shows_worker_health_and_tolerates_a_corrupt_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stand_in_worker: subprocess.Popen[bytes]) -> None:
    record = _record(tmp_path, stand_in_worker.pid)
    monkeypatch.setenv("WATCHTOWER_HOME", str(tmp_path))
    record.save()
    health = Path(record.log_dir) / "worker-w1.health.json"
    health.parent.mkdir(parents=True)
    health.write_text(json.dumps({"worker": "w1", "pid": stand_in_worker.pid, "state": "serving",
                                  "partitions": [0], "quarantined": 3, "last_quarantined": None,
                                  "updated_ms": 1}))
    code, out = _status(tmp_path, monkeypatch)
    assert code == EXIT_DEGRADED, "the recorded broker is not running"
    assert "state serving, quarantined 3" in out
    code, out = _status(tmp_path, monkeypatch, "--json")
    assert code == EXIT_DEGRADED
    worker = json.loads(out)["services"]["worker-w1"]
    assert worker["running"] is True
    assert worker["health"]["state"] == "serving"
    assert worker["health"]["quarantined"] == 3
    assert worker["health"]["stale"] is False

    health.write_text("{not json")
    code, out = _status(tmp_path, monkeypatch)
    assert code == EXIT_DEGRADED
    assert "unreadable health file" in out
    health.unlink()
    code, out = _status(tmp_path, monkeypatch, "--json")
    assert code == EXIT_DEGRADED
    assert json.loads(out)["services"]["worker-w1"]["health"] is None


def test_status_exit_codes_not_up_and_degraded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               stand_in_worker: subprocess.Popen[bytes]) -> None:
    code, out = _status(tmp_path, monkeypatch, "--json")
    assert code == EXIT_NOT_UP
    assert json.loads(out)["services"] == {}
    monkeypatch.setenv("WATCHTOWER_HOME", str(tmp_path))
    _record(tmp_path, stand_in_worker.pid).save()
    code, out = _status(tmp_path, monkeypatch, "--json")
    body = json.loads(out)
    # The worker runs but the recorded broker does not: the stack is degraded, and says why.
    assert code == EXIT_DEGRADED
    assert body["state"] == "degraded"
    assert body["kafka"]["alive"] is False
    assert body["kafka"]["reachable"] is False
    assert body["services"]["worker-w1"]["state"] == "running"
    code, out = _status(tmp_path, monkeypatch)
    assert code == EXIT_DEGRADED
    assert "DEAD" in out


def test_record_round_trips_and_reads_the_previous_format(tmp_path: Path) -> None:
    record = _record(tmp_path, 123)
    record.plan(workers=2, projections=3)
    record.save(tmp_path / "r.json")
    again = StackRecord.load(tmp_path / "r.json")
    assert again == record
    ports = [s.port for s in record.services.values() if s.kind == "projection"]
    assert ports[0] == record.api_port
    assert len(set(ports)) == 3
    assert record.port not in ports
    (tmp_path / "v1.json").write_text(json.dumps({
        "bootstrap": "127.0.0.1:9092", "port": 9092, "controller_port": 19092, "prefix": "wt",
        "api_url": "http://127.0.0.1:8470", "pids": {"worker-w1": 11, "projection-p1": 12}, "logs": "/x"}))
    old = StackRecord.load(tmp_path / "v1.json")
    assert old is not None
    assert old.services["projection-p1"].port == 8470
    assert old.services["worker-w1"].pid == 11
    (tmp_path / "bad.json").write_text("{")
    assert StackRecord.load(tmp_path / "bad.json") is None


def test_only_loopback_binds_count_as_local() -> None:
    assert is_loopback("127.0.0.1")
    assert is_loopback("::1")
    assert is_loopback("localhost")
    assert not is_loopback("0.0.0.0")  # noqa: S104
    assert not is_loopback("192.168.1.5")
    assert connect_host("0.0.0.0") == "127.0.0.1"  # noqa: S104
    assert connect_host("192.168.1.5") == "192.168.1.5"
    assert connect_host("fe80::1") == "[fe80::1]"


def test_status_shows_the_ingestion_service_progress_and_send_window(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stand_in_worker: subprocess.Popen[bytes]) -> None:
    record = _record(tmp_path, stand_in_worker.pid)
    record.services["ingest"] = ServiceRecord("ingest", "ingest", "ingest", pid=None)  # stopped: its last file
    monkeypatch.setenv("WATCHTOWER_HOME", str(tmp_path))
    record.save()
    health = Path(record.log_dir) / "ingest.health.json"
    health.parent.mkdir(parents=True)
    window = {"limit": 40, "in_flight": 37, "held": 12, "base_rtt_ms": 10.5}
    health.write_text(json.dumps({"pid": 4242, "tasks": 900, "published": 880, "pending": 15,
                                  "failed": {"TIMEOUT": 2, "SOURCE_ERROR": 3},
                                  "tick_to_ack_ms": {"p50": 310, "p99": 640},
                                  "window": window, "quarantined": {}, "streams": ["0x01"] * 500}))
    code, out = _status(tmp_path, monkeypatch, "--json")
    assert code == EXIT_DEGRADED, "the recorded broker is not running"
    ingest = json.loads(out)["services"]["ingest"]["health"]
    assert ingest["window"] == window
    assert (ingest["published"], ingest["pending"], ingest["failed"]) == (880, 15, {"TIMEOUT": 2, "SOURCE_ERROR": 3})
    assert "streams" not in ingest, "a list of every feed is the health file's, not the status line's"
    _, out = _status(tmp_path, monkeypatch)
    assert "published 880, pending 15, failed 5; send window 37/40 in flight, 12 held, base round trip 10.5 ms" in out
    health.write_text(json.dumps({"pid": 4242, "published": 1, "failed": {"TIMEOUT": "many"}, "window": {"limit": 2}}))
    _, out = _status(tmp_path, monkeypatch)
    assert "published 1, pending ?, failed 0; send window ?/2 in flight" in out, "an odd file is shown, not a crash"
