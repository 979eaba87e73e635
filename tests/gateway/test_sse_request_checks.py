"""The SSE route checks its request before it opens a stream: a malformed one is JSON INVALID_ARGUMENT.

Pure: every check runs before the route asks the API anything (the API here does not exist, so a
request that got past the checks would answer NOT_READY instead).
"""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp.test_utils import make_mocked_request

from watchtower.gateway.sse import SseHub

ALICE = "0x" + "ab" * 32


def answer(path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, object]]:
    async def go() -> tuple[int, dict[str, object]]:
        hub = SseHub("127.0.0.1:1", prefix="t", api_url="http://127.0.0.1:1")
        request = make_mocked_request("GET", path, headers=headers or {}, match_info={"feed_id": "1"})
        try:
            resp = await hub.handle(request)
        finally:
            await hub.api.close()
        return resp.status, json.loads(resp.text or "{}")  # type: ignore[attr-defined]

    return asyncio.run(go())


@pytest.mark.parametrize("subscriber", ["nonsense", "0x" + "AB" * 32, ALICE[:-2], ALICE + "00"])
def test_a_subscriber_that_is_not_an_address_is_invalid_argument(subscriber: str) -> None:
    """Failed before the fix: `subscriber=nonsense` went on to open a stream (200)."""
    status, body = answer(f"/v1/feeds/1/events?subscriber={subscriber}")
    assert (status, body["error"]["code"]) == (400, "INVALID_ARGUMENT"), body  # type: ignore[index]
    assert "subscriber" in body["error"]["message"]  # type: ignore[index]


@pytest.mark.parametrize("value", ["-0", " 5", "5 ", "\u00a05", "+5", "-1", "0x5", "5.0"])
def test_a_last_event_id_that_is_not_plain_digits_is_invalid_argument(value: str) -> None:
    """Failed before the fix for "-0", " 5", "5 " and NBSP 5 (stripped or read as 0)."""
    status, body = answer("/v1/feeds/1/events", {"Last-Event-ID": value})
    assert (status, body["error"]["code"]) == (400, "INVALID_ARGUMENT"), body  # type: ignore[index]
    assert "Last-Event-ID" in body["error"]["message"]  # type: ignore[index]


def test_a_well_formed_request_passes_the_checks_and_reaches_the_api() -> None:
    _, body = answer(f"/v1/feeds/1/events?subscriber={ALICE}", {"Last-Event-ID": "5"})
    assert body["error"]["code"] == "NOT_READY"  # type: ignore[index]  # the (absent) API, not a check


def test_a_filter_with_a_5000_digit_integer_is_invalid_filter() -> None:
    """Failed before the fix: ValueError from Python's int-digits limit escaped the route (a 500)."""
    status, body = answer('/v1/feeds/1/events?filter={"field":"sequence","op":"gte","value":' + "1" * 5_000 + "}")
    assert (status, body["error"]["code"]) == (400, "INVALID_FILTER"), body  # type: ignore[index]
    assert "5000 digits" in body["error"]["message"]  # type: ignore[index]
