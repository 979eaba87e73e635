"""The benchmark's profile outputs: collapsed stacks to a top-frames summary, speedscope and SVG."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from profiles import frame_times, parse_collapsed, summary, to_speedscope, to_svg, write_outputs

COLLAPSED = """\
<module> (app.py:1);main (app.py:10);handle (app.py:20);verify (crypto.py:5) 30
<module> (app.py:1);main (app.py:10);handle (app.py:20) 10
<module> (app.py:1);main (app.py:10);commit (kafka.py:7) 50
<module> (app.py:1);main (app.py:10);walk (tree.py:3);walk (tree.py:3) 10
garbage line without a count
"""


def test_self_and_total_samples_per_frame() -> None:
    stacks = parse_collapsed(COLLAPSED)
    assert len(stacks) == 4  # the malformed line is skipped
    own, total, n = frame_times(stacks)
    assert n == 100
    assert own == {"verify (crypto.py:5)": 30, "handle (app.py:20)": 10, "commit (kafka.py:7)": 50,
                   "walk (tree.py:3)": 10}
    assert total["main (app.py:10)"] == 100
    assert total["handle (app.py:20)"] == 40
    assert total["walk (tree.py:3)"] == 10  # recursion counts a sample once


def test_summary_ranks_by_self_then_by_total() -> None:
    text = summary(parse_collapsed(COLLAPSED), "worker")
    assert text.startswith("worker: 100 samples")
    by_self, by_total = text.split("by total samples")
    lines = by_self.splitlines()
    first_self = lines[lines.index(" self % total %  frame") + 1]
    assert first_self.split() == ["50.0", "50.0", "commit", "(kafka.py:7)"]
    first_totals = [line.split()[2] for line in by_total.splitlines()[2:4]]
    assert sorted(first_totals) == ["<module>", "main"]
    assert "no samples" in summary({}, "idle")


def test_speedscope_file_holds_every_sample_with_its_weight() -> None:
    doc = to_speedscope(parse_collapsed(COLLAPSED), "worker", rate_hz=100)
    prof = doc["profiles"][0]
    frames = doc["shared"]["frames"]
    assert prof["type"] == "sampled"
    assert sum(prof["weights"]) == pytest.approx(1.0)  # 100 samples at 100 Hz
    names = {tuple(frames[i]["name"] for i in s) for s in prof["samples"]}
    assert ("<module>", "main", "handle", "verify") in names
    verify = next(f for f in frames if f["name"] == "verify")
    assert verify == {"name": "verify", "file": "crypto.py", "line": 5}
    json.dumps(doc)


def test_svg_has_a_box_per_frame_sized_by_samples(tmp_path: Path) -> None:
    svg = to_svg(parse_collapsed(COLLAPSED), "worker <pid 1>")
    assert svg.startswith("<svg")
    assert svg.rstrip().endswith("</svg>")
    assert "worker &lt;pid 1&gt;" in svg
    assert "commit (kafka.py:7) (50 samples, 50.0%)" in svg
    raw = tmp_path / "worker.raw.txt"
    raw.write_text(COLLAPSED)
    out = write_outputs(raw, "worker", 100)
    assert out["samples"] == 100
    assert out["by_self"][0]["frame"] == "commit (kafka.py:7)"
    for name in ("worker.speedscope.json", "worker.svg", "worker.top.txt"):
        assert (tmp_path / name).stat().st_size > 0
