"""SDK logic that needs no server: Publisher signing and head tracking, Subscriber verification,
deduplication and cursors, create_feed's body, and how ApiClient maps HTTP answers to errors.

`InProcessApi` answers the SDK's four calls from the pure StreamActor aggregate (decide/evolve and
its read views), so every command the SDK signs is checked by the same rules the worker runs. The
ApiClient tests talk real HTTP to a tiny stdlib server.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import socket
import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import nacl.signing
import pytest

from watchtower.client.account import Account
from watchtower.client.fake import FakeApi
from watchtower.client.http import ApiClient, ApiUnavailableError
from watchtower.client.sdk import Publisher, create_feed, new_stream_id
from watchtower.client.subscriber import Subscriber
from watchtower.protocol.errors import (
    CursorTooOldError,
    FeedNotFoundError,
    StaleSequenceError,
    WatchtowerError,
)
from watchtower.protocol.signed_command import Command
from watchtower.protocol.signing import verify_with_schedule
from watchtower.protocol.stream import actor as stream_actor
from watchtower.protocol.stream.filters import compile_filter, parse_filter
from watchtower.protocol.stream.key_schedule import KeySchedule
from watchtower.protocol.stream.message import StreamMessage


class InProcessApi(FakeApi):
    """The supported fake (`FakeApi`), with counters and knobs that make it a hostile server."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()
        self.commands: list[Command] = []
        self.tamper: dict[int, dict[str, Any]] = {}  # sequence -> fields to overwrite on read
        self.repeat_last = False  # answer each page with its last message twice
        self.drop: set[int] = set()  # sequences left out of every page (a server hiding a message)
        self.serve_instead: dict[int, int] = {}  # sequence -> the older sequence served in its place
        self.swap_first_two = False  # answer each page with its first two messages swapped
        self.long_polls: list[tuple[int | None, int | None]] = []  # (min_head, wait_ms) of each get_since
        self.timeouts: list[float] = []

    @property
    def log(self) -> dict[str, list[dict[str, Any]]]:
        """Every stored message's JSON, in sequence order, per stream."""
        return {sid: [m.to_json_dict() for _, m in sorted(msgs.items())] for sid, msgs in self.messages.items()}

    def command(self, cmd: Command, *, timeout_s: float = 30.0) -> dict[str, Any]:
        self.calls["command"] += 1
        self.commands.append(cmd)
        self.timeouts.append(timeout_s)
        return super().command(cmd, timeout_s=timeout_s)

    def get_head(self, stream_id: str) -> dict[str, Any]:
        self.calls["get_head"] += 1
        return stream_actor.get_head(self.states[stream_id])

    def get_since(
        self,
        stream_id: str,
        cursor: int = 0,
        limit: int = 100,
        *,
        filter: Mapping[str, Any] | None = None,
        min_head: int | None = None,
        wait_ms: int | None = None,
    ) -> dict[str, Any]:
        self.calls["get_since"] += 1
        self.long_polls.append((min_head, wait_ms))
        state = self.states[stream_id]
        window = stream_actor.get_since_range(state, cursor, limit)
        test = compile_filter(parse_filter(filter))
        page = []
        log = self.log.get(stream_id, [])
        for raw in log:
            if raw["sequence"] in window and test(StreamMessage.from_json_dict(raw).headers()):
                if raw["sequence"] in self.drop:
                    continue
                served = log[self.serve_instead[raw["sequence"]] - 1] if raw["sequence"] in self.serve_instead else raw
                page.append({**served, **self.tamper.get(raw["sequence"], {})})
        if self.repeat_last and page:
            page.append(page[-1])
        if self.swap_first_two and len(page) >= 2:
            page[0], page[1] = page[1], page[0]
        next_cursor = window[-1] if window else cursor
        return {"stream_id": stream_id, "messages": page, "head_sequence": state.head,
                "floor_sequence": state.floor, "next_cursor": next_cursor}

    def key_schedule(self, stream_id: str) -> KeySchedule:
        self.calls["key_schedule"] += 1
        schedule = self.states[stream_id].key_schedule
        assert schedule is not None
        return schedule


