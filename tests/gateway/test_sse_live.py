"""``GET /v1/feeds/{id}/events`` on a real stack: live events, resume, heartbeats, filters, errors.

Both servers of the route are exercised: the standalone gateway (``gateway-g1``, reading the
API over HTTP for catch-up) and the API itself (the projection worker's HTTP server).
"""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path

import pytest
from sse_reader import SseClient
from sse_stack import Feed
from waiting import wait_until

from watchtower.local.stack import ServiceSet
from watchtower.protocol.signing import verify_message
from watchtower.protocol.stream.message import StreamMessage

pytestmark = pytest.mark.integration

SERVERS = ("gateway", "api")


def base(services: ServiceSet, server: str) -> str:
    return services.urls["gateway-g1"] if server == "gateway" else services.api_url


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sse-home")


def events_path(feed: Feed, **query: str) -> str:
    return f"/v1/feeds/{feed.feed_id}/events" + (f"?{urllib.parse.urlencode(query)}" if query else "")


@pytest.mark.parametrize("server", SERVERS)
def test_live_events_arrive_in_order_as_signed_messages(sse_stack: ServiceSet, home: Path, server: str) -> None:
    feed = Feed(sse_stack, home)
    feed.publish(2)  # before the connection: a live stream starts after them
    with SseClient(base(sse_stack, server), events_path(feed)) as client:
        assert client.status == 200
        assert client.content_type.startswith("text/event-stream")
        feed.publish(5)
        events = client.messages(5)
    assert [e.id for e in events] == ["3", "4", "5", "6", "7"]
    for e in events:
        data = e.json()
        assert (data["feed_id"], data["stream_id"], data["sequence"]) == (feed.feed_id, feed.stream_id, int(e.id))
        msg = StreamMessage.from_json_dict(data["message"])
        assert msg.sequence == data["sequence"]
        assert json.loads(msg.payload_inline) == {"i": msg.sequence}
        assert verify_message(msg, feed.public_key)
        assert "\n" not in e.data  # one line of JSON


@pytest.mark.parametrize("server", SERVERS)
def test_last_event_id_resume_sends_exactly_the_missing_sequences_once(sse_stack: ServiceSet, home: Path,
                                                                        server: str) -> None:
    feed = Feed(sse_stack, home)
    feed.publish(620)  # more than one get_since page (500) behind the resume point
    with SseClient(base(sse_stack, server), events_path(feed, cursor="600"),
                   headers={"Last-Event-ID": "7"}) as client:  # the header wins over cursor
        assert client.status == 200
        caught_up = client.messages(620 - 7)
        feed.publish(3)
        live = client.messages(3)
    assert [int(e.id) for e in caught_up + live] == list(range(8, 624))
    with SseClient(base(sse_stack, server), events_path(feed, cursor="621")) as client:
        assert [int(e.id) for e in client.messages(2)] == [622, 623]


def test_heartbeats_arrive_on_an_idle_connection(sse_stack: ServiceSet, home: Path) -> None:
    feed = Feed(sse_stack, home)
    for server in SERVERS:
        with SseClient(base(sse_stack, server), events_path(feed, heartbeat_s="1"), timeout=30) as client:
            comments = []
            for ev in client.events():
                assert ev.comment is not None, f"an idle feed sent an event: {ev}"
                comments.append(ev.comment)
                if len(comments) == 2:
                    break
        assert comments == ["ping", "ping"]


def test_a_filter_streams_only_matching_messages_live_and_on_resume(sse_stack: ServiceSet, home: Path) -> None:
    feed = Feed(sse_stack, home)
    btc = json.dumps({"field": "tags.symbol", "op": "eq", "value": "BTC"})
    feed.publish(1, symbol="BTC")
    feed.publish(1, symbol="ETH")
    with SseClient(base(sse_stack, "gateway"), events_path(feed, filter=btc, cursor="0")) as client:
        first = client.messages(1)
        for symbol in ("ETH", "BTC", "ETH", "ETH", "BTC"):
            feed.publish(1, symbol=symbol)
        rest = client.messages(2)
    assert [int(e.id) for e in first + rest] == [1, 4, 7]
    assert {e.json()["message"]["tags"]["symbol"] for e in first + rest} == {"BTC"}


@pytest.mark.parametrize("server", SERVERS)
def test_refusals_before_the_stream_carry_spec_codes(sse_stack: ServiceSet, home: Path, server: str) -> None:
    feed = Feed(sse_stack, home)
    small = Feed(sse_stack, home, name="small", ring_buffer_capacity=5)
    small.publish(12)
    url = base(sse_stack, server)
    cases = [
        (f"/v1/feeds/{10**9}/events", {}, 404, "FEED_NOT_FOUND"),
        ("/v1/feeds/zero/events", {}, 400, "INVALID_ARGUMENT"),
        (events_path(feed, filter="{not json"), {}, 400, "INVALID_FILTER"),
        (events_path(feed, filter=json.dumps({"field": "tags.x", "op": "near", "value": 1})), {}, 400,
         "INVALID_FILTER"),
        (events_path(feed, cursor="abc"), {}, 400, "INVALID_ARGUMENT"),
        (events_path(feed), {"Last-Event-ID": "-3"}, 400, "INVALID_ARGUMENT"),
        (events_path(feed, subscriber="0x" + "a" * 64, filter=json.dumps({"field": "kind", "op": "eq",
                                                                          "value": "t"})), {}, 400,
         "INVALID_ARGUMENT"),
        (events_path(feed, heartbeat_s="0"), {}, 400, "INVALID_ARGUMENT"),
        (events_path(small, cursor="0"), {}, 410, "CURSOR_TOO_OLD"),
    ]
    for path, headers, status, code in cases:
        with SseClient(url, path, headers=headers) as client:
            assert (client.status, client.error["error"]["code"]) == (status, code), path
            assert client.error["error"]["message"], path


def gateway_sse_stats(services: ServiceSet) -> dict[str, int]:
    import urllib.request
    with urllib.request.urlopen(services.urls["gateway-g1"] + "/v1/health", timeout=30) as resp:  # noqa: S310
        return dict(json.loads(resp.read())["sse"])


def wait_connections(services: ServiceSet, n: int) -> None:
    wait_until(f"the gateway to get to {n} open connections",
               lambda: gateway_sse_stats(services)["connections"] == n, timeout_s=60, every_s=0.1)


def test_past_the_connection_cap_a_request_gets_limit_exceeded(sse_stack: ServiceSet, home: Path) -> None:
    feed = Feed(sse_stack, home)
    url = base(sse_stack, "gateway")
    wait_connections(sse_stack, 0)
    cap = gateway_sse_stats(sse_stack)["max_connections"]
    open_ = [SseClient(url, events_path(feed)) for _ in range(cap)]
    try:
        assert [c.status for c in open_] == [200] * cap
        with SseClient(url, events_path(feed)) as refused:
            assert refused.status == 503
            assert refused.error["error"]["code"] == "LIMIT_EXCEEDED"
            assert "retry later" in refused.error["error"]["message"]
    finally:
        for c in open_:
            c.close()
    wait_connections(sse_stack, 0)  # closed connections give their slots back
    with SseClient(url, events_path(feed)) as again:
        assert again.status == 200
