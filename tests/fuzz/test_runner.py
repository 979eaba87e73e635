"""The fuzz runner's own machinery: the coverage-guided harness runs, and a crash is named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fuzz.run import CORPUS, _crash_signature

ROOT = Path(__file__).resolve().parents[2]

ATHERIS_CRASH_LOG = """\
INFO: Seed: 1
 === Uncaught Python exception: ===
IndexError: string index out of range
Traceback (most recent call last):
  File "/repo/fuzz/targets.py", line 135, in checked
  File "/repo/watchtower/protocol/snapshots.py", line 135, in _stream_from
IndexError: string index out of range
==31844== ERROR: libFuzzer: fuzz target exited
"""


def test_a_crash_is_named_by_its_exception_and_innermost_watchtower_frame() -> None:
    signature = _crash_signature(ATHERIS_CRASH_LOG)
    assert signature.startswith("IndexError: string index out of range at ")
    assert "snapshots.py\", line 135" in signature


def test_a_crash_without_a_python_traceback_keeps_libfuzzers_reason_without_the_pid() -> None:
    assert _crash_signature("==77== ERROR: libFuzzer: out-of-memory (used: 4097Mb)\n") == \
        "ERROR: libFuzzer: out-of-memory (used: 4097Mb)"


def test_the_coverage_guided_harness_runs_a_decoder_from_its_committed_corpus(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fuzz.harness", "reply", "-runs=500", "-seed=7", f"-artifact_prefix={tmp_path}/",
         str(tmp_path), str(CORPUS / "reply")],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Done 500 runs" in done.stderr
    assert not list(tmp_path.glob("crash-*"))
