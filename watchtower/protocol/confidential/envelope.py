"""Epoch content keys and the CIPHERTEXT payload envelope (DESIGN §7.7).

    content_key = HKDF-SHA256(ikm=master_seed, salt=b"watchtower-cip7-epoch-key-v1",
                              info=utf8(stream_id) ‖ u64be(key_epoch), L=32)
    nonce       = HKDF-Expand-SHA256(prk=content_key,
                                     info=utf8(stream_id) ‖ u64be(key_epoch) ‖ u64be(actor_nonce), L=24)
    aad         = deterministic CBOR of {stream_id, sequence, key_epoch, kind, content_type}
    envelope    = nonce ‖ XChaCha20-Poly1305-IETF(content_key, nonce, aad, plaintext)   (ct ‖ tag)

Plaintext is at most 16,344 bytes (PAYLOAD_TOO_LARGE otherwise); any failure to open is
DECRYPTION_FAILED. Callers own nonce uniqueness: an actor_nonce must never be issued twice for
one content key, across crashes too (keymgr persists its counter before it encrypts).

Epoch keys reach accounts as libsodium sealed boxes to the account's ACTIVE X25519 key.
No error message here ever contains key material.
"""

from __future__ import annotations

import struct
from typing import Any, Final

import cbor2
import nacl.bindings
import nacl.exceptions
import nacl.public
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives import hmac as crypto_hmac
from cryptography.hazmat.primitives.kdf.hkdf import HKDF, HKDFExpand

from watchtower.protocol import cbor
from watchtower.protocol.constants import (
    CONTENT_KEY_BYTES,
    EPOCH_KEY_HKDF_SALT,
    MAX_EFFECTIVE_PLAINTEXT_BYTES,
    MAX_UINT64,
    MIN_CIPHERTEXT_ENVELOPE_BYTES,
    MIN_MASTER_SEED_BYTES,
    NONCE_BYTES,
    X25519_PUBLIC_KEY_BYTES,
)
from watchtower.protocol.errors import (
    DecryptionFailedError,
    InvalidAccountKeyError,
    InvalidArgumentError,
    PayloadTooLargeError,
)
from watchtower.protocol.validation import require_int, require_text

_HASH_LEN: Final = 32
_u64be = struct.Struct(">Q").pack

# --- HKDF (RFC 5869), from the `cryptography` package ------------------------------------------


def hkdf_extract(salt: bytes, ikm: bytes) -> bytes:
    """HKDF-Extract with SHA-256: PRK = HMAC(salt, IKM) (an empty salt is HashLen zero bytes)."""
    # `cryptography` exposes Extract only inside HKDF; RFC 5869 §2.2 is one HMAC, which its
    # `hmac` primitive computes (the same backend as HKDF itself).
    mac = crypto_hmac.HMAC(salt or bytes(_HASH_LEN), hashes.SHA256())
    mac.update(ikm)
    return mac.finalize()


def hkdf_expand(prk: bytes, info: bytes, length: int) -> bytes:
    """HKDF-Expand with SHA-256 (RFC 5869 §2.3)."""
    if not 0 < length <= 255 * _HASH_LEN:
        raise InvalidArgumentError(f"HKDF-Expand length must be in 1..{255 * _HASH_LEN}")
    if not isinstance(prk, bytes) or len(prk) < _HASH_LEN:
        # RFC 5869: PRK is at least HashLen bytes; `cryptography` enforces no minimum itself.
        raise InvalidArgumentError(f"an HKDF-Expand PRK is at least {_HASH_LEN} bytes")
    return HKDFExpand(algorithm=hashes.SHA256(), length=length, info=info).derive(prk)


def hkdf_sha256(*, ikm: bytes, salt: bytes, info: bytes, length: int) -> bytes:
    """HKDF-SHA256 (extract then expand)."""
    if not 0 < length <= 255 * _HASH_LEN:
        raise InvalidArgumentError(f"HKDF length must be in 1..{255 * _HASH_LEN}")
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=salt or None, info=info).derive(ikm)


# --- Keys, nonces, AAD ---------------------------------------------------------------------------


def _epoch_info(stream_id: str, key_epoch: int) -> bytes:
    sid = require_text(stream_id, "stream_id").encode("utf-8")
    return sid + _u64be(require_int(key_epoch, "key_epoch", maximum=MAX_UINT64))


def derive_content_key(master_seed: bytes, stream_id: str, key_epoch: int) -> bytes:
    """The 32-byte content key of (`stream_id`, `key_epoch`) under `master_seed`."""
    if not isinstance(master_seed, bytes) or len(master_seed) < MIN_MASTER_SEED_BYTES:
        raise InvalidArgumentError(f"the master seed must be at least {MIN_MASTER_SEED_BYTES} bytes")
    return hkdf_sha256(
        ikm=master_seed,
        salt=EPOCH_KEY_HKDF_SALT,
        info=_epoch_info(stream_id, key_epoch),
        length=CONTENT_KEY_BYTES,
    )


