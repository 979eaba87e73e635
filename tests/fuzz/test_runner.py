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
  File "/repo/watchtower/protocol/stream/snapshots.py", line 135, in _stream_from
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


def test_a_failure_of_the_harness_itself_is_not_blamed_on_a_decoder() -> None:
    log = ("Traceback (most recent call last):\n"
           "  File \"fuzz/json_mutator.py\", line 50, in _replace\nKeyError: 'code'\n")
    assert _crash_signature(log) == "harness error: KeyError: 'code'"


def test_the_json_mutator_never_raises_and_never_changes_its_own_table() -> None:
    import copy

    from fuzz import json_mutator

    before = copy.deepcopy(json_mutator.INTERESTING)
    documents = [p.read_bytes() for name in ("command", "reply", "filter", "message")
                 for p in sorted((CORPUS / name).iterdir())]
    documents += [b"[" + b"9" * 400 + b"]", b'{"a": {"b": [1, {"c": null}]}}']
    for seed in range(3000):
        out = json_mutator.mutate_json(documents[seed % len(documents)], 4096, seed, lambda data, _size: data)
        assert len(out) <= 4096
    assert before == json_mutator.INTERESTING
