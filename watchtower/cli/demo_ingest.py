"""The demo's ingestion step: a price feed fed by a local HTTP source that changes every second,
three runners of which one lies (outvoted under QUORUM), and one source outage (IngestFailed, no
sequence consumed)."""

from __future__ import annotations

import json
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import click
import nacl.signing

from watchtower.cli.demo_wait import demo_step
from watchtower.cli.genesis import ENV_RUNNER_REGISTRAR
from watchtower.client.account import Account
from watchtower.client.http import ApiClient
from watchtower.client.ingestion import http_ingestion
from watchtower.client.sdk import create_feed, wait_until_visible
from watchtower.client.subscriber import Subscriber
from watchtower.ingest import keys
from watchtower.ingest.runner import admission_command, dismissal_command
from watchtower.local.stack import ServiceSet
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.ingestion.records import IngestResult, verify_result_batch
from watchtower.protocol.stream.message import StreamMessage
from watchtower.schemas.ingest_records import batch_results, decode_results
from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import catalogue, topic_name, topic_prefix
from watchtower.topics.reader import read_committed

STEP_TIMEOUT_S = 120.0


class _Source:
    """``GET /btc``: ``{"data": {"price": 97000 + the current second mod 100, "symbol": "BTC"}}``, or 503 when down."""

    down = False

    def answer(self) -> tuple[int, bytes]:
        if self.down:
            return 503, b'{"error": "maintenance"}'
        price = 97_000 + int(time.time()) % 100
        return 200, json.dumps({"data": {"price": price, "symbol": "BTC"}}).encode()


