"""Sampling profiles of running Python services with py-spy, and what to read from them.

``SpyRecorder`` attaches one ``py-spy record --format raw`` per process (one sampler per process keeps
the perturbation down on a small machine) and, once done, writes beside each collapsed-stack file:

- ``NAME.speedscope.json``: the same samples in speedscope's file format (https://www.speedscope.app);
- ``NAME.svg``: a flame graph (open it in a browser; hover a frame for its samples);
- ``NAME.top.txt``: the top frames by self and by total samples, for a reader without a browser.

The collapsed-stack text (``frame;frame;...;leaf COUNT`` per line, root first) is what
Brendan Gregg's flamegraph tools and py-spy's ``raw`` format share; everything here derives from it.
"""

from __future__ import annotations

import html
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Stack = tuple[str, ...]


# ----------------------------------------------------------------------------- collapsed stacks
def parse_collapsed(text: str) -> dict[Stack, int]:
    """Samples per stack (root first) from collapsed-stack text; blank or malformed lines are skipped."""
    out: dict[Stack, int] = {}
    for line in text.splitlines():
        stack, sep, count = line.rstrip().rpartition(" ")
        if not sep or not stack or not count.isdigit():
            continue
        key = tuple(stack.split(";"))
        out[key] = out.get(key, 0) + int(count)
    return out


def frame_times(stacks: dict[Stack, int]) -> tuple[dict[str, int], dict[str, int], int]:
    """(self samples, total samples, all samples) by frame.

    Self: samples where the frame is the leaf. Total: samples with the frame anywhere on the stack,
    counted once per sample even when it recurses.
    """
    own: dict[str, int] = {}
    total: dict[str, int] = {}
    for stack, n in stacks.items():
        own[stack[-1]] = own.get(stack[-1], 0) + n
        for frame in set(stack):
            total[frame] = total.get(frame, 0) + n
    return own, total, sum(stacks.values())


def summary(stacks: dict[Stack, int], title: str, top: int = 25) -> str:
    """A text table of the top frames by self and by total samples."""
    own, total, n = frame_times(stacks)
    if n == 0:
        return f"{title}: no samples (the process was idle or could not be read)\n"
    lines = [f"{title}: {n:,} samples of the threads py-spy saw active; a Python frame blocked inside a C call",
             "(select/epoll, a librdkafka wait, a queue get) counts that wait as the frame's self time"]
    for label, table in (("self", own), ("total", total)):
        lines += ["", f"top {top} frames by {label} samples", f"{'self %':>7} {'total %':>7}  frame"]
        for frame, _ in sorted(table.items(), key=lambda kv: (-kv[1], kv[0]))[:top]:
            lines.append(f"{100 * own.get(frame, 0) / n:>7.1f} {100 * total[frame] / n:>7.1f}  {frame}")
    return "\n".join(lines) + "\n"


def top_frames(stacks: dict[Stack, int], top: int = 10) -> dict[str, Any]:
    """The top frames by self and total share of samples (JSON-ready)."""
    own, total, n = frame_times(stacks)

    def rows(table: dict[str, int]) -> list[dict[str, Any]]:
        ranked = sorted(table.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
        return [{"frame": f, "self_pct": 100 * own.get(f, 0) / n, "total_pct": 100 * total[f] / n} for f, _ in ranked]

    if n == 0:
        return {"samples": 0, "by_self": [], "by_total": []}
    return {"samples": n, "by_self": rows(own), "by_total": rows(total)}


# ----------------------------------------------------------------------------- speedscope
def to_speedscope(stacks: dict[Stack, int], name: str, rate_hz: int) -> dict[str, Any]:
    """A speedscope file (one 'sampled' profile, weights in seconds) holding ``stacks``."""
    index: dict[str, int] = {}
    frames: list[dict[str, Any]] = []
    samples: list[list[int]] = []
    weights: list[float] = []
    for stack, n in sorted(stacks.items()):
        ids = []
        for frame in stack:
            if frame not in index:
                index[frame] = len(frames)
                func, _, where = frame.partition(" (")
                entry: dict[str, Any] = {"name": func}
                file, _, line = where.rstrip(")").rpartition(":")
                if file:
                    entry["file"] = file
                    if line.isdigit():
                        entry["line"] = int(line)
                frames.append(entry)
            ids.append(index[frame])
        samples.append(ids)
        weights.append(n / rate_hz)
    return {"$schema": "https://www.speedscope.app/file-format-schema.json", "exporter": "watchtower bench",
            "name": name, "activeProfileIndex": 0, "shared": {"frames": frames},
            "profiles": [{"type": "sampled", "name": name, "unit": "seconds", "startValue": 0,
                          "endValue": sum(weights), "samples": samples, "weights": weights}]}


# ----------------------------------------------------------------------------- flame graph SVG
@dataclass
class _Node:
    count: int = 0
    children: dict[str, _Node] = field(default_factory=dict)


def _tree(stacks: dict[Stack, int]) -> _Node:
    root = _Node()
    for stack, n in stacks.items():
        root.count += n
        node = root
        for frame in stack:
            node = node.children.setdefault(frame, _Node())
            node.count += n
    return root


def _color(name: str) -> str:
    h = sum(name.encode()) % 60
    return f"rgb({205 + h % 50},{80 + (h * 3) % 120},{40 + h % 30})"


def to_svg(stacks: dict[Stack, int], title: str, width: int = 1200, row: int = 16) -> str:
    """A flame graph (root at the bottom, width proportional to samples) as standalone SVG."""
    root = _tree(stacks)

    def depth(node: _Node) -> int:
        return 1 + max((depth(c) for c in node.children.values()), default=0)

    levels = depth(root)
    height = (levels + 2) * row
    total = max(root.count, 1)
    scale = (width - 20) / total
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="monospace" font-size="11">',
             '<rect width="100%" height="100%" fill="#fdfdf5"/>',
             f'<text x="10" y="{row - 3}">{html.escape(title)} ({root.count:,} samples)</text>']

    def draw(name: str, node: _Node, x: float, level: int) -> None:
        w = node.count * scale
        if w < 0.5:
            return
        y = height - (level + 1) * row
        label = html.escape(f"{name} ({node.count:,} samples, {100 * node.count / total:.1f}%)")
        chars = int(w / 7)
        text = html.escape(name if len(name) <= chars else name[:max(0, chars - 2)] + "..") if chars >= 3 else ""
        parts.append(f'<g><title>{label}</title><rect x="{x + 10:.1f}" y="{y}" width="{w:.1f}" '
                     f'height="{row - 1}" fill="{_color(name)}"/>'
                     + (f'<text x="{x + 13:.1f}" y="{y + row - 4}">{text}</text>' if text else "") + "</g>")
        cx = x
        for child_name, child in sorted(node.children.items()):
            draw(child_name, child, cx, level + 1)
            cx += child.count * scale

    draw("all", root, 0.0, 0)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


