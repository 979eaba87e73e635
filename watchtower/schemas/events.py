"""The events' Avro records, mapped by reflection from the core's typed event classes.

An event's Avro record (``<Type>.v<N>.avsc``) is its body's fields (`protocol.events`, in the
class's order) followed by the envelope: ``block_height`` and ``caused_by`` (an `EventOrigin`: the
command that caused the event). `tests/schemas/test_typed_events.py` proves each body class and its
latest ``.avsc`` equal field by field (name, order, Avro type), so neither can drift from the other.

Two functions cross the edge, one each way, each in one step:

- `event_record`: the `protocol.stream.state.Event` a decide wrote → the record fastavro writes;
- `event_from_record`: a record fastavro read (already upcast to the latest version) → the Event.

Only three values are not copied as they are: a `StreamConfig` and a `PaidStreamConfig` become
their nested records, and a replay's ``skip`` (a tuple in the frozen body) an Avro array. The
reply rides in ``caused_by.reply_json`` as JSON text (replies are free-form).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any, Final

from watchtower.protocol.events import BODY_FIELDS, EVENT_BODIES, PaidStreamRegistered, StreamCreated
from watchtower.protocol.ledger.paid import PaidStreamConfig
from watchtower.protocol.signed_command import BYTES_TAG
from watchtower.protocol.stream.state import Event
from watchtower.schemas.codec import register_upcaster
from watchtower.schemas.records import stream_config_from_record, stream_config_to_record

ENVELOPE_FIELDS: Final = ("block_height", "caused_by")
"""The fields every event record ends with, after its body's."""


@dataclasses.dataclass(frozen=True, slots=True)
class EventOrigin:
    """The command that caused an event (Avro ``watchtower.v1.EventOrigin``): the schema of
    ``caused_by``, which the tests hold against every event's ``.avsc``.

    `aggregate_id` is the key of the log the event is on: the stream id, or the registry's key.
    `reply_json` is the reply as JSON text: replies are free-form, so Avro carries them as text.
    """

    aggregate_id: str
    caller: str
    nonce: int
    digest: bytes
    reply_json: str


_ARRAYS: Final[Mapping[str, tuple[str, ...]]] = {"ReplayOrdered": ("skip",), "ReplayRegistered": ("skip",)}
"""Body fields that are Avro arrays (a frozen body holds them as tuples)."""
_NESTED: Final = frozenset({StreamCreated.TYPE, PaidStreamRegistered.TYPE})


def event_record(event: Event) -> dict[str, Any]:
    """The Avro record of `event`, field for field (the writer encodes one event per publish, so
    it copies the fields straight across and converts only the nested values)."""
    body = event.body
    name = body.TYPE
    record = {field: getattr(body, field) for field in BODY_FIELDS[name]}
    if name in _NESTED:
        if isinstance(body, StreamCreated):
            record["config"] = stream_config_to_record(body.config)
        elif isinstance(body, PaidStreamRegistered):
            record["paid_stream_config"] = body.paid_stream_config.to_dict()
    for field in _ARRAYS.get(name, ()):
        if record[field] is not None:
            # fastavro reads a tuple in a union as (branch, value): arrays are written as lists.
            record[field] = list(record[field])
    record["block_height"] = event.block_height
    record["caused_by"] = {
        "aggregate_id": event.stream_id,
        "caller": event.caller,
        "nonce": event.nonce,
        "digest": event.digest,
        "reply_json": _reply_json(event.reply),
    }
    return record


def event_from_record(type_name: str, record: Mapping[str, Any]) -> Event:
    """The Event of an Avro record of `type_name`.

    MalformedRecordError for a config that breaks a CIP-7 rule; InvalidArgumentError for an
    envelope `Event` refuses; KeyError / TypeError / ValueError when the record is not of that
    schema or its reply_json is not JSON (the wire module reports each as a malformed record).
    """
    cls = EVENT_BODIES[type_name]
    values = {field: record[field] for field in BODY_FIELDS[type_name]}
    if type_name in _NESTED:
        if cls is StreamCreated:
            values["config"] = stream_config_from_record(record["config"])
        elif cls is PaidStreamRegistered:
            values["paid_stream_config"] = PaidStreamConfig.from_dict(record["paid_stream_config"])
    for field in _ARRAYS.get(type_name, ()):
        if values[field] is not None:
            values[field] = tuple(values[field])
    origin = record["caused_by"]
    return Event(
        stream_id=origin["aggregate_id"],
        block_height=record["block_height"],
        caller=origin["caller"],
        nonce=origin["nonce"],
        digest=origin["digest"],
        reply=json.loads(origin["reply_json"], object_hook=_unwrap_bytes),
        body=cls(**values),
    )


def _reply_json(reply: Mapping[str, Any]) -> str:
    # json's C encoder walks dicts, lists and tuples; the hook turns the rest (frozen maps, bytes)
    # into their JSON-safe form (`signed_command.to_tagged_json`), so no Python walk of the whole reply.
    return json.dumps(reply, separators=(",", ":"), sort_keys=True, default=_json_default)


def _json_default(value: object) -> object:
    if isinstance(value, bytes):
        return {BYTES_TAG: value.hex()}
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"a reply value of type {type(value).__name__} is not JSON")


def _unwrap_bytes(obj: dict[str, Any]) -> Any:
    # Inverse of `_json_default` for bytes (Event freezes the rest); ValueError / TypeError on a
    # tag that holds no hex text, which the codec reports as a malformed record.
    if len(obj) == 1 and BYTES_TAG in obj:
        return bytes.fromhex(obj[BYTES_TAG])
    return obj


def _no_command(old: dict[str, Any]) -> dict[str, Any]:
    # v1 carried no signed command: the record decodes, and the fold refuses it with the reason
    # (only the owner's signed command can put a publisher key in force).
    return {**old, "command": None}


def _not_confidential(old: dict[str, Any]) -> dict[str, Any]:
    # Confidential streams came with v3: every stream created before was not one.
    return {**old, "config": {**old["config"], "confidential": False}}


register_upcaster("StreamCreated", 1, _no_command)
register_upcaster("StreamCreated", 2, _not_confidential)
register_upcaster("PublisherKeyRotated", 1, _no_command)
