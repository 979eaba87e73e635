"""The JSON records: commands, internal forwards and replies, each defined once here.

These are request/reply traffic between the SDK and the workers (not the archive an outside reader
replays), so they stay JSON, readable with any client, and are decoded with msgspec against these
definitions (a typed decode, several times faster than ``json.loads`` plus hand checks). The key
manager's forwards are not written here: their records are derived from the core's classes
(`protocol.ledger.common`) field for field (`FORWARD_JSON`).
`tests/schemas/test_envelopes.py` proves that the encoders write exactly these fields and that
`SignedCommandJson` is `Command.to_dict()` field for field.

- commands topic: ``{"v": 1, "command": SignedCommandJson}``
- internal topic: ``{"v": 1, "register_feed": SignedCommandJson}`` (a stream's writer forwards the
  signed create_stream to the registry), or ``{"v": 1, "keymgr": KeymgrForwardJson}`` (one of the
  key manager's forwards, tagged by ``kind``; docs/ledger.md, including the ICRC-77 replay
  charge to the requester's account and its settlement back to the stream, and the replay
  worker's ``replay_finished`` to the stream)
- replies topic: ``{"v": 1, "ok": true, "result": {...}}`` or ``{"v": 1, "ok": false, "error": ErrorJson}``
"""

from __future__ import annotations

import collections.abc
import dataclasses
import typing
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from watchtower.protocol.ledger.common import (
    CbyBurn,
    CbyCredit,
    Origin,
    PaidCommand,
    PurchaseDebit,
    PurchaseSettled,
    ReplayCharge,
    ReplayFinished,
    ReplaySettled,
)
from watchtower.protocol.signed_command import Command

WIRE_VERSION: Final = 1


class SignedCommandJson(msgspec.Struct, forbid_unknown_fields=True):
    """A signed command (`protocol.signed_command.Command.to_dict()`): bytes as hex, body bytes as
    ``{"$bytes": hex}``."""

    method: str
    stream_id: str
    caller_public_key_hex: str
    nonce: int
    body: dict[str, Any]
    signature_hex: str


class ErrorJson(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """A refusal: the spec's error code, a message saying what to do, optional details."""

    code: str
    message: str
    details: dict[str, Any] | None = None


class OriginJson(msgspec.Struct, forbid_unknown_fields=True):
    """The signed command a key-manager forward descends from (`protocol.ledger.common.Origin`)."""

    caller: str
    nonce: int
    digest_hex: str


#: The key manager's forwards (`protocol.ledger.common`), each tagged by ``kind`` on the wire.
FORWARD_KINDS: Final[Mapping[type, str]] = {
    CbyCredit: "credit", PurchaseDebit: "purchase_debit", PurchaseSettled: "purchase_settled", CbyBurn: "burn",
    PaidCommand: "paid_command", ReplayCharge: "replay_charge", ReplaySettled: "replay_settled",
    ReplayFinished: "replay_finished",
}


def _wire_type(hint: Any) -> Any:
    """The JSON type of one of the core's field types: an Origin, a signed Command and an error
    mapping have wire shapes of their own; strings and integers are themselves."""
    if hint is Origin:
        return OriginJson
    if hint is Command:
        return SignedCommandJson
    args = typing.get_args(hint)
    if type(None) in args:  # X | None
        (inner,) = [a for a in args if a is not type(None)]
        return ErrorJson | None if typing.get_origin(inner) in (Mapping, collections.abc.Mapping) \
            else _wire_type(inner) | None
    if hint in (str, int):
        return hint
    raise TypeError(f"no wire type for {hint!r}")  # a new field type needs its mapping here


def _forward_struct(core: type, kind: str) -> type[msgspec.Struct]:
    """The JSON record of a forward class, derived field for field (names, order, defaults)."""
    hints = typing.get_type_hints(core)
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for field in dataclasses.fields(core):
        wire = _wire_type(hints[field.name])
        fields.append((field.name, wire) if field.default is dataclasses.MISSING else (field.name, wire, field.default))
    return msgspec.defstruct(f"{core.__name__}Json", fields, tag=kind, tag_field="kind", forbid_unknown_fields=True,
                             module=__name__)


#: Each forward class's JSON record, and back.
FORWARD_JSON: Final[Mapping[type, type[msgspec.Struct]]] = {
    core: _forward_struct(core, kind) for core, kind in FORWARD_KINDS.items()}
FORWARD_CORE: Final[Mapping[type, type]] = {wire: core for core, wire in FORWARD_JSON.items()}
#: Any forward's record (a tagged union msgspec decodes by ``kind``), built from FORWARD_JSON at run time.
KeymgrForwardJson: Any = typing.Union[tuple(FORWARD_JSON.values())]  # noqa: UP007


class CommandRecord(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """A record on the commands or internal topic: exactly one of `command` / `register_feed` /
    `keymgr`."""

    v: int
    command: SignedCommandJson | None = None
    register_feed: SignedCommandJson | None = None
    keymgr: KeymgrForwardJson | None = None


class ReplyRecord(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """A record on the replies topic: `result` when ok, `error` otherwise."""

    v: int
    ok: bool
    result: dict[str, Any] | None = None
    error: ErrorJson | None = None


class VersionProbe(msgspec.Struct):
    """Just the envelope version, read when a record does not fit its definition (so an unknown
    version is reported as SCHEMA_MISMATCH rather than as a malformed record)."""

    v: Any = msgspec.UNSET


COMMAND_DECODER: Final = msgspec.json.Decoder(CommandRecord)
REPLY_DECODER: Final = msgspec.json.Decoder(ReplyRecord)
PROBE_DECODER: Final = msgspec.json.Decoder(VersionProbe)
ENCODER: Final = msgspec.json.Encoder()
