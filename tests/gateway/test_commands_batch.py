"""``POST /v1/commands/batch`` without a broker: the batch-level checks (`batch.parse_batch`), and the
route over a fake command client (answers in request order, one per item, a late item its own
TIMEOUT, commands produced in request order, nothing produced for a batch refused as a whole)."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import Future
from typing import Any

import nacl.signing
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from watchtower.gateway import batch
from watchtower.gateway.routes import BATCH_PATH, CommandGateway
from watchtower.http.openapi import OPENAPI
from watchtower.protocol.errors import (
    GenericBatchError,
    ImproperConfigError,
    InvalidArgumentError,
    UnauthorizedSubscriberError,
    WatchtowerError,
)
from watchtower.protocol.signed_command import Command, sign_command

ALICE = nacl.signing.SigningKey(b"\x01" * 32)
BOB = nacl.signing.SigningKey(b"\x02" * 32)
BIG_ID = 1740308173478772655  # past 2**53 - 1, as nearly every replay id


def reg(nonce: int, *, key: nacl.signing.SigningKey = ALICE, method: str = "register_replay",
        stream: str = "s-1") -> dict[str, Any]:
    body = {"namespace": stream, "from": 1, "to": 5, "config": {}, "memo_hex": ""} if method == "register_replay" \
        else {"replay_id": 7}
    return sign_command(key, method, stream, nonce, body).to_dict()


def refused(body: object) -> GenericBatchError:
    with pytest.raises(GenericBatchError) as info:
        batch.parse_batch(body)
    assert info.value.code == "GENERIC_BATCH_ERROR"
    assert info.value.message.endswith("nothing of the batch was sent")
    return info.value


# --- batch-level checks ----------------------------------------------------------------------------


def test_an_empty_batch_is_refused_as_a_whole() -> None:
    err = refused({"commands": []})
    assert err.details["reason"] == "empty"
    assert "send 1 to 100" in err.message


def test_more_than_the_maximum_is_refused_and_says_to_split() -> None:
    err = refused({"commands": [reg(n) for n in range(1, batch.MAX_BATCH_ITEMS + 2)]})
    assert err.details["reason"] == "too_many"
    assert "split it into batches of at most 100" in err.message
    commands, _ = batch.parse_batch({"commands": [reg(n) for n in range(1, batch.MAX_BATCH_ITEMS + 1)]})
    assert len(commands) == batch.MAX_BATCH_ITEMS  # the maximum itself is a batch


def test_a_command_that_is_not_a_replay_method_is_refused_and_sent_to_the_single_route() -> None:
    err = refused({"commands": [reg(1), reg(2, method="set_replay_price")]})
    assert (err.details["reason"], err.details["index"]) == ("not_register_replay", 1)
    assert "'set_replay_price'" in err.message
    assert "POST /v1/commands" in err.message


def test_a_batch_of_cancels_is_icrc77_cancel_replay_and_a_mixed_batch_is_refused() -> None:
    """ICRC-77 icrc77_cancel_replay takes a vector (failed before: a cancel batch was refused)."""
    commands, _ = batch.parse_batch({"commands": [reg(1, method="cancel_replay"), reg(2, method="cancel_replay")]})
    assert [c.method for c in commands] == ["cancel_replay", "cancel_replay"]
    err = refused({"commands": [reg(1), reg(2, method="cancel_replay")]})
    assert (err.details["reason"], err.details["index"]) == ("mixed_methods", 1)


def test_the_same_caller_and_nonce_twice_is_refused() -> None:
    err = refused({"commands": [reg(1), reg(2, stream="s-2"), reg(2, stream="s-3")]})
    assert (err.details["reason"], err.details["index"]) == ("duplicate_nonce", 2)
    assert "commands 1 and 2" in err.message
    # The same nonce from two callers is two different commands.
    commands, _ = batch.parse_batch({"commands": [reg(1), reg(1, key=BOB)]})
    assert [c.nonce for c in commands] == [1, 1]


def test_a_malformed_command_is_refused_naming_its_index() -> None:
    bad = {**reg(2), "signature_hex": "zz"}
    err = refused({"commands": [reg(1), bad]})
    assert (err.details["reason"], err.details["index"]) == ("malformed", 1)
    assert refused({"commands": [reg(1), "nope"]}).details["index"] == 1


@pytest.mark.parametrize("body", [[], "x", {"command": reg(1)}, {"commands": reg(1)},
                                  {"commands": [reg(1)], "timeout_s": 0}, {"commands": [reg(1)], "timeout_s": "5"}])
def test_a_body_that_is_not_a_batch_request_is_invalid_argument_as_on_the_single_route(body: object) -> None:
    with pytest.raises(InvalidArgumentError):
        batch.parse_batch(body)


def test_a_valid_batch_keeps_the_request_order_and_its_timeout() -> None:
    items = [reg(3, stream="s-b"), reg(1, stream="s-a"), reg(2, key=BOB)]
    commands, timeout = batch.parse_batch({"commands": items, "timeout_s": 7})
    assert [c.to_dict() for c in commands] == items
    assert timeout == 7.0


def test_the_documented_maximum_is_the_enforced_one() -> None:
    schema = OPENAPI["paths"][BATCH_PATH]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert schema["properties"]["commands"]["maxItems"] == batch.MAX_BATCH_ITEMS


# --- the route over a fake command client -----------------------------------------------------------


class FakeClient:
    """Answers by nonce: a result dict, a spec error, or None (never answers)."""

    def __init__(self, answers: dict[int, dict[str, Any] | WatchtowerError | None]) -> None:
        self.answers = answers
        self.sent: list[Command] = []

    def submit(self, cmd: Command) -> Future[dict[str, Any]]:
        self.sent.append(cmd)
        future: Future[dict[str, Any]] = Future()
        answer = self.answers[cmd.nonce]
        if isinstance(answer, WatchtowerError):
            future.set_exception(answer)
        elif answer is not None:
            future.set_result(answer)
        return future

    def close(self) -> None:
        pass


def post(fake: FakeClient, body: object) -> tuple[int, dict[str, Any]]:
    async def go() -> tuple[int, dict[str, Any]]:
        gateway = CommandGateway("127.0.0.1:1", prefix="t")
        gateway._client = fake  # type: ignore[assignment]
        app = web.Application()
        gateway.mount(app)
        async with TestClient(TestServer(app)) as client:
            resp = await client.post(BATCH_PATH, data=json.dumps(body))
            return resp.status, await resp.json()

    return asyncio.run(go())


def ticket(replay_id: int) -> dict[str, Any]:
    return {"replay_id": replay_id, "stream_id": "s-1", "first": 1, "end_exclusive": 5, "end_id": None,
            "price_cby": 0}


def test_each_item_answers_in_request_order_and_a_late_one_its_own_timeout() -> None:
    fake = FakeClient({1: ticket(BIG_ID), 2: ImproperConfigError("to 3 is before from 5"), 3: None,
                       4: UnauthorizedSubscriberError("not on the allowlist"), 5: ticket(12)})
    status, body = post(fake, {"commands": [reg(n) for n in range(1, 6)], "timeout_s": 0.2})
    assert status == 200
    results = body["results"]
    assert [r["ok"] for r in results] == [True, False, False, False, True]
    assert results[0]["result"]["replay_id"] == str(BIG_ID)  # a replay id is a decimal string
    assert results[4]["result"]["replay_id"] == "12"
    assert [r["error"]["code"] for r in results if not r["ok"]] == ["IMPROPER_CONFIG", "TIMEOUT",
                                                                    "UNAUTHORIZED_SUBSCRIBER"]
    # every refused item carries details: its ICRC-77 variant and its index (failed before: none)
    assert [(r["error"]["details"]["icrc77"], r["error"]["details"]["index"]) for r in results if not r["ok"]] == [
        ("ImproperConfig", 1), ("GenericError", 2), ("UnauthorizedSubscriber", 3)]
    assert "retry the same signed command" in results[2]["error"]["message"]
    assert [c.nonce for c in fake.sent] == [1, 2, 3, 4, 5]  # produced in request order


def test_a_batch_refused_as_a_whole_answers_a_vector_of_generic_batch_errors_and_produces_nothing() -> None:
    """ICRC-77: vec ReplayRegisterResult, each GenericBatchError (failed before: one error, no vector)."""
    fake = FakeClient({1: ticket(1), 2: ticket(2)})
    status, body = post(fake, {"commands": [reg(1), reg(2, method="set_replay_price")]})
    assert status == 400
    assert body["error"]["code"] == "GENERIC_BATCH_ERROR"  # the earlier answer, kept for its readers
    assert body["error"]["details"]["reason"] == "not_register_replay"
    assert [(r["ok"], r["error"]["code"], r["error"]["details"]["icrc77"]) for r in body["results"]] == [
        (False, "GENERIC_BATCH_ERROR", "GenericBatchError")] * 2
    assert fake.sent == []
    status, body = post(fake, {"commands": []})
    assert (status, body["error"]["code"]) == (400, "GENERIC_BATCH_ERROR")
    assert len(body["results"]) == 1
    status, body = post(fake, {"commands": [reg(1)], "timeout_s": 500})
    assert (status, body["error"]["code"]) == (400, "INVALID_ARGUMENT")
    assert fake.sent == []
