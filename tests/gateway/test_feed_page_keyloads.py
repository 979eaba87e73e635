"""The feed page's keyload module agrees with the protocol core, and the page serves its library.

`watchtower/gateway/static/keyload.mjs` decodes keyload parts and reseals byte-exactly, opens the
member's sealed session key (libsodium, vendored) and unmasks payloads. Node runs it through
``tests/gateway/keyload_check.mjs`` on every vector of ``vectors/keyloads.json`` of a type it knows
(refusals included: a vector expecting an error code must fail with that code in JavaScript
too), and on keyloads, masked payloads and reseals built here by `watchtower.protocol.confidential.keyload`.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import nacl.public
import nacl.signing
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from watchtower.gateway import page
from watchtower.protocol import cbor
from watchtower.protocol.confidential.keyload import Recipient, build_keyload, check_keyload, decode_part
from watchtower.protocol.confidential.reseal import build_reseals
from watchtower.protocol.confidential.session_key import key_commitment, mask, masked_aad, new_session_key

HERE = Path(__file__).parent
CHECKER = HERE / "keyload_check.mjs"
VECTORS = Path(__file__).resolve().parents[2] / "vectors" / "keyloads.json"
KNOWN = {"keyload_check", "keyload_open", "masked_payload", "unmask", "reseal_open"}

needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")


def node(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(["node", str(CHECKER), *args], input=stdin, capture_output=True, text=True, timeout=60,
                          check=False)


def run_cases(cases: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    done = node("--cases", stdin=json.dumps(cases))
    assert done.returncode == 0, done.stderr
    return {r["id"]: r for r in json.loads(done.stdout)}


@needs_node
def test_js_passes_every_keyload_vector_it_knows() -> None:
    vectors = json.loads(VECTORS.read_text(encoding="utf-8"))["vectors"]
    done = node(str(VECTORS))
    report = json.loads(done.stdout)
    failed = [o for o in report["outcomes"] if not o["passed"]]
    assert not failed, failed
    assert done.returncode == 0, done.stderr
    ran = Counter(o["type"] for o in report["outcomes"])
    assert ran == Counter(v["type"] for v in vectors if v["type"] in KNOWN)
    assert {s["type"] for s in report["skipped"]}.isdisjoint(KNOWN)
    for kind in ("keyload_check", "keyload_open", "masked_payload", "unmask"):
        assert ran[kind] >= 5, kind
    refusals = Counter(v["expect"]["error"] for v in vectors if "error" in v["expect"])
    assert {"UNAUTHORIZED", "DECRYPTION_FAILED", "INVALID_ARGUMENT"} <= set(refusals)


@needs_node
def test_js_fails_a_vector_whose_expectation_is_wrong_and_skips_unknown_types() -> None:
    doc = json.loads(VECTORS.read_text(encoding="utf-8"))
    by_type = {v["type"]: v for v in doc["vectors"] if "error" not in v["expect"]}
    wrong_open = json.loads(json.dumps(by_type["keyload_open"]))
    wrong_open["expect"]["session_key_hex"] = "00" * 32
    wrong_unmask = json.loads(json.dumps(by_type["unmask"]))
    wrong_unmask["expect"] = {"error": "DECRYPTION_FAILED"}
    future = {"id": "future", "type": "keyload_rotate", "input": {}, "expect": {}}
    done = node("-", stdin=json.dumps({"format": doc["format"], "vectors": [wrong_open, wrong_unmask, future]}))
    report = json.loads(done.stdout)
    assert done.returncode == 1
    assert [o["passed"] for o in report["outcomes"]] == [False, False]
    assert report["skipped"] == [{"id": "future", "type": "keyload_rotate"}]


def member(seed: int) -> tuple[str, nacl.public.PrivateKey]:
    """A test member from a public seed: its address and X25519 key."""
    raw = seed.to_bytes(2, "big") * 16
    address = "0x" + bytes(nacl.signing.SigningKey(raw).verify_key).hex()
    return address, nacl.public.PrivateKey(bytes(reversed(raw)))


def reseal(keyload_id: bytes, session_key: bytes, to: list[tuple[str, int, nacl.public.PrivateKey]], *,
           commitment: bytes) -> bytes:
    """A reseal built by hand, to forge one: `commitment` need not be the session key's."""
    entries = [[bytes.fromhex(a[2:]), kid, bytes(nacl.public.SealedBox(k.public_key).encrypt(session_key))]
               for a, kid, k in sorted(to, key=lambda t: t[0])]
    return cbor.encode({"v": 1, "keyload_id": keyload_id, "stream_id": "s", "branch": "main",
                        "key_commitment": commitment, "entries": entries})


