"""A test that talks to a broker without the `integration` marker fails collection (tests/broker_markers.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

CONFTEST = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
import pytest
from broker_markers import pytest_collection_modifyitems  # noqa: F401

@pytest.fixture(scope="session")
def kafka_bootstrap():
    return "127.0.0.1:1"  # never reached: collection is all these tests run
"""

MARKERS = """
[pytest]
markers =
    integration: talks to a broker
    no_broker: uses a helper without reaching a broker
"""


def _collect(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "pytest.ini").write_text(MARKERS)
    (tmp_path / "test_probe.py").write_text(body)
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
                          # The installed plugins (schemathesis, hypothesis, ...) are not what this checks.
                          env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})


def test_a_test_using_the_session_broker_without_the_marker_fails_collection(tmp_path: Path) -> None:
    proc = _collect(tmp_path, "def test_reads(kafka_bootstrap):\n    assert kafka_bootstrap\n")
    assert proc.returncode != 0, proc.stdout
    assert "test_probe.py::test_reads" in proc.stderr + proc.stdout
    assert "without the `integration` marker" in proc.stderr + proc.stdout


def test_a_test_calling_a_stack_helper_without_the_marker_fails_collection(tmp_path: Path) -> None:
    body = ("def start_stack(*a):\n    raise AssertionError\n\n"
            "def test_stack(tmp_path):\n    start_stack('127.0.0.1:1', tmp_path)\n")
    proc = _collect(tmp_path, body)
    assert proc.returncode != 0, proc.stdout
    assert "test_probe.py::test_stack" in proc.stderr + proc.stdout


def test_marked_broker_tests_and_tests_without_a_broker_collect(tmp_path: Path) -> None:
    body = ("import pytest\n\n"
            "@pytest.mark.integration\ndef test_reads(kafka_bootstrap):\n    assert kafka_bootstrap\n\n"
            "def test_pure():\n    assert 1 + 1 == 2\n\n"
            "def start_stack(*a):\n    raise AssertionError\n\n"
            "@pytest.mark.no_broker\ndef test_refused_before_start():\n    start_stack()\n")
    proc = _collect(tmp_path, body)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 tests collected" in proc.stdout
