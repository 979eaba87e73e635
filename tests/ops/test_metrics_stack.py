"""Every service's ``/metrics`` on a real stack, read with prometheus_client's own parser, moves with traffic.

One module stack: a stream worker, a projection (reads only), the command gateway, the key
manager, the replay worker and the push delivery worker. Each process writes the URL of its
``/metrics`` (a port the OS picked) next to its log. The test then

- reads every page with `text_string_to_metric_families`: build info names the service, the
  process collector reports RSS and open fds, and no label value is a stream id, an address or an
  unbounded text (`bounded_labels`);
- publishes N messages through the gateway: the worker's ``publish``/``ok`` counter rises by
  exactly N, the projection folds them and its lag returns to 0 records and 0 s on every
  partition (the events and messages topics are transactional: a lag stuck at 1 would be a commit
  marker counted as a record), the worker's and the delivery worker's consumer lag read 0, and
  ``get_since`` is counted under its route pattern;
- writes malformed records straight to ``commands`` while the worker is stopped (SIGSTOP): the
  group's lag, as `watchtower status` reads it, is exactly those records, the log ends agree with
  the committed offsets plus that lag; after SIGCONT the worker refuses them and its counter with
  outcome ``MALFORMED_RECORD`` rises by exactly that many, and the lag returns to 0;
- asks the key manager for epoch keys it must refuse: its counter rises under the refusal's code;
- stops the delivery worker (SIGSTOP) and publishes: the stream worker's
  ``watchtower_consumer_group_lag_records`` of the delivery group rises above 0 while the stopped
  worker serves nothing, and reads 0 again after SIGCONT;
- runs every process with ``WATCHTOWER_TRACES=file:...`` and publishes once with a caller's
  ``traceparent``: the gateway, the worker, the projection and the delivery worker each write a
  span of that one trace id, each hop's parent the span of the hop before it; and publishes once
  through the SDK from an application process with its own tracer provider and span: five
  processes write spans of that trace, the gateway's parent the application's span;
- starts Debian's Prometheus (skipped when it is not installed) on the processes' file-discovery
  targets with the repo's alert rules: every target is up, every rule loads and evaluates, and
  after 100 publishes Prometheus's own query of the publish counter has risen by exactly 100.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
import yaml
from api_calls import Caller, http, wait_for
from confluent_kafka import Producer
from kafka_fixture import free_ports
from stack_fixture import start_stack

from watchtower.client.account import Account
from watchtower.client.http import ApiClient
from watchtower.client.sdk import Publisher
from watchtower.keymgr.kek import Kek, new_kek_text
from watchtower.local.stack import KEYMGR_NAME, ServiceSet
from watchtower.metrics import lag
from watchtower.metrics.targets import target_groups
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.partitioning import partition_for_key
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.signing import sign_message
from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.group_lag import group_lag
from watchtower.topics.groups import projection_fold_group, worker_group

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

PARTITIONS = 3
PUBLISHES = 20
MALFORMED = 5
SERVICES = {"worker-w1": "worker", "projection-p1": "projection", "gateway-g1": "gateway",
            KEYMGR_NAME: "keymgr", "replay-r1": "replay", "delivery-d1": "delivery"}

Samples = dict[str, list[tuple[dict[str, str], float]]]


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceSet]:
    log_dir = tmp_path_factory.mktemp("ops-stack")
    kek_file = log_dir / "kek.key"
    kek_file.write_text(new_kek_text())
    kek_file.chmod(0o600)
    kek = Kek(bytes.fromhex(kek_file.read_text()))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("WATCHTOWER_KEYMGR_PUBLIC_KEY", kek.receipt_public_key().hex())
        env.setenv("WATCHTOWER_GROUP_LAG_EVERY_S", "1")
        env.setenv("WATCHTOWER_TRACES", f"file:{log_dir / 'traces'}")
        with start_stack(kafka_bootstrap, log_dir, partitions=PARTITIONS, gateway=True, replay=True,
                         delivery=True) as services:
            services.start_keymgr(free_ports(1)[0], kek_file)
            services.wait_keymgr()
            yield services


def url_of(stack: ServiceSet, name: str) -> str:
    return str(wait_for(lambda: stack.metrics_url(name), what=f"{name} to write its metrics address"))


def scrape(stack: ServiceSet, name: str) -> Samples:
    return lag.scrape(url_of(stack, name), timeout_s=30)


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples of `name` whose labels include `labels` (0 when there is none)."""
    return sum(v for have, v in samples.get(name, []) if all(have.get(k) == w for k, w in labels.items()))


