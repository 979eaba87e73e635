"""The bytes on every topic are pinned: a golden file of records written by this code.

``golden/wire_v1.json`` holds, per sample record, its topic, kind, name and bytes (hex), written
by `make_wire_golden.py` from the deterministic samples of `wire_samples`. This test proves:

1. today's encoders write exactly the golden bytes for every sample;
2. today's decoders read every golden record, and writing the decoded value again gives the same
   bytes (logs written by this code stay readable);
3. a decoder that is not ours reads the golden bytes and finds the samples' field values: Avro
   with fastavro straight from the ``.avsc`` files (the frame header parsed by hand), JSON with the
   standard library, CBOR with cbor2 (and canonical CBOR re-encodes to the same bytes);
4. the samples cover every record kind: each event schema, each replay record, each key-manager
   forward, each topic.

A failure names the record (topic, kind, name) and the first differing byte offset. Never
regenerate the golden file to make a refactor pass (see `make_wire_golden.py`).
"""

from __future__ import annotations

import io
import json
import struct
import typing
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import cbor2
import fastavro
import pytest
from wire_samples import WireSample, all_samples

import watchtower.schemas
from watchtower.protocol.ledger.common import KeymgrForward
from watchtower.protocol.replay.records import ReplayRecord
from watchtower.schemas.schema_ids import CATALOG, SchemaKind

GOLDEN = Path(__file__).resolve().parent / "golden" / "wire_v1.json"
AVSC_DIR = Path(watchtower.schemas.__file__).resolve().parent
TOPICS = {"events", "messages", "commands", "internal", "replies", "replay", "delivery-state", "keymgr",
          "keymgr-state", "snapshots"}
HEADER = struct.Struct(">BHH")  # magic 0x57, schema id, schema version (codec.py's frame)


def _golden_records() -> list[dict[str, str]]:
    return list(json.loads(GOLDEN.read_text(encoding="utf-8"))["records"])


GOLDEN_RECORDS = _golden_records()
NAMES = [r["name"] for r in GOLDEN_RECORDS]


@pytest.fixture(scope="module")
def samples() -> dict[str, WireSample]:
    return {s.name: s for s in all_samples()}


def _golden(name: str) -> tuple[dict[str, str], bytes]:
    record = next(r for r in GOLDEN_RECORDS if r["name"] == name)
    return record, bytes.fromhex(record["hex"])


def _where(record: Mapping[str, str]) -> str:
    return f"topic {record['topic']!r}, kind {record['kind']!r} ({record['name']})"


def first_difference(expected: bytes, actual: bytes) -> int | None:
    """The first offset at which the two differ (the shorter length when one is a prefix), or None."""
    for i, (a, b) in enumerate(zip(expected, actual, strict=False)):
        if a != b:
            return i
    return None if len(expected) == len(actual) else min(len(expected), len(actual))


def describe_difference(what: str, expected: bytes, actual: bytes) -> str:
    offset = first_difference(expected, actual)
    assert offset is not None
    lo = max(0, offset - 8)

    def around(data: bytes) -> str:
        return data[lo:offset].hex() + "[" + data[offset:offset + 1].hex() + "]" + data[offset + 1:offset + 9].hex()

    return (f"{what}: bytes differ from the golden record at byte offset {offset} "
            f"(golden {len(expected)} bytes, now {len(actual)} bytes)\n"
            f"  golden ...{around(expected)}...\n"
            f"  now    ...{around(actual)}...\n"
            "The wire format must not change: fix the code, never regenerate the golden file to make this pass.")


def assert_same_bytes(what: str, expected: bytes, actual: bytes) -> None:
    if expected != actual:
        pytest.fail(describe_difference(what, expected, actual), pytrace=False)


# --- 0. the golden file and the samples are the same set ---------------------------------------


def test_the_golden_file_holds_exactly_the_samples(samples: dict[str, WireSample]) -> None:
    assert len(set(NAMES)) == len(NAMES), "golden record names must be unique"
    missing = sorted(set(samples) - set(NAMES))
    extra = sorted(set(NAMES) - set(samples))
    assert not missing, f"samples without a golden record (add them with make_wire_golden.py): {missing}"
    assert not extra, f"golden records without a sample (a sample was dropped or renamed): {extra}"
    for record in GOLDEN_RECORDS:
        sample = samples[record["name"]]
        assert (record["topic"], record["kind"]) == (sample.topic, sample.kind), record["name"]


# --- 1. today's encoders write the golden bytes --------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_todays_encoder_writes_the_golden_bytes(name: str, samples: dict[str, WireSample]) -> None:
    record, golden = _golden(name)
    assert_same_bytes(f"encoding {_where(record)}", golden, samples[name].encode())


# --- 2. today's decoders read the golden bytes, and write them again ------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_a_golden_record_decodes_and_reencodes_to_the_same_bytes(name: str, samples: dict[str, WireSample]) -> None:
    record, golden = _golden(name)
    assert_same_bytes(f"decoding then re-encoding {_where(record)}", golden, samples[name].reencode(golden))


# --- 3. a decoder that is not ours finds the samples' fields -------------------------------------


@cache
def _avsc(name: str, version: int) -> Any:
    path = AVSC_DIR / f"{name}.v{version}.avsc"
    assert path.exists(), f"no schema file {path.name} for a {name} v{version} record"
    return fastavro.parse_schema(json.loads(path.read_text(encoding="utf-8")), named_schemas={})