@contextmanager
def _serve(source: _Source) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = source.answer()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/btc"
    finally:
        server.shutdown()
        server.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(what: str, check: Callable[[], Any], timeout_s: float = STEP_TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    raise click.ClickException(f"timed out waiting for {what}")


def run_ingest_demo(bootstrap: str, prefix: str | None = None) -> None:
    """Start a stack with ingestion for `prefix` on `bootstrap`, tell the story, stop it."""
    prefix = prefix or topic_prefix()
    ensure_topics(bootstrap, catalogue(prefix))
    home = Path(tempfile.mkdtemp(prefix="wt-demo-ingest-"))
    logs = home / "logs"
    services = ServiceSet(bootstrap, prefix, logs, api_port=_free_port())
    keys.scheduler_key(home)
    delegated = keys.ingestion_publisher_key(home)
    env = {"WATCHTOWER_HOME": str(home), "WATCHTOWER_INGEST_ALLOW_NETS": "127.0.0.1/32"}
    # This deployment admits runners through its registrar only (a runner's own registration is
    # refused): the stream worker started below learns the registrar's address from its environment.
    registrar = nacl.signing.SigningKey.generate()
    os.environ[ENV_RUNNER_REGISTRAR] = address_from_public_key(bytes(registrar.verify_key))
    source = _Source()
    try:
        with _serve(source) as url:
            services.start_worker("ingest-w1")
            services.start_projection("ingest-p1")
            for name, lie in (("r1", False), ("r2", False), ("liar", True)):
                services.start_runner(name, lie=lie, extra_env=env)
            services.start_ingest(extra_env=env)
            with demo_step("ingest: start the stream worker, the API, the ingestion service and 3 runners", logs=logs):
                services.wait_ready(STEP_TIMEOUT_S)
            api = ApiClient(services.api_url)
            with demo_step("ingest: the registrar admits the 3 runners (their own registrations were refused)",
                           logs=logs):
                ours = {address_from_public_key(bytes(keys.runner_key(name, home).verify_key)): name
                        for name in ("r1", "r2", "liar")}
                # Runners an earlier run of the demo left registered on this broker (their processes
                # are gone) would be selected and never answer: the registrar retires them first.
                view = _wait("the ingestion service's view of the registry",
                             lambda: (h := _health(services)).get("runners") is not None and h)
                stale = sorted(set(view["runners"]) - set(ours))
                for runner in stale:
                    api.command(dismissal_command(registrar, runner))
                for runner, name in ours.items():
                    api.command(admission_command(registrar, runner, name))
                _wait("exactly our 3 runners registered",
                      lambda: set(_health(services).get("runners", [])) == set(ours))
            click.echo(f"  runners r1, r2 and liar admitted by the registrar {os.environ[ENV_RUNNER_REGISTRAR]} "
                       "(a runner's own registration is refused)"
                       + (f"; {len(stale)} left by earlier runs retired" if stale else ""))
            owner = Account(nacl.signing.SigningKey.generate(), home=home)
            ingestion = http_ingestion(url=url, select={"price": "$.data.price", "symbol": "$.data.symbol"},
                                       num_runners=3, proof_type="QUORUM", transform="price_batch",
                                       result_schema={"type": "object", "required": ["price", "symbol"]})
            with demo_step("ingest: a QUORUM price feed, one runner lying", logs=logs):
                sid = create_feed(api, owner, name="btc-ingested", ingestion=ingestion,
                                  publisher_key_hex=bytes(delegated.verify_key).hex())["stream_id"]
                wait_until_visible(api, sid)
                click.echo(f"  feed {sid}: {url} every block, 3 runners, QUORUM, price_batch; "
                           "the publisher key is the ingestion key, named in the owner's signed create")
                _wait("6 ingested messages", lambda: api.get_head(sid)["head_sequence"] >= 6)
                sub = Subscriber(api, sid, expected_owner=owner.address)
                lies = _liar_answers(bootstrap, prefix, sid, keys.runner_key("liar", home))
                for msg in sub.poll(6):
                    tick, price = _tick_price(msg)
                    liar_price = lies.get(tick)
                    if liar_price is not None and liar_price == price:
                        raise click.ClickException(f"tick {tick} published the liar's price {liar_price}")
                    click.echo(f"  {_line(msg)}  verified under the delegated key; the liar said {liar_price}")
            with demo_step("ingest: a source outage", logs=logs):
                before = api.get_head(sid)
                source.down = True
                _wait("an IngestFailed", lambda: api.get_head(sid)["ingest_fail_count"] > before["ingest_fail_count"])
                during = api.get_head(sid)
                source.down = False
                _wait("ingestion to resume", lambda: api.get_head(sid)["head_sequence"] > during["head_sequence"])
                after = api.get_head(sid)
                failures = _health(services).get("last_reasons", {}).get(sid, [])
                click.echo(f"  source down: ingest_fail_count {before['ingest_fail_count']} -> "
                           f"{during['ingest_fail_count']} ({', '.join(sorted(set(failures)))}); the head stayed at "
                           f"{during['head_sequence']} while it failed (no sequence consumed)")
                click.echo(f"  source back: head {after['head_sequence']}, messages still gapless")
                for msg in sub.poll(100):
                    click.echo(f"  {_line(msg)}")
    finally:
        services.stop()


def _health(services: ServiceSet) -> dict[str, Any]:
    try:
        return dict(json.loads(services.health_file("ingest").read_text()))
    except (OSError, ValueError):
        return {}


def _tick_price(msg: StreamMessage) -> tuple[int, Any]:
    return int(msg.tags["ingest_tick"]), json.loads(msg.payload_inline)["ticks"][0]["price"]


def _line(msg: StreamMessage) -> str:
    tick, price = _tick_price(msg)
    return f"sequence {msg.sequence}: tick {tick}, {msg.kind} BTC {price}"


def _liar_answers(bootstrap: str, prefix: str, stream_id: str, liar: nacl.signing.SigningKey) -> dict[int, Any]:
    """tick -> the price the lying runner signed, read back from ingest.results."""
    address = address_from_public_key(bytes(liar.verify_key))
    out: dict[int, Any] = {}
    for record in read_committed(bootstrap, [topic_name("ingest-results", prefix)]):
        decoded = decode_results(record.value())
        if isinstance(decoded, IngestResult):
            results = [decoded]
        elif decoded.signer == address:
            verify_result_batch(decoded, frozenset([address]))  # what the liar signed, not what anyone wrote
            results = batch_results(decoded)
        else:
            continue
        for result in results:
            if result.stream_id == stream_id and result.runner == address and result.result_json:
                out[result.tick] = json.loads(result.result_json)["price"]
    return out
