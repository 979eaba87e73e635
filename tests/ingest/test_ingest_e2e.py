"""Timer-driven ingestion end to end on the real broker: the Faust scheduler, three runner processes
(one lying), the aggregator and the stream actor, with a local HTTP source that the test switches
through an outage, a schema mismatch, a disagreement, an oversized answer and a hang.

What must hold, whatever the timing: every message is verified by the SDK under the delegated key
and carries a distinct ``ingest_tick``; every tick up to the last finished one was either published
once or recorded once as IngestFailed (no tick published twice, none skipped without a record);
sequences stay gapless and failed ticks consume none; the liar's value is never published; each
failure path shows up with its own reason; forged tasks and results are quarantined and counted.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from ingest_harness import PriceSource, health, ingest_failures, serve_source, wait_for
from stack_fixture import start_stack
from tiers import scale

from watchtower.client.account import Account
from watchtower.client.http import ApiClient
from watchtower.client.sdk import create_feed, wait_until_visible
from watchtower.client.subscriber import Subscriber
from watchtower.ingest import keys
from watchtower.ingest.runner import now_height
from watchtower.local.stack import ServiceSet
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.ingestion.records import IngestResult, IngestTask, new_result
from watchtower.protocol.partitioning import partition_for_key
from watchtower.protocol.stream.state import INGEST_FAILED, Event
from watchtower.schemas.ingest_records import (
    batch_results,
    decode_results,
    encode_result,
    encode_result_batch,
    encode_task,
    encode_task_batch,
)
from watchtower.schemas.wire import decode_event
from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.reader import read_committed

pytestmark = pytest.mark.integration

RESULT_SCHEMA = {"type": "object", "required": ["price", "symbol"],
                 "properties": {"price": {"type": "number"}, "symbol": {"type": "string"}}}


class Env:
    def __init__(self, services: ServiceSet, home: Path, source: PriceSource, url: str) -> None:
        self.services, self.home, self.source, self.url = services, home, source, url
        self.api = ApiClient(services.api_url)
        self.stream_id = ""

    def agg(self) -> dict[str, Any]:
        return health(self.services.health_file("ingest"))

    def done(self) -> int:
        return int(self.agg().get("done", {}).get(self.stream_id, 0))


@pytest.fixture(scope="module")
def env(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    home = tmp_path_factory.mktemp("ingest-home")
    source = PriceSource()
    extra = {"WATCHTOWER_HOME": str(home), "WATCHTOWER_INGEST_ALLOW_NETS": "127.0.0.1/32"}
    keys.scheduler_key(home)  # created once here; the processes read it
    with serve_source(source) as url, start_stack(kafka_bootstrap, tmp_path_factory.mktemp("ingest-logs")) as services:
        for name, lie in (("r1", False), ("r2", False), ("liar", True)):
            services.start_runner(name, lie=lie, extra_env=extra)
        services.start_ingest(extra_env=extra)
        e = Env(services, home, source, url)
        wait_for("three registered runners", lambda: len(e.agg().get("runners", [])) == 3, 90)
        yield e


def test_quorum_ingestion_end_to_end(env: Env) -> None:
    owner = Account(nacl.signing.SigningKey.generate(), home=env.home)
    delegated = keys.ingestion_publisher_key(env.home)  # the key the owner delegates to ingestion
    ingestion = {"enabled": True, "interval_blocks": 1, "num_runners": 3, "proof_type": "QUORUM",
                 "transform_method": "price_batch", "result_schema": RESULT_SCHEMA,
                 "task_definition": {"kind": "http_json", "url": env.url, "timeout_ms": 4000, "timeout_blocks": 2,
                                     "max_bytes": 4096, "select": {"price": "$.data.price",
                                                                   "symbol": "$.data.symbol"}}}
    reply = create_feed(env.api, owner, name="btc-ingest", publisher_key_hex=bytes(delegated.verify_key).hex(),
                        ingestion=ingestion)
    env.stream_id = reply["stream_id"]
    wait_until_visible(env.api, env.stream_id)
    true_prices = set()

    def published() -> int:
        return int(env.agg().get("published", 0))

    def failed(reason: str) -> int:
        return int(env.agg().get("failed", {}).get(reason, 0))

    def ok_phase(n: int) -> None:
        env.source.price += 10
        true_prices.add(env.source.price)
        env.source.mode = "ok"
        start = published()
        wait_for(f"{n} published ticks at price {env.source.price}", lambda: published() >= start + n, 90)

    def bad_phase(mode: str, reason: str) -> None:
        env.source.mode = mode
        start = failed(reason)
        wait_for(f"an IngestFailed {reason} in mode {mode}", lambda: failed(reason) > start, 60)

    ok_phase(8)
    bad_phase("down", "SOURCE_UNAVAILABLE")
    ok_phase(3)
    bad_phase("schema", "SCHEMA_MISMATCH")
    ok_phase(3)
    bad_phase("split", "QUORUM_NOT_REACHED")
    ok_phase(3)
    bad_phase("big", "OVERSIZED_RESULT")
    ok_phase(3)
    bad_phase("hang", "TIMEOUT")
    ok_phase(3)
    env.source.mode = "ok"
    wait_for("32 finished ticks", lambda: env.done() >= 32, 60)

    # Every message, verified by the SDK against the owner-signed key chain (the delegated key).
    sub = Subscriber(env.api, env.stream_id, expected_owner=owner.address)
    messages = []
    while True:
        page = sub.poll(500)
        if not page:
            break
        messages.extend(page)
    assert [m.sequence for m in messages] == list(range(1, len(messages) + 1)), "gapless"
    assert {m.signing_key_id for m in messages} == {1}
    ticks = [int(m.tags["ingest_tick"]) for m in messages]
    assert ticks == sorted(set(ticks)), "each tick published at most once, in order"
    prices = set()
    for m in messages:
        batch = json.loads(m.payload_inline)
        assert m.kind == "price_batch"
        assert m.tags["count"] == 1.0
        prices.update(t["price"] for t in batch["ticks"])
    assert prices <= true_prices, f"published {prices - true_prices}: the liar's value (+1) got through"

    failures = ingest_failures(env.services.bootstrap, env.services.prefix, env.stream_id)
    fail_count = env.api.get_head(env.stream_id)["ingest_fail_count"]
    later = ingest_failures(env.services.bootstrap, env.services.prefix, env.stream_id)
    assert len(failures) <= fail_count <= len(later), "ingest_fail_count counts the IngestFailed events"
    failed_ticks = [t for e in failures for t in range(e.body.first_tick, e.body.last_tick + 1)]
    assert not set(failed_ticks) & set(ticks), "a tick both published and failed"
    assert len(failed_ticks) == len(set(failed_ticks)), "a tick reported failed twice"
    covered = sorted(t for t in set(ticks) | set(failed_ticks) if t <= ticks[-1])
    assert covered == list(range(1, ticks[-1] + 1)), "a tick vanished without a message or an IngestFailed"
    assert ticks[-1] >= 32
    reasons = {e.body.reason for e in failures}
    assert {"SOURCE_UNAVAILABLE", "SCHEMA_MISMATCH", "QUORUM_NOT_REACHED", "OVERSIZED_RESULT", "TIMEOUT"} <= reasons
    assert len(ticks) + len(failed_ticks) >= 32


def test_median_ingestion_on_the_broker_publishes_a_returned_value_where_quorum_cannot(env: Env) -> None:
    """CIP-2 MEDIAN through the real scheduler, runners and aggregator (failed before: tested only
    without a broker). Two honest runners and a liar (+1) agree: the lower median is the honest price.
    Then every runner sees another price: QUORUM would fail each tick, MEDIAN still publishes the
    lower median, a value one runner returned."""
    source = PriceSource()
    source.price = 50_000
    owner = Account(nacl.signing.SigningKey.generate(), home=env.home)
    delegated = keys.ingestion_publisher_key(env.home)
    with serve_source(source) as url:
        ingestion = {"enabled": True, "interval_blocks": 1, "num_runners": 3, "proof_type": "MEDIAN",
                     "transform_method": "price_batch", "result_schema": RESULT_SCHEMA,
                     "task_definition": {"kind": "http_json", "url": url, "timeout_ms": 4000, "timeout_blocks": 2,
                                         "max_bytes": 4096, "select": {"price": "$.data.price",
                                                                       "symbol": "$.data.symbol"}}}
        reply = create_feed(env.api, owner, name="btc-median", publisher_key_hex=bytes(delegated.verify_key).hex(),
                            ingestion=ingestion)
        sid = reply["stream_id"]
        wait_until_visible(env.api, sid)

        def head() -> int:
            return int(env.api.get_head(sid)["head_sequence"])

        wait_for("3 MEDIAN ticks published", lambda: head() >= 3, 60)
        agreed = head()
        source.mode = "split"
        wait_for("3 more MEDIAN ticks while the runners disagree", lambda: head() >= agreed + 4, 60)
        source.mode = "ok"
    sub = Subscriber(env.api, sid, expected_owner=owner.address)
    messages = []
    while page := sub.poll(500):
        messages.extend(page)
    prices = [t["price"] for m in messages for t in json.loads(m.payload_inline)["ticks"]]
    assert set(prices[:agreed]) == {50_000}, "runners agreed (the liar +1): the lower median is the honest price"
    split = [p for p in prices[agreed:] if p != 50_000]
    assert len(split) >= 2, f"MEDIAN published nothing while the runners disagreed: {prices}"
    # A split answer is 50,000 + n * 1,000 (the liar's + 1): the lower median is one of them, never a mean.
    assert all((p - 50_000) % 1_000 in (0, 1) and p > 50_000 for p in split), split
    failures = ingest_failures(env.services.bootstrap, env.services.prefix, sid)
    assert "QUORUM_NOT_REACHED" not in {e.body.reason for e in failures}


def _results_of(value: bytes | None) -> list[IngestResult]:
    record = decode_results(value)
    return [record] if isinstance(record, IngestResult) else batch_results(record)


def test_forged_tasks_and_results_are_quarantined(env: Env) -> None:
    assert env.stream_id, "runs after the end-to-end test, on its stream"
    bootstrap, prefix = env.services.bootstrap, env.services.prefix
    before = env.agg().get("quarantined", {})
    head_before = env.api.get_head(env.stream_id)["head_sequence"]
    stranger = nacl.signing.SigningKey.generate()
    # A runner's batch of results, replayed whole: every result in it is for a finished tick.
    old_value, old = next((m.value(), r) for m in read_committed(bootstrap, [topic_name("ingest-results", prefix)])
                          for r in _results_of(m.value()) if r.stream_id == env.stream_id)
    tick = env.done() + 4
    forged_task = IngestTask(stream_id=env.stream_id, tick=tick, skip_from=None, tick_height=now_height(),
                             deadline_height=now_height() + 2, task_definition_json="{}", result_schema_json="{}",
                             proof_type="NONE", num_runners=1, runners=(address_from_public_key(
                                 bytes(stranger.verify_key)),), scheduler=address_from_public_key(
                                 bytes(stranger.verify_key))).signed(stranger)
    future = IngestTask(stream_id=env.stream_id, tick=tick, skip_from=None, tick_height=0, deadline_height=0,
                        task_definition_json="{}", result_schema_json="{}", proof_type="NONE", num_runners=1,
                        runners=(), scheduler="")
    unregistered = new_result(future, stranger, result=b'{"price":1,"symbol":"BTC"}')
    wrong_task = IngestResult(b"\x00" * 32, env.stream_id, tick, old.runner, '{"price":1,"symbol":"BTC"}', None, "",
                              old.signature)
    stranger_batch = encode_task_batch([dataclasses.replace(forged_task, signature=b"")], stranger)
    tampered = bytearray(old_value)
    tampered[-70] ^= 0x01  # inside the signed results: the runner's batch signature no longer verifies
    producer = Producer(kafka_config(bootstrap))
    tasks_topic, results_topic = topic_name("ingest-tasks", prefix), topic_name("ingest-results", prefix)
    for value in (encode_task(forged_task), b"not a task", stranger_batch):
        producer.produce(tasks_topic, key=env.stream_id.encode(), value=value)
    for value in (old_value, encode_result(unregistered), encode_result(wrong_task), bytes(tampered),
                  encode_result_batch([new_result(future, stranger, result=b'{"price":1}', for_batch=True)], stranger)):
        producer.produce(results_topic, key=env.stream_id.encode(), value=value)
    producer.flush(10)

    def counts() -> dict[str, int]:
        now = env.agg().get("quarantined", {})
        return {k: now.get(k, 0) - before.get(k, 0) for k in set(now) | set(before)}

    # UNAUTHORIZED: the stranger's task, its task batch, its result and its result batch; the replayed
    # batch's results are STALE_SEQUENCE; the tampered batch is INVALID_SIGNATURE.
    wait_for("the forged records counted", lambda: counts().get("UNAUTHORIZED", 0) >= 4
             and counts().get("STALE_SEQUENCE", 0) >= 1 and counts().get("MALFORMED_RECORD", 0) >= 1
             and counts().get("INVALID_SIGNATURE", 0) >= 1, 30)
    liar = health(env.services.health_file("runner-liar"))
    assert liar.get("quarantined", {}).get("UNAUTHORIZED", 0) >= 2, liar
    wait_for("the tick after the forgeries", lambda: env.done() >= tick + 1, 30)
    messages = env.api.get_since(env.stream_id, head_before, 500)["messages"]
    prices = {json.loads(bytes.fromhex(m["payload_inline_hex"]))["ticks"][0]["price"] for m in messages}
    assert 1 not in prices, "a forged value was published"


def test_cli_creates_an_ingesting_feed_and_reports_its_status(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from watchtower.cli.main import _register, cli

    monkeypatch.setenv("WATCHTOWER_HOME", str(env.home))
    monkeypatch.setenv("WATCHTOWER_API", env.services.api_url)
    monkeypatch.setenv("WATCHTOWER_BOOTSTRAP", env.services.bootstrap)
    monkeypatch.setenv("WATCHTOWER_TOPIC_PREFIX", env.services.prefix)
    monkeypatch.delenv("WATCHTOWER_ACCOUNT", raising=False)
    monkeypatch.delenv("WATCHTOWER_KEY_FILE", raising=False)
    _register()
    Account.create("cli-owner", home=env.home)
    env.source.mode = "ok"

    def run(*args: str) -> Any:
        result = CliRunner().invoke(cli, [*args, "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    created = run("new", "feed", "--name", "cli-ingest", "--account", "cli-owner", "--ingest-url", env.url,
                  "--ingest-select", '{"price": "$.data.price", "symbol": "$.data.symbol"}', "--runners", "1",
                  "--proof", "NONE", "--transform", "price_batch", "--result-schema", json.dumps(RESULT_SCHEMA))
    assert created["ingestion"]["proof_type"] == "NONE"
    sid = created["stream_id"]
    status = wait_for("a first ingested message", lambda: (s := run("feed", sid, "ingestion", "status"))
                      ["last_success"] and s, 60)
    assert status["ingestion"]["num_runners"] == 1
    assert status["last_success"]["sequence"] >= 1
    assert status["ingest_fail_count"] == len(status["last_failures"]) == 0
    runners = run("runner", "list")["runners"]
    assert sorted(r["label"] for r in runners) == ["liar", "r1", "r2"]
    bad = CliRunner().invoke(cli, ["new", "feed", "--name", "x", "--account", "cli-owner", "--ingest-url",
                                   "file:///etc/passwd", "--json"])
    assert isinstance(bad.exception, WatchtowerError)
    assert bad.exception.code == "INVALID_ARGUMENT", "a runner never reads local files: refused before creation"


def _ingested(env: Env, stream_id: str, owner: str,
              failures: list[Event] | None = None) -> tuple[list[int], list[int]]:
    """(published ticks, in sequence order, each message verified by the SDK; failed ticks).
    `failures`: the stream's IngestFailed events, when the caller read them already."""
    sub = Subscriber(env.api, stream_id, expected_owner=owner)
    messages = []
    while page := sub.poll(500):
        messages.extend(page)
    assert [m.sequence for m in messages] == list(range(1, len(messages) + 1)), "gapless"
    ticks = [int(m.tags["ingest_tick"]) for m in messages]
    if failures is None:
        failures = ingest_failures(env.services.bootstrap, env.services.prefix, stream_id)
    return ticks, [t for e in failures for t in range(e.body.first_tick, e.body.last_tick + 1)]


