"""Pre-shared-key recipients of a keyload: the session key wrapped for holders of a 32-byte PSK.

The IOTA Channels spec: "Allowed Recipients are identified either by pre-shared keys or by x25519
public key identifiers". Beside its X25519 members (`keyload`) a keyload may name up to
`MAX_PSK_RECIPIENTS` holders of a 32-byte pre-shared key, each by a 16-byte PSK id, and wrap the
session key for each under a key derived from its PSK:

    psk_wrap_key = HKDF-SHA256(ikm=psk, salt="watchtower-keyload-v1", info="psk" ‖ keyload_id ‖ psk_id)
    psk_nonce    = HKDF-SHA256(ikm=psk_wrap_key, salt="watchtower-keyload-v1", info="psk-nonce" ‖ key_commitment)[:24]
    wrapped      = psk_nonce ‖ XChaCha20-Poly1305(psk_wrap_key, psk_nonce, aad=psk_id, session_key)   (72 bytes)

The nonce is derived, not drawn: one (PSK, keyload id, PSK id) wraps one session key, and a
different session key gives a different commitment and so a different nonce. The entries,
``[psk_id, wrapped]`` in PSK-id order, ride in part 0 of the keyload under ``psk_entries``, a field
a keyload without PSK recipients does not have (so its bytes are as before), and the members
digest then also covers every PSK id. The owner hands the PSK and its id to the holder out of
band; the platform never sees a PSK. `keyload.open_keyload_psk` opens it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Final

from watchtower.protocol.confidential.envelope import hkdf_sha256, open_payload, seal_payload
from watchtower.protocol.confidential.session_key import (
    KEYLOAD_SALT,
    SESSION_KEY_BYTES,
    key_commitment,
    require_keyload_id,
    require_session_key,
)
from watchtower.protocol.constants import NONCE_BYTES
from watchtower.protocol.errors import DecryptionFailedError, InvalidArgumentError

PSK_BYTES: Final = 32
PSK_ID_BYTES: Final = 16
WRAPPED_PSK_KEY_BYTES: Final = NONCE_BYTES + SESSION_KEY_BYTES + 16  # nonce, session key, Poly1305 tag
#: Pre-shared-key recipients of one keyload: all ride in part 0, beside its X25519 entries.
MAX_PSK_RECIPIENTS: Final = 64


@dataclasses.dataclass(frozen=True, slots=True)
class PskRecipient:
    """A pre-shared-key holder a keyload wraps the session key for: its 16-byte PSK id (how the
    keyload names it) and the 32-byte PSK (which never leaves the owner and the holder)."""

    psk_id: bytes
    psk: bytes


def require_psk_id(psk_id: object) -> bytes:
    """`psk_id` if it is one (16 bytes); INVALID_ARGUMENT otherwise."""
    if not isinstance(psk_id, bytes) or len(psk_id) != PSK_ID_BYTES:
        raise InvalidArgumentError(f"a PSK id is exactly {PSK_ID_BYTES} bytes")
    return psk_id


def _psk_wrap_key(psk: object, keyload_id: bytes, psk_id: bytes) -> bytes:
    if not isinstance(psk, bytes) or len(psk) != PSK_BYTES:
        raise InvalidArgumentError(f"a pre-shared key is exactly {PSK_BYTES} bytes")
    return hkdf_sha256(ikm=psk, salt=KEYLOAD_SALT, info=b"psk" + keyload_id + psk_id, length=32)


def _psk_nonce(wrap_key: bytes, commitment: bytes) -> bytes:
    return hkdf_sha256(ikm=wrap_key, salt=KEYLOAD_SALT, info=b"psk-nonce" + commitment, length=NONCE_BYTES)


def wrap_for_psk(session_key: bytes, keyload_id: bytes, psk_id: bytes, psk: bytes) -> bytes:
    """The session key wrapped for one PSK holder (module docstring), 72 bytes."""
    key, kid, pid = require_session_key(session_key), require_keyload_id(keyload_id), require_psk_id(psk_id)
    wrap_key = _psk_wrap_key(psk, kid, pid)
    return seal_payload(content_key=wrap_key, nonce=_psk_nonce(wrap_key, key_commitment(key, kid)), aad=pid,
                        plaintext=key)


def psk_entries(session_key: bytes, keyload_id: bytes,
                recipients: Iterable[PskRecipient]) -> tuple[tuple[bytes, bytes], ...]:
    """(PSK id, session key wrapped for it) for every recipient, in PSK-id order. INVALID_ARGUMENT for
    a PSK id listed twice, more than `MAX_PSK_RECIPIENTS` holders or a PSK that is not 32 bytes."""
    by_id: dict[bytes, PskRecipient] = {}
    for r in recipients:
        pid = require_psk_id(r.psk_id)
        if pid in by_id:
            raise InvalidArgumentError(f"PSK id {pid.hex()} is listed twice; a keyload wraps once per PSK holder")
        by_id[pid] = r
    if len(by_id) > MAX_PSK_RECIPIENTS:
        raise InvalidArgumentError(f"a keyload names at most {MAX_PSK_RECIPIENTS} PSK holders, got {len(by_id)}")
    return tuple((pid, wrap_for_psk(session_key, keyload_id, pid, by_id[pid].psk)) for pid in sorted(by_id))


def decode_psk_entries(raw: object) -> tuple[tuple[bytes, bytes], ...]:
    """A keyload part's ``psk_entries`` as (PSK id, wrapped key) pairs; INVALID_ARGUMENT naming what is wrong."""
    if not isinstance(raw, list) or not raw or len(raw) > MAX_PSK_RECIPIENTS:
        raise InvalidArgumentError(f"psk_entries holds 1 to {MAX_PSK_RECIPIENTS} entries (leave it out for none)")
    entries: list[tuple[bytes, bytes]] = []
    for item in raw:
        if (not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], bytes)
                or len(item[0]) != PSK_ID_BYTES or not isinstance(item[1], bytes)
                or len(item[1]) != WRAPPED_PSK_KEY_BYTES):
            raise InvalidArgumentError(f"a PSK entry is [psk_id ({PSK_ID_BYTES} bytes), wrapped key "
                                       f"({WRAPPED_PSK_KEY_BYTES} bytes)]")
        if entries and item[0] <= entries[-1][0]:
            raise InvalidArgumentError("psk_entries are in strictly increasing PSK-id order")
        entries.append((item[0], item[1]))
    return tuple(entries)


