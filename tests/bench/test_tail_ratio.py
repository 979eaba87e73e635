"""The bootstrap interval the ingestion benchmark puts beside its plain-path p99 ratio."""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from tail_ratio import quantile, ratio_interval


def _latencies(n: int, seed: int, scale: float = 1.0) -> list[float]:
    rng = random.Random(seed)
    return [scale * rng.lognormvariate(3.0, 0.5) for _ in range(n)]


def test_the_quantile_is_the_benchmarks_own() -> None:
    values = [float(v) for v in range(1, 201)]  # 200 values: p99 is the 199th smallest, index 198
    assert quantile(values, 0.99) == 199.0
    assert quantile(values, 0.5) == 101.0
    assert quantile([5.0], 0.99) == 5.0


def test_the_interval_holds_the_measured_ratio_and_brackets_the_truth() -> None:
    alone, beside = _latencies(200, 1), _latencies(300, 2, scale=3.0)
    got = ratio_interval(alone, beside)
    assert got is not None
    assert got["ratio"] == round(quantile(beside, 0.99) / quantile(alone, 0.99), 2)
    assert got["low"] <= got["ratio"] <= got["high"]
    assert got["low"] < 3.0 < got["high"], got  # the two sides differ by a factor of 3 by construction
    assert got["rounds"] == 2000


def test_more_samples_narrow_the_interval() -> None:
    few = ratio_interval(_latencies(200, 3), _latencies(300, 4))
    many = ratio_interval(_latencies(4000, 3), _latencies(6000, 4))
    assert few is not None
    assert many is not None
    assert many["high"] - many["low"] < (few["high"] - few["low"]) / 2


def test_one_stall_widens_the_interval_rather_than_hiding_in_the_ratio() -> None:
    """Three publishes held by one 150 ms stall among 300: the ratio jumps, and the interval says
    the run cannot place it."""
    alone, beside = _latencies(200, 5), _latencies(300, 6)
    calm = ratio_interval(alone, beside)
    stalled = ratio_interval(alone, [*beside[:-3], 150.0, 151.0, 152.0])
    assert calm is not None
    assert stalled is not None
    assert stalled["ratio"] > calm["ratio"]
    assert stalled["high"] - stalled["low"] > calm["high"] - calm["low"]


def test_the_interval_is_seeded_and_refuses_what_it_cannot_divide() -> None:
    alone, beside = _latencies(200, 7), _latencies(300, 8)
    assert ratio_interval(alone, beside) == ratio_interval(alone, beside)
    assert ratio_interval([], beside) is None
    assert ratio_interval(alone, []) is None
    assert ratio_interval([0.0, 0.0], beside) is None
