"""The demo's flows against the compose stack, from outside: only its published ports.

Reads go to api-1 (127.0.0.1:8470), commands to the gateway (8480, WATCHTOWER_COMMANDS_API), the
key manager is 8472, and Kafka clients on the host (replay reads) connect as the client principal
on the brokers' EXTERNAL listeners (127.0.0.1:9092-9094), as compose.yaml tells a user to.
"""

from __future__ import annotations

import json
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nacl.signing

from deploy.engines import podman
from watchtower.client.account import Account, read_key_file
from watchtower.client.http import ApiClient
from watchtower.client.keymgr import KeyManagerClient
from watchtower.client.replay import ReplayClient
from watchtower.client.sdk import Publisher, Subscriber, create_feed, wait_until_visible
from watchtower.client.sse import SseSource
from watchtower.protocol.errors import WatchtowerError

API_URL = "http://127.0.0.1:8470"
KEYMGR_URL = "http://127.0.0.1:8472"
HOST_BOOTSTRAP = "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
GENESIS = Path(__file__).resolve().parent / "genesis" / "genesis"
TIMEOUT_S = 120.0

Check = Callable[[str, Callable[[], str]], bool]


def _account(home: Path, name: str) -> Account:
    return Account(nacl.signing.SigningKey.generate(), name=name, home=home)


def publish_and_read(api: ApiClient, home: Path) -> str:
    from watchtower.cli.demo_stream import _drive
    services = types.SimpleNamespace(api_url=API_URL, bootstrap=HOST_BOOTSTRAP, prefix="wt")
    _drive(api, services, home)  # type: ignore[arg-type]
    return "feeds, publishes, rotation, filter, allowlist, ring, CLI: as the demo"


def paid_feed(api: ApiClient, home: Path) -> str:
    import os

    from watchtower.cli.demo_paid import show_paid_feed
    minter = Account(read_key_file(GENESIS / "minter.key"), name="deploy-minter", home=home)
    show_paid_feed(api, KeyManagerClient(KEYMGR_URL), minter, os.environ["WATCHTOWER_PROTOCOL_TREASURY"])
    return "encrypted by the key manager, bought with CBY, decrypted"


#: The replay flow's client, feed and what the replay service delivered: the Spark check replays the
#: same range on the compose Spark cluster and must deliver the same records.
REPLAYED: dict[str, Any] = {}


def replay_beyond_the_window(api: ApiClient, home: Path) -> str:
    owner, reader = _account(home, "replay-owner"), _account(home, "replay-reader")
    key = nacl.signing.SigningKey.generate()
    created = create_feed(api, owner, name="deploy-replay", publisher_key_hex=bytes(key.verify_key).hex(),
                          ring_buffer_capacity=20)
    sid, feed_id = created["stream_id"], created["feed_id"]
    wait_until_visible(api, sid, feed_id=feed_id, timeout_s=TIMEOUT_S)
    pub = Publisher(api, owner, sid, key)
    for i in range(1, 101):
        pub.publish("tick", json.dumps({"i": i}).encode())
    wait_until_visible(api, sid, min_head=100, timeout_s=TIMEOUT_S)
    refused = None
    try:
        Subscriber(api, sid, expected_owner=owner.address).poll()
    except WatchtowerError as exc:
        refused = exc.code
    if refused != "CURSOR_TOO_OLD":
        raise AssertionError(f"a read at cursor 0 of a ring of 20: {refused or 'answered'}, not CURSOR_TOO_OLD")
    client = ReplayClient(reader, api, HOST_BOOTSTRAP, prefix="wt", expected_owner=owner.address)
    ticket = client.register(feed_id, 1, 101)
    got = list(client.messages(ticket, timeout_s=TIMEOUT_S))
    seqs = [m.sequence for m in got]
    assert seqs == list(range(1, 101)), seqs
    REPLAYED.update(client=client, feed_id=feed_id, stream_id=sid,
                    messages=[(m.sequence, m.payload_inline, m.publisher_sig) for m in got])
    return f"ring 20, 100 published; replay {ticket.replay_id} delivered 1..100 verified, gapless"


def push_over_sse(api: ApiClient, home: Path) -> str:
    owner, subscriber = _account(home, "push-owner"), _account(home, "push-subscriber")
    key = nacl.signing.SigningKey.generate()
    created = create_feed(api, owner, name="deploy-push", publisher_key_hex=bytes(key.verify_key).hex())
    sid, feed_id = created["stream_id"], created["feed_id"]
    wait_until_visible(api, sid, feed_id=feed_id, timeout_s=TIMEOUT_S)
    api.command(subscriber.sign("subscribe", sid, {"mode": "PUSH"}))
    with SseSource(API_URL, feed_id, subscriber=subscriber.address, heartbeat_s=1) as source:
        assert source.wait_connected(TIMEOUT_S), "SSE did not connect"
        pub = Publisher(api, owner, sid, key)
        for i in range(1, 11):
            pub.publish("tick", json.dumps({"i": i}).encode())
        got: list[int] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < 10 and time.monotonic() < deadline:
            got.extend(m.sequence for m in source.poll(1.0))
    assert got == list(range(1, 11)), got
    return "10 publishes pushed by the delivery worker to a PUSH subscriber over SSE, in order, once each"


