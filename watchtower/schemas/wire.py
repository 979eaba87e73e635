"""Bytes on the commands, internal, events and replies topics, and back (the one codec of every record).

Commands and events travel as a versioned JSON envelope (``{"v": 1, ...}``); StreamMessages on
the messages topic use the framed Avro codec (:mod:`watchtower.schemas.records`) so that Spark
and any Kafka client can read the archive. Decoding failures are always a
:class:`~watchtower.protocol.errors.WatchtowerError` (MALFORMED_RECORD / SCHEMA_MISMATCH), never a
raw ``ValueError``, so a poison record becomes an error reply instead of a crashed worker.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from watchtower.protocol.errors import MalformedRecordError, SchemaMismatchError, WatchtowerError
from watchtower.protocol.signed_command import Command
from watchtower.protocol.stream_actor import Event

WIRE_VERSION = 1

#: Kafka record headers the client sets on a command so the worker can answer it.
H_CORRELATION = "wt-correlation-id"
H_REPLY_PARTITION = "wt-reply-partition"
#: Header on each messages-topic record: the stream's ring capacity, so a projection can prune
#: its offset index without first seeing the StreamCreated event on the other topic.
H_CAPACITY = "wt-capacity"


def _load(data: bytes | None, what: str) -> dict[str, Any]:
    if data is None:
        raise MalformedRecordError(f"the {what} record has no value; send a JSON {what} envelope")
    try:
        obj = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise MalformedRecordError(f"the {what} record is not JSON ({exc.__class__.__name__}); "
                                   "use the Watchtower SDK or CLI to build it") from None
    if not isinstance(obj, dict):
        raise MalformedRecordError(f"the {what} record must be a JSON object")
    if obj.get("v") != WIRE_VERSION:
        raise SchemaMismatchError(f"the {what} envelope version {obj.get('v')!r} is not supported "
                                  f"(this worker reads v{WIRE_VERSION}); upgrade the client or worker")
    return obj


def encode_command(cmd: Command) -> bytes:
    return json.dumps({"v": WIRE_VERSION, "command": cmd.to_dict()}, separators=(",", ":")).encode()


def encode_registry_forward(create: Command) -> bytes:
    """The record a stream's writer sends the registry for a create_stream with a feed listing."""
    return json.dumps({"v": WIRE_VERSION, "register_feed": create.to_dict()}, separators=(",", ":")).encode()


@dataclasses.dataclass(frozen=True)
class RegistryForward:
    """A decoded registry forward: the signed create_stream command to list."""

    create: Command


def decode_command(data: bytes | None) -> Command | RegistryForward:
    obj = _load(data, "command")
    try:
        if "register_feed" in obj:
            return RegistryForward(Command.from_dict(obj["register_feed"]))
        return Command.from_dict(obj["command"])
    except WatchtowerError:
        raise
    except Exception as exc:
        raise MalformedRecordError(f"the command envelope is malformed ({exc.__class__.__name__}: {exc}); "
                                   "use the Watchtower SDK or CLI to build it") from None


def encode_event(event: Event) -> bytes:
    return json.dumps({"v": WIRE_VERSION, "event": event.to_dict()}, separators=(",", ":")).encode()


def decode_event(data: bytes | None) -> Event:
    obj = _load(data, "event")
    try:
        return Event.from_dict(obj["event"])
    except WatchtowerError:
        raise
    except Exception as exc:
        raise MalformedRecordError(f"the event record is malformed ({exc.__class__.__name__})") from None


def encode_reply(ok: bool, result: dict[str, Any] | None = None, error: WatchtowerError | None = None) -> bytes:
    body: dict[str, Any] = {"v": WIRE_VERSION, "ok": ok}
    if ok:
        body["result"] = result or {}
    else:
        assert error is not None
        body["error"] = error.to_dict()
    return json.dumps(body, separators=(",", ":"), default=str).encode()


def decode_reply(data: bytes | None) -> dict[str, Any]:
    return _load(data, "reply")