def bounded_labels(samples: Samples, forbidden: set[str]) -> list[str]:
    """Label values that are unbounded by nature: a test's stream id or address, a hex id, long text."""
    bad = []
    for name, rows in samples.items():
        for labels, _v in rows:
            for key, val in labels.items():
                if key in ("le", "quantile"):
                    continue
                if val in forbidden or re.fullmatch(r"(0x)?[0-9a-f]{16,}", val) or len(val) > 64 or " " in val:
                    bad.append(f"{name}{{{key}={val!r}}}")
    return bad


def test_every_service_serves_parseable_metrics_with_build_info_and_process_metrics(stack: ServiceSet) -> None:
    for name, service in SERVICES.items():
        samples = scrape(stack, name)
        assert value(samples, "watchtower_build_info", service=service) == 1, name
        assert value(samples, "process_resident_memory_bytes") > 0, name
        assert value(samples, "process_open_fds") > 0, name
        assert bounded_labels(samples, set()) == [], name
    # A side worker is serving once its group assigned it partitions, which the stack's readiness
    # does not wait for: on a loaded machine the first rebalance can still be under way here.
    wait_for(lambda: value(scrape(stack, "replay-r1"), "watchtower_tx_worker_state", service="replay",
                           state="serving") == 1, timeout_s=60, what="the replay worker serving")
    wait_for(lambda: value(scrape(stack, "delivery-d1"), "watchtower_tx_worker_owned_partitions",
                           service="delivery") == PARTITIONS, timeout_s=60,
             what=f"the delivery worker owning its {PARTITIONS} partitions")
    assert value(scrape(stack, KEYMGR_NAME), "watchtower_keymgr_sealed_streams") == 0


