"""The batch audit (Spark's decoded columns, one Arrow batch at a time) decides every record exactly as
the per-record reference (`audit.check_value`, a full `decode_message`) does.

The records are built to reach every branch: genuine messages on both sides of a key rotation
(plaintext and ciphertext, with and without tags), an altered payload, a forgery, a message naming
the key that is not in force, bytes after the Avro record, a body that does not decode, a value that
is not a message, and records that decode but break a CIP-7 rule (sequence 0, a NaN tag, a key
epoch on a plaintext message, a stream id that is not UTF-8), and a tag map holding a key twice.
No broker: the values go straight into a DataFrame of the shared local Spark session.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import nacl.signing
import pytest

from watchtower.protocol.enums import PayloadFormat
from watchtower.protocol.signing import sign_message
from watchtower.protocol.stream.key_schedule import KeySchedule, KeyScheduleEntry
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
        "a tag key twice": encode_message(signed(9, tags={"aa": "x", "ab": "y"})).replace(b"ab", b"aa"),
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
        "a tag key twice": "bad_signature",  # the decoder keeps the last value: not the signed map
        **dict.fromkeys(("trailing bytes", "body unreadable", "truncated", "not a message", "sequence 0", "NaN tag",
                         "plaintext with a key epoch", "stream id not UTF-8"), "malformed")}
    assert got["key not in force"][1:4] == (7, 1, 2)  # sequence, the key it names, the key in force


def reference_report(rows: list[tuple[str, int | None, int | None]]) -> dict[str, Any]:
    """The report's counts straight from every (status, sequence, key id) row, as the definitions read."""
    from watchtower.spark.verify import MAX_GAPS

    seqs = sorted({s for _status, s, _k in rows if s is not None})
    head = seqs[-1] if seqs else 0
    gaps = [[prev + 1, s - 1] for prev, s in zip([0, *seqs], seqs, strict=False) if s - prev > 1]
    bad = [s for status, s, _k in rows if status != "verified" and s is not None] + [g[0] for g in gaps[:1]]
    keys = sorted({k for _status, _s, k in rows if k is not None})
    per_key = {str(k): {"messages": sum(1 for r in rows if r[2] == k),
                        "verified": sum(1 for r in rows if r[2] == k and r[0] == "verified")} for k in keys}
    return {"messages": len(rows), "verified": sum(1 for r in rows if r[0] == "verified"),
            "bad_signatures": sum(1 for r in rows if r[0] == "bad_signature"),
            "bad_hashes": sum(1 for r in rows if r[0] == "bad_hash"),
            "malformed": sum(1 for r in rows if r[0] == "malformed"),
            "duplicates": sum(1 for r in rows if r[1] is not None) - len(seqs), "head": head,
            "missing": head - len(seqs), "gaps": gaps[:MAX_GAPS], "first_bad_sequence": min(bad, default=None),
            "per_key": {k: {**v, "bad": v["messages"] - v["verified"]} for k, v in per_key.items()}}


@pytest.mark.parametrize("seed", range(6))
def test_the_batch_summaries_merge_into_the_report_of_all_the_rows(seed: int) -> None:
    import random

    import pyarrow as pa

    from watchtower.spark.verify import batch_summary, merge_summaries

    rng = random.Random(seed)
    top = rng.choice([40, 300, 600])
    step = 2 if seed % 3 == 0 else 1  # every other sequence missing: more gaps than the report keeps
    rows: list[tuple[str, int | None, int | None]] = []
    for seq in range(1, top + 1, step):
        if rng.random() < 0.1:
            continue  # a gap
        for _copy in range(2 if rng.random() < 0.05 else 1):  # a duplicate
            status = rng.choices(["verified", "bad_hash", "bad_signature"], [90, 5, 5])[0]
            rows.append((status, seq, 1 if seq <= top // 2 else 2))
    rows += [("malformed", None, None)] * rng.randint(0, 3)
    rng.shuffle(rows)  # Kafka offset ranges split over tasks: batches hold any mix of sequences
    cuts = sorted(rng.sample(range(1, len(rows)), 4))
    batches = [rows[a:b] for a, b in zip([0, *cuts], [*cuts, len(rows)], strict=True)]
    summaries = [json_summary(batch_summary, batch, pa) for batch in batches]
    report = merge_summaries("s", summaries).as_json()
    expected = reference_report(rows)
    assert {k: report[k] for k in expected} == expected
    assert report["ok"] is (expected["verified"] == expected["messages"] and expected["missing"] == 0
                            and expected["duplicates"] == 0)


def json_summary(summarize: Any, rows: list[tuple[str, int | None, int | None]], pa: Any) -> dict[str, Any]:
    import json

    status, seq, key = zip(*rows, strict=True)
    audit = pa.StructArray.from_arrays(
        [pa.array(status, pa.string()), pa.array(seq, pa.int64()), pa.array(key, pa.int64()),
         pa.array(key, pa.int64()), pa.array([None] * len(rows), pa.string())],
        names=["status", "sequence", "signing_key_id", "key_in_force", "tags_json"])
    return dict(json.loads(summarize(audit)))