@needs_node
def test_js_reads_keyloads_masked_payloads_and_reseals_built_by_python() -> None:
    people = [member(i) for i in range(1, 301)]  # 300 members: 3 parts
    keyload = build_keyload("s", [Recipient(a, 1 + i % 3, bytes(k.public_key)) for i, (a, k) in enumerate(people)])
    parts = [decode_part(p) for p in keyload.parts]
    summary = check_keyload(parts)
    assert len(parts) == 3
    parts_hex = [p.hex() for p in keyload.parts]
    last_address, last_key = max(people)
    stranger, stranger_key = member(400)
    kid = keyload.keyload_id
    plaintext = json.dumps({"headline": "rates unchanged", "é": "€"}).encode()
    context = {"keyload_id": kid, "stream_id": "s", "sequence": 7, "branch": "main", "kind": "news",
               "content_type": "application/json"}
    masked = mask(keyload.session_key, plaintext=plaintext, **context)
    js_context = {"keyload_id_hex": kid.hex(), **{k: v for k, v in context.items() if k != "keyload_id"}}
    newcomer, newcomer_key = member(500)
    other_session = new_session_key()
    (good_reseal,) = build_reseals("s", [Recipient(newcomer, 4, bytes(newcomer_key.public_key)),
                                         Recipient(last_address, 1, bytes(last_key.public_key))],
                                   branch="main", keyload_id=kid, session_key=keyload.session_key)
    forged = reseal(kid, other_session, [(newcomer, 4, newcomer_key)], commitment=key_commitment(other_session, kid))
    flipped = reseal(kid, keyload.session_key, [(newcomer, 4, newcomer_key)], commitment=bytes(32))
    shuffled = good_reseal.replace(b"\x61v\x01", b"\x61v\x18\x01")  # v: 1 with a longer head than needed

    def opener(case_id: str, type_: str, address: str, key: nacl.public.PrivateKey, **extra: Any) -> dict[str, Any]:
        return {"id": case_id, "type": type_, "input": {"address": address,
                                                        "test_only_x25519_secret_key_hex": bytes(key).hex(), **extra}}

    cases = [
        {"id": "check", "type": "keyload_check", "input": {"parts_hex": parts_hex[::-1]}},
        opener("open-last", "keyload_open", last_address, last_key, parts_hex=parts_hex),
        opener("open-stranger", "keyload_open", stranger, stranger_key, parts_hex=parts_hex),
        opener("open-wrong-key", "keyload_open", last_address, stranger_key, parts_hex=parts_hex),
        {"id": "unmask", "type": "unmask", "input": {"session_key_hex": keyload.session_key.hex(),
                                                     "masked_hex": masked.hex(), **js_context}},
        {"id": "unmask-moved", "type": "unmask", "input": {"session_key_hex": keyload.session_key.hex(),
                                                           "masked_hex": masked.hex(), **js_context, "sequence": 8}},
        {"id": "mask", "type": "masked_payload", "input": {"session_key_hex": keyload.session_key.hex(),
                                                           "nonce_hex": masked[:24].hex(),
                                                           "plaintext_hex": plaintext.hex(), **js_context}},
        opener("reseal", "reseal_open", newcomer, newcomer_key, reseal_hex=good_reseal.hex()),
        opener("reseal-with-parts", "reseal_open", newcomer, newcomer_key, reseal_hex=good_reseal.hex(),
               parts_hex=parts_hex),
        opener("reseal-stranger", "reseal_open", stranger, stranger_key, reseal_hex=good_reseal.hex()),
        opener("reseal-flipped-commitment", "reseal_open", newcomer, newcomer_key, reseal_hex=flipped.hex()),
        opener("reseal-forged-alone", "reseal_open", newcomer, newcomer_key, reseal_hex=forged.hex()),
        opener("reseal-forged-against-parts", "reseal_open", newcomer, newcomer_key, reseal_hex=forged.hex(),
               parts_hex=parts_hex),
        opener("reseal-forged-against-commitment", "reseal_open", stranger, stranger_key, reseal_hex=forged.hex(),
               keyload_key_commitment_hex=summary.key_commitment.hex()),
        opener("reseal-non-canonical", "reseal_open", newcomer, newcomer_key, reseal_hex=shuffled.hex()),
    ]
    got = run_cases(cases)
    check = got["check"]["result"]
    assert check["members"] == [{"address": m.address, "account_key_id": m.account_key_id} for m in summary.members]
    assert check["members_digest_hex"] == summary.members_digest.hex()
    assert check["key_commitment_hex"] == summary.key_commitment.hex()
    assert got["open-last"]["result"]["session_key_hex"] == keyload.session_key.hex()
    assert got["open-last"]["result"]["part"] == 2
    assert got["open-stranger"]["error"] == "UNAUTHORIZED"
    assert got["open-wrong-key"]["error"] == "DECRYPTION_FAILED"
    assert got["unmask"]["result"] == {"plaintext_hex": plaintext.hex()}
    assert got["unmask-moved"]["error"] == "DECRYPTION_FAILED"
    assert got["mask"]["result"]["masked_hex"] == masked.hex()
    assert got["mask"]["result"]["aad_hex"] == masked_aad(**context).hex()
    for ok in ("reseal", "reseal-with-parts"):
        assert got[ok]["result"]["session_key_hex"] == keyload.session_key.hex(), ok
        assert got[ok]["result"]["account_key_id"] == 4
    assert got["reseal-stranger"]["error"] == "UNAUTHORIZED"
    assert got["reseal-flipped-commitment"]["error"] == "DECRYPTION_FAILED"
    # Consistent with itself, but not with the keyload: refused once the reader has seen the parts.
    assert got["reseal-forged-alone"]["result"]["session_key_hex"] == other_session.hex()
    assert got["reseal-forged-against-parts"]["error"] == "DECRYPTION_FAILED"
    assert got["reseal-forged-against-commitment"]["error"] == "DECRYPTION_FAILED"  # before membership, as Python
    assert got["reseal-non-canonical"]["error"] == "INVALID_ARGUMENT"


def test_the_page_serves_exactly_its_vendored_files() -> None:
    async def scenario() -> None:
        app = web.Application()
        page.mount(app)
        async with TestClient(TestServer(app)) as client:
            for name in sorted(page.VENDOR_FILES):
                resp = await client.get(f"/ui/vendor/{name}")
                assert resp.status == 200, name
                assert resp.content_type == "text/javascript"
                assert await resp.read() == (page.STATIC / "vendor" / name).read_bytes()
            resp = await client.get("/ui/keyload.mjs")
            assert resp.status == 200
            for path in ("/ui/vendor/README.md", "/ui/vendor/libsodium.LICENSE", "/ui/vendor/%2E%2E%2Fpage.py",
                         "/ui/vendor/..%2Ffeed.mjs", "/ui/vendor/feed.mjs", "/ui/vendor/", "/ui/vendor%2Flibsodium.mjs",
                         "/ui/..%2Fpage.py"):
                resp = await client.get(path)
                assert resp.status == 404, path

    asyncio.run(scenario())
    # Everything the page imports is in the list (and the list names only files that exist).
    vendored = {p.name for p in (page.STATIC / "vendor").glob("*.mjs")}
    assert vendored == page.VENDOR_FILES
