"""Six spec codes through the real stack: broker, stream-actor worker and projection (issue 21, item 17).

SUBSCRIBER_CAP_REACHED, MIN_PURCHASE_NOT_MET, RANGE_TOO_LARGE, UNAUTHORIZED_SUBSCRIBER,
PUBLICATION_NOT_FOUND and SUBSCRIPTION_NOT_FOUND were each reached only by the pure deciders'
tests. Here each is a signed command sent over HTTP to one module-wide stack, whose worker runs
with ``WATCHTOWER_REPLAY_MAX_RANGE=3`` so a four-message stream is already too wide to replay.
Each test asserts the spec code (and its HTTP status) of the refusal, then that nothing changed:
an accepted command on the same stream, which the worker decides after the refused one and the
projection folds after it, is visible while nothing of the refused one is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import nacl.signing
import pytest
from api_calls import http, wait_for
from stack_fixture import start_stack

from watchtower.client.account import Account
from watchtower.client.http import ApiClient
from watchtower.client.sdk import Publisher, create_feed, new_stream_id, wait_until_visible
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.signed_command import Command

pytestmark = pytest.mark.integration

MAX_RANGE = 3


@pytest.fixture(scope="module")
def api(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiClient]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("WATCHTOWER_REPLAY_MAX_RANGE", str(MAX_RANGE))  # the stack's processes inherit it
        with start_stack(kafka_bootstrap, tmp_path_factory.mktemp("spec-codes-logs")) as services:
            yield ApiClient(services.api_url)


def account() -> Account:
    return Account(nacl.signing.SigningKey.generate())


def feed(api: ApiClient, owner: Account, publishes: int = 0, **config: Any) -> str:
    key = nacl.signing.SigningKey.generate()
    reply = create_feed(api, owner, name="codes", publisher_key_hex=bytes(key.verify_key).hex(), **config)
    sid = str(reply["stream_id"])
    wait_until_visible(api, sid)
    publisher = Publisher(api, owner, sid, key)
    for i in range(1, publishes + 1):
        publisher.publish("tick", b'{"i": %d}' % i, {})
    wait_until_visible(api, sid, min_head=publishes)
    return sid


def refused(api: ApiClient, cmd: Command, code: str, status: int) -> dict[str, Any]:
    """POST `cmd`: refused with HTTP `status` and the spec `code`; returns the error object."""
    got, reply = http("POST", f"{api.base_url}/v1/commands", {"command": cmd.to_dict()})
    assert (got, reply.get("error", {}).get("code")) == (status, code), reply
    return dict(reply["error"])


def replay(who: Account, sid: str, first: int, to: int | None) -> Command:
    body = {"namespace": sid, "from": first, "to": to, "config": {}, "memo_hex": ""}
    return who.sign("register_replay", sid, body)


def replays_of(api: ApiClient, sid: str) -> list[tuple[str, int]]:
    rows = api.request("GET", "/v1/replays", query={"stream_id": sid})["replays"]
    return sorted((str(r["requester"]), int(r["replayId"])) for r in rows)


def only_replay_listed(api: ApiClient, sid: str, who: Account, replay_id: int) -> None:
    """The accepted replay, decided after the refused ones, is listed, and nothing else is."""
    wait_for(lambda: replays_of(api, sid), what="the accepted replay in the projection")
    assert replays_of(api, sid) == [(who.address, replay_id)]


def test_a_subscriber_past_max_subscribers_is_subscriber_cap_reached(api: ApiClient) -> None:
    owner, first, second = account(), account(), account()
    sid = feed(api, owner, max_subscribers=1)
    api.command(first.sign("subscribe", sid, {"mode": "PULL"}))
    err = refused(api, second.sign("subscribe", sid, {"mode": "PULL"}), "SUBSCRIBER_CAP_REACHED", 409)
    assert "max_subscribers 1" in err["message"]
    api.command(first.sign("subscribe", sid, {"mode": "PUSH"}))  # an update of the one subscription is no new one
    wait_for(lambda: [s.get("mode") for s in api.subscribers(sid)] == ["PUSH"], what="the update")
    assert [s["subscriber"] for s in api.subscribers(sid)] == [first.address]
    assert api.stream_info(sid)["active_subscribers"] == 1


def test_a_purchase_below_min_purchase_epochs_is_min_purchase_not_met(api: ApiClient) -> None:
    owner, reader = account(), account()
    sid = feed(api, owner, access_mode="PLATFORM_MANAGED", paid_stream_config={
        "fee_per_key_epoch_cby": 1_000, "protocol_fee_bps": 500, "publisher_treasury": owner.address,
        "key_epoch_blocks": 86_400, "min_purchase_epochs": 3})  # day-long epochs: no boundary mid-test

    def entitlement() -> dict[str, Any] | None:
        try:
            return api.entitlement(sid, reader.address)
        except WatchtowerError as err:
            if err.code != "NOT_PLATFORM_MANAGED_STREAM":  # not projected yet; anything else is a failure
                raise
            return None

    epoch = int(wait_for(entitlement, what="the paid stream in the projection")["current_key_epoch"])
    before = api.account_info(reader.address)
    cmd = reader.sign("acquire_epoch_access", f"paid:{sid}", {"stream_id": sid, "target_key_epoch": epoch + 1})
    err = refused(api, cmd, "MIN_PURCHASE_NOT_MET", 402)
    assert f"target epoch {epoch + 2} or later" in err["message"]  # 2 new epochs < 3: the fix is named
    assert (api.entitlement(sid, reader.address)["active_until_key_epoch"], api.account_info(reader.address)) == (
        None, before)


def test_a_replay_wider_than_the_deployment_allows_is_range_too_large(api: ApiClient) -> None:
    owner, requester = account(), account()
    sid = feed(api, owner, publishes=MAX_RANGE + 1)
    err = refused(api, replay(requester, sid, 1, None), "RANGE_TOO_LARGE", 400)
    assert err["details"] == {"events": MAX_RANGE + 1, "max": MAX_RANGE}
    ticket = api.command(replay(requester, sid, 2, None))  # 2..4: exactly the widest allowed
    assert (ticket["first"], ticket["end_exclusive"]) == (2, MAX_RANGE + 2)
    only_replay_listed(api, sid, requester, int(ticket["replay_id"]))


def private_stream(api: ApiClient, owner: Account, listed: Account) -> str:
    sid = feed(api, owner, publishes=1, subscription_policy="PRIVATE_ALLOWLIST")
    api.command(owner.sign("allowlist_add", sid, {"address": listed.address}))
    return sid


def test_a_replay_of_a_private_stream_by_a_stranger_is_unauthorized_subscriber(api: ApiClient) -> None:
    owner, stranger = account(), account()
    sid = private_stream(api, owner, account())
    err = refused(api, replay(stranger, sid, 1, 2), "UNAUTHORIZED_SUBSCRIBER", 403)
    assert err["details"] == {"namespace": sid}
    ticket = api.command(replay(owner, sid, 1, 2))
    only_replay_listed(api, sid, owner, int(ticket["replay_id"]))


def test_a_replay_by_an_allowlisted_non_subscriber_is_subscription_not_found(api: ApiClient) -> None:
    owner, listed = account(), account()
    sid = private_stream(api, owner, listed)
    err = refused(api, replay(listed, sid, 1, 2), "SUBSCRIPTION_NOT_FOUND", 404)
    assert "subscribe first" in err["message"]
    ticket = api.command(replay(owner, sid, 1, 2))
    only_replay_listed(api, sid, owner, int(ticket["replay_id"]))
    assert api.subscribers(sid) == []  # the refusal subscribed no one


def test_a_replay_of_a_stream_that_does_not_exist_is_publication_not_found(api: ApiClient) -> None:
    requester, sid = account(), new_stream_id()
    err = refused(api, replay(requester, sid, 1, 2), "PUBLICATION_NOT_FOUND", 404)
    assert err["details"] == {"namespace": sid}
    with pytest.raises(WatchtowerError) as caught:
        api.stream_info(sid)  # the refusal created nothing
    assert caught.value.code == "STREAM_NOT_FOUND"
    # Then the stream is created (the same partition, after the refusal): still no replay of it.
    owner = account()
    key = nacl.signing.SigningKey.generate()
    create_feed(api, owner, name="later", publisher_key_hex=bytes(key.verify_key).hex(), stream_id=sid)
    wait_until_visible(api, sid)
    assert replays_of(api, sid) == []
