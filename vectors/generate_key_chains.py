"""Regenerate ``key-chains.json``: rotation-chain conformance vectors (type ``key_chain``).

    .venv/bin/python vectors/generate_key_chains.py > vectors/key-chains.json

Keys come from fixed seeds and ed25519 signatures are deterministic, so the output is stable;
``tests/protocol/test_vectors_cli.py`` checks the committed file equals it. Each vector's input
is a chain as ``GET /v1/streams/{id}/keys`` serves it (entries with their signed commands) plus an
optional ``expected_owner``; the expectation is the verified schedule and owner, or the error code.
"""

from __future__ import annotations

import copy
import json
import sys
from typing import Any

from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.signing import signing_key_from_seed

SID = "prices.btc-usd"
OWNER = signing_key_from_seed(bytes.fromhex("11" * 32))
ATTACKER = signing_key_from_seed(bytes.fromhex("66" * 32))
PUBLISHERS = [signing_key_from_seed(bytes([0x20 + i]) * 32) for i in range(4)]


def _pub(key: Any) -> bytes:
    return bytes(key.verify_key)


def _entry(key_id: int, key: bytes, effective: int, command: Any) -> dict[str, Any]:
    return {"signing_key_id": key_id, "publisher_key": key.hex(), "effective_sequence": effective,
            "command": None if command is None else command.to_dict()}


def _create(signer: Any = OWNER, stream_id: str = SID, body: dict[str, Any] | None = None) -> Any:
    return sign_command(signer, "create_stream", stream_id, 1,
                        body or {"publisher_key_hex": _pub(PUBLISHERS[0]).hex(), "ring_buffer_capacity": 100})


def _rotate(new: Any, nonce: int, signer: Any = OWNER, stream_id: str = SID, **signed: int) -> Any:
    return sign_command(signer, "rotate_publisher_key", stream_id, nonce, {"new_key": _pub(new), **signed})


def _signed(rotations: int = 3) -> list[dict[str, Any]]:
    """Rotations that also sign their key id and cut-over (optional rotate fields)."""
    chain = [_entry(1, _pub(PUBLISHERS[0]), 1, _create())]
    for i in range(rotations):
        key_id, cutover = i + 2, 4 + 3 * i
        command = _rotate(PUBLISHERS[i + 1], 3 + i, signing_key_id=key_id, effective_sequence=cutover)
        chain.append(_entry(key_id, _pub(PUBLISHERS[i + 1]), cutover, command))
    return chain


def _valid(rotations: int = 2, cutovers: tuple[int, ...] = (5, 12, 12)) -> list[dict[str, Any]]:
    chain = [_entry(1, _pub(PUBLISHERS[0]), 1, _create())]
    for i in range(rotations):
        chain.append(_entry(i + 2, _pub(PUBLISHERS[i + 1]), cutovers[i], _rotate(PUBLISHERS[i + 1], nonce=3 + i)))
    return chain


def _expect(chain: list[dict[str, Any]]) -> dict[str, Any]:
    return {"owner": address_from_public_key(_pub(OWNER)),
            "entries": [{k: e[k] for k in ("signing_key_id", "publisher_key", "effective_sequence")} for e in chain]}


def _vector(vid: str, chain: list[dict[str, Any]], expect: dict[str, Any], owner: str | None = None) -> dict[str, Any]:
    return {"id": vid, "type": "key_chain",
            "input": {"stream_id": SID, "expected_owner": owner, "chain": chain}, "expect": expect}


