"""The worker's health file and the bounded client calls: pure, no broker."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from watchtower.workers.bounded import BoundedCaller, CallStuckError
from watchtower.workers.event_fold import Quarantined
from watchtower.workers.health import LAST_QUARANTINED, HealthFile

FIELDS = {"worker", "pid", "state", "partitions", "quarantined", "last_quarantined", "aborted_batches", "lane_yields",
          "updated_ms"}


def read(path: Path) -> dict[str, object]:
    data = json.loads(path.read_text())
    assert isinstance(data, dict)
    return data


def test_the_file_has_every_field_and_follows_the_worker(tmp_path: Path) -> None:
    path = tmp_path / "health.json"
    health = HealthFile(str(path), "w1", clock_ms=lambda: 1234)
    health.write()
    first = read(path)
    assert set(first) == FIELDS
    assert first == {"worker": "w1", "pid": os.getpid(), "state": "starting", "partitions": [], "quarantined": 0,
                     "last_quarantined": [], "aborted_batches": 0, "lane_yields": 0, "updated_ms": 1234}

    health.set_partitions([2, 0])
    assert read(path)["partitions"] == [0, 2]  # written at once, sorted
    health.set_state("serving")
    assert read(path)["state"] == "serving"
    health.set_counts(aborted_batches=3, lane_yields=7)
    health.write()
    assert (read(path)["aborted_batches"], read(path)["lane_yields"]) == (3, 7)
    assert list(tmp_path.iterdir()) == [path], "no temporary file is left behind"


def test_only_the_last_quarantined_records_are_listed_but_all_are_counted(tmp_path: Path) -> None:
    path = tmp_path / "health.json"
    health = HealthFile(str(path), "w1")
    for offset in range(LAST_QUARANTINED + 5):
        health.quarantined(Quarantined("p.events", 1, offset, f"reason {offset}"))
    health.write()
    doc = read(path)
    assert doc["quarantined"] == LAST_QUARANTINED + 5
    listed = doc["last_quarantined"]
    assert isinstance(listed, list)
    assert [q["offset"] for q in listed] == list(range(5, LAST_QUARANTINED + 5))
    assert listed[-1] == {"topic": "p.events", "partition": 1, "offset": LAST_QUARANTINED + 4,
                          "reason": f"reason {LAST_QUARANTINED + 4}"}


def test_ticks_write_at_most_once_a_second(tmp_path: Path) -> None:
    path = tmp_path / "health.json"
    wall, mono = [1_000], [50.0]
    health = HealthFile(str(path), "w1", clock_ms=lambda: wall[0], monotonic=lambda: mono[0])
    health.write()
    wall[0], mono[0] = 2_000, 50.9
    health.tick()
    assert read(path)["updated_ms"] == 1_000, "a tick within a second of the last write does not write"
    mono[0] = 51.0
    health.tick()
    assert read(path)["updated_ms"] == 2_000


def test_without_a_path_nothing_is_written_and_a_bad_path_never_raises(tmp_path: Path) -> None:
    HealthFile(None, "w1").write()
    assert list(tmp_path.iterdir()) == []
    broken = HealthFile(str(tmp_path / "missing-dir" / "health.json"), "w1")
    broken.write()
    broken.set_state("serving")


def test_readers_never_see_a_partial_document(tmp_path: Path) -> None:
    path = tmp_path / "health.json"
    health = HealthFile(str(path), "w1")
    health.write()
    stop = threading.Event()

    def writer() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            health.quarantined(Quarantined("t.events", 0, n, "x" * 200))
            health.write()

    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(300):
            assert set(read(path)) == FIELDS
    finally:
        stop.set()
        t.join()


def test_a_bounded_call_returns_its_result_or_its_own_exception() -> None:
    caller = BoundedCaller()
    assert caller.call(lambda: 42, 5) == 42

    def fails() -> None:
        raise TimeoutError("the call's own timeout")

    with pytest.raises(TimeoutError, match="the call's own timeout"):
        caller.call(fails, 5)


def test_a_call_that_overruns_is_abandoned_and_the_next_call_still_runs() -> None:
    caller = BoundedCaller()
    release = threading.Event()
    waited: list[int] = []
    # release.wait() cannot return before release is set, so getting here proves the caller gave up.
    with pytest.raises(CallStuckError, match="stuck thing did not return"):
        caller.call(release.wait, 0.5, what="stuck thing", while_waiting=lambda: waited.append(1))
    assert not release.is_set()
    assert waited, "while_waiting was not called during the wait"
    assert caller.abandoned == 1
    assert caller.call(lambda: "fresh thread", 5) == "fresh thread"
    release.set()
