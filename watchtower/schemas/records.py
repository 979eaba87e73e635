"""Conversions between protocol value types and their Avro records, at the edge.

Decoding a record that is readable Avro but breaks a protocol rule (say a 70,000-byte payload or
a NaN tag) raises `MalformedRecordError` carrying the rule's message, so a consumer's error handling
stays within the codec's two error types.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from typing import Any

import fastavro

from watchtower.protocol.config import IngestionConfig, StreamConfig
from watchtower.protocol.errors import MalformedRecordError, SchemaMismatchError, WatchtowerError
from watchtower.protocol.signed_command import to_tagged_json
from watchtower.protocol.stream.message import StreamMessage
from watchtower.schemas import codec


def encode_message(msg: StreamMessage) -> bytes:
    """A framed StreamMessage record (the value on the messages topic).

    A `StreamMessage` has checked every CIP-7 rule when it was built, so its record has the schema's
    exact shape: it is written as header + Avro body directly (`codec.frame`), without the field by
    field check `codec.encode` gives loosely built records (the writer encodes one per publish).
    """
    header, parsed = codec.frame("StreamMessage")
    out = io.BytesIO()
    out.write(header)
    try:
        fastavro.schemaless_writer(out, parsed, msg.to_record())
    except Exception as exc:  # a value out of Avro's range (an int64 overflow), never expected
        raise SchemaMismatchError(f"the StreamMessage does not fit its schema: {exc}") from None
    return out.getvalue()


def message_from_record(record: Mapping[str, Any]) -> StreamMessage:
    """A StreamMessage from its Avro record; `MalformedRecordError` when it breaks a CIP-7 rule."""
    try:
        return StreamMessage.from_record(record)
    except WatchtowerError as exc:
        raise MalformedRecordError(f"StreamMessage record breaks a CIP-7 rule ({exc.code}): {exc.message}") from None


def decode_message_record(data: bytes) -> dict[str, Any]:
    """The Avro record of a framed StreamMessage, not checked against CIP-7's rules: only for a
    record known to hold a valid message (one already decoded with `decode_message` and verified)."""
    return dict(codec.decode_as("StreamMessage", data))


def decode_message(data: bytes) -> StreamMessage:
    """The StreamMessage in a framed record (integrity is checked by `verify_message`, not here)."""
    return message_from_record(codec.decode_as("StreamMessage", data))


def stream_config_to_record(config: StreamConfig) -> dict[str, Any]:
    """The Avro StreamConfig record (the latest StreamCreated's): ingestion's JSON objects travel
    as JSON text, and ``confidential`` is always written (`StreamConfig.to_dict` omits it while false)."""
    record = config.to_dict()
    if config.ingestion is not None:
        ingestion = config.ingestion.to_dict()
        # The objects are deep-frozen (they come from a signed command's body): thaw them for json.
        ingestion["task_definition_json"] = json.dumps(to_tagged_json(ingestion.pop("task_definition")), sort_keys=True)
        ingestion["result_schema_json"] = json.dumps(to_tagged_json(ingestion.pop("result_schema")), sort_keys=True)
        record["ingestion"] = ingestion
    record["confidential"] = config.confidential
    return record


def stream_config_from_record(record: Mapping[str, Any]) -> StreamConfig:
    """Inverse of `stream_config_to_record`; `MalformedRecordError` when a rule is broken."""
    try:
        fields = dict(record)
        ingestion = fields.get("ingestion")
        if isinstance(ingestion, Mapping):
            ing = dict(ingestion)
            ing["task_definition"] = _json_object(ing.pop("task_definition_json", None), "task_definition_json")
            ing["result_schema"] = _json_object(ing.pop("result_schema_json", None), "result_schema_json")
            fields["ingestion"] = IngestionConfig.from_dict(ing)
        return StreamConfig.from_dict(fields)
    except WatchtowerError as exc:
        if isinstance(exc, MalformedRecordError):
            raise
        raise MalformedRecordError(f"StreamConfig record breaks a CIP-7 rule ({exc.code}): {exc.message}") from None


def _json_object(text: object, name: str) -> dict[str, Any]:
    if not isinstance(text, str):
        raise MalformedRecordError(f"{name} must be JSON text")
    try:
        value = json.loads(text)
    except ValueError:
        raise MalformedRecordError(f"{name} is not valid JSON") from None
    if not isinstance(value, dict):
        raise MalformedRecordError(f"{name} must hold a JSON object")
    return value