# ----------------------------------------------------------------------------- recording
def py_spy() -> str | None:
    """The py-spy beside this interpreter, or on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def write_outputs(raw: Path, name: str, rate_hz: int) -> dict[str, Any]:
    """Write the speedscope, SVG and text summary beside the collapsed ``raw`` file; returns its top frames."""
    stacks = parse_collapsed(raw.read_text(errors="replace")) if raw.exists() else {}
    base = raw.with_suffix("")
    base.with_suffix(".speedscope.json").write_text(json.dumps(to_speedscope(stacks, name, rate_hz)))
    base.with_suffix(".svg").write_text(to_svg(stacks, name))
    base.with_suffix(".top.txt").write_text(summary(stacks, name))
    return {"files": [str(base.with_suffix(s)) for s in (".raw.txt", ".speedscope.json", ".svg", ".top.txt")],
            **top_frames(stacks)}


class SpyRecorder:
    """py-spy samplers attached to several processes for a fixed duration."""

    def __init__(self, out_dir: Path, pids: dict[str, int], duration_s: float, rate_hz: int = 100,
                 nonblocking: bool = False) -> None:
        self.out_dir = out_dir
        self.nonblocking = nonblocking
        self.pids = pids
        self.duration_s = max(1, round(duration_s))
        self.rate_hz = rate_hz
        self.procs: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}

    def raw_path(self, name: str) -> Path:
        return self.out_dir / f"{name}.raw.txt"

    def start(self) -> None:
        spy = py_spy()
        if spy is None:
            raise RuntimeError("py-spy is not installed (pip install py-spy)")
        self.out_dir.mkdir(parents=True, exist_ok=True)
        for name, pid in self.pids.items():
            log = (self.out_dir / f"{name}.py-spy.log").open("wb")
            argv = [spy, "record", "--pid", str(pid), "--duration", str(self.duration_s), "--rate",
                    str(self.rate_hz), "--format", "raw", "--function", "-o", str(self.raw_path(name))]
            if self.nonblocking:  # no pause per sample: less perturbation, a stack may be torn now and then
                argv.append("--nonblocking")
            self.procs[name] = (subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                                 stdin=subprocess.DEVNULL), self.out_dir / f"{name}.py-spy.log")
            log.close()

    def finish(self, timeout_s: float = 120.0) -> dict[str, Any]:
        """Wait for the samplers and write the derived files; one entry per process."""
        out: dict[str, Any] = {}
        for name, (proc, log) in self.procs.items():
            try:
                proc.wait(self.duration_s + timeout_s)
            except subprocess.TimeoutExpired:
                proc.terminate()
                proc.wait(10)
            entry = write_outputs(self.raw_path(name), name, self.rate_hz)
            entry["py_spy_exit"] = proc.returncode
            if proc.returncode != 0:
                entry["py_spy_log"] = log.read_text(errors="replace")[-500:]
            out[name] = entry
        return out


def ptrace_problem(pid: int) -> str | None:
    """None when py-spy can read ``pid`` (a one-shot ``py-spy dump``), else why not."""
    spy = py_spy()
    if spy is None:
        return "py-spy is not installed"
    proc = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60, check=False)
    return None if proc.returncode == 0 else (proc.stderr or proc.stdout).strip()[-300:]