def unwrap_for_psk(wrapped: bytes, *, keyload_id: bytes, commitment: bytes, psk_id: bytes, psk: bytes) -> bytes:
    """The session key `wrapped` holds for the holder of PSK `psk_id`, checked against the keyload's
    key `commitment`. DECRYPTION_FAILED when `psk` is not the key it was wrapped with, or it opens
    to a key the keyload is not about."""
    pid = require_psk_id(psk_id)
    wrap_key = _psk_wrap_key(psk, keyload_id, pid)
    try:
        key = open_payload(content_key=wrap_key, aad=pid, envelope=wrapped)
    except DecryptionFailedError:
        raise DecryptionFailedError(f"the session key wrapped for PSK id {pid.hex()} did not open with this "
                                    "pre-shared key; use the PSK the owner gave with that id") from None
    if len(key) != SESSION_KEY_BYTES or key_commitment(key, keyload_id) != commitment:
        raise DecryptionFailedError("the key wrapped for this PSK is not the one this keyload commits to; "
                                    "the keyload is forged or altered: report it to the feed's owner")
    return key


__all__ = [
    "MAX_PSK_RECIPIENTS",
    "PSK_BYTES",
    "PSK_ID_BYTES",
    "WRAPPED_PSK_KEY_BYTES",
    "PskRecipient",
    "decode_psk_entries",
    "psk_entries",
    "require_psk_id",
    "unwrap_for_psk",
    "wrap_for_psk",
]