def test_publishes_move_the_worker_and_projection_metrics(stack: ServiceSet) -> None:
    gateway = stack.urls["gateway-g1"]
    before_worker, before_projection = scrape(stack, "worker-w1"), scrape(stack, "projection-p1")
    owner, key = Caller(gateway), nacl.signing.SigningKey.generate()
    sid = f"ops-{uuid.uuid4().hex[:10]}"
    owner.ok("create_stream", sid, {"publisher_key_hex": bytes(key.verify_key).hex()})
    wait_for(lambda: http("GET", f"{stack.api_url}/v1/streams/{sid}/head")[0] == 200, what="stream projected")
    api = ApiClient(stack.api_url, commands_url=gateway)
    publisher = Publisher(api, Account(owner.key, name="ops", home=stack.log_dir), sid, key)
    for _ in range(PUBLISHES):
        publisher.publish("tick", b"{}")
    # Long-polls until the head reaches the last publish: every message is on the page, looked up.
    status, page = http("GET", f"{stack.api_url}/v1/streams/{sid}/messages?cursor=0&limit=100"
                        f"&min_head={PUBLISHES}&wait_ms=20000")
    assert status == 200
    assert len(page["messages"]) == PUBLISHES

    def publishes(samples: Samples) -> float:
        return value(samples, "watchtower_worker_commands_total", method="publish", outcome="ok")

    # Counted right after the commit that made each reply visible: wait for the last one.
    rose = wait_for(lambda: publishes(scrape(stack, "worker-w1")) - publishes(before_worker) >= PUBLISHES,
                    what="the publish counter to count the publishes")
    after_worker = scrape(stack, "worker-w1")
    assert rose
    assert publishes(after_worker) - publishes(before_worker) == PUBLISHES
    created = ("watchtower_worker_commands_total", {"method": "create_stream", "outcome": "ok"})
    assert value(after_worker, created[0], **created[1]) - value(before_worker, created[0], **created[1]) == 1
    assert value(after_worker, "watchtower_worker_batch_records_count") > value(
        before_worker, "watchtower_worker_batch_records_count")
    assert value(after_worker, "watchtower_worker_owned_partitions") == PARTITIONS
    assert value(after_worker, "watchtower_worker_state", state="serving") == 1

    def caught_up() -> Samples | None:
        samples = scrape(stack, "projection-p1")
        lags = samples.get("watchtower_projection_fold_lag_records", [])
        seconds = samples.get("watchtower_projection_fold_lag_seconds", [])
        ok = len(seconds) == PARTITIONS and all(v == 0 for _l, v in lags + seconds) and len(lags) >= 2 * PARTITIONS
        return samples if ok else None

    projection = wait_for(caught_up, what="the projection's fold lag to read 0 on every partition")
    # The stream's create event, its messages and their events, at least: every record of this test.
    assert value(projection, "watchtower_projection_folded_records_total") - value(
        before_projection, "watchtower_projection_folded_records_total") >= 2 * PUBLISHES + 1
    cache = ("watchtower_projection_payload_cache_hits_total", "watchtower_projection_payload_cache_misses_total")
    looked_up = sum(value(projection, n) - value(before_projection, n) for n in cache)
    assert looked_up >= PUBLISHES  # the get_since page above looked every message up
    route = "/v1/streams/{stream_id}/messages"
    assert value(projection, "watchtower_http_requests_total", route=route, status="200") >= 1
    assert value(projection, "watchtower_http_request_seconds_count", route=route) >= 1
    for name in ("worker-w1", "delivery-d1"):
        # Each Kafka worker's own consumer lag reads 0 on every partition it fetched, once it caught up.
        wait_for(lambda name=name: (rows := scrape(stack, name).get("watchtower_consumer_lag_records"))
                 and all(v == 0 for _l, v in rows), what=f"{name}'s consumer lag to read 0")
    forbidden = {sid, address_from_public_key(bytes(owner.key.verify_key))}
    for name in SERVICES:
        assert bounded_labels(scrape(stack, name), forbidden) == [], name
    assert value(scrape(stack, "gateway-g1"), "watchtower_http_requests_total", route="/v1/commands",
                 status="200") >= PUBLISHES + 1


def test_malformed_commands_show_as_group_lag_then_as_refusals_by_code(stack: ServiceSet) -> None:
    group, topics = next(iter(lag.worker_groups(stack.prefix).items()))
    commands = topic_name("commands", stack.prefix)
    wait_for(lambda: group_lag(stack.bootstrap, group, topics).total == 0, what="the worker group to settle")
    malformed = ("watchtower_worker_commands_total", {"method": "unknown", "outcome": "MALFORMED_RECORD"})
    before = value(scrape(stack, "worker-w1"), malformed[0], **malformed[1])
    worker = stack.procs["worker-w1"]
    os.kill(worker.pid, signal.SIGSTOP)
    try:
        producer = Producer(kafka_config(stack.bootstrap))
        key = b"ops-malformed"
        for i in range(MALFORMED):
            producer.produce(commands, key=key, value=b"\x00 not a command %d" % i,
                             partition=partition_for_key(key, PARTITIONS))
        assert producer.flush(30) == 0
        seen = group_lag(stack.bootstrap, group, topics)
        assert seen.total == MALFORMED
        assert seen.exact
        for (topic, partition), (committed, end) in seen.partitions.items():
            # The lag is what the log's end holds past the group's committed offset, nothing else.
            assert seen.lag_of(topic, partition) <= end - (committed or 0)
        assert sum(seen.lag_of(commands, p) for p in range(PARTITIONS)) == MALFORMED
        assert lag.over({"groups": [seen.as_json()]}, MALFORMED - 1, None) != []
        assert lag.over({"groups": [seen.as_json()]}, MALFORMED, None) == []
    finally:
        os.kill(worker.pid, signal.SIGCONT)
    wait_for(lambda: value(scrape(stack, "worker-w1"), malformed[0], **malformed[1]) - before >= MALFORMED,
             what="the worker to refuse the malformed records")
    assert value(scrape(stack, "worker-w1"), malformed[0], **malformed[1]) - before == MALFORMED
    wait_for(lambda: group_lag(stack.bootstrap, group, topics).total == 0, what="the worker group to catch up")


