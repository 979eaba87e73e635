"""Pre-shared-key recipients of a keyload (IOTA Channels: "Allowed Recipients are identified either
by pre-shared keys or by x25519 public key identifiers"): the PSK holder, named by its PSK id, reads
the branch; a stranger does not. Pure."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import cbor2
import nacl.public
import pytest

from watchtower.protocol.confidential.keyload import (
    Recipient,
    build_keyload,
    check_keyload,
    decode_part,
    open_keyload,
    open_keyload_psk,
)
from watchtower.protocol.confidential.psk import MAX_PSK_RECIPIENTS, PskRecipient
from watchtower.protocol.confidential.session_key import mask, unmask
from watchtower.protocol.conformance import run_vector
from watchtower.protocol.errors import DecryptionFailedError, InvalidArgumentError, UnauthorizedError

SID = "private.desk"
OWNER_KEY = nacl.public.PrivateKey(b"\x11" * 32)
OWNER = Recipient("0x" + "11" * 32, 1, bytes(OWNER_KEY.public_key))
PSK_ID, PSK = bytes(range(16)), hashlib.sha256(b"the desk's pre-shared key").digest()
OTHER_ID, OTHER_PSK = bytes(range(16, 32)), hashlib.sha256(b"another holder's key").digest()


def masked(session_key: bytes, keyload_id: bytes, text: bytes) -> bytes:
    return mask(session_key, keyload_id=keyload_id, stream_id=SID, sequence=7, branch="main", kind="memo",
                content_type="text/plain", plaintext=text)


def read(session_key: bytes, keyload_id: bytes, payload: bytes) -> bytes:
    return unmask(session_key, payload, keyload_id=keyload_id, stream_id=SID, sequence=7, branch="main",
                  kind="memo", content_type="text/plain")


def test_the_psk_holder_reads_the_branch_and_a_stranger_does_not() -> None:
    """Failed before the fix: a keyload had no pre-shared-key recipients."""
    keyload = build_keyload(SID, [OWNER], psk_recipients=[PskRecipient(PSK_ID, PSK), PskRecipient(OTHER_ID,
                                                                                                   OTHER_PSK)])
    part = decode_part(keyload.parts[0])
    payload = masked(keyload.session_key, keyload.keyload_id, b"buy at 10")
    key = open_keyload_psk(part, PSK_ID, PSK)  # the holder, named by its PSK id
    assert key == keyload.session_key
    assert read(key, keyload.keyload_id, payload) == b"buy at 10"
    assert open_keyload_psk(part, OTHER_ID, OTHER_PSK) == keyload.session_key
    with pytest.raises(DecryptionFailedError):  # a stranger guessing a PSK
        open_keyload_psk(part, PSK_ID, hashlib.sha256(b"a guess").digest())
    with pytest.raises(DecryptionFailedError):  # another holder's PSK under this id
        open_keyload_psk(part, PSK_ID, OTHER_PSK)
    with pytest.raises(UnauthorizedError):  # an id the keyload does not name
        open_keyload_psk(part, bytes(16), PSK)
    stranger = nacl.public.PrivateKey(b"\x22" * 32)
    with pytest.raises(UnauthorizedError):
        open_keyload(part, "0x" + "22" * 32, bytes(stranger))
    assert open_keyload(part, OWNER.address, bytes(OWNER_KEY)) == keyload.session_key  # X25519 members too


def test_the_psk_ids_are_covered_by_the_members_digest_and_ride_in_part_zero() -> None:
    keyload = build_keyload(SID, [OWNER], psk_recipients=[PskRecipient(PSK_ID, PSK)])
    summary = check_keyload([decode_part(p) for p in keyload.parts])
    assert summary.psk_ids == (PSK_ID,)
    doc = cbor2.loads(keyload.parts[0])
    assert [e[0] for e in doc["psk_entries"]] == [PSK_ID]
    assert len(doc["psk_entries"][0][1]) == 72
    plain = build_keyload(SID, [OWNER], session_key=keyload.session_key, keyload_id=keyload.keyload_id)
    assert "psk_entries" not in cbor2.loads(plain.parts[0])  # without PSK holders: the bytes of before
    assert check_keyload([decode_part(plain.parts[0])]).members_digest != summary.members_digest
    # A PSK entry dropped (and the field with it) no longer matches the digest.
    doc.pop("psk_entries")
    from watchtower.protocol import cbor

    with pytest.raises(InvalidArgumentError, match="digest"):
        check_keyload([decode_part(cbor.encode(doc))])


def test_a_wrapped_key_is_bound_to_its_keyload_and_psk_id() -> None:
    one = build_keyload(SID, [OWNER], psk_recipients=[PskRecipient(PSK_ID, PSK), PskRecipient(OTHER_ID, PSK)])
    part = decode_part(one.parts[0])
    swapped = dict(cbor2.loads(one.parts[0]))
    swapped["psk_entries"] = [[PSK_ID, part.psk_entries[1][1]], [OTHER_ID, part.psk_entries[0][1]]]
    from watchtower.protocol import cbor

    moved = decode_part(cbor.encode(swapped))
    with pytest.raises(DecryptionFailedError):  # the same PSK, but wrapped for the other id
        open_keyload_psk(moved, PSK_ID, PSK)


@pytest.mark.parametrize("recipients", [
    [PskRecipient(PSK_ID, PSK), PskRecipient(PSK_ID, OTHER_PSK)],
    [PskRecipient(PSK_ID[:15], PSK)],
    [PskRecipient(PSK_ID, PSK[:31])],
    [PskRecipient(i.to_bytes(16, "big"), PSK) for i in range(MAX_PSK_RECIPIENTS + 1)],
])
def test_bad_psk_recipients_are_refused(recipients: list[PskRecipient]) -> None:
    with pytest.raises(InvalidArgumentError):
        build_keyload(SID, [OWNER], psk_recipients=recipients)


# --- the vectors (vectors/keyload-psk.json) ---------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]
PSK_VECTORS = REPO / "vectors" / "keyload-psk.json"


def psk_vectors() -> list[dict]:
    return json.loads(PSK_VECTORS.read_text(encoding="utf-8"))["vectors"]


@pytest.mark.parametrize("vector", psk_vectors(), ids=lambda v: v["id"])
def test_each_psk_vector_passes(vector: dict) -> None:
    outcome = run_vector(vector)
    assert outcome.passed, outcome.reason


def test_a_wrong_psk_vector_expectation_fails() -> None:
    vector = next(v for v in psk_vectors() if v["id"] == "keyload-psk-holder-opens")
    vector["expect"]["session_key_hex"] = "00" * 32
    assert not run_vector(vector).passed


def test_the_psk_generator_reproduces_the_file_byte_for_byte(tmp_path: Path) -> None:
    out = tmp_path / "keyload-psk.json"
    with out.open("wb") as sink:
        subprocess.run([sys.executable, str(REPO / "vectors" / "generate_keyload_psk.py")], stdout=sink, check=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert out.read_bytes() == PSK_VECTORS.read_bytes()
