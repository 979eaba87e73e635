"""The core's typed events and their `.avsc` files cannot drift, and every event survives the events codec."""

from __future__ import annotations

import dataclasses
import io
import json
import typing
from pathlib import Path
from typing import Any

import fastavro
import pytest
from event_samples import SID, created_config, one_of_each

import watchtower.schemas
from watchtower.protocol.config import StreamConfig
from watchtower.protocol.errors import InvalidArgumentError, SchemaMismatchError
from watchtower.protocol.events import (
    BODY_FIELDS,
    EVENT_BODIES,
    EVENT_TYPES,
    PLAN_FIELDS,
    FeedRegistered,
    ReplayPlan,
    ReplayRegistered,
    StreamMessagePublished,
    event_fields,
)
from watchtower.protocol.ledger.paid import PaidStreamConfig
from watchtower.protocol.replay.records import ReplayRegistration
from watchtower.protocol.stream.state import MESSAGE_CIP7_FIELDS, Event
from watchtower.schemas import codec, events
from watchtower.schemas.records import stream_config_to_record
from watchtower.schemas.replay_records import decode_replay_record
from watchtower.schemas.schema_ids import CATALOG, SchemaKind
from watchtower.schemas.wire import decode_event, encode_event, replay_record_for

SCHEMAS = Path(watchtower.schemas.__file__).parent

# The Avro type each Python annotation must have in the schema.
AVRO_OF: dict[Any, Any] = {
    str: "string",
    int: "long",
    bool: "boolean",
    bytes: "bytes",
    int | None: ["null", "long"],
    str | None: ["null", "string"],
    tuple[int, int] | None: ["null", {"type": "array", "items": "long"}],  # a replay's skip
}
AVRO_INTS = {("StreamMessagePublished", "version")}  # CIP-7's StreamMessage version is an Avro int


def schema_file(name: str) -> dict[str, Any]:
    """The latest version's file: the one the typed class mirrors."""
    return json.loads((SCHEMAS / f"{name}.v{codec.latest_version(name)}.avsc").read_text(encoding="utf-8"))


def assert_record_matches_class(record: dict[str, Any], cls: type, owner: str, *, envelope: bool) -> None:
    hints = typing.get_type_hints(cls)
    fields = [f.name for f in dataclasses.fields(cls)]
    avro_fields = record["fields"][:-2] if envelope else record["fields"]
    assert [f["name"] for f in avro_fields] == fields, owner
    for avro_field in avro_fields:
        name, avro = avro_field["name"], avro_field["type"]
        hint = hints[name]
        if hint is StreamConfig:
            assert avro["name"] == "StreamConfig"
            assert [f["name"] for f in avro["fields"]] == list(stream_config_to_record(created_config()))
        elif hint is PaidStreamConfig:
            assert avro["name"] == "PaidStreamConfig"
            assert [f["name"] for f in avro["fields"]] == [f.name for f in dataclasses.fields(PaidStreamConfig)]
        elif (owner, name) in AVRO_INTS:
            assert (hint, avro) == (int, "int")
        else:
            assert avro == AVRO_OF[hint], f"{owner}.{name}: {hint} vs {avro}"
    if envelope:
        block_height, caused_by = record["fields"][-2:]
        assert (block_height["name"], block_height["type"]) == ("block_height", "long")
        assert caused_by["name"] == "caused_by"
        assert caused_by["type"]["name"] == "EventOrigin"
        assert_record_matches_class(caused_by["type"], events.EventOrigin, f"{owner}.caused_by", envelope=False)


def test_there_is_one_typed_class_and_one_schema_per_event_type() -> None:
    assert set(EVENT_BODIES) == set(EVENT_TYPES)
    assert {n for n, info in CATALOG.items() if info.kind is SchemaKind.EVENT} == set(EVENT_TYPES)
    for name, cls in EVENT_BODIES.items():
        assert cls.__name__ == name == cls.TYPE  # past tense, named as its schema
        assert cls.__dataclass_params__.frozen  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", sorted(EVENT_TYPES))
def test_typed_class_equals_its_avsc_field_by_field(name: str) -> None:
    assert_record_matches_class(schema_file(name), EVENT_BODIES[name], name, envelope=True)


@pytest.mark.parametrize("name", sorted(EVENT_TYPES))
def test_event_bodies_are_the_schema_fields_without_the_envelope(name: str) -> None:
    fields = [f["name"] for f in schema_file(name)["fields"]]
    assert fields[-2:] == list(events.ENVELOPE_FIELDS)
    assert tuple(fields[:-2]) == BODY_FIELDS[name]