def exported_group_lag(samples: Samples, group: str) -> float | None:
    """The lag the stream worker exports for `group` (summed over topics), None before a reading."""
    rows = [v for labels, v in samples.get("watchtower_consumer_group_lag_records", []) if labels.get("group") == group]
    return sum(rows) if rows else None


def test_a_stopped_projections_fold_lag_rises_on_the_stream_worker_then_falls_to_0(stack: ServiceSet) -> None:
    """A projection records its fold's positions in the fold group (topics.groups): stopped while
    publishes continue, its lag grows on the stream worker's page, and falls to 0 once it runs again."""
    group = projection_fold_group(stack.prefix)
    owner, key = Caller(stack.urls["gateway-g1"]), nacl.signing.SigningKey.generate()
    sid = f"ops-{uuid.uuid4().hex[:10]}"
    owner.ok("create_stream", sid, {"publisher_key_hex": bytes(key.verify_key).hex()})
    wait_for(lambda: http("GET", f"{stack.api_url}/v1/streams/{sid}/head")[0] == 200, what="stream projected")
    wait_for(lambda: exported_group_lag(scrape(stack, "worker-w1"), group) == 0, what="the fold group to read 0 lag")
    projection = stack.procs["projection-p1"]
    os.kill(projection.pid, signal.SIGSTOP)
    try:
        for seq in (1, 2, 3):  # through the gateway: the stopped projection answers nothing
            msg = sign_message(stream_id=sid, sequence=seq, timestamp_unix_ms=int(time.time() * 1000), kind="tick",
                               payload=b"{}", signing_key=key)
            owner.ok("publish", sid, msg.to_json_dict())
        behind = wait_for(lambda: (n := exported_group_lag(scrape(stack, "worker-w1"), group)) and n > 0 and n,
                          what="the stopped projection's fold to lag")
        assert behind >= 3  # a StreamMessage event and a message record each, at least
    finally:
        os.kill(projection.pid, signal.SIGCONT)
    wait_for(lambda: exported_group_lag(scrape(stack, "worker-w1"), group) == 0, what="the fold to catch up to 0")


def test_a_stopped_delivery_workers_group_lag_rises_on_the_stream_worker_then_falls_to_0(stack: ServiceSet) -> None:
    group = worker_group("delivery", stack.prefix)

    def group_lag(samples: Samples) -> float | None:
        return exported_group_lag(samples, group)

    wait_for(lambda: group_lag(scrape(stack, "worker-w1")) == 0, what="the delivery group to read 0 lag")
    delivery = stack.procs["delivery-d1"]
    os.kill(delivery.pid, signal.SIGSTOP)
    try:
        owner, key = Caller(stack.urls["gateway-g1"]), nacl.signing.SigningKey.generate()
        sid = f"ops-{uuid.uuid4().hex[:10]}"
        owner.ok("create_stream", sid, {"publisher_key_hex": bytes(key.verify_key).hex()})
        wait_for(lambda: http("GET", f"{stack.api_url}/v1/streams/{sid}/head")[0] == 200, what="stream projected")
        api = ApiClient(stack.api_url, commands_url=stack.urls["gateway-g1"])
        # A message: the delivery worker commits its offsets with the transaction of a block that
        # planned a message, so it is what lets the group's lag fall back to 0 after the restart.
        Publisher(api, Account(owner.key, name="ops", home=stack.log_dir), sid, key).publish("tick", b"{}")
        # The stopped worker's own /metrics does not answer; the stream worker's reading of its group does.
        behind = wait_for(lambda: (n := group_lag(scrape(stack, "worker-w1"))) and n > 0 and n,
                          what="the stopped delivery worker's group to lag")
        assert behind >= 1
        events = [v for labels, v in scrape(stack, "worker-w1")["watchtower_consumer_group_lag_records"]
                  if labels["group"] == group and labels["topic"] == "events"]
        assert len(events) == 1
        assert events[0] >= 1
    finally:
        os.kill(delivery.pid, signal.SIGCONT)
    wait_for(lambda: group_lag(scrape(stack, "worker-w1")) == 0, what="the delivery group to catch up to 0")


