"""The key manager's own records: written and read through one definition, hostile bytes refused."""

from __future__ import annotations

import contextlib
import json

import pytest
from byte_mutations import mutated_bytes
from hypothesis import given, settings

from watchtower.protocol.errors import MalformedRecordError, SchemaMismatchError
from watchtower.schemas.keymgr_records import (
    AuditRecord,
    NonceReservationRecord,
    WrappedSeedRecord,
    decode_audit,
    decode_nonce_reservation,
    decode_wrapped_seed,
    encode_keymgr_record,
)

SEED = WrappedSeedRecord(1, "00ff00ff00ff00ff", "ab" * 60)
NONCES = NonceReservationRecord(1, 3000)
AUDIT = AuditRecord(v=1, action="fetch_epoch_keys", stream_id="s", caller="0x" + "1" * 64,
                    account="0x" + "2" * 64, key_epochs=[4, 9], at_ms=1, account_key_id=2)


def test_each_record_reads_back_as_written_and_is_plain_json() -> None:
    assert decode_wrapped_seed(encode_keymgr_record(SEED)) == SEED
    assert decode_nonce_reservation(encode_keymgr_record(NONCES)) == NONCES
    assert decode_audit(encode_keymgr_record(AUDIT)) == AUDIT
    # Any Kafka client reads them: plain JSON with exactly the documented fields.
    assert json.loads(encode_keymgr_record(NONCES)) == {"v": 1, "reserved_through": 3000}
    assert set(json.loads(encode_keymgr_record(SEED))) == {"v", "kek_id", "wrapped_hex"}


def test_a_decrypt_audit_record_omits_the_sealing_key_it_does_not_have() -> None:
    record = AuditRecord(v=1, action="stream_decrypt", stream_id="s", caller="c", account="a", key_epochs=[3], at_ms=5)
    assert "account_key_id" not in json.loads(encode_keymgr_record(record))
    assert decode_audit(encode_keymgr_record(record)).account_key_id is None


@pytest.mark.parametrize("data", [None, b"", b"{", b"[]", b'{"v": 1}', b'{"v": 1, "reserved_through": "9"}',
                                  b'{"v": 1, "reserved_through": 9, "extra": 1}', b"\xff\xfe",
                                  b'{"v": true, "reserved_through": 9}'])
def test_what_is_not_a_reservation_is_a_malformed_record(data: bytes | None) -> None:
    with pytest.raises(MalformedRecordError):
        decode_nonce_reservation(data)


@pytest.mark.parametrize("version", [0, 2])
def test_another_version_is_a_schema_mismatch(version: object) -> None:
    data = json.dumps({"v": version, "kek_id": "k", "wrapped_hex": "00"}).encode()
    with pytest.raises(SchemaMismatchError):
        decode_wrapped_seed(data)


@settings(max_examples=200, deadline=None)
@given(mutated_bytes(encode_keymgr_record(AUDIT)))
def test_a_damaged_record_raises_only_codec_errors(data: bytes) -> None:
    with contextlib.suppress(MalformedRecordError, SchemaMismatchError):
        decode_audit(data)
