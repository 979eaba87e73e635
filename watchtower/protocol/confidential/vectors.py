"""The private-feed vector types: keyloads, reseals and masked payloads (docs/private-feeds.md).

``keyload_check`` (every part of one keyload, checked together), ``keyload_open`` (a member opens
the part that holds it), ``keyload_psk_open`` (a pre-shared-key holder opens part 0),
``reseal_open``, ``masked_payload`` and ``unmask``: each computed by the functions the SDK and the
feed page use, for `conformance` to judge. The vectors live in ``vectors/keyloads.json`` and
``vectors/keyload-psk.json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from watchtower.protocol.confidential.keyload import (
    KeyloadPart,
    check_keyload,
    decode_part,
    open_keyload,
    open_keyload_psk,
    part_for,
)
from watchtower.protocol.confidential.reseal import decode_reseal, open_reseal
from watchtower.protocol.confidential.session_key import key_commitment, mask, masked_aad, payload_key, unmask
from watchtower.protocol.errors import UnauthorizedError
from watchtower.protocol.vector_input import Computation, field, hex_field, hex_list


def _keyload_parts(inp: Mapping[str, Any]) -> list[KeyloadPart]:
    return [decode_part(raw) for raw in hex_list(inp, "parts_hex")]


def _keyload_check(inp: Mapping[str, Any]) -> dict[str, Any]:
    # Every part of one keyload, as a subscriber that read them all checks it (docs/private-feeds.md).
    summary = check_keyload(_keyload_parts(inp))
    out = {
        "keyload_id_hex": summary.keyload_id.hex(),
        "stream_id": summary.stream_id,
        "branch": summary.branch,
        "parts": len(field(inp, "parts_hex")),
        "members": [{"address": m.address, "account_key_id": m.account_key_id} for m in summary.members],
        "members_digest_hex": summary.members_digest.hex(),
        "key_commitment_hex": summary.key_commitment.hex(),
    }
    if summary.psk_ids:  # a keyload with pre-shared-key holders also names their ids
        out["psk_ids_hex"] = [pid.hex() for pid in summary.psk_ids]
    return out


def _keyload_open(inp: Mapping[str, Any]) -> dict[str, Any]:
    # A member reads only the part whose address range holds it, as ConfidentialReader does.
    address = field(inp, "address")
    part = part_for(_keyload_parts(inp), address)
    if part is None:
        raise UnauthorizedError(f"{address} is in no part of this keyload: not a member")
    session_key = open_keyload(part, address, hex_field(inp, "test_only_x25519_secret_key_hex"))
    found = next(m for m, _ in part.entries if m.address == address)
    return {
        "keyload_id_hex": part.keyload_id.hex(),
        "part": part.part,
        "account_key_id": found.account_key_id,
        "session_key_hex": session_key.hex(),
        "key_commitment_hex": key_commitment(session_key, part.keyload_id).hex(),
    }


def _reseal_open(inp: Mapping[str, Any]) -> dict[str, Any]:
    # A member added later opens a past keyload's key; with the keyload's own commitment when it
    # read the keyload (ConfidentialReader passes it), so a reseal cannot swap in another key.
    address = field(inp, "address")
    reseal = decode_reseal(hex_field(inp, "reseal_hex"))
    commitment = hex_field(inp, "keyload_key_commitment_hex") if "keyload_key_commitment_hex" in inp else None
    session_key = open_reseal(reseal, address, hex_field(inp, "test_only_x25519_secret_key_hex"), commitment=commitment)
    found = next(m for m, _ in reseal.entries if m.address == address)
    return {
        "keyload_id_hex": reseal.keyload_id.hex(),
        "account_key_id": found.account_key_id,
        "session_key_hex": session_key.hex(),
        "key_commitment_hex": key_commitment(session_key, reseal.keyload_id).hex(),
    }


def _mask_context(inp: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "keyload_id": hex_field(inp, "keyload_id_hex"),
        "stream_id": field(inp, "stream_id"),
        "sequence": field(inp, "sequence"),
        "branch": field(inp, "branch"),
        "kind": field(inp, "kind"),
        "content_type": field(inp, "content_type"),
    }


def _masked_payload(inp: Mapping[str, Any]) -> dict[str, Any]:
    session_key, context = hex_field(inp, "session_key_hex"), _mask_context(inp)
    masked = mask(session_key, plaintext=hex_field(inp, "plaintext_hex"), nonce=hex_field(inp, "nonce_hex"), **context)
    return {
        "payload_key_hex": payload_key(session_key, context["keyload_id"]).hex(),
        "aad_hex": masked_aad(**context).hex(),
        "masked_hex": masked.hex(),
    }


def _unmask(inp: Mapping[str, Any]) -> dict[str, Any]:
    plaintext = unmask(hex_field(inp, "session_key_hex"), hex_field(inp, "masked_hex"), **_mask_context(inp))
    return {"plaintext_hex": plaintext.hex()}


def _keyload_psk_open(inp: Mapping[str, Any]) -> dict[str, Any]:
    # A pre-shared-key holder, named by its PSK id, opens the session key from part 0.
    part = next((p for p in _keyload_parts(inp) if p.part == 0), None)
    if part is None:
        raise UnauthorizedError("PSK entries ride in part 0 of a keyload, and it was not given")
    session_key = open_keyload_psk(part, hex_field(inp, "psk_id_hex"), hex_field(inp, "test_only_psk_hex"))
    return {"keyload_id_hex": part.keyload_id.hex(), "session_key_hex": session_key.hex(),
            "key_commitment_hex": key_commitment(session_key, part.keyload_id).hex(),
            "psk_ids_hex": [pid.hex() for pid, _ in part.psk_entries]}


#: Vector type -> computation, for `conformance.COMPUTATIONS`.
COMPUTATIONS: Final[Mapping[str, Computation]] = {
    "keyload_check": _keyload_check,
    "keyload_open": _keyload_open,
    "keyload_psk_open": _keyload_psk_open,
    "reseal_open": _reseal_open,
    "masked_payload": _masked_payload,
    "unmask": _unmask,
}
