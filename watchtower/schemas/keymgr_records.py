"""The key manager's own records, defined once: ``keymgr.state`` (its durable secrets, wrapped) and
``keymgr`` (its audit trail). JSON, decoded with msgspec against these definitions like the
envelopes of `envelopes`; any Kafka client reads them.

- ``keymgr.state`` (compacted, partition 0, latest per key):
  - ``seed/<stream_id>`` → `WrappedSeedRecord`: the stream's master seed wrapped under the KEK
    (never the seed itself);
  - ``actor-nonces`` → `NonceReservationRecord`: every actor_nonce up to ``reserved_through``
    may have been handed out.
- ``keymgr`` (keyed by stream id) → `AuditRecord`: who decrypted or fetched keys of which stream
  and epochs. Never key material, plaintext or an envelope.

Decoding raises MalformedRecordError (not one of these records) or SchemaMismatchError (a version
this build does not read), so a hostile record is skipped, never a crash.
"""

from __future__ import annotations

from typing import Final

import msgspec

from watchtower.protocol.constants import MAX_ACTOR_NONCE
from watchtower.protocol.errors import MalformedRecordError, SchemaMismatchError

KEYMGR_RECORD_VERSION: Final = 1


class WrappedSeedRecord(msgspec.Struct, forbid_unknown_fields=True):
    """A master seed, wrapped: ``nonce ‖ AES-256-GCM(KEK, ...)`` as hex, and the id of the KEK."""

    v: int
    kek_id: str
    wrapped_hex: str


class NonceReservationRecord(msgspec.Struct, forbid_unknown_fields=True):
    """The actor-nonce high-water mark committed before any nonce at or below it is handed out."""

    v: int
    reserved_through: int


class AuditRecord(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """One decrypt or key fetch: the action, the stream, who asked, for which account and epochs
    (``[first, last]`` for a fetch), when (the service's clock), and the sealing key for a fetch."""

    v: int
    action: str
    stream_id: str
    caller: str
    account: str
    key_epochs: list[int]
    at_ms: int
    account_key_id: int | None = None


_ENCODER: Final = msgspec.json.Encoder()
_SEED: Final = msgspec.json.Decoder(WrappedSeedRecord)
_NONCES: Final = msgspec.json.Decoder(NonceReservationRecord)
_AUDIT: Final = msgspec.json.Decoder(AuditRecord)


def encode_keymgr_record(record: WrappedSeedRecord | NonceReservationRecord | AuditRecord) -> bytes:
    """The JSON bytes of a key-manager record."""
    return _ENCODER.encode(record)


def _decode(decoder: msgspec.json.Decoder, data: bytes | None, what: str) -> object:
    if data is None:
        raise MalformedRecordError(f"the {what} record has no value")
    try:
        record = decoder.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise MalformedRecordError(f"not a {what} record: {' '.join(str(exc).split())[:200]}") from None
    version = getattr(record, "v", None)
    if version != KEYMGR_RECORD_VERSION or isinstance(version, bool):
        raise SchemaMismatchError(f"the {what} record version {version!r} is not supported (this build reads "
                                  f"v{KEYMGR_RECORD_VERSION}); upgrade the key manager")
    return record


def decode_wrapped_seed(data: bytes | None) -> WrappedSeedRecord:
    record = _decode(_SEED, data, "wrapped seed")
    assert isinstance(record, WrappedSeedRecord)
    return record


def decode_nonce_reservation(data: bytes | None) -> NonceReservationRecord:
    """An ``actor-nonces`` record; MalformedRecordError for a high-water mark outside
    ``0..MAX_ACTOR_NONCE`` (no key manager commits one: forged or corrupt)."""
    record = _decode(_NONCES, data, "actor-nonce reservation")
    assert isinstance(record, NonceReservationRecord)
    value = record.reserved_through
    if isinstance(value, bool) or not 0 <= value <= MAX_ACTOR_NONCE:
        raise MalformedRecordError(f"an actor-nonce reservation of {value} is outside 0..{MAX_ACTOR_NONCE}; no key "
                                   "manager commits one (forged or corrupt)")
    return record


def decode_audit(data: bytes | None) -> AuditRecord:
    record = _decode(_AUDIT, data, "key-manager audit")
    assert isinstance(record, AuditRecord)
    return record