@pytest.fixture
def owner(tmp_path: Any) -> Account:
    return Account(nacl.signing.SigningKey.generate(), name="owner", home=tmp_path)


@pytest.fixture
def publisher_key() -> nacl.signing.SigningKey:
    return nacl.signing.SigningKey.generate()


@pytest.fixture
def api(owner: Account, publisher_key: nacl.signing.SigningKey) -> InProcessApi:
    fake = InProcessApi()
    fake.command(owner.sign("create_stream", "s-test", {"publisher_key_hex": bytes(publisher_key.verify_key).hex(),
                                                        "ring_buffer_capacity": 5}))
    return fake


def publish_n(publisher: Publisher, n: int, **tags: Any) -> list[dict[str, Any]]:
    return [publisher.publish("tick", json.dumps({"i": i}).encode(), {"i": i, **tags}) for i in range(n)]


# --- Publisher -----------------------------------------------------------------------------------


def test_publisher_reads_the_head_once_then_tracks_it(api: InProcessApi, owner: Account,
                                                       publisher_key: nacl.signing.SigningKey) -> None:
    publisher = Publisher(api, owner, "s-test", publisher_key)
    replies = publish_n(publisher, 3)
    assert [r["sequence"] for r in replies] == [1, 2, 3]
    assert publisher.head == 3
    assert api.calls["get_head"] == 1
    schedule = api.key_schedule("s-test")
    assert all(verify_with_schedule(StreamMessage.from_json_dict(m), schedule) for m in api.log["s-test"])


def test_stale_sequence_refreshes_the_head_and_is_not_renumbered(api: InProcessApi, owner: Account,
                                                                  publisher_key: nacl.signing.SigningKey) -> None:
    mine = Publisher(api, owner, "s-test", publisher_key)
    other = Publisher(api, owner, "s-test", publisher_key)
    mine.publish("tick", b"{}")
    publish_n(other, 2)  # the stream moves on behind `mine`'s back
    with pytest.raises(StaleSequenceError):
        mine.publish("tick", b'{"lost": true}')
    assert mine.head == 3
    assert len(api.log["s-test"]) == 3  # the stale publish stored nothing
    assert mine.publish("tick", b'{"again": true}')["sequence"] == 4


def test_publisher_refuses_early_when_not_owner_or_not_current_key(api: InProcessApi, owner: Account,
                                                                    publisher_key: nacl.signing.SigningKey) -> None:
    stranger = Account(nacl.signing.SigningKey.generate())
    with pytest.raises(WatchtowerError) as not_owner:
        Publisher(api, stranger, "s-test", publisher_key).publish("tick", b"{}")
    assert not_owner.value.code == "UNAUTHORIZED"
    with pytest.raises(WatchtowerError) as wrong_key:
        Publisher(api, owner, "s-test", nacl.signing.SigningKey.generate()).publish("tick", b"{}")
    assert wrong_key.value.code == "INVALID_SIGNATURE"
    assert "key 1" in wrong_key.value.message
    assert api.calls["command"] == 1  # only the creation: nothing was sent


def test_rotate_key_signs_later_messages_with_the_new_key(api: InProcessApi, owner: Account,
                                                          publisher_key: nacl.signing.SigningKey) -> None:
    publisher = Publisher(api, owner, "s-test", publisher_key)
    publish_n(publisher, 2)
    new_key = nacl.signing.SigningKey.generate()
    reply = publisher.rotate_key(new_key)
    assert (reply["signing_key_id"], reply["effective_sequence"]) == (2, 3)
    assert publisher.publish("tick", b"{}")["sequence"] == 3
    third = StreamMessage.from_json_dict(api.log["s-test"][2])
    assert third.signing_key_id == 2
    assert verify_with_schedule(third, api.key_schedule("s-test"))


