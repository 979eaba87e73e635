"""The keyload and masked-payload vectors (vectors/keyloads.json) and their checker."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import cbor2
import nacl.public
import pytest
from click.testing import CliRunner
from protocol_strategies import VECTORS_FILE

from watchtower.cli.main import _register, cli
from watchtower.protocol.conformance import run_document, run_vector

_register()

REPO = Path(__file__).resolve().parents[2]
KEYLOADS = REPO / "vectors" / "keyloads.json"
TYPES = {"keyload_check", "keyload_open", "reseal_open", "masked_payload", "unmask"}


def document() -> dict[str, Any]:
    return json.loads(KEYLOADS.read_text(encoding="utf-8"))


def vector(vector_id: str) -> dict[str, Any]:
    return copy.deepcopy(next(v for v in document()["vectors"] if v["id"] == vector_id))


def flip_hex(text: str, at: int = 0) -> str:
    return text[:at] + ("1" if text[at] == "0" else "0") + text[at + 1:]


def test_the_keyload_vectors_pass_beside_the_shared_ones() -> None:
    doc = document()
    assert {v["type"] for v in doc["vectors"]} == TYPES
    shared = json.loads(VECTORS_FILE.read_text(encoding="utf-8"))["vectors"]
    result = CliRunner().invoke(cli, ["vectors", "check", str(VECTORS_FILE), str(KEYLOADS)])
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1] == f"{len(doc['vectors']) + len(shared)} passed, 0 failed"


def test_json_output_reports_each_keyload_vector() -> None:
    result = CliRunner().invoke(cli, ["vectors", "check", "--json", str(KEYLOADS)])
    data = json.loads(result.output)
    assert result.exit_code == 0
    assert data["failed"] == 0
    assert [(r["id"], r["type"], r["passed"]) for r in data["results"]] == [
        (v["id"], v["type"], True) for v in document()["vectors"]]


def test_the_vectors_cover_every_refusal_of_docs_private_feeds() -> None:
    expects = {v["id"]: v["expect"] for v in document()["vectors"]}
    for vid, code in [
        ("keyload-open-stranger-opens-nothing", "UNAUTHORIZED"),
        ("keyload-omits-a-member-it-claims", "INVALID_ARGUMENT"),
        ("keyload-part-of-another-keyload", "INVALID_ARGUMENT"),
        ("keyload-open-sealed-box-moved-from-another-keyload", "DECRYPTION_FAILED"),
        ("keyload-open-sealed-box-byte-flipped", "DECRYPTION_FAILED"),
        ("keyload-members-digest-byte-flipped", "INVALID_ARGUMENT"),
        ("keyload-non-canonical-map-order", "INVALID_ARGUMENT"),
        ("keyload-non-canonical-integer-head", "INVALID_ARGUMENT"),
        ("unmask-another-stream", "DECRYPTION_FAILED"),
        ("unmask-another-sequence", "DECRYPTION_FAILED"),
        ("unmask-another-keyload-id", "DECRYPTION_FAILED"),
        ("unmask-another-branch", "DECRYPTION_FAILED"),
        ("unmask-another-kind", "DECRYPTION_FAILED"),
        ("unmask-another-content-type", "DECRYPTION_FAILED"),
        ("unmask-ciphertext-byte-flipped", "DECRYPTION_FAILED"),
        ("reseal-open-stranger-opens-nothing", "UNAUTHORIZED"),
        ("reseal-open-another-key-than-the-keyload", "DECRYPTION_FAILED"),
        ("reseal-open-commitment-swapped-in", "DECRYPTION_FAILED"),
        ("reseal-open-not-deterministic-cbor", "INVALID_ARGUMENT"),
    ]:
        assert expects[vid] == {"error": code}, vid
    assert sum(1 for e in expects.values() if "session_key_hex" in e) >= 4


@pytest.mark.parametrize(("vector_id", "field"), [
    ("keyload-three-members", "members_digest_hex"),
    ("keyload-three-members", "key_commitment_hex"),
    ("keyload-two-parts-given-last-first", "keyload_id_hex"),
    ("keyload-open-alice", "session_key_hex"),
    ("keyload-open-member-of-part-1-from-that-part-alone", "key_commitment_hex"),
    ("mask-basic", "masked_hex"),
    ("mask-basic", "aad_hex"),
    ("mask-basic", "payload_key_hex"),
    ("unmask-basic", "plaintext_hex"),
])
def test_one_expected_byte_changed_fails(vector_id: str, field: str) -> None:
    v = vector(vector_id)
    v["expect"][field] = flip_hex(v["expect"][field], len(v["expect"][field]) - 1)
    outcome = run_vector(v)
    assert not outcome.passed
    assert f"{field}: expected" in (outcome.reason or "")


def test_a_changed_member_or_count_fails() -> None:
    v = vector("keyload-three-members")
    v["expect"]["members"][1]["account_key_id"] += 1
    assert "members: expected" in (run_vector(v).reason or "")
    v = vector("keyload-open-bob")
    v["expect"]["part"] = 1
    assert not run_vector(v).passed


@pytest.mark.parametrize(("vector_id", "wrong"), [
    ("keyload-open-stranger-opens-nothing", "DECRYPTION_FAILED"),
    ("keyload-open-sealed-box-moved-from-another-keyload", "INVALID_ARGUMENT"),
    ("keyload-non-canonical-map-order", "MALFORMED_RECORD"),
    ("unmask-another-branch", "INVALID_ARGUMENT"),
])
def test_a_wrong_error_code_fails(vector_id: str, wrong: str) -> None:
    v = vector(vector_id)
    v["expect"] = {"error": wrong}
    outcome = run_vector(v)
    assert not outcome.passed
    assert f"expected error {wrong}, got" in (outcome.reason or "")


def test_an_altered_input_no_longer_gives_the_expectation() -> None:
    # A refused keyload repaired by hand would be "a result where an error was expected".
    v = vector("keyload-open-sealed-box-moved-from-another-keyload")
    v["input"]["parts_hex"] = vector("keyload-open-alice")["input"]["parts_hex"]
    assert "expected error DECRYPTION_FAILED, got result" in (run_vector(v).reason or "")
    # A flipped byte in a part the checker accepted makes it refuse.
    v = vector("keyload-three-members")
    part = v["input"]["parts_hex"][0]
    v["input"]["parts_hex"][0] = flip_hex(part, len(part) - 1)
    assert "expected a result, got error" in (run_vector(v).reason or "")


def test_cbor2_reads_the_parts_as_the_vectors_describe_them() -> None:
    """An independent decoder: the part is canonical CBOR holding the expected header and entries,
    and the test-only member key opens its sealed box with plain libsodium."""
    check, opened = vector("keyload-three-members"), vector("keyload-open-alice")
    (raw,) = (bytes.fromhex(h) for h in check["input"]["parts_hex"])
    doc = cbor2.loads(raw)
    assert cbor2.dumps(doc, canonical=True) == raw
    assert set(doc) == {"v", "keyload_id", "stream_id", "branch", "part", "parts", "members", "members_digest",
                        "key_commitment", "entries"}
    expect = check["expect"]
    assert (doc["v"], doc["part"], doc["parts"], doc["members"]) == (1, 0, 1, len(expect["members"]))
    assert doc["keyload_id"].hex() == expect["keyload_id_hex"]
    assert (doc["stream_id"], doc["branch"]) == (expect["stream_id"], expect["branch"])
    assert doc["members_digest"].hex() == expect["members_digest_hex"]
    assert doc["key_commitment"].hex() == expect["key_commitment_hex"]
    assert [{"address": "0x" + a.hex(), "account_key_id": k} for a, k, _ in doc["entries"]] == expect["members"]
    assert all(len(sealed) == 80 for _, _, sealed in doc["entries"])
    sealed = next(s for a, _, s in doc["entries"] if "0x" + a.hex() == opened["input"]["address"])
    secret = nacl.public.PrivateKey(bytes.fromhex(opened["input"]["test_only_x25519_secret_key_hex"]))
    assert nacl.public.SealedBox(secret).decrypt(sealed).hex() == opened["expect"]["session_key_hex"]


def test_the_member_keys_in_the_vectors_are_labelled_test_only() -> None:
    for v in document()["vectors"]:
        if v["type"] in ("keyload_open", "reseal_open"):
            assert "test-only" in v["input"]["note"]


def test_the_generator_reproduces_the_file_byte_for_byte(tmp_path: Path) -> None:
    out = tmp_path / "keyloads.json"
    with out.open("wb") as sink:
        subprocess.run([sys.executable, str(REPO / "vectors" / "generate_keyloads.py")], stdout=sink, check=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert out.read_bytes() == KEYLOADS.read_bytes()


def test_run_document_keeps_the_file_order() -> None:
    assert [o.vector_id for o in run_document(document())] == [v["id"] for v in document()["vectors"]]


def test_an_independent_decoder_reads_a_reseal_vector_and_libsodium_opens_it() -> None:
    opened = vector("reseal-open-carol")
    doc = cbor2.loads(bytes.fromhex(opened["input"]["reseal_hex"]))
    assert set(doc) == {"v", "keyload_id", "stream_id", "branch", "key_commitment", "entries"}
    assert doc["key_commitment"].hex() == opened["input"]["keyload_key_commitment_hex"]
    sealed = next(s for a, _, s in doc["entries"] if "0x" + a.hex() == opened["input"]["address"])
    secret = nacl.public.PrivateKey(bytes.fromhex(opened["input"]["test_only_x25519_secret_key_hex"]))
    assert nacl.public.SealedBox(secret).decrypt(sealed).hex() == opened["expect"]["session_key_hex"]
