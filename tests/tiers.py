"""The suite's tiers (docs/testing.md): CI scale by default, full scale in the soak tier.

A fault or load scenario runs in CI at the smallest scale that still shows its property, and at
full scale when ``WATCHTOWER_TEST_SOAK=1`` (``./run test --soak``, which selects the tests marked
``soak``). Write the two sizes side by side with :func:`scale`, and mark the test ``soak``.
"""

from __future__ import annotations

import os

SOAK = os.environ.get("WATCHTOWER_TEST_SOAK", "") == "1"


def scale(ci: int, soak: int) -> int:
    """``soak`` in the soak tier, ``ci`` otherwise."""
    return soak if SOAK else ci