def test_a_publish_event_refers_to_its_message_by_the_ten_cip7_fields_only() -> None:
    assert BODY_FIELDS["StreamMessagePublished"] == MESSAGE_CIP7_FIELDS
    names = {f["name"] for f in schema_file("StreamMessagePublished")["fields"]}
    assert "message" not in names
    assert "payload_inline" not in names


def test_every_copy_of_event_origin_is_the_same_definition() -> None:
    copies = {json.dumps(next(f["type"] for f in schema_file(n)["fields"] if f["name"] == "caused_by"), sort_keys=True)
              for n in EVENT_TYPES}
    assert len(copies) == 1


@pytest.mark.parametrize("index", range(len(EVENT_TYPES)))
def test_every_event_type_survives_the_events_codec(index: int) -> None:
    event = one_of_each()[index]
    data = encode_event(event)
    assert codec.read_header(data) == (event.type, codec.latest_version(event.type))
    decoded = decode_event(data)
    assert decoded == event
    assert type(decoded.body) is EVENT_BODIES[event.type]
    assert encode_event(decoded) == data


@pytest.mark.parametrize("index", range(len(EVENT_TYPES)))
def test_each_event_record_reads_with_its_avsc_file_alone(index: int) -> None:
    event = one_of_each()[index]
    data = encode_event(event)
    schema = fastavro.schema.load_schema(str(SCHEMAS / f"{event.type}.v{codec.latest_version(event.type)}.avsc"))
    record = fastavro.schemaless_reader(io.BytesIO(data[codec.HEADER_BYTES:]), schema)
    assert record["caused_by"]["aggregate_id"] == event.stream_id
    assert record["caused_by"]["nonce"] == event.nonce
    assert record["block_height"] == event.block_height


@pytest.mark.parametrize("index", range(len(EVENT_TYPES)))
def test_an_avro_record_maps_back_to_the_same_event(index: int) -> None:
    event = one_of_each()[index]
    assert events.event_from_record(event.type, events.event_record(event)) == event


def test_an_event_whose_body_does_not_fit_its_schema_is_schema_mismatch() -> None:
    published = one_of_each()[1]
    assert isinstance(published.body, StreamMessagePublished)
    bad = dataclasses.replace(published, body=dataclasses.replace(published.body, sequence="one"))  # type: ignore[arg-type]
    with pytest.raises(SchemaMismatchError, match="StreamMessagePublished"):
        encode_event(bad)


def test_an_event_body_is_one_of_the_event_classes() -> None:
    published = one_of_each()[1]
    with pytest.raises(InvalidArgumentError, match="event class"):
        dataclasses.replace(published, body=event_fields(published.body))  # type: ignore[arg-type]


def test_the_registry_event_keeps_the_registry_key_and_the_listed_stream() -> None:
    feed = next(e for e in one_of_each() if isinstance(e.body, FeedRegistered))
    decoded = decode_event(encode_event(feed))
    assert decoded.stream_id == feed.stream_id != SID
    assert isinstance(decoded.body, FeedRegistered)
    assert decoded.body.stream_id == SID


def test_reply_keeps_bytes_and_lists() -> None:
    event: Event = one_of_each()[2]
    assert decode_event(encode_event(event)).reply == event.reply
    assert event.reply["raw"] == b"\x00\x01"


def test_the_replay_topics_registration_carries_the_events_plan_field_for_field() -> None:
    """The ``replay`` topic's registered record keeps its own JSON field order (pinned by the golden
    bytes), so it spells its fields itself; they are the `ReplayPlan`'s, by name and type (``skip``
    a JSON array there), with the event's values, and what it adds is the envelope."""
    assert BODY_FIELDS["ReplayRegistered"] == BODY_FIELDS["ReplayOrdered"] == PLAN_FIELDS
    event = next(e for e in one_of_each() if isinstance(e.body, ReplayRegistered))
    record = decode_replay_record(replay_record_for(event))
    assert isinstance(record, ReplayRegistration)
    for name, value in event_fields(event.body).items():
        got = getattr(record, name)
        assert (list(value) if isinstance(value, tuple) else value) == got, name
    plan_types = typing.get_type_hints(ReplayPlan)
    record_types = typing.get_type_hints(ReplayRegistration)
    for name in PLAN_FIELDS:
        expected = list[int] | None if name == "skip" else plan_types[name]
        assert record_types[name] == expected, name
    added = set(ReplayRegistration.__struct_fields__) - set(PLAN_FIELDS)
    assert added == {"v", "block_height", "caller", "nonce", "digest_hex", "command"}
