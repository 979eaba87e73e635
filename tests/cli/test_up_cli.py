"""`watchtower up`, `status`, `down`: the whole stack from the CLI, on its own broker and ports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kafka_fixture import free_port_block, free_ports

pytestmark = pytest.mark.integration


def _wt(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "WATCHTOWER_HOME": str(home)}
    env.pop("WATCHTOWER_API", None)
    return subprocess.run([sys.executable, "-m", "watchtower.cli", *args], env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def test_up_runs_broker_workers_and_api_then_down_stops_them(tmp_path: Path) -> None:
    port, cport, api_port = free_port_block(1), free_port_block(1), free_ports(1)[0]
    up = _wt(tmp_path, "up", "--port", str(port), "--controller-port", str(cport), "--api-port", str(api_port),
             "--partitions", "2")
    try:
        assert up.returncode == 0, up.stderr
        status = json.loads(_wt(tmp_path, "status", "--json").stdout)
        assert status["api_url"] == f"http://127.0.0.1:{api_port}"
        assert {name: s["running"] for name, s in status["services"].items()} == {
            "worker-w1": True, "projection-p1": True}
        # The CLI finds the recorded API without flags: create a feed and read it back.
        assert _wt(tmp_path, "account", "new").returncode == 0
        created = _wt(tmp_path, "new", "feed", "--name", "up-test", "--json")
        assert created.returncode == 0, created.stderr
        assert json.loads(created.stdout)["feed_id"] == 1
        published = _wt(tmp_path, "feed", "1", "publish", "--kind", "t", "--data", '{"x": 1}')
        assert published.returncode == 0, published.stderr
        head = json.loads(_wt(tmp_path, "feed", "1", "get-head", "--json").stdout)
        assert head["head"] == 1
        again = _wt(tmp_path, "up", "--port", str(port), "--controller-port", str(cport), "--api-port", str(api_port))
        assert "already up" in again.stdout
    finally:
        down = _wt(tmp_path, "down")
    assert down.returncode == 0, down.stderr
    after = json.loads(_wt(tmp_path, "status", "--json").stdout)
    assert after["services"] == {}
    pids = json.loads(json.dumps(status["services"]))
    for s in pids.values():
        assert not Path(f"/proc/{s['pid']}").exists() or "zombie" in Path(f"/proc/{s['pid']}/status").read_text()
