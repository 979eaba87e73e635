"""``POST /v1/commands/batch`` against a real stack (broker, stream worker, projection with the
command gateway): a batch of three registrations where one is refused answers two replay ids that
``GET /v1/replays/{id}`` knows and the refused item's own ICRC-77 code, in request order; a batch
mixing methods is refused as a whole (a vector of GenericBatchError) and registers nothing; a batch
of cancels answers each; the stream advertises icrc77:capable."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
from api_calls import http, wait_for
from stack_fixture import start_stack

from watchtower.client.account import Account
from watchtower.client.http import ApiClient
from watchtower.client.replay import ReplayClient, ReplayRequest, ReplayTicket
from watchtower.client.sdk import Publisher, create_feed, wait_until_visible
from watchtower.protocol.errors import ImproperConfigError, WatchtowerError

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def feed(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    logs, home = tmp_path_factory.mktemp("batch-logs"), tmp_path_factory.mktemp("batch-home")
    with start_stack(kafka_bootstrap, logs) as stack:  # no replay worker: registering is the stream's writer
        api = ApiClient(stack.api_url)
        owner = Account(nacl.signing.SigningKey.generate(), home=home)
        key = nacl.signing.SigningKey.generate()
        reply = create_feed(api, owner, name="batched", publisher_key_hex=bytes(key.verify_key).hex(),
                            ring_buffer_capacity=5)
        sid = reply["stream_id"]
        wait_until_visible(api, sid, feed_id=reply["feed_id"])
        publisher = Publisher(api, owner, sid, key)
        for i in range(1, 9):
            publisher.publish("tick", b'{"i": %d}' % i)
        wait_until_visible(api, sid, min_head=8)
        yield {"stack": stack, "api": api, "stream_id": sid, "feed_id": reply["feed_id"], "home": home}


def test_a_batch_answers_each_registration_in_order_and_a_bad_batch_is_refused_whole(
        feed: dict[str, Any]) -> None:
    stack, sid = feed["stack"], feed["stream_id"]
    requester = Account(nacl.signing.SigningKey.generate(), home=Path(feed["home"]))
    replays = ReplayClient(requester, feed["api"], stack.bootstrap, prefix=stack.prefix)
    results = replays.register_many([ReplayRequest(feed["feed_id"], 1, 4),
                                     ReplayRequest(sid, 5, 3),          # to before from: ImproperConfig
                                     ReplayRequest(sid, 2, None, skip=[2])])
    first, refused, third = results
    assert isinstance(first, ReplayTicket), first
    assert isinstance(third, ReplayTicket), third
    assert isinstance(refused, ImproperConfigError), refused
    assert refused.code == "IMPROPER_CONFIG"
    assert (first.stream_id, first.first, first.end_exclusive) == (sid, 1, 4)
    assert (third.first, third.end_exclusive, third.end_id) == (2, 9, 8)
    assert first.replay_id != third.replay_id
    for ticket in (first, third):
        status = wait_for(lambda t=ticket: _status(stack.api_url, t.replay_id), what=f"replay {ticket.replay_id}")
        assert status["replayId"] == str(ticket.replay_id)
        assert status["requester"] == requester.address

    # Refused as a whole: nothing of it is produced, not even its register_replay.
    register = requester.sign("register_replay", sid, {"namespace": sid, "from": 1, "to": 2, "config": {},
                                                       "memo_hex": ""})
    cancel = requester.sign("cancel_replay", sid, {"replay_id": first.replay_id})
    code, body = http("POST", f"{stack.api_url}/v1/commands/batch",
                      {"commands": [register.to_dict(), cancel.to_dict()]})
    assert code == 400, body
    assert body["error"]["code"] == "GENERIC_BATCH_ERROR"
    assert "separate batches" in body["error"]["message"]
    assert [r["error"]["code"] for r in body["results"]] == ["GENERIC_BATCH_ERROR"] * 2  # ICRC-77's vector
    # The register_replay of the refused batch was never sent: sent alone now, it registers anew.
    assert "duplicate" not in replays.api.command(register)
    # icrc77_cancel_replay: a vector of ids in, a vector of results out (failed before: refused whole).
    cancelled = replays.cancel_many([first.replay_id, third.replay_id])
    assert all(isinstance(r, dict) for r in cancelled), cancelled
    again = replays.cancel_many([first.replay_id])[0]
    assert isinstance(again, WatchtowerError)
    assert again.code == "CANNOT_CANCEL"
    assert again.details["icrc77"] == "CannotCancel"


def test_the_stream_advertises_icrc77_capability_under_the_drafts_key_names(feed: dict[str, Any]) -> None:
    """ICRC-77 publisher metadata icrc77:capable / icrc77:pricing on a real stack (failed before: absent)."""
    api_url, sid = feed["stack"].api_url, feed["stream_id"]
    for path in (f"/v1/streams/{sid}", f"/v1/streams/{sid}/head"):
        code, body = http("GET", f"{api_url}{path}")
        assert code == 200, body
        assert body["icrc77:capable"] is True
        assert body["icrc77:pricing"] == {"perEvent": 0, "currency": "CBY"}


def _status(api_url: str, replay_id: int) -> dict[str, Any] | None:
    code, body = http("GET", f"{api_url}/v1/replays/{replay_id}")
    if code in (404, 503):  # not folded yet, or the worker is still recovering
        return None
    assert code == 200, body
    return body if isinstance(body, dict) else None