def _require_content_key(content_key: bytes) -> bytes:
    if not isinstance(content_key, bytes) or len(content_key) != CONTENT_KEY_BYTES:
        raise InvalidArgumentError(f"a content key is exactly {CONTENT_KEY_BYTES} bytes")
    return content_key


def derive_nonce(content_key: bytes, stream_id: str, key_epoch: int, actor_nonce: int) -> bytes:
    """The 24-byte XChaCha20 nonce for `actor_nonce` under `content_key`."""
    info = _epoch_info(stream_id, key_epoch) + _u64be(require_int(actor_nonce, "actor_nonce", maximum=MAX_UINT64))
    return hkdf_expand(_require_content_key(content_key), info, NONCE_BYTES)


# The AAD's five keys in deterministic order (by encoded bytes: shorter first, then bytewise), so
# the map is assembled by concatenation; `cbor.encode` of the same dict gives the same bytes
# (tests/protocol/test_envelope_aad.py checks it on random fields, and cbor2 decodes both).
_AAD_ORDER: Final = ("kind", "sequence", "key_epoch", "stream_id", "content_type")
if tuple(sorted(_AAD_ORDER, key=cbor.encode_text)) != _AAD_ORDER:  # pragma: no cover
    raise RuntimeError("AAD key order changed")
_AAD_HEAD: Final = cbor.encode_head(5, len(_AAD_ORDER))
_K_KIND, _K_SEQUENCE, _K_KEY_EPOCH, _K_STREAM_ID, _K_CONTENT_TYPE = (cbor.encode_text(k) for k in _AAD_ORDER)


def envelope_aad(*, stream_id: str, sequence: int, key_epoch: int, kind: str, content_type: str) -> bytes:
    """Deterministic CBOR of {stream_id, sequence, key_epoch, kind, content_type}: the AEAD's AAD."""
    return b"".join((
        _AAD_HEAD,
        _K_KIND, cbor.encode_text(require_text(kind, "kind")),
        _K_SEQUENCE, cbor.encode_int(require_int(sequence, "sequence", maximum=MAX_UINT64)),
        _K_KEY_EPOCH, cbor.encode_int(require_int(key_epoch, "key_epoch", maximum=MAX_UINT64)),
        _K_STREAM_ID, cbor.encode_text(require_text(stream_id, "stream_id")),
        _K_CONTENT_TYPE, cbor.encode_text(require_text(content_type, "content_type")),
    ))


#: An AAD longer than this cannot be `envelope_aad` of any sensible stream; refused before decoding.
MAX_AAD_BYTES: Final = 4_096
_AAD_FIELDS: Final = frozenset(_AAD_ORDER)


def parse_envelope_aad(aad: object) -> dict[str, Any]:
    """The five fields of `aad` if it is exactly `envelope_aad` of them, else INVALID_ARGUMENT.

    Byte-exact: decoded, then re-encoded and compared, so no other CBOR spelling of the same
    fields (another key order, a longer integer, extra keys) passes.
    """
    refusal = InvalidArgumentError(
        "aad must be envelope_aad(stream_id, sequence, key_epoch, kind, content_type): deterministic CBOR of "
        "exactly those five fields"
    )
    if not isinstance(aad, bytes) or len(aad) > MAX_AAD_BYTES:
        raise refusal
    try:
        fields = cbor2.loads(aad)
    except Exception:  # cbor2 raises several types on hostile bytes; every one means "not an AAD"
        raise refusal from None
    if not isinstance(fields, dict) or set(fields) != _AAD_FIELDS:
        raise refusal
    try:
        if envelope_aad(**fields) != aad:
            raise refusal
    except InvalidArgumentError:
        raise refusal from None
    return fields


# --- Sealing and opening -------------------------------------------------------------------------


def _require_plaintext(plaintext: object) -> None:
    if not isinstance(plaintext, bytes):
        raise InvalidArgumentError("plaintext must be bytes")
    if len(plaintext) > MAX_EFFECTIVE_PLAINTEXT_BYTES:
        raise PayloadTooLargeError(
            f"plaintext is {len(plaintext)} bytes; encrypted payloads carry at most "
            f"{MAX_EFFECTIVE_PLAINTEXT_BYTES} (16,384 minus the 24-byte nonce and 16-byte tag). "
            f"Split it into several messages."
        )


def seal_payload(*, content_key: bytes, nonce: bytes, aad: bytes, plaintext: bytes) -> bytes:
    """nonce ‖ XChaCha20-Poly1305-IETF(content_key, nonce, aad, plaintext)."""
    _require_plaintext(plaintext)
    if not isinstance(nonce, bytes) or len(nonce) != NONCE_BYTES:
        raise InvalidArgumentError(f"the nonce is exactly {NONCE_BYTES} bytes")
    if not isinstance(aad, bytes):
        raise InvalidArgumentError("aad must be bytes")
    body = nacl.bindings.crypto_aead_xchacha20poly1305_ietf_encrypt(
        plaintext, aad, nonce, _require_content_key(content_key)
    )
    return nonce + body


