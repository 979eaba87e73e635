"""A key-encryption key (KEK): 32 bytes that wrap secrets, and the 0600 file it is read from.

The key manager wraps every per-stream master seed under its KEK (`watchtower.keymgr.kek` says
where that KEK comes from); ingestion wraps its publisher key under an ingestion KEK of its own
(`watchtower.ingest.keys`). Both use this one wrap, so it is written down once:

- AES-256-GCM (the `cryptography` package), nonce ‖ ciphertext ‖ tag; the AAD binds the purpose,
  the name (a stream id, say) and the KEK id, so a wrapped secret cannot be moved to another name
  or opened as something else (the domain string keeps its key-manager name: it is in every
  wrapped secret already stored);
- the KEK id (first 16 hex digits of a domain-separated SHA-256 of the KEK) names the KEK without
  revealing it;
- the receipt signing key is *derived* from the KEK (HKDF-SHA256, its own salt), so the operator
  can compute the key manager's public key from the KEK file alone (genesis does) and no extra
  secret is stored anywhere; a KEK rotation therefore also rotates the receipt key (docs/keymgr.md).

A KEK file holds 64 hex digits and is refused, before it is read, when any group or other user
may read or write it. Nothing here logs, and no repr, str or exception carries key material.
"""

from __future__ import annotations

import hashlib
import secrets
import stat
from pathlib import Path
from typing import Final

import nacl.signing
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from watchtower.protocol import cbor
from watchtower.protocol.confidential.envelope import hkdf_sha256

KEK_BYTES: Final = 32
WRAP_DOMAIN: Final = "watchtower-keymgr-wrap-v1"
_NONCE_BYTES: Final = 12
_KEK_ID_DOMAIN: Final = b"watchtower-keymgr-kek-id-v1"
_RECEIPT_KEY_SALT: Final = b"watchtower-keymgr-receipt-signing-key-v1"


class KekError(Exception):
    """The KEK is missing, unreadable, too open, or does not open a wrapped secret."""


class Kek:
    """The 32-byte KEK. Its repr names only the KEK id."""

    __slots__ = ("_key", "kek_id")

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, bytes) or len(key) != KEK_BYTES:
            raise KekError(f"the KEK must be exactly {KEK_BYTES} bytes (64 hex digits)")
        self._key = key
        self.kek_id = hashlib.sha256(_KEK_ID_DOMAIN + key).hexdigest()[:16]

    def __repr__(self) -> str:
        return f"Kek(kek_id={self.kek_id})"

    __str__ = __repr__

    def _aad(self, purpose: str, name: str) -> bytes:
        return cbor.encode({"domain": WRAP_DOMAIN, "purpose": purpose, "name": name, "kek_id": self.kek_id})

    def wrap(self, purpose: str, name: str, secret: bytes) -> bytes:
        """nonce ‖ AES-256-GCM(KEK, nonce, aad(purpose, name, kek_id), secret)."""
        nonce = secrets.token_bytes(_NONCE_BYTES)
        return nonce + AESGCM(self._key).encrypt(nonce, secret, self._aad(purpose, name))

    def unwrap(self, purpose: str, name: str, wrapped: bytes) -> bytes:
        """The secret `wrap` sealed for (purpose, name) under this KEK, else KekError."""
        try:
            return AESGCM(self._key).decrypt(wrapped[:_NONCE_BYTES], wrapped[_NONCE_BYTES:], self._aad(purpose, name))
        except (InvalidTag, ValueError):
            raise KekError(
                f"the {purpose} for {name!r} does not open under KEK {self.kek_id}: it was wrapped under another "
                "KEK or altered; start the key manager with the KEK it was wrapped under (docs/keymgr.md)"
            ) from None

    def receipt_signing_key(self) -> nacl.signing.SigningKey:
        """The ed25519 key that signs ciphertext receipts, derived from the KEK."""
        seed = hkdf_sha256(ikm=self._key, salt=_RECEIPT_KEY_SALT, info=b"", length=32)
        return nacl.signing.SigningKey(seed)

    def receipt_public_key(self) -> bytes:
        return bytes(self.receipt_signing_key().verify_key)


def parse_kek_hex(text: str, where: str) -> bytes:
    try:
        key = bytes.fromhex(text.strip())
    except ValueError:
        raise KekError(f"{where} is not hex; it must hold 64 hex digits (32 bytes)") from None
    if len(key) != KEK_BYTES:
        raise KekError(f"{where} holds {len(key)} bytes; the KEK is {KEK_BYTES} bytes (64 hex digits)")
    return key


def read_kek_file(path: Path) -> Kek:
    """The KEK in `path`; refuses a file any group or other user can read or write."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise KekError(f"cannot read the KEK file {path}: {exc.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KekError(
            f"the KEK file {path} has mode {stat.S_IMODE(mode):04o}; it must be readable by its owner only. "
            f"Run: chmod 600 {path}"
        )
    return Kek(parse_kek_hex(path.read_text(encoding="ascii", errors="replace"), f"the KEK file {path}"))


def new_kek_text() -> str:
    """A fresh KEK as the text a KEK file holds."""
    return secrets.token_bytes(KEK_BYTES).hex() + "\n"
