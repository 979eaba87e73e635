"""The embedded broker's garbage-collector pauses, read from its GC log (``NodeSpec.gc_log_file``).

The JVM writes one line per pause, decorated with the wall-clock time it was logged (the pause's
end) and ending in its duration::

    [2026-11-30T10:40:01.123+0000][12.345s] GC(3) Pause Young (Normal) (G1 Evacuation Pause) 120M->20M(256M) 7.123ms

A benchmark sets a stall of the plain path beside the broker's pauses with `pauses` and `overlap`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

_PAUSE = re.compile(r"^\[(?P<time>[^\]]+)\].*\bPause\b.*?(?P<ms>\d+(?:\.\d+)?)ms\s*$")


@dataclass(frozen=True)
class Pause:
    """One stop-the-world pause: when it ended (Unix ms) and how long it took (ms)."""

    end_ms: float
    ms: float

    @property
    def start_ms(self) -> float:
        return self.end_ms - self.ms


def parse(lines: list[str]) -> list[Pause]:
    """The pauses among `lines` of a GC log; any other line (a concurrent phase, a heap summary,
    a line cut short by rotation) is skipped."""
    out = []
    for line in lines:
        m = _PAUSE.match(line.strip())
        if m is None:
            continue
        try:
            end = datetime.strptime(m["time"], "%Y-%m-%dT%H:%M:%S.%f%z").timestamp() * 1000
        except ValueError:
            continue
        out.append(Pause(end, float(m["ms"])))
    return out


def pauses(log_file: Path, start_ms: float, end_ms: float) -> list[Pause]:
    """The pauses in `log_file` (and its rotated predecessors) that ended within [start_ms, end_ms]."""
    files = sorted(log_file.parent.glob(log_file.name + "*"))
    lines = [line for f in files for line in f.read_text(errors="replace").splitlines()]
    return sorted((p for p in parse(lines) if start_ms <= p.end_ms <= end_ms), key=lambda p: p.end_ms)


def summary(found: list[Pause], seconds: float) -> dict[str, Any]:
    """Count, per minute, total and largest pause (ms) of `found` over a window of `seconds`."""
    return {"count": len(found), "per_minute": round(len(found) * 60 / seconds, 1) if seconds > 0 else None,
            "total_ms": round(sum(p.ms for p in found), 1), "max_ms": round(max((p.ms for p in found), default=0), 1)}


def overlap(found: list[Pause], start_ms: float, end_ms: float) -> float:
    """How many ms of [start_ms, end_ms] (a publish's way from sent to visible) the broker spent paused."""
    return round(sum(max(0.0, min(end_ms, p.end_ms) - max(start_ms, p.start_ms)) for p in found), 1)
