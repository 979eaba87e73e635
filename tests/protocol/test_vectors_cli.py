"""`watchtower vectors check` (DESIGN §7.9) and the conformance judge behind it."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from protocol_strategies import SHARED, VECTORS_FILE

from watchtower.cli.main import _register, cli
from watchtower.protocol.conformance import run_document, run_vector

_register()


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, ["vectors", "check", *args])


def shared_document() -> dict[str, Any]:
    return json.loads(VECTORS_FILE.read_text(encoding="utf-8"))


def write(tmp_path: Path, document: dict[str, Any]) -> str:
    path = tmp_path / "vectors.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return str(path)


def test_shared_vectors_all_pass() -> None:
    assert (SHARED / "vectors").is_dir(), "the shared conformance vectors sit beside the repository"
    result = invoke(str(VECTORS_FILE))
    lines = result.output.strip().splitlines()
    total = len(shared_document()["vectors"])
    assert result.exit_code == 0, result.output
    assert lines[-1] == f"{total} passed, 0 failed"
    assert all(line.startswith("PASS ") for line in lines[:-1])
    assert len(lines) == total + 1


def test_a_wrong_expectation_is_reported_as_failure(tmp_path: Path) -> None:
    document = shared_document()
    vector = next(v for v in document["vectors"] if v["id"] == "bill-extend")
    vector["expect"]["total_amount_cby"] = 37  # the right answer is 36
    result = invoke(write(tmp_path, document))
    assert result.exit_code != 0
    assert "FAIL bill-extend: total_amount_cby: expected 37, got 36" in result.output
    assert result.output.strip().splitlines()[-1] == f"{len(document['vectors']) - 1} passed, 1 failed"


@pytest.mark.parametrize(
    ("vector_id", "mutate", "reason"),
    [
        ("sign-basic-plaintext", lambda e: e.update(publisher_sig_hex="00" * 64), "publisher_sig_hex"),
        ("verify-payload-changed", lambda e: e.update(valid=True), "valid: expected True, got False"),
        ("filter-unknown-op", lambda e: e.update(error="LIMIT_EXCEEDED"), "expected error LIMIT_EXCEEDED"),
        ("filter-not", lambda e: e.update(match=True), "match"),
        ("since-basic", lambda e: e.update(sequences=[21, 22]), "sequences"),
        ("keys-one-rotation", lambda e: e["resolutions"][2].update(signing_key_id=1), "resolutions"),
        ("env-basic", lambda e: e.update(nonce_hex="00" * 24), "nonce_hex"),
        (
            "decrypt-ok",
            lambda e: (e.clear(), e.update(error="DECRYPTION_FAILED")),
            "expected error DECRYPTION_FAILED, got",
        ),
        ("bill-idempotent", lambda e: e.update(from_key_epoch=106), "from_key_epoch"),
        ("since-limit-zero", lambda e: (e.clear(), e.update(sequences=[])), "expected a result, got error"),
    ],
)
def test_each_vector_type_detects_a_wrong_expectation(vector_id: str, mutate: Any, reason: str) -> None:
    vector = copy.deepcopy(next(v for v in shared_document()["vectors"] if v["id"] == vector_id))
    mutate(vector["expect"])
    outcome = run_vector(vector)
    assert not outcome.passed
    assert outcome.reason is not None
    assert reason in outcome.reason


def test_any_error_wildcard_needs_an_error() -> None:
    vector = copy.deepcopy(next(v for v in shared_document()["vectors"] if v["id"] == "since-basic"))
    vector["expect"] = {"error": "*"}
    assert not run_vector(vector).passed
    vector["input"]["limit"] = 0
    assert run_vector(vector).passed


def test_malformed_vectors_fail_instead_of_crashing() -> None:
    assert "unknown vector type" in (
        run_vector({"id": "x", "type": "teleport", "input": {}, "expect": {"a": 1}}).reason or ""
    )
    assert "lacks 'head'" in (
        run_vector({"id": "x", "type": "get_since", "input": {}, "expect": {"a": 1}}).reason or ""
    )
    assert not run_vector({"id": "x", "type": "get_since", "input": {}}).passed
    assert not run_vector("nope").passed


def test_json_output(tmp_path: Path) -> None:
    document = {"format": "watchtower-vectors/1", "vectors": shared_document()["vectors"][:3]}
    result = invoke("--json", write(tmp_path, document))
    data = json.loads(result.output)
    assert result.exit_code == 0
    assert (data["passed"], data["failed"]) == (3, 0)
    assert [r["id"] for r in data["results"]] == [v["id"] for v in document["vectors"]]


def test_unreadable_files_fail(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    result = invoke(str(bad))
    assert result.exit_code != 0
    assert "FAIL" in result.output
    assert "0 passed, 1 failed" in result.output
    assert invoke(write(tmp_path, {"format": "other/9", "vectors": []})).exit_code != 0
    assert invoke(str(tmp_path / "missing.json")).exit_code != 0


def test_run_document_preserves_order() -> None:
    outcomes = run_document(shared_document())
    assert [o.vector_id for o in outcomes] == [v["id"] for v in shared_document()["vectors"]]


# --- Rotation-chain vectors (vectors/key-chains.json) ---------------------------------------------

KEY_CHAINS = Path(__file__).resolve().parents[2] / "vectors" / "key-chains.json"


def key_chain_document() -> dict[str, Any]:
    return json.loads(KEY_CHAINS.read_text(encoding="utf-8"))


def test_the_key_chain_vectors_all_pass_beside_the_shared_ones() -> None:
    document = key_chain_document()
    assert {v["type"] for v in document["vectors"]} == {"key_chain"}
    result = invoke(str(KEY_CHAINS), str(VECTORS_FILE))
    total = len(document["vectors"]) + len(shared_document()["vectors"])
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1] == f"{total} passed, 0 failed"


def test_the_key_chain_vectors_cover_valid_chains_and_each_error_code() -> None:
    expects = [v["expect"] for v in key_chain_document()["vectors"]]
    assert sum(1 for e in expects if "entries" in e) >= 3
    assert {e.get("error") for e in expects} >= {"INVALID_SIGNATURE", "MALFORMED_RECORD"}


def test_the_key_chain_vectors_file_is_what_its_generator_writes() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("generate_key_chains", KEY_CHAINS.with_name("generate_key_chains.py"))
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.document() == key_chain_document()


@pytest.mark.parametrize(("vector_id", "mutate", "reason"), [
    ("chain-two-rotations", lambda v: v["expect"]["entries"].pop(), "entries: expected"),
    ("chain-two-rotations", lambda v: v["expect"].update(owner="0x" + "ab" * 32), "owner: expected"),
    ("chain-rotation-signed-by-an-attacker", lambda v: v["expect"].update(error="MALFORMED_RECORD"),
     "expected error MALFORMED_RECORD, got INVALID_SIGNATURE"),
    ("chain-rotations-swapped", lambda v: v["expect"].update(error="INVALID_SIGNATURE"),
     "expected error INVALID_SIGNATURE, got MALFORMED_RECORD"),
    # A forged key accepted would be "a result where an error was expected".
    ("chain-rotation-signed-by-an-attacker", lambda v: v["input"]["chain"].pop(), "expected error"),
])
def test_a_wrong_key_chain_expectation_fails(vector_id: str, mutate: Any, reason: str) -> None:
    vector = copy.deepcopy(next(v for v in key_chain_document()["vectors"] if v["id"] == vector_id))
    mutate(vector)
    outcome = run_vector(vector)
    assert not outcome.passed
    assert reason in (outcome.reason or "")


def test_a_key_chain_vector_without_a_chain_is_malformed() -> None:
    outcome = run_vector({"id": "x", "type": "key_chain", "input": {"stream_id": "s"}, "expect": {"error": "*"}})
    assert not outcome.passed
    assert "malformed vector" in (outcome.reason or "")
