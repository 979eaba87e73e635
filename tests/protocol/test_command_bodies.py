"""A command body is read once, into typed values: each field's reader refuses what a signer may
send in its place with the error the client is told, and a field is either read that way or left
(`Any`) to the rule that reads it."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from typing import Any

import pytest

from watchtower.protocol import commands
from watchtower.protocol.commands import (
    ABSENT,
    ActorAuthorization,
    CancelReplay,
    EpochKeys,
    RegisterAccountKey,
    RenewSubscription,
    ReportIngestFailure,
    RevokeAccountKey,
    SetSubscriptionPolicy,
    StreamEncrypt,
    Subscribe,
    TransferCby,
    peek_body,
    read_body,
)
from watchtower.protocol.enums import SubscriptionPolicy
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.signed_command import Command, sign_command

SEED = b"\x07" * 32
ADDRESS = "0x" + "ab" * 32


def command(body: dict[str, Any], method: str = "transfer_cby") -> Command:
    return sign_command(SEED, method, "s-1", 1, body)


def body_classes() -> list[type]:
    return [cls for _name, cls in inspect.getmembers(commands, inspect.isclass)
            if dataclasses.is_dataclass(cls) and cls.__module__ == commands.__name__]


@pytest.mark.parametrize("cls", body_classes(), ids=lambda cls: cls.__name__)
def test_every_field_is_read_by_its_reader_or_left_to_its_rule(cls: type) -> None:
    hints = typing.get_type_hints(cls, include_extras=True)
    for field in dataclasses.fields(cls):
        hint = hints[field.name]
        if typing.get_origin(hint) is typing.Annotated:
            assert callable(hint.__metadata__[0]), f"{cls.__name__}.{field.name}"
        else:
            assert hint is Any, f"{cls.__name__}.{field.name} is typed {hint} but nothing reads it"


def test_a_body_reads_into_typed_values() -> None:
    transfer = read_body(command({"to": ADDRESS, "amount_cby": 5}), TransferCby)
    assert (transfer.to, transfer.amount_cby, transfer.memo) == (ADDRESS, 5, "")
    policy = read_body(command({"policy": "PUBLIC"}), SetSubscriptionPolicy).policy
    assert policy is SubscriptionPolicy.PUBLIC
    keys = read_body(command({"account": ADDRESS, "from_key_epoch": 1, "to_key_epoch": 2, "account_key_id": None}),
                     EpochKeys)
    assert keys.account_key_id is None
    assert read_body(command({"actor": ADDRESS, "all_streams": True}), ActorAuthorization).stream_id is ABSENT


HOSTILE = [
    (TransferCby, {"to": "0xAB", "amount_cby": 5}, "INVALID_ARGUMENT", "to must be an address"),
    (TransferCby, {"to": ADDRESS, "amount_cby": True}, "INVALID_ARGUMENT", "amount_cby must be a whole number"),
    (TransferCby, {"to": ADDRESS, "amount_cby": 0}, "INVALID_ARGUMENT", "amount_cby must be a whole number"),
    (TransferCby, {"to": ADDRESS, "amount_cby": 2**63}, "INVALID_ARGUMENT", "amount_cby must be a whole number"),
    (TransferCby, {"to": ADDRESS, "amount_cby": 1, "memo": 7}, "INVALID_ARGUMENT", "memo must be text"),
    (TransferCby, {"to": ADDRESS, "amount_cby": 1, "memo": "m" * 257}, "INVALID_ARGUMENT", "memo must be text"),
    (RegisterAccountKey, {"scheme": "RSA", "public_key": b"\x09" * 32}, "INVALID_ACCOUNT_KEY", "scheme must be"),
    (RegisterAccountKey, {"scheme": "X25519", "public_key": "09" * 32}, "INVALID_ACCOUNT_KEY", "public_key must be"),
    (RevokeAccountKey, {"account_key_id": True}, "INVALID_ARGUMENT", "account_key_id must be a positive integer"),
    (RevokeAccountKey, {"account_key_id": 0}, "INVALID_ARGUMENT", "account_key_id must be a positive integer"),
    (ActorAuthorization, {"actor": ADDRESS, "all_streams": "yes"}, "INVALID_ARGUMENT", "all_streams must be true"),
    (ActorAuthorization, {"actor": ADDRESS, "stream_id": ""}, "INVALID_ARGUMENT", "stream_id must not be empty"),
    (RenewSubscription, {"target_key_epoch": -1}, "INVALID_ARGUMENT", "target_key_epoch must be in"),
    (CancelReplay, {"replay_id": 0}, "INVALID_ARGUMENT", "replay_id must be in"),
    (Subscribe, {"mode": "EMAIL"}, "INVALID_ARGUMENT", "mode must be PUSH, PULL or PUSH_WITH_PULL_FALLBACK"),
    (SetSubscriptionPolicy, {"policy": "OPEN"}, "INVALID_ARGUMENT", "policy must be PUBLIC or PRIVATE_ALLOWLIST"),
    (EpochKeys, {"account": ADDRESS, "from_key_epoch": 1, "to_key_epoch": "2"}, "INVALID_ARGUMENT",
     "to_key_epoch must be an integer"),
    (StreamEncrypt, {"key_epoch": 1, "aad": "text", "plaintext": b""}, "INVALID_ARGUMENT", "aad must be bytes"),
    (ReportIngestFailure, {"reason": "SOURCE_TIMEOUT", "timestamp_unix_ms": 2**53, "first_tick": 1, "last_tick": 1,
                           "detail": ""}, "INVALID_ARGUMENT", "timestamp_unix_ms must be in"),
]


@pytest.mark.parametrize(("cls", "body", "code", "message"), HOSTILE,
                         ids=[f"{c.__name__}-{i}" for i, (c, *_rest) in enumerate(HOSTILE)])
def test_a_hostile_value_is_refused_with_the_clients_error(cls: type, body: dict[str, Any], code: str,
                                                           message: str) -> None:
    with pytest.raises(WatchtowerError) as err:
        read_body(command(body), cls)
    assert err.value.code == code
    assert message in err.value.message


def test_peek_body_reads_only_classes_its_rules_read() -> None:
    with pytest.raises(TypeError):
        peek_body(command({"to": ADDRESS, "amount_cby": 5}), TransferCby)
