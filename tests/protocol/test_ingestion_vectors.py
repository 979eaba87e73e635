"""The ingestion vectors (vectors/ingestion.json) and their checker."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from protocol_strategies import VECTORS_FILE

from watchtower.cli.main import _register, cli
from watchtower.protocol.conformance import run_vector

_register()

REPO = Path(__file__).resolve().parents[2]
INGESTION = REPO / "vectors" / "ingestion.json"
TYPES = {"ingest_task_id", "runner_registry", "runner_selection", "ingest_task", "ingest_result_record",
         "ingest_result", "ingest_batch_signature"}


def document() -> dict[str, Any]:
    return json.loads(INGESTION.read_text(encoding="utf-8"))


def vector(vector_id: str) -> dict[str, Any]:
    return copy.deepcopy(next(v for v in document()["vectors"] if v["id"] == vector_id))


def flip_hex(text: str, at: int) -> str:
    return text[:at] + ("1" if text[at] == "0" else "0") + text[at + 1:]


def test_the_ingestion_vectors_pass_beside_every_other_vectors_file() -> None:
    doc = document()
    assert {v["type"] for v in doc["vectors"]} == TYPES
    files = [str(VECTORS_FILE), *sorted(str(p) for p in (REPO / "vectors").glob("*.json"))]
    total = sum(len(json.loads(Path(f).read_text(encoding="utf-8"))["vectors"]) for f in files)
    result = CliRunner().invoke(cli, ["vectors", "check", *files])
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1] == f"{total} passed, 0 failed"


def test_json_output_reports_each_ingestion_vector() -> None:
    result = CliRunner().invoke(cli, ["vectors", "check", "--json", str(INGESTION)])
    data = json.loads(result.output)
    assert result.exit_code == 0
    assert (data["passed"], data["failed"]) == (len(document()["vectors"]), 0)
    assert {r["file"] for r in data["results"]} == {str(INGESTION)}
    assert [(r["id"], r["type"], r["reason"]) for r in data["results"]] == [
        (v["id"], v["type"], None) for v in document()["vectors"]]


def test_a_selection_does_not_depend_on_the_registry_order_or_how_the_task_is_named() -> None:
    expects = {v["id"]: v["expect"] for v in document()["vectors"]}
    base = expects["select-3-of-7-tick-1"]
    assert expects["select-3-of-7-tick-1-registry-reversed"] == base
    assert expects["select-3-of-7-by-task-id"] == base
    assert expects["select-3-of-6-tick-1-one-runner-retired"] == base
    assert expects["select-7-of-7-tick-1"]["selected"][:3] == base["selected"]
    scores = [s["score_hex"] for s in expects["select-7-of-7-tick-1"]["selected"]]
    assert scores == sorted(scores)
    moved = expects["select-3-of-6-tick-1-a-selected-runner-retired"]["selected"]
    assert moved[:2] == base["selected"][1:]
    assert moved[2] not in base["selected"]


def test_the_selections_are_drawn_from_the_registry_the_registry_vectors_fold() -> None:
    registered = vector("registry-seven-runners")["expect"]["runner_public_keys_hex"]
    assert sorted(vector("select-3-of-7-tick-1")["input"]["runner_public_keys_hex"]) == sorted(registered)
    retired = vector("registry-one-retired")["expect"]
    assert [r["address"][2:] for r in retired["runners"]] == retired["runner_public_keys_hex"]


def test_the_vectors_cover_each_refusal_code() -> None:
    codes: dict[str, set[str]] = {}
    for v in document()["vectors"]:
        if "error" in v["expect"]:
            codes.setdefault(v["type"], set()).add(v["expect"]["error"])
    assert codes["ingest_task"] == {"UNAUTHORIZED", "INVALID_SIGNATURE", "MALFORMED_RECORD"}
    assert codes["ingest_result"] == {"SCHEMA_MISMATCH", "INVALID_ARGUMENT"}
    assert codes["ingest_task_id"] == {"INVALID_ARGUMENT"}
    assert codes["ingest_result_record"] == {"UNAUTHORIZED", "INVALID_SIGNATURE", "MALFORMED_RECORD"}
    assert codes["runner_registry"] == {"UNAUTHORIZED", "NONCE_REPLAYED", "INVALID_SIGNATURE", "INVALID_ARGUMENT"}


@pytest.mark.parametrize(("vector_id", "mutate", "reason"), [
    ("task-id-tick-1", lambda e: e.update(task_id_hex=flip_hex(e["task_id_hex"], 63)), "task_id_hex: expected"),
    ("select-3-of-7-tick-2", lambda e: e["selected"][0].update(score_hex=flip_hex(e["selected"][0]["score_hex"], 0)),
     "selected: expected"),
    ("select-3-of-7-tick-2", lambda e: e["selected"].reverse(), "selected: expected"),
    ("select-3-of-7-tick-2", lambda e: e["selected"].pop(), "selected: expected"),
    ("task-signed-by-the-scheduler", lambda e: e.update(signing_bytes_hex=flip_hex(e["signing_bytes_hex"], 10)),
     "signing_bytes_hex: expected"),
    ("result-accepted", lambda e: e.update(value={"c": 17.5}), "value: expected"),
    ("registry-one-retired", lambda e: e["runners"].pop(), "runners: expected"),
    ("result-record-from-a-selected-runner", lambda e: e.update(runner="0x" + "ab" * 32), "runner: expected"),
    ("result-record-from-a-runner-not-selected", lambda e: e.update(error="MALFORMED_RECORD"),
     "expected error MALFORMED_RECORD, got UNAUTHORIZED"),
    ("registry-retry-is-idempotent", lambda e: e["replies"][1].pop("duplicate"), "replies: expected"),
    ("registry-one-retired", lambda e: e.update(runner_public_keys_hex=e["runner_public_keys_hex"][::-1]),
     "runner_public_keys_hex: expected"),
    ("result-wrong-type", lambda e: e.update(error="INVALID_ARGUMENT"), "expected error INVALID_ARGUMENT, got"),
    ("task-runners-not-the-selection", lambda e: e.update(error="INVALID_SIGNATURE"),
     "expected error INVALID_SIGNATURE, got MALFORMED_RECORD"),
])
def test_a_wrong_expectation_fails(vector_id: str, mutate: Any, reason: str) -> None:
    v = vector(vector_id)
    mutate(v["expect"])
    outcome = run_vector(v)
    assert not outcome.passed
    assert reason in (outcome.reason or "")


def test_a_task_given_another_tick_s_runners_is_refused() -> None:
    # Another tick's (valid) selection put in after signing: the signature covers the runners.
    v = vector("task-signed-by-the-scheduler")
    v["input"]["task"]["runners"] = [s["address"] for s in vector("select-3-of-7-tick-2")["expect"]["selected"]]
    assert v["input"]["task"]["runners"] != v["expect"]["runners"]
    assert "expected a result, got error INVALID_SIGNATURE" in (run_vector(v).reason or "")


def test_a_result_record_is_accepted_only_from_the_task_s_selected_runners() -> None:
    v = vector("result-record-from-a-selected-runner")
    assert v["input"]["result"]["runner"] in v["input"]["task"]["runners"]
    v["input"]["task"]["runners"] = [r for r in v["input"]["task"]["runners"] if r != v["input"]["result"]["runner"]]
    assert "expected a result, got error" in (run_vector(v).reason or "")


def test_unknown_and_malformed_vector_types_fail() -> None:
    outcome = run_vector({"id": "x", "type": "ingest_tasks", "input": {}, "expect": {"error": "*"}})
    assert not outcome.passed
    assert "unknown vector type" in (outcome.reason or "")
    outcome = run_vector({"id": "x", "type": "ingest_result", "input": {"result_text": 1, "result_schema": {}},
                          "expect": {"error": "*"}})
    assert "malformed vector" in (outcome.reason or "")
    outcome = run_vector({"id": "x", "type": "runner_selection", "input": {"task_id_hex": "00", "num_runners": 1},
                          "expect": {"error": "*"}})
    assert "malformed vector" in (outcome.reason or "")


def test_every_integer_in_the_file_is_json_safe() -> None:
    stack: list[Any] = [document()]
    while stack:
        node = stack.pop()
        if isinstance(node, int) and not isinstance(node, bool):
            assert abs(node) < 2**53
        elif isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def test_the_generator_reproduces_the_file_byte_for_byte(tmp_path: Path) -> None:
    out = tmp_path / "ingestion.json"
    with out.open("wb") as sink:
        subprocess.run([sys.executable, str(REPO / "vectors" / "generate_ingestion.py")], stdout=sink, check=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert out.read_bytes() == INGESTION.read_bytes()
