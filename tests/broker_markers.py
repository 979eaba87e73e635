"""Collection rule: a test that talks to a Kafka broker carries the ``integration`` marker.

The secure pass and the tiers (docs/testing.md) select tests by marker, so a broker test without
its marker silently drops out of them. A test talks to a broker when its fixture closure holds
``kafka_bootstrap`` (the session's broker), or when the test function or one of its fixtures
calls a helper that starts a broker or a stack (:data:`BROKER_HELPERS`). Such a test without the
marker fails collection, naming every offender and what to add. So does a test marked ``secure``
(CI's secure pass) that is not a broker test.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import CodeType
from typing import Any

import pytest

BROKER_FIXTURES = frozenset({"kafka_bootstrap"})
# Names whose presence in a test module means it starts a broker, a stack or a cluster itself.
BROKER_HELPERS = frozenset({"LocalKafka", "start_stack", "ServiceSet", "session_broker", "cluster_stack"})
# A test that uses such a helper without reaching a broker (a refusal before start, a process pointed
# at no broker) says so with this marker instead.
NO_BROKER = "no_broker"


def _names(code: CodeType) -> Iterator[str]:
    """Every global or attribute name ``code`` and the functions nested in it refer to."""
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _names(const)


def _functions(item: pytest.Item) -> Iterator[Any]:
    """The test function and the function of every fixture in its closure."""
    yield getattr(item, "function", None)
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info is not None else ()):
        for fixturedef in defs:
            yield fixturedef.func


def talks_to_broker(item: pytest.Item) -> bool:
    """Whether ``item`` reaches a broker: by the session broker's fixture, or by a helper it or one of
    its fixtures calls."""
    if BROKER_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    if item.get_closest_marker(NO_BROKER) is not None:
        return False
    for func in _functions(item):
        code = getattr(func, "__code__", None)
        if code is not None and BROKER_HELPERS & set(_names(code)):
            return True
    return False


def unmarked_broker_tests(items: list[pytest.Item]) -> list[str]:
    """Node ids of the broker tests among ``items`` that lack the ``integration`` marker."""
    return [item.nodeid for item in items if talks_to_broker(item) and item.get_closest_marker("integration") is None]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    not_broker = [i.nodeid for i in items if i.get_closest_marker("secure") and not i.get_closest_marker("integration")]
    if not_broker:
        raise pytest.UsageError(f"tests marked `secure` must be broker tests (`integration`): {not_broker}")
    offenders = unmarked_broker_tests(items)
    if offenders:
        shown = "\n  ".join(offenders[:200]) + ("\n  ..." if len(offenders) > 200 else "")
        raise pytest.UsageError(
            f"{len(offenders)} test(s) talk to a Kafka broker without the `integration` marker:\n  {shown}\n"
            "add `pytestmark = pytest.mark.integration` to the module (or mark the test), so the secure "
            "pass and the tiers in docs/testing.md select it")
