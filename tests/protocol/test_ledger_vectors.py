"""The account vectors (vectors/ledger.json): own actors, delegated spending, the revocations' codes."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from watchtower.protocol.conformance import run_vector

REPO = Path(__file__).resolve().parents[2]
LEDGER = REPO / "vectors" / "ledger.json"


def vectors() -> list[dict[str, Any]]:
    return json.loads(LEDGER.read_text(encoding="utf-8"))["vectors"]


def by_id(vector_id: str) -> dict[str, Any]:
    return copy.deepcopy(next(v for v in vectors() if v["id"] == vector_id))


@pytest.mark.parametrize("vector", vectors(), ids=lambda v: v["id"])
def test_each_account_vector_passes(vector: dict[str, Any]) -> None:
    outcome = run_vector(vector)
    assert outcome.passed, outcome.reason


def test_the_vectors_show_own_actors_and_allowances_at_work() -> None:
    """Failed before the fix: create_actor and approve_spending were unknown methods."""
    created = by_id("own-actor-created-is-authorized-on-every-stream")["expect"]
    assert created["actor_authorized"] == [True, True]
    assert created["answers"][0]["own_actor"] is True
    capped = by_id("spender-within-its-cap-replayed-then-past-it")["expect"]
    assert [a.get("error") for a in capped["answers"][3:6]] == [None, None, "UNAUTHORIZED"]
    assert capped["answers"][4]["duplicate"] is True  # the replayed purchase, answered again
    assert capped["allowances"][0]["remaining_cby"] == "0"


@pytest.mark.parametrize(("vector_id", "field", "value"), [
    ("own-actor-revoked-on-one-stream", "actor_authorized", [True, True]),
    ("spender-within-its-cap-replayed-then-past-it", "balances", {}),
    ("any-stream-allowance-spent-then-revoked", "entitlements", [None]),
])
def test_a_wrong_expectation_fails(vector_id: str, field: str, value: Any) -> None:
    vector = by_id(vector_id)
    vector["expect"][field] = value
    assert not run_vector(vector).passed


def test_the_generator_reproduces_the_file_byte_for_byte(tmp_path: Path) -> None:
    out = tmp_path / "ledger.json"
    with out.open("wb") as sink:
        subprocess.run([sys.executable, str(REPO / "vectors" / "generate_ledger.py")], stdout=sink, check=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert out.read_bytes() == LEDGER.read_bytes()
