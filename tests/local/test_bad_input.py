"""Every user mistake around the local broker is one actionable line, never a traceback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from kafka_fixture import embedded_spec

from watchtower.local.broker import LocalKafka
from watchtower.local.data_dir import MARKER
from watchtower.local.errors import LocalStackError
from watchtower.local.jars import Bundle, ensure_bundle

WATCHTOWER = [sys.executable, "-c", "from watchtower.cli.main import main; main()"]


def _cli(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*WATCHTOWER, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})}, check=False)


def _assert_one_line(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0]


@pytest.mark.integration
def test_port_in_use(tmp_path: Path) -> None:
    spec = embedded_spec(tmp_path / "k")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", spec.port))
        holder.listen()
        proc = _cli(["local", "up", "--port", str(spec.port), "--controller-port", str(spec.controller_port),
                     "--data-dir", str(spec.data_dir)])
    _assert_one_line(proc, f"port {spec.port}", "already in use", "--port")


def test_foreign_data_dir(tmp_path: Path) -> None:
    spec = embedded_spec(tmp_path / "k")
    spec.data_dir.mkdir()
    (spec.data_dir / "someone-elses.db").write_text("x")
    proc = _cli(["local", "up", "--port", str(spec.port), "--data-dir", str(spec.data_dir)])
    _assert_one_line(proc, "not made by Watchtower", "--data-dir")


@pytest.mark.no_broker
def test_corrupt_marker(tmp_path: Path) -> None:
    spec = embedded_spec(tmp_path / "k")
    spec.data_dir.mkdir()
    (spec.data_dir / MARKER).write_text("{not json")
    with pytest.raises(LocalStackError, match=r"corrupt.*--data-dir"):
        LocalKafka(spec).up()


@pytest.mark.no_broker
def test_storage_of_another_cluster_is_refused(tmp_path: Path) -> None:
    spec = embedded_spec(tmp_path / "k")
    node = spec.node_specs[0]
    node.log_dirs.mkdir(parents=True)
    (spec.data_dir / MARKER).write_text(json.dumps({"cluster_id": "AAAA", "nodes": 1}))
    (node.log_dirs / "meta.properties").write_text("cluster.id=BBBB\nnode.id=1\nversion=1\n")
    with pytest.raises(LocalStackError, match="another cluster"):
        LocalKafka(spec).up()


def test_java_missing(tmp_path: Path) -> None:
    spec = embedded_spec(tmp_path / "k")
    proc = _cli(["local", "up", "--port", str(spec.port), "--data-dir", str(spec.data_dir)],
                env={"PATH": str(Path(sys.executable).parent)})
    _assert_one_line(proc, "java is not installed", "Install it")


def test_maven_missing(tmp_path: Path) -> None:
    proc = _cli(["local", "up", "--data-dir", str(tmp_path / "k")],
                env={"PATH": str(Path(sys.executable).parent) + ":/usr/bin/../lib/jvm/default-java/bin",
                     "WATCHTOWER_CACHE": str(tmp_path / "empty-cache")})
    # Depending on the machine, java may be missing from that PATH too; either tool is named.
    _assert_one_line(proc, "is not installed")


def test_maven_fetch_failure_names_the_artifact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHTOWER_CACHE", str(tmp_path / "cache"))
    bogus = Bundle("bogus", "0", ("org.apache.kafka:kafka_2.13:0.0.0-does-not-exist",))
    with pytest.raises(LocalStackError) as info:
        ensure_bundle(bogus)
    message = str(info.value)
    assert "failed" in message
    assert "retry" in message
    assert "\n" not in message
    assert not (tmp_path / "cache" / "jars" / "bogus-0" / ".complete").exists()
