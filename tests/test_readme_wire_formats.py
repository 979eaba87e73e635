"""The README's "Wire formats" table says what each topic's record values hold; these tests hold it to
what the encoders write, so the documentation cannot drift from the bytes again."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import fastavro
import nacl.signing
import pytest

import watchtower.schemas
from watchtower.schemas.wire import encode_command, encode_event, encode_registry_forward, encode_reply
from watchtower.protocol.errors import StreamNotFoundError
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.signing import sign_message
from watchtower.protocol.stream_actor import StreamState, decide
from watchtower.schemas.records import encode_message

README = Path(__file__).resolve().parents[1] / "README.md"
KEY = nacl.signing.SigningKey(b"\x07" * 32)


def documented_rows() -> dict[str, str]:
    """topic -> its 'value format' cell, from the README's Wire formats table."""
    text = README.read_text()
    section = text.split("### Wire formats", 1)[1].split("\n#", 1)[0]
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


@pytest.mark.parametrize("topic", ["wt.commands", "wt.internal", "wt.events", "wt.replies", "wt.replies.error"])
def test_json_topics_hold_the_documented_json_keys(topic: str) -> None:
    cell = documented_rows()[topic.removesuffix(".error")]
    assert cell.startswith("JSON"), cell
    documented = set(re.findall(r'"(\w+)"', cell))
    value = json.loads(samples()[topic])
    assert set(value) <= documented
    for nested in value.values():
        if isinstance(nested, dict) and topic in ("wt.events", "wt.replies.error"):
            assert set(nested) <= documented


def test_messages_decode_with_the_avsc_file_alone_after_the_documented_frame() -> None:
    cell = documented_rows()["wt.messages"]
    assert "Avro" in cell
    assert "0x57" in cell
    raw = samples()["wt.messages"]
    assert raw[0] == 0x57
    schema = fastavro.schema.load_schema(str(Path(watchtower.schemas.__file__).parent / "StreamMessage.v1.avsc"))
    record = fastavro.schemaless_reader(io.BytesIO(raw[5:]), schema)
    assert (record["stream_id"], record["sequence"], record["kind"]) == ("s-1", 1, "k")
