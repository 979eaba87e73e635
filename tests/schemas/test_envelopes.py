"""The JSON envelopes: the encoders write exactly their definitions, and decoding keeps its codes."""

from __future__ import annotations

import json

import msgspec
import nacl.signing
import pytest

from watchtower.protocol.errors import (
    InvalidArgumentError,
    MalformedRecordError,
    SchemaMismatchError,
    StreamNotFoundError,
)
from watchtower.protocol.ledger.common import Origin, ReplayFinished
from watchtower.protocol.signed_command import sign_command
from watchtower.schemas.envelopes import CommandRecord, ErrorJson, ReplyRecord, SignedCommandJson
from watchtower.schemas.wire import (
    RegistryForward,
    decode_command,
    decode_reply,
    encode_command,
    encode_registry_forward,
    encode_replay_finished,
    encode_reply,
)

KEY = nacl.signing.SigningKey(b"\x05" * 32)
CREATE = sign_command(KEY, "create_stream", "s-1", 7, {"publisher_key": bytes(KEY.verify_key),
                                                        "feed": {"name": "n", "description": "d"}})


def fields(struct: type[msgspec.Struct]) -> set[str]:
    return set(struct.__struct_fields__)


def test_signed_command_json_is_command_to_dict_field_for_field() -> None:
    assert fields(SignedCommandJson) == set(CREATE.to_dict())


def test_commands_and_forwards_hold_exactly_their_envelope() -> None:
    command = json.loads(encode_command(CREATE))
    assert set(command) == {"v", "command"} <= fields(CommandRecord)
    assert command["command"] == CREATE.to_dict()
    forward = json.loads(encode_registry_forward(CREATE))
    assert set(forward) == {"v", "register_feed"}
    assert decode_command(encode_command(CREATE)) == CREATE
    assert decode_command(encode_registry_forward(CREATE)) == RegistryForward(CREATE)


def test_the_replay_workers_finish_is_a_tagged_forward_and_decodes_to_itself() -> None:
    origin = Origin.of(CREATE)
    finished = ReplayFinished(42, "s-1", origin.caller, "errored", origin)
    record = json.loads(encode_replay_finished(finished))
    assert record == {"v": 1, "keymgr": {"kind": "replay_finished", "replay_id": 42, "stream_id": "s-1",
                                         "requester": origin.caller, "outcome": "errored",
                                         "origin": {"caller": origin.caller, "nonce": 7,
                                                    "digest_hex": origin.digest.hex()}}}
    assert decode_command(encode_replay_finished(finished)) == finished
    bad = dict(record, keymgr=dict(record["keymgr"], outcome="done"))
    with pytest.raises(InvalidArgumentError, match="outcome"):
        decode_command(json.dumps(bad).encode())


def test_replies_hold_exactly_their_envelope() -> None:
    ok = encode_reply(True, result={"head_sequence": 3})
    assert set(json.loads(ok)) == {"v", "ok", "result"} <= fields(ReplyRecord)
    assert decode_reply(ok) == {"v": 1, "ok": True, "result": {"head_sequence": 3}}
    refused = encode_reply(False, error=StreamNotFoundError("stream s-9 does not exist; create it first"))
    error = json.loads(refused)["error"]
    assert set(error) <= fields(ErrorJson)
    assert decode_reply(refused)["error"] == {"code": "STREAM_NOT_FOUND",
                                              "message": "stream s-9 does not exist; create it first"}


BOTH = json.dumps({"v": 1, "command": CREATE.to_dict(), "register_feed": CREATE.to_dict()}).encode()


@pytest.mark.parametrize("value", [None, b"", b"\xff\xfe", b"[1]", b'{"v": 1}', b'{"v": 1, "colour": 2}', BOTH])
def test_a_command_record_that_is_not_an_envelope_is_malformed(value: bytes | None) -> None:
    with pytest.raises(MalformedRecordError):
        decode_command(value)


@pytest.mark.parametrize("version", [2, "1", True, None])
def test_another_envelope_version_is_schema_mismatch(version: object) -> None:
    data = json.dumps({"v": version, "command": CREATE.to_dict()}).encode()
    with pytest.raises(SchemaMismatchError, match="version"):
        decode_command(data)
    with pytest.raises(SchemaMismatchError, match="version"):
        decode_reply(json.dumps({"v": version, "ok": True, "result": {}}).encode())


@pytest.mark.parametrize(("field", "value"), [("nonce", "7"), ("nonce", True), ("signature_hex", 5)])
def test_a_command_field_of_the_wrong_type_is_invalid_argument_naming_it(field: str, value: object) -> None:
    data = {"v": 1, "command": {**CREATE.to_dict(), field: value}}
    with pytest.raises(InvalidArgumentError, match=field):
        decode_command(json.dumps(data).encode())


def test_a_command_missing_a_field_is_invalid_argument_naming_it() -> None:
    data = CREATE.to_dict()
    del data["body"]
    with pytest.raises(InvalidArgumentError, match="body"):
        decode_command(json.dumps({"v": 1, "command": data}).encode())


@pytest.mark.parametrize("reply", [b'{"v": 1, "ok": false, "result": {}}', b'{"v": 1, "ok": true, "error": '
                                   b'{"code": "X", "message": "m"}}', b'{"v": 1}', b"[]"])
def test_a_reply_that_contradicts_itself_is_malformed(reply: bytes) -> None:
    with pytest.raises(MalformedRecordError):
        decode_reply(reply)


@pytest.mark.parametrize("prefix", [b"", b'{"v": 1, "command": {"body": {"a": '])
def test_deeply_nested_json_is_malformed(prefix: bytes) -> None:
    with pytest.raises(MalformedRecordError):
        decode_command(prefix + b"[" * 200_000 + b"]" * 200_000 + b"}}}"[: prefix.count(b"{")])
