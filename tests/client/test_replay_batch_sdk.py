"""`ReplayClient.register_many` without a broker: one signed register_replay per request, consecutive
nonces in request order, one POST to the batch route, and a ticket or the item's error for each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nacl.signing
import pytest

from watchtower.client.account import Account
from watchtower.client.replay import BATCH_PATH, ReplayClient, ReplayRequest, ReplayTicket
from watchtower.protocol.errors import GenericBatchError, ImproperConfigError, RequestTimeoutError
from watchtower.protocol.signed_command import Command, verify_command

BIG_ID = "1740308173478772655"


class FakeApi:
    timeout = 30.0

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.calls: list[dict[str, Any]] = []
        self.feeds: list[int] = []

    def feed(self, feed_id: int) -> dict[str, Any]:
        self.feeds.append(feed_id)
        return {"stream_id": f"s-feed{feed_id}"}

    def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        self.calls.append({"method": method, "path": path, **kw})
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def client(api: FakeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ReplayClient:
    replays = ReplayClient(Account(nacl.signing.SigningKey.generate(), home=tmp_path), api,  # type: ignore[arg-type]
                           "127.0.0.1:1", prefix="t")
    monkeypatch.setattr(replays, "_deliveries_end", lambda: 42)
    return replays


def ok(replay_id: str, sid: str = "s-feed12") -> dict[str, Any]:
    return {"ok": True, "result": {"replay_id": replay_id, "stream_id": sid, "first": 2, "end_exclusive": 6,
                                   "end_id": None, "price_cby": 0}}


def test_register_many_signs_one_command_each_with_consecutive_nonces_and_answers_per_item(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeApi({"results": [ok(BIG_ID), {"ok": False, "error": {"code": "IMPROPER_CONFIG", "message": "to < from"}},
                               {"ok": False, "error": {"code": "TIMEOUT", "message": "late"}}]})
    replays = client(api, tmp_path, monkeypatch)
    results = replays.register_many([ReplayRequest(12, 2, 6), ReplayRequest("12", 5, 3),
                                     ReplayRequest("s-other", 1, skip=[3, 1], memo=b"m")], timeout_s=9)
    [call] = api.calls
    assert (call["method"], call["path"], call["commands"]) == ("POST", BATCH_PATH, True)
    assert call["body"]["timeout_s"] == 9
    commands = [Command.from_dict(c) for c in call["body"]["commands"]]
    for cmd in commands:
        verify_command(cmd)
    assert {c.method for c in commands} == {"register_replay"}
    assert [c.nonce - commands[0].nonce for c in commands] == [0, 1, 2]
    assert [c.stream_id for c in commands] == ["s-feed12", "s-feed12", "s-other"]
    assert list(commands[2].body["config"]["skip"]) == [3, 1]
    assert commands[2].body["memo_hex"] == b"m".hex()
    assert api.feeds == [12]  # a feed id is looked up once per batch
    assert isinstance(results[0], ReplayTicket)
    assert (results[0].replay_id, results[0].deliveries_offset) == (int(BIG_ID), 42)
    assert isinstance(results[1], ImproperConfigError)
    assert isinstance(results[2], RequestTimeoutError)
    # The clock moved past the batch: the next command never reuses one of its nonces.
    assert replays.account.next_nonce() > commands[-1].nonce


def test_a_batch_refused_as_a_whole_raises_generic_batch_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeApi(GenericBatchError("the batch is empty"))
    with pytest.raises(GenericBatchError):
        client(api, tmp_path, monkeypatch).register_many([ReplayRequest("s-1", 1, 2)])


def test_an_answer_without_one_result_per_request_is_malformed(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeApi({"results": [ok("1")]})
    with pytest.raises(Exception, match="not one result each"):
        client(api, tmp_path, monkeypatch).register_many([ReplayRequest("s-1", 1, 2), ReplayRequest("s-1", 3, 4)])