def _failures_by_stream(env: Env, stream_ids: list[str]) -> dict[str, list[Event]]:
    """Every committed IngestFailed event of each of `stream_ids`, in log order: one scan of ``events``."""
    wanted = {sid.encode(): sid for sid in stream_ids}
    out: dict[str, list[Event]] = {sid: [] for sid in stream_ids}
    for msg in read_committed(env.services.bootstrap, [topic_name("events", env.services.prefix)]):
        sid = wanted.get(msg.key() or b"")
        if sid is not None:
            event = decode_event(msg.value())
            if event.type == INGEST_FAILED:
                out[sid].append(event)
    return out


def _exactly_once(env: Env, stream_id: str, owner: str, failures: list[Event] | None = None) -> int:
    """Every tick up to the last published one ended as exactly one message or one IngestFailed;
    the number of ticks published."""
    ticks, failed = _ingested(env, stream_id, owner, failures)
    assert ticks == sorted(set(ticks)), f"{stream_id}: a tick was published twice or out of order"
    assert len(failed) == len(set(failed)), f"{stream_id}: a tick was reported failed twice"
    assert not set(ticks) & set(failed), f"{stream_id}: a tick was both published and reported failed"
    covered = sorted(t for t in set(ticks) | set(failed) if t <= ticks[-1])
    assert covered == list(range(1, ticks[-1] + 1)), f"{stream_id}: a tick was skipped without an IngestFailed"
    return len(ticks)


