"""The ingestion CLI's refusals under --json, before anything reaches the network."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from watchtower.cli import main as cli_main


def run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["watchtower", *args])
    with pytest.raises(SystemExit) as exit_:
        cli_main.main()
    return int(exit_.value.code or 0), capsys.readouterr().out


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHTOWER_HOME", str(tmp_path))
    monkeypatch.setenv("WATCHTOWER_API", "http://127.0.0.1:9")


@pytest.mark.parametrize(("args", "needle"), [
    (["--ingest-url", "file:///etc/passwd"], "http:// or https://"),
    (["--ingest-url", "http://x/", "--ingest-select", "$..price"], "selection path"),
    (["--ingest-url", "http://x/", "--result-schema", '{"type": 5}'], "JSON Schema"),
])
def test_an_ingestion_config_that_cannot_run_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str], args: list[str],
                                                        needle: str) -> None:
    code, out = run(monkeypatch, capsys, "new", "feed", "--name", "n", *args, "--json")
    error = json.loads(out)["error"]
    assert code != 0
    assert error["code"] == "INVALID_ARGUMENT"
    assert needle in error["message"]


def test_ingestion_flags_need_an_ingest_url(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(monkeypatch, capsys, "new", "feed", "--name", "n", "--proof", "MEDIAN", "--json")
    assert code == 2
    assert "--ingest-url" in json.loads(out)["error"]["message"]
