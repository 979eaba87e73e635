"""The demo's stream-actor part: the whole stack, then a feed driven through the SDK and the CLI."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click
import nacl.signing

from watchtower.cli.demo_paid import show_paid_feed
from watchtower.cli.demo_private import show_confidential_feed
from watchtower.cli.demo_replay import show_replay
from watchtower.cli.demo_trust import show_client_side_trust
from watchtower.cli.demo_wait import STEP_TIMEOUT_S, DemoStepError, demo_step
from watchtower.cli.genesis import ENV_PROTOCOL_TREASURY, ensure_genesis
from watchtower.cli.json_output import json_text
from watchtower.cli.message_log import read_committed_messages
from watchtower.client.account import Account, read_key_file
from watchtower.client.http import ApiClient
from watchtower.client.keymgr import KeyManagerClient
from watchtower.client.sdk import Publisher, create_feed, wait_until_visible
from watchtower.client.stream_api import with_spec_names
from watchtower.client.subscriber import Subscriber
from watchtower.local.paths import watchtower_home
from watchtower.local.stack import ServiceSet
from watchtower.metrics.lag import stack_lag
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.signing import verify_with_schedule
from watchtower.topics.catalogue import topic_prefix

BTC_ONLY = {"field": "tags.symbol", "op": "eq", "value": "BTC"}


def _free_port(preferred: int) -> int:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", preferred))
            return preferred
        except OSError:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])


def _refused(label: str, call: object) -> None:
    try:
        call()  # type: ignore[operator]
        click.echo(f"  {label}: unexpectedly accepted")
    except WatchtowerError as err:
        click.echo(f"  {label}: refused [{err.code}] {err.message}")


def run_stream_demo(bootstrap: str) -> None:
    """Start a stream worker and the projection/API worker, drive feeds through them, stop them."""
    home = Path(tempfile.mkdtemp(prefix="wt-demo-"))
    services = ServiceSet(bootstrap, topic_prefix(), home / "logs", api_port=_free_port(8470))
    # The demo deployment's genesis (docs/deployment.md): the protocol treasury, the CBY minter and the
    # key manager's KEK, created once beside the demo broker's data and reused by every later run, so a
    # second demo opens the master seeds the first one wrapped (the topics outlive one run).
    genesis = ensure_genesis(watchtower_home() / "local" / "demo")
    os.environ.update(genesis.worker_env())
    minter = Account(read_key_file(genesis.minter_key_path), name="demo-minter", home=home)
    kek_file = genesis.kek_path
    services.start_worker("demo-w1")
    services.start_projection("demo-p1")
    services.start_keymgr(_free_port(8472), kek_file)
    replay_worker = services.start_replay("demo-r1")
    logs = services.log_dir
    try:
        t0 = time.monotonic()
        with demo_step("stream: start the stream worker, the HTTP API and the key manager", logs=logs):
            services.wait_ready(STEP_TIMEOUT_S)
            services.wait_keymgr(STEP_TIMEOUT_S)
        click.echo(f"  stream worker + projection worker up; HTTP API {services.api_url} "
                   f"(OpenAPI at /openapi.json), key manager {services.keymgr_url} after {time.monotonic() - t0:.1f}s")
        api = ApiClient(services.api_url)
        with demo_step("stream: feeds, rotation, filters, allowlist, ring and the CLI", logs=logs):
            _drive(api, services, home)
        with demo_step("paid feed: encrypt, purchase, decrypt", logs=logs):
            show_paid_feed(api, KeyManagerClient(services.keymgr_url), minter, os.environ[ENV_PROTOCOL_TREASURY])
        with demo_step("confidential private feed: keyloads, a member removed, a re-key", logs=logs):
            show_confidential_feed(api, Account(nacl.signing.SigningKey.generate(), name="demo-private-owner",
                                                home=home))
        with demo_step("replay: beyond the window, by the service and by Spark", logs=logs):
            show_replay(api, services, minter, replay_worker)
        with demo_step("operations: every process's metrics, and the lag", logs=logs):
            show_operations(services)
    finally:
        services.stop()


def show_operations(services: ServiceSet) -> None:
    """Each process's Prometheus address, and one line of lag (docs/operations.md)."""
    click.secho("  -- operations: Prometheus metrics of every process, and the lag `watchtower status` reads",
                bold=True)
    urls = {name: services.metrics_url(name) for name in sorted(services.procs)}
    for name, url in urls.items():
        click.echo(f"  {name:20} {url or '(no metrics address yet)'}")
    projections = {name: url for name, url in urls.items() if name.startswith("projection-")}
    report = stack_lag(services.bootstrap, services.prefix, projections)
    # Only the groups of the workers this step runs (the push step runs the delivery worker).
    running = {"stream-actor": "worker-", "delivery-worker": "delivery-", "replay-worker": "replay-"}
    shown = [g for g in report["groups"]
             if any(kind in g["group"] and any(n.startswith(p) for n in urls) for kind, p in running.items())]
    groups = ", ".join(f"{g['group']} {g['lag'] if 'lag' in g else g['error']}" for g in shown)
    folds = ", ".join(f"{name} {view['records']} records / {view['seconds']}s" if "records" in view
                      else f"{name} {view['error']}" for name, view in report["projections"].items())
    click.echo(f"  lag: consumer groups (records) {groups}; projection fold lag {folds}")


