"""Bytes on the commands, internal, events and replies topics, and back (the one codec of every record).

- events: framed Avro, one schema per event type (``<Type>.v1.avsc``, typed in `events`): magic
  0x57, schema id, schema version, then the Avro body (see `codec` for the frame contract);
- messages: framed Avro ``StreamMessage.v1.avsc`` (`records.encode_message` / `decode_message`);
- commands, internal forwards, replies: versioned JSON envelopes defined in `envelopes`;
- replay: JSON records defined in `replay_records` (the stream's writer derives its two from the
  stream's replay events, `replay_record_for`).

Failure contract: decoding raises MalformedRecordError (bytes that are not a record of the
expected kind) or SchemaMismatchError (a version or schema this build does not read), so a poison
record becomes an error reply or a quarantined record, never a crashed worker. A command whose
envelope is fine but whose own fields are wrong is INVALID_ARGUMENT naming the field: that is the
sender's to fix. Encoding an event that does not fit its schema is SchemaMismatchError.
"""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Mapping
from typing import Any

import fastavro
import msgspec

from watchtower.protocol.errors import (
    InvalidArgumentError,
    MalformedRecordError,
    SchemaMismatchError,
    WatchtowerError,
)
from watchtower.protocol.events import ReplayCancelRequested, ReplayRegistered
from watchtower.protocol.ledger.common import (
    KeymgrForward,
    Origin,
    ReplayFinished,
)
from watchtower.protocol.replay.records import (
    REPLAY_RECORD_VERSION,
    ReplayCancelRequest,
    ReplayRecord,
    ReplayRegistration,
)
from watchtower.protocol.signed_command import Command
from watchtower.protocol.stream.state import Event
from watchtower.schemas import codec, events
from watchtower.schemas.envelopes import (
    COMMAND_DECODER,
    ENCODER,
    FORWARD_CORE,
    FORWARD_JSON,
    PROBE_DECODER,
    REPLY_DECODER,
    WIRE_VERSION,
    CommandRecord,
    ErrorJson,
    OriginJson,
    SignedCommandJson,
)
from watchtower.schemas.replay_records import encode_replay_record
from watchtower.schemas.schema_ids import CATALOG, SchemaKind

#: Kafka record headers the client sets on a command so the worker can answer it.
H_CORRELATION = "wt-correlation-id"
H_REPLY_PARTITION = "wt-reply-partition"

EVENT_SCHEMAS = frozenset(name for name, info in CATALOG.items() if info.kind is SchemaKind.EVENT)


# --- commands and internal forwards --------------------------------------------------------------


def _signed(cmd: Command) -> SignedCommandJson:
    return SignedCommandJson(**cmd.to_dict())


def encode_command(cmd: Command) -> bytes:
    """The commands-topic record of a signed command."""
    return ENCODER.encode(CommandRecord(v=WIRE_VERSION, command=_signed(cmd)))


def encode_registry_forward(create: Command) -> bytes:
    """The record a stream's writer sends the registry for a create_stream with a feed listing."""
    return ENCODER.encode(CommandRecord(v=WIRE_VERSION, register_feed=_signed(create)))


@dataclasses.dataclass(frozen=True)
class RegistryForward:
    """A decoded registry forward: the signed create_stream command to list."""

    create: Command


def encode_keymgr_forward(forward: KeymgrForward) -> bytes:
    """The internal-topic record of one of the key manager's forwards (`protocol.ledger.common`)."""
    return ENCODER.encode(CommandRecord(v=WIRE_VERSION, keymgr=_forward_json(forward)))


def encode_replay_finished(finished: ReplayFinished) -> bytes:
    """The internal-topic record of the replay worker's `ReplayFinished` to the stream."""
    return ENCODER.encode(CommandRecord(v=WIRE_VERSION, keymgr=_forward_json(finished)))


def _forward_json(forward: KeymgrForward | ReplayFinished) -> Any:
    """The JSON record of a forward: its class's derived record (`envelopes.FORWARD_JSON`), field for field."""
    cls = type(forward)
    return FORWARD_JSON[cls](*(_to_wire(getattr(forward, f.name)) for f in dataclasses.fields(cls)))


