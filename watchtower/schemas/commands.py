"""Signed command envelopes: build, encode and verify them.

A command record is ``{caller, nonce, request_id, signature, body}``. The signature covers
`watchtower.protocol.command_auth.command_signing_bytes` with the body serialized by
`codec.encode_command_body`, so client and agent sign and check identical bytes.

The nonce rule (strictly increasing per account) needs the account's last nonce, which only the
agent's state has; call `command_auth.check_nonce` there after `verify_command`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import nacl.signing

from watchtower.protocol.command_auth import (
    caller_address,
    command_signing_bytes,
    sign_command_bytes,
    verify_command_signature,
)
from watchtower.protocol.errors import InvalidArgumentError, InvalidSignatureError, SchemaMismatchError
from watchtower.schemas import codec
from watchtower.schemas.catalog import CATALOG, SchemaKind


def build_command(
    command: str,
    body: Mapping[str, Any],
    *,
    signing_key: nacl.signing.SigningKey,
    nonce: int,
    request_id: str,
) -> dict[str, Any]:
    """A signed command record for `command` (caller is the signing key's address)."""
    version = codec.latest_version(command)
    caller = caller_address(signing_key)
    data = command_signing_bytes(
        command=command,
        schema_version=version,
        caller=caller,
        nonce=nonce,
        request_id=request_id,
        body=codec.encode_command_body(command, body, version=version),
    )
    return {
        "caller": caller,
        "nonce": nonce,
        "request_id": request_id,
        "signature": sign_command_bytes(data, signing_key),
        "body": dict(body),
    }


def encode_command(
    command: str,
    body: Mapping[str, Any],
    *,
    signing_key: nacl.signing.SigningKey,
    nonce: int,
    request_id: str,
) -> bytes:
    """`build_command`, framed for the commands topic."""
    return codec.encode(
        command, build_command(command, body, signing_key=signing_key, nonce=nonce, request_id=request_id)
    )


def verify_command(command: str, record: Mapping[str, Any], *, version: int | None = None) -> None:
    """Raise `InvalidSignatureError` unless the record's caller signed exactly this command.

    `version` is the schema version the record was decoded as (the latest after upcasting).
    """
    try:
        caller, nonce, request_id = record["caller"], record["nonce"], record["request_id"]
        signature, body = record["signature"], record["body"]
    except KeyError as exc:
        raise InvalidArgumentError(f"a command record needs field {exc.args[0]!r}") from None
    if not isinstance(body, Mapping):
        raise InvalidArgumentError("a command body must be a record")
    v = codec.latest_version(command) if version is None else version
    data = command_signing_bytes(
        command=command,
        schema_version=v,
        caller=caller,
        nonce=nonce,
        request_id=request_id,
        body=codec.encode_command_body(command, body, version=v),
    )
    if not isinstance(signature, bytes):
        raise InvalidSignatureError("the command signature must be bytes")
    verify_command_signature(caller=caller, signing_bytes=data, signature=signature)


def decode_command(data: bytes, *, expect: str | None = None) -> codec.Decoded:
    """Decode a framed command, verify its signature as written, then upcast it.

    The signature is checked against the version the client wrote (before any upcasting), so old
    clients keep working after a schema change. Raises `MalformedRecordError` / `SchemaMismatchError` from
    the codec, `SchemaMismatchError` for a record that is not a command, and `InvalidSignatureError`.
    """
    name, version = codec.read_header(data)
    if CATALOG[name].kind is not SchemaKind.COMMAND or (expect is not None and name != expect):
        raise SchemaMismatchError(f"expected {expect or 'a command'}, got a {name} record")
    raw = codec.decode_body(name, bytes(data[codec.HEADER_BYTES :]), version)
    verify_command(name, raw, version=version)
    return codec.Decoded(name, version, codec.upcast(name, version, raw))