def test_publisher_sends_a_signed_plaintext_message_with_tags(api: InProcessApi, owner: Account,
                                                              publisher_key: nacl.signing.SigningKey) -> None:
    Publisher(api, owner, "s-test", publisher_key).publish("quote", b'{"p": 1}', {"sym": "BTC", "live": True},
                                                            content_type="application/json")
    cmd = api.commands[-1]
    assert (cmd.method, cmd.caller) == ("publish", owner.address)
    msg = StreamMessage.from_json_dict(cmd.body)
    assert (msg.sequence, msg.kind, dict(msg.tags)) == (1, "quote", {"sym": "BTC", "live": True})


# --- Subscriber ----------------------------------------------------------------------------------


@pytest.fixture
def published(api: InProcessApi, owner: Account, publisher_key: nacl.signing.SigningKey) -> Publisher:
    publisher = Publisher(api, owner, "s-test", publisher_key)
    publish_n(publisher, 4, sym="BTC")
    return publisher


def test_subscriber_pages_verify_and_advance_the_cursor(api: InProcessApi, published: Publisher) -> None:
    sub = Subscriber(api, "s-test")
    assert [m.sequence for m in sub.poll(3)] == [1, 2, 3]
    assert sub.cursor == 3
    assert [m.sequence for m in sub.poll(3)] == [4]
    assert sub.poll(3) == []
    assert sub.cursor == 4
    assert api.calls["key_schedule"] == 1


def test_subscriber_rejects_a_tampered_message_and_keeps_its_cursor(api: InProcessApi, published: Publisher) -> None:
    api.tamper[2] = {"payload_inline_hex": b'{"i": 99}'.hex()}
    sub = Subscriber(api, "s-test")
    with pytest.raises(WatchtowerError) as info:
        sub.poll(10)
    assert info.value.code == "INVALID_SIGNATURE"
    assert "s-test#2" in info.value.message
    assert sub.cursor == 0


def test_subscriber_rejects_a_consistently_rehashed_forgery(api: InProcessApi, published: Publisher) -> None:
    payload = b'{"i": 1000}'
    api.tamper[1] = {"payload_inline_hex": payload.hex(), "payload_hash_hex": hashlib.sha256(payload).hexdigest()}
    with pytest.raises(WatchtowerError) as info:
        Subscriber(api, "s-test").poll(1)
    assert info.value.code == "INVALID_SIGNATURE"


def test_subscriber_rejects_a_message_of_another_stream(api: InProcessApi, published: Publisher) -> None:
    api.tamper[1] = {"stream_id": "s-other"}
    with pytest.raises(WatchtowerError) as info:
        Subscriber(api, "s-test").poll(1)
    assert info.value.code == "INVALID_SIGNATURE"


def test_subscriber_deduplicates_by_sequence(api: InProcessApi, published: Publisher) -> None:
    api.repeat_last = True
    sub = Subscriber(api, "s-test")
    assert [m.sequence for m in sub.poll(2)] == [1, 2]
    assert [m.sequence for m in sub.poll(2)] == [3, 4]


@pytest.mark.parametrize(
    ("fault", "what"),
    [
        ("drop", "a genuine message left out of an unfiltered page"),
        ("serve_instead", "a valid older message served under the next sequence's place"),
        ("swap_first_two", "two messages swapped"),
    ],
)
def test_a_page_that_is_not_the_sequences_it_claims_is_refused_and_not_delivered(
    api: InProcessApi, published: Publisher, fault: str, what: str
) -> None:
    sub = Subscriber(api, "s-test")
    assert [m.sequence for m in sub.poll(1)] == [1]
    if fault == "drop":
        api.drop = {3}
    elif fault == "serve_instead":
        api.serve_instead = {3: 1}
    else:
        api.swap_first_two = True
    with pytest.raises(WatchtowerError) as info:
        sub.poll(10)
    assert info.value.code == "MALFORMED_RECORD", what
    assert "not the page it claims" in info.value.message
    # Nothing of the bad page was delivered: the cursor did not move, and a healthy server resumes it.
    assert sub.cursor == 1
    api.drop, api.serve_instead, api.swap_first_two = set(), {}, False
    assert [m.sequence for m in sub.poll(10)] == [2, 3, 4]


