"""The "Wire formats" table of docs/wire-formats.md says what each topic's record values hold; these
tests hold it to what the encoders write, so the documentation cannot drift from the bytes again."""

from __future__ import annotations

import io
import json
import re
import struct
from pathlib import Path

import fastavro
import nacl.signing
import pytest

import watchtower.schemas
from watchtower.protocol.errors import StreamNotFoundError
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.signing import sign_message
from watchtower.protocol.stream.actor import StreamState, decide
from watchtower.protocol.stream.state import EVENT_TYPES
from watchtower.schemas.codec import latest_version
from watchtower.schemas.records import encode_message
from watchtower.schemas.schema_ids import CATALOG
from watchtower.schemas.wire import encode_command, encode_event, encode_registry_forward, encode_reply

WIRE_FORMATS = Path(__file__).resolve().parents[1] / "docs" / "wire-formats.md"
SCHEMAS = Path(watchtower.schemas.__file__).parent
KEY = nacl.signing.SigningKey(b"\x07" * 32)


def documented_rows() -> dict[str, str]:
    """topic -> its 'value format' cell, from the Wire formats table."""
    text = WIRE_FORMATS.read_text(encoding="utf-8")
    section = text.split("\n## Wire formats\n", 1)[1].split("\n#", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`wt."):
            rows[cells[0].strip("`")] = cells[1]
    return rows


def samples() -> dict[str, bytes]:
    create = sign_command(KEY, "create_stream", "s-1", 1, {"publisher_key": bytes(KEY.verify_key),
                                                            "feed": {"name": "n", "description": ""}})
    event = decide(StreamState.initial("s-1"), create, block_height=10).events[0]
    message = sign_message(stream_id="s-1", sequence=1, timestamp_unix_ms=1, kind="k", payload=b"{}",
                           signing_key=KEY, signing_key_id=1)
    return {
        "wt.messages": encode_message(message),
        "wt.commands": encode_command(create),
        "wt.internal": encode_registry_forward(create),
        "wt.events": encode_event(event),
        "wt.replies": encode_reply(True, result={"head_sequence": 0}),
        "wt.replies.error": encode_reply(False, error=StreamNotFoundError("gone")),
    }


def test_every_topic_a_worker_writes_is_documented() -> None:
    assert set(documented_rows()) == {"wt.messages", "wt.commands", "wt.internal", "wt.events", "wt.replies"}


@pytest.mark.parametrize("topic", ["wt.commands", "wt.internal", "wt.replies", "wt.replies.error"])
def test_json_topics_hold_the_documented_json_keys(topic: str) -> None:
    cell = documented_rows()[topic.removesuffix(".error")]
    assert cell.startswith("JSON"), cell
    documented = set(re.findall(r'"(\w+)"', cell))
    value = json.loads(samples()[topic])
    assert set(value) <= documented
    for nested in value.values():
        if isinstance(nested, dict) and topic == "wt.replies.error":
            assert set(nested) <= documented


def frame_of(cell: str) -> None:
    assert "Avro" in cell
    assert "0x57" in cell
    assert "schema id (u16 BE)" in cell
    assert "version (u16 BE)" in cell


def test_messages_decode_with_the_avsc_file_alone_after_the_documented_frame() -> None:
    frame_of(documented_rows()["wt.messages"])
    raw = samples()["wt.messages"]
    assert struct.unpack(">BHH", raw[:5]) == (0x57, 1, 1)
    schema = fastavro.schema.load_schema(str(SCHEMAS / "StreamMessage.v1.avsc"))
    record = fastavro.schemaless_reader(io.BytesIO(raw[5:]), schema)
    assert (record["stream_id"], record["sequence"], record["kind"]) == ("s-1", 1, "k")


def test_events_decode_with_the_documented_avsc_file_and_id_alone() -> None:
    cell, decode_with = documented_rows()["wt.events"], documented_decoders()["wt.events"]
    frame_of(cell)
    ids = {name: int(n) for name, n in re.findall(r"(\w+) (\d+)", decode_with)}
    assert set(ids) == set(EVENT_TYPES)
    assert ids == {name: CATALOG[name].schema_id for name in EVENT_TYPES}  # the header contract
    raw = samples()["wt.events"]
    magic, schema_id, version = struct.unpack(">BHH", raw[:5])
    assert (magic, schema_id, version) == (0x57, ids["StreamCreated"], latest_version("StreamCreated"))
    schema = fastavro.schema.load_schema(str(SCHEMAS / f"StreamCreated.v{version}.avsc"))
    record = fastavro.schemaless_reader(io.BytesIO(raw[5:]), schema)
    documented = set(re.findall(r"`(\w+)`", cell))
    assert {"block_height", "caused_by"} <= documented
    assert set(record) == {"config", "command", "block_height", "caused_by"}
    assert set(record["caused_by"]) <= documented
    assert record["config"]["stream_id"] == "s-1"


def documented_decoders() -> dict[str, str]:
    """topic -> its 'decode with' cell."""
    text = WIRE_FORMATS.read_text(encoding="utf-8")
    section = text.split("\n## Wire formats\n", 1)[1].split("\n#", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`wt."):
            rows[cells[0].strip("`")] = cells[2]
    return rows
