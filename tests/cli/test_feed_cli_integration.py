"""The feed CLI and the SDK against a running stack: real broker, stream-actor worker and HTTP API."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
from click.testing import CliRunner, Result
from conftest import TEST_PROTOCOL_TREASURY
from stack_fixture import stack  # noqa: F401 (the fixture)
from waiting import wait_until

from watchtower.cli.main import _register, cli
from watchtower.client.account import ENV_ACCOUNT, ENV_KEY_FILE, Account, read_key_file
from watchtower.client.http import ApiClient
from watchtower.client.sdk import Publisher, create_feed, wait_until_visible
from watchtower.client.subscriber import Subscriber
from watchtower.protocol.errors import StaleSequenceError, WatchtowerError

pytestmark = pytest.mark.integration


@pytest.fixture
def env(stack: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:  # noqa: F811
    monkeypatch.setenv("WATCHTOWER_HOME", str(tmp_path))
    monkeypatch.setenv("WATCHTOWER_API", stack.api_url)
    monkeypatch.delenv(ENV_ACCOUNT, raising=False)
    monkeypatch.delenv(ENV_KEY_FILE, raising=False)
    _register()
    return tmp_path


def run(*args: str) -> Result:
    result = CliRunner().invoke(cli, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == 0, result.output
    return result


def run_json(*args: str) -> Any:
    return json.loads(run(*args, "--json").output)


def eventually(read: Callable[[], Any], expected: Any, timeout_s: float = 10.0) -> None:
    """The read side trails acknowledged writes by a moment: poll until it shows `expected`."""

    def shows() -> bool:
        got = read()
        assert got == expected
        return True

    wait_until(f"the read side to show {expected!r}", shows, timeout_s=timeout_s, every_s=0.1,
               retry_on=(AssertionError,))


def refused(code: str, *args: str) -> WatchtowerError:
    result = CliRunner().invoke(cli, list(args))
    assert isinstance(result.exception, WatchtowerError), result.output
    assert result.exception.code == code, result.exception
    return result.exception


def test_publisher_flow_new_feed_publish_read_rotate(env: Path) -> None:
    owner = run_json("account", "new")
    feed = run_json("new", "feed", "--name", "btc-usd", "--description", "BTC prices", "--ring-buffer-capacity", "50")
    fid, sid = str(feed["feed_id"]), feed["stream_id"]
    assert (env / "publishers" / f"{sid}.key").exists()

    listed = run_json("list")["feeds"]
    assert {"feed_id": feed["feed_id"], "stream_id": sid, "name": "btc-usd"}.items() <= next(
        f for f in listed if f["stream_id"] == sid).items()
    assert [f["stream_id"] for f in run_json("feeds")["feeds"]] == [sid]
    assert run_json("feeds", "--owner", "0x" + "ab" * 32)["feeds"] == []

    for n in (1, 2, 3):
        reply = run_json("feed", fid, "publish", "--kind", "tick", "--data", json.dumps({"p": 100 + n}),
                         "--tags", f"sym=BTC,n={n},live=true")
        assert reply["sequence"] == n
    page = run_json("feed", sid, "get-since", "--cursor", "0", "--limit", "2", "--min-head", "3")
    assert [m["sequence"] for m in page["messages"]] == [1, 2]
    assert (page["head_sequence"], page["floor_sequence"], page["next_cursor"], page["verified"]) == (3, 1, 2, True)
    assert page["messages"][0]["tags"] == {"sym": "BTC", "n": 1.0, "live": True}
    odd = run_json("feed", fid, "get-since", "--cursor", "0", "--filter",
                   json.dumps({"field": "tags.n", "op": "in", "value": [1, 3]}))
    assert [m["sequence"] for m in odd["messages"]] == [1, 3]
    human = run("feed", fid, "get-since", "--cursor", "2").output
    assert human.splitlines()[0].startswith("#3  tick  ")
    assert '{"p": 103}' in human

    head = run_json("feed", fid, "get-head")
    assert (head["head_sequence"], head["floor_sequence"], head["owner"], head["signing_key_id"]) == (
        3, 1, owner["address"], 1)
    assert "head_sequence" in run("feed", fid, "get-head").output

    rotated = run_json("feed", fid, "rotate-publisher-key")
    assert (rotated["signing_key_id"], rotated["effective_sequence"]) == (2, 4)
    assert (env / "publishers" / f"{sid}.1.key").exists()
    assert run_json("feed", fid, "publish", "--kind", "tick", "--data", "{}")["sequence"] == 4
    key4 = run_json("feed", fid, "get-key-at-sequence", "4")
    assert key4["signing_key_id"] == 2
    assert key4["publisher_key"] == bytes(read_key_file(env / "publishers" / f"{sid}.key").verify_key).hex()
    assert run_json("feed", fid, "get-key-at-sequence", "3")["signing_key_id"] == 1
    after = run_json("feed", fid, "get-since", "--cursor", "2", "--min-head", "4")["messages"]
    assert [m["signing_key_id"] for m in after] == [1, 2]

    info = run_json("feed", fid, "info")
    assert (info["feed"]["name"], info["head_sequence"], info["owner"]) == ("btc-usd", 4, owner["address"])
    assert "feed_id" in run("feed", fid, "info").output

    for secret in (p.read_text().strip() for p in env.rglob("*.key")):
        assert secret not in json.dumps([feed, rotated, info, page])


def test_subscriber_flow_policy_and_allowlist(env: Path) -> None:
    run("account", "new")
    reader = run_json("account", "new", "reader")
    fid = str(run_json("new", "feed", "--name", "private")["feed_id"])

    sub = run_json("feed", fid, "subscribe", "--mode", "pull", "--account", "reader", "--filter",
                   json.dumps({"field": "kind", "op": "eq", "value": "tick"}))
    assert (sub["subscriber"], sub["mode"], sub["status"]) == (reader["address"], "PULL", "ACTIVE")
    eventually(lambda: [(s["subscriber"], s["status"]) for s in run_json("feed", fid, "subscribers")["subscribers"]],
               [(reader["address"], "ACTIVE")])
    assert run_json("feed", fid, "unsubscribe", "--account", "reader")["status"] == "CANCELLED"
    eventually(lambda: run_json("feed", fid, "subscribers", "--active-only")["subscribers"], [])

    run("feed", fid, "set-policy", "private-allowlist")
    refused("SUBSCRIPTION_NOT_ALLOWED", "feed", fid, "subscribe", "--mode", "push", "--account", "reader")
    run("feed", fid, "allowlist", "add", reader["address"])
    eventually(lambda: run_json("feed", fid, "info")["allowlist"], [reader["address"]])
    assert run_json("feed", fid, "subscribe", "--mode", "push-fallback", "--account", "reader")["status"] == "ACTIVE"
    run("feed", fid, "allowlist", "remove", reader["address"])
    eventually(lambda: run_json("feed", fid, "info")["allowlist"], [])

    refused("UNAUTHORIZED", "feed", fid, "set-policy", "public", "--account", "reader")
    refused("FEED_NOT_FOUND", "feed", "999999", "info")


def test_sdk_publish_follow_and_stale_sequence(stack: Any, tmp_path: Path) -> None:  # noqa: F811
    api = ApiClient(stack.api_url)
    owner = Account(nacl.signing.SigningKey.generate(), home=tmp_path)
    key = nacl.signing.SigningKey.generate()
    reply = create_feed(api, owner, name="sdk", publisher_key_hex=bytes(key.verify_key).hex())
    sid = reply["stream_id"]
    assert isinstance(reply["feed_id"], int)
    wait_until_visible(api, sid, feed_id=reply["feed_id"])

    received: list[int] = []
    subscriber = Subscriber(api, sid)

    def follow() -> None:
        for msg in subscriber.follow(wait_ms=500, idle_timeout_s=15):
            received.append(msg.sequence)
            if msg.sequence == 5:
                return

    reader = threading.Thread(target=follow)
    reader.start()
    publisher = Publisher(api, owner, sid, key)
    for n in range(5):
        assert publisher.publish("tick", json.dumps({"n": n}).encode(), {"n": n})["sequence"] == n + 1
    reader.join(30)
    assert received == [1, 2, 3, 4, 5]
    assert subscriber.cursor == 5

    behind = Publisher(api, owner, sid, key)
    behind.sync()
    publisher.publish("tick", b"{}")
    with pytest.raises(StaleSequenceError):
        behind.publish("tick", b'{"late": true}')
    assert behind.head == 6
    assert behind.publish("tick", b"{}")["sequence"] == 7
    assert [m.sequence for m in Subscriber(api, sid, cursor=5).poll_page(10, min_head=7, wait_ms=5000).messages] == [
        6, 7]


def test_a_paid_feed_gets_the_deployments_protocol_treasury_and_no_creator_can_choose_one(env: Path) -> None:
    owner = run_json("account", "new")
    feed = run_json("new", "feed", "--name", "paid", "--access-mode", "subscriber-paid", "--fee-per-epoch-cby", "10")
    info = run_json("feed", str(feed["feed_id"]), "info")
    paid = info["config"]["paid_stream_config"]
    assert (paid["protocol_treasury"], paid["publisher_treasury"]) == (TEST_PROTOCOL_TREASURY, owner["address"])
    # The flag is gone from the CLI, and a hand-built command naming another treasury is refused.
    chosen = CliRunner().invoke(cli, ["new", "feed", "--name", "x", "--protocol-treasury", owner["address"]])
    assert chosen.exit_code == 2
    api = ApiClient(os.environ["WATCHTOWER_API"])
    creator = Account(nacl.signing.SigningKey.generate(), home=env)
    with pytest.raises(WatchtowerError) as refused_:
        create_feed(api, creator, name="mine", publisher_key_hex="11" * 32, access_mode="SUBSCRIBER_PAID",
                    paid_stream_config={"fee_per_key_epoch_cby": 1, "protocol_fee_bps": 0,
                                        "publisher_treasury": creator.address, "protocol_treasury": creator.address})
    assert refused_.value.code == "INVALID_ARGUMENT"
    assert "may not override" in refused_.value.message