def test_a_page_claiming_a_next_cursor_past_its_messages_is_refused(api: InProcessApi, published: Publisher) -> None:
    sub = Subscriber(api, "s-test")
    api.drop = {4}  # the last message withheld while next_cursor still claims 4
    with pytest.raises(WatchtowerError) as info:
        sub.poll(10)
    assert info.value.code == "MALFORMED_RECORD"
    assert info.value.details["next_cursor"] == 4
    assert sub.cursor == 0


def test_a_filtered_page_may_skip_sequences_but_not_reorder_them(api: InProcessApi, published: Publisher) -> None:
    odd = {"field": "tags.i", "op": "in", "value": [1, 3]}
    api.swap_first_two = True
    with pytest.raises(WatchtowerError) as info:
        Subscriber(api, "s-test", filter=odd).poll(10)
    assert info.value.code == "MALFORMED_RECORD"
    api.swap_first_two = False
    assert [m.sequence for m in Subscriber(api, "s-test", filter=odd).poll(10)] == [2, 4]


def test_subscriber_refreshes_the_schedule_after_a_rotation(api: InProcessApi, published: Publisher) -> None:
    sub = Subscriber(api, "s-test")
    sub.poll(10)
    published.rotate_key(nacl.signing.SigningKey.generate())
    published.publish("tick", b"{}")
    assert [m.signing_key_id for m in sub.poll(10)] == [2]
    assert api.calls["key_schedule"] == 2


def test_subscriber_filter_and_cursor_too_old(api: InProcessApi, published: Publisher) -> None:
    odd = {"field": "tags.i", "op": "in", "value": [1, 3]}
    assert [m.sequence for m in Subscriber(api, "s-test", filter=odd).poll(10)] == [2, 4]
    with pytest.raises(WatchtowerError) as bad:
        Subscriber(api, "s-test", filter={})
    assert bad.value.code == "INVALID_FILTER"
    publish_n(published, 4)  # capacity 5: head 8, floor 4
    with pytest.raises(CursorTooOldError):
        Subscriber(api, "s-test", cursor=1).poll(10)


def test_follow_yields_new_messages_and_stops_when_idle(api: InProcessApi, published: Publisher) -> None:
    sub = Subscriber(api, "s-test", cursor=2)
    seen = [m.sequence for m in sub.follow(limit=1, wait_ms=10, idle_timeout_s=0.05)]
    assert seen == [3, 4]
    assert sub.cursor == 4
    assert api.long_polls[:3] == [(3, 10), (4, 10), (5, 10)]  # always waits for the next sequence


# --- create_feed ---------------------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.sent: list[tuple[Command, float]] = []

    def command(self, cmd: Command, *, timeout_s: float = 30.0) -> dict[str, Any]:
        self.sent.append((cmd, timeout_s))
        return {"stream_id": cmd.stream_id, "owner": cmd.caller, "feed_id": 7}


def test_create_feed_sends_the_config_with_the_listing(owner: Account, publisher_key: nacl.signing.SigningKey) -> None:
    api = Recorder()
    reply = create_feed(api, owner, name="btc", description="prices", max_subscribers=3,
                        publisher_key_hex=bytes(publisher_key.verify_key).hex(), timeout_s=12)
    cmd, timeout_s = api.sent[0]
    assert timeout_s == 12
    assert reply["feed_id"] == 7
    assert cmd.method == "create_stream"
    assert cmd.stream_id.startswith("s-")
    assert len(cmd.stream_id) == 18
    assert dict(cmd.body["feed"]) == {"name": "btc", "description": "prices"}
    assert cmd.body["max_subscribers"] == 3
    assert cmd.body["owner"] == owner.address