def open_payload(*, content_key: bytes, aad: bytes, envelope: bytes) -> bytes:
    """The plaintext of `envelope`, or DECRYPTION_FAILED for anything that does not open."""
    if (
        not isinstance(envelope, bytes)
        or not isinstance(aad, bytes)
        or not isinstance(content_key, bytes)
        or len(content_key) != CONTENT_KEY_BYTES
        or len(envelope) < MIN_CIPHERTEXT_ENVELOPE_BYTES
    ):
        raise DecryptionFailedError()
    try:
        return bytes(
            nacl.bindings.crypto_aead_xchacha20poly1305_ietf_decrypt(
                envelope[NONCE_BYTES:], aad, envelope[:NONCE_BYTES], content_key
            )
        )
    except (nacl.exceptions.CryptoError, nacl.exceptions.TypeError, nacl.exceptions.ValueError):
        raise DecryptionFailedError() from None


def encrypt_for_epoch(
    *,
    master_seed: bytes,
    stream_id: str,
    key_epoch: int,
    actor_nonce: int,
    sequence: int,
    kind: str,
    content_type: str,
    plaintext: bytes,
) -> bytes:
    """`stream_encrypt`: derive the epoch key and nonce, bind the AAD, and seal `plaintext`."""
    _require_plaintext(plaintext)  # before any derivation, so oversize input costs nothing
    content_key = derive_content_key(master_seed, stream_id, key_epoch)
    return seal_payload(
        content_key=content_key,
        nonce=derive_nonce(content_key, stream_id, key_epoch, actor_nonce),
        aad=envelope_aad(
            stream_id=stream_id, sequence=sequence, key_epoch=key_epoch, kind=kind, content_type=content_type
        ),
        plaintext=plaintext,
    )


def decrypt_with_content_key(
    *,
    content_key: bytes,
    stream_id: str,
    key_epoch: int,
    sequence: int,
    kind: str,
    content_type: str,
    envelope: bytes,
) -> bytes:
    """Open a message's envelope with an epoch key the account holds (the local fast path)."""
    aad = envelope_aad(
        stream_id=stream_id, sequence=sequence, key_epoch=key_epoch, kind=kind, content_type=content_type
    )
    return open_payload(content_key=content_key, aad=aad, envelope=envelope)


def decrypt_for_epoch(
    *,
    master_seed: bytes,
    stream_id: str,
    key_epoch: int,
    sequence: int,
    kind: str,
    content_type: str,
    envelope: bytes,
) -> bytes:
    """`stream_decrypt`'s cryptographic part (entitlement and authorization are checked by the caller)."""
    return decrypt_with_content_key(
        content_key=derive_content_key(master_seed, stream_id, key_epoch),
        stream_id=stream_id,
        key_epoch=key_epoch,
        sequence=sequence,
        kind=kind,
        content_type=content_type,
        envelope=envelope,
    )


# --- Epoch-key delivery to accounts (sealed boxes to X25519 keys) -------------------------------

# A clamped scalar (a multiple of 8) maps every small-order point to the identity, which
# libsodium reports as an error; any other point survives. That makes the check deterministic.
_PROBE_SCALAR: Final = bytes([0x08] + [0x11] * 30 + [0x40])


def validate_x25519_public_key(public_key: object) -> bytes:
    """`public_key` if it is a usable 32-byte X25519 key, else INVALID_ACCOUNT_KEY.

    Refuses low-order points, to which a sealed box would leak the key to anyone.
    """
    if not isinstance(public_key, bytes) or len(public_key) != X25519_PUBLIC_KEY_BYTES:
        raise InvalidAccountKeyError(f"an X25519 public key is exactly {X25519_PUBLIC_KEY_BYTES} bytes")
    try:
        nacl.bindings.crypto_scalarmult(_PROBE_SCALAR, public_key)
    except nacl.exceptions.RuntimeError:
        raise InvalidAccountKeyError("the X25519 public key is a low-order point; generate a fresh key pair") from None
    return public_key


def wrap_epoch_key(content_key: bytes, account_public_key: bytes) -> bytes:
    """Seal `content_key` to the account's X25519 public key (libsodium crypto_box_seal)."""
    recipient = nacl.public.PublicKey(validate_x25519_public_key(account_public_key))
    return bytes(nacl.public.SealedBox(recipient).encrypt(_require_content_key(content_key)))


def unwrap_epoch_key(sealed: bytes, account_private_key: bytes) -> bytes:
    """Open a sealed epoch key with the account's X25519 private key; DECRYPTION_FAILED otherwise."""
    try:
        box = nacl.public.SealedBox(nacl.public.PrivateKey(account_private_key))
        key = bytes(box.decrypt(sealed))
    except (nacl.exceptions.CryptoError, nacl.exceptions.TypeError, nacl.exceptions.ValueError):
        raise DecryptionFailedError(
            "the sealed epoch key did not open with this account key; fetch it again for the account's ACTIVE key"
        ) from None
    if len(key) != CONTENT_KEY_BYTES:
        raise DecryptionFailedError("the sealed box did not contain a 32-byte epoch key")
    return key
