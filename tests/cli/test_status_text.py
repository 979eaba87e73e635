"""`watchtower status` in its text form: every kind of service the stack plans is printed.

Pure: the record names services of every kind and no process runs, so the report is built from
the record alone (the broker is "stopped", every service "stopped" or "dead").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from watchtower.cli import status_cmd
from watchtower.cli.main import _register, cli
from watchtower.local.supervisor import ServiceRecord, StackRecord


def _record(tmp_path: Path) -> StackRecord:
    services = [
        ServiceRecord("worker-w1", "worker", "w1"),
        ServiceRecord("projection-p1", "projection", "p1", 18080),
        ServiceRecord("keymgr-k1", "keymgr", "k1", 18772),
        ServiceRecord("replay-r1", "replay", "r1"),
        ServiceRecord("delivery-d1", "delivery", "d1", None, 999_999_999),  # a pid that died
    ]
    return StackRecord(19092, 19093, "wt", 4, 18080, "127.0.0.1", str(tmp_path / "logs"),
                       {s.name: s for s in services})


@pytest.fixture
def record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StackRecord:
    monkeypatch.setenv("WATCHTOWER_HOME", str(tmp_path / "home"))
    rec = _record(tmp_path)
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "worker-w1.health.json").write_text(json.dumps({"state": "running", "quarantined": 0}))
    _register()
    monkeypatch.setattr(status_cmd.StackRecord, "load", classmethod(lambda _cls, _path=None: rec))
    return rec


def test_status_text_prints_every_service_kind_without_crashing(record: StackRecord) -> None:
    """Failed before the fix with KeyError: 'health' (the key manager has a URL, not a health file)."""
    result = CliRunner().invoke(cli, ["status"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code == 1, result.output  # degraded: nothing runs
    out = result.output
    for name in record.services:
        assert name in out
    assert "http://127.0.0.1:18772" in out  # the key manager's URL
    assert "DEAD" in out  # the delivery worker
    assert "some parts are down" in out


def test_status_json_and_text_name_the_same_services(record: StackRecord) -> None:
    body = json.loads(CliRunner().invoke(cli, ["status", "--json"]).output)
    text = CliRunner().invoke(cli, ["status"]).output
    assert set(body["services"]) == set(record.services)
    assert all(name in text for name in body["services"])
