"""The batch audit (Spark's decoded columns, one Arrow batch at a time) decides every record exactly as
the per-record reference (`audit.check_value`, a full `decode_message`) does.

The records are built to reach every branch: genuine messages on both sides of a key rotation
(plaintext and ciphertext, with and without tags), an altered payload, a forgery, a message naming
the key that is not in force, bytes after the Avro record, a body that does not decode, a value that
is not a message, and records that decode but break a CIP-7 rule (sequence 0, a NaN tag, a key
epoch on a plaintext message, a stream id that is not UTF-8). No broker: the values go straight
into a DataFrame of the shared local Spark session.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import nacl.signing
import pytest

from watchtower.protocol.enums import PayloadFormat
from watchtower.protocol.key_schedule import KeySchedule, KeyScheduleEntry
from watchtower.protocol.signing import sign_message
from watchtower.schemas import codec
from watchtower.schemas.records import encode_message

pytest.importorskip("pyspark")

SID = "s-audit-batch"
KEY_1 = nacl.signing.SigningKey(bytes(range(30, 62)))
KEY_2 = nacl.signing.SigningKey(bytes(range(31, 63)))
FORGER = nacl.signing.SigningKey(bytes(range(32, 64)))
ROTATED_AFTER = 4
SCHEDULE = KeySchedule((KeyScheduleEntry(1, bytes(KEY_1.verify_key), 1),
                        KeyScheduleEntry(2, bytes(KEY_2.verify_key), ROTATED_AFTER + 1)))


def signed(seq: int, *, key: nacl.signing.SigningKey | None = None, key_id: int | None = None, **fields: Any) -> Any:
    genuine_id = 1 if seq <= ROTATED_AFTER else 2
    return sign_message(stream_id=SID, sequence=seq, timestamp_unix_ms=1_700_000_000_000 + seq, kind="trade",
                        payload=b'{"px":%d}' % seq, signing_key=key or (KEY_1 if genuine_id == 1 else KEY_2),
                        signing_key_id=key_id or genuine_id, **fields)


def raw(record: dict[str, Any]) -> bytes:
    """A framed StreamMessage body written from `record` as is (no CIP-7 rule applied)."""
    return codec.encode("StreamMessage", record)


def values() -> dict[str, bytes]:
    tags = {"symbol": "BTC", "size": 3.0, "live": True}
    cipher = encode_message(sign_message(stream_id=SID, sequence=6, timestamp_unix_ms=1, kind="sealed",
                                         payload=bytes(range(48)), signing_key=KEY_2, signing_key_id=2,
                                         payload_format=PayloadFormat.CIPHERTEXT, key_epoch=3))
    genuine = {f"genuine {s}": encode_message(signed(s, tags=tags if s % 2 else None)) for s in range(1, 6)}
    nan_tag = signed(7).to_record() | {"tags": {"x": math.nan}}
    zero = signed(7).to_record() | {"sequence": 0}
    epoch = signed(7).to_record() | {"key_epoch": 5}
    not_utf8 = bytearray(encode_message(signed(8)))
    not_utf8[not_utf8.index(SID.encode())] = 0xFF
    good = encode_message(signed(9, tags=tags))
    return {
        **genuine,
        "ciphertext": cipher,
        "altered payload": encode_message(dataclasses.replace(signed(2), payload_inline=b'{"px":999}')),
        "forged": encode_message(signed(6, key=FORGER)),
        "key not in force": encode_message(signed(7, key=KEY_1, key_id=1)),
        "trailing bytes": good + b"\x00",
        "body unreadable": good[:5] + b"\xff\xff\xff\xff",
        "truncated": good[:-10],
        "not a message": b"not a message",
        "sequence 0": raw(zero),
        "NaN tag": raw(nan_tag),
        "plaintext with a key epoch": raw(epoch),
        "stream id not UTF-8": bytes(not_utf8),
        "good": good,
    }


def test_the_batch_audit_decides_every_record_as_the_per_record_reference(spark: Any) -> None:
    from watchtower.spark.audit import audit_frame, check_value

    cases = values()
    names = list(cases)
    df = spark.createDataFrame([(i, bytearray(cases[n])) for i, n in enumerate(names)], "offset long, value binary")
    rows = audit_frame(df, SCHEDULE, with_tags=True, keep=("offset",)).collect()
    got = {names[r["offset"]]: tuple(r["a"]) for r in rows}
    expected = {name: check_value(value, SCHEDULE, with_tags=True) for name, value in cases.items()}
    assert got == expected
    status = {name: result[0] for name, result in got.items()}
    assert status == {
        **{f"genuine {s}": "verified" for s in range(1, 6)}, "ciphertext": "verified", "good": "verified",
        "altered payload": "bad_hash", "forged": "bad_signature", "key not in force": "bad_signature",
        **dict.fromkeys(("trailing bytes", "body unreadable", "truncated", "not a message", "sequence 0", "NaN tag",
                         "plaintext with a key epoch", "stream id not UTF-8"), "malformed")}
    assert got["key not in force"][1:4] == (7, 1, 2)  # sequence, the key it names, the key in force