SOURCE = "watchtower-deploy-source"


def _podman(*args: str) -> str:
    return podman(*args)


#: The ingested feed's stream id, once its flow passed: the faults check it still publishes after them.
INGESTED: dict[str, str] = {}


def remove_source() -> None:
    """Remove the price source's container (the stack's teardown; a failed ingestion flow)."""
    _podman("rm", "-f", SOURCE)


def ingested_feed(api: ApiClient, home: Path) -> str:
    """A price source served inside the compose network; the registrar (genesis) admits the two
    runners; a QUORUM feed of it publishes under the ingestion service's key. The source stays up
    for the faults (`INGESTED`): after them the feed must still publish."""
    from watchtower.client.ingestion import http_ingestion
    from watchtower.ingest.runner import admission_command

    _podman("rm", "-f", SOURCE)
    _podman("run", "-d", "--name", SOURCE, "--network", "watchtower_default", "localhost/watchtower:local", "sh", "-c",
            "mkdir -p /srv && echo '{\"data\": {\"price\": 97000, \"symbol\": \"BTC\"}}' > /srv/p.json "
            "&& exec python -m http.server -d /srv 8000")
    try:
        registrar = read_key_file(GENESIS / "registrar.key")
        for runner in ("runner-1", "runner-2"):
            address = _podman("exec", f"watchtower_{runner}_1", "python", "-c",
                              f"from watchtower.cli.runner_cmd import runner_address; print(runner_address({runner!r}))"
                              ).strip().splitlines()[-1]
            api.command(admission_command(registrar, address, runner))
        delegated = _podman("exec", "watchtower_ingest_1", "python", "-c",
                            "from watchtower.ingest.keys import ingestion_publisher_key; "
                            "print(bytes(ingestion_publisher_key().verify_key).hex())").strip().splitlines()[-1]
        ingestion = http_ingestion(url=f"http://{SOURCE}:8000/p.json",
                                   select={"price": "$.data.price", "symbol": "$.data.symbol"},
                                   num_runners=2, proof_type="QUORUM",
                                   result_schema={"type": "object", "required": ["price", "symbol"]})
        owner = _account(home, "ingest-owner")
        sid = create_feed(api, owner, name="deploy-ingested", ingestion=ingestion,
                          publisher_key_hex=delegated)["stream_id"]
        wait_until_visible(api, sid, timeout_s=TIMEOUT_S)
        deadline = time.monotonic() + 180
        while api.get_head(sid)["head_sequence"] < 3:
            if time.monotonic() > deadline:
                raise AssertionError(f"3 ingested messages not published in 180 s: {api.get_head(sid)}")
            time.sleep(2)
        got = Subscriber(api, sid, expected_owner=owner.address).poll(3)
        INGESTED["stream_id"], INGESTED["owner"] = sid, owner.address
        return (f"2 runners admitted by the genesis registrar; {len(got)} ingested messages verified under the "
                f"ingestion key: {[json.loads(m.payload_inline or b'{}') for m in got][:1]}")
    finally:
        if "stream_id" not in INGESTED:
            remove_source()


def ingestion_after_faults(api: ApiClient) -> str:
    """The ingested feed publishes three more verified messages after every fault: no runner,
    aggregator or scheduler was left wedged by a broker outage or a rebalance (QUORUM needs both
    runners)."""
    sid = INGESTED.get("stream_id")
    if sid is None:
        raise AssertionError("no ingested feed to check (its flow failed or did not run)")
    start = int(api.get_head(sid)["head_sequence"])
    deadline = time.monotonic() + 180
    while (head := int(api.get_head(sid)["head_sequence"])) < start + 3:
        if time.monotonic() > deadline:
            raise AssertionError(f"the ingested feed went from {start} to {head} in 180 s after the faults")
        time.sleep(2)
    newest = Subscriber(api, sid, cursor=start, expected_owner=INGESTED["owner"]).poll(3)
    if len(newest) < 3:
        raise AssertionError(f"{len(newest)} verified messages after sequence {start}")
    return f"head {start} -> {head} after the faults; {len(newest)} new messages verified under the ingestion key"


def confidential_feed(api: ApiClient, home: Path) -> str:
    from watchtower.cli.demo_private import show_confidential_feed
    show_confidential_feed(api, _account(home, "private-owner"))
    return "keyloads, a member removed, a re-key"


def run_flows(check: Check, workdir: Path) -> None:
    api = ApiClient(API_URL)
    home = workdir / "home"
    home.mkdir(parents=True, exist_ok=True)
    for name, fn in (("flow: publish and read", publish_and_read), ("flow: paid feed, purchase, decrypt", paid_feed),
                     ("flow: replay beyond the window", replay_beyond_the_window),
                     ("flow: push over SSE", push_over_sse), ("flow: ingested feed", ingested_feed),
                     ("flow: confidential feed", confidential_feed)):
        check(name, lambda fn=fn: fn(api, home))  # type: ignore[misc]
