"""The garbage collector policy every service installs (`watchtower.metrics.gc_pauses`): survivors of
a full collection are frozen, so the next one skips them; a periodic thaw reclaims the cycles that
died while frozen; every pause is measured."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY

from watchtower.metrics import gc_pauses
from watchtower.metrics.gc_pauses import GcPolicy


class Node:
    """A participant in a reference cycle (only the cyclic collector frees it)."""

    def __init__(self) -> None:
        self.me = self


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def policy() -> Iterator[tuple[GcPolicy, Clock, list[tuple[int, float]]]]:
    clock, seen = Clock(), []
    policy = GcPolicy(thaw_every_s=60.0, clock=clock, observe=lambda g, s: seen.append((g, s)))
    gc.collect()
    gc.callbacks.append(policy)
    try:
        yield policy, clock, seen
    finally:
        gc.callbacks.remove(policy)
        gc.unfreeze()
        gc.collect()


def test_a_full_collection_freezes_its_survivors_so_the_next_one_skips_them(policy) -> None:
    p, _clock, seen = policy
    kept = [Node() for _ in range(1000)]
    gc.collect()
    assert p.freezes == 1
    assert gc.get_freeze_count() >= len(kept)  # the survivors now sit in the permanent generation
    assert not any(o is kept[0] for o in gc.get_objects(generation=2))
    assert any(g == gc_pauses.FULL for g, _s in seen)  # the pause was measured
    assert all(s >= 0 for _g, s in seen)


def test_a_cycle_that_dies_while_frozen_is_reclaimed_after_the_thaw(policy) -> None:
    p, clock, _seen = policy
    node = Node()
    alive = weakref.ref(node)
    gc.collect()  # frozen with the rest
    del node
    gc.collect()
    assert alive() is not None, "a frozen cycle is not reclaimed until the thaw"
    clock.now += 61.0
    gc.collect()  # the thaw: everything goes back to the collector ...
    assert p.thaws == 1
    assert gc.get_freeze_count() == 0
    gc.collect()  # ... and the next full collection reclaims the dead cycle
    assert alive() is None


def test_young_collections_are_timed_but_never_freeze(policy) -> None:
    p, _clock, seen = policy
    gc.collect(0)
    gc.collect(1)
    assert p.freezes == 0
    assert p.thaws == 0
    assert {g for g, _s in seen} >= {0, 1}


def test_a_period_of_zero_only_measures() -> None:
    seen: list[tuple[int, float]] = []
    measure_only = GcPolicy(thaw_every_s=0.0, observe=lambda g, s: seen.append((g, s)))
    gc.collect()
    before = gc.get_freeze_count()
    gc.callbacks.append(measure_only)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(measure_only)
    assert gc.get_freeze_count() == before
    assert measure_only.freezes == 0
    assert seen
    assert seen[-1][0] == gc_pauses.FULL


def test_the_pause_histogram_is_exported_by_generation() -> None:
    gc_pauses._observe(2, 0.004)
    assert (REGISTRY.get_sample_value("watchtower_gc_pause_seconds_count", {"generation": "2"}) or 0) >= 1
    assert (REGISTRY.get_sample_value("watchtower_gc_pause_seconds_bucket", {"generation": "2", "le": "0.005"})
            or 0) >= 1


@pytest.mark.parametrize(("raw", "expected"), [("", gc_pauses.THAW_EVERY_S), ("0", 0.0), (" 90 ", 90.0)])
def test_the_thaw_period_comes_from_the_environment(monkeypatch, raw: str, expected: float) -> None:
    monkeypatch.setenv(gc_pauses.ENV_THAW, raw)
    assert gc_pauses.thaw_every_s_from_env() == expected


@pytest.mark.parametrize("raw", ["-1", "soon", "nan", "inf"])
def test_a_bad_thaw_period_is_refused_with_the_setting_named(monkeypatch, raw: str) -> None:
    monkeypatch.setenv(gc_pauses.ENV_THAW, raw)
    with pytest.raises(ValueError, match=gc_pauses.ENV_THAW):
        gc_pauses.thaw_every_s_from_env()
