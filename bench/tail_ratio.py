"""How sure a p99 ratio is: a bootstrap interval for ``p99(beside) / p99(alone)``.

A p99 of a few hundred latencies rests on its two or three slowest, so one stall of the machine
moves it, and the ratio of two such p99s moves twice. A benchmark that reports the ratio alone
invites reading noise as a change. The bootstrap resamples each side with replacement, `rounds`
times, and reports where the middle 90% of the resampled ratios lie: an interval that straddles a
target says the run cannot tell on which side of it the path is.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any


def quantile(values: Sequence[float], q: float) -> float:
    """The `q` quantile as the benchmarks report it: the value at index ``int(n × q)`` of the sorted values."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def ratio_interval(alone: Sequence[float], beside: Sequence[float], *, q: float = 0.99, rounds: int = 2000,
                   level: float = 0.90, seed: int = 7) -> dict[str, Any] | None:
    """``{"ratio", "low", "high", "rounds"}``: the measured ``quantile(beside) / quantile(alone)`` and the
    bootstrap interval holding `level` of the resampled ratios (seeded: the same samples give the
    same interval). None when either side is empty or the alone quantile is not above 0."""
    if not alone or not beside or quantile(alone, q) <= 0:
        return None
    rng = random.Random(seed)
    n_a, n_b = len(alone), len(beside)
    ratios = []
    for _ in range(rounds):
        base = quantile([alone[rng.randrange(n_a)] for _ in range(n_a)], q)
        if base > 0:
            ratios.append(quantile([beside[rng.randrange(n_b)] for _ in range(n_b)], q) / base)
    ratios.sort()
    tail = (1.0 - level) / 2
    return {"ratio": round(quantile(beside, q) / quantile(alone, q), 2),
            "low": round(quantile(ratios, tail), 2), "high": round(quantile(ratios, 1.0 - tail), 2),
            "rounds": len(ratios)}
