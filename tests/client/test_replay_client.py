"""ICRC-77 replays end to end through the SDK: broker, stream-actor worker, replay worker, projection.

A ring-10 feed takes 50 publishes, so only 41..50 are left in its window. A reader registers replays
with `ReplayClient` (by stream id and by feed id, closed and open-ended, with skip and filter) and
reads them through `messages()`: exactly the range, every message verified against the owner's key
chain. A subscriber that opts in crosses CURSOR_TOO_OLD by replaying the gap and ends with 1..50
without a hole. On a priced feed a request without payment is PAYMENT_REQUIRED with the price, and
a paid replay moves the price from the requester to the owner once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import nacl.signing
import pytest
from api_calls import wait_for
from stack_fixture import start_stack

from watchtower.client.account import Account
from watchtower.client.http import ApiClient
from watchtower.client.ledger import Ledger
from watchtower.client.replay import ReplayClient
from watchtower.client.sdk import Publisher, create_feed, wait_until_visible
from watchtower.client.subscriber import Subscriber
from watchtower.local.stack import ServiceSet
from watchtower.protocol.errors import CursorTooOldError, PaymentRequiredError

pytestmark = pytest.mark.integration

PUBLISHED = 50
MINTER = nacl.signing.SigningKey(b"\x77" * 32)


@pytest.fixture(scope="module")
def feed(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    logs, home = tmp_path_factory.mktemp("replay-e2e-logs"), tmp_path_factory.mktemp("replay-e2e-home")
    minter = Account(MINTER, home=home)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("WATCHTOWER_CBY_MINTER", minter.address)
        with start_stack(kafka_bootstrap, logs, replay=True) as stack:  # with its replay worker
            api = ApiClient(stack.api_url)
            owner = Account(nacl.signing.SigningKey.generate(), home=home)
            key = nacl.signing.SigningKey.generate()
            reply = create_feed(api, owner, name="replayed", publisher_key_hex=bytes(key.verify_key).hex(),
                                ring_buffer_capacity=10)
            sid = reply["stream_id"]
            wait_until_visible(api, sid, feed_id=reply["feed_id"])
            publisher = Publisher(api, owner, sid, key)
            for i in range(1, PUBLISHED + 1):
                publisher.publish("tick", b'{"i": %d}' % i, {"n": float(i)})
            wait_until_visible(api, sid, min_head=PUBLISHED)
            yield {"stack": stack, "api": api, "owner": owner, "stream_id": sid, "feed_id": reply["feed_id"],
                   "home": home, "minter": minter}


def reader(feed: dict[str, Any]) -> ReplayClient:
    stack: ServiceSet = feed["stack"]
    account = Account(nacl.signing.SigningKey.generate(), home=feed["home"])
    return ReplayClient(account, feed["api"], stack.bootstrap, prefix=stack.prefix,
                        expected_owner=feed["owner"].address)


def test_a_replay_beyond_the_window_delivers_exactly_its_range_verified(feed: dict[str, Any]) -> None:
    client, sid = reader(feed), feed["stream_id"]
    assert feed["api"].get_head(sid)["floor_sequence"] == 41  # 1..40 are only in the archive now
    ticket = client.register(sid, 1, 31)
    assert (ticket.stream_id, ticket.first, ticket.end_exclusive, ticket.end_id, ticket.price_cby) == (
        sid, 1, 31, None, 0)
    got = list(client.messages(ticket, timeout_s=300))
    assert [m.sequence for m in got] == list(range(1, 31))
    assert [m.payload_inline for m in got] == [b'{"i": %d}' % i for i in range(1, 31)]
    status = client.status(ticket.replay_id)
    assert status["status"] == {"completed": 30}
    assert status["requester"] == client.account.address


def test_an_open_ended_replay_by_feed_id_ends_at_the_head_and_skip_and_filter_select(feed: dict[str, Any]) -> None:
    client, sid = reader(feed), feed["stream_id"]
    open_ended = client.register(feed["feed_id"], 45)
    assert (open_ended.stream_id, open_ended.end_id, open_ended.end_exclusive) == (sid, 50, 51)
    assert [m.sequence for m in client.messages(open_ended, timeout_s=300)] == [45, 46, 47, 48, 49, 50]
    assert client.status(open_ended.replay_id)["namespace"] == sid  # the stream id, whatever the caller named
    chosen = client.register(sid, 1, 21, skip=[2], filter={"field": "tags.n", "op": "gte", "value": 10})
    assert [m.sequence for m in client.messages(chosen, timeout_s=300)] == [10, 12, 14, 16, 18, 20]
    stats = client.status(chosen.replay_id)["stats"]
    assert (stats["delivered"], stats["skipped"], stats["filtered"]) == (6, 10, 4)
    mine = client.list(mine=True)["replays"]
    assert sorted(int(r["replayId"]) for r in mine) == sorted([open_ended.replay_id, chosen.replay_id])


def test_a_subscriber_that_opts_in_crosses_cursor_too_old_without_a_gap(feed: dict[str, Any]) -> None:
    client, sid = reader(feed), feed["stream_id"]
    with pytest.raises(CursorTooOldError) as caught:
        Subscriber(feed["api"], sid, 0).poll_page(100)
    assert caught.value.details["replay"]["body"] == {  # type: ignore[index]
        "namespace": sid, "from": 1, "to": 41,
        "config": {"filter": None, "skip": None, "max_payment_cby": 0}, "memo_hex": ""}
    subscriber = Subscriber(feed["api"], sid, 0, expected_owner=feed["owner"].address,
                            replay_on_cursor_too_old=True, replay_client=client)
    sequences: list[int] = []
    while subscriber.cursor < PUBLISHED:
        sequences += [m.sequence for m in subscriber.poll_page(100).messages]
    assert sequences == list(range(1, PUBLISHED + 1))


def _balance(api: ApiClient, address: str, expected: int) -> bool:
    return int(api.account_info(address)["balance_cby"]) == expected


def test_a_priced_replay_needs_payment_and_charges_the_requester_once(feed: dict[str, Any]) -> None:
    api, sid, owner = feed["api"], feed["stream_id"], feed["owner"]
    api.command(owner.sign("set_replay_price", sid, {"price_per_event_cby": 2}))
    wait_for(lambda: api.stream_info(sid).get("replay_price_per_event_cby") == 2, what="the replay price")
    client = reader(feed)
    with pytest.raises(PaymentRequiredError) as caught:
        client.register(sid, 1, 11)
    assert caught.value.details == {"price_cby": 20, "per_event_cby": 2, "events": 10}
    Ledger(api, feed["minter"]).mint_cby(client.account.address, 1_000)
    wait_for(lambda: _balance(api, client.account.address, 1_000), what="the minted CBY")
    owner_before = int(api.account_info(owner.address)["balance_cby"])
    ticket = client.register(sid, 1, 11, max_payment_cby=25)
    assert ticket.price_cby == 20
    assert [m.sequence for m in client.messages(ticket, timeout_s=300)] == list(range(1, 11))
    wait_for(lambda: _balance(api, client.account.address, 980), what="the requester's debit")
    wait_for(lambda: _balance(api, owner.address, owner_before + 20), what="the owner's credit")


def test_the_cursor_too_old_request_carries_the_price(feed: dict[str, Any]) -> None:
    api, sid = feed["api"], feed["stream_id"]
    api.command(feed["owner"].sign("set_replay_price", sid, {"price_per_event_cby": 2}))
    wait_for(lambda: api.stream_info(sid).get("replay_price_per_event_cby") == 2, what="the replay price")
    with pytest.raises(CursorTooOldError) as caught:
        Subscriber(api, sid, 30).poll_page(10)
    request = caught.value.details["replay"]
    assert (request["price_cby"], request["per_event_cby"]) == (20, 2)  # type: ignore[index]
    assert request["body"]["config"]["max_payment_cby"] == 20  # type: ignore[index]
