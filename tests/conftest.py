"""Session-wide fixtures: a real Kafka broker shared by every integration test."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kafka_fixture import session_broker

# Property tests get no per-example deadline: a deadline is a wall-clock assertion, and on a loaded
# 2-core CI machine a slow example would fail (or be reported flaky) for no fault of the code.
settings.register_profile("watchtower", deadline=None)
settings.load_profile("watchtower")

# Every stream worker a test starts serves a deployment with this protocol treasury
# (docs/deployment.md); workers read it from their environment, which they inherit from here.
TEST_PROTOCOL_TREASURY = "0x" + "7e" * 32
os.environ.setdefault("WATCHTOWER_PROTOCOL_TREASURY", TEST_PROTOCOL_TREASURY)

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap address of the session's broker (embedded KRaft unless Docker or an env var says otherwise)."""
    with session_broker(tmp_path_factory.mktemp("kafka")) as bootstrap:
        yield bootstrap


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    return SHARED


# A broker test without the `integration` marker fails collection (tests/broker_markers.py).
from broker_markers import pytest_collection_modifyitems  # noqa: E402, F401

# `stack`: a module-wide running stack (one worker, one projection; tests/stack_fixture.py) for any
# test module that asks for it; a module that needs another shape defines its own `stack`.
from stack_fixture import stack  # noqa: E402, F401
