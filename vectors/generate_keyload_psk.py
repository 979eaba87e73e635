"""Regenerate ``keyload-psk.json``: pre-shared-key recipients of a keyload (docs/private-feeds.md).

    .venv/bin/python vectors/generate_keyload_psk.py > vectors/keyload-psk.json

Vector types: ``keyload_psk_open`` (the holder of a pre-shared key, named by its 16-byte PSK id,
opens the session key a keyload wrapped for it in part 0) and ``keyload_check`` (the members
digest then covers the PSK ids too). The keyloads are those of ``generate_keyloads.py`` (its
deterministic sealed boxes for the X25519 members) with PSK holders added; a PSK wrap is
deterministic by construction (its nonce is derived), so the output is stable.
``tests/protocol/test_keyload_psk.py`` checks the committed file equals it.

The pre-shared keys here are derived from public seeds: they protect nothing.
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

import cbor2
from generate_keyloads import KEYLOAD_ID, SESSION_KEY, SMALL, STREAM, TEST_KEY_NOTE, _reseal, _summary

from watchtower.protocol import cbor
from watchtower.protocol.confidential.keyload import build_keyload
from watchtower.protocol.confidential.psk import PskRecipient
from watchtower.protocol.confidential.session_key import key_commitment

DESK_ID = bytes.fromhex("0d35c0000000000000000000000000a1")
DESK_PSK = hashlib.sha256(b"watchtower test psk desk").digest()
BOT_ID = bytes.fromhex("0d35c0000000000000000000000000b2")
BOT_PSK = hashlib.sha256(b"watchtower test psk bot").digest()
STRANGER_PSK = hashlib.sha256(b"watchtower test psk stranger").digest()


def psk_parts() -> list[bytes]:
    """A keyload of the three test members and two PSK holders, deterministic."""
    built = build_keyload(STREAM, [m.recipient() for m in SMALL], session_key=SESSION_KEY, keyload_id=KEYLOAD_ID,
                          psk_recipients=[PskRecipient(DESK_ID, DESK_PSK), PskRecipient(BOT_ID, BOT_PSK)])
    return [_reseal(p, SESSION_KEY, SMALL) for p in built.parts]


def _open(vid: str, parts: list[bytes], psk_id: bytes, psk: bytes, expect: dict[str, Any]) -> dict[str, Any]:
    return {"id": vid, "type": "keyload_psk_open",
            "input": {"parts_hex": [p.hex() for p in parts], "psk_id_hex": psk_id.hex(),
                      "test_only_psk_hex": psk.hex(), "note": TEST_KEY_NOTE},
            "expect": expect}


def vectors() -> list[dict[str, Any]]:
    parts = psk_parts()
    opened = {"keyload_id_hex": KEYLOAD_ID.hex(), "session_key_hex": SESSION_KEY.hex(),
              "key_commitment_hex": key_commitment(SESSION_KEY, KEYLOAD_ID).hex(),
              "psk_ids_hex": [DESK_ID.hex(), BOT_ID.hex()]}
    doc = cbor2.loads(parts[0])
    doc["psk_entries"] = doc["psk_entries"][1:]  # the desk's entry dropped: the digest no longer matches
    dropped = cbor.encode(doc)
    summary = _summary(SMALL, parts)
    return [
        {"id": "keyload-psk-check", "type": "keyload_check", "input": {"parts_hex": [p.hex() for p in parts]},
         "expect": {**summary, "psk_ids_hex": [DESK_ID.hex(), BOT_ID.hex()]}},
        _open("keyload-psk-holder-opens", parts, DESK_ID, DESK_PSK, opened),
        _open("keyload-psk-second-holder-opens", parts, BOT_ID, BOT_PSK, opened),
        _open("keyload-psk-stranger-with-a-guessed-key", parts, DESK_ID, STRANGER_PSK, {"error": "DECRYPTION_FAILED"}),
        _open("keyload-psk-holder-key-under-another-id", parts, BOT_ID, DESK_PSK, {"error": "DECRYPTION_FAILED"}),
        _open("keyload-psk-id-not-named", parts, bytes(16), DESK_PSK, {"error": "UNAUTHORIZED"}),
        {"id": "keyload-psk-entry-dropped", "type": "keyload_check", "input": {"parts_hex": [dropped.hex()]},
         "expect": {"error": "INVALID_ARGUMENT"}},
    ]


def document() -> dict[str, Any]:
    """The whole vectors file."""
    return {"format": "watchtower-vectors/1", "vectors": vectors()}


if __name__ == "__main__":
    json.dump(document(), sys.stdout, indent=1)
    sys.stdout.write("\n")