def read_avro(kind: str, data: bytes) -> dict[str, Any]:
    """A framed record read with fastavro and the ``.avsc`` file its header names, not with our codec."""
    magic, schema_id, version = HEADER.unpack_from(data)
    assert magic == 0x57, f"magic byte 0x{magic:02x}"
    assert schema_id == CATALOG[kind].schema_id, f"schema id {schema_id} is not {kind}'s"
    body = io.BytesIO(data[HEADER.size:])
    value = fastavro.schemaless_reader(body, _avsc(kind, version))
    assert body.tell() == len(data) - HEADER.size, "trailing bytes after the Avro body"
    assert isinstance(value, dict)
    return value


def read_cbor(data: bytes) -> dict[str, Any]:
    """A snapshot read with cbor2, each aggregate's part (itself CBOR bytes) read too."""
    doc = cbor2.loads(data)
    assert cbor2.dumps(doc, canonical=True) == data, "the snapshot is not canonical CBOR"
    assert isinstance(doc, dict)
    parts = doc.get("parts", {})
    for part in parts.values():
        assert cbor2.dumps(cbor2.loads(part), canonical=True) == part, "a snapshot part is not canonical CBOR"
    return {**doc, "parts": {name: cbor2.loads(part) for name, part in parts.items()}}


def mismatches(expected: Any, actual: Any, path: str = "$") -> list[str]:
    """Where `actual` does not hold `expected` (dicts: `expected`'s keys; lists: element by element)."""
    if isinstance(expected, Mapping):
        if not isinstance(actual, Mapping):
            return [f"{path}: expected a map, found {actual!r:.80}"]
        out: list[str] = []
        for key, value in expected.items():
            if key not in actual:
                out.append(f"{path}.{key}: missing")
            else:
                out += mismatches(value, actual[key], f"{path}.{key}")
        return out
    if isinstance(expected, list | tuple):
        if not isinstance(actual, list | tuple) or len(actual) != len(expected):
            return [f"{path}: expected {len(expected)} items, found {actual!r:.80}"]
        pairs = enumerate(zip(expected, actual, strict=True))
        return [m for i, (e, a) in pairs for m in mismatches(e, a, f"{path}[{i}]")]
    if isinstance(expected, bool) != isinstance(actual, bool) or expected != actual:
        return [f"{path}: expected {expected!r:.80}, found {actual!r:.80}"]
    return []


@pytest.mark.parametrize("name", NAMES)
def test_an_independent_decoder_finds_the_samples_fields(name: str, samples: dict[str, WireSample]) -> None:
    record, golden = _golden(name)
    sample = samples[name]
    if sample.format == "avro":
        decoded: Any = read_avro(sample.kind, golden)
    elif sample.format == "cbor":
        decoded = read_cbor(golden)
    else:
        assert sample.format == "json"
        decoded = json.loads(golden)
    assert sample.expect, f"{name} checks no field"
    wrong = mismatches(sample.expect, decoded)
    assert not wrong, f"{_where(record)} read with {sample.format}: " + "; ".join(wrong)


def test_an_event_records_reply_is_json_text() -> None:
    for record in GOLDEN_RECORDS:
        if record["topic"] == "events":
            value = read_avro(record["kind"], bytes.fromhex(record["hex"]))
            assert isinstance(json.loads(value["caused_by"]["reply_json"]), dict), record["name"]


# --- 4. every record kind is covered -------------------------------------------------------------


def _kinds(topic: str) -> set[str]:
    return {r["kind"] for r in GOLDEN_RECORDS if r["topic"] == topic}


def test_every_topic_and_every_record_kind_has_a_golden_record() -> None:
    assert {r["topic"] for r in GOLDEN_RECORDS} == TOPICS
    event_schemas = {name for name, info in CATALOG.items() if info.kind == SchemaKind.EVENT}
    assert _kinds("events") == event_schemas
    assert _kinds("messages") == {"StreamMessage"}
    tag = "__struct_config__"
    assert _kinds("replay") == {getattr(t, tag).tag for t in typing.get_args(ReplayRecord)}
    forwards = {"credit", "purchase_debit", "purchase_settled", "burn", "paid_command", "replay_charge",
                "replay_settled"}
    assert len(forwards) == len(typing.get_args(KeymgrForward))
    assert _kinds("internal") == forwards | {"register_feed", "replay_finished"}
    assert _kinds("replies") == {"ok", "error"}
    # Events of the real deciders are pinned too, not only hand-built ones.
    decided = {r["kind"] for r in GOLDEN_RECORDS if r["topic"] == "events" and "/decided-" in r["name"]}
    assert {"StreamCreated", "StreamMessagePublished", "SubscriberUpdated", "PublisherKeyRotated"} <= decided
    ciphertext = [r for r in GOLDEN_RECORDS if r["topic"] == "messages" and "ciphertext" in r["name"]]
    assert ciphertext, "an encrypted message is pinned"


def test_a_changed_byte_is_reported_with_its_offset() -> None:
    record, golden = _golden(NAMES[0])
    flipped = golden[:20] + bytes([golden[20] ^ 1]) + golden[21:]
    message = describe_difference(_where(record), golden, flipped)
    assert "byte offset 20" in message
    assert record["name"] in message
    assert record["kind"] in message
    assert first_difference(golden, golden + b"\x00") == len(golden)
    assert first_difference(golden, golden) is None
