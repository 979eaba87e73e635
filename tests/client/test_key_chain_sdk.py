"""The SDK trusts a key only after the key chain verifies from the owner's address (in memory).

`FakeApi` serves the key chain through the same JSON as the HTTP API; a subclass that edits that
JSON plays a compromised API. The same checks run against a real stack in test_forged_rotation.py.
"""

from __future__ import annotations

from typing import Any

import nacl.signing
import pytest
from click.testing import CliRunner

from watchtower.cli import feed_cmd
from watchtower.cli.main import _register, cli
from watchtower.client.fake import FakeApi
from watchtower.client.subscriber import Subscriber
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.errors import InvalidArgumentError, InvalidSignatureError, WatchtowerError
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.signing import sign_message

SID = "s-chain"
OWNER = nacl.signing.SigningKey(b"\x01" * 32)
OTHER_OWNER = nacl.signing.SigningKey(b"\x02" * 32)
ATTACKER = nacl.signing.SigningKey(b"\x66" * 32)
KEY_1 = nacl.signing.SigningKey(b"\x11" * 32)
KEY_2 = nacl.signing.SigningKey(b"\x12" * 32)


def address(key: nacl.signing.SigningKey) -> str:
    return address_from_public_key(bytes(key.verify_key))


def stream(api: FakeApi, owner: nacl.signing.SigningKey = OWNER, publishes: int = 2) -> FakeApi:
    api.command(sign_command(owner, "create_stream", SID, 1, {"publisher_key_hex": bytes(KEY_1.verify_key).hex()}))
    for seq in range(1, publishes + 1):
        msg = sign_message(stream_id=SID, sequence=seq, timestamp_unix_ms=seq, kind="t", payload=b"{}",
                           signing_key=KEY_1)
        api.command(sign_command(owner, "publish", SID, 1 + seq, msg.to_json_dict()))
    return api


class ForgingApi(FakeApi):
    """Serves the attacker's key as key 2 (with the attacker's own signed rotation) and its message at 3."""

    def key_history(self, stream_id: str, from_signing_key_id: int = 1, limit: int = 100) -> dict[str, Any]:
        page = super().key_history(stream_id, from_signing_key_id, limit)
        rotate = sign_command(ATTACKER, "rotate_publisher_key", SID, 1, {"new_key": bytes(ATTACKER.verify_key)})
        forged = {"signing_key_id": 2, "publisher_key": bytes(ATTACKER.verify_key).hex(), "effective_sequence": 3,
                  "command": rotate.to_dict()}
        return {"entries": [*page["entries"], forged], "next_from": None}

    def get_since(self, stream_id: str, cursor: int = 0, limit: int = 100, **kw: Any) -> dict[str, Any]:
        page = super().get_since(stream_id, cursor, limit, **kw)
        msg = sign_message(stream_id=SID, sequence=3, timestamp_unix_ms=3, kind="t", payload=b'{"pwned":1}',
                           signing_key=ATTACKER, signing_key_id=2)
        return {**page, "messages": [*page["messages"], msg.to_json_dict()], "head_sequence": 3, "head": 3,
                "next_cursor": 3}


def test_a_genuine_chain_verifies_and_pins_its_owner() -> None:
    api = stream(FakeApi())
    api.command(sign_command(OWNER, "rotate_publisher_key", SID, 9, {"new_key": bytes(KEY_2.verify_key)}))
    subscriber = Subscriber(api, SID)
    assert subscriber.owner is None
    schedule = subscriber.key_schedule()
    assert [e.public_key for e in schedule.entries] == [bytes(KEY_1.verify_key), bytes(KEY_2.verify_key)]
    assert subscriber.owner == address(OWNER)
    assert [m.sequence for m in subscriber.poll_page(10).messages] == [1, 2]


def test_a_forged_key_served_by_the_api_is_refused_naming_it() -> None:
    subscriber = Subscriber(stream(ForgingApi()), SID, 2)
    with pytest.raises(InvalidSignatureError, match=f"0x{bytes(ATTACKER.verify_key).hex()}"):
        subscriber.poll_page(10)
    assert subscriber.cursor == 2


def test_a_later_chain_of_another_owner_is_refused() -> None:
    subscriber = Subscriber(stream(FakeApi()), SID)
    subscriber.key_schedule()
    subscriber.api = stream(FakeApi(), owner=OTHER_OWNER)  # the same stream id, created by someone else
    with pytest.raises(InvalidSignatureError, match="not by the expected owner"):
        subscriber.key_schedule(refresh=True)
    with pytest.raises(InvalidSignatureError, match="not by the expected owner"):
        Subscriber(stream(FakeApi(), owner=OTHER_OWNER), SID, expected_owner=address(OWNER)).key_schedule()


def test_expected_owner_must_be_an_address() -> None:
    with pytest.raises(InvalidArgumentError):
        Subscriber(FakeApi(), SID, expected_owner="alice")


def test_get_since_exits_non_zero_when_the_chain_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    _register()
    forging = stream(ForgingApi())
    monkeypatch.setattr(feed_cmd, "ApiClient", lambda _url=None: forging)
    result = CliRunner().invoke(cli, ["feed", SID, "get-since", "--cursor", "3", "--json"])
    assert result.exit_code != 0
    assert isinstance(result.exception, WatchtowerError)
    assert result.exception.code == "INVALID_SIGNATURE"  # refused even though the page past 3 is empty
    honest = stream(FakeApi())
    monkeypatch.setattr(feed_cmd, "ApiClient", lambda _url=None: honest)
    refused = CliRunner().invoke(cli, ["feed", SID, "get-since", "--cursor", "0", "--owner", address(ATTACKER)])
    assert refused.exit_code != 0
    assert isinstance(refused.exception, InvalidSignatureError)
    ok = CliRunner().invoke(cli, ["feed", SID, "get-since", "--cursor", "0", "--json", "--owner", address(OWNER)])
    assert ok.exit_code == 0, ok.output