def _to_wire(value: Any) -> Any:
    if isinstance(value, Origin):
        return OriginJson(value.caller, value.nonce, value.digest.hex())
    if isinstance(value, Command):
        return _signed(value)
    if isinstance(value, Mapping):  # an error
        return msgspec.convert(dict(value), ErrorJson)
    return value


def _forward_from(record: Any) -> KeymgrForward | ReplayFinished:
    """The forward in a decoded JSON record; the class states the forward's rules
    (InvalidArgumentError naming the field)."""
    core = FORWARD_CORE[type(record)]
    return core(**{f.name: _from_wire(getattr(record, f.name)) for f in dataclasses.fields(core)})


def _from_wire(value: Any) -> Any:
    if isinstance(value, OriginJson):
        try:
            digest = bytes.fromhex(value.digest_hex)
        except ValueError:
            raise MalformedRecordError("the forward's origin digest_hex is not hex") from None
        return Origin(value.caller, value.nonce, digest)
    if isinstance(value, SignedCommandJson):
        return Command.from_dict(msgspec.structs.asdict(value))
    if isinstance(value, ErrorJson):
        return _error(value)
    return value


def _error(record: ErrorJson | None) -> dict[str, Any] | None:
    # An error without details is encoded without them (omit_defaults) and decodes with None.
    if record is None:
        return None
    fields = {k: v for k, v in msgspec.structs.asdict(record).items() if v is not None}
    return WatchtowerError.from_dict(fields).to_dict()


def decode_command(data: bytes | None) -> Command | RegistryForward | KeymgrForward | ReplayFinished:
    """The command, registry forward or key-manager forward in a commands/internal record."""
    if data is None:
        raise MalformedRecordError("the command record has no value; send a JSON command envelope")
    try:
        record = COMMAND_DECODER.decode(data)
    except msgspec.ValidationError as exc:
        _require_version(data, "command")
        where = str(exc)
        if "$.command" in where or "$.register_feed" in where or "$.keymgr.command" in where:
            raise InvalidArgumentError(f"the command is invalid: {where}; "
                                       "build it with the Watchtower SDK or CLI") from None
        raise MalformedRecordError(f"the command envelope is malformed ({where}); "
                                   "use the Watchtower SDK or CLI to build it") from None
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise MalformedRecordError(f"the command record is not JSON ({_short(exc)}); "
                                   "use the Watchtower SDK or CLI to build it") from None
    _check_version(record.v, "command")
    present = [part is not None for part in (record.command, record.register_feed, record.keymgr)]
    if sum(present) != 1:
        raise MalformedRecordError('a command envelope holds exactly one of "command", "register_feed" and "keymgr"')
    if record.keymgr is not None:
        return _forward_from(record.keymgr)
    signed = record.command if record.register_feed is None else record.register_feed
    assert signed is not None
    # Command.from_dict states the command's own rules (INVALID_ARGUMENT naming the field).
    command = Command.from_dict(msgspec.structs.asdict(signed))
    return command if record.register_feed is None else RegistryForward(command)


def _require_version(data: bytes, what: str) -> None:
    # Called when a record does not fit its definition: an unknown version explains that better.
    try:
        version = PROBE_DECODER.decode(data).v
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return
    if version is not msgspec.UNSET:
        _check_version(version, what)


def _check_version(version: object, what: str) -> None:
    if version != WIRE_VERSION or isinstance(version, bool):
        raise SchemaMismatchError(f"the {what} envelope version {version!r} is not supported "
                                  f"(this worker reads v{WIRE_VERSION}); upgrade the client or worker")


# --- events --------------------------------------------------------------------------------------


def encode_event(event: Event) -> bytes:
    """The framed Avro record of `event` under its type's schema (SchemaMismatchError if it does not fit)."""
    try:
        record = events.event_record(event)
        header, parsed = codec.frame(event.type)
        out = io.BytesIO()
        out.write(header)
        fastavro.schemaless_writer(out, parsed, record)
    except Exception as exc:  # KeyError, TypeError, ValueError, a StreamConfig rule, ...
        raise SchemaMismatchError(f"a {event.type} event does not fit its schema: {_short(exc)}") from None
    return out.getvalue()


