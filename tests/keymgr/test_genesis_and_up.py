"""Genesis secrets are created once, owner-only; `watchtower up` runs the key manager and tells the workers."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from api_calls import http
from kafka_fixture import free_port_block, free_ports

from watchtower.cli.genesis import ensure_genesis
from watchtower.keymgr.kek import read_kek_file
from watchtower.local.broker import LocalKafka
from watchtower.local.config import ClusterSpec
from watchtower.protocol.addresses import is_address


def test_genesis_is_created_once_with_owner_only_files(tmp_path: Path) -> None:
    first = ensure_genesis(tmp_path)
    directory = tmp_path / "genesis"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    for name in ("minter.key", "treasury.key", "kek.key"):
        assert stat.S_IMODE((directory / name).stat().st_mode) == 0o600, name
    assert is_address(first.minter_address)
    assert is_address(first.protocol_treasury)
    assert first.minter_address != first.protocol_treasury
    assert first.keymgr_public_key == read_kek_file(first.kek_path).receipt_public_key()
    assert ensure_genesis(tmp_path) == first  # never regenerated
    env = first.worker_env()
    assert env["WATCHTOWER_KEYMGR_PUBLIC_KEY"] == first.keymgr_public_key.hex()
    assert first.kek_path.read_text().strip() not in json.dumps(env)


def test_genesis_refuses_a_kek_file_someone_loosened(tmp_path: Path) -> None:
    ensure_genesis(tmp_path)
    (tmp_path / "genesis" / "kek.key").chmod(0o644)
    with pytest.raises(Exception, match="chmod 600"):
        ensure_genesis(tmp_path)


@pytest.fixture
def home(tmp_path: Path) -> Iterator[tuple[Path, int, int, int]]:
    port, cport, api = free_port_block(1), free_port_block(1), free_ports(1)[0]
    yield tmp_path, port, cport, api
    _wt(tmp_path, "down")
    LocalKafka(ClusterSpec(tmp_path / "local" / f"kafka-{port}", port, cport)).down()


def _wt(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "WATCHTOWER_HOME": str(home)}
    for name in (
        "WATCHTOWER_API",
        "WATCHTOWER_WEB_BIND",
        "WATCHTOWER_BOOTSTRAP",
        "WATCHTOWER_PROTOCOL_TREASURY",
        "WATCHTOWER_KEYMGR_PUBLIC_KEY",
        "WATCHTOWER_CBY_MINTER",
        "WATCHTOWER_KEYMGR_KEK",
    ):
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "watchtower.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


@pytest.mark.integration
@pytest.mark.parametrize("mode", [[], ["--secure"]], ids=["plaintext", "secure"])
def test_up_starts_the_key_manager_and_gives_the_workers_the_genesis(home: Any, mode: list[str]) -> None:
    path, port, cport, api = home
    where = ["--port", str(port), "--controller-port", str(cport), "--api-port", str(api), "--partitions", "2"]
    up = _wt(path, "up", *where, *mode)
    assert up.returncode == 0, up.stderr
    genesis = ensure_genesis(path)
    config = json.loads((path / "config.json").read_text())
    status, body = http("GET", f"{config['keymgr_url']}/v1/keymgr/public-key")
    assert status == 200, body
    assert body["public_key_hex"] == genesis.keymgr_public_key.hex()
    report = json.loads(_wt(path, "status", "--json").stdout)
    assert report["services"]["keymgr"]["running"] is True
    worker_env = _environ(report["services"]["worker-w1"]["pid"])
    assert worker_env["WATCHTOWER_PROTOCOL_TREASURY"] == genesis.protocol_treasury
    assert worker_env["WATCHTOWER_CBY_MINTER"] == genesis.minter_address
    assert worker_env["WATCHTOWER_KEYMGR_PUBLIC_KEY"] == genesis.keymgr_public_key.hex()
    keymgr_env = _environ(report["services"]["keymgr"]["pid"])
    assert keymgr_env["WATCHTOWER_KEYMGR_KEK_FILE"] == str(genesis.kek_path)
    # A secure stack's key manager connects as the service principal, like the workers.
    assert keymgr_env.get("WATCHTOWER_KAFKA_CREDENTIALS") == worker_env.get("WATCHTOWER_KAFKA_CREDENTIALS")
    assert ("WATCHTOWER_KAFKA_CREDENTIALS" in keymgr_env) == bool(mode)
    # So does the command gateway `up` runs apart, which answered ready (up waits for it).
    gateway = report["services"]["gateway-g1"]
    assert gateway["ready"] is True
    assert config["commands_api"] == gateway["url"]
    gateway_env = _environ(gateway["pid"])
    assert gateway_env.get("WATCHTOWER_KAFKA_CREDENTIALS") == worker_env.get("WATCHTOWER_KAFKA_CREDENTIALS")
    kek_text = genesis.kek_path.read_text().strip()
    assert all(kek_text not in value for value in worker_env.values())
    assert kek_text not in up.stdout + up.stderr
    down = _wt(path, "down")
    assert down.returncode == 0, down.stderr
    assert json.loads(_wt(path, "status", "--json").stdout)["services"] == {}