def test_create_feed_rejects_a_bad_config_before_sending(owner: Account) -> None:
    api = Recorder()
    with pytest.raises(WatchtowerError) as info:
        create_feed(api, owner, name="x", publisher_key_hex="00" * 32, access_mode="PLATFORM_MANAGED")
    assert info.value.code == "INVALID_ARGUMENT"
    assert api.sent == []


def test_new_stream_ids_are_fresh() -> None:
    ids = {new_stream_id() for _ in range(100)}
    assert len(ids) == 100


# --- ApiClient over real HTTP --------------------------------------------------------------------


class _Handler(http.server.BaseHTTPRequestHandler):
    answers: ClassVar[dict[str, tuple[int, bytes]]] = {}
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.seen.append(self.path)
        status, body = self.answers.get(self.path.split("?")[0], (404, b'{"error": {"code": "FEED_NOT_FOUND"}}'))
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    _Handler.seen.clear()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_json_error_body_becomes_the_matching_error(server: str) -> None:
    _Handler.answers = {
        "/v1/streams/s-1/head": (409, json.dumps({"error": {"code": "STALE_SEQUENCE", "message": "m",
                                                           "details": {"head": 4}}}).encode()),
        "/v1/health": (500, b"<html>oops</html>"),
    }
    client = ApiClient(server, timeout=5)
    with pytest.raises(StaleSequenceError) as stale:
        client.get_head("s-1")
    assert stale.value.details == {"head": 4}
    with pytest.raises(FeedNotFoundError):
        client.feed(9)
    with pytest.raises(WatchtowerError) as html:
        client.health()
    assert html.value.code == "HTTP_500"


def test_get_since_encodes_its_query(server: str) -> None:
    _Handler.answers = {"/v1/streams/s%2Fodd/messages": (200, b'{"messages": [], "head": 0, "floor": 1}')}
    ApiClient(server).get_since("s/odd", 3, 10, filter={"field": "kind", "op": "eq", "value": "a b"}, min_head=4,
                                wait_ms=50)
    path = _Handler.seen[-1]
    assert path.startswith("/v1/streams/s%2Fodd/messages?cursor=3&limit=10&filter=")
    assert "min_head=4&wait_ms=50" in path


def test_connection_refused_says_to_start_the_stack() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ApiUnavailableError) as info:
        ApiClient(f"http://127.0.0.1:{port}", timeout=2).health()
    assert f"no Watchtower API at http://127.0.0.1:{port}" in info.value.message
    assert "watchtower up" in info.value.message


def test_api_url_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHTOWER_API", "http://10.0.0.5:9000/")
    assert ApiClient().base_url == "http://10.0.0.5:9000"
    assert ApiClient("http://h:1").base_url == "http://h:1"
    with pytest.raises(WatchtowerError):
        ApiClient("ftp://h")


def test_announce_key_epoch_is_an_sdk_call_of_the_owner_with_or_without_the_publisher_key(
        api: InProcessApi, owner: Account, publisher_key: nacl.signing.SigningKey) -> None:
    """Failed before the fix: no SDK method; the command could be sent only as a raw signed command."""
    from watchtower.client.sdk import announce_key_epoch

    reply = Publisher(api, owner, "s-test", publisher_key).announce_key_epoch(3)
    assert reply["key_epoch"] == 3
    assert api.states["s-test"].last_key_epoch == 3
    assert announce_key_epoch(api, owner, "s-test", 5)["key_epoch"] == 5
    with pytest.raises(WatchtowerError) as back:
        announce_key_epoch(api, owner, "s-test", 4)  # epochs never go back
    assert back.value.code == "INVALID_ARGUMENT"
    with pytest.raises(WatchtowerError) as stranger:
        announce_key_epoch(api, Account(nacl.signing.SigningKey.generate()), "s-test", 9)
    assert stranger.value.code == "UNAUTHORIZED"
    with pytest.raises(WatchtowerError):
        announce_key_epoch(api, owner, "s-test", -1)