@pytest.mark.soak
def test_scale_out_and_kill_9_finish_every_tick_exactly_once(env: Env) -> None:
    """Feeds keep ticking while a second aggregator and a fourth runner join (the feeds are shared
    by stream), and while the scheduler + aggregator, the second aggregator and a runner are each
    killed with kill -9 and started again: no tick is published twice or lost."""
    owner = Account(nacl.signing.SigningKey.generate(), home=env.home)
    delegated = keys.ingestion_publisher_key(env.home)
    env.source.mode = "ok"
    ingestion = {"enabled": True, "interval_blocks": 1, "num_runners": 3, "proof_type": "QUORUM",
                 "result_schema": RESULT_SCHEMA, "transform_method": "price_batch",
                 "task_definition": {"kind": "http_json", "url": env.url, "timeout_blocks": 2,
                                     "select": {"price": "$.data.price", "symbol": "$.data.symbol"}}}
    # Stream ids chosen so that the feeds cover every partition of ingest.tasks: each aggregator
    # then holds some feeds, whichever partitions the group gives it.
    t_tasks = topic_name("ingest-tasks", env.services.prefix)
    partitions = len(AdminClient(kafka_config(env.services.bootstrap)).list_topics(t_tasks, timeout=30)
                     .topics[t_tasks].partitions)
    tag = uuid.uuid4().hex[:8]
    ids = [f"scale-{tag}-{i}" for i in range(scale(1_000, 2_000))]
    chosen = [next(sid for sid in ids if partition_for_key(sid.encode(), partitions) == p) for p in range(partitions)]
    chosen += [sid for sid in ids if sid not in chosen][: max(0, scale(4, 500) - len(chosen))]
    feeds = [create_feed(env.api, owner, name=sid, stream_id=sid, publisher_key_hex=bytes(delegated.verify_key).hex(),
                         ingestion=ingestion)["stream_id"] for sid in chosen]
    for sid in feeds:
        wait_until_visible(env.api, sid)
    extra = {"WATCHTOWER_HOME": str(env.home), "WATCHTOWER_INGEST_ALLOW_NETS": "127.0.0.1/32"}
    n = scale(3, 12)  # messages per feed between the faults (CI: enough that each fault lands mid-run; soak: 60 s)

    def heads() -> list[int]:
        return [int(env.api.get_head(sid)["head_sequence"]) for sid in feeds]

    def advance(what: str) -> None:
        at = heads()
        wait_for(f"{n} more messages on every feed after {what}",
                 lambda: all(h >= a + n for h, a in zip(heads(), at, strict=True)), 120)

    advance("the start")
    env.services.start_ingest(extra_env=extra, name="ingest-b", role="aggregator")
    env.services.start_runner("r4", extra_env=extra)
    def holders() -> list[Any]:
        return [health(env.services.health_file(name)).get("partitions") for name in ("ingest", "ingest-b")]

    wait_for("both aggregators holding partitions", lambda: all(holders()), 90)
    wait_for("four registered runners", lambda: len(env.agg().get("runners", [])) == 4, 60)
    advance("a second aggregator and a fourth runner joined")
    published_b = int(health(env.services.health_file("ingest-b")).get("published", 0))
    assert published_b > 0, "the second aggregator took a share of the feeds"

    env.services.kill9("ingest")  # the scheduler and an aggregator, mid-run
    env.services.start_ingest(extra_env=extra)
    advance("kill -9 of the scheduler and an aggregator")
    env.services.kill9("ingest-b")
    env.services.start_ingest(extra_env=extra, name="ingest-b", role="aggregator")
    advance("kill -9 of the second aggregator")
    env.services.kill9("runner-r1")
    env.services.start_runner("r1", extra_env=extra)
    advance("kill -9 of a runner")
    env.services.kill9("ingest-b")  # the service's aggregator takes its feeds back (r4 stays: it is registered)

    failures = _failures_by_stream(env, feeds)
    published = sum(_exactly_once(env, sid, owner.address, failures[sid]) for sid in feeds)
    assert published >= len(feeds) * 5 * n