def _drive(api: ApiClient, services: ServiceSet, home: Path) -> None:
    owner = Account(nacl.signing.SigningKey.generate(), name="demo-owner", home=home)
    stranger, friend = (Account(nacl.signing.SigningKey.generate(), home=home) for _ in range(2))
    key1 = nacl.signing.SigningKey.generate()

    click.secho("  -- a feed created and listed in the registry", bold=True)
    created = create_feed(api, owner, name="btc-usd", description="demo prices",
                          publisher_key_hex=bytes(key1.verify_key).hex())
    sid, feed_id = created["stream_id"], created["feed_id"]
    wait_until_visible(api, sid, feed_id=feed_id, timeout_s=STEP_TIMEOUT_S)
    click.echo(f"  feed {feed_id} = stream {sid}, owner {owner.address[:14]}…")

    click.secho("  -- signed messages published, then pulled and verified", bold=True)
    pub = Publisher(api, owner, sid, key1)
    t0 = time.monotonic()
    for i in range(1, 7):
        symbol = "BTC" if i % 2 else "ETH"
        pub.publish("price", json.dumps({"symbol": symbol, "p": 97000 + i}).encode(), tags={"symbol": symbol})
    click.echo(f"  6 publishes acknowledged in {time.monotonic() - t0:.2f}s (head {pub.head})")
    sub = Subscriber(api, sid)
    wait_until_visible(api, sid, min_head=6, timeout_s=STEP_TIMEOUT_S)
    got = sub.poll_page(100, min_head=6, wait_ms=5000).messages
    click.echo(f"  pulled sequences {[m.sequence for m in got]}, each verified against the key schedule")

    click.secho("  -- a key rotation, with messages on both sides of it verified", bold=True)
    key2 = nacl.signing.SigningKey.generate()
    rotated = pub.rotate_key(key2)
    wait_until_visible(api, sid, signing_key_id=rotated["signing_key_id"], timeout_s=STEP_TIMEOUT_S)
    for i in range(7, 10):
        pub.publish("price", json.dumps({"symbol": "BTC", "p": 97000 + i}).encode(), tags={"symbol": "BTC"})
    wait_until_visible(api, sid, min_head=9, timeout_s=STEP_TIMEOUT_S)
    after = sub.poll_page(100, min_head=9, wait_ms=5000).messages
    schedule = sub.key_schedule(refresh=True)
    click.echo(f"  key {rotated['signing_key_id']} signs from sequence {rotated['effective_sequence']}; "
               f"pulled {[(m.sequence, m.signing_key_id) for m in after]} (sequence, key id), all verified")
    everything = api.get_since(sid, 0, 500)["messages"]
    click.echo(f"  whole window re-verified: {len(everything)} messages under {len(schedule.entries)} keys")

    click.secho("  -- a filter at work (header-only CIP-7 filter DSL)", bold=True)
    btc = Subscriber(api, sid, filter=BTC_ONLY).poll(100)
    click.echo(f"  filter {json_text(BTC_ONLY, line=True)} -> sequences {[m.sequence for m in btc]}")

    show_client_side_trust(api, owner, sid, BTC_ONLY)

    click.secho("  -- a private allowlist refusing a stranger", bold=True)
    api.command(owner.sign("set_subscription_policy", sid, {"policy": "PRIVATE_ALLOWLIST"}))
    api.command(owner.sign("allowlist_add", sid, {"address": friend.address}))
    _refused("stranger subscribes", lambda: api.command(stranger.sign("subscribe", sid, {"mode": "PULL"})))
    # CIP-7: non-allowlisted addresses MUST fail, the owner's included.
    _refused("owner subscribes before listing itself",
             lambda: api.command(owner.sign("subscribe", sid, {"mode": "PULL"})))
    ok = api.command(friend.sign("subscribe", sid, {"mode": "PULL", "filter": BTC_ONLY}))
    click.echo(f"  allowlisted friend subscribes: ok (created at sequence {ok.get('created_at_sequence')})")
    _refused("stranger publishes", lambda: api.command(stranger.sign("publish", sid, {})))
    _refused("stale expected sequence", lambda: pub.publish("price", b"{}", sequence=3))

    click.secho("  -- CURSOR_TOO_OLD on a small ring", bold=True)
    small_key = nacl.signing.SigningKey.generate()
    small = create_feed(api, owner, name="small-ring", publisher_key_hex=bytes(small_key.verify_key).hex(),
                        ring_buffer_capacity=5)
    wait_until_visible(api, small["stream_id"], feed_id=small["feed_id"], timeout_s=STEP_TIMEOUT_S)
    small_pub = Publisher(api, owner, small["stream_id"], small_key)
    for i in range(12):
        small_pub.publish("tick", json.dumps({"i": i}).encode())
    head = with_spec_names(wait_until_visible(api, small["stream_id"], min_head=12, timeout_s=STEP_TIMEOUT_S))
    click.echo(f"  feed {small['feed_id']}: 12 published into a ring of 5 -> "
               f"floor_sequence {head['floor_sequence']}, head_sequence {head['head_sequence']}")
    _refused("get_since(cursor=0)", lambda: api.get_since(small["stream_id"], 0, 10))

    click.secho("  -- a subscriber-paid feed: the protocol treasury is the deployment's", bold=True)
    paid = {"fee_per_key_epoch_cby": 10, "protocol_fee_bps": 250, "publisher_treasury": owner.address}
    paid_feed = create_feed(api, owner, name="paid-prices", publisher_key_hex=bytes(key1.verify_key).hex(),
                            access_mode="SUBSCRIBER_PAID", paid_stream_config=paid)
    wait_until_visible(api, paid_feed["stream_id"], feed_id=paid_feed["feed_id"], timeout_s=STEP_TIMEOUT_S)
    terms = api.stream_info(paid_feed["stream_id"])["config"]["paid_stream_config"]
    click.echo(f"  feed {paid_feed['feed_id']}: protocol_treasury {terms['protocol_treasury'][:14]}… "
               f"(set by the deployment), publisher_treasury {terms['publisher_treasury'][:14]}…")
    _refused("a creator choosing its own protocol treasury", lambda: create_feed(
        api, owner, name="greedy", publisher_key_hex=bytes(key1.verify_key).hex(), access_mode="SUBSCRIBER_PAID",
        paid_stream_config={**paid, "protocol_treasury": owner.address}))

    click.secho("  -- the same system from the `watchtower` CLI", bold=True)
    env = {**os.environ, "WATCHTOWER_API": services.api_url, "WATCHTOWER_HOME": str(home)}
    for args in (["list"], ["feed", str(feed_id), "get-head"], ["feed", str(feed_id), "subscribers"]):
        try:
            out = subprocess.run([sys.executable, "-m", "watchtower.cli", *args], env=env, capture_output=True,
                                 text=True, timeout=STEP_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise DemoStepError(f"stream: `watchtower {' '.join(args)}`",
                                f"the CLI did not answer within {STEP_TIMEOUT_S:.0f}s") from None
        click.echo(f"  $ watchtower {' '.join(args)}")
        for line in (out.stdout or out.stderr).rstrip().splitlines():
            click.echo(f"    {line}")

    click.secho("  -- verified again straight from the Kafka log (what Spark reads)", bold=True)
    messages = read_committed_messages(services.bootstrap, prefix=services.prefix, stream_id=sid)
    valid = all(verify_with_schedule(m, schedule) for m in messages)
    click.echo(f"  {len(messages)} messages on the messages topic, sequences 1..{messages[-1].sequence}, "
               f"every signature valid: {valid}")
