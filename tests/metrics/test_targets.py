"""`python -m watchtower.metrics.targets [LOG_DIR]`: Prometheus file discovery from the address files
every process of a local stack writes, by default those under ``$WATCHTOWER_HOME/stack/logs``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from watchtower.metrics.targets import main


def _address_file(directory: Path, process: str, service: str, url: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{process}.metrics.json").write_text(json.dumps({"service": service, "url": url, "pid": 1}))


def test_without_a_folder_it_reads_the_recorded_stack_under_the_home(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("WATCHTOWER_HOME", str(tmp_path))
    _address_file(tmp_path / "stack" / "logs", "worker-w1", "worker", "http://127.0.0.1:41001/metrics")
    (tmp_path / "stack" / "logs" / "broken.metrics.json").write_text("{")
    assert main([]) == 0
    assert json.loads(capsys.readouterr().out) == [{
        "targets": ["127.0.0.1:41001"],
        "labels": {"job": "watchtower-worker", "__metrics_path__": "/metrics", "process": "worker-w1"}}]


def test_a_folder_given_is_read_instead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("WATCHTOWER_HOME", str(tmp_path / "home"))
    _address_file(tmp_path / "home" / "stack" / "logs", "worker-w1", "worker", "http://127.0.0.1:41001/metrics")
    _address_file(tmp_path / "elsewhere", "gateway-g1", "gateway", "http://127.0.0.1:41002/metrics")
    assert main([str(tmp_path / "elsewhere")]) == 0
    assert [g["labels"]["process"] for g in json.loads(capsys.readouterr().out)] == ["gateway-g1"]
