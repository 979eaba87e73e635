"""The feed page's JavaScript signing module agrees with the protocol core, byte for byte.

`watchtower/gateway/static/signing.mjs` rebuilds the canonical signing bytes in the browser and
verifies payload hash and ed25519 signature with WebCrypto. Node (the same WebCrypto API) runs it
on the shared conformance vectors and on messages signed here by `watchtower.protocol.signing`
(every tag kind, long texts, large integers, key epochs, ciphertext, non-ASCII keys), and on
tampered copies that must not verify.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

import nacl.signing
import pytest

from watchtower.protocol.signing import message_signing_bytes, sign_message, verify_message

HERE = Path(__file__).parent
SHARED_VECTORS = Path(__file__).resolve().parents[3] / "shared" / "vectors" / "conformance-v1.json"

pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")


def run_node(cases: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    done = subprocess.run(["node", str(HERE / "signing_check.mjs")], input=json.dumps(cases), capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return {r["id"]: r for r in json.loads(done.stdout)}


def vector_cases() -> list[dict[str, Any]]:
    if not SHARED_VECTORS.exists():
        pytest.skip(f"the shared conformance vectors are not at {SHARED_VECTORS}")
    cases = []
    for v in json.loads(SHARED_VECTORS.read_text(encoding="utf-8"))["vectors"]:
        if v["type"] == "signing" and "error" not in v["expect"]:
            i = v["input"]
            message = {k: i[k] for k in i if k not in ("payload_hex", "signer_seed_hex")}
            message.update(payload_inline_hex=i["payload_hex"],
                           payload_hash_hex=hashlib.sha256(bytes.fromhex(i["payload_hex"])).hexdigest(),
                           publisher_sig_hex=v["expect"]["publisher_sig_hex"])
            cases.append({"id": v["id"], "message": message, "public_key_hex": v["expect"]["public_key_hex"],
                          "bytes": v["expect"]["signing_bytes_hex"], "valid": True})
        elif v["type"] == "verify":
            message = dict(v["input"]["message"])
            message["payload_inline_hex"] = message.pop("payload_hex")
            cases.append({"id": v["id"], "message": message, "public_key_hex": v["input"]["public_key_hex"],
                          "bytes": None, "valid": v["expect"]["valid"]})
    return cases


def test_js_signing_bytes_and_verdicts_match_the_conformance_vectors() -> None:
    cases = vector_cases()
    assert sum(c["bytes"] is not None for c in cases) >= 5
    assert any(not c["valid"] for c in cases)
    results = run_node(cases)
    for case in cases:
        got = results[case["id"]]
        assert got["error"] is None, (case["id"], got["error"])
        if case["bytes"] is not None:
            assert got["signing_bytes_hex"] == case["bytes"], case["id"]
        assert got["valid"] is case["valid"], case["id"]


def own_messages() -> list[dict[str, Any]]:
    rng = random.Random(20261123)
    key = nacl.signing.SigningKey(bytes(range(32)))
    texts = ["", "x", "é€𝄞", "k" * 23, "k" * 24, "v" * 255, "v" * 256, "😀" * 70]
    numbers = [0.0, -0.0, 1.0, 1.5, -2.25, 1e300, 5e-324, 2.0**53 + 2, 123456789.125, -1.0]
    cases = []
    for n in range(60):
        tags: dict[str, Any] = {}
        for _ in range(rng.randint(0, 8)):
            name = rng.choice(["a", "symbol", "zz", "Ä", "price_usd", "k" * 30, "中文", "b" + str(rng.randint(0, 9))])
            tags[name] = rng.choice([rng.choice(texts), rng.choice(numbers), True, False, rng.randint(-99, 99)])
        ciphertext = n % 3 == 0
        msg = sign_message(
            stream_id=rng.choice(["s", "prices.btc-usd", "s-" + "a" * 100]), sequence=rng.choice([1, 23, 24, 255, 256,
                                                                                                   65_535, 65_536,
                                                                                                   2**32, 2**40]),
            timestamp_unix_ms=rng.choice([0, 1_767_225_600_000, 2**53 - 1]), kind=rng.choice(["t", "price_batch"]),
            payload=rng.randbytes(rng.choice([40, 41, 300, 16_384])) if ciphertext else rng.randbytes(
                rng.choice([0, 1, 23, 24, 300, 16_384])),
            content_type=rng.choice([None, "application/json", "text/plain; charset=utf-8"]), tags=tags,
            payload_format="CIPHERTEXT" if ciphertext else "PLAINTEXT",
            key_epoch=rng.choice([0, 1, 300]) if ciphertext else None,
            signing_key_id=rng.choice([1, 2, 500]), signing_key=key)
        cases.append({"id": f"own-{n}", "message": msg.to_json_dict(), "public_key_hex": bytes(key.verify_key).hex(),
                      "bytes": message_signing_bytes(msg).hex(), "valid": verify_message(msg, bytes(key.verify_key))})
    return cases


def test_js_signing_bytes_equal_pythons_on_the_projects_own_messages() -> None:
    cases = own_messages()
    results = run_node(cases)
    for case in cases:
        got = results[case["id"]]
        assert got["error"] is None, (case["id"], got["error"])
        assert got["signing_bytes_hex"] == case["bytes"], case["id"]
        assert got["valid"] is True is case["valid"], case["id"]


def test_js_refuses_tampered_messages() -> None:
    good = own_messages()[:4]
    cases = []
    for case in good:
        m = case["message"]
        flipped_tag = {**m, "tags": {**m["tags"], "injected": "yes"}}
        other_payload = {**m, "payload_inline_hex": m["payload_inline_hex"] + "00"}
        other_sequence = {**m, "sequence": m["sequence"] + 1}
        for name, message in (("tag", flipped_tag), ("payload", other_payload), ("sequence", other_sequence)):
            cases.append({"id": f"{case['id']}-{name}", "message": message, "public_key_hex": case["public_key_hex"]})
    results = run_node(cases)
    assert {r["id"]: r["valid"] for r in results.values()} == {c["id"]: False for c in cases}