def vectors() -> list[dict[str, Any]]:
    owner = address_from_public_key(_pub(OWNER))
    out = [
        _vector("chain-create-only", _valid(0), _expect(_valid(0))),
        _vector("chain-two-rotations", _valid(2), _expect(_valid(2)), owner),
        _vector("chain-two-rotations-before-a-publish", _valid(3), _expect(_valid(3))),
    ]
    forged = _valid(2)
    forged.append(_entry(4, _pub(ATTACKER), 20, _rotate(ATTACKER, 9, signer=ATTACKER)))
    out.append(_vector("chain-rotation-signed-by-an-attacker", forged, {"error": "INVALID_SIGNATURE"}))
    bare = [*_valid(1), _entry(3, _pub(ATTACKER), 20, None)]
    out.append(_vector("chain-key-without-a-command", bare, {"error": "INVALID_SIGNATURE"}))
    swapped = _valid(2)
    swapped[2]["publisher_key"] = _pub(ATTACKER).hex()
    out.append(_vector("chain-entry-key-differs-from-the-signed-key", swapped, {"error": "INVALID_SIGNATURE"}))
    tampered = copy.deepcopy(_valid(2))
    sig = tampered[1]["command"]["signature_hex"]
    tampered[1]["command"]["signature_hex"] = ("0" if sig[0] != "0" else "1") + sig[1:]
    out.append(_vector("chain-signature-altered", tampered, {"error": "INVALID_SIGNATURE"}))
    new_key = copy.deepcopy(_valid(1))
    new_key[1]["command"]["body"]["new_key"] = {"$bytes": _pub(ATTACKER).hex()}
    new_key[1]["publisher_key"] = _pub(ATTACKER).hex()
    out.append(_vector("chain-signed-new-key-altered", new_key, {"error": "INVALID_SIGNATURE"}))
    out.append(_vector("chain-another-owner-than-expected", _valid(1), {"error": "INVALID_SIGNATURE"},
                       address_from_public_key(_pub(ATTACKER))))
    theirs = [_entry(1, _pub(PUBLISHERS[0]), 1, _create(signer=ATTACKER)), *_valid(1)[1:]]
    out.append(_vector("chain-created-by-another-key-than-the-rotations", theirs, {"error": "INVALID_SIGNATURE"}))
    reordered = _valid(2)
    reordered[1], reordered[2] = reordered[2], reordered[1]
    out.append(_vector("chain-rotations-swapped", reordered, {"error": "MALFORMED_RECORD"}))
    renumbered = copy.deepcopy(reordered)
    renumbered[1]["signing_key_id"], renumbered[2]["signing_key_id"] = 2, 3
    renumbered[1]["effective_sequence"], renumbered[2]["effective_sequence"] = 5, 12
    out.append(_vector("chain-rotations-swapped-and-renumbered", renumbered, {"error": "MALFORMED_RECORD"}))
    gap = _valid(2)
    gap[2]["signing_key_id"] = 4
    out.append(_vector("chain-key-ids-skip", gap, {"error": "MALFORMED_RECORD"}))
    backwards = _valid(2)
    backwards[2]["effective_sequence"] = 4
    out.append(_vector("chain-cut-over-moves-backwards", backwards, {"error": "MALFORMED_RECORD"}))
    elsewhere = [_entry(1, _pub(PUBLISHERS[0]), 1, _create(stream_id="prices.eth-usd"))]
    out.append(_vector("chain-create-of-another-stream", elsewhere, {"error": "MALFORMED_RECORD"}))
    rotation_first = [_entry(1, _pub(PUBLISHERS[1]), 1, _rotate(PUBLISHERS[1], 2))]
    out.append(_vector("chain-starts-with-a-rotation", rotation_first, {"error": "MALFORMED_RECORD"}))
    other_rotation = _rotate(PUBLISHERS[1], 2, stream_id="prices.eth-usd")
    other_stream_rotation = [*_valid(0), _entry(2, _pub(PUBLISHERS[1]), 3, other_rotation)]
    out.append(_vector("chain-rotation-of-another-stream", other_stream_rotation, {"error": "MALFORMED_RECORD"}))
    out.append(_vector("chain-empty", [], {"error": "MALFORMED_RECORD"}))
    late_start = _valid(0)
    late_start[0]["effective_sequence"] = 2
    out.append(_vector("chain-first-key-not-from-sequence-1", late_start, {"error": "MALFORMED_RECORD"}))
    out.append(_vector("chain-rotations-sign-their-id-and-cut-over", _signed(), _expect(_signed())))
    dropped = copy.deepcopy(_signed())
    del dropped[2]
    dropped[2]["signing_key_id"] = 3
    out.append(_vector("chain-signed-rotation-dropped-and-renumbered", dropped, {"error": "INVALID_SIGNATURE"}))
    moved = _signed()
    moved[2]["effective_sequence"] = 9
    out.append(_vector("chain-signed-cut-over-moved", moved, {"error": "INVALID_SIGNATURE"}))
    return out


def document() -> dict[str, Any]:
    """The whole vectors file."""
    return {"format": "watchtower-vectors/1", "vectors": vectors()}


if __name__ == "__main__":
    json.dump(document(), sys.stdout, indent=1)
    sys.stdout.write("\n")