def _spans(directory: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(directory.glob("*.jsonl")):
        out.extend(json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return out


def test_one_publish_is_one_trace_with_spans_from_four_processes(stack: ServiceSet) -> None:
    gateway = stack.urls["gateway-g1"]
    owner, key = Caller(gateway), nacl.signing.SigningKey.generate()
    sid = f"ops-{uuid.uuid4().hex[:10]}"
    owner.ok("create_stream", sid, {"publisher_key_hex": bytes(key.verify_key).hex()})
    wait_for(lambda: http("GET", f"{stack.api_url}/v1/streams/{sid}/head")[0] == 200, what="stream projected")
    publisher = Publisher(ApiClient(stack.api_url, commands_url=gateway),
                          Account(owner.key, name="ops", home=stack.log_dir), sid, key)
    head, key_id = publisher._sync()
    cmd = publisher.publish_command(head + 1, key_id, "tick", b"{}", None, "application/json")
    # The caller's own trace: the gateway continues it, and every hop after it.
    trace_id, parent = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    request = urllib.request.Request(  # noqa: S310 (the local gateway)
        f"{gateway}/v1/commands", method="POST",
        data=json.dumps({"command": cmd.to_dict(), "timeout_s": 20}).encode(),
        headers={"Content-Type": "application/json", "traceparent": f"00-{trace_id}-{parent}-01"})
    with urllib.request.urlopen(request, timeout=60) as resp:  # noqa: S310
        assert json.loads(resp.read())["result"]["sequence"] == head + 1

    def services_in_trace() -> dict[str, set[str]] | None:
        found: dict[str, set[str]] = {}
        for span in _spans(stack.log_dir / "traces"):
            if span["context"]["trace_id"] == f"0x{trace_id}":
                attrs = span["resource"]["attributes"]
                found.setdefault(attrs["service.name"], set()).add(span["name"])
        return found if {"gateway", "worker", "projection", "delivery"} <= set(found) else None

    found = wait_for(services_in_trace, timeout_s=30, what="spans of the publish from four processes")
    assert "gateway command" in found["gateway"]
    assert "worker decide" in found["worker"]
    assert "projection fold" in found["projection"]  # the message and its event, folded
    assert "delivery schedule" in found["delivery"]
    in_trace = [s for s in _spans(stack.log_dir / "traces") if s["context"]["trace_id"] == f"0x{trace_id}"]
    pids = {(s["resource"]["attributes"]["service.name"], s["resource"]["attributes"]["process.pid"])
            for s in in_trace}
    assert len(pids) >= 4
    gateway_spans = [s for s in in_trace if s["name"] == "gateway command"]
    assert [s["parent_id"] for s in gateway_spans] == [f"0x{parent}"]
    ids = {s["context"]["span_id"] for s in in_trace}
    for span in in_trace:  # one tree: every hop's parent is the caller's span or a span of this trace
        assert span["parent_id"] in ids | {f"0x{parent}"}, span["name"]
    # The chain: the command record carries the gateway's span, what the worker wrote carries its own.
    worker_spans = [s for s in in_trace if s["name"] == "worker decide"]
    assert [s["parent_id"] for s in worker_spans] == [gateway_spans[0]["context"]["span_id"]]
    for span in in_trace:
        if span["name"] in ("projection fold", "delivery schedule"):
            assert span["parent_id"] == worker_spans[0]["context"]["span_id"], span["name"]


SDK_APP = """
import sys
import nacl.signing
from opentelemetry import trace
from watchtower import tracing
from watchtower.client.account import Account
from watchtower.client.http import ApiClient
from watchtower.client.sdk import Publisher
api, gateway, sid, owner_seed, key_seed, home, spans = sys.argv[1:]
# An application that runs OpenTelemetry: its provider, its own span around the SDK's publish.
assert tracing.configure("sdk-app", env={"WATCHTOWER_TRACES": "file:" + spans})
owner, key = (nacl.signing.SigningKey(bytes.fromhex(s)) for s in (owner_seed, key_seed))
publisher = Publisher(ApiClient(api, commands_url=gateway), Account(owner, name="ops", home=home), sid, key)
publisher.sync()
with trace.get_tracer("app").start_as_current_span("app publish") as span:
    publisher.publish("tick", b"{}")
    print(format(span.get_span_context().trace_id, "032x"), format(span.get_span_context().span_id, "016x"))
tracing.shutdown()
"""


def test_the_sdk_sends_its_applications_trace_and_five_processes_continue_it(stack: ServiceSet) -> None:
    gateway = stack.urls["gateway-g1"]
    owner, key = Caller(gateway), nacl.signing.SigningKey.generate()
    sid = f"ops-{uuid.uuid4().hex[:10]}"
    owner.ok("create_stream", sid, {"publisher_key_hex": bytes(key.verify_key).hex()})
    wait_for(lambda: http("GET", f"{stack.api_url}/v1/streams/{sid}/head")[0] == 200, what="stream projected")
    app = subprocess.run([sys.executable, "-c", SDK_APP, stack.api_url, gateway, sid, bytes(owner.key).hex(),
                          bytes(key).hex(), str(stack.log_dir), str(stack.log_dir / "traces")],
                         capture_output=True, text=True, check=False, timeout=60,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert app.returncode == 0, app.stderr
    trace_id, app_span = app.stdout.split()
    wanted = {"sdk-app", "gateway", "worker", "projection", "delivery"}

    def in_trace() -> list[dict[str, Any]] | None:
        spans = [s for s in _spans(stack.log_dir / "traces") if s["context"]["trace_id"] == f"0x{trace_id}"]
        return spans if wanted <= {s["resource"]["attributes"]["service.name"] for s in spans} else None

    spans = wait_for(in_trace, timeout_s=30, what="spans of the SDK's publish from five processes")
    assert len({s["resource"]["attributes"]["process.pid"] for s in spans}) >= 5
    gateway_spans = [s for s in spans if s["name"] == "gateway command"]
    assert [s["parent_id"] for s in gateway_spans] == [f"0x{app_span}"]  # the SDK's request carried it


def test_a_refused_key_manager_request_is_counted_under_its_code(stack: ServiceSet) -> None:
    assert stack.keymgr_url is not None
    caller = nacl.signing.SigningKey.generate()
    account = address_from_public_key(bytes(caller.verify_key))
    before = scrape(stack, KEYMGR_NAME)
    cmd = sign_command(caller, "fetch_epoch_keys", f"ops-none-{uuid.uuid4().hex[:8]}", _now_us(),
                       {"account": account, "from_key_epoch": 1, "to_key_epoch": 1})
    status, body = http("POST", f"{stack.keymgr_url}/v1/keymgr/epoch-keys", {"command": cmd.to_dict()})
    assert status != 200, body
    code = body["error"]["code"]
    after = scrape(stack, KEYMGR_NAME)
    name = "watchtower_keymgr_operations_total"
    assert value(after, name, operation="epoch_keys", outcome=code) - value(
        before, name, operation="epoch_keys", outcome=code) == 1
    assert value(after, "watchtower_http_requests_total", route="/v1/keymgr/epoch-keys", status=str(status)) >= 1


def _now_us() -> int:
    return time.time_ns() // 1_000


PROMETHEUS_PUBLISHES = 100


@pytest.fixture(scope="module")
def prometheus(stack: ServiceSet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Debian's Prometheus scraping every process of the stack (file discovery) with the repo's alert rules."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("Prometheus is not installed (Debian: apt-get install prometheus)")
    home = tmp_path_factory.mktemp("prometheus")
    for name in SERVICES:
        url_of(stack, name)
    (home / "targets.json").write_text(json.dumps(target_groups(stack.log_dir.glob("*.metrics.json"))))
    shutil.copy(REPO / "compose" / "prometheus" / "alerts.yml", home / "alerts.yml")
    (home / "prometheus.yml").write_text(json.dumps({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": ["alerts.yml"],
        "scrape_configs": [{"job_name": "watchtower", "file_sd_configs": [{"files": ["targets.json"]}]}]}))
    port = free_ports(1)[0]
    with (home / "prometheus.log").open("wb") as log:
        proc = subprocess.Popen([binary, f"--config.file={home / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={home / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def prom(api: str, path: str, **query: str) -> Any:
    try:
        status, body = http("GET", f"{api}{path}?{urllib.parse.urlencode(query)}")
    except OSError:  # not listening yet
        return None
    except ValueError:  # answering, but not yet with JSON (503 "Service Unavailable" while it starts)
        return None
    assert status == 200, body
    return body["data"]


def prom_value(api: str, expr: str) -> float | None:
    data = prom(api, "/api/v1/query", query=expr)
    result = (data or {}).get("result") or []
    return float(result[0]["value"][1]) if result else None


def test_a_real_prometheus_scrapes_every_service_and_sees_100_publishes(stack: ServiceSet, prometheus: str) -> None:
    def all_up() -> bool:
        data = prom(prometheus, "/api/v1/targets")
        active = (data or {}).get("activeTargets", [])
        return len(active) == len(SERVICES) and all(t["health"] == "up" for t in active)

    wait_for(all_up, what="Prometheus to scrape every service")
    jobs = {t["labels"]["job"] for t in prom(prometheus, "/api/v1/targets")["activeTargets"]}
    assert jobs == {f"watchtower-{service}" for service in SERVICES.values()}
    rules = [r for g in prom(prometheus, "/api/v1/rules")["groups"] for r in g["rules"]]
    assert len(rules) == len(yaml.safe_load((REPO / "compose" / "prometheus" / "alerts.yml").read_text())
                             ["groups"][0]["rules"])
    published = 'sum(watchtower_worker_commands_total{method="publish",outcome="ok"})'
    wait_for(lambda: prom_value(prometheus, published) is not None, what="a first scrape of the worker")
    before_value = prom_value(prometheus, published)
    assert before_value is not None
    gateway = stack.urls["gateway-g1"]
    owner, key = Caller(gateway), nacl.signing.SigningKey.generate()
    sid = f"prom-{uuid.uuid4().hex[:10]}"
    owner.ok("create_stream", sid, {"publisher_key_hex": bytes(key.verify_key).hex()})
    wait_for(lambda: http("GET", f"{stack.api_url}/v1/streams/{sid}/head")[0] == 200, what="stream projected")
    publisher = Publisher(ApiClient(stack.api_url, commands_url=gateway),
                          Account(owner.key, name="prom", home=stack.log_dir), sid, key)
    for _ in range(PROMETHEUS_PUBLISHES):
        publisher.publish("tick", b"{}")
    wait_for(lambda: (prom_value(prometheus, published) or 0) - before_value >= PROMETHEUS_PUBLISHES,
             what="Prometheus to see the publishes")
    assert prom_value(prometheus, published) == before_value + PROMETHEUS_PUBLISHES
    # Every rule evaluates (a rule naming a missing function or a bad expression reports an error).
    rules = [r for g in prom(prometheus, "/api/v1/rules")["groups"] for r in g["rules"]]
    assert all(r["health"] != "err" for r in rules), [r for r in rules if r["health"] == "err"]
    wait_for(lambda: prom_value(prometheus, "max(watchtower_projection_fold_lag_seconds)") == 0,
             what="the projection's lag, as Prometheus reads it, to return to 0")