def decode_event(data: bytes | None) -> Event:
    """The Event in an events-topic record, decoded once (MalformedRecordError / SchemaMismatchError)."""
    if data is None:
        raise MalformedRecordError("the event record has no value; events are framed Avro records")
    decoded = codec.decode(data, expect=EVENT_SCHEMAS)
    try:
        return events.event_from_record(decoded.name, decoded.record)
    except WatchtowerError as exc:
        if isinstance(exc, MalformedRecordError):
            raise
        raise MalformedRecordError(f"not a valid {decoded.name} event ({exc.code}): {exc.message}") from None
    except (KeyError, TypeError, ValueError, RecursionError) as exc:
        raise MalformedRecordError(f"the {decoded.name} record is malformed: {_short(exc)}") from None


# --- replay records written with stream events ---------------------------------------------------


def replay_record_for(event: Event, command: Command | None = None) -> bytes | None:
    """The ``replay``-topic record a stream event implies (a ReplayRegistered or a
    ReplayCancelRequested event: `replay.records`), or None for any other event. The writer
    produces it in the transaction that writes the event, keyed by the stream id. A ``registered``
    record carries `command`, the requester's signed register_replay the event was decided from:
    the replay worker fulfils only a registration that its requester signed
    (`replay_status.check_registration_command`)."""
    body = event.body
    record: ReplayRecord
    if isinstance(body, ReplayRegistered):
        record = ReplayRegistration.of(body, block_height=event.block_height, caller=event.caller,
                                       nonce=event.nonce, digest_hex=event.digest.hex(),
                                       command=None if command is None else command.to_dict())
    elif isinstance(body, ReplayCancelRequested):
        record = ReplayCancelRequest(
            v=REPLAY_RECORD_VERSION, replay_id=body.replay_id, stream_id=body.stream_id,
            requester=body.requester, block_height=event.block_height, nonce=event.nonce,
            digest_hex=event.digest.hex())
    else:
        return None
    return encode_replay_record(record)


# --- replies -------------------------------------------------------------------------------------


def encode_reply(ok: bool, result: dict[str, Any] | None = None, error: WatchtowerError | None = None) -> bytes:
    """The replies-topic record: ``{"v", "ok", "result"}`` or ``{"v", "ok", "error"}`` (`envelopes.ReplyRecord`)."""
    body: dict[str, Any] = {"v": WIRE_VERSION, "ok": ok}
    if ok:
        body["result"] = result or {}
    else:
        assert error is not None
        body["error"] = error.to_dict()
    # json, not msgspec: a result value JSON cannot hold is written as its str(), as it always was.
    return json.dumps(body, separators=(",", ":"), default=str).encode()


def decode_reply(data: bytes | None) -> dict[str, Any]:
    """The reply envelope as a dict (MalformedRecordError / SchemaMismatchError)."""
    if data is None:
        raise MalformedRecordError("the reply record has no value")
    try:
        record = REPLY_DECODER.decode(data)
    except msgspec.ValidationError as exc:
        _require_version(data, "reply")
        raise MalformedRecordError(f"the reply envelope is malformed ({_short(exc)})") from None
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise MalformedRecordError(f"the reply record is not JSON ({_short(exc)})") from None
    _check_version(record.v, "reply")
    out: dict[str, Any] = {"v": record.v, "ok": record.ok}
    if record.ok:
        if record.error is not None:
            raise MalformedRecordError("an ok reply carries no error")
        out["result"] = record.result or {}
    else:
        if record.error is None or record.result is not None:
            raise MalformedRecordError("a refused reply carries an error and no result")
        out["error"] = msgspec.structs.asdict(record.error)
        if record.error.details is None:
            del out["error"]["details"]
    return out


def _short(exc: BaseException) -> str:
    return (" ".join(str(exc).split()) or type(exc).__name__)[:300]
