"""A branch's session key: its shape, the keys derived from it, and the payloads masked under it.

A keyload (`keyload`) hands a branch of a confidential stream a fresh 32-byte session key, named by
a 16-byte keyload id; this module holds what that key is for once a publisher or a member holds
it. Every message of the branch under that keyload is *masked*:

    payload_key    = HKDF-SHA256(ikm=session_key, salt="watchtower-keyload-v1", info="payload" ‖ keyload_id)
    key_commitment = HKDF-SHA256(ikm=session_key, salt="watchtower-keyload-v1", info="commit" ‖ keyload_id)
    masked         = nonce(24, random) ‖ XChaCha20-Poly1305(payload_key, nonce, aad, plaintext)
    aad            = deterministic CBOR of {stream_id, sequence, keyload_id, branch, kind, content_type}

The key commitment is what a keyload publishes about its key, so a member can tell that the key it
opened is the one the keyload is about. The AAD binds a masked payload to its stream, sequence,
branch and keyload, so a ciphertext moved elsewhere does not open. No error message contains key
material.
"""

from __future__ import annotations

import functools
import os
from typing import Final

from watchtower.protocol import cbor
from watchtower.protocol.confidential.envelope import hkdf_sha256, open_payload, seal_payload
from watchtower.protocol.constants import NONCE_BYTES
from watchtower.protocol.errors import InvalidArgumentError
from watchtower.protocol.validation import require_int, require_text

SESSION_KEY_BYTES: Final = 32
KEYLOAD_ID_BYTES: Final = 16
MAX_BRANCH_CHARS: Final = 32
DEFAULT_BRANCH: Final = "main"
#: The HKDF salt of every key a keyload's cryptography derives (here and in `psk`).
KEYLOAD_SALT: Final = b"watchtower-keyload-v1"


def new_session_key() -> bytes:
    """A fresh random session key."""
    return os.urandom(SESSION_KEY_BYTES)


def require_session_key(session_key: object) -> bytes:
    """`session_key` if it is one (32 bytes); INVALID_ARGUMENT otherwise."""
    if not isinstance(session_key, bytes) or len(session_key) != SESSION_KEY_BYTES:
        raise InvalidArgumentError(f"a session key is exactly {SESSION_KEY_BYTES} bytes")
    return session_key


def require_keyload_id(keyload_id: object) -> bytes:
    """`keyload_id` if it is one (16 bytes); INVALID_ARGUMENT otherwise."""
    if not isinstance(keyload_id, bytes) or len(keyload_id) != KEYLOAD_ID_BYTES:
        raise InvalidArgumentError(f"a keyload id is exactly {KEYLOAD_ID_BYTES} bytes")
    return keyload_id


def payload_key(session_key: bytes, keyload_id: bytes) -> bytes:
    """The AEAD key of the branch's masked payloads under this keyload."""
    return _payload_key(require_session_key(session_key), require_keyload_id(keyload_id))


@functools.lru_cache(maxsize=64)
def _payload_key(session_key: bytes, keyload_id: bytes) -> bytes:
    # Derived once per keyload, not per message: a publisher masks every message of a keyload with
    # it, and HKDF costs several times the AEAD of a small payload. (The cache lives in the memory
    # of the process that holds the session key anyway.)
    return hkdf_sha256(ikm=session_key, salt=KEYLOAD_SALT, info=b"payload" + keyload_id, length=32)


def key_commitment(session_key: bytes, keyload_id: bytes) -> bytes:
    """What a keyload publishes about its session key: lets a member check the key it opened."""
    return hkdf_sha256(ikm=require_session_key(session_key), salt=KEYLOAD_SALT,
                       info=b"commit" + require_keyload_id(keyload_id), length=32)


def require_branch(branch: object) -> str:
    """`branch` if it is a branch name: 1-32 characters of a-z, 0-9, '-' and '_'."""
    text = require_text(branch, "branch")
    if not 1 <= len(text) <= MAX_BRANCH_CHARS or not all(c.isascii() and ((c.isalnum() and not c.isupper())
                                                                           or c in "-_") for c in text):
        raise InvalidArgumentError(f"branch must be 1-{MAX_BRANCH_CHARS} characters of a-z, 0-9, '-' and '_'")
    return text



def masked_aad(*, stream_id: str, sequence: int, keyload_id: bytes, branch: str, kind: str,
               content_type: str) -> bytes:
    """Deterministic CBOR of {stream_id, sequence, keyload_id, branch, kind, content_type}."""
    return cbor.encode({"stream_id": require_text(stream_id, "stream_id"),
                        "sequence": require_int(sequence, "sequence", minimum=1),
                        "keyload_id": require_keyload_id(keyload_id), "branch": require_branch(branch),
                        "kind": require_text(kind, "kind"), "content_type": require_text(content_type, "content_type")})


def mask(session_key: bytes, *, keyload_id: bytes, stream_id: str, sequence: int, branch: str, kind: str,
         content_type: str, plaintext: bytes, nonce: bytes | None = None) -> bytes:
    """nonce ‖ XChaCha20-Poly1305(payload_key, nonce, aad, plaintext); a fresh random nonce unless
    given (192 random bits: no counter to keep across crashes). PAYLOAD_TOO_LARGE past 16,344 bytes."""
    aad = masked_aad(stream_id=stream_id, sequence=sequence, keyload_id=keyload_id, branch=branch, kind=kind,
                     content_type=content_type)
    return seal_payload(content_key=payload_key(session_key, keyload_id),
                        nonce=nonce if nonce is not None else os.urandom(NONCE_BYTES), aad=aad, plaintext=plaintext)


def unmask(session_key: bytes, masked: bytes, *, keyload_id: bytes, stream_id: str, sequence: int, branch: str,
           kind: str, content_type: str) -> bytes:
    """The plaintext of `masked`; DECRYPTION_FAILED when it was altered, or belongs to another
    stream, sequence, branch, keyload, kind or content type."""
    aad = masked_aad(stream_id=stream_id, sequence=sequence, keyload_id=keyload_id, branch=branch, kind=kind,
                     content_type=content_type)
    return open_payload(content_key=payload_key(session_key, keyload_id), aad=aad, envelope=masked)


__all__ = [
    "DEFAULT_BRANCH",
    "KEYLOAD_ID_BYTES",
    "KEYLOAD_SALT",
    "MAX_BRANCH_CHARS",
    "SESSION_KEY_BYTES",
    "key_commitment",
    "mask",
    "masked_aad",
    "new_session_key",
    "payload_key",
    "require_branch",
    "require_keyload_id",
    "require_session_key",
    "unmask",
]