def test_a_kafka_topic_feeds_a_stream_and_deployment_topics_are_refused(env: Env) -> None:
    import threading
    import uuid

    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap, prefix = env.services.bootstrap, env.services.prefix
    topic = f"user-{uuid.uuid4().hex[:8]}.trades"
    admin = AdminClient(kafka_config(bootstrap))
    for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        future.result(30)
    stop = threading.Event()
    produced: list[int] = []

    def produce() -> None:
        producer = Producer(kafka_config(bootstrap))
        n = 0
        while not stop.is_set():
            n += 1
            producer.produce(topic, key=str(n % 2).encode(), value=json.dumps({"trade": {"id": n, "px": 100}}))
            produced.append(n)
            producer.poll(0)
            stop.wait(0.2)
        producer.flush(10)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    owner = Account(nacl.signing.SigningKey.generate(), home=env.home)
    delegated = bytes(keys.ingestion_publisher_key(env.home).verify_key).hex()
    config = {"enabled": True, "interval_blocks": 1, "num_runners": 3, "proof_type": "QUORUM",
              "result_schema": {"type": "object", "required": ["records", "count"]},
              "task_definition": {"kind": "kafka_topic", "topic": topic, "select": "$.trade.id", "timeout_blocks": 3}}
    try:
        sid = create_feed(env.api, owner, name="from-kafka", publisher_key_hex=delegated, ingestion=config)["stream_id"]
        own = {**config, "task_definition": {**config["task_definition"], "topic": f"{prefix}.keymgr.state"}}
        refused = create_feed(env.api, owner, name="own-topic", publisher_key_hex=delegated, ingestion=own)["stream_id"]
        wait_until_visible(env.api, sid)
        wait_for("4 messages from the topic", lambda: env.api.get_head(sid)["head_sequence"] >= 4, 60)
        wait_for("the deployment's topic refused", lambda: env.api.get_head(refused)["ingest_fail_count"] >= 1, 60)
    finally:
        stop.set()
        thread.join(10)
    sub = Subscriber(env.api, sid, expected_owner=owner.address)
    seen: list[int] = []
    for msg in sub.poll(100):
        body = json.loads(msg.payload_inline)
        assert body["count"] == len(body["records"])
        seen.extend(body["records"])
    assert seen, "the windows held records"
    assert len(seen) == len(set(seen)), "consecutive windows never share a record"
    assert set(seen) <= set(produced), "only produced records, never the liar's (+1) ids beyond them"
    assert env.api.get_head(refused)["head_sequence"] == 0, "nothing of the deployment's own topic was published"
    failures = ingest_failures(bootstrap, prefix, refused)
    assert {e.body.reason for e in failures} == {"SOURCE_UNAVAILABLE"}
    assert "belongs to the deployment" in failures[0].body.detail
