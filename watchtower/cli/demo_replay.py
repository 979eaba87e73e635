"""The demo's replay story: a range that left the ring window comes back, verified, through the
replay service and through Spark, and a priced replay is paid through the CBY ledger.

1. A feed with a ring of 50 takes 150 publishes; a new reader's cursor 0 is CURSOR_TOO_OLD,
   and the error carries the ready ICRC-77 request for the pruned range.
2. The reader registers ``[1, 151)``; the replay worker re-emits the archive to its deliveries
   with the ``icrc77:*`` headers, and the SDK verifies every message against the owner's key chain.
3. An open-ended replay with a filter and a skip rule (``end_id`` tells the reader where it ends).
4. A subscriber that opts in crosses CURSOR_TOO_OLD by replaying the gap: 1..150, no hole.
5. The owner prices replays; a request without payment is PAYMENT_REQUIRED with the price, a paid
   one moves the price from the reader to the owner once.
6. The replay worker is killed (kill -9); a replay registered meanwhile is fulfilled by Spark from
   the same archive, and it delivers exactly what the service delivered. ``spark verify`` checks the
   whole archive in bulk. The restarted worker leaves the Spark replay alone.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import click
import nacl.signing

from watchtower.cli.demo_wait import STEP_TIMEOUT_S, DemoStepError, topic_partitions, wait_worker_serving
from watchtower.client.account import Account
from watchtower.client.http import ApiClient
from watchtower.client.ledger import Ledger
from watchtower.client.replay import ReplayClient, ReplayTicket
from watchtower.client.sdk import Publisher, create_feed, wait_until_visible
from watchtower.client.subscriber import Subscriber
from watchtower.local.stack import ServiceSet
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.stream.message import StreamMessage
from watchtower.topics.catalogue import topic_name

RING = 50
PUBLISHED = 150
PRICE_PER_EVENT = 2


def _refused(label: str, call: Callable[[], object]) -> WatchtowerError:
    try:
        call()
    except WatchtowerError as exc:
        click.echo(f"  refused as it should be: {label}: {exc.code}: {exc.message}")
        return exc
    raise click.ClickException(f"{label} was accepted; the demo expected a refusal")


def _read(client: ReplayClient, ticket: ReplayTicket) -> list[StreamMessage]:
    return list(client.messages(ticket, timeout_s=max(300.0, STEP_TIMEOUT_S)))


def show_replay(api: ApiClient, services: ServiceSet, minter: Account, replay_worker: str) -> None:
    """Run the replay story (module docstring) against a running stack with a replay worker."""
    home = minter.home
    owner, reader = (Account(nacl.signing.SigningKey.generate(), name=f"replay-{n}", home=home)
                     for n in ("owner", "reader"))
    click.secho(f"  -- a ring of {RING} and {PUBLISHED} publishes: most of the feed lives only in the archive",
                bold=True)
    key = nacl.signing.SigningKey.generate()
    created = create_feed(api, owner, name="replayed-ticks", publisher_key_hex=bytes(key.verify_key).hex(),
                          ring_buffer_capacity=RING)
    sid, feed_id = created["stream_id"], created["feed_id"]
    wait_until_visible(api, sid, feed_id=feed_id, timeout_s=STEP_TIMEOUT_S)
    publisher = Publisher(api, owner, sid, key)
    t0 = time.monotonic()
    for i in range(1, PUBLISHED + 1):
        publisher.publish("tick", json.dumps({"i": i}).encode(), {"side": "buy" if i % 2 else "sell", "n": float(i)})
    wait_until_visible(api, sid, min_head=PUBLISHED, timeout_s=STEP_TIMEOUT_S)
    head = api.get_head(sid)
    click.echo(f"  feed {feed_id}: {PUBLISHED} publishes in {time.monotonic() - t0:.1f}s; window "
               f"{head['floor_sequence']}..{head['head_sequence']}")
    err = _refused("a new reader at cursor 0", lambda: Subscriber(api, sid, expected_owner=owner.address).poll())
    ready = dict(err.details or {}).get("replay")
    if isinstance(ready, dict):
        click.echo(f"  its details carry the ready replay request: {ready['body']['from']}..{ready['body']['to']} "
                   f"(exclusive), price {ready['price_cby']} CBY")

    click.secho(f"  -- ICRC-77 replay of [1, {PUBLISHED + 1}) by the replay service, every message verified", bold=True)
    client = ReplayClient(reader, api, services.bootstrap, prefix=services.prefix, expected_owner=owner.address)
    ticket = client.register(feed_id, 1, PUBLISHED + 1)
    service_set = _read(client, ticket)
    seqs = [m.sequence for m in service_set]
    status = client.status(ticket.replay_id)
    click.echo(f"  replay {ticket.replay_id}: {len(seqs)} messages {seqs[0]}..{seqs[-1]}, ascending and "
               f"gapless: {seqs == list(range(1, PUBLISHED + 1))}; status {status['status']}, "
               f"engine {status['stats']['engine']}")

    click.secho("  -- open-ended, with a filter (side = buy) and a skip rule (every 5th)", bold=True)
    buys = {"field": "tags.side", "op": "eq", "value": "buy"}
    open_ended = client.register(feed_id, PUBLISHED - 49, filter=buys, skip=[5, 1])
    picked = [m.sequence for m in _read(client, open_ended)]
    click.echo(f"  end_id {open_ended.end_id} (the head when it was registered): delivered {picked[:6]}… "
               f"({len(picked)} messages)")

    click.secho("  -- CURSOR_TOO_OLD crossed by a subscriber that opts in to replay the gap", bold=True)
    follower = Subscriber(api, sid, expected_owner=owner.address, replay_on_cursor_too_old=True, replay_client=client)
    got: list[int] = []
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while follower.cursor < PUBLISHED:
        if time.monotonic() > deadline:
            raise DemoStepError("replay: a subscriber crosses CURSOR_TOO_OLD", f"its cursor is at {follower.cursor} "
                                f"of {PUBLISHED} after {STEP_TIMEOUT_S:.0f}s", logs=services.log_dir)
        got.extend(m.sequence for m in follower.poll_page(100, min_head=PUBLISHED, wait_ms=2000).messages)
    click.echo(f"  the subscriber read {len(got)} messages, 1..{got[-1]} without a gap: "
               f"{got == list(range(1, PUBLISHED + 1))}")

    click.secho(f"  -- a priced replay: {PRICE_PER_EVENT} CBY an event, paid through the ledger", bold=True)
    api.command(owner.sign("set_replay_price", sid, {"price_per_event_cby": PRICE_PER_EVENT}))
    _refused("a replay of 50 events without payment", lambda: client.register(feed_id, 1, 51))
    ledger = Ledger(api, reader)
    Ledger(api, minter).mint_cby(reader.address, 1_000)
    ledger.wait_for_balance(reader.address, 1_000, timeout_s=STEP_TIMEOUT_S)
    paid = client.register(feed_id, 1, 51, max_payment_cby=50 * PRICE_PER_EVENT)
    owner_balance = ledger.wait_for_balance(owner.address, 50 * PRICE_PER_EVENT, timeout_s=STEP_TIMEOUT_S)
    click.echo(f"  replay {paid.replay_id} charged {paid.price_cby} CBY: reader 1000 -> {ledger.balance()}, "
               f"owner 0 -> {owner_balance}; {len(_read(client, paid))} messages delivered")
    api.command(owner.sign("set_replay_price", sid, {"price_per_event_cby": 0}))

    _spark_part(api, services, client, feed_id, sid, service_set, replay_worker)


def _spark_part(api: ApiClient, services: ServiceSet, client: ReplayClient, feed_id: int, sid: str,
                service_set: list[StreamMessage], replay_worker: str) -> None:
    from watchtower.local.jars import spark_jars
    from watchtower.spark.replay_job import run_replay
    from watchtower.spark.session import local_session
    from watchtower.spark.verify import verified_schedule, verify_stream

    click.secho("  -- the replay worker is killed (kill -9); Spark fulfils a replay of the same range", bold=True)
    services.kill9(replay_worker)
    spark_ticket = client.register(feed_id, 1, PUBLISHED + 1)
    t0 = time.monotonic()
    spark = local_session("watchtower-demo-replay", master="local[2]", jars=spark_jars())
    try:
        result = run_replay(spark, services.bootstrap, sid, spark_ticket.replay_id, prefix=services.prefix)
        spark_set = _read(client, spark_ticket)
        same = [(m.sequence, m.payload_inline, m.publisher_sig) for m in spark_set] == [
            (m.sequence, m.payload_inline, m.publisher_sig) for m in service_set]
        click.echo(f"  Spark replay {spark_ticket.replay_id}: {result.status}, {result.delivered} delivered in "
                   f"{time.monotonic() - t0:.1f}s; the same records as the service's replay: {same}")
        report = verify_stream(spark, services.bootstrap, sid, verified_schedule(api, sid), prefix=services.prefix)
        click.echo(f"  spark verify: {report.verified}/{report.messages} signatures and payload hashes verified, "
                   f"gaps {report.gaps or 'none'}, first bad sequence {report.first_bad_sequence}")
    finally:
        spark.stop()
    restarted = services.start_replay("demo-r2")
    # It has looked at every replay once it holds its partitions (restored from the log): wait for that.
    partitions = topic_partitions(services.bootstrap, topic_name("replay", services.prefix))
    health = wait_worker_serving("replay: the restarted replay worker takes its partitions",
                                 services.health_file(restarted), partitions, logs=services.log_dir)
    click.echo(f"  replay worker restarted (partitions {health['partitions']}); replay {spark_ticket.replay_id} "
               f"stays {client.status(spark_ticket.replay_id)['status']} (Spark's), nothing delivered twice")
