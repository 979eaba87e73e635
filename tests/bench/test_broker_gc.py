"""The broker's GC log as the ingestion benchmark reads it: pauses, their window, and a stall's share."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from broker_gc import overlap, parse, pauses, summary

# Lines as JDK 17 writes them with -Xlog:gc:file=...:time,uptime (the embedded broker's setting).
LOG = """\
[2026-11-30T10:37:39.765+0000][0.006s] Using G1
[2026-11-30T10:37:40.403+0000][0.645s] GC(0) Pause Young (Normal) (G1 Evacuation Pause) 6M->3M(64M) 5.617ms
[2026-11-30T10:37:40.807+0000][1.048s] GC(1) Pause Young (Normal) (G1 Evacuation Pause) 7M->3M(64M) 114.400ms
[2026-11-30T10:37:41.100+0000][1.341s] GC(2) Concurrent Mark Cycle 40.100ms
[2026-11-30T10:37:41.183+0000][1.424s] GC(2) Pause Remark 10M->5M(64M) 1.250ms
[2026-11-30T10:37:41.190+0000][1.430s] GC(3) Pause Young (Normal) (G1 Evacuation Pause) 10M->5M(64
"""


def _ms(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%f%z").timestamp() * 1000


def test_pauses_are_read_with_their_end_and_length_and_nothing_else_is() -> None:
    found = parse(LOG.splitlines())
    assert [(p.end_ms, p.ms) for p in found] == [(_ms("2026-11-30T10:37:40.403+0000"), 5.617),
                                                (_ms("2026-11-30T10:37:40.807+0000"), 114.4),
                                                (_ms("2026-11-30T10:37:41.183+0000"), 1.25)]
    assert found[1].start_ms == found[1].end_ms - 114.4


def test_a_window_takes_the_pauses_that_ended_in_it_from_every_rotated_file(tmp_path: Path) -> None:
    lines = LOG.splitlines()
    (tmp_path / "gc.log.0").write_text("\n".join(lines[:2]) + "\n")
    (tmp_path / "gc.log").write_text("\n".join(lines[2:]) + "\n")
    start, end = _ms("2026-11-30T10:37:40.500+0000"), _ms("2026-11-30T10:37:41.200+0000")
    found = pauses(tmp_path / "gc.log", start, end)
    assert [p.ms for p in found] == [114.4, 1.25]
    assert summary(found, 30.0) == {"count": 2, "per_minute": 4.0, "total_ms": 115.7, "max_ms": 114.4}
    assert summary([], 30.0) == {"count": 0, "per_minute": 0.0, "total_ms": 0, "max_ms": 0}


def test_a_publish_counts_only_the_part_of_a_pause_on_its_way() -> None:
    long = parse(LOG.splitlines())[1]  # 114.4 ms, ending at .807
    sent = long.end_ms - 50.0
    assert overlap([long], sent, sent + 100.0) == 50.0  # its last 50 ms
    assert overlap([long], long.start_ms - 10.0, long.end_ms + 10.0) == 114.4  # the whole pause
    assert overlap([long], long.end_ms + 1.0, long.end_ms + 100.0) == 0.0  # after it
